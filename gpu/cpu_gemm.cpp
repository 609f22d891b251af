// cpu_gemm: one fixed order of arithmetic per element of x w^T, in portable
// C++ and in AVX2 register tiles that give the same bits.
#include "gpu/cpu_gemm.hpp"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TROUPE_GEMM_AVX2 1
#include <immintrin.h>
#endif

namespace troupe::gpu {

namespace {

using std::size_t;

constexpr size_t lanes = 8;

// The scale step every kernel ends with: alpha times the sum, plus beta
// times what c held (fused, so no kernel rounds it differently).
inline void store(float* out, float sum, float alpha, float beta) {
  const float s = alpha * sum;
  *out = beta == 0.0f ? s : std::fma(beta, *out, s);
}

// ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)): the order the AVX2
// kernel's horizontal sum takes.
inline float lane_sum(const float (&a)[lanes]) {
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

// One element: lane l sums a[p] * b[p] for p = l, l + 8, ... by fused
// multiply-adds (zeros past k), then lane_sum.
float portable_dot(const float* a, const float* b, size_t k) {
  float acc[lanes] = {};
  for (size_t p = 0; p < k; p += lanes)
    for (size_t l = 0; l < lanes; ++l) {
      const bool in = p + l < k;
      acc[l] = std::fma(in ? a[p + l] : 0.0f, in ? b[p + l] : 0.0f, acc[l]);
    }
  return lane_sum(acc);
}

// x: [m, k], w: [n, k], c: [m, n]; columns j0..j1 of every row.
void portable_columns(const float* x, const float* w, float* c, size_t m, size_t n, size_t k, float alpha,
                      float beta, size_t j0, size_t j1) {
  for (size_t i = 0; i < m; ++i)
    for (size_t j = j0; j < j1; ++j)
      store(c + i * n + j, portable_dot(x + i * k, w + j * k, k), alpha, beta);
}

#ifdef TROUPE_GEMM_AVX2

#define TROUPE_AVX2 __attribute__((target("avx2,fma")))

TROUPE_AVX2 inline float lane_sum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); // a_l + a_(l+4)
  const __m128 u = _mm_add_ps(s, _mm_movehl_ps(s, s));                                  // s0 + s2, s1 + s3
  return _mm_cvtss_f32(_mm_add_ss(u, _mm_shuffle_ps(u, u, 1)));
}

template <bool Masked>
TROUPE_AVX2 inline __m256 load(const float* a, __m256i mask) {
  if constexpr (Masked)
    return _mm256_maskload_ps(a, mask);
  else
    return _mm256_loadu_ps(a);
}

// acc[r][j] += x[r, p..p+8) * w[j, p..p+8), lane by lane.
template <int R, int C, bool Masked>
TROUPE_AVX2 inline void tile_step(__m256 (&acc)[R][C], const float* x, const float* w, size_t k, size_t p,
                                  __m256i mask) {
  __m256 wv[C];
#pragma GCC unroll 4
  for (int j = 0; j < C; ++j)
    wv[j] = load<Masked>(w + j * k + p, mask);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const __m256 xv = load<Masked>(x + r * k + p, mask);
#pragma GCC unroll 4
    for (int j = 0; j < C; ++j)
      acc[r][j] = _mm256_fmadd_ps(xv, wv[j], acc[r][j]);
  }
}

// An R x C tile: rows x[0..R) of [*, k], rows w[0..C) of [*, k], into
// c[0..R, 0..C) of row stride n. The k % 8 last elements load through mask
// (zeros past k), as the portable kernel pads them.
template <int R, int C>
TROUPE_AVX2 void tile(const float* x, const float* w, float* c, size_t n, size_t k, float alpha, float beta,
                      __m256i mask) {
  __m256 acc[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < C; ++j)
      acc[r][j] = _mm256_setzero_ps();
  size_t p = 0;
  for (; p + lanes <= k; p += lanes)
    tile_step<R, C, false>(acc, x, w, k, p, mask);
  if (p < k)
    tile_step<R, C, true>(acc, x, w, k, p, mask);
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < C; ++j)
      store(c + r * n + j, lane_sum(acc[r][j]), alpha, beta);
}

// R rows of x against columns j0..j1 of w, three at a time.
template <int R>
TROUPE_AVX2 void row_tiles(const float* x, const float* w, float* c, size_t n, size_t k, float alpha, float beta,
                           __m256i mask, size_t j0, size_t j1) {
  size_t j = j0;
  for (; j + 3 <= j1; j += 3)
    tile<R, 3>(x, w + j * k, c + j, n, k, alpha, beta, mask);
  if (j1 - j == 2)
    tile<R, 2>(x, w + j * k, c + j, n, k, alpha, beta, mask);
  else if (j1 - j == 1)
    tile<R, 1>(x, w + j * k, c + j, n, k, alpha, beta, mask);
}

