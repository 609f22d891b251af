// cpu_gemm: the cpu model's matrix product. Each element of the result is
// computed from its own row of x and its own row of w alone, always in the
// same order, so a token's numbers do not depend on which other tokens share
// its batch, how its prompt was split into chunks, or how many threads ran.
// Used by gpu/cpu_model (and its tests); no dependencies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace troupe::gpu {

/// The code that computes the product. Both give the same bits: eight
/// partial sums per element (lane l takes k = l, l + 8, ... by fused
/// multiply-add, zeros past k), added in one fixed tree, then alpha and beta.
enum class gemm_kernel : std::uint8_t {
  portable, ///< plain C++ (std::fma); the reference, and the fallback
  avx2_fma, ///< x86-64 AVX2 and FMA intrinsics, in register tiles; where
            ///< the CPU lacks them, the portable kernel stands in
};

/// "portable" or "avx2_fma".
std::string_view to_string(gemm_kernel k) noexcept;

/// The fastest kernel this CPU runs (avx2_fma where it has AVX2 and FMA).
gemm_kernel best_gemm_kernel() noexcept;

/// c[m, n] = alpha * x[m, k] * w[n, k]^T + beta * c[m, n], all row-major
/// and dense; c is not read where beta is 0. Element (i, j) depends on
/// x[i, :], w[j, :], alpha, beta and c[i, j] only: the same bits whatever
/// m, the other rows, the kernel or the thread count. threads 0 picks from
/// the work's size and the machine's cores; the columns are split between
/// threads. Any thread may call it; the arrays must not overlap c.
void gemm_xwt(const float* x, const float* w, float* c, std::size_t m, std::size_t n, std::size_t k,
              float alpha, float beta, gemm_kernel kernel = best_gemm_kernel(), unsigned threads = 0);

/// sum_i a[i] * b[i] over k elements in gemm_xwt's order for one element
/// (gemm_xwt's with alpha 1 and beta 0, bit for bit), on either kernel:
/// the cpu model's attention scores.
float dot(const float* a, const float* b, std::size_t k, gemm_kernel kernel = best_gemm_kernel()) noexcept;

/// y[i] += a * x[i] for i < n, each a product rounded and then a sum
/// rounded (no fused multiply-add), so every kernel gives the same bits:
/// the cpu model's attention-weighted sum of V.
void axpy(float* y, const float* x, float a, std::size_t n, gemm_kernel kernel = best_gemm_kernel()) noexcept;

} // namespace troupe::gpu
