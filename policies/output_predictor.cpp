#include "policies/output_predictor.hpp"

#include "policies/params.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

namespace troupe::policies {

namespace {

std::uint32_t clamp_tokens(double x, std::uint32_t max_new) {
  const double hi = std::max<std::uint32_t>(max_new, 1);
  return static_cast<std::uint32_t>(std::clamp(std::round(x), 1.0, hi));
}

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

} // namespace

std::string output_predictor::configure(const std::map<std::string, double>& params) {
  return param_spec{"predictor \"" + std::string{name()} + "\""}.apply(params);
}

std::uint32_t max_tokens_predictor::predict(const predict_input& in) {
  return std::max<std::uint32_t>(in.max_new_tokens, 1);
}

// -- history ----------------------------------------------------------------------

std::size_t history_predictor::bucket_of(std::uint32_t prompt_tokens) noexcept {
  if (prompt_tokens < 64)
    return 0;
  const auto b = static_cast<std::size_t>(std::bit_width(prompt_tokens / 64));
  return std::min(b, buckets - 1);
}

std::uint32_t history_predictor::quantile_of(const std::deque<std::uint32_t>& d) const {
  std::vector<std::uint32_t> v(d.begin(), d.end());
  const auto k = static_cast<std::size_t>(std::floor(quantile_ * static_cast<double>(v.size() - 1)));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

std::uint32_t history_predictor::predict(const predict_input& in) {
  const auto b = bucket_of(in.prompt_tokens);
  if (auto i = per_adapter_.find(in.adapter_id); i != per_adapter_.end() && i->second[b].size() >= min_samples_)
    return clamp_tokens(quantile_of(i->second[b]), in.max_new_tokens);
  if (all_[b].size() >= min_samples_)
    return clamp_tokens(quantile_of(all_[b]), in.max_new_tokens);
  return std::max<std::uint32_t>(in.max_new_tokens, 1);
}

void history_predictor::observe(std::uint32_t adapter_id, std::uint32_t prompt_tokens,
                                std::uint32_t output_tokens) {
  const auto b = bucket_of(prompt_tokens);
  for (auto* d : {&per_adapter_[adapter_id][b], &all_[b]}) {
    d->push_back(output_tokens);
    while (d->size() > keep_)
      d->pop_front();
  }
}

std::string history_predictor::configure(const std::map<std::string, double>& params) {
  auto q = quantile_;
  auto keep = keep_;
  auto min_samples = min_samples_;
  if (auto err = param_spec{"predictor \"history\""}
                   .number("quantile", q, 0, 1)
                   .whole("keep", keep, 1)
                   .whole("min_samples", min_samples, 1)
                   .apply(params);
      !err.empty())
    return err;
  if (min_samples > keep)
    return "\"min_samples\" must not exceed \"keep\"";
  quantile_ = q;
  keep_ = keep;
  min_samples_ = min_samples;
  return {};
}

// -- oracle -----------------------------------------------------------------------

std::uint32_t oracle_predictor::predict(const predict_input& in) {
  const double truth = std::max<std::uint32_t>(in.max_new_tokens, 1);
  if (error_ == 0)
    return static_cast<std::uint32_t>(truth);
  const double u = static_cast<double>(mix(seed_ ^ mix(in.request_id)) >> 11) / 9007199254740992.0;
  const double factor = 1.0 + error_ * (2.0 * u - 1.0);
  // Not clamped to max_tokens from above: an over-prediction is an error too.
  return static_cast<std::uint32_t>(std::max(1.0, std::round(truth * factor)));
}

std::string oracle_predictor::configure(const std::map<std::string, double>& params) {
  return param_spec{"predictor \"oracle\""}.number("error", error_, 0, 1).whole("seed", seed_, 0, 9e15).apply(params);
}

std::unique_ptr<output_predictor> make_output_predictor(const std::string& name) {
  if (name == "max_tokens")
    return std::make_unique<max_tokens_predictor>();
  if (name == "history")
    return std::make_unique<history_predictor>();
  if (name == "oracle")
    return std::make_unique<oracle_predictor>();
  return nullptr;
}

std::vector<std::string> output_predictor_names() { return {"history", "max_tokens", "oracle"}; }

} // namespace troupe::policies
