#include "gpu/cpu_backend.hpp"

#include "gpu/sampling.hpp"
#include "gpu/model_tokenizer.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace troupe::gpu {

std::variant<std::unique_ptr<cpu_backend>, std::string>
cpu_backend::open(const std::string& model_dir, std::uint64_t pages, std::uint32_t page_tokens,
                  std::uint64_t host_adapter_bytes) {
  auto weights = load_llama(model_dir);
  if (auto* err = std::get_if<std::string>(&weights))
    return *err;
  auto& w = std::get<llama_weights>(weights);
  auto tok = load_model_tokenizer(model_dir, w.config);
  if (auto* err = std::get_if<std::string>(&tok))
    return *err;
  std::unique_ptr<cpu_backend> b{new cpu_backend};
  b->tokenizer_ = std::move(std::get<std::unique_ptr<tokenizer>>(tok));
  b->host_ = host_tier{host_adapter_bytes};
  b->model_ = std::make_unique<cpu_model>(std::move(w), pages, page_tokens);
  return b;
}

step_result cpu_backend::run_step(std::span<const step_entry> batch) {
  const auto started = std::chrono::steady_clock::now();
  step_result out;
  out.tokens.assign(batch.size(), -1);
  std::vector<cpu_sequence> seqs;
  std::vector<std::size_t> index; // seqs[i] runs batch[index[i]]
  std::vector<std::shared_ptr<const lora_adapter>> held; // alive for the step
  // The final hidden rows of the entries that asked for their prompt's
  // log-probabilities, one per entry.
  std::vector<std::vector<float>> final_hidden(batch.size());
  seqs.reserve(batch.size());
  std::unique_lock lock{adapters_mtx_};
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto& e = batch[i];
    cpu_sequence s;
    s.tokens = e.tokens;
    s.start_pos = e.context_tokens;
    s.pages = e.pages;
    s.hidden = e.hidden;
    if (e.prompt_logprobs >= 0)
      s.final_hidden = &final_hidden[i];
    if (e.adapter_id != 0) {
      auto a = device_.find(e.adapter_id);
      if (a == device_.end()) {
        out.failures.push_back({e.request_id, "adapter " + std::to_string(e.adapter_id) + " is not on the device"});
        continue; // stays -1: the request ends with an error
      }
      held.push_back(a->second);
      s.adapter = a->second.get();
    }
    // One entry the model would refuse ends only its own request.
    if (auto why = model_->refusal(s); !why.empty()) {
      out.failures.push_back({e.request_id, std::move(why)});
      continue;
    }
    seqs.push_back(s);
    index.push_back(i);
  }
  lock.unlock();
  const auto vocab = static_cast<std::size_t>(model_->config().vocab_size);
  const auto layers = model_->config().num_layers;
  // Entries whose cache is still streaming in: each layer waits for its own.
  // A rejected entry's stream, and every stream of a step that runs no
  // layer, is waited for whole: its request's pages are freed on the answer.
  std::vector<std::uint64_t> streams;
  for (const auto& e : batch)
    if (e.stream != 0)
      streams.push_back(e.stream);
  auto wait_for = [&](std::unique_lock<std::mutex>& guard, std::uint64_t id, std::size_t layers_in) {
    streams_cv_.wait(guard, [&] {
      const auto& s = streams_[id];
      return s.failed || s.layers_in >= layers_in;
    });
  };
  auto before_layer = [&](std::size_t layer) {
    std::unique_lock guard{streams_mtx_};
    for (auto id : streams)
      wait_for(guard, id, layer + 1);
  };
  std::vector<float> logits;
  if (!seqs.empty())
    logits = streams.empty() ? model_->forward(seqs) : model_->forward(seqs, before_layer);
  lost_streams lost; // streams whose cache never fully came
  if (!streams.empty()) {
    std::unique_lock guard{streams_mtx_};
    for (auto id : streams) {
      wait_for(guard, id, layers);
      if (const auto& s = streams_[id]; s.failed)
        lost.emplace_back(id, s.error);
      streams_.erase(id); // used: the step has all of it (or knows it failed)
    }
  }
  const bool ran = logits.size() == seqs.size() * vocab;
  const bool any_logprobs = std::any_of(batch.begin(), batch.end(), [](const step_entry& e) { return e.logprobs >= 0; });
  if (any_logprobs)
    out.logprobs.resize(batch.size());
  if (std::any_of(batch.begin(), batch.end(), [](const step_entry& e) { return e.prompt_logprobs >= 0; }))
    out.prompt_logprobs.resize(batch.size());
  std::vector<float> adjusted; // a row with its entry's logit_adjust
  for (std::size_t k = 0; k < seqs.size(); ++k) {
    const auto& e = batch[index[k]];
    if (!ran) {
      out.failures.push_back({e.request_id, "the cpu model refused the batch"});
      continue;
    }
    if (fail_if_stream_lost(out, e, lost))
      continue;
    const std::span<const float> row{logits.data() + k * vocab, vocab};
    // Sampled from the adjusted logits; log-probabilities are the model's.
    std::span<const float> sampled = row;
    if (!e.logit_adjust.empty()) {
      apply_logit_adjust(row, e.logit_adjust, e.repetition_penalty, adjusted);
      sampled = adjusted;
    }
    const auto token = sample_token(sampled, {e.temperature, e.top_p, e.top_k, e.min_p}, e.seed, e.output_index);
    out.tokens[index[k]] = token;
    if (e.logprobs >= 0)
      out.logprobs[index[k]] = logprobs_of(row, token, static_cast<std::uint32_t>(e.logprobs));
    if (e.prompt_logprobs >= 0)
      out.prompt_logprobs[index[k]] =
        model_->prompt_logprobs(final_hidden[index[k]], e.tokens, static_cast<std::uint32_t>(e.prompt_logprobs));
  }
  out.device_seconds =
    std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return out;
}

