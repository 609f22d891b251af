// The CUDA sampler (gpu/cuda/sampling.cu) against gpu::sample_token: greedy
// with ties, NaN and infinities; temperature, min-p, top-k and top-p over
// vocabularies of 512, 32000 and 152064 with peaked, flat, tied, sparse and
// narrowly spaced logits, per-sequence seeds and output indices in one
// batch; the device's uniform draw against the host formula; the same
// (seed, index) giving the same token whatever the batch; the logit
// adjustments (repetition penalty, deltas) bit for bit. A token may differ
// from the CPU's only where the CPU's own walk shows the draw (or the top-p
// target, or a weight against the min-p floor) within 1e-5 of a boundary.
// Skips without a GPU.
#include "gpu/cuda/check.hpp"
#include "gpu/cuda/device_buffer.hpp"
#include "gpu/cuda/kernels.hpp"
#include "gpu/sampling.hpp"

#include "tests/gpu/cuda/gpu_test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace troupe::gpu::cuda {
namespace {

using namespace gpu_testing;

static_assert(std::is_trivially_copyable_v<sample_params>);

constexpr double boundary_tolerance = 1e-5;
const float nan_f = std::numeric_limits<float>::quiet_NaN();
const float inf_f = std::numeric_limits<float>::infinity();

/// One launch of `sample` over rows [params.size(), vocab].
std::vector<std::int32_t> run_sample(const std::vector<float>& logits, std::uint32_t vocab,
                                     const std::vector<sample_params>& params) {
  device_buffer<float> d_logits(std::max<std::size_t>(logits.size(), 1));
  d_logits.upload(logits);
  device_buffer<sample_params> d_params(std::max<std::size_t>(params.size(), 1));
  d_params.upload(params);
  device_buffer<std::int32_t> d_tokens(std::max<std::size_t>(params.size(), 1));
  device_plan plan;
  plan.seqs = static_cast<std::uint32_t>(params.size());
  plan.sampling = d_params.data();
  sample(plan, d_logits.data(), vocab, d_tokens.data(), nullptr);
  finish();
  std::vector<std::int32_t> tokens(params.size());
  d_tokens.download(tokens);
  return tokens;
}

sample_params params_of(float temperature, float top_p, std::int32_t top_k, std::uint64_t seed,
                        std::uint32_t index, float min_p = 0.0f) {
  sample_params p;
  p.temperature = temperature;
  p.top_p = top_p;
  p.top_k = top_k;
  p.min_p = min_p;
  p.seed = seed;
  p.output_index = index;
  return p;
}

std::int32_t cpu_token(std::span<const float> row, const sample_params& p) {
  return sample_token(row, sampling_config{p.temperature, p.top_p, p.top_k, p.min_p}, p.seed,
                      p.output_index);
}

/// The CPU sampler's walk, step by step as gpu/sampling.cpp takes it, with
/// how close its decisions came to a boundary: the draw's distance (in u)
/// from the edges of the chosen token's CDF interval, and the top-p
/// target's distance (relative to the kept mass) from the cumulative masses
/// around its cut. Greedy walks have no boundary (infinite margins).
struct cpu_walk {
  std::int32_t token = -1;
  double draw_margin = std::numeric_limits<double>::infinity();
  double top_p_margin = std::numeric_limits<double>::infinity();
  double min_p_margin = std::numeric_limits<double>::infinity(); ///< nearest weight to the floor
};

cpu_walk walk_of(std::span<const float> logits, const sample_params& cfg) {
  cpu_walk w;
  const std::size_t n = logits.size();
  if (n == 0)
    return w;
  const double inv_t = 1.0 / static_cast<double>(cfg.temperature);
  double mx = -std::numeric_limits<double>::infinity();
  for (float l : logits)
    if (!std::isnan(l))
      mx = std::max(mx, static_cast<double>(l) * inv_t);
  if (!(cfg.temperature > 0.0f) || !std::isfinite(mx)) {
    w.token = cpu_token(logits, cfg);
    return w;
  }
  std::vector<double> p(n);
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double l = logits[i];
    p[i] = std::isnan(l) ? 0.0 : std::exp(l * inv_t - mx);
    total += p[i];
  }
  // min-p on the weights (the largest is 1), before they are normalized.
  std::size_t keep = n;
  const bool min_p_cut = cfg.min_p > 0.0f;
  const double floor = std::min(static_cast<double>(cfg.min_p), 1.0);
  if (min_p_cut) {
    keep = 0;
    for (const double weight : p) {
      keep += weight >= floor;
      w.min_p_margin = std::min(w.min_p_margin, std::abs(weight - floor));
    }
  }
  for (auto& x : p)
    x /= total;
  std::vector<std::int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&p](std::int32_t a, std::int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  if (cfg.top_k > 0 && static_cast<std::size_t>(cfg.top_k) < keep)
    keep = static_cast<std::size_t>(cfg.top_k);
  double kept = 0;
  for (std::size_t i = 0; i < keep; ++i)
    kept += p[order[i]];
  if (cfg.top_p < 1.0f) {
    const double target = static_cast<double>(std::max(cfg.top_p, 0.0f)) * kept;
    double cum = 0, prev = 0;
    std::size_t i = 0;
    while (i < keep) {
      prev = cum;
      cum += p[order[i]];
      ++i;
      if (cum >= target)
        break;
    }
    w.top_p_margin = std::min(std::abs(cum - target), std::abs(prev - target)) / kept;
    keep = i;
    kept = cum;
  }
  const double u = uniform01(cfg.seed, cfg.output_index) * kept;
  double cum = 0;
  for (std::size_t i = 0; i < keep; ++i) {
    const double prev = cum;
    cum += p[order[i]];
    if (u < cum) {
      w.token = order[i];
      w.draw_margin = std::min(u - prev, cum - u) / kept;
      return w;
    }
  }
  w.token = order[keep - 1];
  w.draw_margin = 0; // past the end: rounding decided it
  return w;
}

