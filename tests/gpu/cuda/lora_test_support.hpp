// Test fixtures for the LoRA pages, references and kernels: model shapes,
// random PEFT adapters, a pool holding packed adapters at shuffled pages
// among filler pages, step batches by adapter popularity, and the
// magnitudes tolerances are taken relative to. Plain C++ (cpu tests use it).
#pragma once

#include "gpu/cuda/lora_pack.hpp"
#include "gpu/cuda/plan.hpp"
#include "gpu/lora.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace troupe::gpu::cuda::lora_testing {

/// A model as the LoRA layout sees it.
struct shape {
  const char* name;
  kv_layout kv;
  std::uint32_t hidden;
  std::uint32_t q_dim;
  lora_layout layout() const { return lora_layout::make(kv, hidden, q_dim); }
};

/// Grouped-query, every dimension a multiple of 8, pages exactly full.
inline constexpr shape gqa{"gqa", {.num_layers = 2, .num_kv_heads = 2, .head_dim = 128, .page_tokens = 4},
                           1024, 1024};
/// Odd dimensions (scalar loads everywhere) and pages with a tail.
inline constexpr shape odd{"odd", {.num_layers = 2, .num_kv_heads = 1, .head_dim = 20, .page_tokens = 8},
                           100, 100};
/// Dimensions that cut every tile short: 1000 (16-byte loads) and kv 250.
inline constexpr shape ragged{"ragged",
                              {.num_layers = 2, .num_kv_heads = 2, .head_dim = 125, .page_tokens = 4},
                              1000, 1000};
/// Llama-7B's width (one layer).
inline constexpr shape wide{"wide", {.num_layers = 1, .num_kv_heads = 32, .head_dim = 128, .page_tokens = 16},
                            4096, 4096};

/// A PEFT adapter for `l` with uniform weights: A in +-1/sqrt(in), B in
/// +-1/sqrt(rank), so scale * B A x is of the order of x. `targets` picks q,
/// k, v, o.
inline gpu::lora_adapter random_adapter(const lora_layout& l, std::uint32_t rank, float scale,
                                        std::uint64_t seed,
                                        std::array<bool, 4> targets = {true, true, true, true}) {
  std::mt19937_64 rng(seed);
  gpu::lora_adapter a;
  a.rank = rank;
  a.alpha = scale * static_cast<float>(rank);
  a.scale = scale;
  a.layers.resize(l.num_layers);
  for (std::uint32_t p = 0; p < lora_proj_count; ++p)
    a.targets[p] = targets[p];
  for (auto& layer : a.layers)
    for (std::uint32_t p = 0; p < lora_proj_count; ++p) {
      if (!targets[p])
        continue;
      const auto proj = static_cast<lora_proj>(p);
      const std::uint32_t in = l.in_dim(proj);
      const std::uint32_t out = l.out_dim(proj);
      std::uniform_real_distribution<float> ua(-1.0f / std::sqrt(float(in)), 1.0f / std::sqrt(float(in)));
      std::uniform_real_distribution<float> ub(-1.0f / std::sqrt(float(rank)),
                                               1.0f / std::sqrt(float(rank)));
      layer[p].a.resize(std::size_t{rank} * in);
      layer[p].b.resize(std::size_t{out} * rank);
      for (auto& v : layer[p].a)
        v = ua(rng);
      for (auto& v : layer[p].b)
        v = ub(rng);
    }
  return a;
}

/// Packed adapters in a pool: adapter i at resident[i].pages, the pages of
/// all adapters shuffled among `filler` pages of random finite values (a
/// kernel reading a wrong page gets garbage).
struct pool {
  std::uint64_t page_elems = 0;
  std::uint64_t pages = 0;
  std::vector<std::uint16_t> data; ///< [pages * page_elems] bits
  std::vector<resident_adapter> resident;
  std::vector<std::uint32_t> filler; ///< pages no adapter uses
};

inline pool make_pool(const lora_layout& l, dtype t, std::span<const gpu::lora_adapter> adapters,
                      std::uint32_t filler_pages, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  pool p;
  p.page_elems = l.page_elems;
  std::uint64_t need = filler_pages;
  for (const auto& a : adapters)
    need += l.pages(a.rank);
  p.pages = need;
  std::vector<std::uint32_t> order(need);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), rng);
  p.data.resize(need * p.page_elems);
  std::uniform_real_distribution<float> garbage(-50.0f, 50.0f);
  std::size_t next = 0;
  for (const auto& a : adapters) {
    auto packed = pack_lora_adapter(a, l, t);
    if (auto* why = std::get_if<std::string>(&packed)) {
      ADD_FAILURE() << "pack_lora_adapter: " << *why;
      return p;
    }
    const auto& bits = std::get<std::vector<std::uint16_t>>(packed);
    resident_adapter r{a.rank, a.scale, {}};
    for (std::uint64_t i = 0; i < l.pages(a.rank); ++i) {
      const std::uint32_t page = order[next++];
      r.pages.push_back(page);
      std::copy_n(bits.begin() + static_cast<std::ptrdiff_t>(i * p.page_elems), p.page_elems,
                  p.data.begin() + static_cast<std::ptrdiff_t>(page * p.page_elems));
    }
    p.resident.push_back(std::move(r));
  }
  for (; next < need; ++next) {
    const std::uint32_t page = order[next];
    p.filler.push_back(page);
    for (std::uint64_t e = 0; e < p.page_elems; ++e)
      p.data[page * p.page_elems + e] = to_bits(t, garbage(rng));
  }
  return p;
}

