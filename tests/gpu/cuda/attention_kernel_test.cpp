// The paged attention and KV-write kernels (gpu/cuda/attention.cu) against
// their CPU references (gpu/cuda/reference_attention.hpp), over grids of
// element types, head dims, query heads per kv head, prefill lengths with
// and without cached context, decode batches of mixed lengths, kv_chunk
// splits on and off, page sizes and shuffled pages. Pools hold NaN wherever
// no position lives (other layers, unused slots and pages) and outputs
// start as NaN, so a stray read or a missed write shows. Skips without a GPU.
#include "gpu/cuda/check.hpp"
#include "gpu/cuda/device_buffer.hpp"
#include "gpu/cuda/kernels.hpp"
#include "gpu/cuda/plan_upload.hpp"
#include "gpu/cuda/reference_attention.hpp"
#include "gpu/cuda/reference_elementwise.hpp"

#include "tests/gpu/cuda/attention_cases.hpp"

#include "tests/gpu/cuda/gpu_test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace troupe::gpu::cuda {
namespace {

using namespace gpu_testing;

static_assert(std::is_trivially_copyable_v<attention_item>);
static_assert(std::is_trivially_copyable_v<device_plan>);

using testing::attention_case;
using testing::case_options;
using testing::make_case;
using testing::seq_spec;

// |got - want| <= atol + rtol * |want|. fp16 and bf16 outputs differ from
// the reference by their last-bit rounding and, on the prefill kernel, by
// P rounded to the element type before the P V product.
struct tolerance {
  float atol = 0;
  float rtol = 0;
};
tolerance tolerance_of(dtype t) {
  return t == dtype::f16 ? tolerance{2e-3f, 4e-3f} : tolerance{8e-3f, 1.6e-2f};
}

// The kernels' output for case `c`: [rows, heads * head_dim] bits.
std::vector<std::uint16_t> run_attention(const attention_case& c) {
  stream_holder stream;
  const auto pool = to_device(c.pool);
  const auto q = to_device(c.q);
  const std::vector<std::uint16_t> nan_out(std::size_t{c.plan.rows()} * c.width(),
                                           testing::nan_bits(c.t));
  auto out = to_device(nan_out);
  const std::uint64_t ws_floats = attention_workspace_floats(c.plan, c.heads, c.kv.head_dim);
  device_buffer<float> ws(ws_floats);
  if (ws_floats > 0) // all ones: NaN floats and 0xffffffff indices until the kernels write them
    TROUPE_CUDA_CHECK(cudaMemsetAsync(ws.data(), 0xff, ws.bytes(), stream.s));
  // The uploads ran on the legacy stream, which the test's non-blocking
  // stream does not wait for.
  TROUPE_CUDA_CHECK(cudaDeviceSynchronize());
  plan_upload upload;
  const device_plan dp = upload.upload(c.plan, stream.s);
  attention(c.t, dp, c.kv, c.layer, c.heads, c.scale, q.data(), pool.data(),
            ws_floats > 0 ? ws.data() : nullptr, out.data(), stream.s);
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(stream.s));
  TROUPE_CUDA_CHECK(cudaGetLastError());
  std::vector<std::uint16_t> host(nan_out.size());
  out.download(host);
  return host;
}

// Compares the kernels' output with the reference's, elementwise, and
// checks that every output is finite.
void expect_matches_reference(const attention_case& c, const std::vector<std::uint16_t>& got) {
  const auto want = attention_reference(c.t, c.plan, c.kv, c.layer, c.heads, c.scale, c.q, c.pool);
  ASSERT_EQ(got.size(), want.size());
  const tolerance tol = tolerance_of(c.t);
  const std::uint32_t hd = c.kv.head_dim;
  std::size_t bad = 0, non_finite = 0;
  float worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float g = from_bits(c.t, got[i]);
    const float w = from_bits(c.t, want[i]);
    if (!std::isfinite(g)) {
      if (++non_finite <= 3)
        ADD_FAILURE() << "non-finite output at row " << i / c.width() << " head "
                      << i % c.width() / hd << " dim " << i % hd;
      continue;
    }
    const float err = std::abs(g - w);
    worst = std::max(worst, err);
    if (err > tol.atol + tol.rtol * std::abs(w) && ++bad <= 5)
      ADD_FAILURE() << "row " << i / c.width() << " (position "
                    << c.plan.positions[i / c.width()] << ") head " << i % c.width() / hd
                    << " dim " << i % hd << ": " << g << " vs " << w;
  }
  EXPECT_EQ(non_finite, 0u) << "of " << got.size();
  EXPECT_EQ(bad, 0u) << "of " << got.size() << " outside tolerance; worst error " << worst;
}

