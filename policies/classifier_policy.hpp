// The classifier policy interface: which queue a new request joins and how
// many output tokens it is predicted to produce. Called by the classifier
// actor (and the simulator) once per request; "single_queue" is the baseline.
#pragma once

#include <cstdint>
#include <string_view>

namespace troupe::policies {

struct classify_input {
  std::uint32_t prompt_tokens = 0;
  std::uint32_t max_new_tokens = 0;
  std::uint32_t adapter_id = 0;
  std::uint32_t adapter_rank = 0;
  std::int32_t priority = 0;
};

struct classification {
  std::uint32_t queue = 0;
  /// Predicted output tokens, at most max_new_tokens.
  std::uint32_t predicted_tokens = 0;
};

/// Classifies requests. Called from one thread at a time.
class classifier_policy {
public:
  virtual ~classifier_policy() = default;
  /// Assigns a queue and a predicted output length.
  virtual classification classify(const classify_input& in) = 0;
  /// Registry name of this policy.
  virtual std::string_view name() const noexcept = 0;
};

/// One queue for everyone; predicts the worst case (max_new_tokens).
class single_queue_classifier_policy final : public classifier_policy {
public:
  classification classify(const classify_input& in) override {
    return {0, in.max_new_tokens};
  }
  std::string_view name() const noexcept override { return "single_queue"; }
};

} // namespace troupe::policies
