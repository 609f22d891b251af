// The prefill attention kernel (gpu/cuda/attention.cu launches,
// reference_attention.hpp is the CPU reference): multi-row items on tensor
// cores (WMMA), 64 query vectors (rows x the kv head's query heads) per
// block, K/V read tile by tile out of the pages, online softmax in fp32.
#pragma once

#include "gpu/cuda/attention_common.cuh"

#include <mma.h>

namespace troupe::gpu::cuda::attn {

// -- prefill ------------------------------------------------------------------------------

/// Shared memory of the prefill kernel: offsets in bytes, each a multiple
/// of 128 (WMMA wants 32-byte aligned tiles).
template <int HD>
struct prefill_smem {
  static constexpr int ld_qkv = HD + 8;    // elements per Q, K, V row
  static constexpr int ld_s = kv_tile + 4; // floats per score row
  static constexpr int ld_p = kv_tile + 8; // elements per probability row
  static constexpr int ld_o = HD + 4;      // floats per output row
  static constexpr std::size_t q = 0;
  static constexpr std::size_t k = q + std::size_t{block_m} * ld_qkv * 2;
  static constexpr std::size_t v = k + std::size_t{kv_tile} * ld_qkv * 2;
  static constexpr std::size_t s = v + std::size_t{kv_tile} * ld_qkv * 2;
  static constexpr std::size_t pr = s + std::size_t{block_m} * ld_s * 4;
  static constexpr std::size_t o = pr + std::size_t{block_m} * ld_p * 2;
  static constexpr std::size_t pos = o + std::size_t{block_m} * ld_o * 4;
  static constexpr std::size_t bytes = pos + std::size_t{block_m} * 4;
  static_assert(k % 128 == 0 && v % 128 == 0 && s % 128 == 0 && pr % 128 == 0 && o % 128 == 0 &&
                pos % 128 == 0);
};

/// Grid (blocks, kv heads) with dynamic shared memory prefill_smem<HD>::bytes,
/// `threads` threads (4 warps, 16 query vectors each). Blocks stride over
/// the qblock_indptr[num_items] query blocks of multi-row items; a query
/// block is up to rows_per_block consecutive rows of one item, with vector
/// m = (row offset) * group + (head in the group). Per K/V tile: S = Q K^T
/// on tensor cores into smem, the online softmax by two lanes per vector
/// (P rounded to T for the second product, l summed from the rounded P),
/// O rescaled in smem and O += P V on tensor cores.
template <class T, int HD>
__global__ void __launch_bounds__(threads) prefill_attention_kernel(attention_params<T> p) {
  namespace wmma = nvcuda::wmma;
  using L = prefill_smem<HD>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* q_s = reinterpret_cast<T*>(smem + L::q);
  T* k_s = reinterpret_cast<T*>(smem + L::k);
  T* v_s = reinterpret_cast<T*>(smem + L::v);
  float* s_s = reinterpret_cast<float*>(smem + L::s);
  T* p_s = reinterpret_cast<T*>(smem + L::pr);
  float* o_s = reinterpret_cast<float*>(smem + L::o);
  int* pos_s = reinterpret_cast<int*>(smem + L::pos);

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const std::uint32_t kvh = blockIdx.y;
  const std::uint32_t group = p.group;
  const std::uint32_t total = p.qblock_indptr[p.num_items];

  for (std::uint32_t b = blockIdx.x; b < total; b += gridDim.x) {
    // The item of block b: the last i with qblock_indptr[i] <= b.
    std::uint32_t lo = 0, hi = p.num_items;
    while (hi - lo > 1) {
      const std::uint32_t mid = (lo + hi) / 2;
      if (p.qblock_indptr[mid] <= b)
        lo = mid;
      else
        hi = mid;
    }
    const std::uint32_t i = lo;
    const attention_item item = p.items[i];
    const std::uint32_t r0 = item.q_begin + (b - p.qblock_indptr[i]) * p.rows_per_block;
    const std::uint32_t nr = min(p.rows_per_block, item.q_end - r0);
    const std::uint32_t nvec = nr * group;
    const std::uint32_t page0 = p.kv_indptr[item.seq];

    __syncthreads(); // the previous block's epilogue is done with smem
    for (int m = tid; m < block_m; m += threads)
      pos_s[m] = m < static_cast<int>(nvec) ? p.positions[r0 + m / group] : -1;
    {
      constexpr int chunks = HD / 8;
      for (int idx = tid; idx < block_m * chunks; idx += threads) {
        const int m = idx / chunks;
        const int c = idx % chunks;
        const bool valid = m < static_cast<int>(nvec);
        const T* src = p.q;
        if (valid)
          src = p.q + (std::uint64_t{r0 + m / group} * p.heads + kvh * group + m % group) * HD +
                c * 8;
        cp_async_16(q_s + m * L::ld_qkv + c * 8, src, valid);
      }
      cp_async_commit();
    }
    for (int idx = tid; idx < block_m * L::ld_o; idx += threads)
      o_s[idx] = 0.0f;

    // Two lanes per query vector: row `vr` of the warp's 16, columns of parity `half`.
    const int vr = lane >> 1;
    const int half = lane & 1;
    const int vm = warp * 16 + vr;
    float m_run = -INFINITY;
    float l_run = 0.0f;
    const auto last_pos = static_cast<std::uint32_t>(p.positions[r0 + nr - 1]);
    const std::uint32_t t_end = min(item.kv_end, last_pos + 1);

    for (std::uint32_t t0 = item.kv_begin; t0 < t_end; t0 += kv_tile) {
      load_kv_tile<T, HD, L::ld_qkv>(p, page0, kvh, 0, t0, t_end, k_s);
      cp_async_commit();
      load_kv_tile<T, HD, L::ld_qkv>(p, page0, kvh, 1, t0, t_end, v_s);
      cp_async_commit();
      cp_async_wait<1>(); // Q (first tile) and K of this thread
      __syncthreads();    // of every thread; pos_s and the zeroed o_s too

      { // S = Q K^T for the warp's 16 vectors
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kv_tile / 16];
#pragma unroll
        for (int n = 0; n < kv_tile / 16; ++n)
          wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
        for (int kb = 0; kb < HD / 16; ++kb) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
          wmma::load_matrix_sync(a, q_s + warp * 16 * L::ld_qkv + kb * 16, L::ld_qkv);
#pragma unroll
          for (int n = 0; n < kv_tile / 16; ++n) {
            // K^T as a column-major matrix: element (k, n) at k_s[n * ld + k].
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> kt;
            wmma::load_matrix_sync(kt, k_s + n * 16 * L::ld_qkv + kb * 16, L::ld_qkv);
            wmma::mma_sync(acc[n], a, kt, acc[n]);
          }
        }
#pragma unroll
        for (int n = 0; n < kv_tile / 16; ++n)
          wmma::store_matrix_sync(s_s + warp * 16 * L::ld_s + n * 16, acc[n], L::ld_s,
                                  wmma::mem_row_major);
      }
      __syncwarp();

      { // online softmax of vector vm over this tile
        const int pos = pos_s[vm];
        float* srow = s_s + vm * L::ld_s;
        float mx = -INFINITY;
        for (int c = half; c < kv_tile; c += 2) {
          const std::uint32_t t = t0 + c;
          const float s = t < t_end && static_cast<int>(t) <= pos &&
                                  in_window(t, static_cast<std::uint32_t>(pos), p.window)
                            ? srow[c] * p.scale_log2
                            : -INFINITY;
          srow[c] = s;
          mx = fmaxf(mx, s);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        const float m_new = fmaxf(m_run, mx);
        const float alpha = m_new == -INFINITY ? 1.0f : exp2f(m_run - m_new);
        T* prow = p_s + vm * L::ld_p;
        float sum = 0.0f;
        for (int c = half; c < kv_tile; c += 2) {
          const T pr = from_float<T>(m_new == -INFINITY ? 0.0f : exp2f(srow[c] - m_new));
          prow[c] = pr;
          sum += to_float(pr);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        l_run = l_run * alpha + sum;
        m_run = m_new;
        float* orow = o_s + vm * L::ld_o;
        for (int c = half; c < HD; c += 2)
          orow[c] *= alpha;
      }
      cp_async_wait<0>(); // V of this thread
      __syncthreads();    // of every thread; P and O of the warp

      { // O += P V for the warp's 16 vectors
#pragma unroll
        for (int n = 0; n < HD / 16; ++n) {
          wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
          float* otile = o_s + warp * 16 * L::ld_o + n * 16;
          wmma::load_matrix_sync(acc, otile, L::ld_o, wmma::mem_row_major);
#pragma unroll
          for (int kb = 0; kb < kv_tile / 16; ++kb) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> v;
            wmma::load_matrix_sync(a, p_s + warp * 16 * L::ld_p + kb * 16, L::ld_p);
            wmma::load_matrix_sync(v, v_s + kb * 16 * L::ld_qkv + n * 16, L::ld_qkv);
            wmma::mma_sync(acc, a, v, acc);
          }
          wmma::store_matrix_sync(otile, acc, L::ld_o, wmma::mem_row_major);
        }
      }
      __syncthreads(); // before the next tile overwrites k_s, v_s
    }
    cp_async_wait<0>(); // Q's copies when no tile ran
    __syncthreads();    // o_s of every warp

    // Epilogue: the warp's vectors one at a time, lanes along head_dim.
    const std::uint32_t slot = p.item_slot != nullptr ? p.item_slot[i] : no_slot;
    for (int r = 0; r < 16; ++r) {
      const float l = __shfl_sync(0xffffffffu, l_run, r * 2);
      const float m = __shfl_sync(0xffffffffu, m_run, r * 2);
      const int vec = warp * 16 + r;
      if (vec >= static_cast<int>(nvec))
        continue;
      const std::uint32_t row = r0 + vec / group;
      const std::uint32_t head = kvh * group + vec % group;
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      const float* orow = o_s + vec * L::ld_o;
      if (slot == no_slot) {
        T* dst = p.out + (std::uint64_t{row} * p.heads + head) * HD;
        for (int c = lane; c < HD; c += 32)
          dst[c] = from_float<T>(orow[c] * inv);
      } else {
        float* dst = partial_at<T, HD>(p, slot, row - item.q_begin, head);
        for (int c = lane; c < HD; c += 32)
          dst[c] = orow[c] * inv;
        if (lane == 0) {
          dst[HD] = m;
          dst[HD + 1] = l;
        }
      }
    }
  }
}

} // namespace troupe::gpu::cuda::attn