void check_case(const std::vector<seq_spec>& seqs, const case_options& o) {
  SCOPED_TRACE(testing::describe(seqs, o));
  const auto c = make_case(seqs, o);
  ASSERT_TRUE(c.plan.rejected.empty());
  expect_matches_reference(c, run_attention(c));
}

// -- grids over (dtype, head_dim) ------------------------------------------------

// write_kv of rows' K and V into the case's pool, bit for bit as the
// reference writes them.
void expect_write_kv_matches_reference(attention_case& c, const std::vector<std::uint16_t>& k,
                                       const std::vector<std::uint16_t>& v) {
  stream_holder stream;
  auto pool = to_device(c.pool);
  const auto dk = to_device(k);
  const auto dv = to_device(v);
  TROUPE_CUDA_CHECK(cudaDeviceSynchronize()); // the uploads, before the non-blocking stream's work
  plan_upload upload;
  const device_plan dp = upload.upload(c.plan, stream.s);
  write_kv(c.t, dp, c.kv, c.layer, dk.data(), dv.data(), pool.data(), stream.s);
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(stream.s));
  std::vector<std::uint16_t> got(c.pool.size());
  pool.download(got);
  write_kv_reference(c.t, c.plan, c.kv, c.layer, k, v, c.pool);
  EXPECT_TRUE(got == c.pool) << "the device pool differs from the reference's";
}