// Rows in chunks of about 256 KiB of x, columns in blocks of 48 (a block's
// rows of w stay in L1 while the chunk's rows pass them), 4 x 3 tiles.
TROUPE_AVX2 void avx2_columns(const float* x, const float* w, float* c, size_t m, size_t n, size_t k, float alpha,
                              float beta, size_t j0, size_t j1) {
  alignas(32) std::int32_t bits[lanes];
  for (size_t l = 0; l < lanes; ++l)
    bits[l] = l < k % lanes ? -1 : 0;
  const __m256i mask = _mm256_load_si256(reinterpret_cast<const __m256i*>(bits));
  const size_t chunk = std::max<size_t>(4, (size_t{1} << 16) / std::max<size_t>(k, 1) / 4 * 4);
  constexpr size_t block = 48;
  for (size_t i0 = 0; i0 < m; i0 += chunk) {
    const size_t i1 = std::min(m, i0 + chunk);
    for (size_t b0 = j0; b0 < j1; b0 += block) {
      const size_t b1 = std::min(j1, b0 + block);
      size_t i = i0;
      for (; i + 4 <= i1; i += 4)
        row_tiles<4>(x + i * k, w, c + i * n, n, k, alpha, beta, mask, b0, b1);
      switch (i1 - i) {
      case 3:
        row_tiles<3>(x + i * k, w, c + i * n, n, k, alpha, beta, mask, b0, b1);
        break;
      case 2:
        row_tiles<2>(x + i * k, w, c + i * n, n, k, alpha, beta, mask, b0, b1);
        break;
      case 1:
        row_tiles<1>(x + i * k, w, c + i * n, n, k, alpha, beta, mask, b0, b1);
        break;
      default:
        break;
      }
    }
  }
}

// One element: a[0..k) against b[0..k).
TROUPE_AVX2 float avx2_dot(const float* a, const float* b, size_t k) {
  __m256 acc = _mm256_setzero_ps();
  size_t p = 0;
  for (; p + lanes <= k; p += lanes)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + p), _mm256_loadu_ps(b + p), acc);
  if (p < k) {
    alignas(32) std::int32_t bits[lanes];
    for (size_t l = 0; l < lanes; ++l)
      bits[l] = l < k - p ? -1 : 0;
    const __m256i mask = _mm256_load_si256(reinterpret_cast<const __m256i*>(bits));
    acc = _mm256_fmadd_ps(_mm256_maskload_ps(a + p, mask), _mm256_maskload_ps(b + p, mask), acc);
  }
  return lane_sum(acc);
}

TROUPE_AVX2 void avx2_axpy(float* y, const float* x, float a, size_t n) {
  const __m256 av = _mm256_set1_ps(a);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes)
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(av, _mm256_loadu_ps(x + i))));
  for (; i < n; ++i)
    y[i] = y[i] + a * x[i];
}

#undef TROUPE_AVX2

#endif // TROUPE_GEMM_AVX2

/// This CPU runs the AVX2/FMA kernel (checked once).
bool runs_avx2() noexcept {
#ifdef TROUPE_GEMM_AVX2
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return avx2;
#else
  return false;
#endif
}

void columns(gemm_kernel kernel, const float* x, const float* w, float* c, size_t m, size_t n, size_t k,
             float alpha, float beta, size_t j0, size_t j1) {
#ifdef TROUPE_GEMM_AVX2
  if (kernel == gemm_kernel::avx2_fma && runs_avx2()) {
    avx2_columns(x, w, c, m, n, k, alpha, beta, j0, j1);
    return;
  }
#endif
  // The portable kernel, asked for or standing in (the same bits).
  portable_columns(x, w, c, m, n, k, alpha, beta, j0, j1);
}

// Threads for threads == 0: one per 2^23 multiply-adds (about half a
// millisecond on one core; starting a thread costs tens of microseconds on
// a busy machine), at most one per 48 columns and one per core.
unsigned auto_threads(size_t m, size_t n, size_t k) {
  const size_t work = m * n * k;
  const size_t cores = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<unsigned>(std::max<size_t>(1, std::min({cores, work >> 23, n / 48})));
}

} // namespace

std::string_view to_string(gemm_kernel k) noexcept {
  switch (k) {
  case gemm_kernel::portable:
    return "portable";
  case gemm_kernel::avx2_fma:
    return "avx2_fma";
  }
  return "?";
}

float dot(const float* a, const float* b, size_t k, gemm_kernel kernel) noexcept {
#ifdef TROUPE_GEMM_AVX2
  if (kernel == gemm_kernel::avx2_fma && runs_avx2())
    return avx2_dot(a, b, k);
#endif
  return portable_dot(a, b, k);
}

void axpy(float* y, const float* x, float a, size_t n, gemm_kernel kernel) noexcept {
#ifdef TROUPE_GEMM_AVX2
  if (kernel == gemm_kernel::avx2_fma && runs_avx2()) {
    avx2_axpy(y, x, a, n);
    return;
  }
#endif
  for (size_t i = 0; i < n; ++i)
    y[i] = y[i] + a * x[i];
}

gemm_kernel best_gemm_kernel() noexcept {
  return runs_avx2() ? gemm_kernel::avx2_fma : gemm_kernel::portable;
}

void gemm_xwt(const float* x, const float* w, float* c, size_t m, size_t n, size_t k, float alpha, float beta,
              gemm_kernel kernel, unsigned threads) {
  if (m == 0 || n == 0)
    return;
  const size_t parts = std::min<size_t>(n, threads == 0 ? auto_threads(m, n, k) : threads);
  if (parts <= 1) {
    columns(kernel, x, w, c, m, n, k, alpha, beta, 0, n);
    return;
  }
  // Column ranges of near-equal size; this thread takes the first.
  std::vector<std::jthread> helpers;
  helpers.reserve(parts - 1);
  for (size_t t = 1; t < parts; ++t) {
    const size_t j0 = n * t / parts, j1 = n * (t + 1) / parts;
    helpers.emplace_back([=] { columns(kernel, x, w, c, m, n, k, alpha, beta, j0, j1); });
  }
  columns(kernel, x, w, c, m, n, k, alpha, beta, 0, n / parts);
}

} // namespace troupe::gpu
