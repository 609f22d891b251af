// The elementwise launchers of kernels.hpp: embedding_gather, rmsnorm,
// add_rmsnorm, rope, rope_write_kv, swiglu, add_bias, and gemv, which shares their
// element plumbing. Elements travel as 16-bit patterns, in packs of 8 (one
// 16-byte access) where the width and the pointers allow, else one at a
// time; math is fp32 with each output rounded once to nearest even, the
// rounding points of gpu/cuda/reference_elementwise.hpp. The norms run one
// block per row with an fp32 block reduction of the squares. A bad shape
// throws std::invalid_argument before anything is enqueued; launch errors
// are left to cudaGetLastError, as kernels.hpp says.
#include "gpu/cuda/dispatch.cuh"
#include "gpu/cuda/kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace troupe::gpu::cuda {

namespace {

using bits16 = unsigned short;

// -- element types ---------------------------------------------------------------

template <class T>
struct elem;

template <>
struct elem<__half> {
  static __device__ __forceinline__ float load(bits16 b) { return __half2float(__ushort_as_half(b)); }
  static __device__ __forceinline__ bits16 store(float f) {
    return __half_as_ushort(__float2half_rn(f));
  }
};

template <>
struct elem<__nv_bfloat16> {
  static __device__ __forceinline__ float load(bits16 b) {
    return __bfloat162float(__ushort_as_bfloat16(b));
  }
  static __device__ __forceinline__ bits16 store(float f) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
  }
};

/// Vec consecutive elements, read and written as one access.
template <int Vec>
struct alignas(2 * Vec) pack {
  bits16 v[Vec];
};

unsigned round_up_warp(std::uint64_t n) {
  return static_cast<unsigned>(std::max<std::uint64_t>(32, (n + 31) / 32 * 32));
}

// -- reductions ------------------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// The block's sum of v, in every thread. blockDim.x is a multiple of 32;
/// call once per kernel (the partials are not guarded for reuse).
__device__ float block_sum(float v) {
  __shared__ float part[32];
  const unsigned lane = threadIdx.x % 32;
  const unsigned warp = threadIdx.x / 32;
  v = warp_sum(v);
  if (lane == 0)
    part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < blockDim.x / 32 ? part[lane] : 0.0f;
    v = warp_sum(v);
    if (lane == 0)
      part[0] = v;
  }
  __syncthreads();
  return part[0];
}

// -- kernels ---------------------------------------------------------------------

template <int Vec>
__global__ void gather_kernel(const bits16* __restrict__ table, // [vocab, hidden]
                              const std::int32_t* __restrict__ ids, // [rows]
                              std::uint32_t hidden,
                              bits16* __restrict__ out) { // [rows, hidden]
  using P = pack<Vec>;
  const std::size_t row = blockIdx.x;
  const auto* src = reinterpret_cast<const P*>(table + static_cast<std::size_t>(ids[row]) * hidden);
  auto* dst = reinterpret_cast<P*>(out + row * hidden);
  for (std::uint32_t v = threadIdx.x; v < hidden / Vec; v += blockDim.x)
    dst[v] = src[v];
}

/// One block per row. Add: residual = round(residual + x), normalised; else
/// x normalised. out = round(w * (x * scale)), scale = 1 / sqrt(mean + eps).
template <class T, int Vec, bool Add>
__global__ void __launch_bounds__(1024)
  rmsnorm_kernel(bits16* residual,                 // [rows, hidden] (Add only)
                 const bits16* __restrict__ x,      // [rows, hidden]
                 const bits16* __restrict__ weight, // [hidden]
                 float eps, std::uint32_t hidden,
                 bits16* __restrict__ out) { // [rows, hidden]
  using E = elem<T>;
  using P = pack<Vec>;
  const std::size_t base = static_cast<std::size_t>(blockIdx.x) * hidden;
  const std::uint32_t nvec = hidden / Vec;
  const auto* xp = reinterpret_cast<const P*>(x + base);
  P* rp = Add ? reinterpret_cast<P*>(residual + base) : nullptr;

  float ss = 0.0f;
  for (std::uint32_t v = threadIdx.x; v < nvec; v += blockDim.x) {
    const P a = xp[v];
    if constexpr (Add) {
      P r = rp[v];
#pragma unroll
      for (int i = 0; i < Vec; ++i) {
        r.v[i] = E::store(E::load(r.v[i]) + E::load(a.v[i]));
        const float s = E::load(r.v[i]); // the norm reads the rounded sum
        ss += s * s;
      }
      rp[v] = r;
    } else {
#pragma unroll
      for (int i = 0; i < Vec; ++i) {
        const float f = E::load(a.v[i]);
        ss += f * f;
      }
    }
  }
  ss = block_sum(ss);
  const float scale = 1.0f / sqrtf(ss / static_cast<float>(hidden) + eps);

  // Each thread reads back the residual packs it wrote itself.
  const P* src = Add ? rp : xp;
  const auto* wp = reinterpret_cast<const P*>(weight);
  auto* op = reinterpret_cast<P*>(out + base);
  for (std::uint32_t v = threadIdx.x; v < nvec; v += blockDim.x) {
    const P a = src[v];
    const P w = wp[v];
    P o;
#pragma unroll
    for (int i = 0; i < Vec; ++i)
      o.v[i] = E::store(E::load(w.v[i]) * (E::load(a.v[i]) * scale));
    op[v] = o;
  }
}

