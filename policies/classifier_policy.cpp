#include "policies/classifier_policy.hpp"

#include "policies/params.hpp"

#include <cmath>

namespace troupe::policies {

std::string classifier_policy::configure(const std::map<std::string, double>& params) {
  return param_spec{"classifier \"" + std::string{name()} + "\""}.apply(params);
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
  if (auto err = param_spec{"classifier \"chameleon\""}
                   .number("input", w.input)
                   .number("output", w.output)
                   .number("rank", w.rank)
                   .number("input_scale", w.input_scale)
                   .number("output_scale", w.output_scale)
                   .number("rank_scale", w.rank_scale)
                   .apply(params);
      !err.empty())
    return err;
  if (w.input_scale <= 0 || w.output_scale <= 0 || w.rank_scale <= 0)
    return "the scales must be positive";
  w_ = w;
  return {};
}

} // namespace troupe::policies
