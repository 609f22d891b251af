// CPU references of the LoRA launchers of gpu/cuda/kernels.hpp (lora_shrink,
// lora_expand): the same plan, layout and pool, element arrays as fp16 or
// bf16 bits, the same rounding points (products and sums in fp32, tmp kept
// in fp32, y rounded once after adding scale * delta to its fp32 value).
// Plain C++; the kernel tests and the oracle test compare against them.
#pragma once

#include "gpu/cuda/dtype.hpp"
#include "gpu/cuda/plan.hpp"

#include <cstdint>
#include <span>

namespace troupe::gpu::cuda {

/// Shrink: tmp[r, j] = sum_k x[r, k] * A[j, k] (fp32, k ascending) for every
/// row r with an adapter (plan.row_lora[r] >= 0) and j < its rank; other
/// entries untouched. x: [rows, in_dim(proj)] bits of `t`; pool: [pool pages
/// * lora.page_elems] bits; tmp: [rows, plan.max_rank]. Throws
/// std::invalid_argument when a span is too short or the layout's page size
/// is unknown, std::out_of_range when an adapter row lies outside the pool.
/// Pure apart from tmp; any thread.
void lora_shrink_reference(dtype t, const batch_plan& plan, const lora_layout& lora,
                           std::uint32_t layer, lora_proj proj, std::span<const std::uint16_t> x,
                           std::span<const std::uint16_t> pool, std::span<float> tmp);

/// Expand: y[r, o] = round_t(y[r, o] + scale * sum_{j < rank} tmp[r, j] *
/// B[o, j]) in fp32 (j ascending) for rows with an adapter; rows without
/// untouched. tmp: [rows, plan.max_rank]; y: [rows, out_dim(proj)] bits.
/// Throws as lora_shrink_reference. Pure apart from y; any thread.
void lora_expand_reference(dtype t, const batch_plan& plan, const lora_layout& lora,
                           std::uint32_t layer, lora_proj proj, std::span<const float> tmp,
                           std::span<const std::uint16_t> pool, std::span<std::uint16_t> y);

} // namespace troupe::gpu::cuda
