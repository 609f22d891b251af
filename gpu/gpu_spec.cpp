#include "gpu/gpu_spec.hpp"

namespace troupe::gpu {

namespace {

constexpr std::uint64_t mib = std::uint64_t{1} << 20;

// Sources and assumptions:
// - FLOP/s and HBM bandwidth: NVIDIA datasheets, dense fp16/bf16 tensor-core
//   rates (the "with sparsity" figures are twice these). A100 80GB SXM4:
//   312 TFLOP/s, 2.039 TB/s HBM2e. H100 SXM5 80GB: 989 TFLOP/s, 3.35 TB/s HBM3.
//   H200 SXM: same compute die as H100 (989 TFLOP/s), 4.8 TB/s HBM3e.
//   A40 (Chameleon's GPU): 149.7 TFLOP/s, 696 GB/s GDDR6.
// - Memory: what nvidia-smi reports as memory.total on these cards (81920,
//   81559, 143771 and 46068 MiB); the marketing "80 GB" / "141 GB" / "48 GB"
//   are rounded.
// - PCIe: A100 and A40 are PCIe gen4 x16 (32 GB/s raw per direction) and pinned
//   host-to-device copies sustain about 25 GB/s; H100 and H200 are gen5 x16
//   (64 GB/s raw) and sustain about 50 GB/s. These are effective rates, so the
//   cost model's PCIe efficiency defaults to 1.
const std::vector<gpu_spec>& presets() {
  static const std::vector<gpu_spec> all{
    gpu_spec{.name = "A100-80GB",
             .memory_bytes = 81920 * mib,
             .peak_flops = 312e12,
             .hbm_bytes_per_s = 2.039e12,
             .pcie_bytes_per_s = 25e9},
    gpu_spec{.name = "H100-80GB",
             .memory_bytes = 81559 * mib,
             .peak_flops = 989e12,
             .hbm_bytes_per_s = 3.35e12,
             .pcie_bytes_per_s = 50e9},
    gpu_spec{.name = "H200",
             .memory_bytes = 143771 * mib,
             .peak_flops = 989e12,
             .hbm_bytes_per_s = 4.8e12,
             .pcie_bytes_per_s = 50e9},
    gpu_spec{.name = "A40",
             .memory_bytes = 46068 * mib,
             .peak_flops = 149.7e12,
             .hbm_bytes_per_s = 696e9,
             .pcie_bytes_per_s = 25e9},
  };
  return all;
}

} // namespace

std::optional<gpu_spec> find_gpu_spec(std::string_view name) {
  for (const auto& spec : presets())
    if (spec.name == name)
      return spec;
  return std::nullopt;
}

std::vector<std::string> gpu_spec_names() {
  std::vector<std::string> names;
  for (const auto& spec : presets())
    names.push_back(spec.name);
  return names;
}

} // namespace troupe::gpu
