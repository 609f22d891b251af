// cost_fit: the sim cost model's constants set by name (the config's
// `backend.cost` table and troupe-sim's --cost), and fitted to step times
// measured on a GPU (troupe-gpu-bench's steps on the cuda backend, through
// troupe-cost-fit), so the simulator prices a step as the GPU ran it.
#pragma once

#include "gpu/cost_model.hpp"

#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace troupe::gpu {

/// The names `apply_cost_overrides` knows, in a stable order: the
/// cost_constants fields (flops_efficiency, hbm_efficiency, pcie_efficiency,
/// step_overhead_seconds, transfer_latency_seconds, disk_bytes_per_s) and
/// the gpu_spec rates (peak_flops, hbm_bytes_per_s, pcie_bytes_per_s).
std::vector<std::string> cost_override_names();

/// Sets each named value in `constants` or `gpu`. Returns why not (an
/// unknown name, with the known ones; a value out of its bounds), leaving
/// both unchanged, or nullopt.
std::optional<std::string> apply_cost_overrides(const std::map<std::string, double>& values,
                                                cost_constants& constants, gpu_spec& gpu);

/// One measured step: the batch and the device seconds it took.
struct measured_step {
  std::vector<step_entry> batch;
  double seconds = 0.0;
};

/// What fit_cost_constants found.
struct cost_fit {
  /// The starting constants with step_overhead_seconds, hbm_efficiency and
  /// flops_efficiency fitted.
  cost_constants constants;
  /// Predicted seconds of each step with the fitted constants, in order.
  std::vector<double> predicted;
  /// Whether each step came out compute-bound (else memory-bound).
  std::vector<bool> compute_bound;
};

/// Fits the roofline's fixed step cost and its two efficiencies to measured
/// steps: the memory-bound steps give the overhead and hbm_efficiency (a
/// least-squares line of seconds over bytes; through the origin where the
/// line's intercept would be negative), the compute-bound ones
/// flops_efficiency (their mean of flops over peak times the seconds left
/// after the overhead). Which bound a step hits is decided by the constants
/// in hand and the fit repeated until that stops changing. Throws
/// std::invalid_argument saying what is missing: two memory-bound steps of
/// different bytes, one compute-bound step, or efficiencies in (0, 1] (an
/// efficiency above 1 means the gpu_spec's peak is below what was measured).
cost_fit fit_cost_constants(const model_shape& shape, const gpu_spec& gpu,
                            std::span<const measured_step> steps, cost_constants start = {});

} // namespace troupe::gpu
