// Preemption by swap in the scheduler core: a swapped-out request's cache goes
// to host pages and comes back into new device pages, and it decodes on from
// where it stopped; failures fall back to recompute; every device and host
// page is released exactly once, whatever order the answers come in.
#include "runtime/memory_pool.hpp"
#include "runtime/scheduler_core.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <utility>
#include <vector>

namespace troupe {
namespace {

/// Admits everything waiting; swaps, squashes and aborts what it is told to.
class scripted_preemption final : public policies::scheduling_policy {
public:
  policies::schedule_decision schedule(const policies::schedule_input& in) override {
    policies::schedule_decision d;
    d.swap = std::exchange(swap, {});
    d.squash = std::exchange(squash, {});
    for (const auto& w : in.waiting)
      d.admit.push_back(w.request_id);
    host_free_seen = in.limits.host_free_pages;
    for (const auto& w : in.waiting)
      if (w.swapped)
        swapped_seen.insert(w.request_id);
    return d;
  }
  std::string_view name() const noexcept override { return "scripted_preemption"; }
  std::vector<std::uint64_t> swap, squash;
  std::uint64_t host_free_seen = 0;
  std::set<std::uint64_t> swapped_seen;
};

std::int32_t token_for(std::uint64_t id, std::uint32_t index) {
  return static_cast<std::int32_t>(100 + (id * 31 + index * 7) % 50);
}

/// The shell: device and host page pools, answers on demand, and a check of
/// every step entry against what the request should be fed.
struct swap_shell {
  explicit swap_shell(std::uint64_t device_pages, std::uint64_t host_pages)
    : device(device_pages), host(host_pages) {
    scheduler_limits limits;
    limits.total_pages = device_pages;
    limits.page_tokens = 4;
    limits.host_pages = host_pages;
    limits.page_bytes = 1024;
    auto p = std::make_unique<scripted_preemption>();
    policy = p.get();
    core = std::make_unique<scheduler_core>(limits, std::move(p), nullptr);
  }

  void submit(std::uint64_t id, std::uint32_t prompt, std::uint32_t max_new) {
    request_spec s;
    s.request_id = id;
    for (std::uint32_t i = 0; i < prompt; ++i)
      s.prompt.push_back(static_cast<std::int32_t>(10 + i));
    s.max_new_tokens = max_new;
    s.predicted_tokens = max_new;
    s.arrival_s = now;
    prompts[id] = prompt;
    ASSERT_EQ(core->submit(std::move(s)), scheduler_core::submit_result::accepted);
  }

  /// Carries out the effects; swaps are queued until answered.
  void apply(scheduler_effects fx) {
    for (const auto& r : fx.reserves) {
      const bool ok = device.allocate({page_owner_kind::request, r.request_id}, r.pages);
      auto ids = device.pages_of({page_owner_kind::request, r.request_id});
      apply(core->on_pages(r.request_id, ok, now, {ids.begin(), ids.end()}));
    }
    EXPECT_TRUE(fx.acquires.empty());
    for (auto id : fx.release_pages)
      EXPECT_GT(device.release({page_owner_kind::request, id}), 0u) << "device pages of " << id;
    for (auto id : fx.release_host_pages)
      EXPECT_GT(host.release({page_owner_kind::request, id}), 0u) << "host pages of " << id;
    for (auto& s : fx.swap_outs) {
      // The device pages it names are those it holds.
      const auto held = device.pages_of({page_owner_kind::request, s.request_id});
      EXPECT_TRUE(std::equal(held.begin(), held.end(), s.device_pages.begin(), s.device_pages.end()));
      EXPECT_EQ(s.bytes, s.device_pages.size() * 1024);
      outs.push_back(std::move(s));
    }
    for (auto& s : fx.swap_ins) {
      const auto held = host.pages_of({page_owner_kind::request, s.request_id});
      EXPECT_TRUE(std::equal(held.begin(), held.end(), s.host_pages.begin(), s.host_pages.end()));
      ins.push_back(std::move(s));
    }
    for (const auto& t : fx.tokens) {
      auto& got = tokens[t.request_id];
      EXPECT_EQ(t.index, got.size()) << "request " << t.request_id << " skipped or repeated a token";
      got.push_back(t.token);
    }
    for (const auto& f : fx.finished) {
      EXPECT_TRUE(finished.emplace(f.request_id, f.reason).second) << "two replies to " << f.request_id;
    }
  }

