// The LoRA launchers of kernels.hpp: check the layout, find the pool's page
// size, pick 16-byte or scalar loads by the alignment of the arrays, dispatch
// the element type and launch the gathered or segmented kernel.
#include "gpu/cuda/dispatch.cuh"
#include "gpu/cuda/kernels.hpp"
#include "gpu/cuda/lora_gathered.cuh"
#include "gpu/cuda/lora_segmented.cuh"
#include "gpu/cuda/lora_pack.hpp"

#include <algorithm>
#include <cstdint>
#include <span>
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

/// The projections of one launch: their rows, and how many.
struct launch_set {
  weight_rows_set ws{};
  unsigned n = 0;
};

/// Checks 1 to max_fused projections and finds their rows (side 0: A, 1: B^T).
launch_set rows_of(const device_plan& plan, const lora_layout& lora, std::uint32_t layer,
                   std::span<const lora_proj> projs, std::uint32_t side, const char* who) {
  if (projs.empty() || projs.size() > max_fused)
    throw std::invalid_argument(std::string(who) + ": " + std::to_string(projs.size()) +
                                " projections in one launch (1 to " + std::to_string(max_fused) + ")");
  launch_set set;
  for (const auto p : projs)
    set.ws.w[set.n++] = rows_of(plan, lora, layer, p, side, who);
  return set;
}

template <class T, unsigned Vec>
void shrink_launch(const device_plan& plan, const launch_set& set, std::uint32_t in_dim,
                   const void* x, const void* pool, bool gathered, float* tmp,
                   cudaStream_t stream) {
  const T* xt = static_cast<const T*>(x);
  const T* pt = static_cast<const T*>(pool);
  const std::uint64_t step = std::uint64_t{plan.rows} * plan.max_rank;
  if (gathered) {
    const dim3 grid(plan.rows, blocks(plan.max_rank, gathered_warps), set.n);
    shrink_gathered<T, Vec><<<grid, dim3(32, gathered_warps), 0, stream>>>(
      xt, pt, set.ws, plan.row_lora, in_dim, plan.max_rank, step, tmp);
  } else {
    const dim3 grid(blocks(plan.rows, shrink_tm) + plan.num_segments,
                    blocks(plan.max_rank, shrink_tj), set.n);
    shrink_segmented<T, Vec><<<grid, segmented_threads, 0, stream>>>(
      xt, pt, set.ws, plan.segments, plan.num_segments, in_dim, plan.max_rank, step, tmp);
  }
}

template <class T, unsigned Vec>
void expand_launch(const device_plan& plan, const launch_set& set, const output_set<T>& ys,
                   std::uint32_t widest, const float* tmp, const void* pool, bool gathered,
                   cudaStream_t stream) {
  const T* pt = static_cast<const T*>(pool);
  const std::uint64_t step = std::uint64_t{plan.rows} * plan.max_rank;
  if (gathered) {
    const dim3 grid(plan.rows, blocks(widest, expand_threads * Vec), set.n);
    const std::size_t smem = std::size_t{plan.max_rank} * (sizeof(const T*) + sizeof(float));
    expand_gathered<T, Vec><<<grid, expand_threads, smem, stream>>>(
      tmp, pt, set.ws, plan.row_lora, plan.max_rank, step, ys);
  } else {
    const dim3 grid(blocks(plan.rows, expand_tm) + plan.num_segments, blocks(widest, expand_tn),
                    set.n);
    expand_segmented<T, Vec><<<grid, segmented_threads, 0, stream>>>(
      tmp, pt, set.ws, plan.segments, plan.num_segments, plan.max_rank, step, ys);
  }
}

// Nothing to do: no rows, no adapter, or (segmented) no segment.
bool no_work(const device_plan& plan, bool gathered) {
  return plan.rows == 0 || plan.max_rank == 0 || (!gathered && plan.num_segments == 0);
}

} // namespace

