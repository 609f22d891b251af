#include "gpu/cuda/backend.hpp"

#include "gpu/cuda/check.hpp"
#include "gpu/cuda/llama_upload.hpp"
#include "gpu/cuda/lora_pack.hpp"
#include "gpu/lora.hpp"
#include "gpu/sampling.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>

namespace troupe::gpu::cuda {

/// A packed adapter in pinned host memory (the host tier's copy).
struct cuda_backend::host_adapter {
  std::uint32_t rank = 0;
  float scale = 0;
  pinned_buffer<std::uint16_t> packed; ///< lora().pages(rank) pages, in row order
};

/// A cache streaming in layer by layer: one event per layer, recorded on
/// the host-to-device stream after that layer's copies; `recorded` of them
/// so far. A step waits (on the host) only until layer l's event is
/// recorded, then makes the compute stream wait for it (on the GPU).
struct cuda_backend::layer_stream {
  std::vector<cudaEvent_t> events;
  std::uint32_t recorded = 0;
  bool failed = false;
  std::string error; ///< stream_in's, once failed

  layer_stream() = default;
  layer_stream(const layer_stream&) = delete;
  layer_stream& operator=(const layer_stream&) = delete;
  ~layer_stream() {
    for (auto e : events)
      cudaEventDestroy(e); // released once its work completes
  }
};

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Pinned host-to-device bandwidth, best of three copies of 64 MiB.
double measure_h2d(cudaStream_t stream) {
  constexpr std::size_t bytes = std::size_t{64} << 20;
  pinned_buffer<std::uint8_t> host(bytes);
  device_buffer<std::uint8_t> dev(bytes);
  std::memset(host.data(), 0, bytes);
  cudaEvent_t a = nullptr;
  cudaEvent_t b = nullptr;
  TROUPE_CUDA_CHECK(cudaEventCreate(&a));
  TROUPE_CUDA_CHECK(cudaEventCreate(&b));
  float best_ms = 0;
  for (int i = 0; i < 3; ++i) {
    TROUPE_CUDA_CHECK(cudaEventRecord(a, stream));
    TROUPE_CUDA_CHECK(cudaMemcpyAsync(dev.data(), host.data(), bytes, cudaMemcpyHostToDevice, stream));
    TROUPE_CUDA_CHECK(cudaEventRecord(b, stream));
    TROUPE_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    TROUPE_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (i == 0 || ms < best_ms)
      best_ms = ms;
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return static_cast<double>(bytes) / (std::max(best_ms, 1e-3f) * 1e-3);
}

/// Records an event on `stream` and waits for it: everything enqueued there
/// so far, this caller's work included, has run.
void wait_for(cudaStream_t stream) {
  cudaEvent_t e = nullptr;
  TROUPE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  const auto recorded = cudaEventRecord(e, stream);
  const auto waited = recorded == cudaSuccess ? cudaEventSynchronize(e) : recorded;
  cudaEventDestroy(e);
  TROUPE_CUDA_CHECK(waited);
}

/// Errors after which the context runs nothing more: a fault in a kernel or
/// a copy ("sticky": every later call returns it until the process ends).
bool poisons_context(cudaError_t e) noexcept {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}

std::string range_error(const char* pool, std::uint32_t page, std::uint64_t pages) {
  return std::string{pool} + " page " + std::to_string(page) + " outside the pool of " + std::to_string(pages);
}

} // namespace

namespace {

/// What keeps device `device` from being used ("" when nothing does).
std::string device_problem(int device) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
    return std::string{no_device_message};
  if (device < 0 || device >= devices)
    return "CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(devices) + " visible)";
  return {};
}

} // namespace

std::variant<std::unique_ptr<cuda_backend>, std::string>
cuda_backend::open(const std::string& model_dir, std::unique_ptr<tokenizer> tok,
                   const cuda_backend_options& opts) {
  if (auto problem = device_problem(opts.device); !problem.empty())
    return problem; // before reading gigabytes of weights
  auto config = load_llama_config((std::filesystem::path{model_dir} / "config.json").string());
  if (auto* err = std::get_if<std::string>(&config))
    return *err;
  const auto& c = std::get<llama_config>(config);
  // Tensor by tensor from the mapped files: never the whole model in host memory.
  return build(c, std::move(tok), opts, [&](cuda_model& m) { return upload_checkpoint(m, model_dir, c); });
}

