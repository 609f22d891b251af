// Attention test cases shared by the reference tests (cpu) and the kernel
// tests (gpu): sequences of given context and new tokens planned by
// plan_batch over (optionally shuffled) pages, a pool whose tested layer
// holds random K and V at every position a sequence has and NaN everywhere
// else (other layers, unused slots and pages), and random queries.
#pragma once

#include "gpu/cuda/dtype.hpp"
#include "gpu/cuda/plan.hpp"
#include "gpu/random.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace troupe::gpu::cuda::testing {

struct seq_spec {
  std::uint32_t context = 0;
  std::uint32_t new_tokens = 0;
};

struct attention_case {
  dtype t = dtype::f16;
  kv_layout kv;
  std::uint32_t layer = 0;
  std::uint32_t heads = 0;
  float scale = 0;
  std::vector<step_entry> entries;
  batch_plan plan;
  std::uint64_t pool_pages = 0;
  std::vector<std::uint16_t> pool; ///< [pool_pages * kv.page_elems()] bits
  std::vector<std::uint16_t> q;    ///< [rows, heads * head_dim] bits

  std::uint32_t width() const noexcept { return heads * kv.head_dim; }
};

/// A quiet NaN of `t`.
constexpr std::uint16_t nan_bits(dtype t) noexcept {
  return t == dtype::f16 ? std::uint16_t{0x7e00} : std::uint16_t{0x7fc0};
}

/// Uniform in [-1, 1) from a 64-bit counter (splitmix64): fast enough to
/// fill pools of tens of millions of elements.
class uniform_source {
public:
  explicit uniform_source(std::uint64_t seed) : x_(seed) {}
  float next() noexcept {
    const std::uint64_t z = splitmix64(x_); // splitmix64's own sequence
    x_ += 0x9e3779b97f4a7c15ull;
    return static_cast<float>(z >> 40) * 0x1.0p-23f - 1.0f;
  }

private:
  std::uint64_t x_;
};

struct case_options {
  dtype t = dtype::f16;
  std::uint32_t num_layers = 2;
  std::uint32_t layer = 1;
  std::uint32_t kv_heads = 2;
  std::uint32_t group = 1; ///< query heads per kv head
  std::uint32_t head_dim = 64;
  std::uint32_t page_tokens = 16;
  attention_split split{};
  bool shuffle_pages = true;
  std::uint32_t spare_pages = 3; ///< pages no sequence uses (NaN)
  float q_scale = 4.0f;          ///< q uniform in [-q_scale, q_scale)
  std::uint64_t seed = 1;
  std::uint32_t sliding_window = 0; ///< plan_inputs::sliding_window; 0: none
};

/// Plans `seqs` and fills the pool and queries as the header says.
inline attention_case make_case(const std::vector<seq_spec>& seqs, const case_options& o) {
  attention_case c;
  c.t = o.t;
  c.kv = kv_layout{.num_layers = o.num_layers, .num_kv_heads = o.kv_heads,
                   .head_dim = o.head_dim, .page_tokens = o.page_tokens};
  c.layer = o.layer;
  c.heads = o.kv_heads * o.group;
  c.scale = 1.0f / std::sqrt(static_cast<float>(o.head_dim));

  std::uint64_t used = 0;
  for (const auto& s : seqs)
    used += (s.context + s.new_tokens + o.page_tokens - 1) / o.page_tokens;
  c.pool_pages = used + o.spare_pages;
  std::vector<std::uint32_t> ids(c.pool_pages);
  std::iota(ids.begin(), ids.end(), 0u);
  std::mt19937_64 rng{o.seed};
  if (o.shuffle_pages)
    std::shuffle(ids.begin(), ids.end(), rng);

  std::size_t next = 0;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    step_entry e;
    e.request_id = i + 1;
    e.context_tokens = seqs[i].context;
    e.new_tokens = seqs[i].new_tokens;
    for (std::uint32_t k = 0; k < e.new_tokens; ++k)
      e.tokens.push_back(static_cast<std::int32_t>((i * 31 + k) % 1000));
    const std::uint32_t pages = (e.context_tokens + e.new_tokens + o.page_tokens - 1) / o.page_tokens;
    e.pages.assign(ids.begin() + static_cast<std::ptrdiff_t>(next),
                   ids.begin() + static_cast<std::ptrdiff_t>(next + pages));
    next += pages;
    c.entries.push_back(std::move(e));
  }
  plan_inputs in;
  in.kv = c.kv;
  in.vocab_size = 1000;
  in.pool_pages = c.pool_pages;
  in.split = o.split;
  in.sliding_window = o.sliding_window;
  c.plan = plan_batch(c.entries, in);

  uniform_source u{o.seed * 0x100000001b3ull + 17};
  c.pool.assign(c.pool_pages * c.kv.page_elems(), nan_bits(o.t));
  const std::uint32_t kvd = c.kv.kv_dim();
  for (const auto& e : c.entries) {
    const std::uint32_t len = e.context_tokens + e.new_tokens;
    for (std::uint32_t t = 0; t < len; ++t)
      for (std::uint32_t which = 0; which < 2; ++which) {
        std::uint16_t* dst =
          c.pool.data() + c.kv.offset(e.pages[t / o.page_tokens], o.layer, which, t % o.page_tokens);
        for (std::uint32_t d = 0; d < kvd; ++d)
          dst[d] = to_bits(o.t, u.next());
      }
  }
  c.q.resize(std::size_t{c.plan.rows()} * c.width());
  for (auto& x : c.q)
    x = to_bits(o.t, o.q_scale * u.next());
  return c;
}

/// A readable name of a case's shape, for SCOPED_TRACE.
inline std::string describe(const std::vector<seq_spec>& seqs, const case_options& o) {
  std::string s = std::string(to_string(o.t)) + " hd " + std::to_string(o.head_dim) + " kv " +
                  std::to_string(o.kv_heads) + " x" + std::to_string(o.group) + " q_tile " +
                  std::to_string(o.split.q_tile) + " chunk " + std::to_string(o.split.kv_chunk) +
                  " pt " + std::to_string(o.page_tokens) +
                  (o.sliding_window > 0 ? " window " + std::to_string(o.sliding_window) : std::string{}) + " seqs";
  const std::size_t shown = std::min<std::size_t>(seqs.size(), 6);
  // Appends, not "..." + std::string: GCC 12 warns falsely (-Wrestrict) on
  // the latter when it inlines it at -O3.
  for (std::size_t i = 0; i < shown; ++i)
    s.append(" ").append(std::to_string(seqs[i].context)).append("+").append(std::to_string(seqs[i].new_tokens));
  if (shown < seqs.size())
    s.append(" ... (").append(std::to_string(seqs.size())).append(")");
  return s;
}

} // namespace troupe::gpu::cuda::testing
