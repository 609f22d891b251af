// Flash-decoding (gpu/cuda/attention.cu launches, reference_attention.hpp
// is the CPU reference): the prep kernel that numbers the query blocks and
// partial slots of a plan's items, the decode kernel for single-row items
// (a block per item, kv head and up to 8 query heads sharing one K/V read),
// and the merge kernel that combines a split tile's items.
#pragma once

#include "gpu/cuda/attention_common.cuh"

namespace troupe::gpu::cuda::attn {

// -- prep ------------------------------------------------------------------------------

// Exclusive prefix sum of one value per thread of the block; `total` gets
// the block's sum. Every thread of the block must call it.
__device__ __forceinline__ std::uint32_t block_exclusive_scan(std::uint32_t v,
                                                              std::uint32_t& total) {
  __shared__ std::uint32_t warp_sums[32];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  std::uint32_t x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const std::uint32_t y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o)
      x += y;
  }
  if (lane == 31)
    warp_sums[warp] = x;
  __syncthreads();
  if (warp == 0) {
    std::uint32_t w = lane < warps ? warp_sums[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const std::uint32_t y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o)
        w += y;
    }
    warp_sums[lane] = w;
  }
  __syncthreads();
  const std::uint32_t before = (warp > 0 ? warp_sums[warp - 1] : 0) + x - v;
  total = warp_sums[warps - 1];
  __syncthreads(); // warp_sums is reused by the next call
  return before;
}

/// One block of prep_threads. item_slot (when not null): for an item of a
/// tile of n > 1 items and `rows` rows, the tile's slots follow the earlier
/// split tiles' and item k of the tile takes rows slots from k * rows on;
/// no_slot for items of unsplit tiles. qblock_indptr (when not null): items
/// of more than one row get ceil(rows / rows_per_block) prefill blocks.
__global__ void __launch_bounds__(prep_threads)
  attention_prep_kernel(const attention_item* items,       // [num_items]
                        std::uint32_t num_items,
                        const std::uint32_t* tile_indptr,  // [num_tiles + 1]
                        std::uint32_t num_tiles, std::uint32_t rows_per_block,
                        std::uint32_t* item_slot,          // [num_items] or null
                        std::uint32_t* qblock_indptr) {    // [num_items + 1] or null
  if (item_slot != nullptr) {
    std::uint32_t carry = 0;
    for (std::uint32_t base = 0; base < num_tiles; base += blockDim.x) {
      const std::uint32_t t = base + threadIdx.x;
      std::uint32_t a = 0, b = 0, rows = 0;
      if (t < num_tiles) {
        a = tile_indptr[t];
        b = tile_indptr[t + 1];
        rows = b > a ? items[a].q_end - items[a].q_begin : 0;
      }
      const bool split = b - a > 1;
      std::uint32_t total = 0;
      const std::uint32_t before = block_exclusive_scan(split ? (b - a) * rows : 0, total);
      for (std::uint32_t i = a; i < b; ++i)
        item_slot[i] = split ? carry + before + (i - a) * rows : no_slot;
      carry += total;
    }
  }
  if (qblock_indptr != nullptr) {
    std::uint32_t carry = 0;
    for (std::uint32_t base = 0; base < num_items; base += blockDim.x) {
      const std::uint32_t i = base + threadIdx.x;
      std::uint32_t blocks = 0;
      if (i < num_items) {
        const std::uint32_t rows = items[i].q_end - items[i].q_begin;
        blocks = rows > 1 ? (rows + rows_per_block - 1) / rows_per_block : 0;
      }
      std::uint32_t total = 0;
      const std::uint32_t before = block_exclusive_scan(blocks, total);
      if (i < num_items)
        qblock_indptr[i] = carry + before;
      carry += total;
    }
    if (threadIdx.x == 0)
      qblock_indptr[num_items] = carry;
  }
}

// -- decode ------------------------------------------------------------------------------