/// Checks every sequence of a launch against the CPU; returns how many
/// differed within the boundary tolerance (the others fail the test).
std::size_t expect_cpu_tokens(const std::vector<float>& logits, std::uint32_t vocab,
                              const std::vector<sample_params>& params, const std::string& what) {
  const auto tokens = run_sample(logits, vocab, params);
  std::size_t near = 0;
  for (std::size_t s = 0; s < params.size(); ++s) {
    const std::span<const float> row(logits.data() + s * vocab, vocab);
    const std::int32_t want = cpu_token(row, params[s]);
    const cpu_walk w = walk_of(row, params[s]);
    EXPECT_EQ(w.token, want) << what << " seq " << s << ": the test's walk is not the sampler's";
    if (tokens[s] == want)
      continue;
    const auto& p = params[s];
    const double margin = std::min({w.draw_margin, w.top_p_margin, w.min_p_margin});
    if (margin < boundary_tolerance) {
      ++near;
      continue;
    }
    ADD_FAILURE() << what << " seq " << s << " (T " << p.temperature << ", top_p " << p.top_p
                  << ", top_k " << p.top_k << ", min_p " << p.min_p << ", seed " << p.seed << ", index "
                  << p.output_index << "): kernel " << tokens[s] << ", cpu " << want << ", draw margin "
                  << w.draw_margin << ", top-p margin " << w.top_p_margin << ", min-p margin " << w.min_p_margin;
  }
  return near;
}

// -- logits --------------------------------------------------------------------------------

enum class shape : std::uint8_t { peaked, flat, tied, sparse, wide, narrow };

std::string to_string(shape s) {
  switch (s) {
    case shape::peaked:
      return "peaked";
    case shape::flat:
      return "flat";
    case shape::tied:
      return "tied";
    case shape::sparse:
      return "sparse";
    case shape::wide:
      return "wide";
    case shape::narrow:
      return "narrow";
  }
  return "?";
}

const shape all_shapes[] = {shape::peaked, shape::flat,  shape::tied,
                            shape::sparse, shape::wide,  shape::narrow};

