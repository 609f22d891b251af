// Tests for gpu/cpu_gemm: against a double-precision product, the AVX2
// kernel against the portable one bit for bit, and each element's bits
// independent of the other rows, the batch's size, the thread count and
// the kernel (what makes the cpu backend batch-invariant).
#include "gpu/cpu_gemm.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace troupe::gpu {
namespace {

using vec = std::vector<float>;

vec randn(std::mt19937_64& rng, std::size_t n) {
  std::normal_distribution<float> d{0.0f, 1.0f};
  vec v(n);
  for (auto& x : v)
    x = d(rng);
  return v;
}

struct shape {
  std::size_t m, n, k;
};

// Every tile edge of the AVX2 kernel (rows mod 4, columns mod 3 and mod its
// blocks of 48, k mod 8) and an empty k.
std::vector<shape> edge_shapes() {
  std::vector<shape> out;
  for (std::size_t m : {1, 2, 3, 4, 5, 7, 9})
    for (std::size_t n : {1, 2, 3, 4, 47, 49, 100})
      for (std::size_t k : {0, 1, 7, 8, 9, 17, 64, 131})
        out.push_back({m, n, k});
  return out;
}

std::vector<std::uint32_t> bits(const vec& v) {
  std::vector<std::uint32_t> b(v.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    b[i] = std::bit_cast<std::uint32_t>(v[i]);
  return b;
}

vec run(const vec& x, const vec& w, const vec& c0, shape s, float alpha, float beta, gemm_kernel kernel,
        unsigned threads) {
  vec c = c0;
  gemm_xwt(x.data(), w.data(), c.data(), s.m, s.n, s.k, alpha, beta, kernel, threads);
  return c;
}

TEST(cpu_gemm, names_its_kernels) {
  EXPECT_EQ(to_string(gemm_kernel::portable), "portable");
  EXPECT_EQ(to_string(gemm_kernel::avx2_fma), "avx2_fma");
}

TEST(cpu_gemm, matches_a_double_precision_product) {
  std::mt19937_64 rng{1};
  for (const auto kernel : {gemm_kernel::portable, best_gemm_kernel()}) {
    for (const shape s : edge_shapes()) {
      const vec x = randn(rng, s.m * s.k), w = randn(rng, s.n * s.k), c0 = randn(rng, s.m * s.n);
      for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.5f, 1.0f}, std::pair{-2.0f, 0.25f}}) {
        const vec c = run(x, w, c0, s, alpha, beta, kernel, 1);
        for (std::size_t i = 0; i < s.m; ++i)
          for (std::size_t j = 0; j < s.n; ++j) {
            double want = 0, mag = 0;
            for (std::size_t p = 0; p < s.k; ++p) {
              want += double{x[i * s.k + p]} * w[j * s.k + p];
              mag += std::abs(double{x[i * s.k + p]} * w[j * s.k + p]);
            }
            const double cij = c0[i * s.n + j];
            want = alpha * want + beta * cij;
            // fp32 sums of k products: a few ulps of the magnitudes summed.
            const double tol = 4 * std::numeric_limits<float>::epsilon() *
                               (std::abs(alpha) * mag * (1 + std::log2(1.0 + s.k)) + std::abs(beta * cij));
            ASSERT_NEAR(c[i * s.n + j], want, tol)
                << to_string(kernel) << " m " << s.m << " n " << s.n << " k " << s.k << " at " << i << "," << j;
          }
      }
    }
  }
}

// (Where the CPU lacks AVX2 and FMA, the portable kernel stands in for the
// vector one: the comparison still holds.)
TEST(cpu_gemm, vector_kernel_gives_the_portable_bits) {
  std::mt19937_64 rng{2};
  std::vector<shape> shapes = edge_shapes();
  shapes.push_back({33, 257, 1000}); // several row chunks and column blocks
  for (const shape s : shapes) {
    const vec x = randn(rng, s.m * s.k), w = randn(rng, s.n * s.k), c0 = randn(rng, s.m * s.n);
    for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.125f, 1.0f}}) {
      const auto want = bits(run(x, w, c0, s, alpha, beta, gemm_kernel::portable, 1));
      EXPECT_EQ(bits(run(x, w, c0, s, alpha, beta, gemm_kernel::avx2_fma, 1)), want)
          << "m " << s.m << " n " << s.n << " k " << s.k << " beta " << beta;
    }
  }
}

// dot: one element of gemm_xwt (alpha 1, beta 0), bit for bit, on either
// kernel, for lengths with and without a tail past the last 8.
TEST(cpu_gemm, dot_is_one_element_of_the_product) {
  std::mt19937_64 rng{5};
  for (const std::size_t k : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{9},
                              std::size_t{64}, std::size_t{100}, std::size_t{128}}) {
    const vec a = randn(rng, k), b = randn(rng, k);
    float want = 0;
    gemm_xwt(a.data(), b.data(), &want, 1, 1, k, 1.0f, 0.0f, gemm_kernel::portable, 1);
    for (const auto kernel : {gemm_kernel::portable, gemm_kernel::avx2_fma}) {
      const float got = dot(a.data(), b.data(), k, kernel);
      EXPECT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(want))
          << "k " << k << " " << to_string(kernel);
    }
    double exact = 0;
    for (std::size_t i = 0; i < k; ++i)
      exact += static_cast<double>(a[i]) * b[i];
    EXPECT_NEAR(want, exact, 1e-4 * (1 + std::abs(exact))) << "k " << k;
  }
}

