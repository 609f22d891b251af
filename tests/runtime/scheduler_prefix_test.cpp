// Tests for the scheduler core's prefix caching, through a shell that keeps
// a KV oracle: every page of the pool records which token each of its slots
// holds (written by the steps as a backend would, copied by swaps, wiped
// when freed). Each step entry must find, at every position before its
// context, the token its request's sequence has there, and must never write
// into a page the prefix cache holds. So a request reading another's cached
// pages reads exactly its own prompt's K and V, and nothing freed, reused or
// shared is read or overwritten behind its back.
#include "runtime/scheduler_core.hpp"

#include "policies/fcfs_scheduling_policy.hpp"
#include "runtime/memory_pool.hpp"
#include "tests/support/step_entry.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace troupe {
namespace {

/// FCFS, but a request short of pages is swapped out rather than recomputed.
class swapping_fcfs final : public policies::scheduling_policy {
public:
  policies::schedule_decision schedule(const policies::schedule_input& in) override { return fcfs_.schedule(in); }
  void preempt_for_growth(const policies::schedule_input& in, policies::schedule_decision& d) override {
    fcfs_.preempt_for_growth(in, d);
    d.swap.insert(d.swap.end(), d.squash.begin(), d.squash.end());
    d.squash.clear();
  }
  std::string_view name() const noexcept override { return "swapping_fcfs"; }

private:
  policies::fcfs_scheduling_policy fcfs_;
};

struct request {
  std::vector<std::int32_t> prompt;
  std::uint32_t max_new = 4;
  std::uint32_t adapter = 0;
  std::uint64_t session = 0;
  std::int32_t prompt_logprobs = -1;
  std::uint64_t adapter_pages = 0;
  bool json = false; ///< response_format json_object (needs the shell's vocab)
};

class prefix_shell {
public:
  explicit prefix_shell(scheduler_limits limits, std::unique_ptr<policies::scheduling_policy> policy = nullptr,
                        const gpu::tokenizer* vocab = nullptr)
    : core(limits, policy ? std::move(policy) : std::make_unique<policies::fcfs_scheduling_policy>(), vocab),
      pool(limits.total_pages), host(limits.host_pages), vocab_(vocab), per_(limits.page_tokens),
      page_bytes_(limits.page_bytes), rope_long_after_(limits.rope_long_after) {}

  void submit(std::uint64_t id, request r) {
    request_spec s;
    s.request_id = id;
    s.prompt = r.prompt;
    s.max_new_tokens = r.max_new;
    s.predicted_tokens = r.max_new;
    s.adapter_id = r.adapter;
    s.adapter_rank = r.adapter == 0 ? 0 : 8;
    s.session = r.session;
    s.prompt_logprobs = r.prompt_logprobs;
    s.adapter_pages = r.adapter_pages;
    s.json_object = r.json;
    s.arrival_s = now;
    s.seed = id;
    ASSERT_EQ(core.submit(std::move(s)), scheduler_core::submit_result::accepted);
    requests_[id] = std::move(r);
  }

  /// Admits and steps until every request has finished (or `max_rounds`).
  void run(std::size_t max_rounds = 100000) {
    for (std::size_t round = 0; round < max_rounds && finished.size() < requests_.size(); ++round) {
      now += 1;
      apply(core.admit(now));
      auto batch = core.next_step(now);
      if (batch.empty())
        continue;
      std::vector<std::int32_t> tokens;
      for (const auto& e : batch) {
        check_and_write(e);
        const auto t = choose(e);
        // A recompute gives the same token again.
        const auto [at, fresh] = chosen_.try_emplace({e.request_id, e.output_index}, t);
        ASSERT_TRUE(fresh || at->second == t) << "request " << e.request_id << " output " << e.output_index;
        tokens.push_back(t);
      }
      steps.push_back(batch);
      now += 1;
      apply(core.on_step_done(batch, tokens, now));
    }
  }

  /// The token request `id` produces at output `index` (the same on a recompute).
  static std::int32_t token_of(std::uint64_t id, std::uint32_t index) {
    return static_cast<std::int32_t>(1000 + (id * 31 + index) % 97);
  }

