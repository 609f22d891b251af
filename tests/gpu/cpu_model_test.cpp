// Tests for cpu_model against a naive single-sequence Llama written here
// (no paging, no batching, plain loops, HF's math): MHA/GQA/MQA, tied and
// untied heads, llama3 rope scaling, paged decode, unmerged vs merged LoRA,
// batch invariance, scattered pages and invalid input.
#include "gpu/cpu_model.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <type_traits>
#include <vector>

namespace troupe::gpu {
namespace {

static_assert(std::is_nothrow_move_constructible_v<cpu_model>);
static_assert(std::is_copy_constructible_v<cpu_sequence>);

using vec = std::vector<float>;
using tokens = std::vector<std::int32_t>;
using pages = std::vector<std::uint32_t>;

// -- building random models ---------------------------------------------------

struct dims {
  std::uint32_t hidden = 64;
  std::uint32_t inter = 96;
  std::uint32_t layers = 2;
  std::uint32_t heads = 4;
  std::uint32_t kv_heads = 2;
  std::uint32_t head_dim = 16;
  std::uint32_t vocab = 97;
  bool tied = false;
  bool llama3 = false;
};

vec randn(std::mt19937_64& rng, std::size_t n, float scale, float mean = 0.0f) {
  std::normal_distribution<float> d{0.0f, 1.0f};
  vec v(n);
  for (auto& x : v)
    x = mean + scale * d(rng);
  return v;
}

llama_weights make_weights(const dims& d, std::uint64_t seed) {
  std::mt19937_64 rng{seed};
  llama_weights w;
  auto& c = w.config;
  c.hidden_size = d.hidden;
  c.intermediate_size = d.inter;
  c.num_layers = d.layers;
  c.num_heads = d.heads;
  c.num_kv_heads = d.kv_heads;
  c.head_dim = d.head_dim;
  c.vocab_size = d.vocab;
  c.rms_norm_eps = 1e-5f;
  c.tie_word_embeddings = d.tied;
  if (d.llama3) {
    // With head_dim 16 and theta 1e4, this puts frequencies in all three bands.
    c.rope = rope_scaling{.type = "llama3", .factor = 8.0, .low_freq_factor = 1.0,
                          .high_freq_factor = 4.0, .original_max_position_embeddings = 64,
                          .short_factor = {}, .long_factor = {}};
  }
  const std::size_t h = d.hidden, qd = d.heads * d.head_dim, kd = d.kv_heads * d.head_dim;
  w.embed = randn(rng, std::size_t{d.vocab} * h, 0.5f);
  for (std::uint32_t l = 0; l < d.layers; ++l) {
    llama_layer_weights lw;
    lw.attn_norm = randn(rng, h, 0.1f, 1.0f);
    lw.q = randn(rng, qd * h, 0.05f * 4);
    lw.k = randn(rng, kd * h, 0.05f * 4);
    lw.v = randn(rng, kd * h, 0.05f);
    lw.o = randn(rng, h * qd, 0.05f);
    lw.mlp_norm = randn(rng, h, 0.1f, 1.0f);
    lw.gate = randn(rng, std::size_t{d.inter} * h, 0.05f);
    lw.up = randn(rng, std::size_t{d.inter} * h, 0.05f);
    lw.down = randn(rng, h * d.inter, 0.05f);
    w.layers.push_back(std::move(lw));
  }
  w.final_norm = randn(rng, h, 0.1f, 1.0f);
  if (!d.tied)
    w.lm_head = randn(rng, std::size_t{d.vocab} * h, 0.05f);
  return w;
}

struct target_dims {
  std::size_t out, in;
};

target_dims dims_of(const llama_config& c, std::size_t t) {
  const std::size_t h = c.hidden_size, qd = c.num_heads * c.head_dim,
                    kd = c.num_kv_heads * c.head_dim, i = c.intermediate_size;
  const target_dims all[] = {{qd, h}, {kd, h}, {kd, h}, {h, qd}, {i, h}, {i, h}, {h, i}};
  return all[t];
}

lora_adapter make_adapter(const llama_config& c, std::uint32_t rank,
                          const std::vector<lora_target>& targets, bool rslora,
                          std::uint64_t seed) {
  std::mt19937_64 rng{seed};
  lora_adapter a;
  a.rank = rank;
  a.alpha = 16.0f;
  a.use_rslora = rslora;
  a.scale = rslora ? a.alpha / std::sqrt(static_cast<float>(rank)) : a.alpha / static_cast<float>(rank);
  for (auto t : targets)
    a.targets[static_cast<std::size_t>(t)] = true;
  a.layers.resize(c.num_layers);
  for (auto& layer : a.layers)
    for (std::size_t t = 0; t < lora_target_count; ++t)
      if (a.targets[t]) {
        const auto d = dims_of(c, t);
        layer[t].a = randn(rng, rank * d.in, 0.05f);
        layer[t].b = randn(rng, d.out * rank, 0.05f);
      }
  return a;
}

const std::vector<lora_target> all_targets = {
    lora_target::q, lora_target::k, lora_target::v, lora_target::o,
    lora_target::gate, lora_target::up, lora_target::down};

// W + scale * B A for every adapted projection.
llama_weights merge(llama_weights w, const lora_adapter& a) {
  for (std::size_t l = 0; l < w.layers.size(); ++l) {
    auto& lw = w.layers[l];
    vec* proj[] = {&lw.q, &lw.k, &lw.v, &lw.o, &lw.gate, &lw.up, &lw.down};
    for (std::size_t t = 0; t < lora_target_count; ++t) {
      if (!a.targets[t])
        continue;
      const auto d = dims_of(w.config, t);
      const auto& m = a.layers[l][t];
      for (std::size_t o = 0; o < d.out; ++o)
        for (std::size_t i = 0; i < d.in; ++i) {
          double s = 0;
          for (std::size_t r = 0; r < a.rank; ++r)
            s += static_cast<double>(m.b[o * a.rank + r]) * m.a[r * d.in + i];
          (*proj[t])[o * d.in + i] += static_cast<float>(a.scale * s);
        }
    }
  }
  return w;
}

tokens random_tokens(std::size_t n, std::uint32_t vocab, std::uint64_t seed) {
  std::mt19937_64 rng{seed};
  std::uniform_int_distribution<std::int32_t> d{0, static_cast<std::int32_t>(vocab) - 1};
  tokens t(n);
  for (auto& x : t)
    x = d(rng);
  return t;
}

// -- the naive reference ------------------------------------------------------

// y = W x (+ scale * B (A x)), W [out, in], in double.
vec project(const vec& w, const vec& x, std::size_t out, const lora_adapter* a, std::size_t layer,
            std::size_t target) {
  const std::size_t in = x.size();
  vec y(out);
  for (std::size_t o = 0; o < out; ++o) {
    double s = 0;
    for (std::size_t i = 0; i < in; ++i)
      s += static_cast<double>(w[o * in + i]) * x[i];
    y[o] = static_cast<float>(s);
  }
  if (a == nullptr || !a->targets[target])
    return y;
  const auto& m = a->layers[layer][target];
  std::vector<double> ax(a->rank);
  for (std::size_t r = 0; r < a->rank; ++r)
    for (std::size_t i = 0; i < in; ++i)
      ax[r] += static_cast<double>(m.a[r * in + i]) * x[i];
  for (std::size_t o = 0; o < out; ++o) {
    double s = 0;
    for (std::size_t r = 0; r < a->rank; ++r)
      s += m.b[o * a->rank + r] * ax[r];
    y[o] += static_cast<float>(a->scale * s);
  }
  return y;
}

vec rms(const vec& x, const vec& w, float eps) {
  double ss = 0;
  for (float v : x)
    ss += static_cast<double>(v) * v;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  vec y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    y[i] = static_cast<float>(w[i] * (x[i] * inv));
  return y;
}

std::vector<double> ref_inv_freq(const llama_config& c) {
  std::vector<double> f;
  for (std::uint32_t i = 0; i < c.head_dim; i += 2)
    f.push_back(1.0 / std::pow(static_cast<double>(c.rope_theta), static_cast<double>(i) / c.head_dim));
  if (c.rope.type != "llama3")
    return f;
  const auto& r = c.rope;
  const double orig = r.original_max_position_embeddings;
  for (auto& x : f) {
    const double wavelen = 2 * std::numbers::pi / x;
    if (wavelen < orig / r.high_freq_factor)
      continue;
    if (wavelen > orig / r.low_freq_factor) {
      x /= r.factor;
      continue;
    }
    const double smooth = (orig / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
    x = (1 - smooth) * x / r.factor + smooth * x;
  }
  return f;
}

void ref_rope(float* head, std::size_t hd, const std::vector<double>& inv, std::size_t pos) {
  const std::size_t half = hd / 2;
  for (std::size_t j = 0; j < half; ++j) {
    const double c = std::cos(pos * inv[j]), s = std::sin(pos * inv[j]);
    const double x1 = head[j], x2 = head[j + half];
    head[j] = static_cast<float>(x1 * c - x2 * s);
    head[j + half] = static_cast<float>(x2 * c + x1 * s);
  }
}

// Logits of the last token of `toks`, run from position 0.
vec ref_logits(const llama_weights& w, const lora_adapter* a, const tokens& toks) {
  const auto& c = w.config;
  const std::size_t n = toks.size(), h = c.hidden_size, hd = c.head_dim;
  const std::size_t qd = c.num_heads * hd, kd = c.num_kv_heads * hd;
  const auto inv = ref_inv_freq(c);
  std::vector<vec> x(n);
  for (std::size_t t = 0; t < n; ++t)
    x[t] = vec(w.embed.begin() + toks[t] * h, w.embed.begin() + (toks[t] + 1) * h);
  for (std::size_t l = 0; l < c.num_layers; ++l) {
    const auto& lw = w.layers[l];
    std::vector<vec> q(n), k(n), v(n);
    for (std::size_t t = 0; t < n; ++t) {
      const vec hn = rms(x[t], lw.attn_norm, c.rms_norm_eps);
      q[t] = project(lw.q, hn, qd, a, l, 0);
      k[t] = project(lw.k, hn, kd, a, l, 1);
      v[t] = project(lw.v, hn, kd, a, l, 2);
      for (std::size_t hh = 0; hh < c.num_heads; ++hh)
        ref_rope(q[t].data() + hh * hd, hd, inv, t);
      for (std::size_t hh = 0; hh < c.num_kv_heads; ++hh)
        ref_rope(k[t].data() + hh * hd, hd, inv, t);
    }
    for (std::size_t t = 0; t < n; ++t) {
      vec att(qd, 0.0f);
      for (std::size_t hh = 0; hh < c.num_heads; ++hh) {
        const std::size_t kvh = hh / (c.num_heads / c.num_kv_heads);
        std::vector<double> s(t + 1);
        double mx = -1e300;
        for (std::size_t u = 0; u <= t; ++u) {
          double d = 0;
          for (std::size_t j = 0; j < hd; ++j)
            d += static_cast<double>(q[t][hh * hd + j]) * k[u][kvh * hd + j];
          s[u] = d / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, s[u]);
        }
        double sum = 0;
        for (auto& e : s)
          sum += (e = std::exp(e - mx));
        for (std::size_t j = 0; j < hd; ++j) {
          double o = 0;
          for (std::size_t u = 0; u <= t; ++u)
            o += s[u] / sum * v[u][kvh * hd + j];
          att[hh * hd + j] = static_cast<float>(o);
        }
      }
      const vec o = project(lw.o, att, h, a, l, 3);
      for (std::size_t i = 0; i < h; ++i)
        x[t][i] += o[i];
      const vec hn = rms(x[t], lw.mlp_norm, c.rms_norm_eps);
      vec g = project(lw.gate, hn, c.intermediate_size, a, l, 4);
      const vec up = project(lw.up, hn, c.intermediate_size, a, l, 5);
      for (std::size_t i = 0; i < g.size(); ++i)
        g[i] = static_cast<float>(g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * up[i]);
      const vec d = project(lw.down, g, h, a, l, 6);
      for (std::size_t i = 0; i < h; ++i)
        x[t][i] += d[i];
    }
  }
  const vec xn = rms(x[n - 1], w.final_norm, c.rms_norm_eps);
  return project(w.lm_head.empty() ? w.embed : w.lm_head, xn, c.vocab_size, nullptr, 0, 0);
}

// -- helpers --------------------------------------------------------------------

double rel_diff(const float* a, const float* b, std::size_t n) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return scale == 0 ? diff : diff / scale;
}

double rel_diff(const vec& a, const vec& b) {
  EXPECT_EQ(a.size(), b.size());
  return a.size() == b.size() ? rel_diff(a.data(), b.data(), a.size()) : 1e30;
}

bool has_nan(const vec& v) {
  return std::any_of(v.begin(), v.end(), [](float x) { return std::isnan(x); });
}

// Runs one sequence through `m` and returns its logits.
vec run_one(cpu_model& m, std::span<const std::int32_t> toks, std::uint32_t start,
            const pages& pg, const lora_adapter* a = nullptr) {
  const cpu_sequence s{.tokens = toks, .start_pos = start, .pages = pg, .adapter = a};
  return m.forward(std::span{&s, 1});
}

pages page_range(std::uint32_t first, std::uint32_t count) {
  pages p(count);
  for (std::uint32_t i = 0; i < count; ++i)
    p[i] = first + i;
  return p;
}

const dims mha{.kv_heads = 4};
const dims gqa{.tied = true};
const dims gqa_llama3{.llama3 = true};
const dims mqa{.hidden = 48, .inter = 64, .layers = 3, .heads = 6, .kv_heads = 1, .head_dim = 8,
               .vocab = 61};

// -- tests ----------------------------------------------------------------------

TEST(cpu_model, matches_naive_reference) {
  std::uint64_t seed = 1;
  for (const dims& d : {mha, gqa, gqa_llama3, mqa}) {
    const auto w = make_weights(d, seed++);
    cpu_model m{w, 16, 4};
    const auto toks = random_tokens(45, d.vocab, seed++);
    const auto got = run_one(m, toks, 0, page_range(0, 12));
    const auto want = ref_logits(w, nullptr, toks);
    ASSERT_EQ(got.size(), d.vocab);
    EXPECT_FALSE(has_nan(got));
    EXPECT_LT(rel_diff(got, want), 1e-4) << "heads " << d.heads << " kv " << d.kv_heads;
  }
}

TEST(cpu_model, llama3_scaling_changes_logits) {
  dims plain = gqa_llama3;
  plain.llama3 = false;
  const auto toks = random_tokens(40, plain.vocab, 7);
  cpu_model a{make_weights(plain, 3), 10, 4};
  cpu_model b{make_weights(gqa_llama3, 3), 10, 4};
  EXPECT_GT(rel_diff(run_one(a, toks, 0, page_range(0, 10)), run_one(b, toks, 0, page_range(0, 10))),
            1e-3);
}

TEST(cpu_model, matches_naive_reference_with_lora) {
  std::uint64_t seed = 100;
  for (const dims& d : {gqa, mqa}) {
    const auto w = make_weights(d, seed++);
    cpu_model m{w, 16, 4};
    for (bool rs : {false, true}) {
      const auto a = make_adapter(w.config, 8, all_targets, rs, seed++);
      const auto toks = random_tokens(21, d.vocab, seed++);
      const auto got = run_one(m, toks, 0, page_range(0, 6), &a);
      EXPECT_LT(rel_diff(got, ref_logits(w, &a, toks)), 1e-4);
      EXPECT_GT(rel_diff(got, ref_logits(w, nullptr, toks)), 1e-3) << "adapter has no effect";
    }
  }
}

TEST(cpu_model, prefill_then_decode_matches_whole_prefill) {
  std::uint64_t seed = 200;
  for (const dims& d : {gqa, gqa_llama3, mqa}) {
    const auto w = make_weights(d, seed++);
    const auto a = make_adapter(w.config, 4, {lora_target::q, lora_target::v}, false, seed++);
    for (const lora_adapter* ad : {static_cast<const lora_adapter*>(nullptr), &a}) {
      cpu_model m{w, 32, 4};
      const auto toks = random_tokens(30, d.vocab, seed++);
      const auto whole = run_one(m, toks, 0, page_range(0, 8), ad);
      const auto pg = page_range(8, 8);
      const std::span<const std::int32_t> all{toks};
      auto step = run_one(m, all.first(7), 0, pg, ad);
      EXPECT_LT(rel_diff(step, ref_logits(w, ad, tokens(toks.begin(), toks.begin() + 7))), 1e-4);
      for (std::uint32_t p = 7; p < toks.size(); ++p) {
        step = run_one(m, all.subspan(p, 1), p, pg, ad);
        ASSERT_EQ(step.size(), d.vocab);
        if (p % 7 == 0) {
          EXPECT_LT(rel_diff(step, ref_logits(w, ad, tokens(toks.begin(), toks.begin() + p + 1))), 1e-4);
        }
      }
      // The same bits: the last token's numbers do not depend on whether
      // the earlier ones came in one prefill or one at a time.
      EXPECT_EQ(step, whole);
    }
  }
}

TEST(cpu_model, unmerged_lora_equals_merged_weights) {
  std::uint64_t seed = 300;
  const std::vector<std::vector<lora_target>> sets = {
      all_targets,
      {lora_target::q, lora_target::v},
      {lora_target::gate, lora_target::up, lora_target::down},
      {lora_target::o, lora_target::k}};
  for (const dims& d : {gqa, mha, mqa}) {
    const auto w = make_weights(d, seed++);
    cpu_model base{w, 8, 8};
    for (std::uint32_t rank : {4u, 16u, 64u}) {
      for (bool rs : {false, true}) {
        const auto& set = sets[(rank / 4 + rs) % sets.size()];
        const auto a = make_adapter(w.config, rank, set, rs, seed++);
        cpu_model merged{merge(w, a), 8, 8};
        const auto toks = random_tokens(19, d.vocab, seed++);
        const auto got = run_one(base, toks, 0, page_range(0, 3), &a);
        const auto want = run_one(merged, toks, 0, page_range(0, 3));
        EXPECT_LT(rel_diff(got, want), 1e-4) << "rank " << rank << " rslora " << rs;
      }
    }
  }
}

TEST(cpu_model, batch_invariance_mixed_adapters_prefill_and_decode) {
  const auto w = make_weights(gqa_llama3, 400);
  const auto& c = w.config;
  const std::vector<lora_adapter> adapters = {
      make_adapter(c, 4, {lora_target::q, lora_target::v}, false, 401),
      make_adapter(c, 16, all_targets, true, 402),
      make_adapter(c, 64, {lora_target::gate, lora_target::up, lora_target::down}, false, 403),
      make_adapter(c, 8, {lora_target::o, lora_target::k}, true, 404)};
  constexpr std::uint32_t page_tokens = 4, per_seq = 12, n = 32;
  cpu_model m{w, n * per_seq, page_tokens};

  struct seq_plan {
    tokens history; // already in the cache before the tested step
    tokens step;    // the tested step's new tokens
    pages pg;
    const lora_adapter* adapter;
  };
  std::vector<seq_plan> plans;
  std::mt19937_64 rng{405};
  for (std::uint32_t s = 0; s < n; ++s) {
    const bool decode = s % 3 != 0;
    const std::size_t hist = decode ? 3 + rng() % 30 : 0;
    const std::size_t step = decode ? 1 : 1 + rng() % 20;
    const lora_adapter* a = s % 5 == 4 ? nullptr : &adapters[s % adapters.size()];
    // Pages interleaved across sequences: sequence s owns s, s + n, s + 2n, ...
    pages pg(per_seq);
    for (std::uint32_t i = 0; i < per_seq; ++i)
      pg[i] = s + i * n;
    plans.push_back({random_tokens(hist, c.vocab_size, 500 + s), random_tokens(step, c.vocab_size, 600 + s),
                     std::move(pg), a});
  }
  for (const auto& p : plans)
    if (!p.history.empty()) {
      ASSERT_FALSE(run_one(m, p.history, 0, p.pg, p.adapter).empty());
    }

  std::vector<vec> alone;
  for (const auto& p : plans)
    alone.push_back(run_one(m, p.step, static_cast<std::uint32_t>(p.history.size()), p.pg, p.adapter));

  std::vector<cpu_sequence> batch;
  for (const auto& p : plans)
    batch.push_back({.tokens = p.step, .start_pos = static_cast<std::uint32_t>(p.history.size()),
                     .pages = p.pg, .adapter = p.adapter});
  const auto together = m.forward(batch);
  ASSERT_EQ(together.size(), std::size_t{n} * c.vocab_size);
  for (std::uint32_t s = 0; s < n; ++s) {
    const float* row = together.data() + std::size_t{s} * c.vocab_size;
    // The same bits alone and in the batch (gpu/cpu_gemm: no row's sums
    // depend on the others), so greedy decoding never turns on the batch.
    EXPECT_EQ(vec(row, row + c.vocab_size), alone[s]) << "sequence " << s;
  }
  // And against the naive reference, for a few.
  for (std::uint32_t s : {0u, 4u, 7u, 31u}) {
    tokens all = plans[s].history;
    all.insert(all.end(), plans[s].step.begin(), plans[s].step.end());
    EXPECT_LT(rel_diff(together.data() + std::size_t{s} * c.vocab_size,
                       ref_logits(w, plans[s].adapter, all).data(), c.vocab_size),
              1e-4)
        << "sequence " << s;
  }
}

TEST(cpu_model, scattered_pages) {
  const auto w = make_weights(mqa, 700);
  cpu_model m{w, 64, 3};
  const pages a = {37, 2, 50, 11, 63, 0, 29, 8, 44};
  const pages b = {3, 36, 1, 51, 12, 62, 28, 9, 45};
  const auto ta = random_tokens(25, mqa.vocab, 701);
  const auto tb = random_tokens(20, mqa.vocab, 702);
  const std::span<const std::int32_t> sa{ta}, sb{tb};
  // Prefill both in one batch, then decode both together.
  std::vector<cpu_sequence> batch = {{.tokens = sa.first(10), .start_pos = 0, .pages = a},
                                     {.tokens = sb.first(4), .start_pos = 0, .pages = b}};
  ASSERT_FALSE(m.forward(batch).empty());
  std::uint32_t pa = 10, pb = 4;
  vec out;
  while (pa < ta.size() && pb < tb.size()) {
    batch = {{.tokens = sa.subspan(pa, 1), .start_pos = pa, .pages = a},
             {.tokens = sb.subspan(pb, 1), .start_pos = pb, .pages = b}};
    out = m.forward(batch);
    ASSERT_EQ(out.size(), 2u * mqa.vocab);
    ++pa;
    ++pb;
  }
  EXPECT_LT(rel_diff(out.data(), ref_logits(w, nullptr, tokens(ta.begin(), ta.begin() + pa)).data(),
                     mqa.vocab),
            1e-4);
  EXPECT_LT(rel_diff(out.data() + mqa.vocab,
                     ref_logits(w, nullptr, tokens(tb.begin(), tb.begin() + pb)).data(), mqa.vocab),
            1e-4);
}

TEST(cpu_model, invalid_input_returns_empty_and_keeps_the_cache) {
  const auto w = make_weights(gqa, 800);
  cpu_model m{w, 8, 4};
  const auto toks = random_tokens(9, gqa.vocab, 801);
  const std::span<const std::int32_t> all{toks};
  const pages pg = {5, 1, 6};
  ASSERT_EQ(run_one(m, all.first(8), 0, pg).size(), gqa.vocab);

  const tokens too_big = {static_cast<std::int32_t>(gqa.vocab)};
  const tokens negative = {-1};
  EXPECT_TRUE(run_one(m, too_big, 8, pg).empty());
  EXPECT_TRUE(run_one(m, negative, 8, pg).empty());
  EXPECT_TRUE(run_one(m, all.first(8), 0, {5}).empty()) << "too few pages";
  EXPECT_TRUE(run_one(m, all.first(8), 0, {5, 8}).empty()) << "page id out of range";
  EXPECT_TRUE(run_one(m, {}, 8, pg).empty()) << "no tokens";
  EXPECT_TRUE(m.forward({}).empty());

  // A bad adapter, and a batch with one bad sequence, are refused whole.
  auto bad = make_adapter(w.config, 4, {lora_target::q}, false, 802);
  bad.layers.pop_back();
  EXPECT_TRUE(run_one(m, all.subspan(8, 1), 8, pg, &bad).empty());
  const tokens other = {3, 4, 5};
  const pages other_pages = {2};
  const std::vector<cpu_sequence> mixed = {{.tokens = other, .start_pos = 0, .pages = other_pages},
                                           {.tokens = too_big, .start_pos = 8, .pages = pg}};
  EXPECT_TRUE(m.forward(mixed).empty());

  // The refused passes wrote nothing: the cached sequence still decodes right.
  const auto got = run_one(m, all.subspan(8, 1), 8, pg);
  EXPECT_LT(rel_diff(got, ref_logits(w, nullptr, toks)), 1e-4);

  // Malformed weights: every pass is refused.
  auto broken = w;
  broken.layers[1].up.pop_back();
  cpu_model bm{std::move(broken), 8, 4};
  EXPECT_TRUE(run_one(bm, all.first(3), 0, pg).empty());
}

} // namespace
} // namespace troupe::gpu
