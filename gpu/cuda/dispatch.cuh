// Host-side helpers every kernel family's launchers share: the element type
// as a C++ type, and the 16-byte alignment that decides vector loads.
#pragma once

#include "gpu/cuda/dtype.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace troupe::gpu::cuda {

template <class T>
struct type_tag {
  using type = T;
};

/// Calls f(type_tag<T>) for the element type `t` (__half or
/// __nv_bfloat16); an unknown value throws std::invalid_argument naming `who`.
template <class F>
void dispatch_dtype(dtype t, const char* who, F&& f) {
  switch (t) {
    case dtype::f16:
      f(type_tag<__half>{});
      return;
    case dtype::bf16:
      f(type_tag<__nv_bfloat16>{});
      return;
  }
  throw std::invalid_argument(std::string(who) + ": unknown element type " +
                              std::to_string(static_cast<int>(t)));
}

/// Whether `p` allows 16-byte vector accesses.
inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

} // namespace troupe::gpu::cuda