/// Where rope_kernel also writes each row's rotated K and its V: the row's
/// slot of one layer in the paged pool (write_kv's placement). No pool: q
/// and k are rotated in place only.
struct kv_sink {
  const std::uint32_t* row_page = nullptr; // [rows]
  const std::uint32_t* row_slot = nullptr; // [rows]
  const bits16* v = nullptr;               // [rows, kv_heads * head_dim]
  bits16* pool = nullptr;
  std::uint64_t page_elems = 0, layer_offset = 0, v_offset = 0;
};

/// One block per row: the row's cos and sin (times `scale`) into shared
/// memory, then every (head, chunk of Vec pairs) of the leading rotary_dim
/// elements of q and k rotated in place, and with a sink the rotated K, the
/// rest of K (past rotary_dim) and the V copied into the row's cache slot.
/// The products and differences are the reference's (no fused
/// multiply-add).
template <class T, int Vec>
__global__ void rope_kernel(bits16* __restrict__ q,                   // [rows, heads * head_dim]
                            bits16* __restrict__ k,                   // [rows, kv_heads * head_dim]
                            const std::int32_t* __restrict__ positions, // [rows]
                            const float* __restrict__ inv_freq,       // [rotary_dim / 2], or [2][...]
                            std::uint32_t rotary_dim, float scale,
                            std::uint32_t long_after,                 // LongRoPE (rope_freqs)
                            const std::uint32_t* __restrict__ row_seq,
                            const std::uint32_t* __restrict__ seq_len,
                            std::uint32_t heads, std::uint32_t kv_heads,
                            std::uint32_t head_dim, kv_sink sink) {
  using E = elem<T>;
  using P = pack<Vec>;
  extern __shared__ float cos_sin[]; // [2][rotary_dim / 2]
  const std::uint32_t half = rotary_dim / 2;
  const std::size_t row = blockIdx.x;
  const std::uint64_t kv_dim = std::uint64_t{kv_heads} * head_dim;
  bits16* slot = sink.pool == nullptr
                   ? nullptr
                   : sink.pool + sink.row_page[row] * sink.page_elems + sink.layer_offset +
                       sink.row_slot[row] * kv_dim;
  const float pos = static_cast<float>(positions[row]);
  if (long_after != 0 && seq_len[row_seq[row]] > long_after)
    inv_freq += half; // the long factors' frequencies
  for (std::uint32_t j = threadIdx.x; j < half; j += blockDim.x) {
    float s, c;
    sincosf(__fmul_rn(pos, inv_freq[j]), &s, &c);
    cos_sin[j] = __fmul_rn(c, scale);
    cos_sin[half + j] = __fmul_rn(s, scale);
  }
  __syncthreads();

  const std::uint32_t chunks = half / Vec;
  const std::uint32_t items = (heads + kv_heads) * chunks;
  for (std::uint32_t it = threadIdx.x; it < items; it += blockDim.x) {
    const std::uint32_t h = it / chunks;
    const std::uint32_t j0 = (it % chunks) * Vec;
    bits16* p = h < heads ? q + (row * heads + h) * head_dim
                          : k + (row * kv_heads + (h - heads)) * head_dim;
    P a = *reinterpret_cast<const P*>(p + j0);
    P b = *reinterpret_cast<const P*>(p + half + j0);
#pragma unroll
    for (int i = 0; i < Vec; ++i) {
      const float x0 = E::load(a.v[i]);
      const float x1 = E::load(b.v[i]);
      const float c = cos_sin[j0 + i];
      const float s = cos_sin[half + j0 + i];
      a.v[i] = E::store(__fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s)));
      b.v[i] = E::store(__fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s)));
    }
    *reinterpret_cast<P*>(p + j0) = a;
    *reinterpret_cast<P*>(p + half + j0) = b;
    if (slot != nullptr && h >= heads) {
      bits16* dst = slot + (h - heads) * head_dim;
      *reinterpret_cast<P*>(dst + j0) = a;
      *reinterpret_cast<P*>(dst + half + j0) = b;
    }
  }
  if (slot == nullptr)
    return;
  // The part of each K head that does not turn (partial rotary embeddings).
  const std::uint32_t pass = (head_dim - rotary_dim) / Vec;
  for (std::uint32_t it = threadIdx.x; it < kv_heads * pass; it += blockDim.x) {
    const std::uint64_t e = std::uint64_t{it / pass} * head_dim + rotary_dim + (it % pass) * Vec;
    *reinterpret_cast<P*>(slot + e) = *reinterpret_cast<const P*>(k + row * kv_dim + e);
  }
  const auto* vs = reinterpret_cast<const P*>(sink.v + row * kv_dim);
  auto* vd = reinterpret_cast<P*>(slot + sink.v_offset);
  for (std::uint64_t c = threadIdx.x; c < kv_dim / Vec; c += blockDim.x)
    vd[c] = vs[c];
}

