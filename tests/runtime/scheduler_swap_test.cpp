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
    if (latest_first) {
      // As a policy that reorders (SJF, say) and waits for its first choice.
      policies::page_budget pages{in.limits.free_pages, in.adapters_in_use};
      for (auto w = in.waiting.rbegin(); w != in.waiting.rend() && pages.take(*w, in.limits.page_tokens); ++w)
        d.admit.push_back(w->request_id);
    } else {
      for (const auto& w : in.waiting)
        d.admit.push_back(w.request_id);
    }
    host_free_seen = in.limits.host_free_pages;
    for (const auto& w : in.waiting)
      if (w.swapped)
        swapped_seen.insert(w.request_id);
    return d;
  }
  std::string_view name() const noexcept override { return "scripted_preemption"; }
  /// With swap_for_growth, a shortage swaps out the latest started running
  /// requests until it is covered (the default squashes them).
  void preempt_for_growth(const policies::schedule_input& in, policies::schedule_decision& d) override {
    if (!swap_for_growth) {
      scheduling_policy::preempt_for_growth(in, d);
      return;
    }
    ++growth_calls;
    std::uint64_t freed = 0;
    for (auto r = in.running.rbegin(); r != in.running.rend() && freed < in.pages_short; ++r)
      if (r->started) {
        d.swap.push_back(r->request_id);
        freed += r->pages;
      }
  }
  bool swap_for_growth = false;
  /// Admits the latest arrivals first, while they fit (stops at the first
  /// that does not).
  bool latest_first = false;
  int growth_calls = 0;
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
  explicit swap_shell(std::uint64_t device_pages, std::uint64_t host_pages, bool on_demand = false,
                      std::uint64_t session_pages = 0, std::uint64_t disk_pages = 0, bool streaming = false,
                      policies::session_eviction how = policies::session_eviction::lru, double write_back = 0,
                      std::optional<policies::disk_fetch_model> fetch = std::nullopt,
                      std::uint32_t rope_long_after = 0)
    : device(device_pages), host(host_pages) {
    scheduler_limits limits;
    limits.total_pages = device_pages;
    limits.page_tokens = 4;
    limits.host_pages = host_pages;
    limits.page_bytes = 1024;
    limits.on_demand = on_demand;
    limits.session_pages = session_pages;
    limits.disk_pages = disk_pages;
    limits.layer_streaming = streaming;
    limits.session_eviction = how;
    limits.disk_write_back = write_back;
    limits.disk_fetch = fetch;
    limits.rope_long_after = rope_long_after;
    auto p = std::make_unique<scripted_preemption>();
    policy = p.get();
    core = std::make_unique<scheduler_core>(limits, std::move(p), nullptr);
  }

  void submit(std::uint64_t id, std::uint32_t prompt, std::uint32_t max_new) {
    std::vector<std::int32_t> tokens;
    for (std::uint32_t i = 0; i < prompt; ++i)
      tokens.push_back(static_cast<std::int32_t>(10 + i));
    submit_tokens(id, std::move(tokens), max_new);
  }

  void submit_tokens(std::uint64_t id, std::vector<std::int32_t> tokens, std::uint32_t max_new,
                     std::uint64_t session = 0) {
    request_spec s;
    s.request_id = id;
    s.session = session;
    s.prompt = tokens;
    s.prompt_logprobs = prompt_logprobs;
    prompts_of[id] = std::move(tokens);
    const auto prompt = static_cast<std::uint32_t>(s.prompt.size());
    s.max_new_tokens = max_new;
    s.predicted_tokens = max_new;
    s.arrival_s = now;
    prompts[id] = prompt;
    ASSERT_EQ(core->submit(std::move(s)), scheduler_core::submit_result::accepted);
  }

  /// Carries out the effects; swaps and growths are queued until answered.
  void apply(scheduler_effects fx) {
    for (const auto& a : fx.adopts)
      device.transfer({page_owner_kind::request, a.from}, {page_owner_kind::request, a.to});
    for (const auto& g : fx.grows) {
      EXPECT_FALSE(grows.contains(g.request_id)) << "two growths at once for " << g.request_id;
      grows[g.request_id] = g;
    }
    for (auto id : fx.release_pages) {
      // The pool takes messages in order: a growth asked for before this
      // release is carried out first, and its (stale) answer comes later.
      if (auto g = grows.find(id); g != grows.end()) {
        const page_owner owner{page_owner_kind::request, id};
        const bool ok = device.allocate(owner, g->second.pages);
        const auto held = device.pages_of(owner);
        stale.push_back({g->second, ok, {held.begin(), held.end()}});
        grows.erase(g);
      }
      EXPECT_GT(device.release({page_owner_kind::request, id}), 0u) << "device pages of " << id;
    }
    for (const auto& r : fx.reserves) {
      const bool ok = device.allocate({page_owner_kind::request, r.request_id}, r.pages);
      auto ids = device.pages_of({page_owner_kind::request, r.request_id});
      apply(core->on_pages(r.request_id, ok, now, {ids.begin(), ids.end()}));
    }
    EXPECT_TRUE(fx.acquires.empty());

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
      // A swapped request's host pages are its own; a session cache's belong
      // to the turn that left it.
      const auto held = host.pages_of({page_owner_kind::request, s.request_id});
      if (!held.empty()) {
        EXPECT_TRUE(std::equal(held.begin(), held.end(), s.host_pages.begin(), s.host_pages.end()));
      }
      ins.push_back(std::move(s));
    }
    for (auto& s : fx.stream_ins)
      ins.push_back(std::move(s)); // answered the same way, by on_swapped_in
    for (auto id : fx.end_streams)
      ended_streams.push_back(id);
    for (auto& s : fx.session_outs)
      session_outs.push_back(std::move(s));
    for (auto& s : fx.session_ins)
      session_ins.push_back(std::move(s));
    for (auto owner : fx.disk_deletes)
      EXPECT_EQ(disk.erase(owner), 1u) << "no file for " << owner;
    for (auto& s : fx.disk_outs) {
      const auto held = host.pages_of({page_owner_kind::request, s.request_id});
      EXPECT_TRUE(std::equal(held.begin(), held.end(), s.host_pages.begin(), s.host_pages.end()));
      disk_outs.push_back(std::move(s));
    }
    for (auto& s : fx.disk_ins) {
      EXPECT_TRUE(disk.contains(s.request_id)) << "no file for " << s.request_id;
      disk_ins.push_back(std::move(s));
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
  /// Host pages for `owner`: all `n` of them, or none.
  std::vector<std::uint32_t> reserve_host(std::uint64_t owner, std::size_t n) {
    const page_owner o{page_owner_kind::request, owner};
    if (!host.allocate(o, n))
      return {};
    const auto held = host.pages_of(o);
    return {held.begin(), held.end()};
  }

  void answer_out(bool ok = true) {
    auto s = outs.front();
    outs.erase(outs.begin());
    const page_owner owner{page_owner_kind::request, s.request_id};
    auto ids = reserve_host(s.request_id, s.device_pages.size());
    if (!ids.empty() && !ok) {
      host.release(owner); // the shell gives back what a failed copy held
      ids.clear();
    }
    const bool copied = ok && !ids.empty();
    apply(core->on_swapped_out(s.request_id, copied, now, std::move(ids)));
  }

  /// Answers the oldest growth from the device pool.
  void answer_grow() {
    const auto g = grows.begin()->second;
    grows.erase(grows.begin());
    const page_owner owner{page_owner_kind::request, g.request_id};
    const bool ok = device.allocate(owner, g.pages);
    const auto held = device.pages_of(owner);
    apply(core->on_grown(g.request_id, g.ticket, ok, {held.begin(), held.end()}));
  }

  /// Delivers the answer to a growth whose request was released meanwhile:
  /// the core must ignore it.
  void answer_stale() {
    auto a = std::move(stale.front());
    stale.erase(stale.begin());
    const auto reserved = core->reserved_pages();
    apply(core->on_grown(a.g.request_id, a.g.ticket, a.ok, std::move(a.pages)));
    EXPECT_EQ(core->reserved_pages(), reserved);
  }

  /// Answers the oldest move of a session cache to the host pool.
  void answer_session_out() {
    auto s = session_outs.front();
    session_outs.erase(session_outs.begin());
    auto ids = reserve_host(s.request_id, s.device_pages.size());
    const bool copied = !ids.empty();
    apply(core->on_session_out(s.request_id, copied, now, std::move(ids)));
  }

  /// Answers the oldest write of a session cache to its file.
  void answer_disk_out(bool ok = true) {
    auto s = disk_outs.front();
    disk_outs.erase(disk_outs.begin());
    if (ok)
      disk[s.request_id] = s.host_pages.size();
    apply(core->on_disk_out(s.request_id, ok, now));
  }

  /// Answers the oldest read of a session cache from its file: host pages
  /// reserved, the file read and removed.
  void answer_disk_in(bool ok = true) {
    auto s = disk_ins.front();
    disk_ins.erase(disk_ins.begin());
    const auto n = disk.at(s.request_id);
    EXPECT_EQ(s.bytes, n * 1024);
    disk.erase(s.request_id);
    auto ids = reserve_host(s.request_id, n);
    if (!ok && !ids.empty()) {
      host.release({page_owner_kind::request, s.request_id});
      ids.clear();
    }
    const bool read = ok && !ids.empty();
    apply(core->on_disk_in(s.request_id, read, now, std::move(ids)));
  }

  /// Answers the oldest advisory fetch: device pages for the cache, copied.
  void answer_session_in() {
    auto s = session_ins.front();
    session_ins.erase(session_ins.begin());
    const page_owner owner{page_owner_kind::request, s.request_id};
    const bool ok = device.allocate(owner, s.host_pages.size());
    const auto held = device.pages_of(owner);
    apply(core->on_session_in(s.request_id, ok, now, {held.begin(), held.end()}));
  }

  void answer_in(bool ok = true) {
    auto s = ins.front();
    ins.erase(ins.begin());
    // Into pages it holds: all of them for a swapped request, the first
    // ones for a session cache.
    const auto held = device.pages_of({page_owner_kind::request, s.request_id});
    EXPECT_LE(s.device_pages.size(), held.size());
    EXPECT_TRUE(std::equal(s.device_pages.begin(), s.device_pages.end(), held.begin()));
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
      if (got.empty()) {
        // The first prefill: the prompt, less a session's cached prefix.
        EXPECT_EQ(e.context_tokens, expect_cached[e.request_id]);
        EXPECT_EQ(e.prompt_logprobs, e.context_tokens == 0 ? prompt_logprobs : -1);
        EXPECT_EQ(e.context_tokens + e.new_tokens, prompt);
        EXPECT_TRUE(std::equal(e.tokens.begin(), e.tokens.end(), prompts_of[e.request_id].begin() + e.context_tokens));
      } else if (e.context_tokens == 0) {
        EXPECT_EQ(e.new_tokens, prompt + got.size()) << "a recompute covers prompt + output so far";
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
  std::vector<scheduler_effects::swap> outs, ins, session_outs, session_ins, disk_outs, disk_ins;
  std::map<std::uint64_t, std::size_t> disk; // owner -> pages in its file
  std::vector<std::uint64_t> ended_streams;
  std::map<std::uint64_t, scheduler_effects::grow> grows;
  std::map<std::uint64_t, std::uint32_t> expect_cached;
  /// What the requests submitted next ask (request_spec::prompt_logprobs).
  std::int32_t prompt_logprobs = -1;
  std::map<std::uint64_t, std::vector<std::int32_t>> prompts_of;
  struct stale_answer {
    scheduler_effects::grow g;
    bool ok;
    std::vector<std::uint32_t> pages;
  };
  std::vector<stale_answer> stale;
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

/// 150 requests arriving at random, preempted at random by swap or
/// recompute, cancelled now and then, every answer (pages, growths, copies,
/// stale growths) coming in a random order; with `swap_for_growth`, a
/// shortage of pages swaps the latest running requests out too. Then
/// everything is answered until the core is empty.
void random_preemptions(std::uint64_t seed, bool on_demand, bool swap_for_growth) {
  {
    SCOPED_TRACE("seed " + std::to_string(seed) + (on_demand ? ", pages on demand" : "")
                 + (swap_for_growth ? ", swaps for growth" : ""));
    std::mt19937_64 rng{seed};
    auto chance = [&](double p) { return std::uniform_real_distribution<>{0, 1}(rng) < p; };
    auto pick = [&](std::uint64_t n) { return rng() % n; };
    swap_shell s{on_demand ? 14u : 48u, 20, on_demand};
    s.policy->swap_for_growth = swap_for_growth;
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
      if (!s.grows.empty() && chance(0.7))
        s.answer_grow();
      if (!s.stale.empty() && chance(0.5))
        s.answer_stale();
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
      while (!s.grows.empty())
        s.answer_grow();
      while (!s.stale.empty())
        s.answer_stale();
      s.step();
    }
    ASSERT_EQ(s.core->in_system(), 0u) << "stalled";
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
    if (on_demand) {
      EXPECT_GT(s.core->growths_denied(), 0u) << "the pool was meant to run short";
    }
  }
}

TEST(scheduler_swap, random_preemptions_lose_nothing_and_release_everything_once) {
  for (std::uint64_t seed : {1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u})
    random_preemptions(seed, seed % 2 == 0, false);
}

// Swaps chosen for growth as well, answers in random orders: nothing lost,
// nothing stalls, every page back once.
TEST(scheduler_swap, random_swaps_for_growth_never_stall) {
  for (std::uint64_t seed : {11u, 12u, 13u, 14u, 15u, 16u})
    random_preemptions(seed, true, true);
}

/// Six 4-token pages on demand; requests 1 and 2 (3-token prompts, 12 new
/// tokens: 4 pages for a life, 1 at admission) arrive a second apart and are
/// admitted.
swap_shell two_growing(std::uint64_t host_pages = 0) {
  swap_shell s{6, host_pages, true};
  s.submit(1, 3, 12);
  s.now += 1;
  s.submit(2, 3, 12);
  s.admit();
  return s;
}

/// two_growing()'s requests produced their 12 tokens each, and every device
/// page went back once.
void expect_both_produced_12_tokens_and_released_their_pages(swap_shell& s) {
  for (std::uint64_t id : {1u, 2u}) {
    ASSERT_EQ(s.tokens[id].size(), 12u);
    for (std::uint32_t i = 0; i < 12; ++i)
      EXPECT_EQ(s.tokens[id][i], token_for(id, i));
  }
  EXPECT_EQ(s.device.owners(), 0u);
  EXPECT_EQ(s.device.empty_releases(), 0u);
}

TEST(scheduler_swap, on_demand_pages_grow_with_the_output_and_a_short_request_preempts_the_latest) {
  auto s = two_growing();
  EXPECT_EQ(s.core->reserved_pages(), 2u) << "one page each: prompt + the next token";
  s.step(); // both prefill: positions 0-2 written, the next step writes 3
  s.admit();
  // The step after next writes position 4, on a second page: both ask for
  // it a step early.
  ASSERT_EQ(s.grows.size(), 2u);
  s.answer_grow();
  s.answer_grow();
  EXPECT_EQ(s.core->reserved_pages(), 4u);
  // Run until the pool (6 pages) cannot give both a third page and a
  // fourth: the later arrival (2) is preempted for recompute (the default
  // policy's choice) and 1 goes on.
  for (int i = 0; i < 40 && s.core->squashed() == 0; ++i) {
    s.step();
    s.admit();
    while (!s.grows.empty())
      s.answer_grow();
  }
  EXPECT_GT(s.core->growths_denied(), 0u);
  EXPECT_EQ(s.core->squashed(), 1u);
  EXPECT_NE(s.core->state_of(1), request_state::waiting) << "the earlier arrival keeps running";
  for (int i = 0; i < 200 && s.core->in_system() > 0; ++i) {
    s.step();
    s.admit();
    while (!s.grows.empty())
      s.answer_grow();
  }
  ASSERT_EQ(s.core->in_system(), 0u);
  expect_both_produced_12_tokens_and_released_their_pages(s);
}

// Swapping out for growth: the pages of a swap-out in flight count as freed
// (no second victim goes for them), and the request swapped back in gets
// room for its next step with its cache (else it could not step, and, not
// having stepped, would never be chosen to make room: both requests would
// stall for good).
TEST(scheduler_swap, a_request_swapped_out_for_growth_comes_back_with_room_for_its_next_step) {
  auto s = two_growing(8);
  s.policy->swap_for_growth = true; // they grow short only steps later
  for (int i = 0; i < 200 && s.core->in_system() > 0; ++i) {
    s.step();
    s.admit();
    while (!s.grows.empty())
      s.answer_grow();
    while (!s.outs.empty())
      s.answer_out();
    s.admit();
    while (!s.ins.empty()) {
      const auto& in = s.ins.front();
      // Its cache into its first pages; it holds one more, for its next step.
      EXPECT_EQ(in.device_pages.size(), in.host_pages.size());
      EXPECT_EQ(s.device.pages_of({page_owner_kind::request, in.request_id}).size(), in.host_pages.size() + 1);
      s.answer_in();
    }
  }
  ASSERT_EQ(s.core->in_system(), 0u) << "stalled";
  EXPECT_EQ(s.core->swapped_out(), 1u);
  EXPECT_EQ(s.core->swapped_in(), 1u);
  expect_both_produced_12_tokens_and_released_their_pages(s);
  EXPECT_EQ(s.host.owners(), 0u);
  EXPECT_EQ(s.host.empty_releases(), 0u);
}

TEST(scheduler_swap, a_preemption_for_growth_lets_the_survivor_grow_in_the_same_call) {
  // Without this the shell would have no answer coming to call back on:
  // the short request would stall for good.
  auto s = two_growing();
  bool preempted = false;
  for (int i = 0; i < 40 && !preempted; ++i) {
    s.step();
    auto fx = s.core->admit(s.now += 1);
    if (!fx.release_pages.empty()) {
      preempted = true;
      EXPECT_FALSE(fx.grows.empty()) << "the survivor asks for its page in the same call";
    }
    s.apply(std::move(fx));
    while (!s.grows.empty())
      s.answer_grow();
  }
  EXPECT_TRUE(preempted);
}

// -- sessions ---------------------------------------------------------------------

/// Runs steps until `id` has finished.
void run_until_done(swap_shell& s, std::uint64_t id) {
  for (int i = 0; i < 100 && !s.finished.contains(id); ++i) {
    s.admit();
    s.step();
  }
  ASSERT_TRUE(s.finished.contains(id));
}

std::vector<std::int32_t> tokens_from(std::int32_t first, std::size_t n) {
  std::vector<std::int32_t> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = first + static_cast<std::int32_t>(i);
  return v;
}

TEST(scheduler_session, the_next_turn_reuses_the_cached_history) {
  swap_shell s{40, 0, false, 20};
  const page_owner turn1{page_owner_kind::request, 1}, turn2{page_owner_kind::request, 2};
  s.submit_tokens(1, tokens_from(10, 6), 4, 7);
  run_until_done(s, 1);
  EXPECT_EQ(s.finished.at(1), finish_reason::length);
  EXPECT_EQ(s.core->sessions_cached(), 1u);
  EXPECT_EQ(s.device.pages_of(turn1).size(), 3u) << "its pages (6 + 4 tokens) stay for the session";
  EXPECT_EQ(s.core->session_pages_held(), 3u);
  EXPECT_EQ(s.core->reserved_pages(), 3u);
  // Turn 2: the history (prompt and reply) and two new tokens. The cache
  // holds K and V of the prompt and the reply but its last token.
  auto prompt2 = tokens_from(10, 6);
  prompt2.insert(prompt2.end(), s.tokens[1].begin(), s.tokens[1].end());
  prompt2.push_back(50);
  prompt2.push_back(51);
  s.expect_cached[2] = 6 + 3;
  s.submit_tokens(2, prompt2, 3, 7);
  run_until_done(s, 2);
  EXPECT_EQ(s.core->session_hits(), 1u);
  EXPECT_EQ(s.core->reused_tokens(), 9u);
  EXPECT_EQ(s.core->prefilled_tokens(), 6u + 3u) << "turn 2 prefilled only what was new";
  EXPECT_TRUE(s.device.pages_of(turn1).empty()) << "turn 2 adopted them";
  EXPECT_EQ(s.device.pages_of(turn2).size(), 4u) << "12 + 3 tokens, kept for the session again";
  // A turn whose prompt does not extend the cache prefills whole.
  s.submit_tokens(3, tokens_from(90, 5), 2, 7);
  run_until_done(s, 3);
  EXPECT_EQ(s.core->session_hits(), 1u);
  EXPECT_EQ(s.core->sessions_cached(), 1u) << "its own turn replaced the cache";
  EXPECT_TRUE(s.device.pages_of(turn2).empty()) << "the replaced cache was freed";
  EXPECT_EQ(s.device.empty_releases(), 0u);
}

TEST(scheduler_session, a_turn_past_longropes_pretrained_context_prefills_a_history_turned_within_it) {
  // LongRoPE over 12 tokens: turn 1 (6 + 4 tokens) ran within it, its cache
  // turned by the short factors. A turn of 11 tokens is within it too and
  // reuses the cache; one of 13 passes it: its prefill turns by the long
  // factors, so it prefills its whole history.
  for (const std::uint32_t extra : {1u, 3u}) {
    SCOPED_TRACE("turn 2 of " + std::to_string(10 + extra) + " tokens");
    swap_shell s{40, 0, false, 20, 0, false, policies::session_eviction::lru, 0, std::nullopt, 12};
    s.submit_tokens(1, tokens_from(10, 6), 4, 7);
    run_until_done(s, 1);
    ASSERT_EQ(s.core->sessions_cached(), 1u);
    auto prompt2 = tokens_from(10, 6);
    prompt2.insert(prompt2.end(), s.tokens[1].begin(), s.tokens[1].end());
    for (std::uint32_t i = 0; i < extra; ++i)
      prompt2.push_back(static_cast<std::int32_t>(50 + i));
    s.expect_cached[2] = extra == 1 ? 6 + 3 : 0;
    s.submit_tokens(2, prompt2, 1, 7);
    run_until_done(s, 2);
    EXPECT_EQ(s.finished.at(2), finish_reason::length);
    EXPECT_EQ(s.core->session_hits(), extra == 1 ? 1u : 0u);
    EXPECT_EQ(s.core->prefilled_tokens(), 6u + (extra == 1 ? 2u : 13u));
    EXPECT_EQ(s.core->rope_recomputed(), 0u);
    EXPECT_EQ(s.device.empty_releases(), 0u);
  }
}

TEST(scheduler_session, a_turn_within_longropes_pretrained_context_reads_no_history_turned_past_it) {
  // LongRoPE over 12 tokens: turn 1 (10 + 4 tokens) grows past it and is
  // recomputed, its cache (13 tokens) turned by the long factors. Turn 2
  // shares 8 of them (more than half) but stays within 12 tokens, turning by
  // the short factors: it prefills all of its prompt.
  swap_shell s{40, 0, false, 20, 0, false, policies::session_eviction::lru, 0, std::nullopt, 12};
  s.submit_tokens(1, tokens_from(10, 10), 4, 7);
  run_until_done(s, 1);
  EXPECT_EQ(s.finished.at(1), finish_reason::length);
  EXPECT_EQ(s.core->rope_recomputed(), 1u);
  ASSERT_EQ(s.core->sessions_cached(), 1u);
  auto prompt2 = tokens_from(10, 8);
  for (std::int32_t t : {50, 51, 52})
    prompt2.push_back(t);
  s.expect_cached[2] = 0;
  s.submit_tokens(2, prompt2, 1, 7);
  run_until_done(s, 2);
  EXPECT_EQ(s.finished.at(2), finish_reason::length);
  EXPECT_EQ(s.core->session_hits(), 0u);
  EXPECT_EQ(s.device.empty_releases(), 0u);
}

TEST(scheduler_session, a_turn_asking_for_its_prompts_log_probabilities_computes_its_whole_history) {
  swap_shell s{40, 0, false, 20};
  s.submit_tokens(1, tokens_from(10, 6), 4, 7);
  run_until_done(s, 1);
  ASSERT_EQ(s.core->sessions_cached(), 1u);
  auto prompt2 = tokens_from(10, 6);
  prompt2.insert(prompt2.end(), s.tokens[1].begin(), s.tokens[1].end());
  prompt2.push_back(50);
  s.prompt_logprobs = 2;
  s.expect_cached[2] = 0; // (step() checks the entry asks for them)
  s.submit_tokens(2, prompt2, 3, 7);
  run_until_done(s, 2);
  EXPECT_EQ(s.finished.at(2), finish_reason::length);
  EXPECT_EQ(s.core->session_hits(), 0u);
  EXPECT_EQ(s.core->reused_tokens(), 0u);
  EXPECT_EQ(s.core->prefilled_tokens(), 6u + 11u) << "turn 2 prefilled its whole prompt";
  EXPECT_EQ(s.core->sessions_cached(), 1u) << "and its own cache replaced the first turn's";
  EXPECT_EQ(s.device.empty_releases(), 0u);
}

TEST(scheduler_session, sessions_stay_within_their_limit_and_give_way_to_admissions) {
  swap_shell s{12, 0, false, 8};
  for (std::uint64_t id = 1; id <= 3; ++id) {
    s.submit_tokens(id, tokens_from(static_cast<std::int32_t>(10 * id), 8), 4, 100 + id);
    run_until_done(s, id);
  }
  // Three caches of 3 pages against a limit of 8: the oldest went.
  EXPECT_EQ(s.core->sessions_cached(), 2u);
  EXPECT_EQ(s.core->session_evictions(), 1u);
  EXPECT_EQ(s.device.pages_of({page_owner_kind::request, 1}).size(), 0u);
  EXPECT_EQ(s.core->session_pages_held(), 6u);
  // A request needing 10 of the 12 pages: the caches give way.
  s.submit_tokens(4, tokens_from(200, 30), 8);
  run_until_done(s, 4);
  EXPECT_EQ(s.finished.at(4), finish_reason::length);
  EXPECT_EQ(s.core->sessions_cached(), 0u);
  EXPECT_EQ(s.core->reserved_pages(), 0u);
  EXPECT_EQ(s.device.owners(), 0u);
  EXPECT_EQ(s.device.empty_releases(), 0u);
}

TEST(scheduler_session, a_turn_is_admitted_on_the_pages_its_own_cache_leaves_it_to_take) {
  // 12 pages of 4 tokens. Turn 1 of session 7 leaves 3 pages cached; the
  // next turn's whole life takes 12, so with the cache kept only 9 are
  // free, and nothing running will give any back. A turn that reuses the
  // cache takes its 3 pages over and needs only the 9 others; one that
  // shares nothing with it has the cache give way. (Found by the sim fuzz
  // target, when a turn counted its whole need: it waited for ever.) Both
  // with a policy that admits whatever waits and with one that admits only
  // what fits the free pages it is told of.
  for (const bool fits_only : {false, true})
  for (const bool extends : {true, false}) {
    SCOPED_TRACE(extends ? "a turn that reuses the cache" : "a turn that shares nothing with it");
    SCOPED_TRACE(fits_only ? "the policy admits what fits" : "the policy admits all");
    swap_shell s{12, 0, false, 8};
    s.policy->latest_first = fits_only;
    s.submit_tokens(1, tokens_from(10, 6), 4, 7);
    run_until_done(s, 1);
    ASSERT_EQ(s.core->session_pages_held(), 3u);
    auto prompt2 = extends ? tokens_from(10, 6) : tokens_from(500, 6);
    if (extends)
      prompt2.insert(prompt2.end(), s.tokens[1].begin(), s.tokens[1].end());
    const auto more = tokens_from(60, 40 - prompt2.size());
    prompt2.insert(prompt2.end(), more.begin(), more.end());
    s.expect_cached[2] = extends ? 6 + 3 : 0;
    s.submit_tokens(2, prompt2, 8, 7); // 40 + 8 tokens: 12 pages
    run_until_done(s, 2);
    EXPECT_EQ(s.finished.at(2), finish_reason::length);
    EXPECT_EQ(s.core->session_hits(), extends ? 1u : 0u);
    EXPECT_EQ(s.core->prefilled_tokens(), 6u + 40u - (extends ? 9u : 0u)) << "only what the cache does not hold";
    EXPECT_TRUE(s.device.pages_of({page_owner_kind::request, 1}).empty());
    EXPECT_EQ(s.core->sessions_cached(), 0u) << "turn 2's 12 pages are over the 8 sessions may keep";
    EXPECT_EQ(s.device.owners(), 0u);
    EXPECT_EQ(s.device.empty_releases(), 0u);
  }
}

TEST(scheduler_session, caches_give_way_when_the_policys_choice_waits_on_them_and_nothing_runs) {
  // A cache of 3 of the 12 pages. The policy wants the latest arrival first,
  // which needs all 12; the head of the queue fits, so no cache gives way
  // for it, and with nothing running no event would ever come.
  swap_shell s{12, 0, false, 8};
  s.policy->latest_first = true;
  s.submit_tokens(1, tokens_from(10, 6), 4, 7);
  run_until_done(s, 1);
  ASSERT_EQ(s.core->session_pages_held(), 3u);
  s.submit(2, 4, 4);  // 2 pages
  s.submit(3, 40, 8); // 12 pages
  run_until_done(s, 3);
  run_until_done(s, 2);
  EXPECT_EQ(s.finished.at(3), finish_reason::length);
  EXPECT_EQ(s.finished.at(2), finish_reason::length);
  EXPECT_EQ(s.core->session_evictions(), 1u);
  EXPECT_EQ(s.device.owners(), 0u);
  EXPECT_EQ(s.device.empty_releases(), 0u);
}

TEST(scheduler_session, a_refused_reservation_is_not_left_blocked_by_the_cache_its_last_runner_kept) {
  // Request 2 wants all 12 pages while turn 1 of session 7 runs: the pool
  // refuses and admission waits for pages to come back. Turn 1 ends, but
  // keeps its pages for the session: none come back, and nothing else runs.
  swap_shell s{12, 0, false, 8};
  s.submit_tokens(1, tokens_from(10, 6), 4, 7);
  s.admit();
  s.step();
  s.submit(2, 40, 8);
  run_until_done(s, 1);
  run_until_done(s, 2);
  EXPECT_EQ(s.finished.at(2), finish_reason::length);
  EXPECT_EQ(s.core->session_evictions(), 1u);
  EXPECT_EQ(s.device.owners(), 0u);
  EXPECT_EQ(s.device.empty_releases(), 0u);
}

/// Room for one 3-page cache on the device, a host pool behind it: session
/// 7's first turn (request 1) is pushed down by session 8's (request 2).
swap_shell one_session_pushed_down() {
  swap_shell s{40, 20, false, 4};
  s.submit_tokens(1, tokens_from(10, 6), 4, 7);
  run_until_done(s, 1);
  s.submit_tokens(2, tokens_from(50, 6), 4, 8);
  run_until_done(s, 2);
  return s;
}

/// Session 7's second turn (request 3): its history and one new token.
void submit_second_turn(swap_shell& s) {
  auto prompt2 = tokens_from(10, 6);
  prompt2.insert(prompt2.end(), s.tokens[1].begin(), s.tokens[1].end());
  prompt2.push_back(60);
  s.expect_cached[3] = 9;
  s.submit_tokens(3, prompt2, 2, 7);
}

/// Session 7's second turn (request 3) runs to its end reusing the 9
/// cached tokens; every page released once, none left in the host pool.
void the_second_turn_ends_with_its_history_reused(swap_shell& s) {
  run_until_done(s, 3);
  EXPECT_EQ(s.core->reused_tokens(), 9u);
  EXPECT_EQ(s.finished.at(3), finish_reason::length);
  EXPECT_EQ(s.device.empty_releases() + s.host.empty_releases(), 0u);
  EXPECT_EQ(s.core->host_pages_held(), 0u);
}

/// Session 7's second turn (request 3), its cache copying in from the host
/// pool: runs to the end reusing the 9 cached tokens, every page released
/// once.
void the_second_turn_copies_its_cache_in(swap_shell& s) {
  ASSERT_EQ(s.ins.size(), 1u);
  s.answer_in();
  run_until_done(s, 3);
  EXPECT_EQ(s.core->reused_tokens(), 9u);
  EXPECT_EQ(s.device.empty_releases() + s.host.empty_releases(), 0u);
}

TEST(scheduler_session, a_cache_pushed_to_the_host_comes_back_for_the_next_turn) {
  auto s = one_session_pushed_down();
  ASSERT_EQ(s.session_outs.size(), 1u);
  EXPECT_EQ(s.session_outs[0].request_id, 1u) << "the least recently used: session 7's";
  s.answer_session_out();
  EXPECT_EQ(s.core->session_offloads(), 1u);
  EXPECT_TRUE(s.device.pages_of({page_owner_kind::request, 1}).empty()) << "its device pages are free";
  EXPECT_EQ(s.host.pages_of({page_owner_kind::request, 1}).size(), 3u);
  // Session 7's second turn: fresh pages, the cache copied into the first
  // three, then only the new tokens prefilled.
  submit_second_turn(s);
  s.admit();
  ASSERT_EQ(s.ins.size(), 1u);
  EXPECT_EQ(s.ins[0].device_pages.size(), 3u);
  EXPECT_EQ(s.core->state_of(3), request_state::swapping_in);
  s.answer_in();
  EXPECT_EQ(s.core->state_of(3), request_state::ready);
  EXPECT_TRUE(s.host.pages_of({page_owner_kind::request, 1}).empty()) << "host pages freed after the copy";
  the_second_turn_ends_with_its_history_reused(s);
  EXPECT_EQ(s.core->session_host_hits(), 1u);
}

TEST(scheduler_session, a_turn_sharing_most_of_a_host_cache_copies_it_in_and_prefills_from_where_they_part) {
  auto s = one_session_pushed_down();
  s.answer_session_out(); // session 7's 9 cached tokens are in the host pool
  // Its history but the reply's last two tokens, then tokens of its own:
  // 7 of the 9 are shared.
  auto prompt2 = tokens_from(10, 6);
  prompt2.insert(prompt2.end(), s.tokens[1].begin(), s.tokens[1].begin() + 1);
  prompt2.push_back(61);
  prompt2.push_back(62);
  s.expect_cached[3] = 7;
  s.submit_tokens(3, prompt2, 2, 7);
  s.admit();
  ASSERT_EQ(s.ins.size(), 1u);
  EXPECT_EQ(s.ins[0].device_pages.size(), 3u) << "the whole cache comes in; the prefill overwrites its end";
  s.answer_in();
  run_until_done(s, 3);
  EXPECT_EQ(s.core->session_host_hits(), 1u);
  EXPECT_EQ(s.core->session_partial_hits(), 1u);
  EXPECT_EQ(s.core->reused_tokens(), 7u);
  EXPECT_EQ(s.device.empty_releases() + s.host.empty_releases(), 0u);
  EXPECT_EQ(s.core->host_pages_held(), 0u);
}

TEST(scheduler_session, a_turn_sharing_less_than_half_of_the_cache_computes_whole_and_replaces_it) {
  swap_shell s{40, 0, false, 20};
  s.submit_tokens(1, tokens_from(10, 6), 4, 7);
  run_until_done(s, 1);
  // 4 of the 9 cached tokens shared: under half.
  auto prompt2 = tokens_from(10, 4);
  prompt2.push_back(70);
  s.expect_cached[2] = 0;
  s.submit_tokens(2, prompt2, 2, 7);
  run_until_done(s, 2);
  EXPECT_EQ(s.core->session_hits(), 0u);
  EXPECT_EQ(s.core->session_partial_hits(), 0u);
  EXPECT_EQ(s.core->reused_tokens(), 0u);
  EXPECT_TRUE(s.device.pages_of({page_owner_kind::request, 1}).empty()) << "the older cache was freed";
  EXPECT_EQ(s.core->sessions_cached(), 1u);
}

TEST(scheduler_session, an_advisory_brings_the_cache_back_before_the_turn) {
  auto s = one_session_pushed_down();
  s.answer_session_out(); // session 7 is in the host pool now
  scheduler_effects fx;
  EXPECT_EQ(s.core->advise(99, s.now, fx), scheduler_core::advice::none);
  EXPECT_EQ(s.core->advise(8, s.now, fx), scheduler_core::advice::on_gpu);
  EXPECT_TRUE(fx.session_ins.empty());
  EXPECT_EQ(s.core->advise(7, s.now, fx), scheduler_core::advice::fetching);
  ASSERT_EQ(fx.session_ins.size(), 1u);
  EXPECT_EQ(fx.session_ins[0].request_id, 1u);
  s.apply(std::move(fx));
  s.answer_session_in();
  EXPECT_TRUE(s.host.pages_of({page_owner_kind::request, 1}).empty());
  EXPECT_EQ(s.device.pages_of({page_owner_kind::request, 1}).size(), 3u);
  // Its turn takes the cache over on the GPU: no copy, only new tokens.
  submit_second_turn(s);
  s.admit();
  EXPECT_TRUE(s.ins.empty());
  run_until_done(s, 3);
  EXPECT_EQ(s.core->session_prefetches(), 1u);
  EXPECT_EQ(s.core->session_host_hits(), 0u);
  EXPECT_EQ(s.core->reused_tokens(), 9u);
  EXPECT_EQ(s.device.empty_releases() + s.host.empty_releases(), 0u);
}

TEST(scheduler_session, an_advisory_well_ahead_of_its_turn_puts_the_fetch_off_until_shortly_before) {
  auto s = one_session_pushed_down();
  s.answer_session_out(); // session 7 is in the host pool now
  scheduler_effects fx;
  // The turn is 5 s away, the fetch lead 1 s: marked now, fetched in 4 s.
  EXPECT_EQ(s.core->advise(7, s.now, fx, 5.0), scheduler_core::advice::scheduled);
  EXPECT_TRUE(fx.empty()) << "no GPU pages taken yet";
  EXPECT_DOUBLE_EQ(s.core->advise_fetch_delay(5.0), 4.0);
  EXPECT_DOUBLE_EQ(s.core->advise_fetch_delay(0.5), 0.0);
  EXPECT_EQ(s.core->advise(8, s.now, fx, 5.0), scheduler_core::advice::on_gpu);
  EXPECT_EQ(s.core->advise(99, s.now, fx, 5.0), scheduler_core::advice::none);
  // Within the lead (the shell's second call, or an advisory sent late): at once.
  EXPECT_EQ(s.core->advise(7, s.now + 4, fx, 0.5), scheduler_core::advice::fetching);
  ASSERT_EQ(fx.session_ins.size(), 1u);
  s.apply(std::move(fx));
  s.answer_session_in();
  EXPECT_EQ(s.core->advise(7, s.now, fx, 5.0), scheduler_core::advice::on_gpu);
  EXPECT_EQ(s.core->advisories(), 5u);
  EXPECT_EQ(s.device.empty_releases() + s.host.empty_releases(), 0u);
}

TEST(scheduler_session, an_advisory_with_the_gpu_full_of_older_caches_pushes_one_down_and_fetches_in_its_place) {
  // Room for two 3-page caches on the GPU: 9's turn pushed 7's down, so 8
  // and 9 fill it.
  swap_shell s{6, 20, false, 6};
  s.submit_tokens(1, tokens_from(10, 6), 4, 7);
  run_until_done(s, 1);
  s.submit_tokens(2, tokens_from(50, 6), 4, 8);
  run_until_done(s, 2);
  s.submit_tokens(4, tokens_from(80, 6), 4, 9);
  s.admit();
  ASSERT_EQ(s.session_outs.size(), 1u);
  s.answer_session_out();
  run_until_done(s, 4);
  ASSERT_EQ(s.host.pages_of({page_owner_kind::request, 1}).size(), 3u) << "7 in the host pool";
  scheduler_effects fx;
  EXPECT_EQ(s.core->advise(7, s.now, fx), scheduler_core::advice::in_host) << "no room yet";
  EXPECT_TRUE(fx.session_ins.empty());
  ASSERT_EQ(fx.session_outs.size(), 1u);
  EXPECT_EQ(fx.session_outs[0].request_id, 2u) << "the least recently used cache on the GPU gives way: 8's";
  s.apply(std::move(fx));
  s.answer_session_out();
  ASSERT_EQ(s.session_ins.size(), 1u) << "fetched once 8's has landed";
  EXPECT_EQ(s.session_ins[0].request_id, 1u);
  s.answer_session_in();
  EXPECT_EQ(s.device.pages_of({page_owner_kind::request, 1}).size(), 3u);
  EXPECT_EQ(s.host.pages_of({page_owner_kind::request, 2}).size(), 3u);
  scheduler_effects again;
  EXPECT_EQ(s.core->advise(7, s.now, again), scheduler_core::advice::on_gpu) << "where its turn adopts it";
  EXPECT_TRUE(again.empty());
  EXPECT_EQ(s.core->session_prefetches(), 1u);
  EXPECT_EQ(s.core->sessions_cached(), 3u) << "none lost";
  EXPECT_EQ(s.device.empty_releases() + s.host.empty_releases(), 0u);
}

/// Session 7 is advised (its cache starts up a tier), then its second turn
/// comes before that move has ended.
void advised_then_the_second_turn(swap_shell& s) {
  scheduler_effects fx;
  ASSERT_EQ(s.core->advise(7, s.now, fx), scheduler_core::advice::fetching);
  s.apply(std::move(fx));
  submit_second_turn(s);
  s.admit();
}

TEST(scheduler_session, a_turn_waits_for_its_cache_still_coming_up_and_takes_it_over_on_the_gpu) {
  auto s = one_session_pushed_down();
  s.answer_session_out();
  // The turn keeps its place in the queue rather than compute its history
  // again.
  advised_then_the_second_turn(s);
  EXPECT_EQ(s.core->state_of(3), request_state::waiting);
  EXPECT_EQ(s.core->turns_held_for_cache(), 1u);
  EXPECT_TRUE(s.device.pages_of({page_owner_kind::request, 3}).empty()) << "no pages yet";
  s.answer_session_in();
  s.admit();
  EXPECT_TRUE(s.ins.empty()) << "taken over on the GPU: no copy";
  the_second_turn_ends_with_its_history_reused(s);
}

TEST(scheduler_session, a_turn_waits_for_its_cache_still_going_down_and_copies_it_back) {
  auto s = one_session_pushed_down();
  ASSERT_EQ(s.session_outs.size(), 1u) << "7's cache on its way to the host";
  submit_second_turn(s);
  s.admit();
  EXPECT_EQ(s.core->state_of(3), request_state::waiting);
  EXPECT_TRUE(s.ins.empty());
  s.answer_session_out();
  s.admit();
  EXPECT_EQ(s.core->state_of(3), request_state::swapping_in) << "from the host pool now";
  the_second_turn_copies_its_cache_in(s);
  EXPECT_EQ(s.core->turns_held_for_cache(), 1u);
  EXPECT_EQ(s.core->host_pages_held(), 0u);
}

TEST(scheduler_session, an_advisory_while_the_cache_is_still_leaving_fetches_it_back_once_it_lands) {
  auto s = one_session_pushed_down();
  ASSERT_EQ(s.session_outs.size(), 1u) << "session 7's cache is on its way to the host";
  scheduler_effects fx;
  EXPECT_EQ(s.core->advise(7, s.now, fx), scheduler_core::advice::in_host);
  EXPECT_TRUE(fx.session_ins.empty()) << "nothing to copy back before the copy out lands";
  EXPECT_EQ(s.core->session_pages_moving_out(), 3u);
  s.answer_session_out();
  EXPECT_EQ(s.core->session_pages_moving_out(), 0u);
  ASSERT_EQ(s.session_ins.size(), 1u) << "landed in the host pool: straight back up, as advised";
  EXPECT_EQ(s.session_ins[0].request_id, 1u);
  const auto held = s.host.pages_of({page_owner_kind::request, 1});
  EXPECT_EQ(s.session_ins[0].host_pages, std::vector<std::uint32_t>(held.begin(), held.end()));
  s.answer_session_in();
  EXPECT_EQ(s.device.pages_of({page_owner_kind::request, 1}).size(), 3u);
  EXPECT_TRUE(s.host.pages_of({page_owner_kind::request, 1}).empty());
  // The turn finds its cache on the GPU: no copy, only the new tokens.
  submit_second_turn(s);
  s.admit();
  EXPECT_TRUE(s.ins.empty());
  run_until_done(s, 3);
  EXPECT_EQ(s.core->session_prefetches(), 1u);
  EXPECT_EQ(s.core->reused_tokens(), 9u);
  EXPECT_EQ(s.device.empty_releases() + s.host.empty_releases(), 0u);
}

TEST(scheduler_session, an_advisory_for_a_leaving_cache_is_forgotten_when_the_copy_fails) {
  auto s = one_session_pushed_down();
  scheduler_effects fx;
  EXPECT_EQ(s.core->advise(7, s.now, fx), scheduler_core::advice::in_host);
  auto out = s.session_outs.front();
  s.session_outs.clear();
  s.apply(s.core->on_session_out(out.request_id, false, s.now));
  EXPECT_TRUE(s.session_ins.empty()) << "the cache is gone: nothing to fetch";
  EXPECT_EQ(s.core->advise(7, s.now, fx), scheduler_core::advice::none);
  EXPECT_TRUE(fx.session_ins.empty());
}

/// Moves session 7's cache from `from` to `to` as two nodes would: read
/// out, pages freed on `from`, host pages reserved and written on `to`.
void migrate_session(swap_shell& from, swap_shell& to, std::uint64_t session) {
  auto plan = from.core->begin_export(session);
  ASSERT_TRUE(plan.has_value());
  EXPECT_FALSE(from.core->begin_export(session).has_value()) << "already on its way";
  from.apply(from.core->on_exported(session));
  scheduler_effects fx;
  const auto owner = to.core->begin_import(session, plan->pages.size(), plan->tokens, plan->adapter_id, fx);
  ASSERT_NE(owner, 0u);
  to.apply(std::move(fx));
  EXPECT_EQ(to.core->begin_import(session, plan->pages.size(), plan->tokens, plan->adapter_id, fx), 0u)
    << "one on its way already";
  const page_owner o{page_owner_kind::request, owner};
  ASSERT_TRUE(to.host.allocate(o, plan->pages.size()));
  const auto ids = to.host.pages_of(o);
  to.apply(to.core->on_imported(session, true, to.now, {ids.begin(), ids.end()}));
}

TEST(scheduler_session, a_cache_moves_to_another_node_and_serves_the_next_turn_there) {
  for (const bool from_host : {false, true}) {
    SCOPED_TRACE(from_host ? "from the host pool" : "from the GPU");
    // On the GPU, or pushed down to the host pool by session 8's cache.
    swap_shell a{40, 20, false, from_host ? 4u : 20u};
    swap_shell b{40, 20, false, 20};
    a.submit_tokens(1, tokens_from(10, 6), 4, 7);
    run_until_done(a, 1);
    if (from_host) {
      a.submit_tokens(2, tokens_from(50, 6), 4, 8);
      run_until_done(a, 2);
      a.answer_session_out();
      ASSERT_EQ(a.host.pages_of({page_owner_kind::request, 1}).size(), 3u);
    }
    migrate_session(a, b, 7);
    EXPECT_TRUE(a.device.pages_of({page_owner_kind::request, 1}).empty()) << "freed where it left";
    EXPECT_TRUE(a.host.pages_of({page_owner_kind::request, 1}).empty());
    EXPECT_EQ(a.core->host_pages_held(), 0u);
    EXPECT_EQ(a.core->sessions_exported(), 1u);
    EXPECT_EQ(a.device.empty_releases() + a.host.empty_releases(), 0u);
    b.tokens[1] = a.tokens[1];
    EXPECT_EQ(b.core->sessions_imported(), 1u);
    scheduler_effects fx;
    EXPECT_EQ(b.core->advise(7, b.now, fx), scheduler_core::advice::fetching) << "waiting in b's host pool";
    b.apply(std::move(fx));
    b.answer_session_in();
    submit_second_turn(b);
    run_until_done(b, 3);
    EXPECT_EQ(b.core->reused_tokens(), 9u) << "b computed only the new token";
    EXPECT_EQ(b.finished.at(3), finish_reason::length);
    EXPECT_EQ(b.device.empty_releases() + b.host.empty_releases(), 0u);
  }
}

TEST(scheduler_session, an_import_without_host_room_is_refused) {
  swap_shell b{40, 2, false, 20};
  scheduler_effects fx;
  EXPECT_EQ(b.core->begin_import(7, 3, tokens_from(10, 9), 0, fx), 0u);
  EXPECT_EQ(b.core->begin_import(0, 1, {}, 0, fx), 0u) << "no session";
  const auto owner = b.core->begin_import(7, 2, tokens_from(10, 5), 0, fx);
  ASSERT_NE(owner, 0u);
  // A failed write: the session is not cached and the pages go back.
  ASSERT_TRUE(b.host.allocate({page_owner_kind::request, owner}, 2));
  b.apply(b.core->on_imported(7, false, b.now, {0, 1}));
  EXPECT_EQ(b.core->sessions_cached(), 0u);
  EXPECT_EQ(b.host.owners(), 0u);
  EXPECT_EQ(b.core->begin_export(7), std::nullopt);
}

/// Room for one 3-page cache on the GPU and one in the host pool, a disk
/// tier below: session 7's cache (request 1) is on its way to a file when
/// sessions 8 and 9 have followed.
swap_shell one_session_going_to_disk(std::optional<policies::disk_fetch_model> fetch = std::nullopt) {
  swap_shell s{40, 3, false, 4, 30, false, policies::session_eviction::lru, 0, fetch};
  s.submit_tokens(1, tokens_from(10, 6), 4, 7);
  run_until_done(s, 1);
  s.submit_tokens(2, tokens_from(50, 6), 4, 8);
  run_until_done(s, 2);
  s.answer_session_out(); // 7 in the host pool
  s.submit_tokens(4, tokens_from(80, 6), 4, 9);
  run_until_done(s, 4);
  return s;
}

/// one_session_going_to_disk, written: 8's cache (request 2) in the host
/// pool after it.
swap_shell one_session_on_disk() {
  auto s = one_session_going_to_disk();
  EXPECT_EQ(s.disk_outs.size(), 1u) << "7 goes down to disk to make host room";
  EXPECT_TRUE(s.session_outs.empty()) << "8 waits on the GPU for the pages 7's write frees";
  s.answer_disk_out();
  EXPECT_EQ(s.core->session_disk_writes(), 1u);
  EXPECT_EQ(s.core->session_disk_pages(), 3u);
  EXPECT_TRUE(s.host.pages_of({page_owner_kind::request, 1}).empty()) << "host pages freed after the write";
  EXPECT_TRUE(s.disk_outs.empty()) << "only as many caches pushed down as the room needs";
  EXPECT_EQ(s.session_outs.size(), 1u) << "then 8 moves down into them";
  s.answer_session_out();
  EXPECT_EQ(s.host.pages_of({page_owner_kind::request, 2}).size(), 3u);
  EXPECT_EQ(s.core->sessions_cached(), 3u) << "none lost on the way";
  return s;
}

/// Sessions 7 to `last` (requests 10 on) each end one 3-page turn on a GPU
/// that keeps `on_gpu` caches: each later turn pushes the oldest cache on
/// the GPU down to the host pool. Returns the next request id.
std::uint64_t sessions_down(swap_shell& s, std::uint64_t last, std::uint64_t on_gpu) {
  std::uint64_t id = 10;
  for (std::uint64_t session = 7; session <= last; ++session, ++id) {
    s.submit_tokens(id, tokens_from(static_cast<std::int32_t>(10 * id), 6), 4, session);
    run_until_done(s, id);
    if (session > 6 + on_gpu)
      s.answer_session_out();
  }
  return id;
}

/// A GPU keeping one 3-page cache and a host pool of two: sessions 7, 8
/// and 9 (requests 10 to 12) end, 7's and 8's caches in the host pool and
/// 9's on the GPU. Returns the next request id.
std::uint64_t three_sessions_down(swap_shell& s) { return sessions_down(s, 9, 1); }

TEST(scheduler_session, a_cache_coming_down_pushes_one_host_cache_to_disk_and_waits_for_its_pages) {
  // The GPU keeps one 3-page cache, the host pool two, the disk many.
  swap_shell s{40, 6, false, 4, 30};
  const auto id = three_sessions_down(s);
  // 7 and 8 in the host pool (full), 9 on the GPU; 10's turn pushes 9 down.
  EXPECT_EQ(s.host.used_pages(page_owner_kind::request), 6u);
  s.submit_tokens(id, tokens_from(200, 6), 4, 10);
  run_until_done(s, id);
  ASSERT_EQ(s.disk_outs.size(), 1u) << "one host cache down to disk makes the room, not both";
  EXPECT_EQ(s.disk_outs[0].request_id, 10u) << "the least recently used: session 7's";
  EXPECT_TRUE(s.session_outs.empty()) << "9 waits on the GPU while 7 is written";
  EXPECT_EQ(s.core->session_pages_moving_out(), 3u) << "its pages counted as leaving";
  s.answer_disk_out();
  ASSERT_EQ(s.session_outs.size(), 1u) << "then 9 moves into the pages 7 left";
  EXPECT_EQ(s.session_outs[0].request_id, 12u);
  s.answer_session_out();
  EXPECT_EQ(s.core->sessions_cached(), 4u) << "none dropped: 7 on disk, 8 and 9 in the host pool, 10 on the GPU";
  EXPECT_EQ(s.core->session_evictions(), 0u);
  EXPECT_EQ(s.host.pages_of({page_owner_kind::request, 11}).size(), 3u);
  EXPECT_EQ(s.host.pages_of({page_owner_kind::request, 12}).size(), 3u);
  EXPECT_EQ(s.core->session_disk_pages(), 3u);
  EXPECT_EQ(s.device.empty_releases() + s.host.empty_releases(), 0u);
}

TEST(scheduler_session, two_caches_coming_down_at_once_each_get_host_pages_of_their_own) {
  // A 20-page GPU keeping two 3-page caches, a host pool of two, disk.
  swap_shell s{20, 6, false, 7, 30};
  sessions_down(s, 10, 2);
  // 7 and 8 in the host pool (full), 9 and 10 on the GPU. A request of 18
  // pages (14 free) pushes both GPU caches down: each needs a host cache
  // written to disk, the pages of one write cannot serve both.
  EXPECT_EQ(s.host.used_pages(page_owner_kind::request), 6u);
  s.submit(20, 68, 4);
  s.admit();
  EXPECT_EQ(s.core->session_pages_moving_out(), 6u);
  ASSERT_EQ(s.disk_outs.size(), 2u) << "7 and 8 to disk, one for each";
  s.answer_disk_out();
  s.answer_disk_out();
  ASSERT_EQ(s.session_outs.size(), 2u);
  s.answer_session_out();
  s.answer_session_out();
  run_until_done(s, 20);
  EXPECT_EQ(s.finished.at(20), finish_reason::length);
  EXPECT_EQ(s.core->session_evictions(), 0u);
  EXPECT_EQ(s.core->sessions_cached(), 4u);
  EXPECT_EQ(s.core->session_disk_pages(), 6u);
  EXPECT_EQ(s.device.empty_releases() + s.host.empty_releases(), 0u);
}

TEST(scheduler_session, write_back_copies_a_host_cache_to_disk_ahead_so_the_next_one_down_need_not_wait) {
  // The GPU keeps one 3-page cache, the host pool two; write-back below
  // half of the host pool free or clean.
  swap_shell s{40, 6, false, 4, 30, false, policies::session_eviction::lru, 0.5};
  const auto id = three_sessions_down(s);
  // 7 and 8 fill the host pool: 7's cache is copied to disk ahead of need,
  // and keeps its host pages.
  s.admit();
  ASSERT_EQ(s.disk_outs.size(), 1u);
  EXPECT_EQ(s.disk_outs[0].request_id, 10u);
  s.answer_disk_out();
  EXPECT_EQ(s.host.pages_of({page_owner_kind::request, 10}).size(), 3u) << "still in the host pool";
  EXPECT_EQ(s.core->session_clean_pages(), 3u);
  EXPECT_EQ(s.core->session_disk_pages(), 3u);
  EXPECT_TRUE(s.disk_outs.empty()) << "one clean cache is enough here";
  // 10's turn pushes 9 down: 7's host pages come free at once.
  s.submit_tokens(id, tokens_from(200, 6), 4, 10);
  run_until_done(s, id);
  ASSERT_EQ(s.session_outs.size(), 1u) << "9 moves down without waiting for a write";
  EXPECT_EQ(s.session_outs[0].request_id, 12u);
  s.answer_session_out();
  EXPECT_TRUE(s.host.pages_of({page_owner_kind::request, 10}).empty());
  EXPECT_EQ(s.core->session_clean_pages(), 0u) << "7 is on disk only now";
  EXPECT_EQ(s.core->session_disk_pages(), 3u);
  EXPECT_EQ(s.core->session_evictions(), 0u);
  EXPECT_EQ(s.device.empty_releases() + s.host.empty_releases(), 0u);
}

TEST(scheduler_session, write_back_does_not_trade_one_clean_copy_for_another) {
  // Write-back wants the whole host pool (two caches) clean, but the disk
  // holds one cache. Writing 8's copy by dropping 7's, then 7's by dropping
  // 8's, ... went on for ever (found by the sim fuzz target): one copy is
  // written, and no more.
  swap_shell s{40, 6, false, 4, 3, false, policies::session_eviction::lru, 1.0};
  three_sessions_down(s);
  s.admit();
  ASSERT_EQ(s.disk_outs.size(), 1u);
  EXPECT_EQ(s.disk_outs[0].request_id, 10u);
  s.answer_disk_out();
  for (int i = 0; i < 3; ++i)
    s.admit();
  EXPECT_TRUE(s.disk_outs.empty()) << "no room on disk but at another clean copy's cost";
  EXPECT_EQ(s.core->session_disk_writes(), 1u);
  EXPECT_EQ(s.core->session_clean_pages(), 3u);
  EXPECT_EQ(s.core->session_disk_pages(), 3u);
}

/// One 3-page cache on the GPU and one in the host pool, write-back on:
/// session 7's cache (request 1) in the host pool, which it fills, with a
/// copy on disk; 8's (request 2) on the GPU.
swap_shell one_session_written_back() {
  swap_shell s{40, 3, false, 4, 30, false, policies::session_eviction::lru, 0.5};
  s.submit_tokens(1, tokens_from(10, 6), 4, 7);
  run_until_done(s, 1);
  s.submit_tokens(2, tokens_from(50, 6), 4, 8);
  run_until_done(s, 2);
  s.answer_session_out();
  s.admit();
  EXPECT_EQ(s.disk_outs.size(), 1u) << "written back";
  s.answer_disk_out();
  return s;
}

TEST(scheduler_session, a_clean_cache_used_again_loses_its_copy_on_disk) {
  auto s = one_session_written_back();
  EXPECT_EQ(s.core->session_clean_pages(), 3u);
  submit_second_turn(s); // 7's next turn: a host hit
  s.admit();
  EXPECT_TRUE(s.disk.empty()) << "the copy on disk is removed";
  EXPECT_EQ(s.core->session_disk_pages(), 0u);
  EXPECT_EQ(s.core->session_clean_pages(), 0u);
  the_second_turn_copies_its_cache_in(s);
}

TEST(scheduler_session, a_read_from_disk_turns_a_write_back_under_way_into_room) {
  auto s = one_session_written_back();
  s.submit_tokens(4, tokens_from(80, 6), 4, 9);
  run_until_done(s, 4);
  ASSERT_EQ(s.session_outs.size(), 1u) << "8 down at once: 7 was clean";
  s.answer_session_out();
  s.admit();
  ASSERT_EQ(s.disk_outs.size(), 1u) << "8 written back in turn";
  // 7's next turn needs host room for its read while 8's write-back runs:
  // that write now frees 8's host pages when it ends.
  submit_second_turn(s);
  s.admit();
  EXPECT_TRUE(s.disk_ins.empty());
  s.answer_disk_out();
  EXPECT_TRUE(s.host.pages_of({page_owner_kind::request, 2}).empty()) << "8 on disk only";
  ASSERT_EQ(s.disk_ins.size(), 1u);
  s.answer_disk_in();
  the_second_turn_copies_its_cache_in(s);
  EXPECT_EQ(s.core->session_evictions(), 0u);
  EXPECT_EQ(s.core->session_clean_pages(), 0u);
}

/// A disk_fetch model: prefill of n tokens takes n ms; the disk and the
/// copy up at the given rates.
policies::disk_fetch_model fetch_model(double disk_bytes_per_s, double h2d_bytes_per_s) {
  policies::cost_calibration c;
  c.h2d_bytes_per_s = h2d_bytes_per_s;
  c.prefill_points = {{10, 0.01}, {20, 0.02}, {40, 0.04}};
  return policies::disk_fetch_model::from(c, disk_bytes_per_s);
}

TEST(scheduler_session, a_host_cache_whose_write_would_outlast_its_recompute_is_dropped_instead) {
  // A disk so slow that any write takes longer than recomputing: 7's cache
  // leaves the full host pool by being dropped, and 8's moves in at once.
  auto s = one_session_going_to_disk(fetch_model(1, 1e12));
  EXPECT_TRUE(s.disk_outs.empty());
  EXPECT_EQ(s.session_outs.size(), 1u) << "8 down without waiting";
  EXPECT_EQ(s.core->session_evictions(), 1u);
  EXPECT_EQ(s.core->session_disk_writes(), 0u);
}

TEST(scheduler_session, a_turn_recomputes_a_cache_on_disk_when_reading_it_would_take_longer) {
  // Writes are quick, the copy up from the host crawls: 7's cache goes to
  // disk, and its next turn prefills its history rather than wait for it.
  auto s = one_session_going_to_disk(fetch_model(1e12, 1));
  ASSERT_EQ(s.disk_outs.size(), 1u);
  s.answer_disk_out();
  s.answer_session_out(); // 8 into the pages 7 left
  submit_second_turn(s);
  s.expect_cached[3] = 0;
  s.admit();
  EXPECT_TRUE(s.disk_ins.empty()) << "no read";
  EXPECT_EQ(s.core->session_disk_skips(), 1u);
  run_until_done(s, 3);
  EXPECT_EQ(s.finished.at(3), finish_reason::length);
  EXPECT_EQ(s.core->reused_tokens(), 0u);
  EXPECT_FALSE(s.disk.contains(1)) << "the file of the cache the turn replaced is gone";
  EXPECT_EQ(s.device.empty_releases() + s.host.empty_releases(), 0u);
}

TEST(scheduler_session, a_read_from_disk_waits_for_a_cache_still_landing_in_the_host_pool) {
  auto s = one_session_going_to_disk();
  s.answer_disk_out(); // 7 on disk; 8 now on its way into the host pool
  ASSERT_EQ(s.session_outs.size(), 1u);
  // 7's next turn: the only host pages are the ones 8 lands in; once it
  // has, 8 goes down to disk to make room, then 7 is read back.
  submit_second_turn(s);
  s.admit();
  EXPECT_TRUE(s.disk_ins.empty());
  EXPECT_EQ(s.core->session_disk_skips(), 0u);
  s.answer_session_out();
  s.admit();
  ASSERT_EQ(s.disk_outs.size(), 1u) << "8 pushed down once it landed";
  s.answer_disk_out();
  ASSERT_EQ(s.disk_ins.size(), 1u);
  s.answer_disk_in();
  the_second_turn_copies_its_cache_in(s);
  EXPECT_EQ(s.core->session_evictions(), 0u);
}

TEST(scheduler_session, a_cache_waiting_for_host_pages_is_taken_by_its_turn_from_the_gpu) {
  swap_shell s{40, 3, false, 4, 30};
  s.submit_tokens(1, tokens_from(10, 6), 4, 7);
  run_until_done(s, 1);
  s.submit_tokens(2, tokens_from(50, 6), 4, 8);
  run_until_done(s, 2);
  s.answer_session_out(); // 7 in the host pool (full)
  s.submit_tokens(4, tokens_from(80, 6), 4, 9);
  run_until_done(s, 4);
  ASSERT_EQ(s.disk_outs.size(), 1u);
  EXPECT_EQ(s.core->session_pages_moving_out(), 3u) << "8 waits on the GPU";
  // 8's next turn comes before 7's write ends: it adopts 8's pages where
  // they are, and the claim on host pages is withdrawn.
  auto prompt = s.prompts_of.at(2);
  prompt.insert(prompt.end(), s.tokens.at(2).begin(), s.tokens.at(2).end());
  for (std::int32_t t = 0; t < 3; ++t)
    prompt.push_back(300 + t);
  s.submit_tokens(5, prompt, 2, 8);
  s.expect_cached[5] = 9;
  s.admit();
  EXPECT_EQ(s.core->session_pages_moving_out(), 0u);
  s.answer_disk_out();
  EXPECT_TRUE(s.session_outs.empty()) << "nothing left to move";
  run_until_done(s, 5);
  EXPECT_EQ(s.finished.at(5), finish_reason::length);
  EXPECT_EQ(s.core->session_hits(), 1u);
  EXPECT_EQ(s.device.empty_releases() + s.host.empty_releases(), 0u);
}

TEST(scheduler_session, a_turn_whose_cache_is_being_written_to_disk_takes_its_host_pages) {
  auto s = one_session_going_to_disk();
  ASSERT_EQ(s.disk_outs.size(), 1u) << "7 on its way to disk";
  // 7's next turn comes before the write ends.
  submit_second_turn(s);
  s.admit();
  EXPECT_EQ(s.core->state_of(3), request_state::swapping_in) << "waits for the write to let the pages go";
  EXPECT_TRUE(s.ins.empty());
  s.answer_disk_out();
  EXPECT_TRUE(s.disk.empty()) << "the file it no longer needs is removed";
  EXPECT_TRUE(s.disk_ins.empty()) << "nothing read back: the host pages still held it";
  the_second_turn_copies_its_cache_in(s);
  EXPECT_EQ(s.core->session_disk_reads(), 0u);
  EXPECT_EQ(s.core->session_disk_pages(), 0u);
  EXPECT_EQ(s.finished.at(3), finish_reason::length);
  EXPECT_EQ(s.core->host_pages_held(), 0u);
  EXPECT_EQ(s.device.empty_releases() + s.host.empty_releases(), 0u);
}

TEST(scheduler_session, a_cache_on_disk_comes_back_through_the_host_for_the_next_turn) {
  auto s = one_session_on_disk();
  submit_second_turn(s);
  s.admit();
  EXPECT_EQ(s.core->state_of(3), request_state::swapping_in) << "its pages came; the file not yet";
  ASSERT_EQ(s.disk_outs.size(), 1u) << "8 goes down to disk to make host room for 7";
  EXPECT_TRUE(s.disk_ins.empty()) << "the read waits for the host pages 8's write frees";
  s.answer_disk_out();
  ASSERT_EQ(s.disk_ins.size(), 1u);
  EXPECT_TRUE(s.ins.empty());
  s.answer_disk_in();
  ASSERT_EQ(s.ins.size(), 1u) << "then copied into its first pages";
  s.answer_in();
  run_until_done(s, 3);
  EXPECT_EQ(s.core->reused_tokens(), 9u);
  EXPECT_EQ(s.core->session_disk_writes(), 2u);
  EXPECT_EQ(s.core->session_disk_reads(), 1u);
  EXPECT_EQ(s.core->session_disk_pages(), 3u) << "8's";
  EXPECT_EQ(s.disk.size(), 1u);
  EXPECT_EQ(s.finished.at(3), finish_reason::length);
  EXPECT_EQ(s.core->host_pages_held(), 0u);
  EXPECT_EQ(s.device.empty_releases() + s.host.empty_releases(), 0u);
}

TEST(scheduler_session, an_advisory_lifts_a_cache_from_disk_to_the_host) {
  auto s = one_session_on_disk();
  scheduler_effects fx;
  EXPECT_EQ(s.core->advise(7, s.now, fx), scheduler_core::advice::fetching);
  s.apply(std::move(fx));
  s.answer_disk_out(); // 8 down to disk, freeing the host pages
  s.answer_disk_in();
  EXPECT_EQ(s.host.pages_of({page_owner_kind::request, 1}).size(), 3u);
  submit_second_turn(s);
  s.admit();
  the_second_turn_copies_its_cache_in(s); // a host hit now
}

TEST(scheduler_session, a_turn_takes_over_an_advisorys_read_from_disk) {
  auto s = one_session_on_disk();
  // The turn comes while the read waits for host room: it waits for the
  // read, then copies the cache in.
  advised_then_the_second_turn(s);
  EXPECT_EQ(s.core->state_of(3), request_state::swapping_in);
  s.answer_disk_out(); // 8 down to disk, freeing the host pages
  ASSERT_EQ(s.disk_ins.size(), 1u);
  s.answer_disk_in();
  the_second_turn_copies_its_cache_in(s);
  EXPECT_EQ(s.core->session_disk_reads(), 1u) << "one read, for the advisory and the turn";
  EXPECT_EQ(s.finished.at(3), finish_reason::length);
  EXPECT_EQ(s.core->host_pages_held(), 0u);
}

TEST(scheduler_session, an_advisory_reads_from_disk_only_while_the_disk_is_idle) {
  // One 3-page cache on the GPU, three in the host pool, the rest on disk:
  // sessions 7 to 12 (requests 10 to 15) end a turn each, every move
  // answered as it comes.
  swap_shell s{40, 9, false, 4, 30};
  auto settle = [&s] {
    while (!s.disk_outs.empty() || !s.session_outs.empty())
      s.disk_outs.empty() ? s.answer_session_out() : s.answer_disk_out();
  };
  for (std::uint64_t session = 7, id = 10; session <= 12; ++session, ++id) {
    s.submit_tokens(id, tokens_from(static_cast<std::int32_t>(10 * id), 6), 4, session);
    run_until_done(s, id);
    settle();
  }
  ASSERT_EQ(s.core->session_disk_pages(), 6u) << "7's and 8's caches on disk";
  // The next turns of sessions 9 and 10 take their caches out of the host
  // pool, leaving room there; session 7's reads its cache from disk.
  auto next_turn = [&s](std::uint64_t id, std::uint64_t first, std::uint64_t session) {
    auto prompt = tokens_from(static_cast<std::int32_t>(10 * first), 6);
    prompt.insert(prompt.end(), s.tokens[first].begin(), s.tokens[first].end());
    prompt.push_back(60);
    s.expect_cached[id] = 9;
    s.submit_tokens(id, prompt, 2, session);
    s.admit();
  };
  next_turn(20, 12, 9);
  s.answer_in();
  next_turn(21, 13, 10);
  s.answer_in();
  next_turn(22, 10, 7);
  ASSERT_EQ(s.disk_ins.size(), 1u) << "7's read under way";
  scheduler_effects fx;
  EXPECT_EQ(s.core->advise(8, s.now, fx), scheduler_core::advice::none) << "the disk is busy: no read ahead";
  EXPECT_TRUE(fx.empty());
  s.answer_disk_in();
  EXPECT_EQ(s.core->advise(8, s.now, fx), scheduler_core::advice::fetching) << "idle now";
  s.apply(std::move(fx));
  ASSERT_EQ(s.disk_ins.size(), 1u);
  s.answer_disk_in();
  EXPECT_EQ(s.host.pages_of({page_owner_kind::request, 11}).size(), 3u) << "8's cache in the host pool";
}

TEST(scheduler_session, a_failed_read_from_disk_recomputes_the_turn) {
  auto s = one_session_on_disk();
  submit_second_turn(s);
  s.expect_cached[3] = 0;
  s.admit();
  s.answer_disk_out();
  s.answer_disk_in(false);
  EXPECT_EQ(s.core->state_of(3), request_state::ready);
  run_until_done(s, 3);
  EXPECT_EQ(s.core->reused_tokens(), 0u);
  EXPECT_EQ(s.finished.at(3), finish_reason::length);
  EXPECT_EQ(s.core->sessions_cached(), 3u) << "8 on disk, 9, and 7's new turn";
  EXPECT_EQ(s.device.empty_releases() + s.host.empty_releases(), 0u);
}

/// one_session_pushed_down with layer-wise streaming on.
swap_shell one_session_pushed_down_streaming() {
  swap_shell s{40, 20, false, 4, 0, true};
  s.submit_tokens(1, tokens_from(10, 6), 4, 7);
  run_until_done(s, 1);
  s.submit_tokens(2, tokens_from(50, 6), 4, 8);
  run_until_done(s, 2);
  s.answer_session_out();
  return s;
}

TEST(scheduler_session, a_streamed_cache_lets_the_turn_run_while_it_comes_in) {
  auto s = one_session_pushed_down_streaming();
  submit_second_turn(s);
  s.admit();
  ASSERT_EQ(s.ins.size(), 1u);
  EXPECT_EQ(s.core->state_of(3), request_state::ready) << "runs at once";
  EXPECT_EQ(s.core->streamed_ins(), 1u);
  auto batch = s.core->next_step(s.now += 1);
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0].stream, 3u) << "its first step waits per layer for the copy";
  EXPECT_EQ(batch[0].context_tokens, 9u);
  std::vector<std::int32_t> toks{token_for(3, 0)};
  s.apply(s.core->on_step_done(batch, toks, s.now));
  EXPECT_EQ(s.host.pages_of({page_owner_kind::request, 1}).size(), 3u) << "host pages held until the copy answers";
  s.answer_in();
  EXPECT_TRUE(s.host.pages_of({page_owner_kind::request, 1}).empty());
  EXPECT_TRUE(s.ended_streams.empty()) << "the step used the stream";
  batch = s.core->next_step(s.now += 1);
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0].stream, 0u) << "only the first step";
  s.apply(s.core->on_step_done(batch, std::vector<std::int32_t>{token_for(3, 1)}, s.now));
  EXPECT_EQ(s.finished.at(3), finish_reason::length);
  EXPECT_EQ(s.core->reused_tokens(), 9u);
  EXPECT_EQ(s.device.empty_releases() + s.host.empty_releases(), 0u);
}

