// Deterministic mixing for seeds and simulated draws, shared by the sim
// backend (token draws) and the intake (seeds of requests that bring none).
#pragma once

#include <cstdint>

namespace troupe::gpu {

/// splitmix64 (Steele, Lea, Flood 2014): a bijective 64-bit mix whose output
/// passes BigCrush for consecutive inputs, so chained calls give
/// independent-looking draws per (seed, request seed, output index).
constexpr std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

} // namespace troupe::gpu
