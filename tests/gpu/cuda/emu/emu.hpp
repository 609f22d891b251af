// A CPU emulation of the CUDA device for gpu/cuda's kernels and runtime
// (verification without a GPU): each block's threads run as cooperative
// fibers in a random order, warp operations and __syncthreads are barriers,
// WMMA tiles are whole per thread, cp.async copies land at wait_group.
// Force-included into every translation unit of the emulated build; the
// real CUDA headers declare the API, emu_runtime.cpp defines it.
#pragma once
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <vector_functions.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>

#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __host__
#define __host__
#undef __forceinline__
#define __forceinline__ inline
#undef __launch_bounds__
#define __launch_bounds__(...)
#undef __shared__
#define __shared__ static
#undef __align__
#define __align__(n) __attribute__((aligned(n)))
#undef __constant__
#define __constant__

namespace emu {
const dim3& thread_idx();
const dim3& block_idx();
extern dim3 block_dim, grid_dim;
unsigned linear();
void sync_block();
void sync_warp();
std::uint64_t exchange(std::uint64_t mine, unsigned src_lane);
void exchange_all(std::uint64_t mine, std::uint64_t* all); // every lane's value
unsigned char* dynamic_smem();
// Aborts a block larger than the kernel's __launch_bounds__ (its further
// arguments, blocks per multiprocessor, change nothing here).
void launch_bound(unsigned max_threads, unsigned min_blocks = 0, unsigned max_blocks_per_cluster = 0);
void cp_async(void* dst, const void* src, bool valid);
// For tests of what a refused capture does: while on, cudaStreamBeginCapture
// refuses every stream with cudaErrorStreamCaptureUnsupported, as CUDA does
// the legacy stream (on from the start where TROUPE_EMU_REFUSE_CAPTURES is
// set).
void refuse_captures(bool on);
void cp_async_commit();
void cp_async_wait(int n);
template <class V> std::uint64_t to_u64(V v) { static_assert(sizeof(V) <= 8); std::uint64_t u = 0; std::memcpy(&u, &v, sizeof(V)); return u; }
template <class V> V from_u64(std::uint64_t u) { V v; std::memcpy(&v, &u, sizeof(V)); return v; }

struct launch_cfg {
  dim3 grid, block;
  std::size_t smem = 0;
  cudaStream_t stream = nullptr;
};
inline launch_cfg cfg(dim3 g, dim3 b, std::size_t smem = 0, cudaStream_t s = nullptr) { return {g, b, smem, s}; }
void enqueue_kernel(const launch_cfg& c, const void* kernel, std::function<void()> body);
template <class... P, class... A>
void launch(const launch_cfg& c, void (*k)(P...), A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel argument count");
  std::tuple<std::decay_t<P>...> params{static_cast<std::decay_t<P>>(args)...};
  enqueue_kernel(c, reinterpret_cast<const void*>(k), [k, params] { std::apply(k, params); });
}
} // namespace emu