  /// Answers the oldest swap-out: host pages reserved (when the host pool
  /// has room and `ok`), then the copy reported.
  void answer_out(bool ok = true) {
    auto s = outs.front();
    outs.erase(outs.begin());
    const page_owner owner{page_owner_kind::request, s.request_id};
    std::vector<std::uint32_t> ids;
    if (host.allocate(owner, s.device_pages.size())) {
      auto held = host.pages_of(owner);
      ids.assign(held.begin(), held.end());
      if (!ok) {
        host.release(owner); // the shell gives back what a failed copy held
        ids.clear();
      }
    }
    const bool copied = ok && !ids.empty();
    apply(core->on_swapped_out(s.request_id, copied, now, std::move(ids)));
  }

  void answer_in(bool ok = true) {
    auto s = ins.front();
    ins.erase(ins.begin());
    const auto held = device.pages_of({page_owner_kind::request, s.request_id});
    EXPECT_TRUE(std::equal(held.begin(), held.end(), s.device_pages.begin(), s.device_pages.end()));
    apply(core->on_swapped_in(s.request_id, ok, now));
  }

  void admit() { apply(core->admit(now += 1)); }

  /// Runs one step to completion, checking what each entry is fed.
  std::vector<gpu::step_entry> step() {
    auto batch = core->next_step(now += 1);
    std::vector<std::int32_t> out;
    for (const auto& e : batch) {
      const auto& got = tokens[e.request_id];
      const auto prompt = prompts.at(e.request_id);
      EXPECT_EQ(e.output_index, got.size());
      const auto held = device.pages_of({page_owner_kind::request, e.request_id});
      EXPECT_TRUE(std::equal(held.begin(), held.end(), e.pages.begin(), e.pages.end()))
        << "request " << e.request_id << " runs on pages it does not hold";
      if (e.context_tokens == 0) {
        EXPECT_EQ(e.new_tokens, prompt + got.size()) << "a prefill covers prompt + output so far";
        EXPECT_TRUE(std::equal(got.begin(), got.end(), e.tokens.begin() + prompt, e.tokens.end()));
      } else {
        EXPECT_EQ(e.context_tokens, prompt + got.size() - 1);
        EXPECT_EQ(e.tokens, std::vector<std::int32_t>{got.back()});
      }
      out.push_back(token_for(e.request_id, e.output_index));
    }
    if (!batch.empty())
      apply(core->on_step_done(batch, out, now += 1));
    return batch;
  }