// axpy: y + a x element by element, a product then a sum, on either kernel.
TEST(cpu_gemm, axpy_adds_a_scaled_row_with_the_same_bits_on_every_kernel) {
  std::mt19937_64 rng{6};
  for (const std::size_t n : {std::size_t{0}, std::size_t{3}, std::size_t{8}, std::size_t{13}, std::size_t{128}}) {
    const vec x = randn(rng, n), y0 = randn(rng, n);
    const float a = 0.37f;
    vec want = y0;
    for (std::size_t i = 0; i < n; ++i) {
      const float product = a * x[i];
      want[i] = want[i] + product;
    }
    for (const auto kernel : {gemm_kernel::portable, gemm_kernel::avx2_fma}) {
      vec y = y0;
      axpy(y.data(), x.data(), a, n, kernel);
      EXPECT_EQ(bits(y), bits(want)) << "n " << n << " " << to_string(kernel);
    }
  }
}

// Row i of a batch, computed alone, in a batch of any size, by any number
// of threads: the same bits. (OpenBLAS's sgemm, which the cpu model used
// before, gives different bits for one row at m = 1 and at m = 4 or 16.)
TEST(cpu_gemm, each_row_is_the_same_in_any_batch) {
  std::mt19937_64 rng{3};
  for (const auto kernel : {gemm_kernel::portable, best_gemm_kernel()}) {
    for (const shape s : {shape{37, 96, 64}, shape{64, 200, 256}, shape{9, 1030, 33}}) {
      const vec x = randn(rng, s.m * s.k), w = randn(rng, s.n * s.k);
      const vec c0(s.m * s.n, std::numeric_limits<float>::quiet_NaN()); // not read at beta 0
      const auto whole = bits(run(x, w, c0, s, 1.0f, 0.0f, kernel, 1));
      for (const float v : run(x, w, c0, s, 1.0f, 0.0f, kernel, 1))
        ASSERT_TRUE(std::isfinite(v));
      for (unsigned threads : {0u, 2u, 3u, 7u})
        EXPECT_EQ(bits(run(x, w, c0, s, 1.0f, 0.0f, kernel, threads)), whole) << threads << " threads";
      // Sub-batches of every size from every start.
      for (std::size_t rows : {1, 2, 3, 4, 5, 8}) {
        for (std::size_t i0 = 0; i0 + rows <= s.m; i0 += rows) {
          const vec xs(x.begin() + static_cast<std::ptrdiff_t>(i0 * s.k),
                       x.begin() + static_cast<std::ptrdiff_t>((i0 + rows) * s.k));
          const auto part = bits(run(xs, w, vec(rows * s.n), {rows, s.n, s.k}, 1.0f, 0.0f, kernel, 1));
          const std::vector<std::uint32_t> want(whole.begin() + static_cast<std::ptrdiff_t>(i0 * s.n),
                                                whole.begin() + static_cast<std::ptrdiff_t>((i0 + rows) * s.n));
          ASSERT_EQ(part, want) << to_string(kernel) << ": rows " << i0 << ".." << i0 + rows;
        }
      }
    }
  }
}

TEST(cpu_gemm, beta_one_adds_to_what_c_held) {
  std::mt19937_64 rng{4};
  const shape s{6, 50, 20};
  const vec x = randn(rng, s.m * s.k), w = randn(rng, s.n * s.k), c0 = randn(rng, s.m * s.n);
  const vec fresh = run(x, w, vec(s.m * s.n), s, 0.5f, 0.0f, best_gemm_kernel(), 1);
  const vec added = run(x, w, c0, s, 0.5f, 1.0f, best_gemm_kernel(), 1);
  for (std::size_t i = 0; i < added.size(); ++i)
    EXPECT_EQ(added[i], c0[i] + fresh[i]) << i;
}

TEST(cpu_gemm, empty_shapes_write_nothing) {
  vec c = {1.0f, 2.0f};
  const vec x = {1.0f}, w = {1.0f};
  gemm_xwt(x.data(), w.data(), c.data(), 0, 2, 1, 1.0f, 0.0f);
  gemm_xwt(x.data(), w.data(), c.data(), 1, 0, 1, 1.0f, 0.0f);
  EXPECT_EQ(c, (vec{1.0f, 2.0f}));
  // k = 0: the sum of nothing, so c = beta * c.
  gemm_xwt(x.data(), w.data(), c.data(), 1, 2, 0, 1.0f, 0.5f);
  EXPECT_EQ(c, (vec{0.5f, 1.0f}));
}

} // namespace
} // namespace troupe::gpu