std::variant<std::unique_ptr<cuda_backend>, std::string>
cuda_backend::create(const llama_weights& w, std::unique_ptr<tokenizer> tok, const cuda_backend_options& opts) {
  return build(w.config, std::move(tok), opts, [&](cuda_model& m) -> std::optional<std::string> {
    upload_weights(m, w);
    return std::nullopt;
  });
}

std::variant<std::unique_ptr<cuda_backend>, std::string>
cuda_backend::build(const llama_config& config, std::unique_ptr<tokenizer> tok, const cuda_backend_options& opts,
                    const std::function<std::optional<std::string>(cuda_model&)>& upload) {
  if (auto problem = device_problem(opts.device); !problem.empty())
    return problem;
  if (!tok)
    return std::string{"no tokenizer"};
  if (tok->vocab_size() > static_cast<std::int32_t>(config.vocab_size))
    return "the tokenizer has " + std::to_string(tok->vocab_size()) + " ids, the model's vocabulary "
           + std::to_string(config.vocab_size);
  if (opts.page_tokens == 0)
    return std::string{"page_tokens must be at least 1"};
  std::unique_ptr<cuda_backend> b{new cuda_backend};
  b->device_ = opts.device;
  b->llama_ = config;
  b->tokenizer_ = std::move(tok);
  b->host_ = host_tier{opts.host_adapter_bytes};
  try {
    b->bind();
    cudaDeviceProp prop{};
    TROUPE_CUDA_CHECK(cudaGetDeviceProperties(&prop, opts.device));
    b->device_name_ = std::string{prop.name} + " (CUDA device " + std::to_string(opts.device) + ")";
    b->sms_ = static_cast<std::uint32_t>(std::max(prop.multiProcessorCount, 1));
    TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&b->compute_, cudaStreamNonBlocking));
    TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&b->h2d_, cudaStreamNonBlocking));
    TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&b->d2h_, cudaStreamNonBlocking));
    TROUPE_CUDA_CHECK(cudaEventCreate(&b->step_begin_));
    TROUPE_CUDA_CHECK(cudaEventCreate(&b->step_end_));
    auto cfg = model_config_for(b->llama_, opts.type);
    cfg.step_graphs = opts.step_graphs;
    const kv_layout kv{cfg.layers, cfg.kv_heads, cfg.head_dim, opts.page_tokens};
    if (auto why = unsupported_model(cfg.hidden, cfg.heads, kv); !why.empty())
      return "the cuda backend cannot serve this model: " + why;
    const std::uint64_t page_bytes = kv.page_elems() * dtype_bytes(cfg.type);
    std::uint64_t pages = opts.pages;
    if (pages == 0) {
      std::size_t free = 0;
      std::size_t total = 0;
      TROUPE_CUDA_CHECK(cudaMemGetInfo(&free, &total));
      // cuBLAS's workspaces and the attention's split buffers: a margin.
      constexpr std::uint64_t margin = std::uint64_t{512} << 20;
      const std::uint64_t scratch = cuda_model::scratch_bytes(cfg, opts.max_rows, opts.max_seqs, opts.max_rank);
      pages = pool_pages_for(free, cfg.weight_bytes(), scratch + margin, opts.memory_fraction, page_bytes);
      if (pages == 0)
        return "the device's " + std::to_string(free >> 20) + " MiB free leave no room for a page pool after "
               + std::to_string(cfg.weight_bytes() >> 20) + " MiB of weights, " + std::to_string(scratch >> 20)
               + " MiB of step scratch (steps of up to " + std::to_string(opts.max_rows) + " token rows and "
               + std::to_string(opts.max_seqs) + " sequences, adapters up to rank " + std::to_string(opts.max_rank)
               + ") and a " + std::to_string(margin >> 20) + " MiB margin for cuBLAS and attention splits";
    }
    b->model_ = std::make_unique<cuda_model>(std::move(cfg), kv, pages, b->compute_);
    if (auto why = upload(*b->model_))
      return *why;
    b->model_->reserve_scratch(opts.max_rows, opts.max_seqs, opts.max_rank);
    b->tokens_ = pinned_buffer<std::int32_t>(std::max<std::uint32_t>(opts.max_seqs, 1));
    {
      // Prompt log-probabilities read logits a chunk of rows at a time.
      constexpr std::size_t chunk_floats = std::size_t{8} << 20 >> 2;
      const std::size_t vocab = b->model_->config().vocab;
      const std::size_t rows = opts.prompt_logits_rows > 0
                                 ? opts.prompt_logits_rows
                                 : std::max<std::size_t>(chunk_floats / std::max<std::size_t>(vocab, 1), 1);
      b->prompt_logits_ = device_buffer<float>(rows * vocab);
      b->prompt_logits_host_ = pinned_buffer<float>(rows * vocab);
    }
    b->host_pages_ = opts.host_pages;
    if (opts.host_pages > 0)
      b->host_pool_ = pinned_buffer<std::uint8_t>(opts.host_pages * page_bytes);
    b->h2d_bytes_per_s_ = measure_h2d(b->h2d_);
    TROUPE_CUDA_CHECK(cudaDeviceSynchronize());
  } catch (const std::exception& e) {
    return std::string{e.what()};
  }
  return b;
}