/// grid (rows, chunks of blockDim.x packs): out = round(g / (1 + expf(-g)) * u).
template <class T, int Vec>
__global__ void swiglu_kernel(const bits16* __restrict__ gate_up, // [rows, 2 * inter]
                              std::uint32_t inter,
                              bits16* __restrict__ out) { // [rows, inter]
  using E = elem<T>;
  using P = pack<Vec>;
  const std::uint32_t v = blockIdx.y * blockDim.x + threadIdx.x;
  if (v >= inter / Vec)
    return;
  const std::size_t row = blockIdx.x;
  const P g = reinterpret_cast<const P*>(gate_up + row * 2 * inter)[v];
  const P u = reinterpret_cast<const P*>(gate_up + row * 2 * inter + inter)[v];
  P o;
#pragma unroll
  for (int i = 0; i < Vec; ++i) {
    const float gf = E::load(g.v[i]);
    o.v[i] = E::store(gf / (1.0f + expf(-gf)) * E::load(u.v[i]));
  }
  reinterpret_cast<P*>(out + row * inter)[v] = o;
}

/// grid (rows, chunks of blockDim.x packs): x = round(x + bias), row by row.
template <class T, int Vec>
__global__ void add_bias_kernel(bits16* __restrict__ x,          // [rows, cols]
                                const bits16* __restrict__ bias, // [cols]
                                std::uint32_t cols) {
  using E = elem<T>;
  using P = pack<Vec>;
  const std::uint32_t v = blockIdx.y * blockDim.x + threadIdx.x;
  if (v >= cols / Vec)
    return;
  P* row = reinterpret_cast<P*>(x + std::size_t{blockIdx.x} * cols);
  P a = row[v];
  const P b = reinterpret_cast<const P*>(bias)[v];
#pragma unroll
  for (int i = 0; i < Vec; ++i)
    a.v[i] = E::store(E::load(a.v[i]) + E::load(b.v[i]));
  row[v] = a;
}