void lora_shrink(dtype t, const device_plan& plan, const lora_layout& lora, std::uint32_t layer,
                 std::span<const lora_proj> projs, const void* x, const void* pool, bool gathered,
                 float* tmp, cudaStream_t stream) {
  const launch_set set = rows_of(plan, lora, layer, projs, 0, "lora_shrink");
  const std::uint32_t in_dim = lora.in_dim(projs.front());
  if (in_dim == 0)
    throw std::invalid_argument("lora_shrink: input dimension 0");
  bool vec = true;
  for (unsigned z = 0; z < set.n; ++z) {
    if (lora.in_dim(projs[z]) != in_dim)
      throw std::invalid_argument("lora_shrink: projections of one launch read inputs of " +
                                  std::to_string(in_dim) + " and " + std::to_string(lora.in_dim(projs[z])));
    vec = vec && vectorizable(in_dim, set.ws.w[z], x, pool);
  }
  if (no_work(plan, gathered))
    return;
  dispatch_dtype(t, "lora_shrink", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (vec)
      shrink_launch<T, 8>(plan, set, in_dim, x, pool, gathered, tmp, stream);
    else
      shrink_launch<T, 1>(plan, set, in_dim, x, pool, gathered, tmp, stream);
  });
}

void lora_expand(dtype t, const device_plan& plan, const lora_layout& lora, std::uint32_t layer,
                 std::span<const lora_proj> projs, const float* tmp, const void* pool, bool gathered,
                 std::span<void* const> ys, cudaStream_t stream) {
  const launch_set set = rows_of(plan, lora, layer, projs, 1, "lora_expand");
  if (ys.size() != projs.size())
    throw std::invalid_argument("lora_expand: " + std::to_string(ys.size()) + " outputs for " +
                                std::to_string(projs.size()) + " projections");
  if (gathered && std::uint64_t{plan.max_rank} * 12 > 48 * 1024)
    throw std::invalid_argument("lora_expand: rank " + std::to_string(plan.max_rank) +
                                " is past the gathered kernel's 4096");
  std::uint32_t widest = 0;
  bool vec = true;
  for (unsigned z = 0; z < set.n; ++z) {
    const std::uint32_t out_dim = lora.out_dim(projs[z]);
    if (out_dim == 0)
      throw std::invalid_argument("lora_expand: output dimension 0");
    widest = std::max(widest, out_dim);
    vec = vec && vectorizable(out_dim, set.ws.w[z], ys[z], pool);
  }
  if (no_work(plan, gathered))
    return;
  dispatch_dtype(t, "lora_expand", [&](auto tag) {
    using T = typename decltype(tag)::type;
    output_set<T> out{};
    for (unsigned z = 0; z < set.n; ++z) {
      out.y[z] = static_cast<T*>(ys[z]);
      out.out_dim[z] = lora.out_dim(projs[z]);
    }
    if (vec)
      expand_launch<T, 8>(plan, set, out, widest, tmp, pool, gathered, stream);
    else
      expand_launch<T, 1>(plan, set, out, widest, tmp, pool, gathered, stream);
  });
}

void lora_shrink(dtype t, const device_plan& plan, const lora_layout& lora, std::uint32_t layer,
                 lora_proj proj, const void* x, const void* pool, bool gathered, float* tmp,
                 cudaStream_t stream) {
  lora_shrink(t, plan, lora, layer, std::span{&proj, 1}, x, pool, gathered, tmp, stream);
}

void lora_expand(dtype t, const device_plan& plan, const lora_layout& lora, std::uint32_t layer,
                 lora_proj proj, const float* tmp, const void* pool, bool gathered, void* y,
                 cudaStream_t stream) {
  lora_expand(t, plan, lora, layer, std::span{&proj, 1}, tmp, pool, gathered, std::span<void* const>{&y, 1},
              stream);
}

} // namespace troupe::gpu::cuda