TEST(scheduler_session, a_streaming_turn_cancelled_or_failed_before_its_step_keeps_its_pages_until_the_copy_answers) {
  for (const bool cancel : {true, false}) {
    SCOPED_TRACE(cancel ? "cancelled" : "copy failed");
    auto s = one_session_pushed_down_streaming();
    submit_second_turn(s);
    s.admit();
    ASSERT_EQ(s.ins.size(), 1u);
    if (cancel) {
      auto [found, fx] = s.core->cancel(3, s.now);
      EXPECT_TRUE(found);
      s.apply(std::move(fx));
      EXPECT_TRUE(s.core->next_step(s.now).empty()) << "no step for it while its copy runs";
      EXPECT_FALSE(s.finished.contains(3));
      EXPECT_FALSE(s.device.pages_of({page_owner_kind::request, 3}).empty()) << "the copy writes them";
      s.answer_in(true);
      EXPECT_EQ(s.finished.at(3), finish_reason::cancelled);
    } else {
      s.answer_in(false);
      s.expect_cached[3] = 0; // recomputed whole
      run_until_done(s, 3);
      EXPECT_EQ(s.finished.at(3), finish_reason::length);
      EXPECT_EQ(s.core->reused_tokens(), 0u);
    }
    EXPECT_EQ(s.ended_streams, std::vector<std::uint64_t>{3}) << "no step used it";
    EXPECT_TRUE(s.host.pages_of({page_owner_kind::request, 1}).empty());
    EXPECT_EQ(s.device.empty_releases() + s.host.empty_releases(), 0u);
  }
}