/// y_z[r, o] = sum_k x[r, k] w_z[o, k] for R rows: one warp per output o
/// (blockIdx.x * warps + warp) of projection z = blockIdx.y, each lane
/// reading 16 bytes of w's row per step and using them for every row of x,
/// fp32 sums reduced across the warp. A matrix-vector product for decode's
/// few rows: the weights are read once, in long coalesced runs.
template <class T, int R, bool F32Out>
__global__ void __launch_bounds__(256)
  gemv_kernel(const bits16* __restrict__ x, // [R, in]
              const bits16* __restrict__ w, // count x [out, in], w_stride apart
              std::uint64_t w_stride,
              void* __restrict__ y, // count x [R, out], y_stride apart (T, or fp32)
              std::uint64_t y_stride, std::uint32_t in, std::uint32_t out) {
  using E = elem<T>;
  using P = pack<8>;
  const std::uint32_t lane = threadIdx.x % 32;
  const std::uint32_t o = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (o >= out)
    return; // a whole warp leaves together: o is the warp's
  const auto* wrow = reinterpret_cast<const P*>(w + blockIdx.y * w_stride + std::uint64_t{o} * in);
  const auto* xs = reinterpret_cast<const P*>(x);
  const std::uint32_t packs = in / 8;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    acc[r] = 0.0f;
#pragma unroll 4
  for (std::uint32_t c = lane; c < packs; c += 32) {
    const P wp = wrow[c];
    float wf[8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
      wf[i] = E::load(wp.v[i]);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const P xp = xs[static_cast<std::uint64_t>(r) * packs + c];
#pragma unroll
      for (int i = 0; i < 8; ++i)
        acc[r] += wf[i] * E::load(xp.v[i]);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
    acc[r] = warp_sum(acc[r]);
  if (lane != 0)
    return;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const std::uint64_t at = blockIdx.y * y_stride + static_cast<std::uint64_t>(r) * out + o;
    if constexpr (F32Out)
      static_cast<float*>(y)[at] = acc[r];
    else
      static_cast<bits16*>(y)[at] = E::store(acc[r]);
  }
}

// -- launch helpers ----------------------------------------------------------------

template <class T, int Vec, bool Add>
void rmsnorm_launch(void* residual, const void* x, const void* weight, float eps,
                    std::uint32_t rows, std::uint32_t hidden, void* out, cudaStream_t stream) {
  const unsigned threads = std::min(1024u, round_up_warp(hidden / Vec));
  rmsnorm_kernel<T, Vec, Add><<<rows, threads, 0, stream>>>(
    static_cast<bits16*>(residual), static_cast<const bits16*>(x),
    static_cast<const bits16*>(weight), eps, hidden, static_cast<bits16*>(out));
}

void check_grid_rows(std::uint32_t rows, const char* who) {
  if (rows > 0x7fffffffu)
    throw std::invalid_argument(std::string(who) + ": " + std::to_string(rows) +
                                " rows exceed the grid");
}

constexpr unsigned row_threads = 256;

/// The grid of a kernel run as (row, chunk of row_threads packs) over rows
/// of `width` elements, 8 to a pack when `vec`; `what` names the width in
/// the error when it exceeds the grid.
dim3 row_grid(std::uint32_t rows, std::uint32_t width, bool vec, const char* who, const char* what) {
  check_grid_rows(rows, who);
  const std::uint32_t packs = vec ? width / 8 : width;
  const std::uint32_t chunks = (packs + row_threads - 1) / row_threads;
  if (chunks > 65535)
    throw std::invalid_argument(std::string(who) + ": " + what + " " + std::to_string(width) +
                                " exceeds the grid");
  return dim3(rows, chunks);
}

} // namespace

void embedding_gather(dtype t, const void* table, const std::int32_t* ids, std::uint32_t rows,
                      std::uint32_t hidden, void* out, cudaStream_t stream) {
  if (rows == 0 || hidden == 0)
    return;
  check_grid_rows(rows, "embedding_gather");
  // The bits are copied, so the type only has to be a known one.
  dispatch_dtype(t, "embedding_gather", [](auto) {});
  const auto* tb = static_cast<const bits16*>(table);
  auto* ob = static_cast<bits16*>(out);
  if (hidden % 8 == 0 && aligned16(table) && aligned16(out))
    gather_kernel<8><<<rows, std::min(256u, round_up_warp(hidden / 8)), 0, stream>>>(tb, ids,
                                                                                      hidden, ob);
  else
    gather_kernel<1><<<rows, std::min(256u, round_up_warp(hidden)), 0, stream>>>(tb, ids, hidden,
                                                                                 ob);
}

void rmsnorm(dtype t, const void* x, const void* weight, float eps, std::uint32_t rows,
             std::uint32_t hidden, void* out, cudaStream_t stream) {
  if (rows == 0 || hidden == 0)
    return;
  check_grid_rows(rows, "rmsnorm");
  const bool vec = hidden % 8 == 0 && aligned16(x) && aligned16(weight) && aligned16(out);
  dispatch_dtype(t, "rmsnorm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (vec)
      rmsnorm_launch<T, 8, false>(nullptr, x, weight, eps, rows, hidden, out, stream);
    else
      rmsnorm_launch<T, 1, false>(nullptr, x, weight, eps, rows, hidden, out, stream);
  });
}

