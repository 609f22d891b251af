#include "messages/beam_search.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <utility>

namespace troupe::openai {

beam_search::beam_search(std::vector<std::int32_t> prompt, std::vector<std::int32_t> end_tokens, beam_settings s)
    : prompt_(std::move(prompt)), end_(std::move(end_tokens)), s_(s) {
  s_.width = std::max<std::uint32_t>(s_.width, 1);
  // The empty beam, extended; with no tokens to generate, the answer.
  (s_.max_tokens > 0 ? live_ : complete_).emplace_back();
}

std::uint32_t beam_search::alternatives() const noexcept {
  return std::max<std::uint32_t>(2 * s_.width, s_.logprobs > 0 ? static_cast<std::uint32_t>(s_.logprobs) : 0);
}

std::vector<std::vector<std::int32_t>> beam_search::step() const {
  std::vector<std::vector<std::int32_t>> out;
  out.reserve(live_.size());
  for (const auto& b : live_) {
    auto p = prompt_;
    p.insert(p.end(), b.tokens.begin(), b.tokens.end());
    out.push_back(std::move(p));
  }
  return out;
}

void beam_search::extend(std::size_t k, const std::vector<wire::token_logprob>& top) {
  const auto& from = live_.at(k);
  const auto n = std::min<std::size_t>(top.size(), alternatives());
  const auto listed = s_.logprobs > 0 ? std::min<std::size_t>(top.size(), static_cast<std::size_t>(s_.logprobs)) : 0;
  for (std::size_t i = 0; i < n; ++i) {
    auto b = from;
    b.tokens.push_back(top[i].token);
    b.logprob += top[i].logprob;
    if (s_.logprobs >= 0)
      b.logprobs.push_back({top[i], {top.begin(), top.begin() + static_cast<std::ptrdiff_t>(listed)}});
    b.ended = !s_.ignore_eos && std::find(end_.begin(), end_.end(), top[i].token) != end_.end();
    (b.ended ? complete_ : next_).push_back(std::move(b));
  }
}

void beam_search::stop(std::size_t k) {
  complete_.push_back(live_.at(k));
}

double beam_search::score(const beam& b) const noexcept {
  auto len = b.tokens.size() - (b.ended ? 1 : 0);
  return b.logprob / std::pow(static_cast<double>(std::max<std::size_t>(len, 1)), s_.length_penalty);
}

bool beam_search::advance() {
  ++steps_;
  // The best `width` extensions, the earlier first among equals (stable).
  std::stable_sort(next_.begin(), next_.end(), [this](const beam& a, const beam& b) { return score(a) > score(b); });
  if (next_.size() > s_.width)
    next_.resize(s_.width);
  live_ = std::move(next_);
  next_.clear();
  if (steps_ >= s_.max_tokens) {
    // Cut by max_tokens: complete as they are.
    complete_.insert(complete_.end(), live_.begin(), live_.end());
    live_.clear();
  }
  return !live_.empty();
}

std::vector<beam_search::beam> beam_search::best() const {
  auto all = complete_;
  all.insert(all.end(), live_.begin(), live_.end());
  std::stable_sort(all.begin(), all.end(), [this](const beam& a, const beam& b) { return score(a) > score(b); });
  if (all.size() > s_.width)
    all.resize(s_.width);
  return all;
}

namespace {

using json = nlohmann::json;

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

} // namespace

beam_frames::beam_frames(std::string_view base) {
  const auto g = json::parse(base);
  prompt_ = g.value("prompt", std::string());
  if (const auto t = g.find("prompt_tokens"); t != g.end())
    prompt_tokens_ = t->get<std::vector<std::int32_t>>();
  if (const auto a = g.find("adapter"); a != g.end() && a->is_string())
    adapter_ = a->get<std::string>();
  if (const auto p = g.find("priority"); p != g.end() && p->is_number_integer())
    priority_ = p->get<std::int64_t>();
}

std::string beam_frames::tokenize(std::string_view id) const {
  return dump({{"type", "tokenize"}, {"id", id}, {"prompt", prompt_}});
}

std::string beam_frames::step(std::string_view id, const std::vector<std::int32_t>& tokens,
                              std::uint32_t alternatives) const {
  json out = {{"type", "generate"}, {"id", id},          {"prompt_tokens", tokens},
              {"max_tokens", 1},    {"temperature", 0},  {"logprobs", alternatives},
              {"ignore_eos", true}};
  if (adapter_)
    out["adapter"] = *adapter_;
  if (priority_)
    out["priority"] = *priority_;
  return dump(out);
}

std::string beam_frames::detokenize(std::string_view id, const std::vector<std::int32_t>& tokens) {
  return dump({{"type", "detokenize"}, {"id", id}, {"tokens", tokens}});
}

wire::done_reply beam_done(const beam_search::beam& b, std::string id, std::string text, std::uint32_t prompt_tokens,
                           bool logprobs) {
  wire::done_reply d;
  d.id = std::move(id);
  d.finish_reason = b.ended ? "eos" : "length";
  d.prompt_tokens = prompt_tokens;
  d.completion_tokens = static_cast<std::uint32_t>(b.tokens.size());
  d.text = std::move(text);
  if (logprobs) {
    auto lps = b.logprobs;
    if (b.ended && !lps.empty())
      lps.pop_back();
    d.logprobs = std::move(lps);
  }
  return d;
}

} // namespace troupe::openai