cuda_backend::~cuda_backend() {
  cudaSetDevice(device_);
  if (compute_ != nullptr)
    cudaStreamSynchronize(compute_);
  if (h2d_ != nullptr)
    cudaStreamSynchronize(h2d_);
  if (d2h_ != nullptr)
    cudaStreamSynchronize(d2h_);
  streams_.clear();
  model_.reset(); // its buffers and cuBLAS handle before the streams go
  for (auto e : {step_begin_, step_end_})
    if (e != nullptr)
      cudaEventDestroy(e);
  for (auto s : {compute_, h2d_, d2h_})
    if (s != nullptr)
      cudaStreamDestroy(s);
}

void cuda_backend::bind() const {
  // The current device is per thread: every entry point sets it.
  TROUPE_CUDA_CHECK(cudaSetDevice(device_));
}

std::shared_ptr<cuda_backend::layer_stream> cuda_backend::stream_state(std::uint64_t id) const {
  std::lock_guard guard{streams_mtx_};
  auto& s = streams_[id];
  if (!s)
    s = std::make_shared<layer_stream>();
  return s;
}

void cuda_backend::settle(const layer_stream& s) const {
  cudaEvent_t last = nullptr;
  {
    std::unique_lock guard{streams_mtx_};
    streams_cv_.wait(guard, [&] { return s.failed || s.recorded >= model_->kv().num_layers; });
    if (s.failed)
      return; // stream_in drained what it had enqueued before saying so
    last = s.events.back();
  }
  cudaSetDevice(device_);
  cudaEventSynchronize(last); // an error here is stream_in's to report
}