  /// What a step samples for `e`: token_of, or for a JSON request one of the
  /// vocabulary's tokens its logit_adjust leaves (by the same hash, so a
  /// recompute, in the same JSON state, draws it again).
  std::int32_t choose(const gpu::step_entry& e) const {
    if (!requests_.at(e.request_id).json)
      return token_of(e.request_id, e.output_index);
    const auto ok = testing::samplable(e, vocab_->vocab_size());
    EXPECT_FALSE(ok.empty());
    return ok.empty() ? 0 : ok[(e.request_id * 31 + e.output_index * 7) % ok.size()];
  }

  /// Request `id`'s output as text.
  std::string text_of(std::uint64_t id) {
    std::string s;
    for (const auto t : outputs[id])
      s += vocab_->decode(t);
    return s;
  }

  /// The first step that prefilled `id` (its first entry with new_tokens > 1,
  /// or its only prefill).
  const gpu::step_entry* prefill_of(std::uint64_t id) const {
    for (const auto& b : steps)
      for (const auto& e : b)
        if (e.request_id == id && e.output_index == 0)
          return &e;
    return nullptr;
  }

  /// Everything is back: each request finished with all its tokens, the
  /// pool holds only the cache's pages (read by nobody), the host pool none.
  void expect_all_back() {
    EXPECT_EQ(finished.size(), requests_.size());
    for (const auto& [id, r] : requests_) {
      EXPECT_EQ(outputs[id].size(), r.max_new) << id;
      EXPECT_EQ(reasons[id], finish_reason::length) << id;
    }
    const page_owner cache{page_owner_kind::request, prefix_cache_owner};
    EXPECT_EQ(pool.used_pages(page_owner_kind::request), pool.pages_of(cache).size());
    EXPECT_EQ(pool.pages_of(cache).size(), core.prefix_cached_pages());
    EXPECT_EQ(core.prefix_idle_pages(), core.prefix_cached_pages());
    EXPECT_EQ(core.reserved_pages(), core.prefix_cached_pages());
    EXPECT_EQ(host.used_pages(page_owner_kind::request), 0u);
  }

  scheduler_core core;
  page_pool pool;
  page_pool host;
  double now = 0;
  std::vector<std::vector<gpu::step_entry>> steps;
  std::map<std::uint64_t, std::vector<std::int32_t>> outputs;
  std::map<std::uint64_t, finish_reason> reasons;
  std::set<std::uint64_t> finished;
  std::vector<std::uint64_t> finish_order;
  std::map<std::uint64_t, std::uint32_t> cached; ///< each request's finish: tokens read from the cache
  std::uint64_t swaps_out = 0;
  int refusals = 0;

private:
  std::vector<std::int32_t>& slots(std::uint32_t page) {
    auto& s = kv_[page];
    s.resize(per_, -1);
    return s;
  }

  void wipe(std::span<const std::uint32_t> pages) {
    for (auto p : pages)
      kv_.erase(p);
  }

  void check_and_write(const gpu::step_entry& e) {
    const auto& r = requests_.at(e.request_id);
    std::vector<std::int32_t> seq = r.prompt;
    const auto& out = outputs[e.request_id];
    seq.insert(seq.end(), out.begin(), out.end());
    const auto end = e.context_tokens + e.new_tokens;
    ASSERT_LE(end, seq.size()) << "request " << e.request_id;
    ASSERT_GE(e.pages.size() * per_, end) << "request " << e.request_id << ": too few pages";
    ASSERT_EQ(e.tokens, std::vector<std::int32_t>(seq.begin() + e.context_tokens, seq.begin() + end));
    // LongRoPE: a pass leaving the sequence past rope_long_after turns K by
    // other frequencies; each slot keeps which (a high bit) beside its token.
    const std::int32_t turned = rope_long_after_ != 0 && end > rope_long_after_ ? 1 << 30 : 0;
    for (std::uint32_t p = 0; p < e.context_tokens; ++p)
      ASSERT_EQ(slots(e.pages[p / per_])[p % per_], seq[p] | turned)
        << "request " << e.request_id << " reads position " << p << " from page " << e.pages[p / per_]
        << (turned != 0 ? " (a long pass)" : "");
    const auto cached = pool.pages_of({page_owner_kind::request, prefix_cache_owner});
    for (auto p = e.context_tokens; p < end; ++p) {
      const auto page = e.pages[p / per_];
      ASSERT_EQ(std::count(cached.begin(), cached.end(), page), 0)
        << "request " << e.request_id << " writes into cached page " << page;
      slots(page)[p % per_] = seq[p] | turned;
    }
  }