/// One row of logits: peaked (LLM-like: a bulk and a few strong tokens),
/// flat, tied (five distinct values), sparse (peaked with NaN, -inf and
/// signed zeros), wide (sd 30), narrow (consecutive floats above 1, shuffled).
std::vector<float> make_row(shape s, std::uint32_t vocab, std::uint64_t seed) {
  std::mt19937_64 rng{seed};
  std::vector<float> row(vocab);
  std::normal_distribution<float> normal{0.0f, 1.0f};
  std::uniform_int_distribution<std::uint32_t> pick{0, vocab - 1};
  switch (s) {
    case shape::peaked:
    case shape::sparse: {
      for (auto& l : row)
        l = 2.0f * normal(rng);
      std::uniform_real_distribution<float> boost{5.0f, 15.0f};
      for (int i = 0; i < 20; ++i)
        row[pick(rng)] += boost(rng);
      if (s == shape::sparse) {
        for (std::uint32_t i = 0; i < vocab / 3; ++i)
          row[pick(rng)] = -inf_f;
        for (int i = 0; i < 7; ++i)
          row[pick(rng)] = nan_f;
        row[pick(rng)] = 0.0f;
        row[pick(rng)] = -0.0f;
      }
      break;
    }
    case shape::flat:
      for (auto& l : row)
        l = 0.5f * normal(rng);
      break;
    case shape::tied: {
      std::uniform_int_distribution<int> level{0, 4};
      for (auto& l : row)
        l = 0.5f * static_cast<float>(level(rng));
      break;
    }
    case shape::wide:
      for (auto& l : row)
        l = 30.0f * normal(rng);
      break;
    case shape::narrow: {
      float v = 1.0f;
      for (auto& l : row) {
        l = v;
        v = std::nextafter(v, 2.0f);
      }
      std::shuffle(row.begin(), row.end(), rng);
      break;
    }
  }
  return row;
}

/// Temperature, top-p, top-k and min-p combinations; `narrow` rows need a
/// tiny temperature to tell their logits apart.
std::vector<sample_params> configs(std::uint32_t vocab, shape s, std::uint64_t seed) {
  const float scale = s == shape::narrow ? 2e-5f : 1.0f;
  const auto k_all = static_cast<std::int32_t>(vocab);
  const std::vector<std::tuple<float, float, std::int32_t, float>> table{
    {1.0f, 1.0f, 0, 0},      {0.7f, 1.0f, 50, 0},     {0.8f, 0.9f, 0, 0},         {1.2f, 0.95f, 1000, 0},
    {1.0f, 1.0f, 1, 0},      {1.0f, 0.0f, 0, 0},      {2.0f, 1.0f, 0, 0},         {0.6f, 0.5f, 40, 0},
    {1.0f, 0.999f, 0, 0},    {1e-3f, 1.0f, 0, 0},     {1.0f, 1.0f, k_all - 1, 0}, {1.0f, 1.0f, k_all + 5, 0},
    {1.0f, -0.5f, 0, 0},     {1.0f, nan_f, 0, 0},     {1.5f, 0.3f, 5000, 0},      {0.9f, 0.8f, 3, 0},
    {1.0f, 1.0f, 0, 0.05f},  {0.8f, 0.9f, 0, 0.1f},   {1.2f, 1.0f, 50, 0.01f},    {1.0f, 0.95f, 1000, 0.2f},
    {1.0f, 1.0f, 0, 1.0f},   {2.0f, 1.0f, 0, 1e-4f},  {1.0f, 1.0f, 0, nan_f},     {1.5f, 0.5f, 0, 0.5f}};
  std::vector<sample_params> out;
  std::uint32_t i = 0;
  for (const auto& [t, p, k, m] : table) {
    out.push_back(params_of(t * scale, p, k, seed * 7919 + i * 31, 1000 * i + 1, m));
    ++i;
  }
  return out;
}

// -- greedy ----------------------------------------------------------------------------------

TEST(sampling_kernel, greedy_takes_the_lowest_id_among_the_largest_and_never_nan) {
  TROUPE_REQUIRE_GPU();
  struct greedy_case {
    std::vector<float> logits;
    float temperature;
    std::int32_t want;
  };
  const std::vector<greedy_case> cases{
    {{1, 3, 3, 2}, 0.0f, 1},
    {{nan_f, 1, 5, nan_f, 5}, 0.0f, 2},
    {{nan_f, nan_f, nan_f}, 0.0f, 0},
    {{nan_f, nan_f, nan_f}, 1.0f, 0},      // no finite max: argmax
    {{-inf_f, -inf_f}, 0.0f, 0},
    {{nan_f, -inf_f, -inf_f}, 0.0f, 1},
    {{-inf_f, -inf_f, -inf_f}, 0.8f, 0},   // no finite max: argmax
    {{1, inf_f, 3, inf_f}, 0.7f, 1},       // an infinite max: argmax
    {{-0.0f, 0.0f}, 0.0f, 0},
    {{0.0f, -0.0f}, 0.0f, 0},
    {{2, 9, nan_f, 9}, -1.0f, 1},
    {{2, 9, nan_f, 9}, nan_f, 1},
    {{4}, 0.0f, 0},
  };
  for (const auto& c : cases) {
    const auto vocab = static_cast<std::uint32_t>(c.logits.size());
    const std::vector<sample_params> params{params_of(c.temperature, 1.0f, 0, 5, 0)};
    const auto tokens = run_sample(c.logits, vocab, params);
    EXPECT_EQ(tokens[0], c.want);
    EXPECT_EQ(tokens[0], cpu_token(c.logits, params[0]));
  }
}