step_result cuda_backend::run_step(std::span<const step_entry> batch) {
  step_result out;
  out.tokens.assign(batch.size(), -1);
  plan_inputs in;
  in.kv = model_->kv();
  in.vocab_size = model_->config().vocab;
  in.pool_pages = model_->pool_pages();
  in.split = split_for(batch, in.kv.num_kv_heads, sms_);
  in.sliding_window = model_->config().sliding_window;
  batch_plan plan;
  {
    // The plan copies each adapter's pages: a drop after this is harmless
    // to the step (the runtime drops only adapters no step uses).
    std::lock_guard guard{adapters_mtx_};
    in.adapter = [this](std::uint32_t id) -> const resident_adapter* {
      auto i = resident_.find(id);
      return i == resident_.end() ? nullptr : &i->second;
    };
    plan = plan_batch(batch, in);
  }
  // Every stream the batch names, held until the step is done and then
  // forgotten: `streams` are read by the step's sequences layer by layer;
  // `unread` (a rejected entry's, whose request ends here) are waited for
  // whole. The runtime frees an entry's pages when the step answers, so no
  // copy into them may still be in flight then. stream_state, not a bare
  // lookup: a stream_in that has not started yet must find this state.
  std::vector<std::pair<std::uint64_t, std::shared_ptr<layer_stream>>> streams;
  std::vector<std::pair<std::uint64_t, std::shared_ptr<layer_stream>>> unread;
  for (const auto& [i, why] : plan.rejected) {
    out.failures.push_back({batch[i].request_id, why});
    if (const auto id = batch[i].stream; id != 0)
      unread.emplace_back(id, stream_state(id));
  }
  for (auto i : plan.order)
    if (const auto id = batch[i].stream; id != 0)
      streams.emplace_back(id, stream_state(id));
  std::vector<std::int32_t> tokens(plan.seqs(), -1);
  // Sequences (plan order) whose logits row comes back for log-probabilities.
  std::vector<std::uint32_t> rows;
  for (std::uint32_t k = 0; k < plan.seqs(); ++k)
    if (batch[plan.order[k]].logprobs >= 0)
      rows.push_back(k);
  const std::size_t vocab = model_->config().vocab;
  std::string step_error; // the CUDA error that failed the whole step
  if (plan.seqs() > 0) {
    try {
      bind();
      if (tokens_.size() < plan.seqs())
        tokens_ = pinned_buffer<std::int32_t>(plan.seqs());
      auto before_layer = [&](std::uint32_t layer) {
        for (auto& [id, s] : streams) {
          {
            std::unique_lock guard{streams_mtx_};
            streams_cv_.wait(guard, [&] { return s->failed || s->recorded > layer; });
            if (s->failed)
              continue; // its sequence's token is dropped below
          }
          TROUPE_CUDA_CHECK(cudaStreamWaitEvent(compute_, s->events[layer], 0));
        }
      };
      TROUPE_CUDA_CHECK(cudaEventRecord(step_begin_, compute_));
      if (streams.empty())
        model_->enqueue_forward(plan);
      else
        model_->enqueue_forward(plan, before_layer);
      TROUPE_CUDA_CHECK(cudaEventRecord(step_end_, compute_));
      TROUPE_CUDA_CHECK(cudaMemcpyAsync(tokens_.data(), model_->device_tokens(),
                                        plan.seqs() * sizeof(std::int32_t), cudaMemcpyDeviceToHost, compute_));
      if (logits_.size() < rows.size() * vocab)
        logits_ = pinned_buffer<float>(rows.size() * vocab);
      for (std::size_t j = 0; j < rows.size(); ++j)
        TROUPE_CUDA_CHECK(cudaMemcpyAsync(logits_.data() + j * vocab, model_->device_logits() + rows[j] * vocab,
                                          vocab * sizeof(float), cudaMemcpyDeviceToHost, compute_));
      TROUPE_CUDA_CHECK(cudaStreamSynchronize(compute_));
      float ms = 0;
      TROUPE_CUDA_CHECK(cudaEventElapsedTime(&ms, step_begin_, step_end_));
      out.device_seconds = static_cast<double>(ms) * 1e-3;
      std::copy_n(tokens_.data(), plan.seqs(), tokens.begin());
    } catch (const std::exception& e) {
      step_error = e.what();
      tokens.assign(plan.seqs(), -1);
      // The launches before the error still run, and the streams past the
      // layer it stopped at still copy: both end before the pages are freed.
      drain(compute_);
      unread.insert(unread.end(), streams.begin(), streams.end());
    }
  }
  for (const auto& [id, s] : unread)
    settle(*s);
  lost_streams lost; // streams whose cache never fully came
  {
    std::lock_guard guard{streams_mtx_};
    for (auto& [id, s] : streams) {
      if (s->failed)
        lost.emplace_back(id, s->error);
      streams_.erase(id); // used: the step has all of it (or knows it failed)
    }
    for (const auto& [id, s] : unread)
      streams_.erase(id);
  }
  for (std::uint32_t k = 0; k < plan.seqs(); ++k) {
    const auto& e = batch[plan.order[k]];
    if (!step_error.empty()) {
      out.failures.push_back({e.request_id, "the step failed on the GPU: " + step_error});
      continue;
    }
    if (fail_if_stream_lost(out, e, lost))
      continue;
    out.tokens[plan.order[k]] = tokens[k];
  }
  if (!rows.empty()) {
    out.logprobs.resize(batch.size());
    for (std::size_t j = 0; j < rows.size(); ++j) {
      const auto i = plan.order[rows[j]];
      if (out.tokens[i] >= 0)
        out.logprobs[i] = logprobs_of({logits_.data() + j * vocab, vocab}, out.tokens[i],
                                      static_cast<std::uint32_t>(batch[i].logprobs));
    }
  }
  if (std::any_of(batch.begin(), batch.end(), [](const step_entry& e) { return e.prompt_logprobs >= 0; }))
    out.prompt_logprobs.resize(batch.size());
  for (std::uint32_t k = 0; k < plan.seqs(); ++k) {
    const auto i = plan.order[k];
    if (batch[i].prompt_logprobs < 0 || out.tokens[i] < 0)
      continue;
    try {
      out.prompt_logprobs[i] = prompt_logprobs(plan.qo_indptr[k], batch[i]);
    } catch (const std::exception& x) {
      // Its token stands alone without what it asked for: the request ends.
      out.tokens[i] = -1;
      out.prompt_logprobs[i].clear();
      out.failures.push_back({batch[i].request_id, std::string{"its prompt's log-probabilities failed on the GPU: "} + x.what()});
      drain(compute_);
    }
  }
  return out;
}