// rope_write_kv on case `c` with random k and v against its two parts:
// rope then write_kv on the device, bit for bit (q, k and the pool), and
// the CPU references (rope_reference within the rope kernel's tolerance,
// write_kv_reference of the rotated k exactly). `rotary` elements of each
// head turn (0: all), cos and sin times `scale`; with `long_after`, LongRoPE:
// the rows of a sequence longer than that after the step by frequencies
// of their own.
void expect_rope_write_kv_is_rope_then_write_kv(attention_case& c, std::uint64_t seed,
                                                std::uint32_t rotary = 0, float scale = 1.0f,
                                                std::uint32_t long_after = 0) {
  const std::uint32_t rows = c.plan.rows(), hd = c.kv.head_dim;
  testing::uniform_source u{seed};
  for (auto& x : c.pool) // arbitrary finite contents
    x = to_bits(c.t, u.next());
  const std::size_t n = std::size_t{rows} * c.kv.kv_dim();
  std::vector<std::uint16_t> k(n), v(n);
  for (std::size_t i = 0; i < n; ++i) {
    k[i] = to_bits(c.t, u.next());
    v[i] = to_bits(c.t, u.next());
  }
  const std::uint32_t rot = rotary == 0 ? hd : rotary;
  std::vector<float> inv_freq(rot / 2), long_freq(rot / 2);
  for (std::uint32_t i = 0; i < rot / 2; ++i) {
    inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / rot));
    long_freq[i] = inv_freq[i] / static_cast<float>(1 + i);
  }
  auto both = inv_freq;
  both.insert(both.end(), long_freq.begin(), long_freq.end());

  stream_holder stream;
  struct run_out {
    std::vector<std::uint16_t> q, k, pool;
  };
  const auto run = [&](bool fused) {
    auto dq = to_device(c.q);
    auto dk = to_device(k);
    const auto dv = to_device(v);
    auto pool = to_device(c.pool);
    const auto inv = to_device(long_after != 0 ? both : inv_freq);
    TROUPE_CUDA_CHECK(cudaDeviceSynchronize()); // the uploads, before the non-blocking stream's work
    plan_upload upload;
    const device_plan dp = upload.upload(c.plan, stream.s);
    const rope_freqs freqs{.inv_freq = inv.data(), .rotary_dim = rotary, .scale = scale, .long_after = long_after,
                           .row_seq = dp.row_seq, .seq_len = dp.kv_len};
    if (fused) {
      rope_write_kv(c.t, dp, c.kv, c.layer, c.heads, dq.data(), dk.data(), dv.data(), freqs,
                    pool.data(), stream.s);
    } else {
      rope(c.t, dq.data(), dk.data(), dp.positions, freqs, rows, c.heads, c.kv.num_kv_heads, hd,
           stream.s);
      write_kv(c.t, dp, c.kv, c.layer, dk.data(), dv.data(), pool.data(), stream.s);
    }
    TROUPE_CUDA_CHECK(cudaStreamSynchronize(stream.s));
    TROUPE_CUDA_CHECK(cudaGetLastError());
    run_out r{std::vector<std::uint16_t>(c.q.size()), std::vector<std::uint16_t>(n),
              std::vector<std::uint16_t>(c.pool.size())};
    dq.download(r.q);
    dk.download(r.k);
    pool.download(r.pool);
    return r;
  };
  const auto fused = run(true);
  const auto parts = run(false);
  EXPECT_TRUE(fused.q == parts.q) << "q differs from rope's";
  EXPECT_TRUE(fused.k == parts.k) << "k differs from rope's";
  EXPECT_TRUE(fused.pool == parts.pool) << "the pool differs from write_kv's";

  // The references: rotation within the type's last bits, placement exact.
  auto want_q = c.q;
  auto want_k = k;
  if (long_after == 0) {
    rope_reference(c.t, want_q, want_k, c.plan.positions, inv_freq, rows, c.heads, c.kv.num_kv_heads, hd, scale);
  } else {
    std::size_t longer = 0;
    for (std::uint32_t r = 0; r < rows; ++r) { // row by row, each by its sequence's frequencies
      const bool is_long = c.plan.kv_len[c.plan.row_seq[r]] > long_after;
      longer += is_long;
      const std::size_t qn = std::size_t{c.heads} * hd, kn = c.kv.kv_dim();
      rope_reference(c.t, std::span{want_q}.subspan(r * qn, qn), std::span{want_k}.subspan(r * kn, kn),
                     std::span{c.plan.positions}.subspan(r, 1), is_long ? long_freq : inv_freq, 1, c.heads,
                     c.kv.num_kv_heads, hd, scale);
    }
    EXPECT_GT(longer, 0u);
    EXPECT_LT(longer, std::size_t{rows}); // both kinds of row
  }
  const float tol = c.t == dtype::f16 ? 2e-3f : 1.6e-2f;
  const auto near = [&](const std::vector<std::uint16_t>& got, const std::vector<std::uint16_t>& want,
                        const char* what) {
    std::size_t bad = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const float g = from_bits(c.t, got[i]), w = from_bits(c.t, want[i]);
      if (!(std::abs(g - w) <= tol * std::max(1.0f, std::abs(w))) && ++bad <= 3)
        ADD_FAILURE() << what << "[" << i << "]: " << g << " vs " << w;
    }
    EXPECT_EQ(bad, 0u) << what << ": of " << got.size();
  };
  near(fused.q, want_q, "q");
  near(fused.k, want_k, "k");
  auto want_pool = c.pool;
  write_kv_reference(c.t, c.plan, c.kv, c.layer, fused.k, v, want_pool);
  EXPECT_TRUE(fused.pool == want_pool) << "the pool is not the reference's placement of k and v";
}

class attention_kernel : public ::testing::TestWithParam<std::tuple<dtype, std::uint32_t>> {
protected:
  case_options base() const {
    case_options o;
    o.t = std::get<0>(GetParam());
    o.head_dim = std::get<1>(GetParam());
    o.kv_heads = 2;
    o.page_tokens = 16;
    return o;
  }
};

TEST_P(attention_kernel, prefill_matches_reference) {
  TROUPE_REQUIRE_GPU();
  for (std::uint32_t group : {1u, 4u})
    for (std::uint32_t tokens : {1u, 17u, 300u, 1024u})
      for (std::uint32_t context : {0u, 700u})
        for (std::uint32_t chunk : {0u, 256u}) {
          auto o = base();
          o.group = group;
          o.split = {.q_tile = 64, .kv_chunk = chunk};
          o.seed = tokens * 7 + context + chunk + group;
          check_case({{context, tokens}}, o);
        }
}

