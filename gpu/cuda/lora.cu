// The LoRA launchers of kernels.hpp: check the layout, find the pool's page
// size, pick 16-byte or scalar loads by the alignment of the arrays, dispatch
// the element type and launch the gathered or segmented kernel.
#include "gpu/cuda/dispatch.cuh"
#include "gpu/cuda/kernels.hpp"
#include "gpu/cuda/lora_gathered.cuh"
#include "gpu/cuda/lora_segmented.cuh"
#include "gpu/cuda/lora_pack.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>

namespace troupe::gpu::cuda {

namespace {

using namespace lora_detail;

// The rows of (layer, proj, side) of the plan's adapters; throws
// std::invalid_argument for a layout the kernels cannot read.
weight_rows rows_of(const device_plan& plan, const lora_layout& lora, std::uint32_t layer,
                    lora_proj proj, std::uint32_t side, const char* who) {
  if (layer >= lora.num_layers)
    throw std::invalid_argument(std::string(who) + ": layer " + std::to_string(layer) + " of " +
                                std::to_string(lora.num_layers));
  const std::uint64_t page_elems = lora.page_elems;
  if (lora.rows_per_page == 0)
    throw std::invalid_argument(std::string(who) + ": pool pages of " + std::to_string(page_elems) +
                                " elements hold no LoRA row of " + std::to_string(lora.row_width));
  weight_rows w{};
  w.slots = plan.slots;
  w.pages = plan.lora_pages;
  w.page_elems = page_elems;
  w.row_width = lora.row_width;
  w.rows_per_page = lora.rows_per_page;
  w.block = (layer * lora_proj_count + static_cast<std::uint32_t>(proj)) * 2 + side;
  return w;
}


// 16-byte loads need every row start, in the activations and in the pool,
// on a 16-byte boundary.
bool vectorizable(std::uint32_t dim, const weight_rows& w, const void* act, const void* pool) {
  return dim % 8 == 0 && w.row_width % 8 == 0 && w.page_elems % 8 == 0 && aligned16(act) &&
         aligned16(pool);
}

unsigned blocks(std::uint64_t n, std::uint64_t per) { return static_cast<unsigned>((n + per - 1) / per); }

template <class T, unsigned Vec>
void shrink_launch(const device_plan& plan, const weight_rows& w, std::uint32_t in_dim,
                   const void* x, const void* pool, bool gathered, float* tmp,
                   cudaStream_t stream) {
  const T* xt = static_cast<const T*>(x);
  const T* pt = static_cast<const T*>(pool);
  if (gathered) {
    const dim3 grid(plan.rows, blocks(plan.max_rank, gathered_warps));
    shrink_gathered<T, Vec><<<grid, dim3(32, gathered_warps), 0, stream>>>(
      xt, pt, w, plan.row_lora, in_dim, plan.max_rank, tmp);
  } else {
    const dim3 grid(blocks(plan.rows, shrink_tm) + plan.num_segments,
                    blocks(plan.max_rank, shrink_tj));
    shrink_segmented<T, Vec><<<grid, segmented_threads, 0, stream>>>(
      xt, pt, w, plan.segments, plan.num_segments, in_dim, plan.max_rank, tmp);
  }
}

template <class T, unsigned Vec>
void expand_launch(const device_plan& plan, const weight_rows& w, std::uint32_t out_dim,
                   const float* tmp, const void* pool, bool gathered, void* y,
                   cudaStream_t stream) {
  T* yt = static_cast<T*>(y);
  const T* pt = static_cast<const T*>(pool);
  if (gathered) {
    const dim3 grid(plan.rows, blocks(out_dim, expand_threads * Vec));
    const std::size_t smem = std::size_t{plan.max_rank} * (sizeof(const T*) + sizeof(float));
    expand_gathered<T, Vec><<<grid, expand_threads, smem, stream>>>(
      tmp, pt, w, plan.row_lora, out_dim, plan.max_rank, yt);
  } else {
    const dim3 grid(blocks(plan.rows, expand_tm) + plan.num_segments,
                    blocks(out_dim, expand_tn));
    expand_segmented<T, Vec><<<grid, segmented_threads, 0, stream>>>(
      tmp, pt, w, plan.segments, plan.num_segments, out_dim, plan.max_rank, yt);
  }
}

template <class T>
void shrink_typed(bool vec, const device_plan& plan, const weight_rows& w, std::uint32_t in_dim,
                  const void* x, const void* pool, bool gathered, float* tmp,
                  cudaStream_t stream) {
  if (vec)
    shrink_launch<T, 8>(plan, w, in_dim, x, pool, gathered, tmp, stream);
  else
    shrink_launch<T, 1>(plan, w, in_dim, x, pool, gathered, tmp, stream);
}

template <class T>
void expand_typed(bool vec, const device_plan& plan, const weight_rows& w, std::uint32_t out_dim,
                  const float* tmp, const void* pool, bool gathered, void* y,
                  cudaStream_t stream) {
  if (vec)
    expand_launch<T, 8>(plan, w, out_dim, tmp, pool, gathered, y, stream);
  else
    expand_launch<T, 1>(plan, w, out_dim, tmp, pool, gathered, y, stream);
}

// Nothing to do: no rows, no adapter, or (segmented) no segment.
bool no_work(const device_plan& plan, bool gathered) {
  return plan.rows == 0 || plan.max_rank == 0 || (!gathered && plan.num_segments == 0);
}

} // namespace

void lora_shrink(dtype t, const device_plan& plan, const lora_layout& lora, std::uint32_t layer,
                 lora_proj proj, const void* x, const void* pool, bool gathered, float* tmp,
                 cudaStream_t stream) {
  if (no_work(plan, gathered))
    return;
  const weight_rows w = rows_of(plan, lora, layer, proj, 0, "lora_shrink");
  const std::uint32_t in_dim = lora.in_dim(proj);
  if (in_dim == 0)
    throw std::invalid_argument("lora_shrink: input dimension 0");
  const bool vec = vectorizable(in_dim, w, x, pool);
  dispatch_dtype(t, "lora_shrink", [&](auto tag) {
    using T = typename decltype(tag)::type;
    shrink_typed<T>(vec, plan, w, in_dim, x, pool, gathered, tmp, stream);
  });
}

void lora_expand(dtype t, const device_plan& plan, const lora_layout& lora, std::uint32_t layer,
                 lora_proj proj, const float* tmp, const void* pool, bool gathered, void* y,
                 cudaStream_t stream) {
  if (no_work(plan, gathered))
    return;
  const weight_rows w = rows_of(plan, lora, layer, proj, 1, "lora_expand");
  const std::uint32_t out_dim = lora.out_dim(proj);
  if (out_dim == 0)
    throw std::invalid_argument("lora_expand: output dimension 0");
  if (gathered && std::uint64_t{plan.max_rank} * 12 > 48 * 1024)
    throw std::invalid_argument("lora_expand: rank " + std::to_string(plan.max_rank) +
                                " is past the gathered kernel's 4096");
  const bool vec = vectorizable(out_dim, w, y, pool);
  dispatch_dtype(t, "lora_expand", [&](auto tag) {
    using T = typename decltype(tag)::type;
    expand_typed<T>(vec, plan, w, out_dim, tmp, pool, gathered, y, stream);
  });
}

} // namespace troupe::gpu::cuda
