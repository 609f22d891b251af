// troupe-preempt-bench: how well AdaptiveLLM's predictors (policies/
// adaptive_preemption) forecast the two ways to preempt a request on the cpu
// backend. Recompute: prefill times measured at several prompt lengths, a
// quadratic fitted on every other length and checked on the rest. Swap: the
// copy bandwidth measured once with a large copy, then the predicted time of
// moving each length's KV out and back against the measured copies. Prints
// the mean absolute percentage error of each.
// Usage: troupe-preempt-bench MODEL_DIR [--repeats N]
#include "gpu/cpu_model.hpp"
#include "gpu/llama_weights.hpp"
#include "policies/adaptive_preemption.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

} // namespace

int main(int argc, char** argv) {
  using namespace troupe;
  if (argc < 2) {
    std::fprintf(stderr, "usage: troupe-preempt-bench MODEL_DIR [--repeats N]\n");
    return 2;
  }
  int repeats = 5;
  for (int i = 2; i + 1 < argc; i += 2)
    if (std::strcmp(argv[i], "--repeats") == 0)
      repeats = std::max(1, std::atoi(argv[i + 1]));
  auto loaded = gpu::load_llama(argv[1]);
  if (auto* err = std::get_if<std::string>(&loaded)) {
    std::fprintf(stderr, "troupe-preempt-bench: %s\n", err->c_str());
    return 1;
  }
  const auto config = std::get<gpu::llama_weights>(loaded).config;
  const std::uint32_t page_tokens = 16;
  // Fitted on the even entries, checked on the odd ones.
  const std::vector<std::uint32_t> lengths{16,  32,  48,  64,  96,  128, 160, 200, 256, 320,
                                           384, 448, 512, 576, 640, 704, 768, 896, 1024};
  const std::uint32_t max_len = std::min<std::uint32_t>(lengths.back(), config.max_position_embeddings);
  const std::uint64_t pages = (max_len + page_tokens - 1) / page_tokens;
  gpu::cpu_model model{std::move(std::get<gpu::llama_weights>(loaded)), pages, page_tokens};
  std::vector<std::uint32_t> page_ids(pages);
  for (std::uint32_t i = 0; i < pages; ++i)
    page_ids[i] = i;

  // Recompute: prefill times.
  std::vector<std::pair<std::uint32_t, double>> measured;
  for (auto n : lengths) {
    if (n > max_len)
      break;
    std::vector<std::int32_t> prompt(n);
    for (std::uint32_t i = 0; i < n; ++i)
      prompt[i] = static_cast<std::int32_t>(3 + (i * 31) % (config.vocab_size - 3));
    std::vector<double> runs;
    for (int r = 0; r < repeats + 1; ++r) {
      gpu::cpu_sequence s{prompt, 0, page_ids, nullptr, false};
      const auto t0 = clock_type::now();
      const auto logits = model.forward(std::span{&s, 1});
      const double t = seconds_since(t0);
      if (logits.empty()) {
        std::fprintf(stderr, "troupe-preempt-bench: forward failed at %u tokens\n", n);
        return 1;
      }
      if (r > 0) // the first run warms caches
        runs.push_back(t);
    }
    measured.emplace_back(n, median(runs));
  }
  std::vector<std::pair<std::uint32_t, double>> train, test;
  for (std::size_t i = 0; i < measured.size(); ++i)
    (i % 2 == 0 ? train : test).push_back(measured[i]);
  const auto fit = policies::recompute_model::fit(train);
  std::vector<double> predicted, actual;
  std::printf("recompute (prefill) on %s: fitted on %zu lengths, checked on %zu\n", argv[1], train.size(), test.size());
  std::printf("| tokens | measured ms | predicted ms |\n|---|---|---|\n");
  for (const auto& [n, t] : test) {
    predicted.push_back(fit.seconds(n));
    actual.push_back(t);
    std::printf("| %u | %.3f | %.3f |\n", n, t * 1e3, fit.seconds(n) * 1e3);
  }
  const double recompute_mape = policies::mape(predicted, actual);

  // Swap: a KV copy out of the pool and back in, as the cpu backend would,
  // with cold caches (a swapped request's KV is not in the caches, and its
  // host copy never is).
  std::vector<char> flush(std::size_t{96} << 20, 2);
  auto cold = [&flush] {
    for (std::size_t i = 0; i < flush.size(); i += 64)
      flush[i] = static_cast<char>(flush[i] + 1);
  };
  const std::uint64_t kv_per_token = 2ull * config.num_layers * config.num_kv_heads * config.head_dim * sizeof(float);
  std::vector<char> big(std::size_t{256} << 20, 1), host(big.size());
  double bw = 0;
  for (int r = 0; r < 3; ++r) {
    cold();
    const auto t0 = clock_type::now();
    std::memcpy(host.data(), big.data(), big.size());
    bw = std::max(bw, static_cast<double>(big.size()) / seconds_since(t0));
  }
  const policies::swap_model swap{bw, bw};
  predicted.clear();
  actual.clear();
  std::printf("\nswap (KV out and back, %.1f GB/s measured copy bandwidth)\n", bw / 1e9);
  std::printf("| tokens | KV MiB | measured ms | predicted ms |\n|---|---|---|---|\n");
  for (std::uint32_t n : {2048u, 4096u, 8192u, 16384u, 32768u, 65536u}) {
    const std::uint64_t bytes = kv_per_token * n;
    if (bytes > big.size())
      break;
    std::vector<double> runs;
    for (int r = 0; r < repeats + 1; ++r) {
      cold();
      const auto t0 = clock_type::now();
      std::memcpy(host.data(), big.data(), bytes);  // out
      std::memcpy(big.data(), host.data(), bytes);  // back in
      if (r > 0)
        runs.push_back(seconds_since(t0));
    }
    predicted.push_back(swap.seconds(bytes));
    actual.push_back(median(runs));
    std::printf("| %u | %.1f | %.3f | %.3f |\n", n, static_cast<double>(bytes) / (1 << 20), actual.back() * 1e3,
                predicted.back() * 1e3);
  }
  const double swap_mape = policies::mape(predicted, actual);
  std::printf("\nMAPE: recompute %.1f%%, swap %.1f%% (flush checksum %d)\n", recompute_mape, swap_mape,
              static_cast<int>(flush[64]));
  return 0;
}