TEST_P(attention_kernel, decode_matches_reference) {
  TROUPE_REQUIRE_GPU();
  std::mt19937_64 rng{42};
  std::uniform_int_distribution<std::uint32_t> length{1, 4000};
  std::vector<std::vector<std::uint32_t>> batches{{1}, {4000}, {1, 2, 63, 64, 65, 1000, 3999}};
  for (std::uint32_t n : {17u, 64u}) {
    std::vector<std::uint32_t> lens(n);
    for (auto& l : lens)
      l = length(rng);
    lens[0] = 1;
    batches.push_back(lens);
  }
  for (std::uint32_t group : {1u, 4u})
    for (std::uint32_t chunk : {0u, 256u, 100u})
      for (const auto& lens : batches) {
        std::vector<seq_spec> seqs;
        for (auto l : lens)
          seqs.push_back({l - 1, 1});
        auto o = base();
        o.group = group;
        o.split = {.q_tile = 64, .kv_chunk = chunk};
        o.seed = lens.size() * 3 + chunk + group;
        check_case(seqs, o);
      }
}

TEST_P(attention_kernel, mixed_batches_with_odd_tiles_pages_and_groups) {
  TROUPE_REQUIRE_GPU();
  struct config {
    std::uint32_t group, page_tokens;
    attention_split split;
    bool shuffle;
  };
  const config configs[] = {
    {1, 1, {16, 100}, true},   {2, 5, {100, 17}, false}, {4, 16, {64, 256}, true},
    {7, 64, {1, 64}, true},    {8, 256, {64, 0}, true},  {16, 16, {32, 128}, true},
    {4, 16, {64, 0}, false},   {3, 7, {5, 3}, true},     {64, 16, {48, 200}, true},
  };
  const std::vector<seq_spec> seqs{{0, 130}, {5, 1}, {300, 70}, {2, 1}, {64, 64}, {1500, 1},
                                   {0, 2},   {31, 33}};
  for (const auto& cfg : configs) {
    auto o = base();
    o.group = cfg.group;
    o.page_tokens = cfg.page_tokens;
    o.split = cfg.split;
    o.shuffle_pages = cfg.shuffle;
    o.seed = cfg.group * 13 + cfg.page_tokens;
    SCOPED_TRACE(testing::describe(seqs, o));
    const auto c = make_case(seqs, o);
    ASSERT_TRUE(c.plan.rejected.empty());
    const auto first = run_attention(c);
    expect_matches_reference(c, first);
    EXPECT_EQ(run_attention(c), first) << "a second run gives other bits";
  }
}

// Mistral 7B v0.1's sliding window: windows of one position, shorter than
// a tile (64) and a query block, and longer than some contexts; prefills
// whose rows each start elsewhere, decodes whose items begin mid-page,
// unsplit and split.
TEST_P(attention_kernel, sliding_windows_match_reference) {
  TROUPE_REQUIRE_GPU();
  const std::vector<seq_spec> seqs{{0, 300}, {700, 1}, {5, 1}, {90, 70}, {0, 2}, {2000, 1}};
  for (std::uint32_t window : {1u, 37u, 64u, 500u})
    for (std::uint32_t group : {1u, 4u})
      for (std::uint32_t chunk : {0u, 100u}) {
        auto o = base();
        o.group = group;
        o.split = {.q_tile = 64, .kv_chunk = chunk};
        o.sliding_window = window;
        o.seed = window * 5 + group + chunk;
        check_case(seqs, o);
      }
}

// More query blocks than the prefill grid has blocks (about 8 per SM over
// the kv heads), so blocks take several query blocks each and reuse their
// shared memory, and more items and tiles than the prep kernel's block of
// 1024 threads scans at once, unsplit and split.
TEST_P(attention_kernel, many_short_prefills_outnumber_the_grid) {
  TROUPE_REQUIRE_GPU();
  int device = 0;
  int sms = 0;
  TROUPE_CUDA_CHECK(cudaGetDevice(&device));
  TROUPE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  // kv_heads 2: the grid has 4 * sms blocks per kv head; each sequence is
  // at least one query block of 2 to 4 rows.
  const std::uint32_t n = std::max(1100u, 5 * static_cast<std::uint32_t>(sms));
  std::vector<seq_spec> seqs;
  for (std::uint32_t i = 0; i < n; ++i)
    seqs.push_back({i * 37 % 100, 2 + i % 3});
  for (std::uint32_t chunk : {0u, 48u}) {
    auto o = base();
    o.num_layers = 1;
    o.layer = 0;
    o.group = 4;
    o.split = {.q_tile = 64, .kv_chunk = chunk};
    o.seed = 5 + chunk;
    check_case(seqs, o);
  }
}