  page_pool device, host;
  scripted_preemption* policy = nullptr;
  std::unique_ptr<scheduler_core> core;
  double now = 0;
  std::map<std::uint64_t, std::uint32_t> prompts;
  std::map<std::uint64_t, std::vector<std::int32_t>> tokens;
  std::map<std::uint64_t, finish_reason> finished;
  std::vector<scheduler_effects::swap> outs, ins;
};

/// Request 1 (`prompt` + `max_new` tokens) runs two steps; then 2 arrives
/// and the policy swaps 1 out for it.
void run_then_swap(swap_shell& s, std::uint32_t prompt, std::uint32_t max_new) {
  s.submit(1, prompt, max_new);
  s.admit();
  s.step();
  s.step();
  s.policy->swap = {1};
  s.submit(2, 2, 1);
  s.admit();
}

TEST(scheduler_swap, a_swapped_request_resumes_decoding_from_new_pages_without_a_prefill) {
  swap_shell s{40, 40};
  s.submit(1, 6, 5);
  s.admit();
  s.step(); // prefill
  s.step(); // decode
  ASSERT_EQ(s.tokens[1].size(), 2u);
  const auto before = s.device.pages_of({page_owner_kind::request, 1});
  const std::vector<std::uint32_t> first{before.begin(), before.end()};
  // Something else arrives and the policy swaps 1 out for it.
  s.submit(2, 30, 2);
  s.policy->swap = {1};
  s.admit();
  ASSERT_EQ(s.outs.size(), 1u);
  EXPECT_EQ(s.outs[0].device_pages, first);
  EXPECT_EQ(s.core->state_of(1), request_state::swapping_out);
  EXPECT_EQ(s.core->running(), 1u) << "only 2 runs while 1 is away";
  s.answer_out();
  EXPECT_EQ(s.core->state_of(1), request_state::waiting);
  EXPECT_EQ(s.core->swapped_out(), 1u);
  EXPECT_EQ(s.host.used_pages(page_owner_kind::request), first.size());
  EXPECT_EQ(s.core->host_pages_held(), first.size());
  s.step(); // 2's prefill takes other pages meanwhile
  s.admit();
  EXPECT_TRUE(s.policy->swapped_seen.contains(1));
  EXPECT_EQ(s.policy->host_free_seen, 40u - first.size());
  ASSERT_EQ(s.ins.size(), 1u);
  EXPECT_EQ(s.core->state_of(1), request_state::swapping_in);
  EXPECT_NE(s.ins[0].device_pages, first) << "it comes back into the pages it was granted now";
  s.answer_in();
  EXPECT_EQ(s.core->state_of(1), request_state::running);
  EXPECT_EQ(s.host.used_pages(page_owner_kind::request), 0u);
  EXPECT_EQ(s.core->host_pages_held(), 0u);
  while (s.core->in_system() > 0)
    s.step();
  EXPECT_EQ(s.core->swapped_in(), 1u);
  EXPECT_EQ(s.core->squashed(), 0u);
  ASSERT_EQ(s.tokens[1].size(), 5u);
  for (std::uint32_t i = 0; i < 5; ++i)
    EXPECT_EQ(s.tokens[1][i], token_for(1, i));
  EXPECT_EQ(s.finished.at(1), finish_reason::length);
  EXPECT_EQ(s.device.owners(), 0u);
  EXPECT_EQ(s.device.empty_releases() + s.host.empty_releases(), 0u);
}

TEST(scheduler_swap, a_swap_chosen_during_a_step_keeps_that_steps_token) {
  swap_shell s{40, 40};
  s.submit(1, 3, 4);
  s.admit();
  s.step();
  auto batch = s.core->next_step(s.now += 1);
  ASSERT_EQ(batch.size(), 1u);
  s.submit(2, 3, 1);
  s.policy->swap = {1};
  s.admit();
  EXPECT_TRUE(s.outs.empty()) << "not while its step runs";
  s.apply(s.core->on_step_done(batch, std::vector<std::int32_t>{token_for(1, 1)}, s.now += 1));
  EXPECT_EQ(s.tokens[1].size(), 2u);
  ASSERT_EQ(s.outs.size(), 1u);
  s.answer_out();
  s.admit();
  s.answer_in();
  while (s.core->in_system() > 0)
    s.step();
  EXPECT_EQ(s.tokens[1].size(), 4u);
  EXPECT_EQ(s.finished.at(1), finish_reason::length);
}

TEST(scheduler_swap, no_room_in_the_host_pool_falls_back_to_recompute) {
  swap_shell s{40, 1};
  run_then_swap(s, 6, 4); // 3 pages: more than the host pool holds
  s.answer_out();
  EXPECT_EQ(s.core->swapped_out(), 0u);
  EXPECT_EQ(s.core->squashed(), 1u);
  EXPECT_EQ(s.host.owners(), 0u);
  s.admit();
  EXPECT_TRUE(s.ins.empty());
  // The next step re-prefills prompt + output (checked by step()).
  while (s.core->in_system() > 0)
    s.step();
  EXPECT_EQ(s.tokens[1].size(), 4u);
  EXPECT_EQ(s.device.empty_releases() + s.host.empty_releases(), 0u);
}

TEST(scheduler_swap, a_failed_swap_in_recomputes_into_the_granted_pages) {
  swap_shell s{40, 40};
  run_then_swap(s, 5, 4);
  s.answer_out();
  s.admit();
  s.answer_in(false);
  EXPECT_EQ(s.core->state_of(1), request_state::ready);
  EXPECT_EQ(s.host.owners(), 0u) << "its host pages are released either way";
  while (s.core->in_system() > 0)
    s.step();
  EXPECT_EQ(s.tokens[1].size(), 4u);
  EXPECT_EQ(s.core->squashed(), 1u);
}

TEST(scheduler_swap, without_a_host_pool_a_swap_is_a_squash) {
  swap_shell s{40, 0};
  run_then_swap(s, 5, 4);
  EXPECT_TRUE(s.outs.empty());
  EXPECT_EQ(s.core->squashed(), 1u);
  EXPECT_EQ(s.core->state_of(1), request_state::waiting) << "queued again, to recompute";
  s.admit();
  EXPECT_EQ(s.core->state_of(1), request_state::ready);
}

TEST(scheduler_swap, cancels_while_swapping_or_swapped_release_each_page_once) {
  swap_shell s{60, 60};
  for (std::uint64_t id = 1; id <= 3; ++id)
    s.submit(id, 5, 6);
  s.admit();
  s.step();
  s.step();
  s.policy->swap = {1, 2, 3};
  s.submit(4, 2, 1);
  s.admit();
  ASSERT_EQ(s.outs.size(), 3u);
  // 1: cancelled while its cache is on the way out.
  EXPECT_TRUE(s.core->cancel(1, s.now).first);
  s.answer_out();
  EXPECT_EQ(s.finished.at(1), finish_reason::cancelled);
  // 2: cancelled while swapped out (waiting).
  s.answer_out();
  s.answer_out();
  s.apply(s.core->cancel(2, s.now).second);
  EXPECT_EQ(s.finished.at(2), finish_reason::cancelled);
  // 3: cancelled while its cache comes back.
  s.admit();
  ASSERT_EQ(s.ins.size(), 1u);
  EXPECT_TRUE(s.core->cancel(3, s.now).first);
  s.answer_in();
  EXPECT_EQ(s.finished.at(3), finish_reason::cancelled);
  while (s.core->in_system() > 0)
    s.step();
  EXPECT_EQ(s.device.owners(), 0u);
  EXPECT_EQ(s.host.owners(), 0u);
  EXPECT_EQ(s.device.empty_releases() + s.host.empty_releases(), 0u);
  EXPECT_EQ(s.core->host_pages_held(), 0u);
}

TEST(scheduler_swap, random_preemptions_lose_nothing_and_release_everything_once) {
  for (std::uint64_t seed : {1u, 2u, 3u, 4u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng{seed};
    auto chance = [&](double p) { return std::uniform_real_distribution<>{0, 1}(rng) < p; };
    auto pick = [&](std::uint64_t n) { return rng() % n; };
    swap_shell s{48, 20};
    std::uint64_t next = 1;
    std::vector<std::uint64_t> ids;
    for (int iter = 0; iter < 4000 && (next <= 150 || s.core->in_system() > 0); ++iter) {
      if (next <= 150 && chance(0.3)) {
        s.submit(next, 1 + static_cast<std::uint32_t>(pick(20)), 1 + static_cast<std::uint32_t>(pick(15)));
        ids.push_back(next++);
      }
      // Preempt running requests now and then, by swap or by recompute.
      // (The policy runs when something waits.)
      if (chance(0.3)) {
        std::vector<std::uint64_t> running;
        for (auto id : ids)
          if (s.core->state_of(id) == request_state::running)
            running.push_back(id);
        if (!running.empty())
          (chance(0.7) ? s.policy->swap : s.policy->squash).push_back(running[pick(running.size())]);
      }
      if (chance(0.03) && !ids.empty())
        s.apply(s.core->cancel(ids[pick(ids.size())], s.now).second);
      s.admit();
      if (!s.outs.empty() && chance(0.6))
        s.answer_out(!chance(0.1));
      if (!s.ins.empty() && chance(0.6))
        s.answer_in(!chance(0.1));
      if (chance(0.8))
        s.step();
      if (s.core->memory_blocked() && chance(0.5))
        s.core->on_memory_changed();
    }
    for (int guard = 0; s.core->in_system() > 0 && guard < 5000; ++guard) {
      s.core->on_memory_changed();
      s.admit();
      while (!s.outs.empty())
        s.answer_out();
      while (!s.ins.empty())
        s.answer_in();
      s.step();
    }
    ASSERT_EQ(s.core->in_system(), 0u);
    EXPECT_EQ(s.finished.size(), ids.size()) << "every request got exactly one reply";
    for (auto id : ids) {
      const auto reason = s.finished.at(id);
      if (reason == finish_reason::length) {
        const auto& got = s.tokens[id];
        for (std::uint32_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(got[i], token_for(id, i)) << "request " << id << " token " << i;
      } else {
        EXPECT_EQ(reason, finish_reason::cancelled);
      }
    }
    EXPECT_GT(s.core->swapped_in(), 10u);
    EXPECT_GT(s.core->squashed(), 5u);
    EXPECT_EQ(s.device.owners(), 0u);
    EXPECT_EQ(s.host.owners(), 0u);
    EXPECT_EQ(s.device.empty_releases() + s.host.empty_releases(), 0u);
    EXPECT_EQ(s.core->reserved_pages(), 0u);
    EXPECT_EQ(s.core->host_pages_held(), 0u);
  }
}

} // namespace
} // namespace troupe
