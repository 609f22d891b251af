// Error checks for CUDA and cuBLAS calls: a failure becomes a cuda_error
// naming the call, the file and the line and the runtime's own message.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace troupe::gpu::cuda {

struct cuda_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* what, const char* file, int line) {
  throw cuda_error(std::string(what) + " failed at " + file + ":" + std::to_string(line) + ": " +
                   cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

[[noreturn]] inline void throw_cublas(cublasStatus_t s, const char* what, const char* file,
                                      int line) {
  throw cuda_error(std::string(what) + " failed at " + file + ":" + std::to_string(line) +
                   ": cuBLAS status " + std::to_string(static_cast<int>(s)) + " (" +
                   cublasGetStatusString(s) + ")");
}

/// Whether a CUDA device is visible (false, not an error, on machines
/// without a GPU or a driver).
inline bool device_visible() noexcept {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

} // namespace troupe::gpu::cuda

#define TROUPE_CUDA_CHECK(call)                                                                    \
  do {                                                                                             \
    const cudaError_t troupe_e_ = (call);                                                          \
    if (troupe_e_ != cudaSuccess)                                                                  \
      ::troupe::gpu::cuda::throw_cuda(troupe_e_, #call, __FILE__, __LINE__);                       \
  } while (0)

#define TROUPE_CUBLAS_CHECK(call)                                                                  \
  do {                                                                                             \
    const cublasStatus_t troupe_s_ = (call);                                                       \
    if (troupe_s_ != CUBLAS_STATUS_SUCCESS)                                                        \
      ::troupe::gpu::cuda::throw_cublas(troupe_s_, #call, __FILE__, __LINE__);                     \
  } while (0)