TEST(sampling_kernel, greedy_over_large_vocabularies_with_duplicated_maxima) {
  TROUPE_REQUIRE_GPU();
  for (std::uint32_t vocab : {512u, 32000u, 152064u}) {
    std::vector<float> logits;
    std::vector<sample_params> params;
    for (std::uint32_t s = 0; s < 6; ++s) {
      auto row = make_row(s % 2 == 0 ? shape::peaked : shape::sparse, vocab, vocab + s);
      const float top = *std::max_element(row.begin(), row.end(), [](float a, float b) {
        return std::isnan(a) || (!std::isnan(b) && a < b);
      });
      row[vocab - 1 - s] = top; // a tie with a higher id
      row[vocab / 2 + s] = top;
      row[s] = nan_f;
      logits.insert(logits.end(), row.begin(), row.end());
      params.push_back(params_of(s % 3 == 0 ? 0.0f : -2.0f, 0.5f, 7, s, s));
    }
    const auto tokens = run_sample(logits, vocab, params);
    for (std::uint32_t s = 0; s < params.size(); ++s)
      EXPECT_EQ(tokens[s],
                cpu_token(std::span<const float>(logits).subspan(std::size_t{s} * vocab, vocab),
                          params[s]))
        << "vocab " << vocab << " seq " << s;
  }
}

TEST(sampling_kernel, empty_and_tiny_vocabularies) {
  TROUPE_REQUIRE_GPU();
  const std::vector<sample_params> three{params_of(1.0f, 1.0f, 0, 1, 0),
                                         params_of(0.0f, 1.0f, 0, 2, 0),
                                         params_of(0.5f, 0.5f, 2, 3, 9)};
  EXPECT_EQ(run_sample({}, 0, three), (std::vector<std::int32_t>{-1, -1, -1}));
  const std::vector<float> one{0.25f, -3.0f, nan_f};
  EXPECT_EQ(run_sample(one, 1, three), (std::vector<std::int32_t>{0, 0, 0}));
  std::vector<float> small;
  for (std::uint32_t s = 0; s < 3; ++s)
    for (float l : {0.1f, 0.3f, 0.2f})
      small.push_back(l + 0.01f * s);
  EXPECT_EQ(expect_cpu_tokens(small, 3, three, "vocab 3"), 0u);
  EXPECT_TRUE(run_sample({}, 16, {}).empty());
}

