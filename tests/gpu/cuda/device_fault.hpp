// A fault on the device on purpose: a kernel that writes to an address no
// allocation holds, which poisons the process's CUDA context (every later
// CUDA call returns cudaErrorIllegalAddress). For tests that run it in a
// child process of their own (a death test).
#pragma once

#include <cuda_runtime_api.h>

namespace troupe::gpu::cuda::testing {

/// Launches the faulting kernel on the current device and waits for it;
/// returns what the wait returned (cudaErrorIllegalAddress).
cudaError_t fault_the_device();

} // namespace troupe::gpu::cuda::testing
