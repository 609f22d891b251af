// sample_token: greedy, or softmax with temperature in double, then min-p,
// top-k and top-p, and one uniform draw from splitmix64 keyed by (seed,
// index).
#include "gpu/sampling.hpp"

#include "gpu/random.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace troupe::gpu {

namespace {

// Lowest id among the largest logits; NaN never wins.
std::int32_t argmax(std::span<const float> logits) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best] || (std::isnan(logits[best]) && !std::isnan(logits[i])))
      best = i;
  return static_cast<std::int32_t>(best);
}

} // namespace

double uniform01(std::uint64_t seed, std::uint32_t output_index) noexcept {
  const std::uint64_t r = splitmix64(splitmix64(seed) ^ splitmix64(0x5eed0000ULL + output_index));
  return static_cast<double>(r >> 11) * 0x1.0p-53;
}

/// Empty logits give -1. A temperature <= 0 (or NaN) means greedy; min_p <= 0
/// (or NaN) and top_k <= 0 keep every token; top_p >= 1 (or NaN) keeps every
/// token left; at least one token is always kept. NaN logits count as
/// -infinity.
std::int32_t sample_token(std::span<const float> logits, const sampling_config& cfg,
                          std::uint64_t seed, std::uint32_t output_index) {
  if (logits.empty())
    return -1;
  if (!(cfg.temperature > 0.0f))
    return argmax(logits);

  const std::size_t n = logits.size();
  const double inv_t = 1.0 / static_cast<double>(cfg.temperature);
  double mx = -std::numeric_limits<double>::infinity();
  for (float l : logits)
    if (!std::isnan(l))
      mx = std::max(mx, static_cast<double>(l) * inv_t);
  if (!std::isfinite(mx))
    return argmax(logits);
  std::vector<double> p(n);
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double l = static_cast<double>(logits[i]);
    p[i] = std::isnan(l) ? 0.0 : std::exp(l * inv_t - mx);
    total += p[i];
  }
  std::vector<std::int32_t> order(n);
  for (std::size_t i = 0; i < n; ++i)
    order[i] = static_cast<std::int32_t>(i);
  // min-p: a token's weight is its probability over the largest's (whose
  // weight is exp(0) = 1), so the cut compares weights with min_p before
  // they are normalized; the largest always stays. Those kept lead the
  // order, in id order; equal logits stay together.
  std::size_t keep = n;
  if (cfg.min_p > 0.0f) {
    const double floor = std::min(static_cast<double>(cfg.min_p), 1.0);
    const auto kept_end =
      std::stable_partition(order.begin(), order.end(), [&p, floor](std::int32_t i) { return p[i] >= floor; });
    keep = static_cast<std::size_t>(kept_end - order.begin());
  }
  for (auto& x : p)
    x /= total;

  // Descending probability, ties by lower id. Only as much of the order as
  // the walks below reach is sorted: the top-p set and the draw usually
  // stop within the first few dozen tokens of a large vocabulary.
  auto before = [&p](std::int32_t a, std::int32_t b) {
    return p[a] > p[b] || (p[a] == p[b] && a < b);
  };
  std::size_t sorted = 0; // order[0, sorted) is final
  double kept_mass = 0;
  if (cfg.top_k > 0 && static_cast<std::size_t>(cfg.top_k) < keep) {
    const auto kept_end = order.begin() + static_cast<std::ptrdiff_t>(keep);
    keep = static_cast<std::size_t>(cfg.top_k);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), kept_end, before);
    sorted = keep;
  }
  // In the top-k's order, else in id order (the order min-p kept them in).
  for (std::size_t i = 0; i < keep; ++i)
    kept_mass += p[order[i]];
  // order[i] in its final place (i < keep).
  auto at = [&](std::size_t i) {
    if (i >= sorted) {
      // The next tokens in order: selected in linear time, then sorted;
      // past an eighth of what is kept, the rest at once.
      auto upto = std::min(keep, std::max<std::size_t>(4 * sorted, i + 64));
      if (upto > keep / 8)
        upto = keep;
      const auto first = order.begin() + static_cast<std::ptrdiff_t>(sorted);
      const auto last = order.begin() + static_cast<std::ptrdiff_t>(upto);
      if (upto < keep)
        std::nth_element(first, last, order.begin() + static_cast<std::ptrdiff_t>(keep), before);
      std::sort(first, last, before);
      sorted = upto;
    }
    return order[i];
  };

  // top-p over the top-k distribution renormalized, as HF's warpers chain.
  if (cfg.top_p < 1.0f) {
    const double target = static_cast<double>(std::max(cfg.top_p, 0.0f)) * kept_mass;
    double cum = 0;
    std::size_t i = 0;
    while (i < keep) {
      cum += p[at(i)];
      ++i;
      if (cum >= target)
        break;
    }
    keep = i;
    kept_mass = cum;
  }

  const double u = uniform01(seed, output_index) * kept_mass;
  double cum = 0;
  for (std::size_t i = 0; i < keep; ++i) {
    cum += p[at(i)];
    if (u < cum)
      return order[i];
  }
  return at(keep - 1);
}

