#include "policies/classifier_policy.hpp"

#include <cmath>

namespace troupe::policies {

std::string classifier_policy::configure(const std::map<std::string, double>& params) {
  if (params.empty())
    return {};
  return "classifier \"" + std::string{name()} + "\" takes no parameters; got \"" + params.begin()->first + "\"";
}

classification chameleon_classifier_policy::classify(const classify_input& in) {
  classification c;
  c.predicted_tokens = predict(in);
  c.wrs = weighted_request_size(in.prompt_tokens, c.predicted_tokens, in.adapter_rank, w_);
  c.queue = queue_of(tuning_, c.wrs);
  return c;
}

std::string chameleon_classifier_policy::configure(const std::map<std::string, double>& params) {
  auto w = w_;
  for (const auto& [key, value] : params) {
    double* slot = key == "input"          ? &w.input
                   : key == "output"       ? &w.output
                   : key == "rank"         ? &w.rank
                   : key == "input_scale"  ? &w.input_scale
                   : key == "output_scale" ? &w.output_scale
                   : key == "rank_scale"   ? &w.rank_scale
                                           : nullptr;
    if (slot == nullptr)
      return "classifier \"chameleon\" takes input, output, rank, input_scale, output_scale, rank_scale; got \""
             + key + "\"";
    if (!std::isfinite(value) || value < 0)
      return "\"" + key + "\" must be a finite number >= 0, got " + std::to_string(value);
    *slot = value;
  }
  if (w.input_scale <= 0 || w.output_scale <= 0 || w.rank_scale <= 0)
    return "the scales must be positive";
  w_ = w;
  return {};
}

} // namespace troupe::policies