void add_rmsnorm(dtype t, void* residual, const void* x, const void* weight, float eps,
                 std::uint32_t rows, std::uint32_t hidden, void* out, cudaStream_t stream) {
  if (rows == 0 || hidden == 0)
    return;
  check_grid_rows(rows, "add_rmsnorm");
  const bool vec = hidden % 8 == 0 && aligned16(residual) && aligned16(x) && aligned16(weight) &&
                   aligned16(out);
  dispatch_dtype(t, "add_rmsnorm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (vec)
      rmsnorm_launch<T, 8, true>(residual, x, weight, eps, rows, hidden, out, stream);
    else
      rmsnorm_launch<T, 1, true>(residual, x, weight, eps, rows, hidden, out, stream);
  });
}

namespace {

/// The rotary dim `freqs` turns, checked against the head; throws
/// std::invalid_argument naming `who`.
std::uint32_t check_rope(std::uint32_t head_dim, const rope_freqs& freqs, const char* who) {
  if (head_dim == 0 || head_dim % 2 != 0)
    throw std::invalid_argument(std::string(who) + ": head_dim " + std::to_string(head_dim) +
                                " is not even");
  if (head_dim > 8192)
    throw std::invalid_argument(std::string(who) + ": head_dim " + std::to_string(head_dim) +
                                " exceeds the 8192 the shared cos/sin table holds");
  const std::uint32_t rotary = freqs.rotary_dim == 0 ? head_dim : freqs.rotary_dim;
  if (rotary % 2 != 0 || rotary > head_dim)
    throw std::invalid_argument(std::string(who) + ": rotary_dim " + std::to_string(rotary) +
                                " is odd or exceeds head_dim " + std::to_string(head_dim));
  if (freqs.long_after != 0 && (freqs.row_seq == nullptr || freqs.seq_len == nullptr))
    throw std::invalid_argument(std::string(who) + ": LongRoPE needs each row's sequence and its length");
  return rotary;
}

// rope_kernel over `rows` rows, in packs of 8 where `aligned` (every array
// it touches on a 16-byte boundary) and the head allows.
void rope_launch(dtype t, const char* who, void* q, void* k, const std::int32_t* positions,
                 const rope_freqs& freqs, std::uint32_t rotary, std::uint32_t rows, std::uint32_t heads,
                 std::uint32_t kv_heads, std::uint32_t head_dim, bool aligned, const kv_sink& sink,
                 cudaStream_t stream) {
  check_grid_rows(rows, who);
  const std::uint32_t half = rotary / 2;
  const bool vec = half % 8 == 0 && (head_dim - rotary) % 8 == 0 && aligned;
  const int width = vec ? 8 : 1;
  const std::uint64_t items = std::uint64_t{heads + kv_heads} * (half / width);
  const unsigned threads = std::min(256u, round_up_warp(std::max<std::uint64_t>(items, half)));
  const std::size_t smem = 2 * std::size_t{half} * sizeof(float);
  dispatch_dtype(t, who, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto* qb = static_cast<bits16*>(q);
    auto* kb = static_cast<bits16*>(k);
    if (vec)
      rope_kernel<T, 8><<<rows, threads, smem, stream>>>(qb, kb, positions, freqs.inv_freq, rotary, freqs.scale,
                                                          freqs.long_after, freqs.row_seq, freqs.seq_len, heads,
                                                          kv_heads, head_dim, sink);
    else
      rope_kernel<T, 1><<<rows, threads, smem, stream>>>(qb, kb, positions, freqs.inv_freq, rotary, freqs.scale,
                                                          freqs.long_after, freqs.row_seq, freqs.seq_len, heads,
                                                          kv_heads, head_dim, sink);
  });
}

} // namespace

void rope(dtype t, void* q, void* k, const std::int32_t* positions, rope_freqs freqs,
          std::uint32_t rows, std::uint32_t heads, std::uint32_t kv_heads, std::uint32_t head_dim,
          cudaStream_t stream) {
  const std::uint32_t rotary = check_rope(head_dim, freqs, "rope");
  if (rows == 0 || heads + kv_heads == 0)
    return;
  rope_launch(t, "rope", q, k, positions, freqs, rotary, rows, heads, kv_heads, head_dim,
              aligned16(q) && aligned16(k), kv_sink{}, stream);
}

