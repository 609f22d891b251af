#include "policies/scheduling_policy.hpp"

#include "policies/params.hpp"

#include <algorithm>

namespace troupe::policies {

std::uint64_t pages_for(std::uint32_t prompt_tokens, std::uint32_t max_new_tokens,
                        std::uint32_t page_tokens) noexcept {
  if (page_tokens == 0)
    return 0;
  const std::uint64_t tokens = std::uint64_t{prompt_tokens} + max_new_tokens;
  return (tokens + page_tokens - 1) / page_tokens;
}

std::uint32_t admission_tokens(const waiting_view& w) noexcept {
  return w.reserve_tokens != 0 ? w.reserve_tokens : w.prompt_tokens + w.max_new_tokens;
}

page_budget::page_budget(std::uint64_t free_pages,
                         std::span<const std::uint32_t> adapters_in_use)
  : left_(free_pages), in_use_(adapters_in_use.begin(), adapters_in_use.end()) {
  std::sort(in_use_.begin(), in_use_.end());
}

std::uint64_t page_budget::cache_pages(const waiting_view& w, std::uint32_t page_tokens, bool hidden) {
  if (w.swapped)
    return w.pages;
  const auto life = pages_for(admission_tokens(w), 0, page_tokens);
  const auto adopted = hidden ? 0 : w.adoptable_pages;
  return life > adopted ? life - adopted : 0;
}

std::uint64_t page_budget::need(const waiting_view& w, std::uint32_t page_tokens) const {
  auto n = cache_pages(w, page_tokens);
  if (w.adapter_id != 0 && !std::binary_search(in_use_.begin(), in_use_.end(), w.adapter_id))
    n += w.adapter_pages;
  return n;
}

bool page_budget::take(const waiting_view& w, std::uint32_t page_tokens) {
  return take_with(w, cache_pages(w, page_tokens));
}

bool page_budget::take_with(const waiting_view& w, std::uint64_t cache_pages) {
  auto n = cache_pages;
  if (w.adapter_id != 0 && !std::binary_search(in_use_.begin(), in_use_.end(), w.adapter_id))
    n += w.adapter_pages;
  if (n > left_)
    return false;
  left_ -= n;
  if (w.adapter_id != 0)
    in_use_.insert(std::upper_bound(in_use_.begin(), in_use_.end(), w.adapter_id), w.adapter_id);
  return true;
}

batch_admission::batch_admission(const schedule_input& in, std::uint64_t leaving)
  : limits_(in.limits), running_(in.running.size() - std::min<std::uint64_t>(leaving, in.running.size())),
    tokens_(running_),
    pages_(in.limits.free_pages, in.adapters_in_use) {}

bool batch_admission::fits(const waiting_view& w) const {
  if (running_ >= limits_.max_running)
    return false;
  if (running_ > 0 && tokens_ + w.prompt_tokens > limits_.token_budget)
    return false;
  return pages_.need(w, limits_.page_tokens) <= pages_.left();
}

bool batch_admission::admit(const waiting_view& w, schedule_decision& d) {
  if (!fits(w))
    return false;
  pages_.take(w, limits_.page_tokens);
  d.admit.push_back(w.request_id);
  ++running_;
  tokens_ += w.prompt_tokens;
  return true;
}

void scheduling_policy::preempt_for_growth(const schedule_input& in, schedule_decision& d) {
  // Latest arrival first (ties: the larger id).
  squash_for_growth(in, d, [](const running_view* a, const running_view* b) {
    return a->arrival_s != b->arrival_s ? a->arrival_s > b->arrival_s : a->request_id > b->request_id;
  });
}

void scheduling_policy::squash_for_growth(const schedule_input& in, schedule_decision& d,
                                          bool (*first)(const running_view* a, const running_view* b),
                                          const std::function<bool(const running_view&)>& swap) {
  std::uint64_t freed = 0;
  auto chosen = [&](std::uint64_t id) {
    return std::find(d.squash.begin(), d.squash.end(), id) != d.squash.end()
           || std::find(d.swap.begin(), d.swap.end(), id) != d.swap.end();
  };
  std::vector<const running_view*> order;
  for (const auto& r : in.running) {
    if (chosen(r.request_id))
      freed += r.pages;
    else if (r.started)
      order.push_back(&r);
  }
  std::sort(order.begin(), order.end(), first);
  for (const auto* r : order) {
    if (freed >= in.pages_short)
      break;
    (swap && swap(*r) ? d.swap : d.squash).push_back(r->request_id);
    freed += r->pages;
  }
}

std::string scheduling_policy::configure(const std::map<std::string, double>& params) {
  return param_spec{"policy \"" + std::string{name()} + "\""}.apply(params);
}

} // namespace troupe::policies
