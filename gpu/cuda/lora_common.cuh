// Pieces the LoRA kernels share (lora_gathered.cuh, lora_segmented.cuh):
// fp16 / bf16 loads and conversions in fp32, and where an adapter's weight
// rows lie in the unified pool's pages (lora_layout's rows, the plan's slots
// and page list). Header-only device code; lora.cu instantiates the kernels.
#pragma once

#include "gpu/cuda/kernels.hpp"
#include "gpu/cuda/plan.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace troupe::gpu::cuda::lora_detail {

// -- element types -------------------------------------------------------------

template <class T>
struct elem;

template <>
struct elem<__half> {
  using pair = __half2;
  static __device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
  static __device__ __forceinline__ float2 to_f2(__half2 x) { return __half22float2(x); }
  static __device__ __forceinline__ __half from_f(float x) { return __float2half_rn(x); }
  static __device__ __forceinline__ __half2 from_f2(float2 x) { return __float22half2_rn(x); }
};

template <>
struct elem<__nv_bfloat16> {
  using pair = __nv_bfloat162;
  static __device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __forceinline__ float2 to_f2(__nv_bfloat162 x) {
    return __bfloat1622float2(x);
  }
  static __device__ __forceinline__ __nv_bfloat16 from_f(float x) {
    return __float2bfloat16_rn(x);
  }
  static __device__ __forceinline__ __nv_bfloat162 from_f2(float2 x) {
    return __float22bfloat162_rn(x);
  }
};

/// Vec (8: one 16-byte load, or 1) elements at p as fp32, through the
/// read-only cache. p is 16-byte aligned when Vec is 8.
template <class T, unsigned Vec>
__device__ __forceinline__ void load_f(const T* p, float (&f)[Vec]) {
  if constexpr (Vec == 8) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
    const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (unsigned i = 0; i < 4; ++i) {
      typename elem<T>::pair pr;
      static_assert(sizeof(pr) == sizeof(unsigned));
      __builtin_memcpy(&pr, &words[i], sizeof(pr));
      const float2 two = elem<T>::to_f2(pr);
      f[2 * i] = two.x;
      f[2 * i + 1] = two.y;
    }
  } else {
    static_assert(Vec == 1, "8 or 1 elements a load");
    f[0] = elem<T>::to_f(__ldg(p));
  }
}

// -- adapter rows in the pool ---------------------------------------------------

/// Where one (layer, projection, side)'s rows of the step's adapters are:
/// row j of slot s is lora_layout row block * rank + j of the slot's pages.
struct weight_rows {
  const lora_slot* slots;     // [plan slots]
  const std::uint32_t* pages; // [plan lora_pages] slot s's from slots[s].page_offset
  std::uint64_t page_elems;   // elements between the starts of two pool pages
  std::uint32_t row_width;
  std::uint32_t rows_per_page;
  std::uint32_t block; // (layer * 4 + proj) * 2 + side
};

/// Up to max_fused projections of one layer in one launch (q, k and v read
/// the same input): blockIdx.z picks one. Passed by value (kernel
/// parameters); unused entries are never picked.
inline constexpr unsigned max_fused = lora_max_fused;

struct weight_rows_set {
  weight_rows w[max_fused];
};

/// This block's projection's entry of a per-projection array (selects, not
/// an indexed parameter load).
template <class U>
__device__ __forceinline__ U pick(const U (&per_proj)[max_fused]) {
  static_assert(max_fused == 3);
  return blockIdx.z == 0 ? per_proj[0] : (blockIdx.z == 1 ? per_proj[1] : per_proj[2]);
}

/// The expand's outputs, one per projection: y[z] is [rows, out_dim[z]].
template <class T>
struct output_set {
  T* y[max_fused];
  std::uint32_t out_dim[max_fused];
};

/// A slot as the kernels keep it (lora_slot without default initializers,
/// so it may sit in shared memory).
struct slot_info {
  std::uint32_t rank;
  float scale;
  std::uint32_t page_offset;
};

__device__ __forceinline__ slot_info load_slot(const lora_slot* slots, std::uint32_t s) {
  const lora_slot& l = slots[s];
  return {l.rank, l.scale, l.page_offset};
}

/// Row j of slot `s`'s rows in w: [row_width] elements (in_dim or out_dim used).
template <class T>
__device__ __forceinline__ const T* weight_row(const T* pool, // [pool pages * page_elems]
                                               const weight_rows& w, const slot_info& s,
                                               std::uint32_t j) {
  const std::uint64_t row = std::uint64_t{w.block} * s.rank + j;
  const std::uint32_t page = w.pages[s.page_offset + row / w.rows_per_page];
  return pool + page * w.page_elems + (row % w.rows_per_page) * w.row_width;
}

} // namespace troupe::gpu::cuda::lora_detail