TEST(sampling_kernel, adjusted_logits_are_the_cpu_references_bit_for_bit) {
  TROUPE_REQUIRE_GPU();
  // Three rows of 32000: no adjustment; a bias, a penalty, a token named
  // twice (deltas exact in fp32, so any order of the two adds agrees) and
  // two outside the vocabulary; two beside a NaN logit, which stays.
  constexpr std::uint32_t vocab = 32000;
  std::vector<float> logits(3 * vocab);
  for (std::size_t i = 0; i < logits.size(); ++i)
    logits[i] = static_cast<float>(static_cast<int>(i * 2654435761u % 2001) - 1000) / 64.0f;
  logits[2 * vocab + 7] = nan_f;
  // Rows 3 and 4 mark tokens repeated (a positive logit, a negative one,
  // one named twice, one with a delta too, the NaN, two outside): row 3's
  // penalty is 1.3, row 4's 1 (none); row 1's marks one under 1.3 too.
  const std::vector<std::vector<logit_adjustment>> adjust{
    {},
    {{0, 100.0f}, {31999, -0.5f, true}, {12, 0.25f}, {12, -2.0f}, {-1, 5.0f}, {32000, 5.0f}},
    {{6, 1.0f}, {8, -100.0f}},
    {{1, 0, true}, {2, 0, true}, {3, 0, true}, {3, 0, true}, {4, 0.5f, true}, {5, 0.25f}, {5, 0.25f},
     {7, 0, true}, {-2, 0, true}, {40000, 0, true}},
    {{1, 0, true}, {2, 0.5f, true}}};
  const std::vector<float> penalties{1.3f, 1.3f, 1.0f, 1.3f, 1.0f};
  const std::uint32_t rows = static_cast<std::uint32_t>(adjust.size());
  logits.resize(std::size_t{rows} * vocab);
  for (std::size_t i = 3 * vocab; i < logits.size(); ++i)
    logits[i] = static_cast<float>(static_cast<int>(i * 40503u % 977) - 488) / 16.0f;
  logits[3 * vocab + 7] = nan_f;
  logits[3 * vocab + 1] = 2.6f;
  logits[3 * vocab + 2] = -1.3f;
  logits[3 * vocab + 3] = 0.7f;
  std::vector<std::uint32_t> indptr{0};
  std::vector<std::int32_t> tokens;
  std::vector<float> deltas;
  std::vector<std::uint8_t> repeated;
  for (const auto& row : adjust) {
    for (const auto& a : row) {
      tokens.push_back(a.token);
      deltas.push_back(a.delta);
      repeated.push_back(a.repeated ? 1 : 0);
    }
    indptr.push_back(static_cast<std::uint32_t>(tokens.size()));
  }
  std::vector<sample_params> params(rows);
  for (std::uint32_t r = 0; r < rows; ++r)
    params[r].repetition_penalty = penalties[r];
  device_buffer<float> d_logits(logits.size());
  d_logits.upload(logits);
  device_buffer<std::uint32_t> d_indptr(indptr.size());
  d_indptr.upload(indptr);
  device_buffer<std::int32_t> d_tokens(tokens.size());
  d_tokens.upload(tokens);
  device_buffer<float> d_deltas(deltas.size());
  d_deltas.upload(deltas);
  device_buffer<std::uint8_t> d_repeated(repeated.size());
  d_repeated.upload(repeated);
  device_buffer<sample_params> d_params(params.size());
  d_params.upload(params);
  device_buffer<float> d_out(logits.size());
  device_plan plan;
  plan.seqs = rows;
  plan.adjust_indptr = d_indptr.data();
  plan.adjust_tokens = d_tokens.data();
  plan.adjust_deltas = d_deltas.data();
  plan.adjust_repeated = d_repeated.data();
  plan.sampling = d_params.data();
  adjust_logits(plan, d_logits.data(), vocab, d_out.data(), nullptr);
  finish();
  std::vector<float> got(logits.size()), back(logits.size());
  d_out.download(got);
  d_logits.download(back);
  EXPECT_EQ(std::memcmp(back.data(), logits.data(), logits.size() * sizeof(float)), 0) << "the model's logits stay";
  std::vector<float> want;
  for (std::uint32_t r = 0; r < rows; ++r) {
    apply_logit_adjust(std::span<const float>(logits).subspan(std::size_t{r} * vocab, vocab), adjust[r], penalties[r],
                       want);
    EXPECT_EQ(std::memcmp(got.data() + std::size_t{r} * vocab, want.data(), vocab * sizeof(float)), 0) << "row " << r;
  }
  EXPECT_EQ(got[vocab + 12], logits[vocab + 12] - 1.75f);
  EXPECT_EQ(got[3 * vocab + 1], 2.6f / 1.3f) << "a positive logit divided";
  EXPECT_EQ(got[3 * vocab + 2], -1.3f * 1.3f) << "a negative one multiplied";
  EXPECT_EQ(got[3 * vocab + 3], 0.7f / 1.3f) << "named twice, penalized once";
  EXPECT_TRUE(std::isnan(got[3 * vocab + 7]));
  EXPECT_EQ(got[4 * vocab + 1], logits[4 * vocab + 1]) << "a penalty of 1 is none";
}

// -- sampling against the CPU ------------------------------------------------------------------

