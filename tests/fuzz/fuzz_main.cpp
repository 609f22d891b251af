// libFuzzer's entry for one target, named at compile time (tests/fuzz/CMakeLists.txt).
#include "tests/fuzz/targets.hpp"

#include <cstddef>
#include <cstdint>

#ifndef TROUPE_FUZZ_TARGET
#error "TROUPE_FUZZ_TARGET names the target"
#endif

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const auto* target = troupe::fuzz::find_target(TROUPE_FUZZ_TARGET);
  target->run({data, size});
  return 0;
}