gpu::swap_result cpu_backend::swap_pages(swap_direction dir,
                                         std::span<const std::uint32_t> device_pages,
                                         std::span<const std::uint32_t> host_pages,
                                         std::uint64_t) {
  swap_result r;
  if (device_pages.size() != host_pages.size()) {
    r.error = "swap of " + std::to_string(device_pages.size()) + " device pages into "
              + std::to_string(host_pages.size()) + " host pages";
    return r;
  }
  const auto started = std::chrono::steady_clock::now();
  const auto n = model_->page_floats();
  std::lock_guard guard{host_kv_mtx_};
  for (std::size_t i = 0; i < device_pages.size(); ++i) {
    bool ok = false;
    if (dir == swap_direction::out) {
      auto& buf = host_kv_[host_pages[i]];
      buf.resize(n);
      ok = model_->read_page(device_pages[i], buf);
    } else if (auto h = host_kv_.find(host_pages[i]); h != host_kv_.end()) {
      ok = model_->write_page(device_pages[i], h->second);
      host_kv_.erase(h);
    }
    if (!ok) {
      r.error = "swap " + std::string{dir == swap_direction::out ? "out" : "in"} + " of device page "
                + std::to_string(device_pages[i]) + " / host page " + std::to_string(host_pages[i])
                + ": no such page";
      return r;
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return r;
}

gpu::page_blob cpu_backend::read_pages(bool host_pool, std::span<const std::uint32_t> pages,
                                       std::uint64_t) {
  page_blob out;
  const auto started = std::chrono::steady_clock::now();
  const auto n = model_->page_floats();
  std::vector<float> buf(n);
  out.data.reserve(pages.size() * n * sizeof(float));
  std::lock_guard guard{host_kv_mtx_};
  for (auto p : pages) {
    bool ok = false;
    if (!host_pool) {
      ok = model_->read_page(p, buf);
    } else if (auto h = host_kv_.find(p); h != host_kv_.end() && h->second.size() == n) {
      std::copy(h->second.begin(), h->second.end(), buf.begin());
      ok = true;
    }
    if (!ok) {
      out.error = "read of " + std::string{host_pool ? "host" : "device"} + " page " + std::to_string(p)
                  + ": no such page";
      out.data.clear();
      return out;
    }
    out.data.append(reinterpret_cast<const char*>(buf.data()), n * sizeof(float));
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return out;
}

gpu::swap_result cpu_backend::write_host_pages(std::span<const std::uint32_t> host_pages,
                                               const std::string& data, std::uint64_t) {
  swap_result r;
  const auto n = model_->page_floats();
  if (data.size() != host_pages.size() * n * sizeof(float)) {
    r.error = "cache of " + std::to_string(data.size()) + " bytes does not fill " + std::to_string(host_pages.size())
              + " pages of " + std::to_string(n * sizeof(float)) + " bytes (another model?)";
    return r;
  }
  const auto started = std::chrono::steady_clock::now();
  std::lock_guard guard{host_kv_mtx_};
  for (std::size_t i = 0; i < host_pages.size(); ++i) {
    auto& buf = host_kv_[host_pages[i]];
    buf.resize(n);
    std::memcpy(buf.data(), data.data() + i * n * sizeof(float), n * sizeof(float));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return r;
}

gpu::swap_result cpu_backend::stream_in(std::uint64_t stream, std::span<const std::uint32_t> device_pages,
                                        std::span<const std::uint32_t> host_pages, std::uint64_t) {
  swap_result r;
  const auto started = std::chrono::steady_clock::now();
  auto publish = [&](std::size_t layers, bool failed) {
    {
      std::lock_guard guard{streams_mtx_};
      auto& s = streams_[stream];
      s.layers_in = layers;
      s.failed = failed;
      s.error = r.error;
    }
    streams_cv_.notify_all();
  };
  const auto layers = model_->config().num_layers;
  const auto per_layer = model_->layer_floats();
  std::vector<const std::vector<float>*> sources(host_pages.size(), nullptr);
  {
    std::lock_guard guard{host_kv_mtx_};
    for (std::size_t i = 0; i < host_pages.size(); ++i)
      if (auto h = host_kv_.find(host_pages[i]); h != host_kv_.end() && h->second.size() == per_layer * layers)
        sources[i] = &h->second; // stays put: only swaps of these pages touch it
  }
  if (device_pages.size() != host_pages.size()
      || std::find(sources.begin(), sources.end(), nullptr) != sources.end()) {
    r.error = "stream of " + std::to_string(host_pages.size()) + " host pages: a page is missing";
    publish(0, true);
    return r;
  }
  for (std::size_t l = 0; l < layers; ++l) {
    for (std::size_t i = 0; i < device_pages.size(); ++i) {
      const std::span<const float> slice{sources[i]->data() + l * per_layer, per_layer};
      if (!model_->write_page_layer(device_pages[i], l, slice)) {
        r.error = "stream into device page " + std::to_string(device_pages[i]) + ": no such page";
        publish(l, true);
        return r;
      }
    }
    publish(l + 1, false);
  }
  {
    std::lock_guard guard{host_kv_mtx_};
    for (auto h : host_pages)
      host_kv_.erase(h);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return r;
}

void cpu_backend::end_stream(std::uint64_t stream) const {
  std::lock_guard guard{streams_mtx_};
  streams_.erase(stream);
}

std::size_t cpu_backend::streams() const {
  std::lock_guard guard{streams_mtx_};
  return streams_.size();
}

std::size_t cpu_backend::host_kv_pages() const {
  std::lock_guard guard{host_kv_mtx_};
  return host_kv_.size();
}

double cpu_backend::transfer_seconds(std::uint64_t bytes) const {
  // A host-to-host copy at a conservative 10 GB/s.
  return static_cast<double>(bytes) / 10e9;
}

namespace {

std::uint64_t host_bytes_of(const lora_adapter& a) {
  std::uint64_t n = 0;
  for (const auto& layer : a.layers)
    for (const auto& m : layer)
      n += (m.a.size() + m.b.size()) * sizeof(float);
  return n;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

} // namespace

adapter_load cpu_backend::load_adapter(std::uint32_t id, const std::string& path, std::uint64_t,
                                       std::span<const std::uint32_t>) {
  adapter_load out;
  std::shared_ptr<const lora_adapter> host;
  {
    std::lock_guard guard{adapters_mtx_};
    if (host_.touch(id)) {
      host = host_copies_.at(id);
      out.host_hit = true;
    }
  }
  if (!host) {
    // Parse outside the lock: steps keep running meanwhile.
    const auto t0 = std::chrono::steady_clock::now();
    auto parsed = load_peft_adapter(path, model_->config());
    out.disk_seconds = seconds_since(t0);
    if (auto* err = std::get_if<std::string>(&parsed)) {
      out.error = std::move(*err);
      return out;
    }
    host = std::make_shared<const lora_adapter>(std::move(std::get<lora_adapter>(parsed)));
    std::lock_guard guard{adapters_mtx_};
    for (auto dropped : host_.insert(id, host_bytes_of(*host)))
      host_copies_.erase(dropped);
    host_copies_[id] = host;
  }
  // The host-to-device copy: the device set holds its own weights.
  const auto t0 = std::chrono::steady_clock::now();
  auto on_device = std::make_shared<const lora_adapter>(*host);
  out.copy_seconds = seconds_since(t0);
  std::lock_guard guard{adapters_mtx_};
  device_[id] = std::move(on_device);
  return out;
}

void cpu_backend::drop_adapter(std::uint32_t id) {
  std::shared_ptr<const lora_adapter> gone;
  std::lock_guard guard{adapters_mtx_};
  if (auto i = device_.find(id); i != device_.end()) {
    gone = std::move(i->second); // freed after the lock, when no step holds it
    device_.erase(i);
  }
}

void cpu_backend::forget_adapter(std::uint32_t id) {
  std::lock_guard guard{adapters_mtx_};
  device_.erase(id);
  host_.erase(id);
  host_copies_.erase(id);
}

std::size_t cpu_backend::device_adapters() const {
  std::lock_guard guard{adapters_mtx_};
  return device_.size();
}

std::size_t cpu_backend::host_adapters() const {
  std::lock_guard guard{adapters_mtx_};
  return host_copies_.size();
}

} // namespace troupe::gpu