TEST(sampling_kernel, temperature_min_p_top_k_top_p_match_the_cpu_sampler) {
  TROUPE_REQUIRE_GPU();
  std::size_t near = 0, total = 0;
  for (std::uint32_t vocab : {512u, 32000u, 152064u})
    for (shape s : all_shapes) {
      const auto params = configs(vocab, s, vocab + static_cast<std::uint32_t>(s));
      std::vector<float> logits;
      for (std::size_t i = 0; i < params.size(); ++i) {
        const auto row = make_row(s, vocab, 1000 * vocab + 10 * static_cast<std::uint32_t>(s) + i);
        logits.insert(logits.end(), row.begin(), row.end());
      }
      near += expect_cpu_tokens(logits, vocab, params,
                                "vocab " + std::to_string(vocab) + " " + to_string(s));
      total += params.size();
    }
  std::printf("boundary-near differences: %zu of %zu draws\n", near, total);
}

TEST(sampling_kernel, many_draws_from_one_distribution_match_the_cpu_sampler) {
  TROUPE_REQUIRE_GPU();
  struct many_case {
    std::uint32_t vocab;
    shape s;
    std::uint32_t draws;
    float temperature, top_p;
    std::int32_t top_k;
    float min_p = 0.0f;
  };
  const many_case cases[] = {
    {32000, shape::peaked, 2048, 1.0f, 1.0f, 0},   {32000, shape::peaked, 1024, 0.8f, 0.95f, 200},
    {152064, shape::flat, 256, 1.0f, 1.0f, 0},     {152064, shape::tied, 256, 1.0f, 0.7f, 0},
    {32000, shape::narrow, 512, 2e-5f, 1.0f, 0},   {152064, shape::sparse, 256, 1.3f, 1.0f, 60000},
    {32000, shape::peaked, 128, 1.0f, 1.0f, 0, 0.02f}, {152064, shape::flat, 64, 1.0f, 0.9f, 0, 0.3f},
  };
  for (const auto& c : cases) {
    const auto row = make_row(c.s, c.vocab, c.vocab * 3 + static_cast<std::uint32_t>(c.s));
    std::vector<float> logits;
    std::vector<sample_params> params;
    for (std::uint32_t d = 0; d < c.draws; ++d) {
      logits.insert(logits.end(), row.begin(), row.end());
      params.push_back(params_of(c.temperature, c.top_p, c.top_k, 424242 + d / 16, d, c.min_p));
    }
    const std::string what = "vocab " + std::to_string(c.vocab) + " " + to_string(c.s);
    const std::size_t near = expect_cpu_tokens(logits, c.vocab, params, what);
    std::printf("%s: %zu boundary-near differences of %u draws\n", what.c_str(), near, c.draws);
  }
}

TEST(sampling_kernel, ties_larger_than_a_leaf_are_walked_by_id) {
  TROUPE_REQUIRE_GPU();
  // 5000 tokens share the top logit (more than one shared-memory leaf
  // holds), the rest lie below; cuts and draws land inside the tie, and a
  // min-p cut keeps the tie alone.
  const std::uint32_t vocab = 32000;
  std::mt19937_64 rng{77};
  std::vector<float> row(vocab);
  std::normal_distribution<float> normal{0.0f, 1.0f};
  for (auto& l : row)
    l = normal(rng) - 3.0f;
  std::vector<std::uint32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0u);
  std::shuffle(ids.begin(), ids.end(), rng);
  for (std::uint32_t i = 0; i < 5000; ++i)
    row[ids[i]] = 2.5f;
  std::vector<float> logits;
  std::vector<sample_params> params;
  const std::vector<std::tuple<float, std::int32_t, float>> cuts{
    {1.0f, 0, 0.0f},    {1.0f, 3000, 0.0f}, {0.1f, 0, 0.0f},   {0.5f, 4000, 0.0f}, {1.0f, 5000, 0.0f},
    {1.0f, 5001, 0.0f}, {0.9999f, 0, 0.0f}, {1.0f, 0, 0.5f},   {1.0f, 3000, 0.5f}, {0.5f, 0, 0.5f}};
  for (std::uint32_t d = 0; d < 256; ++d) {
    logits.insert(logits.end(), row.begin(), row.end());
    const auto& [top_p, top_k, min_p] = cuts[d % cuts.size()];
    params.push_back(params_of(1.0f, top_p, top_k, 99 + d, d * 13, min_p));
  }
  const std::size_t near = expect_cpu_tokens(logits, vocab, params, "ties");
  std::printf("ties: %zu boundary-near differences of 256 draws\n", near);
}

