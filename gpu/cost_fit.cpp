#include "gpu/cost_fit.hpp"

#include <stdexcept>
#include <utility>

namespace troupe::gpu {

namespace {

// Where each name's value lives.
struct override_slot {
  const char* name;
  double cost_constants::*constant;
  double gpu_spec::*rate;
};

constexpr override_slot slots[] = {
  {"flops_efficiency", &cost_constants::flops_efficiency, nullptr},
  {"hbm_efficiency", &cost_constants::hbm_efficiency, nullptr},
  {"pcie_efficiency", &cost_constants::pcie_efficiency, nullptr},
  {"step_overhead_seconds", &cost_constants::step_overhead_seconds, nullptr},
  {"transfer_latency_seconds", &cost_constants::transfer_latency_seconds, nullptr},
  {"disk_bytes_per_s", &cost_constants::disk_bytes_per_s, nullptr},
  {"peak_flops", nullptr, &gpu_spec::peak_flops},
  {"hbm_bytes_per_s", nullptr, &gpu_spec::hbm_bytes_per_s},
  {"pcie_bytes_per_s", nullptr, &gpu_spec::pcie_bytes_per_s},
};

std::string known_names() {
  std::string out;
  for (const auto& s : slots)
    out += (out.empty() ? "" : ", ") + std::string(s.name);
  return out;
}

// Seconds over bytes of the memory-bound steps: (overhead, seconds per byte).
std::pair<double, double> fit_line(const std::vector<std::pair<double, double>>& xy) {
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : xy) {
    n += 1;
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double den = n * sxx - sx * sx;
  if (xy.size() < 2 || !(den > 1e-12 * n * sxx))
    throw std::invalid_argument(
      "fit_cost_constants: needs two memory-bound steps of different bytes (decode steps of "
      "different batch sizes or contexts), got " + std::to_string(xy.size()));
  double slope = (n * sxy - sx * sy) / den;
  double intercept = (sy - slope * sx) / n;
  if (intercept < 0) { // no negative fixed cost: the best line through the origin
    intercept = 0;
    slope = sxy / sxx;
  }
  if (!(slope > 0))
    throw std::invalid_argument("fit_cost_constants: the memory-bound steps do not take longer "
                                "with more bytes; no bandwidth to fit");
  return {intercept, slope};
}

} // namespace

std::vector<std::string> cost_override_names() {
  std::vector<std::string> out;
  for (const auto& s : slots)
    out.emplace_back(s.name);
  return out;
}

std::optional<std::string> apply_cost_overrides(const std::map<std::string, double>& values,
                                                cost_constants& constants, gpu_spec& gpu) {
  cost_constants c = constants;
  gpu_spec g = gpu;
  for (const auto& [name, value] : values) {
    const override_slot* slot = nullptr;
    for (const auto& s : slots)
      if (name == s.name)
        slot = &s;
    if (slot == nullptr)
      return "unknown cost constant \"" + name + "\" (known: " + known_names() + ")";
    if (slot->constant != nullptr) {
      c.*(slot->constant) = value;
    } else {
      if (!(value > 0))
        return name + " must be > 0, got " + std::to_string(value);
      g.*(slot->rate) = value;
    }
  }
  if (auto error = validate_cost_constants(c))
    return error;
  constants = c;
  gpu = std::move(g);
  return std::nullopt;
}

cost_fit fit_cost_constants(const model_shape& shape, const gpu_spec& gpu,
                            std::span<const measured_step> steps, cost_constants start) {
  for (const auto& s : steps)
    if (s.batch.empty() || !(s.seconds > 0))
      throw std::invalid_argument("fit_cost_constants: every step needs a batch and a time > 0");
  cost_constants c = start;
  std::vector<bool> bound;
  for (int round = 0; round < 8; ++round) {
    const roofline_cost_model m(shape, gpu, c);
    std::vector<bool> now;
    for (const auto& s : steps)
      now.push_back(m.compute_seconds(s.batch) > m.memory_seconds(s.batch));
    if (round > 0 && now == bound)
      break;
    bound = std::move(now);
    std::vector<std::pair<double, double>> memory;
    for (std::size_t i = 0; i < steps.size(); ++i)
      if (!bound[i])
        memory.emplace_back(m.bytes(steps[i].batch), steps[i].seconds);
    const auto [overhead, seconds_per_byte] = fit_line(memory);
    double efficiency_sum = 0;
    int compute_steps = 0;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      if (!bound[i])
        continue;
      const double left = steps[i].seconds - overhead;
      if (!(left > 0))
        throw std::invalid_argument("fit_cost_constants: a compute-bound step took " +
                                    std::to_string(steps[i].seconds) +
                                    " s, no more than the fitted overhead");
      efficiency_sum += m.flops(steps[i].batch) / (gpu.peak_flops * left);
      ++compute_steps;
    }
    if (compute_steps == 0)
      throw std::invalid_argument(
        "fit_cost_constants: needs a compute-bound step (a long prefill), got none");
    c.step_overhead_seconds = overhead;
    c.hbm_efficiency = 1.0 / (seconds_per_byte * gpu.hbm_bytes_per_s);
    c.flops_efficiency = efficiency_sum / compute_steps;
    if (c.hbm_efficiency > 1)
      throw std::invalid_argument("fit_cost_constants: hbm_efficiency came out " +
                                  std::to_string(c.hbm_efficiency) + ": " + gpu.name +
                                  "'s hbm_bytes_per_s is below what the steps moved");
    if (c.flops_efficiency > 1)
      throw std::invalid_argument("fit_cost_constants: flops_efficiency came out " +
                                  std::to_string(c.flops_efficiency) + ": " + gpu.name +
                                  "'s peak_flops is below what the steps computed");
  }
  cost_fit out;
  out.constants = c;
  out.compute_bound = bound;
  const roofline_cost_model m(shape, gpu, c);
  for (const auto& s : steps)
    out.predicted.push_back(m.step_seconds(s.batch));
  return out;
}

} // namespace troupe::gpu
