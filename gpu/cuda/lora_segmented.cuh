// S-LoRA's MBGMM (Punica's SGMV) over adapter pages: the segmented LoRA
// kernels, tiles of one segment's rows (prefill) with x, A, tmp and B^T
// staged in shared memory as fp32. lora.cu launches them for gathered =
// false.
#pragma once

#include "gpu/cuda/lora_common.cuh"

#include <cstdint>

namespace troupe::gpu::cuda::lora_detail {

// -- segment tiles ------------------------------------------------------------------

/// A tile of one segment's rows: [row0, row_end) capped at the tile size by
/// the caller; segment -1 past the last tile.
struct tile_pos {
  std::int32_t segment;
  std::uint32_t row0;
  std::uint32_t row_end; // the segment's end
};

/// Tile `tile` when each segment is cut into tiles of `tile_rows` rows, in
/// segment order. Called by all 32 lanes of one warp; each lane returns it.
__device__ __forceinline__ tile_pos find_tile(const lora_segment* segs, // [nseg]
                                              std::uint32_t nseg, std::uint32_t tile,
                                              std::uint32_t tile_rows) {
  const unsigned lane = threadIdx.x % 32;
  std::uint32_t before = 0; // tiles of the segments before this chunk of 32
  for (std::uint32_t s0 = 0; s0 < nseg; s0 += 32) {
    const std::uint32_t s = s0 + lane;
    std::uint32_t first_row = 0;
    std::uint32_t rows = 0;
    if (s < nseg) {
      first_row = segs[s].first_row;
      rows = segs[s].rows;
    }
    const std::uint32_t n = (rows + tile_rows - 1) / tile_rows;
    std::uint32_t inc = n; // inclusive scan over the lanes
#pragma unroll
    for (unsigned d = 1; d < 32; d <<= 1) {
      const std::uint32_t v = __shfl_up_sync(0xffffffffu, inc, d);
      if (lane >= d)
        inc += v;
    }
    const std::uint32_t total = __shfl_sync(0xffffffffu, inc, 31);
    if (tile < before + total) {
      const unsigned hit = __ballot_sync(0xffffffffu, before + inc > tile);
      const unsigned owner = static_cast<unsigned>(__ffs(static_cast<int>(hit)) - 1);
      const std::uint32_t own_first_tile = before + inc - n;
      tile_pos p{static_cast<std::int32_t>(s), first_row + (tile - own_first_tile) * tile_rows,
                 first_row + rows};
      p.segment = __shfl_sync(0xffffffffu, p.segment, owner);
      p.row0 = __shfl_sync(0xffffffffu, p.row0, owner);
      p.row_end = __shfl_sync(0xffffffffu, p.row_end, owner);
      return p;
    }
    before += total;
  }
  return {-1, 0, 0};
}

// -- segmented (prefill, SGMV) ---------------------------------------------------------

inline constexpr unsigned segmented_threads = 128;
inline constexpr unsigned shrink_tm = 64; // rows of a tile
inline constexpr unsigned shrink_tj = 16; // ranks of a tile
inline constexpr unsigned shrink_tk = 64; // k staged at a time
inline constexpr unsigned expand_tm = 64;
inline constexpr unsigned expand_tn = 64; // outputs of a tile
inline constexpr unsigned expand_tr = 16; // ranks staged at a time

/// Finds the block's tile (blockIdx.x) and its adapter slot; warp 0 scans.
__device__ __forceinline__ void block_tile(const lora_segment* segs, std::uint32_t nseg,
                                           const lora_slot* slots, std::uint32_t tile_rows,
                                           tile_pos& where, slot_info& slot) {
  if (threadIdx.x < 32) {
    const tile_pos p = find_tile(segs, nseg, blockIdx.x, tile_rows);
    if (threadIdx.x == 0) {
      where = p;
      if (p.segment >= 0)
        slot = load_slot(slots, segs[p.segment].slot);
    }
  }
  __syncthreads();
}

/// acc[i][c] += x row (tr + 16 i) . A row (tj + 8 c) over one staged
/// shrink_tk, k ascending, for c < NC (ranks past the adapter's: no work).
template <unsigned NC>
__device__ __forceinline__ void shrink_tile_fma(const float* xs, // [shrink_tm][shrink_tk + 4]
                                                const float* as, // [shrink_tj][shrink_tk + 4]
                                                unsigned tr, unsigned tj, float (&acc)[4][2]) {
  constexpr unsigned ld = shrink_tk + 4;
#pragma unroll 4
  for (unsigned kk = 0; kk < shrink_tk; kk += 4) {
    float4 a[NC];
#pragma unroll
    for (unsigned c = 0; c < NC; ++c)
      a[c] = *reinterpret_cast<const float4*>(&as[(tj + 8 * c) * ld + kk]);
#pragma unroll
    for (unsigned i = 0; i < 4; ++i) {
      const float4 xv = *reinterpret_cast<const float4*>(&xs[(tr + 16 * i) * ld + kk]);
#pragma unroll
      for (unsigned c = 0; c < NC; ++c) {
        acc[i][c] = fmaf(xv.x, a[c].x, acc[i][c]);
        acc[i][c] = fmaf(xv.y, a[c].y, acc[i][c]);
        acc[i][c] = fmaf(xv.z, a[c].z, acc[i][c]);
        acc[i][c] = fmaf(xv.w, a[c].w, acc[i][c]);
      }
    }
  }
}

/// Stages a Rows x Cols tile into shared floats (row stride ld): element
/// (r, c) is src(r)[c0 + c] where r < nrows and c0 + c < width, else 0;
/// Vec-wide loads (8 only where the launcher found width and pointers
/// aligned). Every thread of the block takes part.
template <class T, unsigned Vec, unsigned Rows, unsigned Cols, class RowPtr>
__device__ __forceinline__ void stage_tile(float* dst, unsigned ld, RowPtr src, unsigned nrows,
                                           std::uint32_t c0, std::uint32_t width) {
  constexpr unsigned per_row = Cols / Vec;
  static_assert(Cols % Vec == 0);
#pragma unroll
  for (unsigned i = threadIdx.x; i < Rows * per_row; i += segmented_threads) {
    const unsigned r = i / per_row;
    const unsigned c = (i % per_row) * Vec;
    float v[Vec] = {};
    if (r < nrows && c0 + c < width)
      load_f<T, Vec>(src(r) + c0 + c, v);
    if constexpr (Vec == 8) {
      *reinterpret_cast<float4*>(&dst[r * ld + c]) = make_float4(v[0], v[1], v[2], v[3]);
      *reinterpret_cast<float4*>(&dst[r * ld + c + 4]) = make_float4(v[4], v[5], v[6], v[7]);
    } else {
      dst[r * ld + c] = v[0];
    }
  }
}

/// Shrink over one tile of shrink_tm rows of a segment and shrink_tj ranks
/// (blockIdx.y): x and A staged in shared memory as fp32, shrink_tk at a
/// time; each thread accumulates 4 rows x 2 ranks in fp32. grid
/// (ceil(rows / shrink_tm) + segments, ceil(max_rank / shrink_tj),
/// projections), block segmented_threads; projection z's A rows are
/// ws.w[z] and its tmp starts tmp_step floats after z - 1's. Blocks past the
/// last tile or the adapter's rank return at once; a thread whose ranks are
/// past it does no arithmetic.
template <class T, unsigned Vec>
__global__ void __launch_bounds__(segmented_threads)
  shrink_segmented(const T* __restrict__ x,                // [rows, in_dim]
                   const T* __restrict__ pool,             // [pool pages * page_elems]
                   weight_rows_set ws,                     // side 0 (A rows)
                   const lora_segment* __restrict__ segs,  // [nseg]
                   std::uint32_t nseg, std::uint32_t in_dim, std::uint32_t tmp_stride,
                   std::uint64_t tmp_step,
                   float* __restrict__ tmp) { // [projections][rows, tmp_stride]
  constexpr unsigned ld = shrink_tk + 4;    // padded row of a staged tile
  const weight_rows w = pick(ws.w);
  tmp += blockIdx.z * tmp_step;
  __shared__ __align__(16) float xs[shrink_tm * ld];
  __shared__ __align__(16) float as[shrink_tj * ld];
  __shared__ const T* arow[shrink_tj];
  __shared__ tile_pos where;
  __shared__ slot_info slot;
  block_tile(segs, nseg, w.slots, shrink_tm, where, slot);
  if (where.segment < 0)
    return;
  const std::uint32_t j0 = blockIdx.y * shrink_tj;
  if (j0 >= slot.rank)
    return;
  const std::uint32_t nj = min(shrink_tj, slot.rank - j0);
  const std::uint32_t row0 = where.row0;
  const std::uint32_t nr = min(shrink_tm, where.row_end - row0);
  const unsigned tid = threadIdx.x;
  if (tid < nj)
    arow[tid] = weight_row(pool, w, slot, j0 + tid);
  __syncthreads();

  const unsigned tr = tid / 8; // rows tr + 16 i
  const unsigned tj = tid % 8; // ranks tj, tj + 8
  const unsigned nc = tj + 8 < nj ? 2 : (tj < nj ? 1 : 0);
  float acc[4][2] = {};
  for (std::uint32_t k0 = 0; k0 < in_dim; k0 += shrink_tk) {
    stage_tile<T, Vec, shrink_tm, shrink_tk>(
      xs, ld, [&](unsigned r) { return x + std::uint64_t{row0 + r} * in_dim; }, nr, k0, in_dim);
    stage_tile<T, Vec, shrink_tj, shrink_tk>(
      as, ld, [&](unsigned r) { return arow[r]; }, nj, k0, in_dim);
    __syncthreads();
    if (nc == 2)
      shrink_tile_fma<2>(xs, as, tr, tj, acc);
    else if (nc == 1)
      shrink_tile_fma<1>(xs, as, tr, tj, acc);
    __syncthreads();
  }
#pragma unroll
  for (unsigned i = 0; i < 4; ++i) {
    const unsigned row = tr + 16 * i;
    if (row >= nr)
      continue;
#pragma unroll
    for (unsigned c = 0; c < 2; ++c)
      if (c < nc)
        tmp[std::uint64_t{row0 + row} * tmp_stride + j0 + tj + 8 * c] = acc[i][c];
  }
}

/// Expand over one tile of expand_tm rows of a segment and expand_tn
/// outputs (blockIdx.y): tmp and B^T staged in shared memory, expand_tr
/// ranks at a time up to the adapter's rank (no padded ranks); each thread
/// accumulates 8 rows x 4 outputs, j ascending, then y = round(y + scale *
/// acc). grid (ceil(rows / expand_tm) + segments, ceil(widest out_dim /
/// expand_tn), projections), block segmented_threads; projection z's B^T
/// rows are ws.w[z], its output ys.y[z] of ys.out_dim[z] columns, its tmp
/// tmp_step floats after z - 1's.
template <class T, unsigned Vec>
__global__ void __launch_bounds__(segmented_threads)
  expand_segmented(const float* __restrict__ tmp,          // [projections][rows, tmp_stride]
                   const T* __restrict__ pool,             // [pool pages * page_elems]
                   weight_rows_set ws,                     // side 1 (B^T rows)
                   const lora_segment* __restrict__ segs,  // [nseg]
                   std::uint32_t nseg, std::uint32_t tmp_stride, std::uint64_t tmp_step,
                   output_set<T> ys) {
  const weight_rows w = pick(ws.w);
  const std::uint32_t out_dim = pick(ys.out_dim);
  if (blockIdx.y * expand_tn >= out_dim) // a narrower projection's: the whole block
    return;
  T* __restrict__ y = pick(ys.y); // [rows, out_dim]
  tmp += blockIdx.z * tmp_step;
  constexpr unsigned ldt = expand_tr + 1;
  constexpr unsigned ldb = expand_tn + 4;
  __shared__ float ts[expand_tm * ldt];
  __shared__ __align__(16) float bs[expand_tr * ldb];
  __shared__ const T* brow[expand_tr];
  __shared__ tile_pos where;
  __shared__ slot_info slot;
  block_tile(segs, nseg, w.slots, expand_tm, where, slot);
  if (where.segment < 0)
    return;
  const std::uint32_t n0 = blockIdx.y * expand_tn;
  const std::uint32_t row0 = where.row0;
  const std::uint32_t nr = min(expand_tm, where.row_end - row0);
  const unsigned tid = threadIdx.x;
  const unsigned tr = tid / 16; // rows tr + 8 i
  const unsigned tc = tid % 16; // outputs n0 + 4 tc + c
  float acc[8][4] = {};
  for (std::uint32_t j0 = 0; j0 < slot.rank; j0 += expand_tr) {
    const std::uint32_t nj = min(expand_tr, slot.rank - j0);
    if (tid < nj)
      brow[tid] = weight_row(pool, w, slot, j0 + tid);
    for (unsigned i = tid; i < expand_tm * expand_tr; i += segmented_threads) {
      const unsigned row = i / expand_tr;
      const unsigned jj = i % expand_tr;
      ts[row * ldt + jj] =
        row < nr && jj < nj ? tmp[std::uint64_t{row0 + row} * tmp_stride + j0 + jj] : 0.0f;
    }
    __syncthreads();
    stage_tile<T, Vec, expand_tr, expand_tn>(
      bs, ldb, [&](unsigned r) { return brow[r]; }, nj, n0, out_dim);
    __syncthreads();
    for (unsigned jj = 0; jj < nj; ++jj) {
      const float4 b = *reinterpret_cast<const float4*>(&bs[jj * ldb + 4 * tc]);
#pragma unroll
      for (unsigned i = 0; i < 8; ++i) {
        const float t = ts[(tr + 8 * i) * ldt + jj];
        acc[i][0] = fmaf(t, b.x, acc[i][0]);
        acc[i][1] = fmaf(t, b.y, acc[i][1]);
        acc[i][2] = fmaf(t, b.z, acc[i][2]);
        acc[i][3] = fmaf(t, b.w, acc[i][3]);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (unsigned i = 0; i < 8; ++i) {
    const unsigned row = tr + 8 * i;
    if (row >= nr)
      continue;
    T* yr = y + std::uint64_t{row0 + row} * out_dim;
#pragma unroll
    for (unsigned c = 0; c < 4; ++c) {
      const std::uint32_t o = n0 + 4 * tc + c;
      if (o < out_dim)
        yr[o] = elem<T>::from_f(fmaf(slot.scale, acc[i][c], elem<T>::to_f(yr[o])));
    }
  }
}

} // namespace troupe::gpu::cuda::lora_detail