/// Grid (num_items, kv heads, ceil(group / decode_heads)), `threads`
/// threads; NH (1, 2, 4 or 8) query heads per block, at most decode_heads,
/// the launcher's smallest that holds min(group, decode_heads). Items of
/// more than one row are left to the prefill kernel. Per K/V tile: two
/// threads per position score it against the block's heads, one warp per
/// head turns the scores into probabilities and running statistics, and
/// thread (d, head slot) accumulates o[head][d].
template <class T, int HD, int NH>
__global__ void __launch_bounds__(threads) decode_attention_kernel(attention_params<T> p) {
  constexpr int ld = HD + 16; // elements per smem row: conflict-free 16-byte reads
  constexpr int head_slots = threads / HD; // 1 (HD 128) or 2 (HD 64)
  constexpr int per_thread = (NH + head_slots - 1) / head_slots;
  __shared__ __align__(16) T k_s[kv_tile * ld];
  __shared__ __align__(16) T v_s[kv_tile * ld];
  __shared__ float q_s[NH][HD];      // scaled by scale * log2(e)
  __shared__ float s_s[NH][kv_tile]; // scores, then probabilities
  __shared__ float alpha_s[NH];
  __shared__ float m_s[NH];
  __shared__ float l_s[NH];

  const attention_item item = p.items[blockIdx.x];
  if (item.q_end - item.q_begin != 1)
    return;
  const int tid = threadIdx.x;
  const std::uint32_t kvh = blockIdx.y;
  const std::uint32_t g0 = blockIdx.z * decode_heads;
  const int ng = static_cast<int>(min(static_cast<std::uint32_t>(NH), p.group - g0));
  const std::uint32_t head0 = kvh * p.group + g0;
  const std::uint32_t row = item.q_begin;
  const auto pos = static_cast<std::uint32_t>(p.positions[row]);
  const std::uint32_t t_end = min(item.kv_end, pos + 1);
  const std::uint32_t page0 = p.kv_indptr[item.seq];

  const T* qrow = p.q + std::uint64_t{row} * p.heads * HD;
  for (int idx = tid; idx < NH * HD; idx += threads) {
    const int g = idx / HD;
    const int d = idx % HD;
    q_s[g][d] = g < ng ? to_float(qrow[std::uint64_t{head0 + g} * HD + d]) * p.scale_log2 : 0.0f;
  }
  if (tid < NH) {
    m_s[tid] = -INFINITY;
    l_s[tid] = 0.0f;
  }
  float acc[per_thread];
#pragma unroll
  for (int k = 0; k < per_thread; ++k)
    acc[k] = 0.0f;
  const int d_own = tid % HD;
  const int slot_own = tid / HD;

  for (std::uint32_t t0 = item.kv_begin; t0 < t_end; t0 += kv_tile) {
    load_kv_tile<T, HD, ld>(p, page0, kvh, 0, t0, t_end, k_s);
    cp_async_commit();
    load_kv_tile<T, HD, ld>(p, page0, kvh, 1, t0, t_end, v_s);
    cp_async_commit();
    cp_async_wait<1>(); // this thread's K copies
    __syncthreads();    // everyone's, and q_s and the statistics on the first tile

    { // scores: position j by threads 2j (even 16-byte chunks) and 2j + 1 (odd)
      const int j = tid >> 1;
      const int half = tid & 1;
      float s[NH];
#pragma unroll
      for (int g = 0; g < NH; ++g)
        s[g] = 0.0f;
      const T* krow = k_s + j * ld;
#pragma unroll 4
      for (int c = half; c < HD / 8; c += 2) {
        float kf[8];
        unpack8<T>(*reinterpret_cast<const uint4*>(krow + c * 8), kf);
#pragma unroll
        for (int g = 0; g < NH; ++g)
#pragma unroll
          for (int e = 0; e < 8; ++e)
            s[g] += q_s[g][c * 8 + e] * kf[e];
      }
      const bool visible = t0 + j < t_end && in_window(t0 + j, pos, p.window);
#pragma unroll
      for (int g = 0; g < NH; ++g) {
        s[g] += __shfl_xor_sync(0xffffffffu, s[g], 1);
        if (half == 0)
          s_s[g][j] = visible ? s[g] : -INFINITY;
      }
    }
    __syncthreads();

    { // probabilities and running statistics: warp w takes heads w, w + 4
      const int warp = tid / 32;
      const int lane = tid % 32;
      for (int g = warp; g < NH; g += threads / 32) {
        const float a = s_s[g][lane];
        const float b = s_s[g][lane + 32];
        const float m_old = m_s[g];
        const float m_new = fmaxf(m_old, warp_max(fmaxf(a, b)));
        const float pa = m_new == -INFINITY ? 0.0f : exp2f(a - m_new);
        const float pb = m_new == -INFINITY ? 0.0f : exp2f(b - m_new);
        s_s[g][lane] = pa;
        s_s[g][lane + 32] = pb;
        const float sum = warp_sum(pa + pb);
        if (lane == 0) {
          const float alpha = m_new == -INFINITY ? 1.0f : exp2f(m_old - m_new);
          alpha_s[g] = alpha;
          l_s[g] = l_s[g] * alpha + sum;
          m_s[g] = m_new;
        }
      }
    }
    cp_async_wait<0>(); // this thread's V copies
    __syncthreads();    // everyone's, and the probabilities

    { // o[g][d] = o[g][d] * alpha[g] + sum_j p[g][j] v[j][d]
#pragma unroll
      for (int k = 0; k < per_thread; ++k)
        if (slot_own + k * head_slots < NH)
          acc[k] *= alpha_s[slot_own + k * head_slots];
      for (int j = 0; j < kv_tile; ++j) {
        const float v = to_float(v_s[j * ld + d_own]);
#pragma unroll
        for (int k = 0; k < per_thread; ++k)
          if (slot_own + k * head_slots < NH)
            acc[k] += s_s[slot_own + k * head_slots][j] * v;
      }
    }
    __syncthreads(); // before the next tile overwrites k_s, v_s, s_s
  }
  __syncthreads(); // the statistics, also when no tile ran

  const std::uint32_t slot = p.item_slot != nullptr ? p.item_slot[blockIdx.x] : no_slot;
#pragma unroll
  for (int k = 0; k < per_thread; ++k) {
    const int g = slot_own + k * head_slots;
    if (g >= ng)
      continue;
    const float l = l_s[g];
    const float o = l > 0.0f ? acc[k] / l : 0.0f;
    const std::uint32_t head = head0 + g;
    if (slot == no_slot) {
      p.out[(std::uint64_t{row} * p.heads + head) * HD + d_own] = from_float<T>(o);
    } else {
      float* dst = partial_at<T, HD>(p, slot, 0, head);
      dst[d_own] = o;
      if (d_own == 0) {
        dst[HD] = m_s[g];
        dst[HD + 1] = l;
      }
    }
  }
}

