// gpu_spec: the datasheet numbers of one GPU that a roofline model needs (peak
// FLOP/s, HBM and PCIe bandwidth, memory size), with named presets. Used by the
// roofline cost model and the sim backend; runtime/ sizes caches from memory_bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::gpu {

/// One GPU's throughput limits. Plain data, safe to copy across threads.
struct gpu_spec {
  /// Preset name, e.g. "H100-80GB".
  std::string name;
  /// Device memory as the driver reports it (nvidia-smi "memory.total").
  std::uint64_t memory_bytes = 0;
  /// Dense (no structured sparsity) fp16/bf16 tensor-core peak, FLOP/s.
  double peak_flops = 0.0;
  /// Peak HBM bandwidth, bytes/s.
  double hbm_bytes_per_s = 0.0;
  /// Sustained host-to-device rate of a large pinned-memory copy, bytes/s:
  /// already an effective rate, not the link's raw signalling rate.
  double pcie_bytes_per_s = 0.0;
};

/// The preset called `name` ("A100-80GB", "H100-80GB", "H200"; exact match).
std::optional<gpu_spec> find_gpu_spec(std::string_view name);

/// Names of all presets, in a stable order.
std::vector<std::string> gpu_spec_names();

} // namespace troupe::gpu
