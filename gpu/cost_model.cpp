#include "gpu/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace troupe::gpu {

std::optional<std::string> validate_cost_constants(const cost_constants& c) {
  const auto fraction = [](double x) { return x > 0.0 && x <= 1.0; };
  if (!fraction(c.flops_efficiency))
    return "flops_efficiency must be in (0, 1], got " + std::to_string(c.flops_efficiency);
  if (!fraction(c.hbm_efficiency))
    return "hbm_efficiency must be in (0, 1], got " + std::to_string(c.hbm_efficiency);
  if (!fraction(c.pcie_efficiency))
    return "pcie_efficiency must be in (0, 1], got " + std::to_string(c.pcie_efficiency);
  if (!(c.step_overhead_seconds >= 0.0))
    return "step_overhead_seconds must be >= 0, got " + std::to_string(c.step_overhead_seconds);
  if (!(c.transfer_latency_seconds >= 0.0))
    return "transfer_latency_seconds must be >= 0, got " + std::to_string(c.transfer_latency_seconds);
  if (!(c.disk_bytes_per_s > 0.0))
    return "disk_bytes_per_s must be > 0, got " + std::to_string(c.disk_bytes_per_s);
  return std::nullopt;
}

roofline_cost_model::roofline_cost_model(model_shape shape, gpu_spec gpu, cost_constants constants)
  : shape_(std::move(shape)), gpu_(std::move(gpu)), constants_(constants) {}

namespace {

/// Σ min(t, w) over t = a..b (every t when w is 0): the positions the new
/// tokens at lengths a..b attend to under a sliding window of w.
double window_sum(double a, double b, std::uint32_t window) noexcept {
  if (b < a)
    return 0.0;
  const double w = window;
  if (window == 0 || b <= w)
    return (a + b) * (b - a + 1.0) / 2.0;
  if (a > w)
    return w * (b - a + 1.0);
  return (a + w) * (w - a + 1.0) / 2.0 + w * (b - w);
}

} // namespace

double roofline_cost_model::flops(std::span<const step_entry> batch) const noexcept {
  const double layer_params = static_cast<double>(shape_.layer_matmul_parameters());
  const double lm_head_params = static_cast<double>(shape_.embedding_parameters());
  // Per query-key pair and layer: QK^T and PV each take head_dim multiply-adds
  // per query head.
  const double attention_per_pair = 4.0 * shape_.num_layers * static_cast<double>(shape_.q_dim());
  double total = 0.0;
  for (const auto& e : batch) {
    if (e.new_tokens == 0)
      continue;
    const double n = e.new_tokens;
    const double c = e.context_tokens;
    // New token i (0-based) attends to the c cached tokens and to i + 1 new
    // ones, or to the last sliding_window of them.
    const double pairs = window_sum(c + 1.0, c + n, shape_.sliding_window);
    total += 2.0 * layer_params * n + 2.0 * lm_head_params + attention_per_pair * pairs;
    // A hidden cache recomputes K and V of every cached token, every layer.
    if (e.hidden)
      total += 2.0 * c * shape_.hidden_size * 2.0 * static_cast<double>(shape_.kv_dim()) * shape_.num_layers;
    if (e.adapter_id != 0)
      total += shape_.lora_flops_per_token(e.adapter_rank) * n;
  }
  return total;
}

double roofline_cost_model::bytes(std::span<const step_entry> batch) const noexcept {
  if (batch.empty())
    return 0.0;
  const double kv_per_token = static_cast<double>(shape_.kv_bytes_per_token());
  double total = static_cast<double>(shape_.weight_bytes());
  // Distinct adapters, each read once however many entries share it. A batch
  // holds at most a few hundred entries, so a sorted vector is cheap enough.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> adapters;  // (id, rank)
  const double hidden_per_token =
    static_cast<double>(shape_.hidden_size) * shape_.num_layers * shape_.dtype_bytes;
  for (const auto& e : batch) {
    // K and V read: the positions the step's tokens see (a hidden cache's
    // every position, to recompute them).
    double read = static_cast<double>(e.context_tokens) + e.new_tokens;
    if (shape_.sliding_window > 0 && !e.hidden && e.new_tokens > 0)
      read = std::min(read, static_cast<double>(shape_.sliding_window) + e.new_tokens - 1.0);
    total += (e.hidden ? hidden_per_token : kv_per_token) * read;
    if (e.adapter_id != 0)
      adapters.emplace_back(e.adapter_id, e.adapter_rank);
  }
  // Sorting by (id, descending rank) keeps the largest rank of an id first.
  std::sort(adapters.begin(), adapters.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second > b.second;
  });
  const auto last = std::unique(adapters.begin(), adapters.end(),
                                [](const auto& a, const auto& b) { return a.first == b.first; });
  for (auto it = adapters.begin(); it != last; ++it)
    total += static_cast<double>(shape_.lora_adapter_bytes(it->second));
  return total;
}

double roofline_cost_model::compute_seconds(std::span<const step_entry> batch) const noexcept {
  return flops(batch) / (gpu_.peak_flops * constants_.flops_efficiency);
}