#define threadIdx (::emu::thread_idx())
#define blockIdx (::emu::block_idx())
#define blockDim (::emu::block_dim)
#define gridDim (::emu::grid_dim)
inline void __syncthreads() { emu::sync_block(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::sync_warp(); }
template <class V> V __shfl_xor_sync(unsigned, V v, int d, int = 32) { return emu::from_u64<V>(emu::exchange(emu::to_u64(v), (emu::linear() % 32) ^ unsigned(d))); }
template <class V> V __shfl_up_sync(unsigned, V v, unsigned d, int = 32) { unsigned l = emu::linear() % 32; return emu::from_u64<V>(emu::exchange(emu::to_u64(v), l >= d ? l - d : l)); }
template <class V> V __shfl_down_sync(unsigned, V v, unsigned d, int = 32) { unsigned l = emu::linear() % 32; return emu::from_u64<V>(emu::exchange(emu::to_u64(v), l + d < 32 ? l + d : l)); }
template <class V> V __shfl_sync(unsigned, V v, int src, int = 32) { return emu::from_u64<V>(emu::exchange(emu::to_u64(v), unsigned(src) % 32)); }
inline unsigned __ballot_sync(unsigned, int p) {
  std::uint64_t all[32];
  emu::exchange_all(p ? 1 : 0, all);
  unsigned m = 0;
  for (unsigned i = 0; i < 32; ++i) if (all[i]) m |= 1u << i;
  return m;
}
template <class F> unsigned emu_warp_fold(unsigned v, F f) {
  std::uint64_t all[32];
  emu::exchange_all(v, all);
  unsigned r = static_cast<unsigned>(all[0]);
  for (int i = 1; i < 32; ++i) r = f(r, static_cast<unsigned>(all[i]));
  return r;
}
inline unsigned __reduce_add_sync(unsigned, unsigned v) { return emu_warp_fold(v, [](unsigned a, unsigned b) { return a + b; }); }
inline unsigned __reduce_min_sync(unsigned, unsigned v) { return emu_warp_fold(v, [](unsigned a, unsigned b) { return std::min(a, b); }); }
inline unsigned __reduce_max_sync(unsigned, unsigned v) { return emu_warp_fold(v, [](unsigned a, unsigned b) { return std::max(a, b); }); }
inline int __reduce_min_sync(unsigned, int v) { return static_cast<int>(emu_warp_fold(static_cast<unsigned>(v), [](unsigned a, unsigned b) { return static_cast<unsigned>(std::min(int(a), int(b))); })); }
inline int __reduce_max_sync(unsigned, int v) { return static_cast<int>(emu_warp_fold(static_cast<unsigned>(v), [](unsigned a, unsigned b) { return static_cast<unsigned>(std::max(int(a), int(b))); })); }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
template <class T> T __ldg(const T* p) { return *p; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline unsigned __float_as_uint(float f) { return emu::from_u64<unsigned>(emu::to_u64(f)); }
inline float __uint_as_float(unsigned u) { return emu::from_u64<float>(u); }
inline int __float_as_int(float f) { return emu::from_u64<int>(emu::to_u64(f)); }
inline float __int_as_float(int u) { return emu::from_u64<float>(emu::to_u64(u)); }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
template <class T> cudaError_t cudaFuncSetAttribute(T* f, cudaFuncAttribute a, int v) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(f), a, v);
}
inline unsigned atomicAdd(unsigned* p, unsigned v) { unsigned o = *p; *p = o + v; return o; }
inline int atomicAdd(int* p, int v) { int o = *p; *p = o + v; return o; }
inline float atomicAdd(float* p, float v) { float o = *p; *p = o + v; return o; }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) { auto o = *p; *p = o + v; return o; }
inline int atomicMin(int* p, int v) { int o = *p; if (v < o) *p = v; return o; }
inline unsigned atomicMin(unsigned* p, unsigned v) { unsigned o = *p; if (v < o) *p = v; return o; }
inline int atomicMax(int* p, int v) { int o = *p; if (v > o) *p = v; return o; }
inline unsigned atomicMax(unsigned* p, unsigned v) { unsigned o = *p; if (v > o) *p = v; return o; }
inline unsigned long long atomicMax(unsigned long long* p, unsigned long long v) { auto o = *p; if (v > o) *p = v; return o; }
inline unsigned atomicCAS(unsigned* p, unsigned c, unsigned v) { unsigned o = *p; if (o == c) *p = v; return o; }
inline void __threadfence() {}
inline void __threadfence_block() {}

// WMMA: each lane holds the whole 16x16 tile.
namespace nvcuda::wmma {
struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  float v[256];
};
void emu_check(const void* p, unsigned ldm, unsigned mult);
inline float emu_f(__half h) { return __half2float(h); }
inline float emu_f(__nv_bfloat16 h) { return __bfloat162float(h); }
template <class F> void fill_fragment(F& f, float x) { for (auto& e : f.v) e = x; }
template <class T> void load_matrix_sync(fragment<matrix_a, 16, 16, 16, T, row_major>& f, const T* p, unsigned ldm) {
  emu_check(p, ldm, 8);
  for (int m = 0; m < 16; ++m) for (int k = 0; k < 16; ++k) f.v[m * 16 + k] = emu_f(p[m * ldm + k]);
}
template <class T> void load_matrix_sync(fragment<matrix_b, 16, 16, 16, T, col_major>& f, const T* p, unsigned ldm) {
  emu_check(p, ldm, 8);
  for (int k = 0; k < 16; ++k) for (int n = 0; n < 16; ++n) f.v[k * 16 + n] = emu_f(p[k + n * ldm]);
}
template <class T> void load_matrix_sync(fragment<matrix_b, 16, 16, 16, T, row_major>& f, const T* p, unsigned ldm) {
  emu_check(p, ldm, 8);
  for (int k = 0; k < 16; ++k) for (int n = 0; n < 16; ++n) f.v[k * 16 + n] = emu_f(p[k * ldm + n]);
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm, layout_t l) {
  emu_check(p, ldm, 4);
  if (l != mem_row_major) __builtin_trap();
  for (int m = 0; m < 16; ++m) for (int n = 0; n < 16; ++n) f.v[m * 16 + n] = p[m * ldm + n];
}
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm, layout_t l) {
  emu_check(p, ldm, 4);
  if (l != mem_row_major) __builtin_trap();
  __syncwarp();
  for (int m = 0; m < 16; ++m) for (int n = 0; n < 16; ++n) p[m * ldm + n] = f.v[m * 16 + n];
  __syncwarp();
}
template <class A, class B>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const A& a, const B& b, const fragment<accumulator, 16, 16, 16, float>& c) {
  float out[256];
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      float s = c.v[m * 16 + n];
      for (int k = 0; k < 16; ++k) s += a.v[m * 16 + k] * b.v[k * 16 + n];
      out[m * 16 + n] = s;
    }
  std::memcpy(d.v, out, sizeof out);
}
} // namespace nvcuda::wmma
