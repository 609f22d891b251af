// troupe-cpu-bench: decode throughput of the cpu backend's forward pass at
// several batch sizes, beside the bound that this machine's memory bandwidth
// (measured in the same run) puts on it: every decode step must read all the
// weights once plus each sequence's KV cache (what its sliding window holds,
// for a model with one). Then a prefill of the context
// with and without its prompt's log-probabilities, and the host-side work
// per output token on a step's logits: a sampled draw and the
// log-probabilities a client may ask for, against the decode step's time
// per token.
// Usage: troupe-cpu-bench MODEL_DIR [--context N] [--steps N] [--batches 1,8,32]
#include "gpu/cpu_model.hpp"
#include "gpu/llama_weights.hpp"
#include "gpu/sampling.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// Read bandwidth in bytes/s: every hardware thread sums its share of a
/// buffer far larger than the caches (as the GEMMs read weights).
double measure_read_bandwidth() {
  std::vector<float> buf((std::size_t{512} << 20) / sizeof(float), 1.0f); // 512 MiB
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<float> sums(threads);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = clock_type::now();
    std::vector<std::thread> pool;
    const std::size_t chunk = buf.size() / threads;
    for (unsigned t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        float acc[8] = {};
        const float* p = buf.data() + t * chunk;
        for (std::size_t i = 0; i + 7 < chunk; i += 8)
          for (int j = 0; j < 8; ++j)
            acc[j] += p[i + static_cast<std::size_t>(j)];
        sums[t] = std::accumulate(acc, acc + 8, 0.0f);
      });
    for (auto& th : pool)
      th.join();
    best = std::max(best, static_cast<double>(chunk * threads * sizeof(float)) / seconds_since(t0));
  }
  std::printf("(checksum %.0f)\n", static_cast<double>(std::accumulate(sums.begin(), sums.end(), 0.0f)));
  return best;
}

} // namespace

