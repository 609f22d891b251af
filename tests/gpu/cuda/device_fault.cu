#include "tests/gpu/cuda/device_fault.hpp"

#include <cstdint>

namespace troupe::gpu::cuda::testing {

namespace {

__global__ void write_outside_every_allocation(std::uintptr_t address) {
  *reinterpret_cast<volatile int*>(address) = 1;
}

} // namespace

cudaError_t fault_the_device() {
  // The first page of the address space is never mapped.
  write_outside_every_allocation<<<1, 1>>>(std::uintptr_t{16});
  return cudaDeviceSynchronize();
}

} // namespace troupe::gpu::cuda::testing
