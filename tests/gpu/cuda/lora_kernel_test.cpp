// The LoRA kernels (lora_shrink, lora_expand; gathered and segmented)
// against their CPU references over grids of dtypes, shapes (GQA, odd
// widths with scalar loads and page tails, widths that cut every tile
// short, 4096), ranks 8..128 mixed in one batch, adapter popularity
// (distinct, uniform, Zipf, identical), decode and prefill batches with
// base-model rows, adapters in shuffled pages; q, k and v in one launch
// against one launch each. Tolerances are per dtype and relative to each
// output's magnitude; NaNs fail; entries a kernel must not write are
// compared bit for bit. Skips without a GPU.
#include "gpu/cuda/check.hpp"
#include "gpu/cuda/device_buffer.hpp"
#include "gpu/cuda/kernels.hpp"
#include "gpu/cuda/plan_upload.hpp"
#include "gpu/cuda/reference_lora.hpp"
#include "tests/gpu/cuda/lora_test_support.hpp"

#include "tests/gpu/cuda/gpu_test_support.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <stdexcept>
#include <type_traits>

namespace troupe::gpu::cuda {
namespace {

using namespace gpu_testing;

using namespace lora_testing;

// The plan's LoRA arrays are copied to the device as bytes.
static_assert(std::is_trivially_copyable_v<lora_slot>);
static_assert(std::is_trivially_copyable_v<lora_segment>);
static_assert(std::is_trivially_copyable_v<lora_layout>);

constexpr std::uint32_t mixed_ranks[] = {8, 16, 32, 64, 128};
constexpr float sentinel = -12345.0f; // tmp entries no kernel may write
constexpr float tmp_rel = 0x1p-16f;   // fp32 sums in another order, relative to sum |x a|
constexpr float y_rel = 0x1p-16f;     // fp32 error before y's rounding, relative to |y| + |delta|
constexpr popularity popularities[] = {popularity::distinct, popularity::uniform, popularity::zipf,
                                       popularity::identical};
constexpr dtype dtypes[] = {dtype::f16, dtype::bf16};

/// Adapters of the given ranks (scales 1 to 1.75) packed in shuffled pages
/// of one pool, on the host and on the device.
struct rig {
  shape s;
  lora_layout l;
  dtype t;
  pool host;
  std::vector<std::uint16_t> abs_pool; // host.data without signs
  device_buffer<std::uint16_t> dev;

