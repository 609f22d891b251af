// Adapter weights in the unified pool's pages: the host-side packer that lays
// a PEFT adapter (gpu/lora.hpp, fp32) out in lora_layout's rows as fp16 or
// bf16 bits, ready to copy page by page into the adapter's pool pages, and
// the accessors the CPU references and tests read those pages back with.
// Plain C++ (no CUDA); the adapter loader and the kernel tests use it.
#pragma once

#include "gpu/cuda/dtype.hpp"
#include "gpu/cuda/plan.hpp"
#include "gpu/lora.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

namespace troupe::gpu::cuda {

// -- packing -----------------------------------------------------------------

/// `a` as lora_layout's rows in pages of l.page_elems elements:
/// pages(a.rank) pages one after the other, row i at page i / rows_per_page,
/// element (i % rows_per_page) * row_width; A rows hold lora_A's rows
/// (in_dim used), B rows lora_B's columns (out_dim used); the rest of each
/// row, each page's tail and the rows of projections `a` does not target are
/// zero. Refused, with the reason: a target outside q/k/v/o (named), rank 0,
/// a layer count or matrix size that does not fit `l` (layer and module
/// named), a layout whose page size cannot be known, a weight that is not
/// finite in type `t`. Pure; any thread.
std::variant<std::vector<std::uint16_t>, std::string>
pack_lora_adapter(const lora_adapter& a, const lora_layout& l, dtype t);

// -- reading pages back ---------------------------------------------------------

/// Pool element offset of the first element of row j of (layer, p, side)
/// of an adapter of rank `rank` whose pages are `pages` (in row order):
/// side 0 is row j of A [r, in_dim], side 1 column j of B [out_dim, r].
/// `page_elems` is l.page_elems. Throws std::out_of_range when
/// the row's page is not in `pages`. Pure; any thread.
std::uint64_t lora_row_offset(const lora_layout& l, std::uint64_t page_elems,
                              std::span<const std::uint32_t> pages, std::uint32_t rank,
                              std::uint32_t layer, lora_proj p, std::uint32_t side,
                              std::uint32_t j);

/// The element of that row at k (A[j][k] for side 0, B[k][j] for side 1),
/// as type bits, read from `pool` ([pool pages * page_elems]). Throws
/// std::out_of_range when k is past the row or the element lies outside
/// `pool`. Pure; any thread.
std::uint16_t lora_element(std::span<const std::uint16_t> pool, const lora_layout& l,
                           std::span<const std::uint32_t> pages, std::uint32_t rank,
                           std::uint32_t layer, lora_proj p, std::uint32_t side, std::uint32_t j,
                           std::uint32_t k);

} // namespace troupe::gpu::cuda