token_logprobs logprobs_of(std::span<const float> logits, std::int32_t token, std::uint32_t top) {
  constexpr auto neg_inf = -std::numeric_limits<float>::infinity();
  token_logprobs out;
  out.logprob = neg_inf;
  // log_z normalizes; with logits of +infinity only they count, equally.
  std::size_t infinite = 0;
  double mx = -std::numeric_limits<double>::infinity();
  for (float l : logits) {
    infinite += l == std::numeric_limits<float>::infinity();
    if (std::isfinite(l))
      mx = std::max(mx, static_cast<double>(l));
  }
  if (infinite == 0 && !std::isfinite(mx))
    return out; // no token is possible
  double total = 0;
  if (infinite == 0)
    for (float l : logits)
      if (std::isfinite(l))
        total += std::exp(static_cast<double>(l) - mx);
  const double log_z = infinite > 0 ? std::log(static_cast<double>(infinite)) : mx + std::log(total);
  auto logprob = [&](std::size_t i) -> float {
    const float l = logits[i];
    if (infinite > 0)
      return l == std::numeric_limits<float>::infinity() ? static_cast<float>(-log_z) : neg_inf;
    return std::isfinite(l) ? static_cast<float>(static_cast<double>(l) - log_z) : neg_inf;
  };
  if (token >= 0 && static_cast<std::size_t>(token) < logits.size())
    out.logprob = logprob(static_cast<std::size_t>(token));
  if (top == 0)
    return out;
  std::vector<std::int32_t> ids;
  ids.reserve(logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i)
    if (logprob(i) > neg_inf)
      ids.push_back(static_cast<std::int32_t>(i));
  const auto keep = std::min<std::size_t>(top, ids.size());
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(keep), ids.end(),
                    [&](std::int32_t a, std::int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  out.top.reserve(keep);
  for (std::size_t i = 0; i < keep; ++i)
    out.top.push_back({ids[i], logprob(static_cast<std::size_t>(ids[i]))});
  return out;
}

void apply_logit_adjust(std::span<const float> logits, std::span<const logit_adjustment> adjust,
                        float repetition_penalty, std::vector<float>& out) {
  out.assign(logits.begin(), logits.end());
  auto in_row = [&out](std::int32_t t) { return t >= 0 && static_cast<std::size_t>(t) < out.size(); };
  if (repetition_penalty != 1.0f)
    for (const auto& a : adjust)
      if (a.repeated && in_row(a.token)) // from the model's logit: twice is once
        out[static_cast<std::size_t>(a.token)] =
          penalize_repeated(logits[static_cast<std::size_t>(a.token)], repetition_penalty);
  for (const auto& a : adjust)
    if (in_row(a.token))
      out[static_cast<std::size_t>(a.token)] += a.delta;
}

std::vector<token_logprobs> prompt_logprobs_of(
  std::span<const std::int32_t> tokens, std::size_t vocab, std::size_t chunk_rows, std::uint32_t top,
  const std::function<std::span<const float>(std::size_t first, std::size_t rows)>& logits_of) {
  std::vector<token_logprobs> out;
  if (tokens.size() < 2 || vocab == 0)
    return out;
  chunk_rows = std::max<std::size_t>(chunk_rows, 1);
  out.reserve(tokens.size() - 1);
  for (std::size_t first = 0; first + 1 < tokens.size(); first += chunk_rows) {
    const std::size_t rows = std::min(chunk_rows, tokens.size() - 1 - first);
    const auto logits = logits_of(first, rows);
    if (logits.size() < rows * vocab)
      return {};
    for (std::size_t k = 0; k < rows; ++k)
      out.push_back(logprobs_of(logits.subspan(k * vocab, vocab), tokens[first + k + 1], top));
  }
  return out;
}

} // namespace troupe::gpu