  rig(const shape& sh, dtype ty, const std::vector<std::uint32_t>& ranks, std::uint64_t seed)
    : s(sh), l(sh.layout()), t(ty) {
    std::vector<gpu::lora_adapter> adapters;
    for (std::size_t i = 0; i < ranks.size(); ++i)
      adapters.push_back(random_adapter(l, ranks[i], 1.0f + 0.25f * float(i % 4), seed + i));
    host = make_pool(l, t, adapters, 16, seed ^ 0x5eed);
    abs_pool = abs_bits(host.data);
    dev = device_buffer<std::uint16_t>(host.data.size());
    dev.upload(host.data);
  }
  std::uint32_t adapters() const { return static_cast<std::uint32_t>(host.resident.size()); }
};

std::vector<std::uint32_t> cycle_ranks(std::uint32_t n) {
  std::vector<std::uint32_t> r(n);
  for (std::uint32_t i = 0; i < n; ++i)
    r[i] = mixed_ranks[i % std::size(mixed_ranks)];
  return r;
}

/// Inputs and the reference's outputs for (layer, proj) of a plan.
struct reference_case {
  std::uint32_t layer = 0;
  lora_proj proj = lora_proj::q;
  std::vector<std::uint16_t> x, y0;
  std::vector<float> tmp;     // reference shrink; sentinel where nothing is written
  std::vector<float> tmp_abs; // sum_k |x_k| |A_jk|: the scale of each tmp entry's error
  std::vector<std::uint16_t> y; // reference expand of tmp into y0
  std::vector<float> y_mag;     // |y0| + scale * sum_j tmp_abs_j |B_oj|
};

reference_case make_reference(const rig& g, const batch_plan& plan, std::uint32_t layer,
                              lora_proj proj, std::uint64_t seed) {
  reference_case c;
  c.layer = layer;
  c.proj = proj;
  const std::uint32_t rows = plan.rows();
  const std::uint64_t in = g.l.in_dim(proj);
  const std::uint64_t out = g.l.out_dim(proj);
  const std::uint64_t tmp_n = std::uint64_t{rows} * plan.max_rank;
  c.x = random_bits(g.t, rows * in, 1.0f, seed);
  c.y0 = random_bits(g.t, rows * out, 0.5f, seed + 1);
  c.tmp.assign(tmp_n, sentinel);
  lora_shrink_reference(g.t, plan, g.l, layer, proj, c.x, g.host.data, c.tmp);
  c.tmp_abs.assign(tmp_n, 0.0f);
  lora_shrink_reference(g.t, plan, g.l, layer, proj, abs_bits(c.x), g.abs_pool, c.tmp_abs);
  c.y = c.y0;
  lora_expand_reference(g.t, plan, g.l, layer, proj, c.tmp, g.host.data, c.y);
  std::vector<std::uint16_t> delta_mag(rows * out, 0);
  lora_expand_reference(g.t, plan, g.l, layer, proj, c.tmp_abs, g.abs_pool, delta_mag);
  c.y_mag.resize(rows * out);
  for (std::uint64_t i = 0; i < c.y_mag.size(); ++i)
    c.y_mag[i] = std::fabs(from_bits(g.t, c.y0[i])) + from_bits(g.t, delta_mag[i]);
  return c;
}

/// What the kernels wrote: tmp from shrink, y from expand of that tmp
/// (chain) and y from expand of the reference's tmp (isolated).
struct device_result {
  std::vector<float> tmp;
  std::vector<std::uint16_t> y_chain;
  std::vector<std::uint16_t> y_isolated;
};

/// `pool`: the device pool the plan's pages index (g.dev when null).
device_result run_kernels(const rig& g, const batch_plan& plan, const reference_case& c,
                          bool gathered, const std::uint16_t* pool = nullptr) {
  if (pool == nullptr)
    pool = g.dev.data();
  cudaStream_t stream = nullptr;
  TROUPE_CUDA_CHECK(cudaStreamCreate(&stream));
  device_result r;
  {
    plan_upload up;
    const device_plan dp = up.upload(plan, stream);
    const std::vector<float> fresh(std::max<std::size_t>(c.tmp.size(), 1), sentinel);
    device_buffer<std::uint16_t> x(std::max<std::size_t>(c.x.size(), 1));
    device_buffer<float> tmp(fresh.size());
    device_buffer<float> tmp_ref(fresh.size());
    device_buffer<std::uint16_t> y_chain(std::max<std::size_t>(c.y0.size(), 1));
    device_buffer<std::uint16_t> y_isolated(y_chain.size());
    x.upload(c.x);
    tmp.upload(fresh);
    tmp_ref.upload(c.tmp);
    y_chain.upload(c.y0);
    y_isolated.upload(c.y0);
    lora_shrink(g.t, dp, g.l, c.layer, c.proj, x.data(), pool, gathered, tmp.data(), stream);
    TROUPE_CUDA_CHECK(cudaGetLastError());
    lora_expand(g.t, dp, g.l, c.layer, c.proj, tmp.data(), pool, gathered, y_chain.data(),
                stream);
    TROUPE_CUDA_CHECK(cudaGetLastError());
    lora_expand(g.t, dp, g.l, c.layer, c.proj, tmp_ref.data(), pool, gathered,
                y_isolated.data(), stream);
    TROUPE_CUDA_CHECK(cudaGetLastError());
    TROUPE_CUDA_CHECK(cudaStreamSynchronize(stream));
    r.tmp.resize(c.tmp.size());
    r.y_chain.resize(c.y0.size());
    r.y_isolated.resize(c.y0.size());
    tmp.download(r.tmp);
    y_chain.download(r.y_chain);
    y_isolated.download(r.y_isolated);
  }
  TROUPE_CUDA_CHECK(cudaStreamDestroy(stream));
  return r;
}

// Reports at most a few bad elements of one comparison, then their count.
class mismatches {
public:
  explicit mismatches(std::string what) : what_(std::move(what)) {}
  ~mismatches() { EXPECT_EQ(count_, 0u) << what_ << ": elements off"; }
  template <class Msg>
  void add(Msg&& msg) {
    if (++count_ <= 4)
      ADD_FAILURE() << what_ << ": " << msg();
  }

private:
  std::string what_;
  std::uint64_t count_ = 0;
};

/// tmp against the reference: rows with an adapter within tmp_rel of sum
/// |x a| and not NaN for j < rank, every other entry still the sentinel.
void expect_tmp(const batch_plan& plan, const reference_case& c, std::span<const float> got,
                const std::string& what, float rel = tmp_rel) {
  mismatches bad(what + " tmp");
  const std::uint32_t stride = plan.max_rank;
  for (std::uint32_t r = 0; r < plan.rows(); ++r) {
    const std::uint32_t rank = row_rank(plan, r);
    for (std::uint32_t j = 0; j < stride; ++j) {
      const std::size_t i = std::size_t{r} * stride + j;
      if (j >= rank) {
        if (std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(sentinel))
          bad.add([&] { return "row " + std::to_string(r) + " j " + std::to_string(j) +
                               " (rank " + std::to_string(rank) + ") written: " +
                               std::to_string(got[i]); });
        continue;
      }
      const float tol = rel * c.tmp_abs[i];
      if (std::isnan(got[i]) || !(std::fabs(got[i] - c.tmp[i]) <= tol))
        bad.add([&] { return "row " + std::to_string(r) + " j " + std::to_string(j) + ": " +
                             std::to_string(got[i]) + ", reference " + std::to_string(c.tmp[i]) +
                             " (tolerance " + std::to_string(tol) + ")"; });
    }
  }
}

/// y against the reference: base-model rows bit for bit as they were, rows
/// with an adapter within one ulp of the reference's rounding plus `rel`
/// of |y0| + |delta|, and not NaN.
void expect_y(dtype t, const batch_plan& plan, const reference_case& c,
              std::span<const std::uint16_t> got, const std::string& what, float rel = y_rel) {
  mismatches bad(what);
  const std::uint32_t rows = plan.rows();
  const std::size_t out = rows == 0 ? 0 : c.y0.size() / rows;
  for (std::uint32_t r = 0; r < rows; ++r) {
    const bool adapted = plan.row_lora[r] >= 0;
    for (std::size_t o = 0; o < out; ++o) {
      const std::size_t i = r * out + o;
      if (!adapted) {
        if (got[i] != c.y0[i])
          bad.add([&] { return "base-model row " + std::to_string(r) + " out " +
                               std::to_string(o) + " changed"; });
        continue;
      }
      const float g = from_bits(t, got[i]);
      const float want = from_bits(t, c.y[i]);
      const float tol = ulp(t, want) + rel * c.y_mag[i];
      if (std::isnan(g) || !(std::fabs(g - want) <= tol))
        bad.add([&] { return "row " + std::to_string(r) + " out " + std::to_string(o) + ": " +
                             std::to_string(g) + ", reference " + std::to_string(want) +
                             " (tolerance " + std::to_string(tol) + ")"; });
    }
  }
}

/// Both kernels of one form on (layer, proj) of `plan` against the reference;
/// `dev_plan` and `pool` (when given) are where the device finds the same pages.
void check_form(const rig& g, const batch_plan& plan, const reference_case& c, bool gathered,
                const batch_plan* dev_plan = nullptr, const std::uint16_t* pool = nullptr) {
  const std::string form = gathered ? "gathered" : "segmented";
  const auto d = run_kernels(g, dev_plan != nullptr ? *dev_plan : plan, c, gathered, pool);
  expect_tmp(plan, c, d.tmp, form);
  expect_y(g.t, plan, c, d.y_isolated, form + " expand");
  // The chain adds shrink's error (tmp_rel of sum |x a|) carried through B.
  expect_y(g.t, plan, c, d.y_chain, form + " shrink+expand", y_rel + tmp_rel);
}

std::string trace(const rig& g, popularity pop, std::uint32_t layer, lora_proj proj) {
  return std::string(g.s.name) + " " + std::string(to_string(g.t)) + " " + to_string(pop) +
         " layer " + std::to_string(layer) + " proj " +
         std::to_string(static_cast<unsigned>(proj));
}

/// A decode batch: `seqs` sequences of one row each, every fourth (from
/// the fourth) on the base model, the others on adapters by `pop`.
std::vector<step_entry> decode_batch(const rig& g, popularity pop, std::uint32_t seqs,
                                     std::uint64_t seed) {
  const auto pick = pick_adapters(pop, seqs, g.adapters(), seed);
  std::vector<step_entry> batch;
  for (std::uint32_t s = 0; s < seqs; ++s) {
    const std::int64_t adapter = s % 4 == 3 ? -1 : std::int64_t{pick[s]};
    batch.push_back(lora_entry(g.host, s, adapter, 5 + s, 1, g.s.kv.page_tokens));
  }
  return batch;
}

/// A mixed step: prefills of 200, 65, 3, 130, 64 rows and one row, decodes,
/// a base-model prefill (17 rows) and a base-model decode.
std::vector<step_entry> prefill_batch(const rig& g, popularity pop, std::uint64_t seed) {
  struct seq {
    std::uint32_t context, rows;
    bool base;
  };
  const seq seqs[] = {{0, 200, false}, {9, 1, true},  {0, 65, false}, {0, 3, false},
                      {4, 130, false}, {0, 17, true}, {30, 1, false}, {0, 64, false},
                      {2, 1, false},   {0, 1, false}};
  const auto pick = pick_adapters(pop, std::size(seqs), g.adapters(), seed);
  std::vector<step_entry> batch;
  for (std::uint32_t s = 0; s < std::size(seqs); ++s)
    batch.push_back(lora_entry(g.host, s, seqs[s].base ? -1 : std::int64_t{pick[s]},
                               seqs[s].context, seqs[s].rows, g.s.kv.page_tokens));
  return batch;
}

TEST(lora_kernels, decode_batches_match_the_reference) {
  TROUPE_REQUIRE_GPU();
  std::uint64_t seed = 100;
  for (const shape& s : {gqa, odd, ragged})
    for (dtype t : dtypes) {
      const rig g(s, t, cycle_ranks(64), seed++);
      for (popularity pop : popularities)
        for (std::uint32_t seqs : {1u, 2u, 7u, 64u})
          for (std::uint32_t p = 0; p < lora_proj_count; ++p) {
            const auto proj = static_cast<lora_proj>(p);
            const std::uint32_t layer = (p + seqs) % s.kv.num_layers;
            SCOPED_TRACE(trace(g, pop, layer, proj) + " batch " + std::to_string(seqs));
            const auto batch = decode_batch(g, pop, seqs, seed++);
            const auto plan = plan_for(g.host, s.kv, batch);
            ASSERT_TRUE(plan.decode_only());
            const auto c = make_reference(g, plan, layer, proj, seed++);
            check_form(g, plan, c, true);
          }
    }
}

TEST(lora_kernels, prefill_batches_match_the_reference) {
  TROUPE_REQUIRE_GPU();
  std::uint64_t seed = 200;
  for (const shape& s : {gqa, odd, ragged})
    for (dtype t : dtypes) {
      const rig g(s, t, cycle_ranks(12), seed++);
      for (popularity pop : popularities)
        for (std::uint32_t p = 0; p < lora_proj_count; ++p) {
          const auto proj = static_cast<lora_proj>(p);
          const std::uint32_t layer = p % s.kv.num_layers;
          SCOPED_TRACE(trace(g, pop, layer, proj));
          const auto plan = plan_for(g.host, s.kv, prefill_batch(g, pop, seed++));
          ASSERT_FALSE(plan.decode_only());
          ASSERT_GT(plan.rows(), 400u);
          const auto c = make_reference(g, plan, layer, proj, seed++);
          check_form(g, plan, c, false);
          // The gathered kernels take any rows (one block row each): S-LoRA's
          // per-token fallback for short prefills.
          check_form(g, plan, c, true);
        }
    }
}

TEST(lora_kernels, gathered_and_segmented_agree_on_decode_batches) {
  TROUPE_REQUIRE_GPU();
  std::uint64_t seed = 300;
  for (const shape& s : {gqa, ragged})
    for (dtype t : dtypes) {
      const rig g(s, t, cycle_ranks(40), seed++);
      for (popularity pop : popularities)
        for (std::uint32_t seqs : {3u, 33u, 64u}) {
          const auto proj = static_cast<lora_proj>(seqs % lora_proj_count);
          SCOPED_TRACE(trace(g, pop, 1, proj) + " batch " + std::to_string(seqs));
          const auto plan = plan_for(g.host, s.kv, decode_batch(g, pop, seqs, seed++));
          const auto c = make_reference(g, plan, 1, proj, seed++);
          const auto a = run_kernels(g, plan, c, true);
          const auto b = run_kernels(g, plan, c, false);
          // Shrink sums in different orders: each near the reference, so near each other.
          reference_case from_a = c;
          from_a.tmp = a.tmp;
          expect_tmp(plan, from_a, b.tmp, "segmented against gathered", 2 * tmp_rel);
          // Expand sums j in ascending order with fused multiply-adds in both
          // forms: from the same tmp they give the same bits.
          EXPECT_EQ(a.y_isolated, b.y_isolated);
          reference_case chain = c;
          chain.y = a.y_chain;
          expect_y(t, plan, chain, b.y_chain, "segmented against gathered shrink+expand",
                   2 * (y_rel + tmp_rel));
        }
    }
}

TEST(lora_kernels, decode_at_hidden_4096) {
  TROUPE_REQUIRE_GPU();
  std::uint64_t seed = 400;
  for (dtype t : dtypes) {
    const rig g(wide, t, cycle_ranks(16), seed++);
    for (popularity pop : {popularity::uniform, popularity::zipf, popularity::identical})
      for (std::uint32_t p = 0; p < lora_proj_count; ++p) {
        const auto proj = static_cast<lora_proj>(p);
        SCOPED_TRACE(trace(g, pop, 0, proj) + " batch 64");
        const auto plan = plan_for(g.host, wide.kv, decode_batch(g, pop, 64, seed++));
        const auto c = make_reference(g, plan, 0, proj, seed++);
        check_form(g, plan, c, true);
        check_form(g, plan, c, false);
      }
  }
}

TEST(lora_kernels, ranks_outside_the_usual_set) {
  TROUPE_REQUIRE_GPU();
  std::uint64_t seed = 500;
  const std::vector<std::uint32_t> ranks{1, 3, 12, 100, 136, 17};
  for (const shape& s : {gqa, odd})
    for (dtype t : dtypes) {
      const rig g(s, t, ranks, seed++);
      for (std::uint32_t p = 0; p < lora_proj_count; ++p) {
        const auto proj = static_cast<lora_proj>(p);
        SCOPED_TRACE(trace(g, popularity::distinct, 1, proj));
        auto batch = prefill_batch(g, popularity::distinct, seed++);
        const auto plan = plan_for(g.host, s.kv, batch);
        const auto c = make_reference(g, plan, 1, proj, seed++);
        check_form(g, plan, c, false);
        check_form(g, plan, c, true);
      }
    }
}

TEST(lora_kernels, adapter_pages_past_2_to_the_32_elements) {
  TROUPE_REQUIRE_GPU();
  // The rig's pool copied to pages whose first element lies past 2^32 (a
  // pool of tens of GiB): a page * page_elems or row offset taken in 32
  // bits wraps and reads the wrong page. The reference reads the rig's
  // small host pool; the device plan's pages are shifted by `base`.
  std::uint64_t seed = 800;
  for (const shape& s : {gqa, odd})
    for (dtype t : dtypes) {
      const rig g(s, t, cycle_ranks(6), seed++);
      const std::uint64_t base = (1ull << 32) / g.l.page_elems + 1;
      const std::uint64_t elems = (base + g.host.pages) * g.l.page_elems;
      std::size_t free_bytes = 0, total_bytes = 0;
      TROUPE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
      // About 8.6 GB: any GPU this backend serves a 7B model on has it.
      ASSERT_LE(elems * sizeof(std::uint16_t) + (1ull << 30), free_bytes)
        << "needs " << (elems * 2 >> 20) << " MiB of device memory, " << (free_bytes >> 20)
        << " MiB free";
      device_buffer<std::uint16_t> big(elems); // only the copied pages are ever read
      TROUPE_CUDA_CHECK(cudaMemcpy(big.data() + base * g.l.page_elems, g.host.data.data(),
                                   g.host.data.size() * sizeof(std::uint16_t),
                                   cudaMemcpyHostToDevice));
      for (std::uint32_t p = 0; p < lora_proj_count; ++p) {
        const auto proj = static_cast<lora_proj>(p);
        SCOPED_TRACE(trace(g, popularity::distinct, 1, proj) + " pages past 2^32 elements");
        const auto plan = plan_for(g.host, s.kv, prefill_batch(g, popularity::distinct, seed++));
        batch_plan shifted = plan;
        for (auto& page : shifted.lora_pages)
          page = static_cast<std::uint32_t>(page + base);
        const auto c = make_reference(g, plan, 1, proj, seed++);
        check_form(g, plan, c, false, &shifted, big.data());
        check_form(g, plan, c, true, &shifted, big.data());
      }
    }
}

TEST(lora_kernels, batches_without_adapters_change_nothing) {
  TROUPE_REQUIRE_GPU();
  const rig g(gqa, dtype::bf16, cycle_ranks(2), 600);
  std::vector<step_entry> batch{lora_entry(g.host, 1, -1, 0, 9, 4),
                                lora_entry(g.host, 2, -1, 3, 1, 4)};
  const auto plan = plan_for(g.host, gqa.kv, batch);
  ASSERT_EQ(plan.max_rank, 0u);
  ASSERT_TRUE(plan.segments.empty());
  for (bool gathered : {true, false}) {
    const auto c = make_reference(g, plan, 0, lora_proj::v, 601);
    const auto d = run_kernels(g, plan, c, gathered);
    EXPECT_EQ(d.y_chain, c.y0);
    EXPECT_EQ(d.y_isolated, c.y0);
  }
}

/// q, k and v of one layer through the launchers one projection at a time,
/// then all three in one launch; returns whether each tmp and y is the same
/// bits (tmp entries no kernel writes stay the sentinel in both).
void expect_fused_is_single(const rig& g, const batch_plan& plan, std::uint32_t layer, bool gathered,
                            std::uint64_t seed) {
  constexpr lora_proj qkv[] = {lora_proj::q, lora_proj::k, lora_proj::v};
  const std::uint64_t rows = plan.rows();
  const std::uint64_t tmp_n = std::max<std::uint64_t>(rows * plan.max_rank, 1);
  cudaStream_t stream = nullptr;
  TROUPE_CUDA_CHECK(cudaStreamCreate(&stream));
  {
    plan_upload up;
    const device_plan dp = up.upload(plan, stream);
    const auto x_host = random_bits(g.t, rows * g.l.in_dim(lora_proj::q), 1.0f, seed);
    device_buffer<std::uint16_t> x(std::max<std::size_t>(x_host.size(), 1));
    x.upload(x_host);
    device_buffer<float> tmp_single(tmp_n);
    device_buffer<float> tmp_fused(3 * tmp_n);
    tmp_fused.upload(std::vector<float>(3 * tmp_n, sentinel));
    std::vector<std::vector<std::uint16_t>> y0(3);
    std::vector<device_buffer<std::uint16_t>> y_single, y_fused;
    std::vector<std::vector<float>> tmp_want(3);
    for (unsigned z = 0; z < 3; ++z) {
      y0[z] = random_bits(g.t, rows * g.l.out_dim(qkv[z]), 0.5f, seed + 1 + z);
      y_single.emplace_back(std::max<std::size_t>(y0[z].size(), 1));
      y_fused.emplace_back(std::max<std::size_t>(y0[z].size(), 1));
      y_single[z].upload(y0[z]);
      y_fused[z].upload(y0[z]);
      tmp_single.upload(std::vector<float>(tmp_n, sentinel));
      lora_shrink(g.t, dp, g.l, layer, qkv[z], x.data(), g.dev.data(), gathered, tmp_single.data(), stream);
      lora_expand(g.t, dp, g.l, layer, qkv[z], tmp_single.data(), g.dev.data(), gathered, y_single[z].data(),
                  stream);
      TROUPE_CUDA_CHECK(cudaStreamSynchronize(stream));
      tmp_want[z].resize(tmp_n);
      tmp_single.download(tmp_want[z]);
    }
    void* const outs[] = {y_fused[0].data(), y_fused[1].data(), y_fused[2].data()};
    lora_shrink(g.t, dp, g.l, layer, qkv, x.data(), g.dev.data(), gathered, tmp_fused.data(), stream);
    lora_expand(g.t, dp, g.l, layer, qkv, tmp_fused.data(), g.dev.data(), gathered, outs, stream);
    TROUPE_CUDA_CHECK(cudaGetLastError());
    TROUPE_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<float> fused(3 * tmp_n);
    tmp_fused.download(fused);
    for (unsigned z = 0; z < 3; ++z) {
      SCOPED_TRACE("projection " + std::to_string(z));
      const std::vector<float> got(fused.begin() + static_cast<std::ptrdiff_t>(z * tmp_n),
                                   fused.begin() + static_cast<std::ptrdiff_t>((z + 1) * tmp_n));
      std::uint64_t off = 0;
      for (std::uint64_t i = 0; i < tmp_n; ++i)
        off += std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(tmp_want[z][i]);
      EXPECT_EQ(off, 0u) << "tmp entries not the one-projection launch's";
      std::vector<std::uint16_t> a(y0[z].size()), b(y0[z].size());
      y_single[z].download(a);
      y_fused[z].download(b);
      EXPECT_EQ(a, b) << "y not the one-projection launch's";
      if (plan.max_rank > 0) {
        EXPECT_NE(a, y0[z]) << "the adapters changed nothing: the comparison proves nothing";
      }
    }
  }
  TROUPE_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(lora_kernels, q_k_and_v_in_one_launch_are_each_ones_launch_bit_for_bit) {
  TROUPE_REQUIRE_GPU();
  std::uint64_t seed = 900;
  for (const shape& s : {gqa, odd, ragged})
    for (dtype t : dtypes) {
      const rig g(s, t, cycle_ranks(12), seed++);
      for (popularity pop : {popularity::distinct, popularity::zipf}) {
        SCOPED_TRACE(trace(g, pop, 1, lora_proj::q) + " and k, v");
        const auto decode = plan_for(g.host, s.kv, decode_batch(g, pop, 33, seed++));
        expect_fused_is_single(g, decode, 1, true, seed++);
        const auto prefill = plan_for(g.host, s.kv, prefill_batch(g, pop, seed++));
        expect_fused_is_single(g, prefill, 1, false, seed++);
        expect_fused_is_single(g, prefill, 0, true, seed++);
      }
    }
}

TEST(lora_kernels, launchers_refuse_layouts_they_cannot_read) {
  TROUPE_REQUIRE_GPU();
  const rig g(odd, dtype::f16, cycle_ranks(1), 700);
  const auto plan = plan_for(g.host, odd.kv, std::vector{lora_entry(g.host, 1, 0, 0, 2, 8)});
  plan_upload up;
  const device_plan dp = up.upload(plan, nullptr);
  device_buffer<std::uint16_t> x(2 * 100);
  device_buffer<float> tmp(2 * 8);
  const auto no_row = lora_layout::make({1, 1, 2, 1}, 64, 64); // 4-element pages
  EXPECT_THROW(lora_shrink(g.t, dp, no_row, 0, lora_proj::q, x.data(), g.dev.data(), true,
                           tmp.data(), nullptr),
               std::invalid_argument);
  EXPECT_THROW(lora_expand(g.t, dp, g.l, 2, lora_proj::q, tmp.data(), g.dev.data(), false,
                           x.data(), nullptr),
               std::invalid_argument); // layer 2 of 2
  // One launch serves 1 to 3 projections, reading one input, an output each.
  constexpr lora_proj four[] = {lora_proj::q, lora_proj::k, lora_proj::v, lora_proj::o};
  EXPECT_THROW(lora_shrink(g.t, dp, g.l, 0, four, x.data(), g.dev.data(), true, tmp.data(), nullptr),
               std::invalid_argument);
  EXPECT_THROW(lora_shrink(g.t, dp, g.l, 0, std::span<const lora_proj>{}, x.data(), g.dev.data(), true,
                           tmp.data(), nullptr),
               std::invalid_argument);
  constexpr lora_proj qk[] = {lora_proj::q, lora_proj::k};
  void* const one_out[] = {x.data()};
  EXPECT_THROW(lora_expand(g.t, dp, g.l, 0, qk, tmp.data(), g.dev.data(), true, one_out, nullptr),
               std::invalid_argument);
  TROUPE_CUDA_CHECK(cudaDeviceSynchronize());
}

} // namespace
} // namespace troupe::gpu::cuda
