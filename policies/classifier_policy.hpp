// The classifier policy interface: which queue a new request joins and how
// many output tokens it is predicted to produce (by an output predictor the
// policy owns, `max_tokens` unless the deployment sets another). Called by
// the classifier actor (and the virtual-time engine) once per request.
// Built-ins: "single_queue" (one queue) and "chameleon" (queue by weighted
// request size under the tuner's cut-offs).
#pragma once

#include "policies/output_predictor.hpp"
#include "policies/queue_tuner.hpp"
#include "policies/queue_tuning.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace troupe::policies {

struct classify_input {
  std::uint32_t prompt_tokens = 0;
  std::uint32_t max_new_tokens = 0;
  std::uint32_t adapter_id = 0;
  std::uint32_t adapter_rank = 0;
  std::int32_t priority = 0;
  std::uint64_t request_id = 0;
};

struct classification {
  std::uint32_t queue = 0;
  /// Predicted output tokens (at least 1).
  std::uint32_t predicted_tokens = 0;
  /// Weighted request size (0 when the policy does not use one).
  double wrs = 0;
};

/// Classifies requests. Called from one thread at a time.
class classifier_policy {
public:
  classifier_policy() : predictor_(std::make_unique<max_tokens_predictor>()) {}
  virtual ~classifier_policy() = default;
  /// Assigns a queue and a predicted output length.
  virtual classification classify(const classify_input& in) = 0;
  /// Registry name of this policy.
  virtual std::string_view name() const noexcept = 0;
  /// "" when accepted, otherwise what was wrong; the default takes none.
  virtual std::string configure(const std::map<std::string, double>& params);
  /// New cut-offs from a queue tuner; ignored by default.
  virtual void on_tuning(const queue_tuning&) {}

  /// The output predictor; replaces `max_tokens`.
  void set_predictor(std::unique_ptr<output_predictor> p) { predictor_ = std::move(p); }
  output_predictor& predictor() noexcept { return *predictor_; }
  /// A request finished: the predictor learns from it.
  void observe(std::uint32_t adapter_id, std::uint32_t prompt_tokens, std::uint32_t output_tokens) {
    predictor_->observe(adapter_id, prompt_tokens, output_tokens);
  }

protected:
  std::uint32_t predict(const classify_input& in) {
    return predictor_->predict({in.request_id, in.prompt_tokens, in.max_new_tokens, in.adapter_id});
  }

private:
  std::unique_ptr<output_predictor> predictor_;
};

/// One queue for everyone.
class single_queue_classifier_policy final : public classifier_policy {
public:
  classification classify(const classify_input& in) override { return {0, predict(in), 0}; }
  std::string_view name() const noexcept override { return "single_queue"; }
};

/// Chameleon §4.2: WRS = 0.3·input + 0.5·predicted output + 0.2·rank over
/// normalised terms; the queue is where the WRS falls among the cut-offs.
class chameleon_classifier_policy final : public classifier_policy {
public:
  classification classify(const classify_input& in) override;
  std::string_view name() const noexcept override { return "chameleon"; }
  /// Keys: "input", "output", "rank" (weights) and "input_scale",
  /// "output_scale", "rank_scale" (normalisers: 4096, 1024, 128).
  std::string configure(const std::map<std::string, double>& params) override;
  void on_tuning(const queue_tuning& t) override { tuning_ = t; }
  const wrs_weights& weights() const noexcept { return w_; }

private:
  wrs_weights w_;
  queue_tuning tuning_;
};

} // namespace troupe::policies
