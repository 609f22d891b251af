// What the GPU tests of gpu/cuda share: the skip when no GPU is visible,
// a stream the test owns, host-to-device copies, and the end of a launch.
#pragma once

#include "gpu/cuda/check.hpp"
#include "gpu/cuda/device_buffer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

/// Skips the calling test where no CUDA device is visible (the only reason
/// a GPU test is skipped).
#define TROUPE_REQUIRE_GPU()                                                                       \
  if (!::troupe::gpu::cuda::device_visible())                                                      \
  GTEST_SKIP() << "no CUDA device visible"

namespace troupe::gpu::cuda::gpu_testing {

/// A non-blocking stream the test owns.
struct stream_holder {
  cudaStream_t s = nullptr;
  stream_holder() { TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~stream_holder() { cudaStreamDestroy(s); }
  stream_holder(const stream_holder&) = delete;
  stream_holder& operator=(const stream_holder&) = delete;
};

/// A device copy of `host` (one element at least, so empty inputs still
/// have a valid pointer).
template <class T>
device_buffer<T> to_device(const std::vector<T>& host) {
  device_buffer<T> d(std::max<std::size_t>(host.size(), 1));
  d.upload(host);
  return d;
}

/// Reports a bad launch, then waits for the device.
inline void finish() {
  TROUPE_CUDA_CHECK(cudaGetLastError());
  TROUPE_CUDA_CHECK(cudaDeviceSynchronize());
}

} // namespace troupe::gpu::cuda::gpu_testing
