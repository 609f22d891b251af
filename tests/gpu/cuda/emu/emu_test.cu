// The emulated device's own behaviour, where the GPU tests that run on it
// rely on it: CUDA's rules it enforces (launch limits, what a stream capture
// refuses, cuBLAS's argument checks) and the semantics it implements (warp
// exchanges, barriers, cuBLAS's column-major product, stream order, NaN
// memory).
#include "gpu/cuda/dtype.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace {

// Kernels written and launched as gpu/cuda's are: transform.py rewrites this
// file as it rewrites them.
__global__ void warp_sums(const float* in, float* out) {
  float v = in[blockIdx.x * blockDim.x + threadIdx.x];
  for (int o = 16; o > 0; o /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

__global__ void reverse_in_block(const int* in, int* out) {
  __shared__ int tile[256];
  tile[threadIdx.x] = in[threadIdx.x];
  __syncthreads();
  out[threadIdx.x] = tile[blockDim.x - 1 - threadIdx.x];
}

__global__ void lanes_at_different_barriers(int* out) {
  if (threadIdx.x == 0)
    __syncthreads();
  else
    __syncwarp();
  out[threadIdx.x] = 1;
}

__global__ void __launch_bounds__(64) bounded(int* out) { out[threadIdx.x] = 1; }
__global__ void __launch_bounds__(128, 4) bounded_with_blocks(int* out) { out[threadIdx.x] = 2; }

template <class T>
T* device_array(std::size_t n) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
  return static_cast<T*>(p);
}

TEST(cuda_emu, shuffles_exchange_within_each_warp) {
  std::vector<float> in(128);
  for (std::size_t i = 0; i < in.size(); ++i)
    in[i] = static_cast<float>(i);
  float* d_in = device_array<float>(in.size());
  float* d_out = device_array<float>(in.size());
  ASSERT_EQ(cudaMemcpy(d_in, in.data(), in.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  warp_sums<<<2, 64>>>(d_in, d_out);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<float> out(in.size());
  ASSERT_EQ(cudaMemcpy(out.data(), d_out, out.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (std::size_t w = 0; w < 4; ++w)
    for (std::size_t l = 0; l < 32; ++l) // each warp's lanes all hold the warp's sum
      EXPECT_EQ(out[w * 32 + l], static_cast<float>(32 * (32 * w) + 31 * 32 / 2)) << w << " " << l;
  cudaFree(d_in);
  cudaFree(d_out);
}

TEST(cuda_emu, shared_memory_is_the_blocks_and_syncthreads_orders_it) {
  std::vector<int> in(256);
  for (int i = 0; i < 256; ++i)
    in[i] = i * 3;
  int* d_in = device_array<int>(256);
  int* d_out = device_array<int>(256);
  ASSERT_EQ(cudaMemcpy(d_in, in.data(), 1024, cudaMemcpyHostToDevice), cudaSuccess);
  reverse_in_block<<<1, 256>>>(d_in, d_out);
  std::vector<int> out(256);
  ASSERT_EQ(cudaMemcpy(out.data(), d_out, 1024, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i < 256; ++i)
    EXPECT_EQ(out[i], (255 - i) * 3);
  cudaFree(d_in);
  cudaFree(d_out);
}

TEST(cuda_emu, fresh_device_memory_reads_as_nan) {
  float* d = device_array<float>(16);
  std::vector<float> h(16, 0.0f);
  ASSERT_EQ(cudaMemcpy(h.data(), d, 64, cudaMemcpyDeviceToHost), cudaSuccess);
  for (float x : h)
    EXPECT_TRUE(std::isnan(x));
  cudaFree(d);
}

TEST(cuda_emu, launches_cuda_refuses_fail_with_its_error) {
  int* d = device_array<int>(2048);
  bounded<<<1, 2048>>>(d); // over 1024 threads
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  bounded<<<dim3(1, 70000), 32>>>(d); // grid.y over 65535
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  bounded<<<1, 32, 64 << 10>>>(d); // 64 KiB without the attribute
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  ASSERT_EQ(cudaFuncSetAttribute(bounded, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10), cudaSuccess);
  bounded<<<1, 32, 64 << 10>>>(d);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  bounded_with_blocks<<<2, 128>>>(d); // within its bound
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaFuncSetAttribute(bounded, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 << 10),
            cudaErrorInvalidValue); // past an H100's 227 KiB
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(d);
}

// Death tests in a fresh process ("threadsafe"): a forked child would lack
// the device thread.
TEST(cuda_emu_death, a_block_past_its_launch_bounds_aborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
    {
      int* d = device_array<int>(128);
      bounded<<<1, 128>>>(d);
      cudaDeviceSynchronize();
    },
    "__launch_bounds__\\(64\\)");
}

TEST(cuda_emu_death, lanes_waiting_at_different_barriers_abort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
    {
      int* d = device_array<int>(32);
      lanes_at_different_barriers<<<1, 32>>>(d);
      cudaDeviceSynchronize();
    },
    "deadlock");
}

TEST(cuda_emu, a_capture_refuses_allocation_and_the_legacy_stream_and_is_invalidated) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  float* d = device_array<float>(64);
  std::vector<float> h(64, 1.0f);
  for (int what = 0; what < 3; ++what) {
    SCOPED_TRACE(what);
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(d, 0, 256, s), cudaSuccess); // captured
    void* p = nullptr;
    if (what == 0)
      EXPECT_EQ(cudaMalloc(&p, 256), cudaErrorStreamCaptureUnsupported);
    else if (what == 1)
      EXPECT_EQ(cudaMemsetAsync(d, 0, 256, nullptr), cudaErrorStreamCaptureImplicit);
    else // pageable host memory cannot be staged by a graph
      EXPECT_EQ(cudaMemcpyAsync(d, h.data(), 256, cudaMemcpyHostToDevice, s), cudaErrorStreamCaptureUnsupported);
    cudaGraph_t g = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    EXPECT_EQ(g, nullptr);
  }
  // A capture of device work only replays it.
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(d, 0, 256, s), cudaSuccess);
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  cudaGraphExec_t x = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(x, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(h.data(), d, 256, cudaMemcpyDeviceToHost), cudaSuccess);
  for (float v : h)
    EXPECT_EQ(v, 0.0f);
  cudaGraphExecDestroy(x);
  cudaGraphDestroy(g);
  cudaFree(d);
  cudaStreamDestroy(s);
}

