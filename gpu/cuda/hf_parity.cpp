// troupe-hf-parity: Troupe's loaders and cuda_model against Hugging Face
// transformers + PEFT (tools/gpu/hf_parity.py writes the files with their
// own save_pretrained and the reference tokens and logits). Every case runs
// in one batch, each with its adapter or none: a prefill step, then decode
// steps fed the reference's tokens so the two stay in step. Checks each
// step's logits within the type's tolerance, that each sampled token is the
// largest of its logits, and that it is the reference's wherever the
// reference's top two are further apart than twice the row's largest
// difference (at least one such step in all). Writes a JSON summary; exits
// 1 on a mismatch, 2 on bad input.
#include "gpu/cuda/check.hpp"
#include "gpu/cuda/llama_upload.hpp"
#include "gpu/cuda/lora_pack.hpp"
#include "gpu/lora.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace troupe::gpu::cuda {
namespace {

struct reference_case {
  std::string adapter;
  std::vector<std::int32_t> prompt;
  std::vector<std::int32_t> tokens;
  std::vector<std::vector<float>> logits; // per step, [vocab]
};

[[noreturn]] void bad_input(const std::string& what) {
  std::cerr << "troupe-hf-parity: " << what << "\n";
  std::exit(2);
}

int run(const std::string& cases_path, dtype t, const std::string& out_path) {
  if (!device_visible())
    bad_input("no CUDA device visible");
  std::ifstream in{cases_path};
  if (!in)
    bad_input("cannot read " + cases_path);
  const auto spec = nlohmann::json::parse(in, nullptr, false);
  if (spec.is_discarded() || !spec.contains("model") || !spec.contains("cases"))
    bad_input(cases_path + ": not a cases file (model, adapters, cases)");

  const auto model_dir = spec["model"].get<std::string>();
  auto config = load_llama_config(model_dir + "/config.json");
  if (auto* err = std::get_if<std::string>(&config))
    bad_input(*err);
  const auto c = std::get<llama_config>(config);

  const auto mc = model_config_for(c, t);
  const std::uint32_t page_tokens = 16;
  const std::uint64_t pool_pages = 512;
  const kv_layout kv{.num_layers = c.num_layers, .num_kv_heads = c.num_kv_heads,
                     .head_dim = c.head_dim, .page_tokens = page_tokens};
  cudaStream_t s = nullptr;
  TROUPE_CUDA_CHECK(cudaStreamCreate(&s));
  cuda_model m{mc, kv, pool_pages, s};
  // The server's route: tensor by tensor from the files into the model's type.
  if (auto err = upload_checkpoint(m, model_dir, c))
    bad_input(*err);
  std::uint32_t next_page = 0;
  auto take = [&](std::uint64_t n) {
    if (next_page + n > pool_pages)
      bad_input("the cases need more than " + std::to_string(pool_pages) + " pages");
    std::vector<std::uint32_t> v(n);
    for (auto& p : v)
      p = next_page++;
    return v;
  };

  // Adapters: PEFT's files through Troupe's loader, packed into pool pages.
  std::map<std::string, std::uint32_t> adapter_ids;
  std::map<std::uint32_t, resident_adapter> resident;
  const auto adapter_dirs = spec.value("adapters", nlohmann::json::object());
  for (const auto& [name, dir] : adapter_dirs.items()) {
    auto a = load_peft_adapter(dir.get<std::string>(), c);
    if (auto* err = std::get_if<std::string>(&a))
      bad_input(*err);
    const auto& adapter = std::get<lora_adapter>(a);
    auto packed = pack_lora_adapter(adapter, m.lora(), t);
    if (auto* err = std::get_if<std::string>(&packed))
      bad_input("adapter " + name + ": " + *err);
    const auto& bits = std::get<std::vector<std::uint16_t>>(packed);
    const std::uint32_t id = static_cast<std::uint32_t>(adapter_ids.size() + 1);
    resident_adapter r{adapter.rank, adapter.scale, take(m.lora().pages(adapter.rank))};
    m.write_pages(r.pages, bits.data(), s);
    TROUPE_CUDA_CHECK(cudaStreamSynchronize(s)); // `bits` is freed next
    adapter_ids[name] = id;
    resident.emplace(id, std::move(r));
  }

  std::vector<reference_case> cases;
  for (const auto& j : spec["cases"]) {
    reference_case rc;
    rc.adapter = j.value("adapter", "");
    rc.prompt = j["prompt"].get<std::vector<std::int32_t>>();
    rc.tokens = j["tokens"].get<std::vector<std::int32_t>>();
    rc.logits = j["logits"].get<std::vector<std::vector<float>>>();
    if (rc.prompt.empty() || rc.tokens.size() != rc.logits.size())
      bad_input("a case needs a prompt and one logits row per token");
    if (!rc.adapter.empty() && !adapter_ids.contains(rc.adapter))
      bad_input("case names unknown adapter " + rc.adapter);
    cases.push_back(std::move(rc));
  }
  std::vector<std::vector<std::uint32_t>> pages;
  for (const auto& rc : cases)
    pages.push_back(take((rc.prompt.size() + rc.tokens.size() + page_tokens - 1) / page_tokens));

  plan_inputs pin;
  pin.kv = kv;
  pin.vocab_size = c.vocab_size;
  pin.pool_pages = pool_pages;
  pin.adapter = [&](std::uint32_t id) -> const resident_adapter* {
    auto it = resident.find(id);
    return it == resident.end() ? nullptr : &it->second;
  };
  pin.split = {.q_tile = 16, .kv_chunk = 32};
  pin.sliding_window = c.sliding_window;

  const float tol = t == dtype::f16 ? 0.03f : 0.12f;
  nlohmann::json report = nlohmann::json::array();
  std::vector<double> worst(cases.size(), 0);
  std::vector<int> greedy_checked(cases.size(), 0), greedy_equal(cases.size(), 0);
  std::vector<int> not_greedy(cases.size(), 0);
  bool ok = true;
  const std::size_t steps = std::min_element(cases.begin(), cases.end(), [](auto& a, auto& b) {
                              return a.tokens.size() < b.tokens.size();
                            })->tokens.size();
  for (std::size_t step = 0; step < steps; ++step) {
    std::vector<step_entry> batch;
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const auto& rc = cases[i];
      step_entry e;
      e.request_id = i + 1;
      e.temperature = 0;
      e.pages = pages[i];
      if (!rc.adapter.empty()) {
        e.adapter_id = adapter_ids.at(rc.adapter);
        e.adapter_rank = resident.at(e.adapter_id).rank;
      }
      if (step == 0) {
        e.tokens = rc.prompt;
      } else {
        e.context_tokens = static_cast<std::uint32_t>(rc.prompt.size() + step - 1);
        e.tokens = {rc.tokens[step - 1]};
      }
      e.new_tokens = static_cast<std::uint32_t>(e.tokens.size());
      batch.push_back(std::move(e));
    }
    const auto plan = plan_batch(batch, pin);
    if (!plan.rejected.empty())
      bad_input("entry rejected: " + plan.rejected.front().second);
    std::vector<std::int32_t> tokens(plan.seqs());
    m.forward(plan, tokens);
    std::vector<float> logits(std::size_t{plan.seqs()} * c.vocab_size);
    TROUPE_CUDA_CHECK(cudaMemcpy(logits.data(), m.device_logits(), logits.size() * 4,
                                 cudaMemcpyDeviceToHost));
    for (std::uint32_t k = 0; k < plan.seqs(); ++k) {
      const std::uint32_t i = plan.order[k];
      const auto& want = cases[i].logits[step];
      const float* got = logits.data() + std::size_t{k} * c.vocab_size;
      float scale = 1.0f;
      for (float w : want)
        scale = std::max(scale, std::abs(w));
      double err = 0; // this row's largest difference
      for (std::uint32_t v = 0; v < c.vocab_size; ++v) {
        const double d = std::isnan(got[v]) ? INFINITY : std::abs(got[v] - want[v]);
        err = std::max(err, d);
        worst[i] = std::max(worst[i], d / scale);
      }
      // The sampled token is the largest of the logits it was drawn from;
      // it is the reference's wherever the reference's top two are further
      // apart than twice the row's difference (both orders agree there).
      if (tokens[k] < 0 || static_cast<std::uint32_t>(tokens[k]) >= c.vocab_size ||
          got[tokens[k]] != *std::max_element(got, got + c.vocab_size))
        ++not_greedy[i];
      std::vector<float> sorted = want;
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>{});
      if (sorted[0] - sorted[1] > 2 * err) {
        ++greedy_checked[i];
        if (tokens[k] == cases[i].tokens[step])
          ++greedy_equal[i];
      }
    }
  }
  int checked = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const bool case_ok = worst[i] <= tol && greedy_equal[i] == greedy_checked[i] && not_greedy[i] == 0;
    ok = ok && case_ok;
    checked += greedy_checked[i];
    report.push_back({{"adapter", cases[i].adapter},
                      {"prompt_tokens", cases[i].prompt.size()},
                      {"steps", steps},
                      {"max_logit_error_over_scale", worst[i]},
                      {"greedy_checked", greedy_checked[i]},
                      {"greedy_equal", greedy_equal[i]},
                      {"not_greedy", not_greedy[i]},
                      {"ok", case_ok}});
  }
  // Greedy tokens compared nowhere would be no check of them at all.
  ok = ok && checked > 0;
  nlohmann::json out{{"dtype", std::string{to_string(t)}}, {"tolerance", tol}, {"ok", ok},
                     {"greedy_checked", checked}, {"cases", report}};
  std::cout << out.dump(2) << "\n";
  if (!out_path.empty())
    std::ofstream(out_path) << out.dump(2) << "\n";
  cudaStreamDestroy(s);
  return ok ? 0 : 1;
}

} // namespace
} // namespace troupe::gpu::cuda

int main(int argc, char** argv) {
  std::string cases, out;
  auto t = troupe::gpu::cuda::dtype::f16;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--cases")
      cases = v;
    else if (a == "--out")
      out = v;
    else if (a == "--dtype" && (v == "f16" || v == "bf16"))
      t = v == "f16" ? troupe::gpu::cuda::dtype::f16 : troupe::gpu::cuda::dtype::bf16;
    else
      troupe::gpu::cuda::bad_input("unknown argument " + a + " " + v +
                                   " (usage: --cases FILE [--dtype f16|bf16] [--out FILE])");
  }
  if (cases.empty() || argc % 2 == 0)
    troupe::gpu::cuda::bad_input("usage: troupe-hf-parity --cases FILE [--dtype f16|bf16] [--out FILE]");
  try {
    return troupe::gpu::cuda::run(cases, t, out);
  } catch (const std::exception& e) {
    std::cerr << "troupe-hf-parity: " << e.what() << "\n";
    return 2;
  }
}