  void apply(scheduler_effects fx) {
    const page_owner cache{page_owner_kind::request, prefix_cache_owner};
    for (const auto& s : fx.shares)
      ASSERT_TRUE(pool.transfer_pages({page_owner_kind::request, s.request_id}, cache, s.pages));
    ASSERT_TRUE(pool.release_pages(cache, fx.release_cached));
    wipe(fx.release_cached);
    for (const auto& a : fx.adopts)
      pool.transfer({page_owner_kind::request, a.from}, {page_owner_kind::request, a.to});
    for (auto id : fx.release_pages) {
      const auto held = pool.pages_of({page_owner_kind::request, id});
      wipe(std::vector<std::uint32_t>(held.begin(), held.end()));
      pool.release({page_owner_kind::request, id});
    }
    for (auto id : fx.release_host_pages)
      host.release({page_owner_kind::request, id});
    for (const auto& t : fx.tokens) {
      auto& out = outputs[t.request_id];
      ASSERT_EQ(t.index, out.size());
      ASSERT_EQ(t.token, chosen_.at({t.request_id, t.index}));
      out.push_back(t.token);
    }
    for (const auto& f : fx.finished) {
      ASSERT_TRUE(finished.insert(f.request_id).second) << "second finish of " << f.request_id;
      finish_order.push_back(f.request_id);
      cached[f.request_id] = f.cached_tokens;
      reasons[f.request_id] = f.reason;
    }
    for (const auto& r : fx.reserves) {
      const page_owner o{page_owner_kind::request, r.request_id};
      const bool ok = pool.allocate(o, r.pages);
      const auto held = pool.pages_of(o);
      apply(core.on_pages(r.request_id, ok, now, ok ? std::vector<std::uint32_t>(held.begin(), held.end())
                                                     : std::vector<std::uint32_t>{}));
    }
    for (const auto& g : fx.grows) {
      const page_owner o{page_owner_kind::request, g.request_id};
      const bool ok = pool.allocate(o, g.pages);
      const auto held = pool.pages_of(o);
      apply(core.on_grown(g.request_id, g.ticket, ok, {held.begin(), held.end()}));
    }
    for (const auto& a : fx.acquires) {
      // The adapter cache finds no room for the first `refusals` loads.
      const bool refuse = refusals > 0;
      refusals -= refuse ? 1 : 0;
      apply(core.on_adapter(a.request_id,
                            refuse ? scheduler_core::adapter_grant::retry : scheduler_core::adapter_grant::granted, now));
    }
    for (const auto& s : fx.swap_outs) {
      const page_owner o{page_owner_kind::request, s.request_id};
      ASSERT_EQ(s.bytes, s.device_pages.size() * page_bytes_);
      const bool ok = host.allocate(o, s.device_pages.size());
      std::vector<std::uint32_t> to;
      if (ok) {
        const auto held = host.pages_of(o);
        to.assign(held.begin(), held.end());
        for (std::size_t i = 0; i < to.size(); ++i)
          host_kv_[to[i]] = slots(s.device_pages[i]);
        ++swaps_out;
      }
      apply(core.on_swapped_out(s.request_id, ok, now, to));
    }
    for (const auto& s : fx.swap_ins) {
      for (std::size_t i = 0; i < s.host_pages.size(); ++i)
        slots(s.device_pages[i]) = host_kv_.at(s.host_pages[i]);
      apply(core.on_swapped_in(s.request_id, true, now));
    }
  }

