// blas: cublasGemmEx with fp32 compute. Row-major y = x w^T is, in cuBLAS's
// column-major terms, y^T[out, rows] = w[out, in] (stored as w^T, in x out,
// column-major: op T) times x^T[in, rows] (op N).
#include "gpu/cuda/gemm.hpp"

#include "gpu/cuda/check.hpp"
#include "gpu/cuda/kernels.hpp"

namespace troupe::gpu::cuda {

namespace {

constexpr std::size_t workspace_bytes = 32u << 20; // cuBLAS's advice for Hopper

cudaDataType_t cuda_type(dtype t) { return t == dtype::f16 ? CUDA_R_16F : CUDA_R_16BF; }

} // namespace

blas::blas(cudaStream_t stream) : stream_(stream) {
  TROUPE_CUBLAS_CHECK(cublasCreate(&handle_));
  TROUPE_CUBLAS_CHECK(cublasSetStream(handle_, stream));
  TROUPE_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes));
  TROUPE_CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_, workspace_bytes));
  TROUPE_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
}

blas::~blas() {
  if (handle_ != nullptr)
    cublasDestroy(handle_);
  if (workspace_ != nullptr)
    cudaFree(workspace_);
}

void blas::linear(dtype t, const void* x, const void* w, void* y, std::uint32_t rows,
                  std::uint32_t in, std::uint32_t out, bool accumulate, bool out_f32) {
  if (rows == 0)
    return;
  const float alpha = 1.0f;
  const float beta = accumulate ? 1.0f : 0.0f;
  TROUPE_CUBLAS_CHECK(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out),
                                   static_cast<int>(rows), static_cast<int>(in), &alpha, w,
                                   cuda_type(t), static_cast<int>(in), x, cuda_type(t),
                                   static_cast<int>(in), &beta, y,
                                   out_f32 ? CUDA_R_32F : cuda_type(t), static_cast<int>(out),
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void blas::linear_batched(dtype t, const void* x, const void* w, std::uint64_t w_stride, void* y,
                          std::uint64_t y_stride, std::uint32_t rows, std::uint32_t in,
                          std::uint32_t out, std::uint32_t count) {
  if (rows == 0 || count == 0)
    return;
  const float alpha = 1.0f;
  const float beta = 0.0f;
  // The input's stride is 0: every linear of the batch reads the same x.
  TROUPE_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
    handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out), static_cast<int>(rows),
    static_cast<int>(in), &alpha, w, cuda_type(t), static_cast<int>(in),
    static_cast<long long>(w_stride), x, cuda_type(t), static_cast<int>(in), 0, &beta, y,
    cuda_type(t), static_cast<int>(out), static_cast<long long>(y_stride), static_cast<int>(count),
    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void blas::dense(dtype t, const void* a, const void* b, void* c, std::uint32_t m, std::uint32_t n,
                 std::uint32_t k) {
  const float alpha = 1.0f;
  const float beta = 0.0f;
  TROUPE_CUBLAS_CHECK(cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(m),
                                   static_cast<int>(n), static_cast<int>(k), &alpha, a,
                                   cuda_type(t), static_cast<int>(m), b, cuda_type(t),
                                   static_cast<int>(k), &beta, c, cuda_type(t),
                                   static_cast<int>(m), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void linear_on(blas& b, dtype t, const void* x, const void* w, std::uint64_t w_stride, void* y,
               std::uint64_t y_stride, std::uint32_t rows, std::uint32_t in, std::uint32_t out,
               std::uint32_t count, bool out_f32, std::uint32_t gemv_rows) {
  if (rows <= gemv_rows && gemv(t, x, w, w_stride, y, y_stride, rows, in, out, count, out_f32, b.stream()))
    return;
  if (count == 1) {
    b.linear(t, x, w, y, rows, in, out, false, out_f32);
    return;
  }
  if (out_f32)
    throw cuda_error("linear_on: fp32 output of a batched product");
  b.linear_batched(t, x, w, w_stride, y, y_stride, rows, in, out, count);
}

} // namespace troupe::gpu::cuda
