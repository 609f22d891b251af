// The paged attention kernels' shared pieces (gpu/cuda/attention_decode.cuh
// and attention_prefill.cuh build on them; gpu/cuda/attention.cu launches):
// the parameters every attention kernel reads, element conversions,
// asynchronous copies of K/V tiles out of the page pool, warp reductions,
// where partials live, and the KV write kernel. Scores live in log2 units
// (scaled by scale * log2(e)) so exp2 does the softmax; partials keep that
// max, the merge kernel alone reads it.
#pragma once

#include "gpu/cuda/plan.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace troupe::gpu::cuda::attn {

/// Cache positions per K/V tile (both kernels; the reference walks the same).
inline constexpr int kv_tile = 64;
/// Query vectors (a row's query heads of one kv head, rows after rows) per prefill block.
inline constexpr int block_m = 64;
/// Query heads one decode block serves (a larger group takes several blocks).
inline constexpr int decode_heads = 8;
/// Threads per block of every attention kernel but the prep kernel.
inline constexpr int threads = 128;
inline constexpr int prep_threads = 1024;
/// item_slot of an item whose tile is not split: it writes `out` itself.
inline constexpr std::uint32_t no_slot = 0xffffffffu;

/// Everything the attention kernels read, by value.
template <class T>
struct attention_params {
  const std::int32_t* positions = nullptr;    // [rows] cache position of each row
  const std::uint32_t* kv_indptr = nullptr;   // [seqs + 1] into kv_pages
  const std::uint32_t* kv_pages = nullptr;    // [kv_indptr[seqs]] page ids
  const attention_item* items = nullptr;      // [num_items]
  const std::uint32_t* tile_indptr = nullptr; // [num_tiles + 1] into items
  std::uint32_t num_items = 0;
  std::uint32_t num_tiles = 0;

  const T* q = nullptr;  // [rows, heads * HD]
  const T* pool = nullptr; // [pool pages, page_elems]
  T* out = nullptr;      // [rows, heads * HD]
  /// [slots, heads, HD + 2]: per slot (a row of an item of a split tile) and
  /// head, o (normalised), then m (log2 units) and l. Unused when item_slot is null.
  float* partial = nullptr;
  const std::uint32_t* item_slot = nullptr;     // [num_items] first slot, or no_slot; null: none split
  const std::uint32_t* qblock_indptr = nullptr; // [num_items + 1] prefill blocks of each item

  std::uint64_t page_elems = 0;   // kv_layout::page_elems()
  std::uint64_t layer_offset = 0; // layer * kv_layout::layer_elems()
  std::uint64_t v_offset = 0;     // page_tokens * kv_dim: V after K in a layer
  std::uint32_t page_tokens = 0;
  std::uint32_t kv_dim = 0;
  std::uint32_t heads = 0;
  std::uint32_t group = 0;          // heads / kv heads
  std::uint32_t rows_per_block = 0; // prefill: block_m / group
  float scale_log2 = 0;             // scale * log2(e)
  std::uint32_t window = 0;         // sliding window: a row at p sees p - window < t <= p; 0: t <= p
};

/// Whether a row at position `pos` sees cache position `t` <= pos (the
/// causal bound is checked first): inside its sliding window.
__device__ __forceinline__ bool in_window(std::uint32_t t, std::uint32_t pos, std::uint32_t window) {
  return window == 0 || pos - t < window;
}

// -- element conversions ------------------------------------------------------------

__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Eight elements (16 bytes) to fp32.
template <class T>
__device__ __forceinline__ void unpack8(const uint4& raw, float* f) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i)
    f[i] = to_float(e[i]);
}

// -- asynchronous copies (sm_80+) -------------------------------------------------

// 16 bytes global -> shared; zeros instead when !valid (src is not read).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  const auto dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// K (which 0) or V (1) of kv head `kvh` at positions [t0, t0 + kv_tile) of
// the sequence whose page table starts at kv_pages[page0], into
// smem [kv_tile][LD]; positions >= t_end are zero-filled, never read.
template <class T, int HD, int LD>
__device__ __forceinline__ void load_kv_tile(const attention_params<T>& p, std::uint32_t page0,
                                             std::uint32_t kvh, std::uint32_t which,
                                             std::uint32_t t0, std::uint32_t t_end, T* smem) {
  constexpr int chunks = HD / 8;
  for (int idx = threadIdx.x; idx < kv_tile * chunks; idx += threads) {
    const int j = idx / chunks;
    const int c = idx % chunks;
    const std::uint32_t t = t0 + j;
    const bool valid = t < t_end;
    const T* src = p.pool;
    if (valid) {
      const std::uint32_t page = p.kv_pages[page0 + t / p.page_tokens];
      src = p.pool + page * p.page_elems + p.layer_offset + which * p.v_offset +
            std::uint64_t{t % p.page_tokens} * p.kv_dim + std::uint64_t{kvh} * HD + c * 8;
    }
    cp_async_16(smem + j * LD + c * 8, src, valid);
  }
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Where row `j` of item `i`'s partial for `head` starts.
template <class T, int HD>
__device__ __forceinline__ float* partial_at(const attention_params<T>& p, std::uint32_t slot,
                                             std::uint32_t j, std::uint32_t head) {
  return p.partial + ((std::uint64_t{slot} + j) * p.heads + head) * (HD + 2);
}

// -- KV write ---------------------------------------------------------------------------

/// Thread per (row, K or V, chunk of Vec elements); elements are copied as
/// bits. Grid covers rows * 2 * (kv_dim / Vec) threads.
template <int Vec>
__global__ void write_kv_kernel(const std::uint32_t* row_page, // [rows]
                                const std::uint32_t* row_slot, // [rows]
                                std::uint32_t rows, std::uint32_t kv_dim,
                                std::uint64_t page_elems, std::uint64_t layer_offset,
                                std::uint64_t v_offset,
                                const std::uint16_t* k, // [rows, kv_dim]
                                const std::uint16_t* v, // [rows, kv_dim]
                                std::uint16_t* pool) {  // [pool pages, page_elems]
  using chunk_t = std::conditional_t<Vec == 8, uint4, std::uint16_t>;
  const std::uint32_t chunks = kv_dim / Vec;
  const std::uint64_t idx = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x;
  if (idx >= std::uint64_t{rows} * 2 * chunks)
    return;
  const auto c = static_cast<std::uint32_t>(idx % chunks);
  const auto which = static_cast<std::uint32_t>(idx / chunks % 2);
  const auto r = static_cast<std::uint32_t>(idx / chunks / 2);
  const std::uint16_t* src = (which == 0 ? k : v) + std::uint64_t{r} * kv_dim + c * Vec;
  std::uint16_t* dst = pool + row_page[r] * page_elems + layer_offset + which * v_offset +
                       std::uint64_t{row_slot[r]} * kv_dim + c * Vec;
  *reinterpret_cast<chunk_t*>(dst) = *reinterpret_cast<const chunk_t*>(src);
}

} // namespace troupe::gpu::cuda::attn