std::vector<token_logprobs> cuda_backend::prompt_logprobs(std::uint32_t first_row, const step_entry& e) {
  const std::size_t vocab = model_->config().vocab;
  // Row k's logits give input k + 1's: the entry's new tokens.
  const auto tokens = std::span<const std::int32_t>(e.tokens).first(std::min<std::size_t>(e.new_tokens, e.tokens.size()));
  return prompt_logprobs_of(tokens, vocab, prompt_logits_.size() / vocab, static_cast<std::uint32_t>(e.prompt_logprobs),
                            [&](std::size_t first, std::size_t rows) {
                              const auto m = static_cast<std::uint32_t>(rows);
                              model_->enqueue_row_logits(first_row + static_cast<std::uint32_t>(first), m,
                                                         prompt_logits_.data());
                              TROUPE_CUDA_CHECK(cudaMemcpyAsync(prompt_logits_host_.data(), prompt_logits_.data(),
                                                                std::size_t{m} * vocab * sizeof(float),
                                                                cudaMemcpyDeviceToHost, compute_));
                              TROUPE_CUDA_CHECK(cudaStreamSynchronize(compute_));
                              return std::span<const float>(prompt_logits_host_.data(), std::size_t{m} * vocab);
                            });
}

double cuda_backend::transfer_seconds(std::uint64_t bytes) const {
  return static_cast<double>(bytes) / h2d_bytes_per_s_;
}

adapter_load cuda_backend::load_adapter(std::uint32_t id, const std::string& path, std::uint64_t,
                                        std::span<const std::uint32_t> device_pages) {
  adapter_load out;
  std::shared_ptr<const host_adapter> host;
  {
    std::lock_guard guard{adapters_mtx_};
    if (host_.touch(id)) {
      host = host_copies_.at(id);
      out.host_hit = true;
    }
  }
  try {
    bind();
    if (!host) {
      // Read, parse and pack outside the lock: steps keep running.
      const auto t0 = std::chrono::steady_clock::now();
      auto parsed = load_peft_adapter(path, llama_);
      if (auto* err = std::get_if<std::string>(&parsed)) {
        out.error = std::move(*err);
        return out;
      }
      const auto& a = std::get<lora_adapter>(parsed);
      auto packed = pack_lora_adapter(a, lora(), config().type);
      if (auto* err = std::get_if<std::string>(&packed)) {
        out.error = path + ": " + *err;
        return out;
      }
      const auto& bits = std::get<std::vector<std::uint16_t>>(packed);
      auto h = std::make_shared<host_adapter>();
      h->rank = a.rank;
      h->scale = a.scale;
      h->packed = pinned_buffer<std::uint16_t>(bits.size());
      std::copy(bits.begin(), bits.end(), h->packed.data());
      out.disk_seconds = seconds_since(t0);
      host = h;
      std::lock_guard guard{adapters_mtx_};
      for (auto dropped : host_.insert(id, h->packed.bytes()))
        host_copies_.erase(dropped);
      host_copies_[id] = host;
    }
    const auto need = lora().pages(host->rank);
    if (device_pages.size() < need) {
      out.error = "adapter " + std::to_string(id) + " (rank " + std::to_string(host->rank) + ") needs "
                  + std::to_string(need) + " pool pages of " + std::to_string(page_bytes()) + " bytes, was given "
                  + std::to_string(device_pages.size());
      return out;
    }
    resident_adapter r{host->rank, host->scale, {device_pages.begin(), device_pages.begin() + need}};
    const auto t0 = std::chrono::steady_clock::now();
    model_->write_pages(r.pages, host->packed.data(), h2d_);
    wait_for(h2d_);
    out.copy_seconds = seconds_since(t0);
    std::lock_guard guard{adapters_mtx_};
    resident_[id] = std::move(r);
  } catch (const std::exception& e) {
    out.error = e.what();
    drain(h2d_); // the pages go back to the pool, and `host` may be freed, on this answer
  }
  return out;
}

void cuda_backend::drop_adapter(std::uint32_t id) {
  std::lock_guard guard{adapters_mtx_};
  resident_.erase(id); // its pages go back to the pool with the runtime's release
}