/// How a batch's sequences pick adapters (S-LoRA's and Punica's sweeps).
enum class popularity : std::uint8_t { distinct, uniform, zipf, identical };

inline std::string to_string(popularity p) {
  switch (p) {
    case popularity::distinct: return "distinct";
    case popularity::uniform: return "uniform";
    case popularity::zipf: return "zipf";
    case popularity::identical: return "identical";
  }
  return "?";
}

/// Adapter index (into `adapters` of a pool) of each of `seqs` sequences.
inline std::vector<std::uint32_t> pick_adapters(popularity pop, std::uint32_t seqs,
                                                std::uint32_t adapters, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint32_t> out(seqs);
  std::vector<double> w(adapters);
  for (std::uint32_t i = 0; i < adapters; ++i)
    w[i] = 1.0 / (i + 1.0); // Zipf, exponent 1
  std::discrete_distribution<std::uint32_t> zipf(w.begin(), w.end());
  std::uniform_int_distribution<std::uint32_t> uni(0, adapters - 1);
  for (std::uint32_t s = 0; s < seqs; ++s) {
    switch (pop) {
      case popularity::distinct: out[s] = s % adapters; break;
      case popularity::uniform: out[s] = uni(rng); break;
      case popularity::zipf: out[s] = zipf(rng); break;
      case popularity::identical: out[s] = 0; break;
    }
  }
  return out;
}

/// A step entry of `new_tokens` rows after `context` cached positions, for
/// adapter index `adapter` of `p` (or the base model when negative); its
/// KV pages are filler pages (the LoRA kernels never read them).
inline step_entry lora_entry(const pool& p, std::uint64_t id, std::int64_t adapter,
                             std::uint32_t context, std::uint32_t new_tokens,
                             std::uint32_t page_tokens) {
  step_entry e;
  e.request_id = id;
  if (adapter >= 0) {
    e.adapter_id = static_cast<std::uint32_t>(adapter) + 1;
    e.adapter_rank = p.resident[static_cast<std::size_t>(adapter)].rank;
  }
  e.context_tokens = context;
  e.new_tokens = new_tokens;
  e.tokens.assign(new_tokens, 1);
  const std::uint32_t pages = (context + new_tokens + page_tokens - 1) / page_tokens;
  e.pages.assign(pages, p.filler.empty() ? 0u : p.filler[id % p.filler.size()]);
  return e;
}

/// Plans `batch` over `p` (adapter id i + 1 is p.resident[i]); every entry
/// must be accepted.
inline batch_plan plan_for(const pool& p, const kv_layout& kv, std::span<const step_entry> batch) {
  plan_inputs in;
  in.kv = kv;
  in.vocab_size = 16;
  in.pool_pages = p.pages;
  in.adapter = [&p](std::uint32_t id) -> const resident_adapter* {
    return id >= 1 && id <= p.resident.size() ? &p.resident[id - 1] : nullptr;
  };
  batch_plan plan = plan_batch(batch, in);
  for (const auto& [entry, why] : plan.rejected)
    ADD_FAILURE() << "entry " << entry << " rejected: " << why;
  return plan;
}

/// Uniform values in [-range, range] as bits of t.
inline std::vector<std::uint16_t> random_bits(dtype t, std::size_t n, float range,
                                              std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-range, range);
  std::vector<std::uint16_t> out(n);
  for (auto& v : out)
    v = to_bits(t, u(rng));
  return out;
}

/// The same values without their signs (fp16 and bf16 keep the sign in bit 15).
inline std::vector<std::uint16_t> abs_bits(std::span<const std::uint16_t> v) {
  std::vector<std::uint16_t> out(v.begin(), v.end());
  for (auto& b : out)
    b &= 0x7fffu;
  return out;
}

/// The distance from |v| to the next value of type t away from zero.
inline float ulp(dtype t, float v) {
  const std::uint16_t b = static_cast<std::uint16_t>(to_bits(t, std::fabs(v)) & 0x7fffu);
  return from_bits(t, static_cast<std::uint16_t>(b + 1)) - from_bits(t, b);
}

/// Rank of the adapter of plan row r, 0 for the base model.
inline std::uint32_t row_rank(const batch_plan& plan, std::uint32_t r) {
  const std::int32_t s = plan.row_lora[r];
  return s < 0 ? 0 : plan.slots[static_cast<std::size_t>(s)].rank;
}

} // namespace troupe::gpu::cuda::lora_testing
