// A batch_plan on the device: every array packed into one buffer and copied
// with one cudaMemcpyAsync from pinned staging memory, so a step's metadata
// costs one copy on the compute stream.
#pragma once

#include "gpu/cuda/device_buffer.hpp"
#include "gpu/cuda/kernels.hpp"
#include "gpu/cuda/plan.hpp"

#include <cstddef>
#include <cstdint>

namespace troupe::gpu::cuda {

class plan_upload {
public:
  plan_upload() = default;
  plan_upload(const plan_upload&) = delete;
  plan_upload& operator=(const plan_upload&) = delete;
  ~plan_upload();

  /// Copies `plan` to the device on `stream` (growing the buffers when it
  /// is larger than any before) and returns its device view, valid for work
  /// enqueued on `stream` until the next upload. Waits for the previous
  /// upload's copy to leave the staging buffer before overwriting it.
  device_plan upload(const batch_plan& plan, cudaStream_t stream);

private:
  cudaEvent_t copied_ = nullptr; // the last copy out of staging_

  pinned_buffer<std::byte> staging_;
  device_buffer<std::byte> device_;
};

} // namespace troupe::gpu::cuda