void cuda_backend::forget_adapter(std::uint32_t id) {
  std::lock_guard guard{adapters_mtx_};
  resident_.erase(id);
  host_.erase(id);
  host_copies_.erase(id);
}

std::string cuda_backend::copy_pages(bool to_host, std::span<const std::uint32_t> device_pages,
                                     std::span<const std::uint32_t> host_pages, cudaStream_t stream) {
  if (device_pages.size() != host_pages.size())
    return "copy of " + std::to_string(device_pages.size()) + " device pages into " + std::to_string(host_pages.size())
           + " host pages";
  const auto bytes = page_bytes();
  auto* pool = static_cast<std::uint8_t*>(model_->pool());
  for (std::size_t i = 0; i < device_pages.size(); ++i) {
    if (device_pages[i] >= pool_pages())
      return range_error("device", device_pages[i], pool_pages());
    if (host_pages[i] >= host_pages_)
      return range_error("host", host_pages[i], host_pages_);
  }
  bind();
  for (std::size_t i = 0; i < device_pages.size(); ++i) {
    auto* dev = pool + device_pages[i] * bytes;
    auto* host = host_pool_.data() + host_pages[i] * bytes;
    TROUPE_CUDA_CHECK(to_host ? cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, stream)
                              : cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream));
  }
  wait_for(stream);
  return {};
}

swap_result cuda_backend::swap_pages(swap_direction dir, std::span<const std::uint32_t> device_pages,
                                     std::span<const std::uint32_t> host_pages, std::uint64_t) {
  swap_result r;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    const bool out = dir == swap_direction::out;
    r.error = copy_pages(out, device_pages, host_pages, out ? d2h_ : h2d_);
  } catch (const std::exception& e) {
    r.error = e.what();
    drain(dir == swap_direction::out ? d2h_ : h2d_); // both pools' pages are freed on this answer
  }
  r.seconds = seconds_since(t0);
  return r;
}

page_blob cuda_backend::read_pages(bool host_pool, std::span<const std::uint32_t> pages, std::uint64_t) {
  page_blob out;
  const auto t0 = std::chrono::steady_clock::now();
  const auto bytes = page_bytes();
  const auto limit = host_pool ? host_pages_ : pool_pages();
  for (auto p : pages)
    if (p >= limit) {
      out.error = "read of " + range_error(host_pool ? "host" : "device", p, limit);
      return out;
    }
  out.data.resize(pages.size() * bytes);
  try {
    if (host_pool) {
      for (std::size_t i = 0; i < pages.size(); ++i)
        std::memcpy(out.data.data() + i * bytes, host_pool_.data() + pages[i] * bytes, bytes);
    } else {
      bind();
      const auto* pool = static_cast<const std::uint8_t*>(model_->pool());
      for (std::size_t i = 0; i < pages.size(); ++i)
        TROUPE_CUDA_CHECK(cudaMemcpyAsync(out.data.data() + i * bytes, pool + pages[i] * bytes, bytes,
                                          cudaMemcpyDeviceToHost, d2h_));
      wait_for(d2h_);
    }
  } catch (const std::exception& e) {
    out.error = e.what();
    out.data.clear();
  }
  out.seconds = seconds_since(t0);
  return out;
}

swap_result cuda_backend::write_host_pages(std::span<const std::uint32_t> host_pages, const std::string& data,
                                           std::uint64_t) {
  swap_result r;
  const auto bytes = page_bytes();
  if (data.size() != host_pages.size() * bytes) {
    r.error = "cache of " + std::to_string(data.size()) + " bytes does not fill " + std::to_string(host_pages.size())
              + " pages of " + std::to_string(bytes) + " bytes (another model or page size?)";
    return r;
  }
  for (auto p : host_pages)
    if (p >= host_pages_) {
      r.error = "write of " + range_error("host", p, host_pages_);
      return r;
    }
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < host_pages.size(); ++i)
    std::memcpy(host_pool_.data() + host_pages[i] * bytes, data.data() + i * bytes, bytes);
  r.seconds = seconds_since(t0);
  return r;
}

