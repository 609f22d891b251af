// Output-length predictors: how many tokens a request will produce, for the
// classifier's weighted request size and the multi-queue scheduler's quotas
// and bypass rule. Built-ins, by name:
//   max_tokens  the client's max_tokens (an upper bound; the default)
//   history     per adapter and prompt-length bucket, a quantile of the
//               output lengths of recent completions; falls back to all
//               adapters' history, then to max_tokens
//   oracle      the true length (in the simulator: max_tokens, which the sim
//               backend always produces) with injectable relative error, for
//               experiments on prediction accuracy
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace troupe::policies {

struct predict_input {
  std::uint64_t request_id = 0;
  std::uint32_t prompt_tokens = 0;
  std::uint32_t max_new_tokens = 0;
  std::uint32_t adapter_id = 0;
};

class output_predictor {
public:
  virtual ~output_predictor() = default;
  /// Predicted output tokens, in [1, max_new_tokens].
  virtual std::uint32_t predict(const predict_input& in) = 0;
  /// A request finished having produced `output_tokens`.
  virtual void observe(std::uint32_t adapter_id, std::uint32_t prompt_tokens, std::uint32_t output_tokens) {
    (void)adapter_id, (void)prompt_tokens, (void)output_tokens;
  }
  virtual std::string_view name() const noexcept = 0;
  /// "" when accepted, otherwise what was wrong; the default takes none.
  virtual std::string configure(const std::map<std::string, double>& params);
};

class max_tokens_predictor final : public output_predictor {
public:
  std::uint32_t predict(const predict_input& in) override;
  std::string_view name() const noexcept override { return "max_tokens"; }
};

class history_predictor final : public output_predictor {
public:
  std::uint32_t predict(const predict_input& in) override;
  void observe(std::uint32_t adapter_id, std::uint32_t prompt_tokens, std::uint32_t output_tokens) override;
  std::string_view name() const noexcept override { return "history"; }
  /// Keys: "quantile" (0.5), "keep" (completions kept per bucket, 64),
  /// "min_samples" (before a bucket is trusted, 4).
  std::string configure(const std::map<std::string, double>& params) override;

  /// Prompt-length bucket: 0 for < 64 tokens, then one per doubling, up to 8.
  static std::size_t bucket_of(std::uint32_t prompt_tokens) noexcept;

private:
  static constexpr std::size_t buckets = 9;
  using history = std::array<std::deque<std::uint32_t>, buckets>;
  std::uint32_t quantile_of(const std::deque<std::uint32_t>& d) const;

  double quantile_ = 0.5;
  std::size_t keep_ = 64;
  std::size_t min_samples_ = 4;
  std::unordered_map<std::uint32_t, history> per_adapter_;
  history all_;
};

class oracle_predictor final : public output_predictor {
public:
  std::uint32_t predict(const predict_input& in) override;
  std::string_view name() const noexcept override { return "oracle"; }
  /// Keys: "error" (relative, uniform in [-e, e]; 0), "seed" (0).
  std::string configure(const std::map<std::string, double>& params) override;

private:
  double error_ = 0;
  std::uint64_t seed_ = 0;
};

/// Builds the named predictor; nullptr when unknown.
std::unique_ptr<output_predictor> make_output_predictor(const std::string& name);
std::vector<std::string> output_predictor_names();

} // namespace troupe::policies