TEST_P(attention_kernel, write_kv_matches_reference_bit_for_bit) {
  TROUPE_REQUIRE_GPU();
  const std::vector<seq_spec> seqs{{0, 37}, {16, 1}, {5, 20}, {63, 1}};
  for (std::uint32_t kv_heads : {1u, 8u}) {
    auto o = base();
    o.kv_heads = kv_heads;
    o.num_layers = 3;
    o.layer = 2;
    auto c = make_case(seqs, o);
    SCOPED_TRACE(testing::describe(seqs, o));
    testing::uniform_source u{99};
    for (auto& x : c.pool) // arbitrary finite contents
      x = to_bits(c.t, u.next());
    const std::size_t n = std::size_t{c.plan.rows()} * c.kv.kv_dim();
    std::vector<std::uint16_t> k(n), v(n);
    for (std::size_t i = 0; i < n; ++i) {
      k[i] = to_bits(c.t, u.next());
      v[i] = to_bits(c.t, u.next());
    }
    expect_write_kv_matches_reference(c, k, v);
  }
}

TEST_P(attention_kernel, rope_write_kv_is_rope_then_write_kv_bit_for_bit) {
  TROUPE_REQUIRE_GPU();
  const std::vector<seq_spec> seqs{{0, 37}, {16, 1}, {5, 20}, {63, 1}, {500, 1}};
  for (std::uint32_t kv_heads : {1u, 8u})
    for (std::uint32_t group : {1u, 4u}) {
      auto o = base();
      o.kv_heads = kv_heads;
      o.group = group;
      o.num_layers = 3;
      o.layer = 2;
      auto c = make_case(seqs, o);
      SCOPED_TRACE(testing::describe(seqs, o));
      expect_rope_write_kv_is_rope_then_write_kv(c, 31 + kv_heads + group);
    }
}

TEST_P(attention_kernel, partial_rotary_with_a_scale_is_rope_then_write_kv) {
  TROUPE_REQUIRE_GPU();
  // Phi-4 mini's three quarters of each head turn (LongRoPE's attention
  // factor on cos and sin); the rest of K reaches the cache unturned.
  const std::vector<seq_spec> seqs{{0, 37}, {16, 1}, {500, 1}};
  auto o = base();
  o.kv_heads = 2;
  o.group = 3;
  auto c = make_case(seqs, o);
  const std::uint32_t rotary = 3 * o.head_dim / 4;
  SCOPED_TRACE(testing::describe(seqs, o) + " rotary " + std::to_string(rotary));
  expect_rope_write_kv_is_rope_then_write_kv(c, 77, rotary, 1.19f);
  // LongRoPE past 40 positions: the 37-token prefill and the 17th token by
  // the short factors, the 501st by the long ones.
  expect_rope_write_kv_is_rope_then_write_kv(c, 78, rotary, 1.19f, 40);
}