swap_result cuda_backend::stream_in(std::uint64_t stream, std::span<const std::uint32_t> device_pages,
                                    std::span<const std::uint32_t> host_pages, std::uint64_t) {
  swap_result r;
  const auto t0 = std::chrono::steady_clock::now();
  auto s = stream_state(stream);
  auto fail = [&](std::string why) {
    {
      std::lock_guard guard{streams_mtx_};
      s->failed = true;
      s->error = why;
    }
    streams_cv_.notify_all();
    r.error = std::move(why);
    r.seconds = seconds_since(t0);
    return r;
  };
  if (device_pages.size() != host_pages.size())
    return fail("stream of " + std::to_string(host_pages.size()) + " host pages into "
                + std::to_string(device_pages.size()) + " device pages");
  for (std::size_t i = 0; i < device_pages.size(); ++i) {
    if (device_pages[i] >= pool_pages())
      return fail("stream into " + range_error("device", device_pages[i], pool_pages()));
    if (host_pages[i] >= host_pages_)
      return fail("stream from " + range_error("host", host_pages[i], host_pages_));
  }
  try {
    bind();
    const auto& kv = model_->kv();
    const std::uint64_t page = page_bytes();
    const std::uint64_t layer_bytes = kv.layer_elems() * dtype_bytes(config().type);
    auto* pool = static_cast<std::uint8_t*>(model_->pool());
    std::vector<cudaEvent_t> events(kv.num_layers, nullptr);
    for (auto& e : events)
      TROUPE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    {
      std::lock_guard guard{streams_mtx_};
      s->events = events; // destroyed with the stream's state
    }
    for (std::uint32_t l = 0; l < kv.num_layers; ++l) {
      for (std::size_t i = 0; i < device_pages.size(); ++i)
        TROUPE_CUDA_CHECK(cudaMemcpyAsync(pool + device_pages[i] * page + l * layer_bytes,
                                          host_pool_.data() + host_pages[i] * page + l * layer_bytes, layer_bytes,
                                          cudaMemcpyHostToDevice, h2d_));
      TROUPE_CUDA_CHECK(cudaEventRecord(events[l], h2d_));
      {
        std::lock_guard guard{streams_mtx_};
        s->recorded = l + 1;
      }
      streams_cv_.notify_all();
    }
    TROUPE_CUDA_CHECK(cudaEventSynchronize(events.back()));
  } catch (const std::exception& e) {
    // Before `failed` is seen: a step then skips this stream's waits, and
    // the runtime frees its pages, so nothing of it may still be copying.
    drain(h2d_);
    return fail(e.what());
  }
  r.seconds = seconds_since(t0);
  return r;
}

void cuda_backend::end_stream(std::uint64_t stream) const {
  std::lock_guard guard{streams_mtx_};
  streams_.erase(stream);
}

std::size_t cuda_backend::device_adapters() const {
  std::lock_guard guard{adapters_mtx_};
  return resident_.size();
}

std::size_t cuda_backend::host_adapters() const {
  std::lock_guard guard{adapters_mtx_};
  return host_copies_.size();
}

void cuda_backend::drain(cudaStream_t stream) const noexcept {
  cudaSetDevice(device_);
  const cudaError_t e = cudaStreamSynchronize(stream);
  if (!poisons_context(e))
    return;
  std::lock_guard guard{broken_mtx_};
  if (broken_.empty())
    broken_ = std::string{"CUDA context on device "} + std::to_string(device_) + ": " + cudaGetErrorName(e) + " (" +
              cudaGetErrorString(e) + ")";
}

std::string cuda_backend::notice() {
  const std::string& why = model_->step_graphs_error();
  if (why.empty() || why == graphs_noticed_)
    return {};
  graphs_noticed_ = why;
  return "step graphs are off, steps launch directly: " + why;
}

std::vector<std::pair<std::string, double>> cuda_backend::counters() const {
  return {{"cuda_steps_replayed", static_cast<double>(model_->steps_replayed())}};
}

std::vector<std::pair<std::string, double>> cuda_backend::gauges() const {
  return {{"cuda_step_graphs_kept", static_cast<double>(model_->step_graphs_kept())},
          {"cuda_step_graphs_off", model_->step_graphs_error().empty() ? 0.0 : 1.0},
          {"cuda_device_adapters", static_cast<double>(device_adapters())},
          {"cuda_host_adapters", static_cast<double>(host_adapters())},
          {"cuda_h2d_gb_per_s", h2d_bytes_per_s_ / 1e9}};
}

std::string cuda_backend::broken() const {
  std::lock_guard guard{broken_mtx_};
  return broken_;
}

std::size_t cuda_backend::streams() const {
  std::lock_guard guard{streams_mtx_};
  return streams_.size();
}

} // namespace troupe::gpu::cuda
