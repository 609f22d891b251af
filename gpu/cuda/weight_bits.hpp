// A checkpoint's tensor (as stored: F32, F16 or BF16) as the 16-bit values
// of the CUDA backend's type, one tensor at a time: the stored bits where
// the types agree, else each value rounded to nearest even (to_bits), so a
// model's weights go from the mapped file to the device without an fp32
// copy of the whole model in host memory.
#pragma once

#include "gpu/cuda/dtype.hpp"
#include "gpu/safetensors.hpp"

#include <cstdint>
#include <vector>

namespace troupe::gpu::cuda {

/// The values of `t` as type `target`'s bits, row-major as stored.
std::vector<std::uint16_t> weight_bits(const tensor_view& t, dtype target);

} // namespace troupe::gpu::cuda