double roofline_cost_model::memory_seconds(std::span<const step_entry> batch) const noexcept {
  return bytes(batch) / (gpu_.hbm_bytes_per_s * constants_.hbm_efficiency);
}

double roofline_cost_model::step_seconds(std::span<const step_entry> batch) const noexcept {
  if (batch.empty())
    return 0.0;
  return constants_.step_overhead_seconds + std::max(compute_seconds(batch), memory_seconds(batch));
}

std::uint32_t roofline_cost_model::hidden_tokens_per_page(std::uint32_t kv_page_tokens) const noexcept {
  const double hidden_per_token = static_cast<double>(shape_.hidden_size) * shape_.num_layers * shape_.dtype_bytes;
  if (hidden_per_token <= 0)
    return 0;
  const auto per = static_cast<std::uint32_t>(
    static_cast<double>(kv_page_tokens) * static_cast<double>(shape_.kv_bytes_per_token()) / hidden_per_token);
  return per > kv_page_tokens ? per : 0;
}

double roofline_cost_model::hidden_seconds_per_kv_page(std::uint32_t kv_page_tokens) const noexcept {
  const double flops = 2.0 * kv_page_tokens * shape_.hidden_size * 2.0 * static_cast<double>(shape_.kv_dim())
                       * shape_.num_layers;
  return flops / (gpu_.peak_flops * constants_.flops_efficiency);
}

double sum_of_max_affine(double a0, double a1, double b0, double b1, std::uint64_t m) noexcept {
  // Σ_{j=from}^{to-1} (c0 + c1·j).
  const auto affine_sum = [](double c0, double c1, std::uint64_t from, std::uint64_t to) {
    if (to <= from)
      return 0.0;
    const double n = static_cast<double>(to - from);
    const double first = static_cast<double>(from), last = static_cast<double>(to - 1);
    return c0 * n + c1 * (first + last) * n / 2.0;
  };
  if (m == 0)
    return 0.0;
  // Order so that `a` leads at j = 0; a line that leads at 0 and grows no
  // slower leads throughout, otherwise `b` overtakes it from j* on.
  if (b0 > a0 || (b0 == a0 && b1 > a1)) {
    std::swap(a0, b0);
    std::swap(a1, b1);
  }
  if (b1 <= a1)
    return affine_sum(a0, a1, 0, m);
  // b0 + b1·j > a0 + a1·j from j > (a0 - b0) / (b1 - a1).
  const double cross = (a0 - b0) / (b1 - a1);
  const auto split = static_cast<std::uint64_t>(std::min(std::floor(cross) + 1.0, static_cast<double>(m)));
  return affine_sum(a0, a1, 0, split) + affine_sum(b0, b1, split, m);
}

double roofline_cost_model::isolated_seconds(std::uint32_t prompt_tokens, std::uint32_t output_tokens,
                                             std::uint32_t adapter_id, std::uint32_t adapter_rank) const noexcept {
  step_entry e;
  e.adapter_id = adapter_id;
  e.adapter_rank = adapter_id != 0 ? adapter_rank : 0;
  e.new_tokens = std::max<std::uint32_t>(prompt_tokens, 1);
  const std::span<const step_entry> one{&e, 1};
  double total = step_seconds(one);
  if (output_tokens <= 1)
    return total;
  // Decode step k (k = 0 .. output - 2) feeds one token over the prompt and
  // the k outputs before it.
  e.new_tokens = 1;
  e.context_tokens = std::max<std::uint32_t>(prompt_tokens, 1);
  const double c0 = compute_seconds(one), m0 = memory_seconds(one);
  ++e.context_tokens;
  const double c1 = compute_seconds(one) - c0, m1 = memory_seconds(one) - m0;
  const std::uint64_t steps = output_tokens - 1u;
  // With a sliding window, a step whose token sees a whole window costs
  // what every later one does: affine steps, then equal ones.
  std::uint64_t growing = steps;
  if (const std::uint64_t w = shape_.sliding_window; w > 0) {
    const std::uint64_t context = std::max<std::uint32_t>(prompt_tokens, 1);
    growing = std::min<std::uint64_t>(steps, context + 1 >= w ? 0 : w - context - 1);
  }
  double flat = 0.0;
  if (growing < steps) {
    e.context_tokens = static_cast<std::uint32_t>(std::max<std::uint32_t>(prompt_tokens, 1) + growing);
    flat = static_cast<double>(steps - growing) * std::max(compute_seconds(one), memory_seconds(one));
  }
  return total + constants_.step_overhead_seconds * static_cast<double>(steps)
         + sum_of_max_affine(c0, c1, m0, m1, growing) + flat;
}

double roofline_cost_model::disk_seconds(std::uint64_t bytes) const noexcept {
  return static_cast<double>(bytes) / constants_.disk_bytes_per_s;
}

double roofline_cost_model::transfer_seconds(std::uint64_t bytes) const noexcept {
  if (bytes == 0)
    return 0.0;
  return constants_.transfer_latency_seconds +
         static_cast<double>(bytes) / (gpu_.pcie_bytes_per_s * constants_.pcie_efficiency);
}

} // namespace troupe::gpu