// -- merge ------------------------------------------------------------------------------

/// Grid (num_tiles, heads), `threads` threads; tiles of one item are left
/// alone (their item wrote out). out = sum_k w_k o_k / sum_k w_k with
/// w_k = l_k 2^(m_k - max m).
template <class T, int HD>
__global__ void __launch_bounds__(threads) merge_attention_kernel(attention_params<T> p) {
  const std::uint32_t a = p.tile_indptr[blockIdx.x];
  const std::uint32_t b = p.tile_indptr[blockIdx.x + 1];
  if (b - a < 2)
    return;
  const std::uint32_t head = blockIdx.y;
  const attention_item first = p.items[a];
  const std::uint32_t rows = first.q_end - first.q_begin;
  for (std::uint32_t idx = threadIdx.x; idx < rows * HD; idx += threads) {
    const std::uint32_t j = idx / HD;
    const std::uint32_t d = idx % HD;
    float mx = -INFINITY;
    for (std::uint32_t i = a; i < b; ++i)
      mx = fmaxf(mx, partial_at<T, HD>(p, p.item_slot[i], j, head)[HD]);
    float total = 0.0f;
    float acc = 0.0f;
    for (std::uint32_t i = a; i < b; ++i) {
      const float* part = partial_at<T, HD>(p, p.item_slot[i], j, head);
      const float l = part[HD + 1];
      if (l > 0.0f) {
        const float w = l * exp2f(part[HD] - mx);
        total += w;
        acc += w * part[d];
      }
    }
    p.out[(std::uint64_t{first.q_begin + j} * p.heads + head) * HD + d] =
      from_float<T>(total > 0.0f ? acc / total : 0.0f);
  }
}

} // namespace troupe::gpu::cuda::attn
