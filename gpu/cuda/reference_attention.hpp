// CPU references of the paged KV write and of paged attention
// (gpu/cuda/kernels.hpp's write_kv and attention, gpu/cuda/attention.cu):
// the same plan, the same pool layout, element arrays as fp16 or bf16 bits,
// fp32 math and outputs rounded once to the element type (the prefill
// kernel also rounds probabilities to it for its P V product on tensor
// cores; the kernel tests' tolerances allow for that). The kernel tests
// compare the kernels against them; the oracle test checks them against the
// cpu backend's model. Plain C++, no CUDA; every function is pure (but for
// write_kv_reference's pool) and may be called from any thread.
#pragma once

#include "gpu/cuda/dtype.hpp"
#include "gpu/cuda/plan.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace troupe::gpu::cuda {

/// Cache positions the attention kernels read per step of their online
/// softmax; the reference walks an item in the same steps.
inline constexpr std::uint32_t attention_kv_tile = 64;

/// One attention item's result for its query rows and every head, before
/// the items of its tile are merged (flash-decoding's partial).
struct attention_partial {
  std::uint32_t rows = 0;     ///< the item's query rows, q_end - q_begin
  std::uint32_t heads = 0;
  std::uint32_t head_dim = 0;
  std::vector<float> o; ///< [rows, heads, head_dim] sum_t p_t v_t / l, 0 where l is 0
  std::vector<float> m; ///< [rows, heads] largest scaled score seen; -inf where none was
  std::vector<float> l; ///< [rows, heads] sum_t exp(score_t - m)
};

// -- paged KV write -------------------------------------------------------------

/// write_kv: row r's K and V ([rows, kv_dim] bits each) go to page
/// plan.row_page[r], slot plan.row_slot[r] of `layer` in `pool` ([pool pages
/// * kv.page_elems()] bits); everything else in the pool stays. The bits are
/// copied unchanged, so `t` only names the type. Throws
/// std::invalid_argument when a span is too short or a page lies outside the
/// pool. Pure apart from pool; any thread.
void write_kv_reference(dtype t, const batch_plan& plan, const kv_layout& kv, std::uint32_t layer,
                        std::span<const std::uint16_t> k, std::span<const std::uint16_t> v,
                        std::span<std::uint16_t> pool);

// -- attention --------------------------------------------------------------------

/// The partial of plan.items[item]: for each of its rows and each head h,
/// softmax(q K^T * scale) V over its cache positions [kv_begin, kv_end) that
/// the row sees (position <= the row's, and within plan.sliding_window of
/// it), with K and V of kv head
/// h / (heads / kv.num_kv_heads), walked attention_kv_tile positions at a
/// time with a running max and sum. q: [rows, heads * head_dim] bits; pool
/// as for write_kv_reference. Throws std::invalid_argument on bad shapes.
attention_partial attention_item_reference(dtype t, const batch_plan& plan, const kv_layout& kv,
                                           std::uint32_t layer, std::uint32_t heads, float scale,
                                           std::span<const std::uint16_t> q,
                                           std::span<const std::uint16_t> pool, std::uint32_t item);

/// Merges the partials of one tile's items (same rows, heads, head_dim):
/// out = sum_k w_k o_k / sum_k w_k with w_k = l_k exp(m_k - max_k m_k);
/// [rows, heads, head_dim] fp32, 0 where no item saw a position. Throws
/// std::invalid_argument when the partials differ in shape or none is given.
std::vector<float> merge_attention_partials(std::span<const attention_partial> parts);

/// What `attention` computes, before the final rounding: every tile's items
/// computed (attention_item_reference) and merged (a tile of one item takes
/// its o as is). [rows, heads * head_dim] fp32.
std::vector<float> attention_reference_f32(dtype t, const batch_plan& plan, const kv_layout& kv,
                                           std::uint32_t layer, std::uint32_t heads, float scale,
                                           std::span<const std::uint16_t> q,
                                           std::span<const std::uint16_t> pool);

/// attention_reference_f32 rounded to `t`: [rows, heads * head_dim] bits.
std::vector<std::uint16_t> attention_reference(dtype t, const batch_plan& plan,
                                               const kv_layout& kv, std::uint32_t layer,
                                               std::uint32_t heads, float scale,
                                               std::span<const std::uint16_t> q,
                                               std::span<const std::uint16_t> pool);

/// Plain attention, ignoring the plan's items and tiles: each row against
/// all positions <= its own of its sequence (within plan.sliding_window of
/// it), max and sum over all of them at
/// once (the split's yardstick). [rows, heads * head_dim] fp32.
std::vector<float> attention_unsplit_reference_f32(dtype t, const batch_plan& plan,
                                                   const kv_layout& kv, std::uint32_t layer,
                                                   std::uint32_t heads, float scale,
                                                   std::span<const std::uint16_t> q,
                                                   std::span<const std::uint16_t> pool);

/// attention_unsplit_reference_f32 rounded to `t`.
std::vector<std::uint16_t> attention_unsplit_reference(dtype t, const batch_plan& plan,
                                                       const kv_layout& kv, std::uint32_t layer,
                                                       std::uint32_t heads, float scale,
                                                       std::span<const std::uint16_t> q,
                                                       std::span<const std::uint16_t> pool);

} // namespace troupe::gpu::cuda