  const gpu::tokenizer* vocab_;
  std::uint32_t per_;
  std::uint64_t page_bytes_;
  std::uint32_t rope_long_after_;
  std::map<std::uint64_t, request> requests_;
  std::map<std::pair<std::uint64_t, std::uint32_t>, std::int32_t> chosen_; ///< (request, output index)
  std::unordered_map<std::uint32_t, std::vector<std::int32_t>> kv_;
  std::unordered_map<std::uint32_t, std::vector<std::int32_t>> host_kv_;
};

scheduler_limits prefix_limits(std::uint64_t pages, std::uint32_t per = 4) {
  scheduler_limits l;
  l.total_pages = pages;
  l.page_tokens = per;
  l.prefix_caching = true;
  return l;
}

std::vector<std::int32_t> tokens(std::int32_t from, std::size_t n) {
  std::vector<std::int32_t> t(n);
  for (std::size_t i = 0; i < n; ++i)
    t[i] = from + static_cast<std::int32_t>(i);
  return t;
}

std::vector<std::int32_t> concat(std::vector<std::int32_t> a, const std::vector<std::int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(scheduler_prefix, a_later_prompt_reads_the_whole_pages_an_earlier_one_computed) {
  prefix_shell sh{prefix_limits(64)};
  const auto system = tokens(1, 8); // two whole pages
  sh.submit(1, {concat(system, tokens(100, 3))});
  sh.run();
  EXPECT_EQ(sh.core.prefix_cached_pages(), 2u); // 11 tokens: two whole pages
  EXPECT_EQ(sh.core.prefix_hits(), 0u);
  sh.submit(2, {concat(system, tokens(200, 5))});
  sh.run();
  const auto* first = sh.prefill_of(1);
  const auto* second = sh.prefill_of(2);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->context_tokens, 8u);
  EXPECT_EQ(second->new_tokens, 5u);
  EXPECT_EQ(std::vector<std::uint32_t>(second->pages.begin(), second->pages.begin() + 2),
            std::vector<std::uint32_t>(first->pages.begin(), first->pages.begin() + 2));
  EXPECT_EQ(sh.core.prefix_hits(), 1u);
  EXPECT_EQ(sh.core.prefix_reused_tokens(), 8u);
  EXPECT_EQ(sh.core.reused_tokens(), 8u);
  // Each answer says how much of its prompt came from the cache.
  EXPECT_EQ(sh.cached.at(1), 0u);
  EXPECT_EQ(sh.cached.at(2), 8u);
  // 13 tokens: its third page (tokens 8-11) joins the two it read.
  EXPECT_EQ(sh.core.prefix_cached_pages(), 3u);
  sh.expect_all_back();
}

TEST(scheduler_prefix, a_prompt_of_whole_cached_pages_still_prefills_its_last_token) {
  prefix_shell sh{prefix_limits(64)};
  const auto prompt = tokens(1, 8);
  sh.submit(1, {prompt});
  sh.run();
  sh.submit(2, {prompt});
  sh.run();
  const auto* e = sh.prefill_of(2);
  ASSERT_NE(e, nullptr);
  // Only the first page: the second holds the last token, whose logits
  // sample the first output token.
  EXPECT_EQ(e->context_tokens, 4u);
  EXPECT_EQ(e->new_tokens, 4u);
  sh.expect_all_back();
}

TEST(scheduler_prefix, copies_of_one_prompt_arriving_together_compute_it_once) {
  // As the n choices of one prompt: the first computes the prompt; the
  // others wait for that prefill and read its pages.
  prefix_shell sh{prefix_limits(64)};
  const auto prompt = tokens(1, 13); // three whole pages, and one token
  for (std::uint64_t id = 1; id <= 4; ++id)
    sh.submit(id, {prompt, 3});
  sh.run();
  EXPECT_EQ(sh.prefill_of(1)->context_tokens, 0u);
  for (std::uint64_t id = 2; id <= 4; ++id) {
    EXPECT_EQ(sh.prefill_of(id)->context_tokens, 12u) << id;
    EXPECT_EQ(sh.prefill_of(id)->new_tokens, 1u) << id;
  }
  EXPECT_EQ(sh.core.prefix_holds(), 3u);
  EXPECT_EQ(sh.core.prefix_hits(), 3u);
  EXPECT_EQ(sh.core.prefilled_tokens(), 13u + 3u);
  // A copy that cannot read (another adapter) is not held.
  sh.submit(5, {prompt, 3, 2});
  sh.submit(6, {prompt, 3, 2});
  sh.submit(7, {prompt, 3, 0, 0, /*prompt_logprobs=*/0});
  sh.run();
  EXPECT_EQ(sh.core.prefix_holds(), 4u); // 6 waited for 5; 7 computes its whole prompt
  EXPECT_EQ(sh.prefill_of(6)->context_tokens, 12u);
  EXPECT_EQ(sh.prefill_of(7)->context_tokens, 0u);
  sh.expect_all_back();
}

TEST(scheduler_prefix, another_adapter_a_session_or_prompt_logprobs_read_nothing) {
  prefix_shell sh{prefix_limits(64)};
  const auto prompt = concat(tokens(1, 8), tokens(50, 2));
  sh.submit(1, {prompt});
  sh.run();
  sh.submit(2, {prompt, 4, /*adapter=*/3});
  sh.submit(3, {prompt, 4, 0, /*session=*/9});
  sh.submit(4, {prompt, 4, 0, 0, /*prompt_logprobs=*/0});
  sh.run();
  for (std::uint64_t id : {2, 3, 4}) {
    const auto* e = sh.prefill_of(id);
    ASSERT_NE(e, nullptr) << id;
    EXPECT_EQ(e->context_tokens, 0u) << id;
  }
  EXPECT_EQ(sh.core.prefix_hits(), 0u);
  // Request 2 cached its pages under its adapter; 3 (a session) cached none;
  // 4's are the same as 1's (cached already).
  EXPECT_EQ(sh.core.prefix_cached_pages(), 4u);
  sh.submit(5, {prompt, 4, 3});
  sh.run();
  EXPECT_EQ(sh.prefill_of(5)->context_tokens, 8u);
  sh.expect_all_back();
}

TEST(scheduler_prefix, longrope_passes_read_only_pages_turned_alike_and_a_request_growing_past_recomputes) {
  // LongRoPE over 12 tokens (the shell checks that no pass reads K turned
  // by the other factors).
  auto limits = prefix_limits(64);
  limits.rope_long_after = 12;
  prefix_shell sh{limits};
  const auto system = tokens(1, 8); // two whole pages
  // 11 tokens: within; its second output makes 13, so it is recomputed by
  // the long factors then, caching its prompt's pages so turned too.
  sh.submit(1, {concat(system, tokens(100, 3)), 4});
  sh.run();
  EXPECT_EQ(sh.core.rope_recomputed(), 1u);
  EXPECT_EQ(sh.core.squashed(), 1u);
  EXPECT_EQ(sh.core.prefix_cached_pages(), 4u); // two pages each way
  ASSERT_EQ(sh.steps.size(), 4u); // four outputs, the third from the recomputing prefill
  const auto& again = sh.steps[2].front();
  EXPECT_EQ(again.context_tokens, 0u) << "the long prefill reads no short pages";
  EXPECT_EQ(again.new_tokens, 13u);
  EXPECT_EQ(again.output_index, 2u);
  // A prompt past 12 tokens reads the system prompt's pages turned by the
  // long factors, one within them those turned by the short.
  sh.submit(2, {concat(system, tokens(200, 7)), 2});
  sh.submit(3, {concat(system, tokens(300, 2)), 2});
  sh.run();
  EXPECT_EQ(sh.prefill_of(2)->context_tokens, 8u);
  EXPECT_EQ(sh.prefill_of(3)->context_tokens, 8u);
  EXPECT_NE(sh.prefill_of(2)->pages.front(), sh.prefill_of(3)->pages.front());
  EXPECT_EQ(sh.core.prefix_cached_pages(), 5u); // and 2's third page
  EXPECT_EQ(sh.core.rope_recomputed(), 1u);
  sh.expect_all_back();
}

TEST(scheduler_prefix, idle_cached_pages_give_way_to_admissions) {
  // 12 pages: three requests of 9 + 2 tokens leave 6 cached pages (two
  // each); a request needing 11 pages reads two of them and gets the 9 it
  // needs of its own by evicting three of the four others.
  prefix_shell sh{prefix_limits(12)};
  for (std::uint64_t id = 1; id <= 3; ++id)
    sh.submit(id, {tokens(static_cast<std::int32_t>(id) * 100, 9), 2});
  sh.run();
  EXPECT_EQ(sh.core.prefix_cached_pages(), 6u);
  EXPECT_EQ(sh.core.prefix_idle_pages(), 6u);
  // Request 4 begins with request 1's prompt: it reads those two pages and
  // needs 9 more of its own (42 tokens + 2).
  sh.submit(4, {concat(tokens(100, 8), tokens(900, 34)), 2});
  sh.run();
  EXPECT_EQ(sh.prefill_of(4)->context_tokens, 8u);
  EXPECT_EQ(sh.core.prefix_evictions(), 3u);
  sh.expect_all_back();
  // Request 2's pages were the least recently used: a prompt of its
  // computes everything again.
  sh.submit(5, {tokens(200, 9), 2});
  sh.run();
  EXPECT_EQ(sh.prefill_of(5)->context_tokens, 0u);
  sh.expect_all_back();
}

TEST(scheduler_prefix, an_adapter_load_without_room_makes_idle_cached_pages_give_way) {
  // 16 pages of 4 tokens. Request 1 (9 + 2 tokens) leaves two cached pages.
  prefix_shell sh{prefix_limits(16)};
  sh.submit(1, {tokens(1, 9), 2});
  sh.run();
  ASSERT_EQ(sh.core.prefix_idle_pages(), 2u);
  // Request 3 runs long (4 pages). Request 2 needs 3 pages and an adapter
  // of 8: one cached page goes for its reservation; the adapter cache then
  // finds no room for the adapter (the cached page left holds it): that
  // page goes too and the next try loads, while request 3 still runs
  // (rather than wait for memory until it ends).
  sh.refusals = 1;
  sh.submit(3, {tokens(500, 3), 13});
  sh.submit(2, {tokens(100, 9), 2, /*adapter=*/5, 0, -1, /*adapter_pages=*/8});
  sh.run(500);
  EXPECT_EQ(sh.refusals, 0);
  EXPECT_EQ(sh.core.prefix_evictions(), 2u);
  EXPECT_EQ(sh.finish_order, (std::vector<std::uint64_t>{1, 2, 3}));
  sh.expect_all_back();
}

/// A 24-page pool with pages on demand, so requests are preempted; with
/// `swap`, a 24-page host pool for their caches.
scheduler_limits preempting_limits(bool swap) {
  auto limits = prefix_limits(24);
  limits.on_demand = true;
  limits.growth_watermark = 1;
  if (swap) {
    limits.host_pages = 24;
    limits.page_bytes = 16;
  }
  return limits;
}

/// Many requests over three system prompts in a pool too small for them,
/// pages on demand: preemptions (recompute, or swap with a host pool) and
/// evictions interleave with reads of shared pages. The KV oracle checks
/// every step.
void run_random(bool swap, std::uint32_t seed) {
  prefix_shell sh{preempting_limits(swap), swap ? std::make_unique<swapping_fcfs>() : nullptr};
  std::mt19937 rng{seed};
  std::vector<std::vector<std::int32_t>> systems{tokens(1, 13), tokens(300, 8), tokens(600, 21)};
  std::uint64_t id = 0;
  for (int wave = 0; wave < 6; ++wave) {
    for (int k = 0; k < 12; ++k) {
      const auto& sys = systems[rng() % systems.size()];
      const auto cut = rng() % (sys.size() + 1);
      auto prompt = std::vector<std::int32_t>(sys.begin(), sys.begin() + static_cast<std::ptrdiff_t>(cut));
      prompt = concat(prompt, tokens(static_cast<std::int32_t>(10000 + 100 * ++id), 1 + rng() % 12));
      sh.submit(id, {prompt, static_cast<std::uint32_t>(1 + rng() % 40), static_cast<std::uint32_t>(rng() % 4 == 0)});
    }
    sh.run();
    if (::testing::Test::HasFatalFailure())
      return;
  }
  EXPECT_GT(sh.core.prefix_hits(), 4u);
  EXPECT_GT(sh.core.squashed() + sh.swaps_out, 0u) << "no preemption: the test covers less than it should";
  if (swap) {
    EXPECT_GT(sh.swaps_out, 0u);
  }
  sh.expect_all_back();
}

TEST(scheduler_prefix, random_requests_with_recompute_read_only_their_own_history) {
  for (std::uint32_t seed = 1; seed <= 8; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    run_random(false, seed);
  }
}

TEST(scheduler_prefix, random_requests_with_swapping_read_only_their_own_history) {
  for (std::uint32_t seed = 1; seed <= 8; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    run_random(true, seed);
  }
}

/// A vocabulary of JSON pieces (every byte they hold a token of its own
/// too, so no beginning of JSON is left without a way on); 0 stands for no
/// text (the end-of-sequence token).
class json_pieces final : public gpu::tokenizer {
public:
  std::vector<std::int32_t> encode(const std::string&) const override { return {}; }
  std::string decode(std::int32_t t) const override {
    static const std::vector<std::string> pieces{
      "", "{", "}", "[", "]", "\"", "\"k\":", ":", ",", " ", "1", "-", "0.", "5", "e", "+", "true", "nul", "l", "\\",
      "n", "\"}", "x", "}}", "{\"", "\":\"", "]}", "t", "r", "u", "a", "s", "f", "0"};
    return t >= 0 && static_cast<std::size_t>(t) < pieces.size() ? pieces[static_cast<std::size_t>(t)] : "";
  }
  std::int32_t vocab_size() const override { return 34; }
  std::int32_t eos_token() const override { return 0; }
};

TEST(scheduler_prefix, json_outputs_stay_json_through_recomputes_and_swaps) {
  // The JSON state is the output's: a squashed request recomputes its
  // output so far and goes on from the same state; a swapped one too.
  json_pieces vocab;
  for (const bool swap : {false, true}) {
    SCOPED_TRACE(swap ? "swap" : "recompute");
    prefix_shell sh{preempting_limits(swap), swap ? std::make_unique<swapping_fcfs>() : nullptr, &vocab};
    std::mt19937 rng{swap ? 5u : 6u};
    std::uint64_t id = 0;
    for (int wave = 0; wave < 4; ++wave) {
      for (int k = 0; k < 12; ++k) {
        ++id;
        sh.submit(id, {tokens(static_cast<std::int32_t>(10000 + 100 * id), 1 + rng() % 12),
                       static_cast<std::uint32_t>(4 + rng() % 40), 0, 0, -1, 0, rng() % 4 != 0});
      }
      sh.run();
      ASSERT_FALSE(::testing::Test::HasFatalFailure());
    }
    EXPECT_GT(sh.core.squashed() + sh.swaps_out, 0u) << "no preemption: the test covers less than it should";
    int objects = 0;
    for (std::uint64_t r = 1; r <= id; ++r) {
      ASSERT_TRUE(sh.finished.contains(r)) << r;
      if (sh.reasons[r] != finish_reason::stop)
        continue;
      const auto text = sh.text_of(r);
      EXPECT_TRUE(nlohmann::json::parse(text).is_object()) << text;
      ++objects;
    }
    EXPECT_GT(objects, 5);
  }
}

TEST(scheduler_prefix, repeated_admission_caches_a_prompt_from_its_second_request_on) {
  auto limits = prefix_limits(64);
  limits.prefix_admit_offers = 2; // the server's default, "repeated"
  prefix_shell sh{limits};
  const auto system = tokens(1, 8); // two whole pages
  sh.submit(1, {concat(system, tokens(100, 3))});
  sh.run();
  EXPECT_EQ(sh.core.prefix_cached_pages(), 0u) << "a prompt seen once is not cached";
  sh.submit(2, {concat(system, tokens(200, 3))});
  sh.run();
  EXPECT_EQ(sh.prefill_of(2)->context_tokens, 0u);
  EXPECT_EQ(sh.core.prefix_cached_pages(), 2u) << "the system prompt's two pages, held twice now";
  sh.submit(3, {concat(system, tokens(300, 3))});
  sh.run();
  EXPECT_EQ(sh.prefill_of(3)->context_tokens, 8u);
  EXPECT_EQ(sh.core.prefix_hits(), 1u);
  // Copies arriving together: the first computes; the second makes its
  // pages a second prompt's, so it and the rest wait for them and read them.
  const auto prompt = tokens(500, 13);
  for (std::uint64_t id = 10; id <= 13; ++id)
    sh.submit(id, {prompt, 3});
  sh.run();
  EXPECT_EQ(sh.prefill_of(10)->context_tokens, 0u);
  for (std::uint64_t id = 11; id <= 13; ++id)
    EXPECT_EQ(sh.prefill_of(id)->context_tokens, 12u) << id;
  EXPECT_EQ(sh.core.prefix_holds(), 3u);
  EXPECT_EQ(sh.core.prefix_hits(), 4u);
  // A prompt nobody else holds is computed and never waited for.
  sh.submit(20, {tokens(900, 13), 3});
  sh.run();
  EXPECT_EQ(sh.core.prefix_holds(), 3u);
  EXPECT_EQ(sh.core.prefix_cached_pages(), 5u) << "the system prompt's two pages and the copies' three";
  sh.expect_all_back();
}

TEST(scheduler_prefix, off_nothing_is_cached) {
  auto limits = prefix_limits(64);
  limits.prefix_caching = false;
  prefix_shell sh{limits};
  const auto prompt = tokens(1, 12);
  sh.submit(1, {prompt});
  sh.run();
  sh.submit(2, {prompt});
  sh.run();
  EXPECT_EQ(sh.prefill_of(2)->context_tokens, 0u);
  EXPECT_EQ(sh.core.prefix_cached_pages(), 0u);
  sh.expect_all_back();
  EXPECT_EQ(sh.pool.free_pages(), 64u);
}

} // namespace
} // namespace troupe