void rope_write_kv(dtype t, const device_plan& plan, const kv_layout& kv, std::uint32_t layer,
                   std::uint32_t heads, void* q, void* k, const void* v, rope_freqs freqs,
                   void* pool, cudaStream_t stream) {
  const std::uint32_t rotary = check_rope(kv.head_dim, freqs, "rope_write_kv");
  if (layer >= kv.num_layers || kv.page_tokens == 0 || kv.num_kv_heads == 0)
    throw std::invalid_argument("rope_write_kv: layer " + std::to_string(layer) + " of a pool of " +
                                std::to_string(kv.num_layers) + " layers, " +
                                std::to_string(kv.num_kv_heads) + " kv heads, pages of " +
                                std::to_string(kv.page_tokens) + " tokens");
  if (plan.rows == 0)
    return;
  const kv_sink sink{.row_page = plan.row_page,
                     .row_slot = plan.row_slot,
                     .v = static_cast<const bits16*>(v),
                     .pool = static_cast<bits16*>(pool),
                     .page_elems = kv.page_elems(),
                     .layer_offset = std::uint64_t{layer} * kv.layer_elems(),
                     .v_offset = std::uint64_t{kv.page_tokens} * kv.kv_dim()};
  // Offsets into the pool are multiples of kv_dim, a multiple of 8 whenever
  // the packs are (rotary_dim / 2 and head_dim - rotary_dim multiples of 8).
  rope_launch(t, "rope_write_kv", q, k, plan.positions, freqs, rotary, plan.rows, heads,
              kv.num_kv_heads, kv.head_dim,
              aligned16(q) && aligned16(k) && aligned16(v) && aligned16(pool), sink, stream);
}

bool gemv(dtype t, const void* x, const void* w, std::uint64_t w_stride, void* y,
          std::uint64_t y_stride, std::uint32_t rows, std::uint32_t in, std::uint32_t out,
          std::uint32_t count, bool out_f32, cudaStream_t stream) {
  if (rows == 0 || rows > gemv_max_rows || in == 0 || in % 8 != 0 || out == 0 || count == 0 ||
      count > 65535 || w_stride % 8 != 0 || !aligned16(x) || !aligned16(w))
    return false;
  constexpr unsigned threads = 256, warps = threads / 32;
  const dim3 grid((out + warps - 1) / warps, count);
  const auto* xb = static_cast<const bits16*>(x);
  const auto* wb = static_cast<const bits16*>(w);
  dispatch_dtype(t, "gemv", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto go = [&](auto r) {
      constexpr int R = decltype(r)::value;
      if (out_f32)
        gemv_kernel<T, R, true><<<grid, threads, 0, stream>>>(xb, wb, w_stride, y, y_stride, in, out);
      else
        gemv_kernel<T, R, false><<<grid, threads, 0, stream>>>(xb, wb, w_stride, y, y_stride, in, out);
    };
    switch (rows) {
      case 1: go(std::integral_constant<int, 1>{}); break;
      case 2: go(std::integral_constant<int, 2>{}); break;
      case 3: go(std::integral_constant<int, 3>{}); break;
      default: go(std::integral_constant<int, 4>{}); break;
    }
  });
  return true;
}

void swiglu(dtype t, const void* gate_up, std::uint32_t rows, std::uint32_t inter, void* out,
            cudaStream_t stream) {
  if (rows == 0 || inter == 0)
    return;
  const bool vec = inter % 8 == 0 && aligned16(gate_up) && aligned16(out);
  const dim3 grid = row_grid(rows, inter, vec, "swiglu", "intermediate size");
  dispatch_dtype(t, "swiglu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto* g = static_cast<const bits16*>(gate_up);
    auto* o = static_cast<bits16*>(out);
    if (vec)
      swiglu_kernel<T, 8><<<grid, row_threads, 0, stream>>>(g, inter, o);
    else
      swiglu_kernel<T, 1><<<grid, row_threads, 0, stream>>>(g, inter, o);
  });
}

void add_bias(dtype t, void* x, const void* bias, std::uint32_t rows, std::uint32_t cols,
              cudaStream_t stream) {
  if (rows == 0 || cols == 0)
    return;
  const bool vec = cols % 8 == 0 && aligned16(x) && aligned16(bias);
  const dim3 grid = row_grid(rows, cols, vec, "add_bias", "width");
  dispatch_dtype(t, "add_bias", [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto* xs = static_cast<bits16*>(x);
    const auto* b = static_cast<const bits16*>(bias);
    if (vec)
      add_bias_kernel<T, 8><<<grid, row_threads, 0, stream>>>(xs, b, cols);
    else
      add_bias_kernel<T, 1><<<grid, row_threads, 0, stream>>>(xs, b, cols);
  });
}

} // namespace troupe::gpu::cuda