// -- the draw and batch independence -------------------------------------------------------------

TEST(sampling_kernel, device_draw_is_the_host_uniform01) {
  TROUPE_REQUIRE_GPU();
  // 2^17 equal logits: the draw picks token floor(u * 2^17), u's top 17 bits.
  const std::uint32_t vocab = 1u << 17;
  const std::vector<float> row(vocab, 0.0f);
  std::vector<float> logits;
  std::vector<sample_params> params;
  std::mt19937_64 rng{2024};
  for (std::uint32_t d = 0; d < 384; ++d) {
    logits.insert(logits.end(), row.begin(), row.end());
    std::uint64_t seed = rng();
    std::uint32_t index = static_cast<std::uint32_t>(rng());
    if (d == 0)
      seed = 0, index = 0;
    if (d == 1)
      seed = ~0ULL, index = 0xffffffffu;
    if (d == 2)
      seed = 0, index = 0xffffffffu;
    params.push_back(params_of(1.0f, 1.0f, 0, seed, index));
  }
  const auto tokens = run_sample(logits, vocab, params);
  for (std::size_t d = 0; d < params.size(); ++d) {
    const double u = uniform01(params[d].seed, params[d].output_index);
    const auto want = static_cast<std::int32_t>(std::floor(u * vocab));
    EXPECT_EQ(tokens[d], want) << "seed " << params[d].seed << " index " << params[d].output_index;
    EXPECT_EQ(cpu_token(row, params[d]), want);
  }
}

TEST(sampling_kernel, same_seed_and_index_give_the_same_token_in_any_batch) {
  TROUPE_REQUIRE_GPU();
  for (std::uint32_t vocab : {512u, 50257u, 152064u}) {
    // Eight probes, each a row and its parameters.
    std::vector<std::vector<float>> rows;
    std::vector<sample_params> probes;
    for (std::uint32_t i = 0; i < 8; ++i) {
      rows.push_back(make_row(all_shapes[i % 6], vocab, 31 * vocab + i));
      const float t = all_shapes[i % 6] == shape::narrow ? 2e-5f : 0.9f;
      probes.push_back(params_of(t, i % 2 ? 0.9f : 1.0f, i % 3 ? 0 : 100, 555 + i, 17 * i));
    }
    auto batch_of = [&](const std::vector<std::size_t>& which) {
      std::vector<float> logits;
      std::vector<sample_params> params;
      for (std::size_t w : which) {
        logits.insert(logits.end(), rows[w].begin(), rows[w].end());
        params.push_back(probes[w]);
      }
      return run_sample(logits, vocab, params);
    };
    std::vector<std::size_t> all(8);
    std::iota(all.begin(), all.end(), std::size_t{0});
    const auto together = batch_of(all);
    EXPECT_EQ(batch_of(all), together) << "vocab " << vocab << ": a rerun differs";
    for (std::size_t i = 0; i < 8; ++i)
      EXPECT_EQ(batch_of({i})[0], together[i]) << "vocab " << vocab << " probe " << i << " alone";
    // Reversed and with fillers of other rows and parameters in between.
    std::vector<float> logits;
    std::vector<sample_params> params;
    std::vector<std::size_t> slot(8);
    std::mt19937_64 rng{vocab};
    for (std::size_t i = 8; i-- > 0;) {
      for (int f = 0; f < 3; ++f) {
        const auto filler = make_row(shape::peaked, vocab, rng());
        logits.insert(logits.end(), filler.begin(), filler.end());
        params.push_back(params_of(1.1f, 0.8f, 20, rng(), static_cast<std::uint32_t>(rng())));
      }
      slot[i] = params.size();
      logits.insert(logits.end(), rows[i].begin(), rows[i].end());
      params.push_back(probes[i]);
    }
    const auto mixed = run_sample(logits, vocab, params);
    for (std::size_t i = 0; i < 8; ++i)
      EXPECT_EQ(mixed[slot[i]], together[i]) << "vocab " << vocab << " probe " << i << " mixed";
  }
}

} // namespace
} // namespace troupe::gpu::cuda