std::string shape_name(const ::testing::TestParamInfo<std::tuple<dtype, std::uint32_t>>& info) {
  return std::string(to_string(std::get<0>(info.param))) + "_hd" +
         std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(shapes, attention_kernel,
                         ::testing::Combine(::testing::Values(dtype::f16, dtype::bf16),
                                            ::testing::Values(64u, 128u)),
                         shape_name);

// -- single cases ------------------------------------------------------------------------

TEST(attention_kernel_edges, write_kv_with_a_kv_dim_not_a_multiple_of_eight) {
  TROUPE_REQUIRE_GPU();
  // 3 kv heads of 6: the element-wise path.
  case_options o{.t = dtype::bf16, .kv_heads = 3, .head_dim = 6, .page_tokens = 4};
  auto c = make_case({{0, 9}, {3, 1}}, o);
  const std::size_t n = std::size_t{c.plan.rows()} * c.kv.kv_dim();
  std::vector<std::uint16_t> k(n), v(n);
  for (std::size_t i = 0; i < n; ++i) {
    k[i] = static_cast<std::uint16_t>(i + 1);
    v[i] = static_cast<std::uint16_t>(i + 7001);
  }
  expect_write_kv_matches_reference(c, k, v);
}

TEST(attention_kernel_edges, rope_write_kv_element_by_element_and_its_errors) {
  TROUPE_REQUIRE_GPU();
  // 3 kv heads of 6 (half 3: no 16-byte packs), two query heads each.
  case_options o{.t = dtype::bf16, .kv_heads = 3, .group = 2, .head_dim = 6, .page_tokens = 4};
  auto c = make_case({{0, 9}, {3, 1}}, o);
  expect_rope_write_kv_is_rope_then_write_kv(c, 8);
  expect_rope_write_kv_is_rope_then_write_kv(c, 9, 4, 1.5f); // two of three pairs turn
  const device_plan empty{};
  EXPECT_THROW(rope_write_kv(c.t, empty, c.kv, c.kv.num_layers, c.heads, nullptr, nullptr, nullptr,
                             rope_freqs{}, nullptr, nullptr),
               std::invalid_argument);
  kv_layout odd = c.kv;
  odd.head_dim = 7;
  EXPECT_THROW(rope_write_kv(c.t, empty, odd, 0, c.heads, nullptr, nullptr, nullptr, rope_freqs{},
                             nullptr, nullptr),
               std::invalid_argument);
  // LongRoPE without each row's sequence length.
  EXPECT_THROW(rope_write_kv(c.t, empty, c.kv, 0, c.heads, nullptr, nullptr, nullptr,
                             rope_freqs{.inv_freq = nullptr, .rotary_dim = 0, .scale = 1.0f, .long_after = 16},
                             nullptr, nullptr),
               std::invalid_argument);
  for (std::uint32_t rotary : {3u, 8u}) // odd, past the head
    EXPECT_THROW(rope_write_kv(c.t, empty, c.kv, 0, c.heads, nullptr, nullptr, nullptr,
                               rope_freqs{nullptr, rotary, 1.0f}, nullptr, nullptr),
                 std::invalid_argument);
}

TEST(attention_kernel_edges, the_workspace_is_needed_unless_an_unsplit_decode) {
  TROUPE_REQUIRE_GPU();
  const auto decode = make_case({{10, 1}, {200, 1}}, {.split = {.q_tile = 64, .kv_chunk = 0}});
  EXPECT_EQ(attention_workspace_floats(decode.plan, decode.heads, 64), 0u);
  const auto split = make_case({{10, 1}, {200, 1}}, {.split = {.q_tile = 64, .kv_chunk = 64}});
  // Items: 1 + 4 (a tile of one, a tile of four); the header (2 * 5 + 1
  // uint32, padded to 32 floats) and 4 slots of one row for the split tile.
  EXPECT_EQ(attention_workspace_floats(split.plan, split.heads, 64), 32u + 4u * split.heads * 66);
  const auto prefill = make_case({{0, 20}}, {.split = {.q_tile = 64, .kv_chunk = 0}});
  EXPECT_EQ(attention_workspace_floats(prefill.plan, prefill.heads, 64), 32u);
}

TEST(attention_kernel_edges, unsupported_shapes_and_a_missing_workspace_are_refused) {
  TROUPE_REQUIRE_GPU();
  const auto c = make_case({{3, 5}}, {.group = 2, .head_dim = 64});
  stream_holder stream;
  plan_upload upload;
  const device_plan dp = upload.upload(c.plan, stream.s);
  const auto pool = to_device(c.pool);
  const auto q = to_device(c.q);
  device_buffer<std::uint16_t> out(c.q.size());
  device_buffer<float> ws(attention_workspace_floats(c.plan, c.heads, 64) + 1);
  auto run = [&](const kv_layout& kv, std::uint32_t heads, float* partial) {
    attention(c.t, dp, kv, c.layer, heads, c.scale, q.data(), pool.data(), partial, out.data(),
              stream.s);
  };
  kv_layout hd96 = c.kv;
  hd96.head_dim = 96;
  EXPECT_THROW(run(hd96, c.heads, ws.data()), std::invalid_argument);
  EXPECT_THROW(run(c.kv, 3, ws.data()), std::invalid_argument);
  EXPECT_THROW(run(c.kv, c.kv.num_kv_heads * 65, ws.data()), std::invalid_argument);
  EXPECT_THROW(run(c.kv, c.heads, nullptr), std::invalid_argument); // a prefill needs one
  EXPECT_THROW(attention(c.t, dp, c.kv, c.layer, c.heads, c.scale, q.data() + 1, pool.data(),
                         ws.data(), out.data(), stream.s),
               std::invalid_argument); // q not 16-byte aligned
  kv_layout past = c.kv;
  past.num_layers = c.layer;
  EXPECT_THROW(run(past, c.heads, ws.data()), std::invalid_argument);
  EXPECT_THROW(write_kv(c.t, dp, past, c.layer, q.data(), q.data(), out.data(), stream.s),
               std::invalid_argument);
  EXPECT_NO_THROW(run(c.kv, c.heads, ws.data()));
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(stream.s));
}

} // namespace
} // namespace troupe::gpu::cuda
