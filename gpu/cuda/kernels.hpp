// The CUDA backend's kernels, as host-side launchers. Element arrays are
// fp16 or bf16 (`dtype`), accumulation is fp32; every launcher enqueues on
// `stream` and returns at once (cudaGetLastError reports a bad launch).
// Pointers are device pointers. Each kernel has a CPU reference of the same
// signature in gpu/cuda/reference_*.hpp, and tests/gpu/cuda compares the two.
#pragma once

#include "gpu/cuda/dtype.hpp"
#include "gpu/cuda/plan.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

namespace troupe::gpu::cuda {

/// A batch_plan's arrays copied to the device (the backend uploads them in
/// one copy per step); the sizes are the plan's.
struct device_plan {
  std::uint32_t seqs = 0;
  std::uint32_t rows = 0;
  const std::int32_t* token_ids = nullptr;
  const std::int32_t* positions = nullptr;
  const std::uint32_t* row_seq = nullptr;
  const std::uint32_t* qo_indptr = nullptr;
  const std::uint32_t* last_row = nullptr;
  const std::uint32_t* kv_indptr = nullptr;
  const std::uint32_t* kv_pages = nullptr;
  const std::uint32_t* kv_len = nullptr;
  const std::uint32_t* row_page = nullptr;
  const std::uint32_t* row_slot = nullptr;
  const lora_slot* slots = nullptr;
  const std::uint32_t* lora_pages = nullptr;
  const std::int32_t* row_lora = nullptr;
  const lora_segment* segments = nullptr;
  std::uint32_t num_segments = 0;
  std::uint32_t max_rank = 0;
  const attention_item* items = nullptr;
  std::uint32_t num_items = 0;
  const std::uint32_t* tile_indptr = nullptr;
  std::uint32_t num_tiles = 0;
  const sample_params* sampling = nullptr;
  /// batch_plan's logit adjustments (null when none).
  const std::uint32_t* adjust_indptr = nullptr;
  const std::int32_t* adjust_tokens = nullptr;
  const float* adjust_deltas = nullptr;
  const std::uint8_t* adjust_repeated = nullptr;
  std::uint32_t max_new_tokens = 0;
  std::uint32_t max_kv_len = 0;
  std::uint32_t sliding_window = 0; ///< batch_plan's; 0: none
};

// -- elementwise and normalisation -------------------------------------------

/// out[r] = table[ids[r]] for r < rows; table is [vocab, hidden].
void embedding_gather(dtype t, const void* table, const std::int32_t* ids, std::uint32_t rows,
                      std::uint32_t hidden, void* out, cudaStream_t stream);

/// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, in fp32, rounded once.
void rmsnorm(dtype t, const void* x, const void* weight, float eps, std::uint32_t rows,
             std::uint32_t hidden, void* out, cudaStream_t stream);

/// residual[r] += x[r] (rounded to t), then out[r] = rmsnorm(residual[r]):
/// the residual add fused with the next layer's norm.
void add_rmsnorm(dtype t, void* residual, const void* x, const void* weight, float eps,
                 std::uint32_t rows, std::uint32_t hidden, void* out, cudaStream_t stream);

/// A model's rotary embedding on the device (rope_table): the leading
/// rotary_dim elements of each head turn, element i < rotary_dim/2 pairing
/// with i + rotary_dim/2 at angle positions[r] * inv_freq[i] ([rotary_dim/2]
/// fp32, any scaling applied), cos and sin multiplied by `scale`; the rest
/// of the head passes through. rotary_dim 0: the whole head. LongRoPE
/// (long_after > 0): inv_freq holds the short factors' frequencies and then
/// the long ones', and row r turns by the long ones where its sequence
/// (row_seq[r]) holds more than long_after tokens after the step
/// (seq_len[...], device_plan::kv_len).
struct rope_freqs {
  const float* inv_freq = nullptr;
  std::uint32_t rotary_dim = 0;
  float scale = 1.0f;
  std::uint32_t long_after = 0;
  const std::uint32_t* row_seq = nullptr; ///< [rows], with long_after
  const std::uint32_t* seq_len = nullptr; ///< [seqs], with long_after
};

/// Rotary embeddings in place, Hugging Face Llama's rotate-half form, as
/// `freqs` says. q: [rows, heads * head_dim], k: [rows, kv_heads * head_dim].
/// Throws std::invalid_argument for an odd head_dim or rotary_dim, or a
/// rotary_dim past head_dim.
void rope(dtype t, void* q, void* k, const std::int32_t* positions, rope_freqs freqs,
          std::uint32_t rows, std::uint32_t heads, std::uint32_t kv_heads, std::uint32_t head_dim,
          cudaStream_t stream);

/// rope(q, k) and then write_kv(k, v) in one launch, bit for bit the two:
/// q and k ([rows, heads * head_dim], [rows, kv_heads * head_dim]) rotated
/// in place at plan.positions, and each row's K (its rotated part and the
/// rest) and its V written into its page and slot (plan.row_page,
/// plan.row_slot) of `layer` in `pool`; kv_heads and head_dim are the
/// layout's. Throws std::invalid_argument as rope() does, or for a layer
/// outside the pool.
void rope_write_kv(dtype t, const device_plan& plan, const kv_layout& kv, std::uint32_t layer,
                   std::uint32_t heads, void* q, void* k, const void* v, rope_freqs freqs,
                   void* pool, cudaStream_t stream);

/// out[r, i] = silu(gate_up[r, i]) * gate_up[r, inter + i]; gate_up is the
/// fused [rows, 2 * inter] output of the gate and up projections.
void swiglu(dtype t, const void* gate_up, std::uint32_t rows, std::uint32_t inter, void* out,
            cudaStream_t stream);

/// x[r, i] += bias[i] in place, in fp32, rounded once: a projection's bias
/// (Qwen2's q, k and v) added to its output. x: [rows, cols]; bias: [cols].
void add_bias(dtype t, void* x, const void* bias, std::uint32_t rows, std::uint32_t cols,
              cudaStream_t stream);

// -- matrix-vector products -------------------------------------------------------

/// The most rows gemv takes.
constexpr std::uint32_t gemv_max_rows = 4;

/// y_z[r, o] = sum_k x[r, k] * w_z[o, k] for z < count, r < rows, o < out
/// (x: [rows, in]; w_z: [out, in] at w + z * w_stride; y_z: [rows, out] at
/// y + z * y_stride elements; type t, or fp32 out when `out_f32`), fp32
/// sums rounded once: what blas::linear_batched computes, for decode's few
/// rows, one warp per output reading its weight row once in 16-byte loads.
/// Returns false, enqueuing nothing, unless 1 <= rows <= gemv_max_rows,
/// in and w_stride are multiples of 8, count <= 65535, and x and w are
/// 16-byte aligned (the caller then uses cuBLAS).
bool gemv(dtype t, const void* x, const void* w, std::uint64_t w_stride, void* y,
          std::uint64_t y_stride, std::uint32_t rows, std::uint32_t in, std::uint32_t out,
          std::uint32_t count, bool out_f32, cudaStream_t stream);

// -- paged KV cache and attention ----------------------------------------------

/// Writes each row's K and V ([rows, kv_dim] each) into its page and slot
/// (plan.row_page, plan.row_slot) of `layer` in `pool`.
void write_kv(dtype t, const device_plan& plan, const kv_layout& kv, std::uint32_t layer,
              const void* k, const void* v, void* pool, cudaStream_t stream);

/// Attention over the paged cache for every row of the plan, causal, with
/// grouped-query heads (head h reads kv head h / (heads / kv_heads)):
/// out[r] = softmax(q[r] K^T * scale) V over the positions <= positions[r]
/// of the row's sequence. The plan's items are computed independently and a
/// split tile's items merged into out by their softmax max and sum; `partial`
/// (attention_workspace_floats(plan, heads, head_dim) fp32; may be null when
/// that is 0) holds the items' query blocks, slots and partials (gpu/cuda/
/// attention.cu). head_dim 64 or 128 and at most 64 query heads per kv head,
/// else std::invalid_argument (also for a missing workspace).
void attention(dtype t, const device_plan& plan, const kv_layout& kv, std::uint32_t layer,
               std::uint32_t heads, float scale, const void* q, const void* pool, float* partial,
               void* out, cudaStream_t stream);

/// fp32 workspace `attention` needs for `plan`: 0 for a decode-only plan
/// whose tiles are unsplit, else > 0.
std::uint64_t attention_workspace_floats(const batch_plan& plan, std::uint32_t heads,
                                         std::uint32_t head_dim) noexcept;

// -- LoRA over adapter pages (S-LoRA's MBGMM / MBGMV, Punica's SGMV / BGMV) ----

/// Shrink: tmp[r, j] = sum_k x[r, k] * A[j, k] for j < rank of the row's
/// adapter (tmp: [rows, plan.max_rank] fp32; entries j >= rank and rows with
/// no adapter untouched). x: [rows, in_dim(proj)]. `gathered` picks the
/// decode kernel (one row per sequence, plan.row_lora) over the segmented one
/// (plan.segments); both give the same result. Adapter pages lie
/// lora.page_elems elements apart in `pool` (the page size of the
/// kv_layout `lora` was made from; gpu/cuda/lora_pack.hpp); a layout with no
/// such size, or a layer past it, throws std::invalid_argument. CPU
/// references of both launchers: gpu/cuda/reference_lora.hpp.
void lora_shrink(dtype t, const device_plan& plan, const lora_layout& lora, std::uint32_t layer,
                 lora_proj proj, const void* x, const void* pool, bool gathered, float* tmp,
                 cudaStream_t stream);

/// Expand: y[r, o] += scale * sum_{j < rank} tmp[r, j] * B[o, j], rounded to
/// t once; rows with no adapter untouched. y: [rows, out_dim(proj)].
void lora_expand(dtype t, const device_plan& plan, const lora_layout& lora, std::uint32_t layer,
                 lora_proj proj, const float* tmp, const void* pool, bool gathered, void* y,
                 cudaStream_t stream);

/// Projections one launch of the two below serves.
inline constexpr unsigned lora_max_fused = 3;

/// The shrink of up to lora_max_fused projections of one layer that read
/// the same x (q, k and v) in one launch: projection i's tmp is [rows,
/// plan.max_rank] at tmp + i * rows * plan.max_rank. Each result is the
/// one-projection launcher's, bit for bit. Projections whose in_dim differ
/// throw std::invalid_argument.
void lora_shrink(dtype t, const device_plan& plan, const lora_layout& lora, std::uint32_t layer,
                 std::span<const lora_proj> projs, const void* x, const void* pool, bool gathered,
                 float* tmp, cudaStream_t stream);

/// The expand of up to lora_max_fused projections of one layer in one
/// launch: projection i's tmp as the shrink above left it, its output
/// ys[i] ([rows, out_dim(projs[i])]). Bit for bit the one-projection
/// launcher's.
void lora_expand(dtype t, const device_plan& plan, const lora_layout& lora, std::uint32_t layer,
                 std::span<const lora_proj> projs, const float* tmp, const void* pool, bool gathered,
                 std::span<void* const> ys, cudaStream_t stream);

// -- sampling ------------------------------------------------------------------

/// One token per sequence from logits [seqs, vocab] fp32 (the rows already
/// picked by plan.last_row), by gpu/sampling.hpp's rules: greedy at or below
/// temperature 0 (lowest id on ties, NaN never wins), else softmax at the
/// temperature, min-p, top-k, top-p, and the draw uniform01(seed, output_index),
/// walking tokens by descending probability, ties by lower id.
void sample(const device_plan& plan, const float* logits, std::uint32_t vocab,
            std::int32_t* tokens, cudaStream_t stream);

/// out [seqs, vocab] = logits adjusted by plan.adjust_* as gpu::
/// apply_logit_adjust adjusts them (step_entry::logit_adjust: the repeated
/// tokens' penalty from plan.sampling, then the deltas; a token outside
/// the vocabulary is ignored): what sample()
/// draws from when any sequence adjusts its logits; `logits` stay the
/// model's, for the log-probabilities.
void adjust_logits(const device_plan& plan, const float* logits, std::uint32_t vocab, float* out,
                   cudaStream_t stream);

} // namespace troupe::gpu::cuda
