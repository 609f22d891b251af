// S-LoRA's MBGMV (Punica's BGMV) over adapter pages: the gathered LoRA
// kernels, one block row per token row (decode: one row per sequence),
// shrink as a warp-shuffle dot product per rank, expand as one thread per 8
// outputs with no reduction. lora.cu launches them for gathered = true.
#pragma once

#include "gpu/cuda/lora_common.cuh"

#include <cstdint>

namespace troupe::gpu::cuda::lora_detail {

// -- gathered (decode, BGMV) ---------------------------------------------------------

inline constexpr unsigned gathered_warps = 4; // shrink: one j per warp
inline constexpr unsigned expand_threads = 64;

/// tmp[r, j] = sum_k x[r, k] A_j[k] for the adapter of row r (row_lora),
/// j < its rank; a warp per (r, j), lanes striding k by 32 * Vec, a shuffle
/// reduction. grid (rows, ceil(max_rank / gathered_warps), projections),
/// block (32, gathered_warps); projection z's A rows are ws.w[z] and its
/// tmp starts tmp_step floats after z - 1's. Base-model rows and j past the
/// rank return at once.
template <class T, unsigned Vec>
__global__ void __launch_bounds__(32 * gathered_warps)
  shrink_gathered(const T* __restrict__ x,                  // [rows, in_dim]
                  const T* __restrict__ pool,               // [pool pages * page_elems]
                  weight_rows_set ws,                       // side 0 (A rows)
                  const std::int32_t* __restrict__ row_lora, // [rows] slot, -1: base model
                  std::uint32_t in_dim, std::uint32_t tmp_stride, std::uint64_t tmp_step,
                  float* __restrict__ tmp) { // [projections][rows, tmp_stride]
  const weight_rows w = pick(ws.w);
  tmp += blockIdx.z * tmp_step;
  const std::uint32_t r = blockIdx.x;
  const std::int32_t s = row_lora[r];
  if (s < 0)
    return;
  const slot_info slot = load_slot(w.slots, static_cast<std::uint32_t>(s));
  const std::uint32_t j = blockIdx.y * gathered_warps + threadIdx.y;
  if (j >= slot.rank)
    return;
  const T* xr = x + std::uint64_t{r} * in_dim;
  const T* a = weight_row(pool, w, slot, j);
  float acc = 0.0f;
#pragma unroll 4
  for (std::uint32_t k = threadIdx.x * Vec; k < in_dim; k += 32 * Vec) {
    float xv[Vec];
    float av[Vec];
    load_f<T, Vec>(xr + k, xv);
    load_f<T, Vec>(a + k, av);
#pragma unroll
    for (unsigned v = 0; v < Vec; ++v)
      acc = fmaf(xv[v], av[v], acc);
  }
#pragma unroll
  for (unsigned d = 16; d > 0; d >>= 1)
    acc += __shfl_xor_sync(0xffffffffu, acc, d);
  if (threadIdx.x == 0)
    tmp[std::uint64_t{r} * tmp_stride + j] = acc;
}

/// y[r, o] = round(y[r, o] + scale * sum_{j < rank} tmp[r, j] Bt_j[o]) for
/// the adapter of row r, j ascending; a thread per Vec outputs, no
/// reduction (B^T rows are contiguous in o). grid (rows, ceil(widest
/// out_dim / (expand_threads * Vec)), projections), block expand_threads,
/// dynamic shared memory max_rank * (8 + 4) bytes; projection z's B^T rows
/// are ws.w[z], its output ys.y[z] of ys.out_dim[z] columns, its tmp
/// tmp_step floats after z - 1's. Base-model rows return at once.
template <class T, unsigned Vec>
__global__ void __launch_bounds__(expand_threads)
  expand_gathered(const float* __restrict__ tmp,             // [projections][rows, tmp_stride]
                  const T* __restrict__ pool,                // [pool pages * page_elems]
                  weight_rows_set ws,                        // side 1 (B^T rows)
                  const std::int32_t* __restrict__ row_lora, // [rows]
                  std::uint32_t tmp_stride, std::uint64_t tmp_step,
                  output_set<T> ys) {
  extern __shared__ std::uint64_t expand_smem[];
  const weight_rows w = pick(ws.w);
  const std::uint32_t out_dim = pick(ys.out_dim);
  T* __restrict__ y = pick(ys.y); // [rows, out_dim]
  tmp += blockIdx.z * tmp_step;
  const std::uint32_t r = blockIdx.x;
  const std::int32_t s = row_lora[r];
  if (s < 0 || blockIdx.y * expand_threads * Vec >= out_dim) // whole block: before the barrier
    return;
  const slot_info slot = load_slot(w.slots, static_cast<std::uint32_t>(s));
  const T** brow = reinterpret_cast<const T**>(expand_smem);     // [rank]
  float* t = reinterpret_cast<float*>(expand_smem + slot.rank); // [rank]
  for (std::uint32_t j = threadIdx.x; j < slot.rank; j += blockDim.x) {
    brow[j] = weight_row(pool, w, slot, j);
    t[j] = tmp[std::uint64_t{r} * tmp_stride + j];
  }
  __syncthreads();
  const std::uint32_t o = (blockIdx.y * expand_threads + threadIdx.x) * Vec;
  if (o >= out_dim)
    return;
  float acc[Vec] = {};
#pragma unroll 4
  for (std::uint32_t j = 0; j < slot.rank; ++j) {
    float b[Vec];
    load_f<T, Vec>(brow[j] + o, b);
#pragma unroll
    for (unsigned v = 0; v < Vec; ++v)
      acc[v] = fmaf(t[j], b[v], acc[v]);
  }
  T* yr = y + std::uint64_t{r} * out_dim + o;
  if constexpr (Vec == 8) {
    uint4 v = *reinterpret_cast<const uint4*>(yr);
    unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (unsigned i = 0; i < 4; ++i) {
      typename elem<T>::pair pr;
      __builtin_memcpy(&pr, &words[i], sizeof(pr));
      float2 f = elem<T>::to_f2(pr);
      f.x = fmaf(slot.scale, acc[2 * i], f.x);
      f.y = fmaf(slot.scale, acc[2 * i + 1], f.y);
      pr = elem<T>::from_f2(f);
      __builtin_memcpy(&words[i], &pr, sizeof(pr));
    }
    v = make_uint4(words[0], words[1], words[2], words[3]);
    *reinterpret_cast<uint4*>(yr) = v;
  } else {
    *yr = elem<T>::from_f(fmaf(slot.scale, acc[0], elem<T>::to_f(*yr)));
  }
}

} // namespace troupe::gpu::cuda::lora_detail