TEST(scheduler_session, the_session_policy_chooses_which_cache_leaves_the_gpu) {
  for (const auto how : {policies::session_eviction::lru, policies::session_eviction::largest}) {
    const bool lru = how == policies::session_eviction::lru;
    SCOPED_TRACE(lru ? "lru" : "largest");
    swap_shell s{40, 0, false, 8, 0, false, how};
    // Session 7: a 5-page cache; session 8: a 3-page one, newer; then an
    // advisory makes 7 the most recently used.
    s.submit_tokens(1, tokens_from(10, 16), 4, 7);
    run_until_done(s, 1);
    s.submit_tokens(2, tokens_from(50, 6), 4, 8);
    run_until_done(s, 2);
    scheduler_effects fx;
    s.now += 1;
    EXPECT_EQ(s.core->advise(7, s.now, fx), scheduler_core::advice::on_gpu);
    // Session 9's 3 pages pass the limit of 8: one of the two goes.
    s.submit_tokens(3, tokens_from(90, 6), 4, 9);
    run_until_done(s, 3);
    EXPECT_EQ(s.core->sessions_cached(), 2u);
    const auto seven = s.device.pages_of({page_owner_kind::request, 1}).size();
    const auto eight = s.device.pages_of({page_owner_kind::request, 2}).size();
    EXPECT_EQ(seven, lru ? 5u : 0u) << "LRU keeps the recently advised 7; largest drops its 5 pages";
    EXPECT_EQ(eight, lru ? 0u : 3u);
    EXPECT_EQ(s.device.empty_releases(), 0u);
  }
}

TEST(scheduler_session, an_import_replaces_an_older_cache_of_the_session) {
  swap_shell b{40, 20, false, 20};
  b.submit_tokens(1, tokens_from(10, 6), 4, 7); // b's own, older cache of session 7
  run_until_done(b, 1);
  ASSERT_EQ(b.device.pages_of({page_owner_kind::request, 1}).size(), 3u);
  scheduler_effects fx;
  const auto owner = b.core->begin_import(7, 2, tokens_from(10, 5), 0, fx);
  ASSERT_NE(owner, 0u);
  b.apply(std::move(fx));
  EXPECT_TRUE(b.device.pages_of({page_owner_kind::request, 1}).empty()) << "the older cache was freed";
  EXPECT_EQ(b.core->reserved_pages(), 0u);
  ASSERT_TRUE(b.host.allocate({page_owner_kind::request, owner}, 2));
  const auto ids = b.host.pages_of({page_owner_kind::request, owner});
  b.apply(b.core->on_imported(7, true, b.now, {ids.begin(), ids.end()}));
  EXPECT_EQ(b.core->sessions_cached(), 1u);
  EXPECT_EQ(b.device.empty_releases() + b.host.empty_releases(), 0u);
}

} // namespace
} // namespace troupe
