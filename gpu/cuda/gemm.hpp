// The base model's GEMMs on cuBLAS: row-major activations times Hugging
// Face's [out, in] weights, fp16 or bf16 in and out, fp32 accumulation,
// over the whole token-flattened batch in one call.
#pragma once

#include "gpu/cuda/dtype.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace troupe::gpu::cuda {

/// A cuBLAS handle bound to one stream, with its workspace; not shared
/// between threads.
class blas {
public:
  explicit blas(cudaStream_t stream);
  blas(const blas&) = delete;
  blas& operator=(const blas&) = delete;
  ~blas();

  /// y[rows, out] = x[rows, in] * w[out, in]^T (+ y when accumulate):
  /// y, x, w of type t; `out_f32` writes y as fp32 (the logits).
  void linear(dtype t, const void* x, const void* w, void* y, std::uint32_t rows,
              std::uint32_t in, std::uint32_t out, bool accumulate = false, bool out_f32 = false);

  /// `count` linears over the same input in one launch: y_i[rows, out] =
  /// x[rows, in] * w_i[out, in]^T for i < count, where w_i sits at
  /// w + i * w_stride and y_i at y + i * y_stride (elements of type t). The
  /// q, k and v projections of a layer whose weights are stored one after
  /// another.
  void linear_batched(dtype t, const void* x, const void* w, std::uint64_t w_stride, void* y,
                      std::uint64_t y_stride, std::uint32_t rows, std::uint32_t in,
                      std::uint32_t out, std::uint32_t count);

  /// Dense fp16 or bf16 GEMM on plain column-major operands, C[m, n] =
  /// A[m, k] B[k, n], for the benchmark's tensor-core ceiling.
  void dense(dtype t, const void* a, const void* b, void* c, std::uint32_t m, std::uint32_t n,
             std::uint32_t k);

  cudaStream_t stream() const noexcept { return stream_; }

private:
  cublasHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* workspace_ = nullptr;
};

/// y = x w^T as blas::linear_batched computes it (count 1: blas::linear,
/// the strides unused; fp32 output only then), on gemv (kernels.hpp) where
/// rows <= gemv_rows and gemv takes the shape, else on `b`'s cuBLAS: the
/// model's linear layers, and the benchmark's.
void linear_on(blas& b, dtype t, const void* x, const void* w, std::uint64_t w_stride, void* y,
               std::uint64_t y_stride, std::uint32_t rows, std::uint32_t in, std::uint32_t out,
               std::uint32_t count, bool out_f32, std::uint32_t gemv_rows);

} // namespace troupe::gpu::cuda
