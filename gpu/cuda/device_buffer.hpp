// Owned CUDA allocations, move-only, freed once: device memory (cudaMalloc;
// never managed memory) and page-locked host memory (cudaMallocHost, so
// copies to and from the device run asynchronously on the copy engines).
#pragma once

#include "gpu/cuda/check.hpp"

#include <cstddef>
#include <span>
#include <utility>

namespace troupe::gpu::cuda {

struct device_memory {
  static void* allocate(std::size_t bytes) {
    void* p = nullptr;
    TROUPE_CUDA_CHECK(cudaMalloc(&p, bytes));
    return p;
  }
  static void release(void* p) noexcept { cudaFree(p); }
};

struct pinned_memory {
  static void* allocate(std::size_t bytes) {
    void* p = nullptr;
    TROUPE_CUDA_CHECK(cudaMallocHost(&p, bytes));
    return p;
  }
  static void release(void* p) noexcept { cudaFreeHost(p); }
};

template <class T, class Memory>
class cuda_buffer {
public:
  cuda_buffer() = default;
  explicit cuda_buffer(std::size_t n) : n_(n) {
    if (n > 0)
      p_ = static_cast<T*>(Memory::allocate(n * sizeof(T)));
  }
  cuda_buffer(cuda_buffer&& o) noexcept
    : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  cuda_buffer& operator=(cuda_buffer&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  cuda_buffer(const cuda_buffer&) = delete;
  cuda_buffer& operator=(const cuda_buffer&) = delete;
  ~cuda_buffer() { reset(); }

  void reset() noexcept {
    if (p_ != nullptr)
      Memory::release(p_);
    p_ = nullptr;
    n_ = 0;
  }
  T* data() const noexcept { return p_; }
  std::size_t size() const noexcept { return n_; }
  std::size_t bytes() const noexcept { return n_ * sizeof(T); }

  /// Synchronous copies from and to the host, for tests and set-up. An
  /// upload has landed when it returns, also for work on non-blocking
  /// streams (cudaMemcpy from pageable memory may return once the bytes are
  /// staged, before the device holds them).
  void upload(std::span<const T> host) {
    check_fits(host.size(), "upload");
    if (!host.empty()) {
      TROUPE_CUDA_CHECK(cudaMemcpy(p_, host.data(), host.size_bytes(), cudaMemcpyDefault));
      TROUPE_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
    }
  }
  void download(std::span<T> host) const {
    check_fits(host.size(), "download");
    if (!host.empty())
      TROUPE_CUDA_CHECK(cudaMemcpy(host.data(), p_, host.size_bytes(), cudaMemcpyDefault));
  }

private:
  void check_fits(std::size_t n, const char* what) const {
    if (n > n_)
      throw cuda_error(std::string("cuda_buffer::") + what + ": " + std::to_string(n) +
                       " elements, the buffer holds " + std::to_string(n_));
  }
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

template <class T>
using device_buffer = cuda_buffer<T, device_memory>;
template <class T>
using pinned_buffer = cuda_buffer<T, pinned_memory>;

} // namespace troupe::gpu::cuda