TEST(cuda_emu, a_stream_waits_for_an_event_recorded_on_another) {
  cudaStream_t a = nullptr, b = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t e = nullptr;
  ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
  float* d = device_array<float>(1 << 16);
  float* d2 = device_array<float>(1 << 16);
  for (int round = 0; round < 20; ++round) { // streams interleave at random: many orders
    ASSERT_EQ(cudaMemsetAsync(d, round, 1 << 18, a), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(e, a), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(b, e, 0), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(d2, d, 1 << 18, cudaMemcpyDeviceToDevice, b), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
    std::vector<unsigned char> h(1 << 18);
    ASSERT_EQ(cudaMemcpy(h.data(), d2, h.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(h.front(), round);
    EXPECT_EQ(h.back(), round);
  }
  cudaFree(d);
  cudaFree(d2);
  cudaEventDestroy(e);
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
}

// cuBLAS's definition: C = alpha op(A) op(B) + beta C, column-major, with
// leading dimensions; fp16 inputs, fp32 output.
TEST(cuda_emu, cublas_gemm_is_cublass_column_major_product) {
  using troupe::gpu::cuda::f32_to_f16_bits;
  const int m = 5, n = 3, k = 4, lda = 7, ldb = 6, ldc = 8; // op(A) = A^T: A is k x m
  std::vector<std::uint16_t> a(lda * m), b(ldb * n);
  std::vector<float> c(ldc * n, 1.0f);
  auto av = [](int kk, int i) { return static_cast<float>(kk + 2 * i) / 8; };
  auto bv = [](int kk, int j) { return static_cast<float>(kk - j) / 4; };
  for (int i = 0; i < m; ++i)
    for (int kk = 0; kk < k; ++kk)
      a[kk + i * lda] = f32_to_f16_bits(av(kk, i));
  for (int j = 0; j < n; ++j)
    for (int kk = 0; kk < k; ++kk)
      b[kk + j * ldb] = f32_to_f16_bits(bv(kk, j));
  auto* da = device_array<std::uint16_t>(a.size());
  auto* db = device_array<std::uint16_t>(b.size());
  auto* dc = device_array<float>(c.size());
  cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dc, c.data(), c.size() * 4, cudaMemcpyHostToDevice);
  cublasHandle_t h = nullptr;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  const float alpha = 2.0f, beta = 0.5f;
  ASSERT_EQ(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, da, CUDA_R_16F, lda, db, CUDA_R_16F, ldb,
                         &beta, dc, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  std::vector<float> out(c.size());
  cudaMemcpy(out.data(), dc, out.size() * 4, cudaMemcpyDeviceToHost);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < ldc; ++i) {
      float want = 1.0f; // rows past m are untouched
      if (i < m) {
        float sum = 0;
        for (int kk = 0; kk < k; ++kk)
          sum += av(kk, i) * bv(kk, j);
        want = alpha * sum + beta * 1.0f;
      }
      EXPECT_FLOAT_EQ(out[i + j * ldc], want) << i << " " << j;
    }
  // A leading dimension shorter than the matrix's is refused.
  EXPECT_EQ(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, da, CUDA_R_16F, k - 1, db, CUDA_R_16F, ldb,
                         &beta, dc, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, da, CUDA_R_16F, m - 1, db, CUDA_R_16F, ldb,
                         &beta, dc, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_INVALID_VALUE);
  cublasDestroy(h);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
}

} // namespace