int main(int argc, char** argv) {
  using namespace troupe::gpu;
  if (argc < 2) {
    std::fprintf(stderr, "usage: troupe-cpu-bench MODEL_DIR [--context N] [--steps N] [--batches 1,8,32]\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::uint32_t context = 128;
  int steps = 8;
  std::vector<std::uint32_t> batches{1, 8, 32};
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--context") context = static_cast<std::uint32_t>(std::atoi(argv[i + 1]));
    else if (a == "--steps") steps = std::atoi(argv[i + 1]);
    else if (a == "--batches") {
      batches.clear();
      std::stringstream ss(argv[i + 1]);
      std::string item;
      while (std::getline(ss, item, ','))
        batches.push_back(static_cast<std::uint32_t>(std::atoi(item.c_str())));
    }
  }
  auto loaded = load_llama(dir);
  if (auto* err = std::get_if<std::string>(&loaded)) {
    std::fprintf(stderr, "troupe-cpu-bench: %s\n", err->c_str());
    return 1;
  }
  auto weights = std::get<llama_weights>(std::move(loaded));
  const auto cfg = weights.config;
  const auto shape = cfg.to_shape(dir);
  const double weight_bytes = static_cast<double>(shape.parameter_count()) * 4.0; // fp32
  const double kv_token_bytes = 2.0 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 4.0;
  const std::uint32_t page_tokens = 16;
  const std::uint32_t max_batch = *std::max_element(batches.begin(), batches.end());
  const std::uint32_t per_seq = (context + steps + page_tokens) / page_tokens + 1;
  cpu_model model{std::move(weights), std::uint64_t{per_seq} * max_batch, page_tokens};
  const double bandwidth = measure_read_bandwidth();
  std::printf("model %s: %.1fM parameters (%.0f MB fp32), context %u%s, read bandwidth %.2f GB/s\n",
              dir.c_str(), static_cast<double>(shape.parameter_count()) / 1e6, weight_bytes / 1e6, context,
              cfg.sliding_window > 0 ? (", sliding window " + std::to_string(cfg.sliding_window)).c_str() : "",
              bandwidth / 1e9);
  std::printf("%6s %14s %14s %8s\n", "batch", "tokens/s", "bound tok/s", "ratio");
  std::vector<float> last_logits; // a decode step's first row, for the sampling figures
  double last_tps = 0;
  for (auto b : batches) {
    std::vector<std::vector<std::uint32_t>> pages(b);
    std::vector<std::vector<std::int32_t>> prompt(b);
    for (std::uint32_t s = 0; s < b; ++s) {
      pages[s].resize(per_seq);
      std::iota(pages[s].begin(), pages[s].end(), s * per_seq);
      prompt[s].assign(context, static_cast<std::int32_t>(5 + s % 50));
    }
    // Prefill each sequence's context once (not timed).
    for (std::uint32_t s = 0; s < b; ++s) {
      cpu_sequence seq{prompt[s], 0, pages[s], nullptr};
      model.forward({&seq, 1});
    }
    std::vector<std::int32_t> next(b, 7);
    std::vector<cpu_sequence> batch(b);
    const auto t0 = clock_type::now();
    for (int step = 0; step < steps; ++step) {
      for (std::uint32_t s = 0; s < b; ++s)
        batch[s] = {std::span<const std::int32_t>(&next[s], 1), context + static_cast<std::uint32_t>(step), pages[s], nullptr};
      auto logits = model.forward(batch);
      if (logits.empty()) {
        std::fprintf(stderr, "troupe-cpu-bench: forward failed\n");
        return 1;
      }
    }
    const double secs = seconds_since(t0);
    const double tps = static_cast<double>(b) * steps / secs;
    batch.resize(1);
    last_logits = model.forward(batch);
    last_tps = tps;
    // Each step reads the positions its token sees: the whole cache, or
    // the last sliding_window of it.
    double seen = context + steps / 2.0;
    if (cfg.sliding_window > 0)
      seen = std::min(seen, static_cast<double>(cfg.sliding_window));
    const double step_bytes = weight_bytes + kv_token_bytes * b * seen;
    const double bound = bandwidth / step_bytes * b;
    std::printf("%6u %14.1f %14.1f %8.2f\n", b, tps, bound, tps / bound);
  }
  // A prefill of `context` tokens, and the same asking for its prompt's
  // log-probabilities (every row through the LM head a chunk at a time, then
  // logprobs_of on each, top 1): alternated, the median of nine each.
  {
    std::vector<std::int32_t> p(context);
    for (std::uint32_t i = 0; i < context; ++i)
      p[i] = static_cast<std::int32_t>((i * 7 + 3) % cfg.vocab_size);
    std::vector<std::uint32_t> pg(per_seq);
    std::iota(pg.begin(), pg.end(), 0);
    std::size_t sink = 0;
    std::vector<float> hidden;
    auto prefill = [&](bool scored) {
      cpu_sequence seq{p, 0, pg, nullptr};
      if (scored)
        seq.final_hidden = &hidden;
      const auto t0 = clock_type::now();
      const auto logits = model.forward({&seq, 1});
      sink += scored ? model.prompt_logprobs(hidden, p, 1).size() : logits.size();
      return seconds_since(t0);
    };
    std::vector<double> plain, scored;
    for (int i = 0; i < 9; ++i) {
      plain.push_back(prefill(false));
      scored.push_back(prefill(true));
    }
    auto median = [](std::vector<double> v) {
      std::nth_element(v.begin(), v.begin() + 4, v.end());
      return v[4];
    };
    std::printf("prefill of %u tokens %10.2f ms; with prompt log-probabilities %10.2f ms (%.3fx)%s\n", context,
                median(plain) * 1e3, median(scored) * 1e3, median(scored) / median(plain), sink == 0 ? " (none)" : "");
  }
  // Per output token, on one row of vocab_size logits (the last batch's):
  // microseconds, and as a share of that batch's decode time per token.
  const std::span<const float> row{last_logits.data(), std::min<std::size_t>(last_logits.size(), cfg.vocab_size)};
  if (row.empty())
    return 0;
  const int reps = std::max(200, static_cast<int>(2e8 / static_cast<double>(row.size())) / 100);
  auto per_token = [&](auto&& f) {
    const auto t0 = clock_type::now();
    std::int64_t sink = 0;
    for (int i = 0; i < reps; ++i)
      sink += f(i);
    const double us = seconds_since(t0) / reps * 1e6;
    if (sink == -1)
      std::printf("(sink)\n");
    return us;
  };
  std::printf("per token over %zu logits (decode at batch %u: %.1f us a token)\n", row.size(), batches.back(),
              1e6 / last_tps);
  std::printf("%-34s %10s %8s\n", "", "us", "share");
  const double step_us = 1e6 / last_tps;
  auto line = [&](const char* what, double us) { std::printf("%-34s %10.1f %8.3f\n", what, us, us / step_us); };
  line("sample greedy", per_token([&](int i) { return sample_token(row, {0.0f, 1.0f, 0}, i, 0); }));
  line("sample T 0.8, top-p 0.95", per_token([&](int i) { return sample_token(row, {0.8f, 0.95f, 0}, i, 0); }));
  // A random model's logits are nearly flat, so top-p keeps most of the
  // vocabulary; a row of normal(0, 3) logits (seed 1) is far more peaked.
  std::vector<float> peaked(row.size());
  std::mt19937_64 rng{1};
  std::normal_distribution<float> normal{0.0f, 3.0f};
  for (auto& x : peaked)
    x = normal(rng);
  line("sample T 0.8, top-p 0.95, N(0,3) row", per_token([&](int i) { return sample_token(peaked, {0.8f, 0.95f, 0}, i, 0); }));
  line("sample T 0.8, min-p 0.05, N(0,3) row",
       per_token([&](int i) { return sample_token(peaked, {0.8f, 1.0f, 0, 0.05f}, i, 0); }));
  line("sample T 0.8, min-p 0.05", per_token([&](int i) { return sample_token(row, {0.8f, 1.0f, 0, 0.05f}, i, 0); }));
  // A repetition penalty on a 1,024-token prompt's distinct tokens: the
  // adjusted row the sampler then reads (a copy of the row and the marks).
  std::vector<logit_adjustment> seen;
  for (std::int32_t t = 0; t < static_cast<std::int32_t>(row.size()) && seen.size() < 1024; t += 7)
    seen.push_back({t, 0.0f, true});
  std::vector<float> adjusted;
  line("adjust, 1 bias (a row copied)", per_token([&](int i) {
    const logit_adjustment one{i % 5, 1.0f};
    apply_logit_adjust(row, std::span{&one, 1}, 1.0f, adjusted);
    return static_cast<std::int64_t>(adjusted[0]);
  }));
  line("adjust, repetition over 1,024 tokens", per_token([&](int) {
    apply_logit_adjust(row, seen, 1.2f, adjusted);
    return static_cast<std::int64_t>(adjusted[0]);
  }));
  for (std::uint32_t k : {0u, 5u, 20u}) {
    const std::string what = "logprobs, top " + std::to_string(k);
    line(what.c_str(), per_token([&](int i) {
      return static_cast<std::int64_t>(logprobs_of(row, i % static_cast<int>(row.size()), k).top.size());
    }));
  }
  return 0;
}
