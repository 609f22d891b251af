// Tests for runtime/scheduler_core, driven by a tiny engine loop with a
// virtual clock: the shell's side (page grants from a page_pool, adapter
// grants, steps run with fixed tokens or a sim_backend) is simulated by
// `engine`, which also keeps a ledger of every reserve/acquire/release and
// fails on any unmatched one. Most tests are tables of actions with the
// expected effects and per-step core state; a seeded property test runs many
// random requests with random cancels, denials and adapter failures.
#include "runtime/scheduler_core.hpp"

#include "gpu/sim_backend.hpp"
#include "policies/fcfs_scheduling_policy.hpp"
#include "runtime/memory_pool.hpp"
#include "tests/support/step_entry.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

namespace troupe {
namespace {

static_assert(std::is_nothrow_move_constructible_v<scheduler_effects>);
static_assert(std::is_nothrow_move_constructible_v<request_spec>);
static_assert(std::is_trivially_copyable_v<scheduler_limits>);
static_assert(std::is_trivially_copyable_v<request_times>);
static_assert(std::is_trivially_copyable_v<scheduler_effects::reserve>);
static_assert(std::is_trivially_copyable_v<scheduler_effects::acquire>);
static_assert(std::is_trivially_copyable_v<scheduler_effects::release_adapter>);
static_assert(std::is_trivially_copyable_v<scheduler_effects::token>);
static_assert(std::is_trivially_copyable_v<scheduler_effects::finish>);
static_assert(std::is_nothrow_move_constructible_v<gpu::step_entry>);
static_assert(!std::is_copy_constructible_v<scheduler_core>);

// -- a tokenizer whose decode the test controls ----------------------------------

/// Decodes the tokens in `words`; everything else decodes to "". EOS is 2.
class fake_tokenizer final : public gpu::tokenizer {
public:
  std::vector<std::int32_t> encode(const std::string& text) const override {
    std::vector<std::int32_t> out;
    for (unsigned char c : text)
      out.push_back(3 + c);
    return out;
  }
  std::string decode(std::int32_t token) const override {
    auto i = words.find(token);
    return i == words.end() ? std::string{} : i->second;
  }
  std::string special_text(std::int32_t token) const override {
    auto i = specials.find(token);
    return i == specials.end() ? std::string{} : i->second;
  }
  std::int32_t vocab_size() const override { return 1000; }
  std::int32_t eos_token() const override { return eos; }
  std::vector<std::int32_t> end_tokens() const override { return ends.empty() ? std::vector{eos} : ends; }

  static constexpr std::int32_t eos = 2;
  std::map<std::int32_t, std::string> words;
  /// Special tokens' own texts (decode gives "" for them).
  std::map<std::int32_t, std::string> specials;
  /// Ids that end a sequence; empty: eos alone.
  std::vector<std::int32_t> ends;
};

// -- describing effects and state compactly -----------------------------------------

std::string letter(request_state s) {
  switch (s) {
    case request_state::waiting:
      return "w";
    case request_state::admitting:
      return "a";
    case request_state::ready:
      return "r";
    case request_state::running:
      return "u";
    case request_state::swapping_out:
      return "o";
    case request_state::swapping_in:
      return "i";
    case request_state::finished:
      return "f";
  }
  return "?";
}

/// "R1:2" reserve 2 pages for 1, "A1@3" acquire adapter 3 for 1, "-P1"
/// release 1's pages, "-A1@3" release its adapter, "trim2", "T1#0" token 0 of
/// 1, "F1:length/3" finished with 3 completion tokens. Space separated.
std::string describe(const scheduler_effects& fx) {
  std::vector<std::string> parts;
  for (const auto& r : fx.reserves)
    parts.push_back("R" + std::to_string(r.request_id) + ":" + std::to_string(r.pages));
  for (const auto& a : fx.acquires)
    parts.push_back("A" + std::to_string(a.request_id) + "@" + std::to_string(a.adapter_id));
  for (auto id : fx.release_pages)
    parts.push_back("-P" + std::to_string(id));
  for (const auto& a : fx.release_adapters)
    parts.push_back("-A" + std::to_string(a.request_id) + "@" + std::to_string(a.adapter_id));
  if (fx.trim_pages > 0)
    parts.push_back("trim" + std::to_string(fx.trim_pages));
  for (const auto& t : fx.tokens)
    parts.push_back("T" + std::to_string(t.request_id) + "#" + std::to_string(t.index));
  for (const auto& f : fx.finished)
    parts.push_back("F" + std::to_string(f.request_id) + ":" + std::string{to_string(f.reason)}
                    + "/" + std::to_string(f.completion_tokens));
  std::string out;
  for (const auto& p : parts)
    out += (out.empty() ? "" : " ") + p;
  return out;
}

/// "step[1:5/0#0 2:1/7#3]": id:new_tokens/context_tokens#output_index.
std::string describe(const std::vector<gpu::step_entry>& batch) {
  std::string out = "step[";
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto& e = batch[i];
    out += (i ? " " : "") + std::to_string(e.request_id) + ":" + std::to_string(e.new_tokens)
           + "/" + std::to_string(e.context_tokens) + "#" + std::to_string(e.output_index);
  }
  return out + "]";
}

std::string to_str(scheduler_core::submit_result r) {
  switch (r) {
    case scheduler_core::submit_result::accepted:
      return "accepted";
    case scheduler_core::submit_result::queue_full:
      return "queue_full";
    case scheduler_core::submit_result::duplicate:
      return "duplicate";
    case scheduler_core::submit_result::too_large:
      return "too_large";
  }
  return "?";
}

// -- the engine loop ------------------------------------------------------------------

struct request_args {
  std::uint32_t prompt = 4;
  std::uint32_t max_new = 2;
  std::uint32_t adapter = 0;
  std::vector<std::string> stop = {};
  std::uint64_t adapter_pages = 0;
  std::vector<std::int32_t> stop_token_ids = {};
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  std::uint32_t min_tokens = 0;
  bool json_object = false;
  std::string json_schema = {};
  std::string json_trigger = {};
  bool json_trigger_first = false;
  std::string json_trigger_head = {};
  std::string json_answer = {};
  std::string reasoning_close = {};
  std::vector<std::vector<std::int32_t>> bad_words = {};
  std::vector<std::int32_t> allowed_token_ids = {};
  std::string reasoning_open = {};
  std::vector<std::string> choice = {};
  std::string regex = {};
  std::string grammar = {};
};

/// The shell around one scheduler_core: answers reservations from a real
/// page_pool, grants or denies adapters, runs steps, and checks every effect
/// against a ledger as it goes.
class engine {
public:
  using token_fn = std::function<std::int32_t(const gpu::step_entry&)>;

  explicit engine(scheduler_limits limits, const gpu::tokenizer* vocab = nullptr,
                  std::unique_ptr<policies::scheduling_policy> policy = nullptr)
    : core(limits, policy ? std::move(policy) : std::make_unique<policies::fcfs_scheduling_policy>(),
           vocab),
      pool(limits.total_pages), limits_(limits) {}

  // -- actions (each advances the virtual clock by one second) ------------------

  std::string submit(std::uint64_t id, request_args a = {}) {
    now += 1;
    request_spec s;
    s.request_id = id;
    for (std::uint32_t i = 0; i < a.prompt; ++i)
      s.prompt.push_back(static_cast<std::int32_t>(10 + i));
    s.max_new_tokens = a.max_new;
    s.adapter_id = a.adapter;
    s.adapter_rank = a.adapter == 0 ? 0 : 8;
    s.adapter_pages = a.adapter_pages;
    s.seed = id * 7919;
    s.stop = a.stop;
    s.stop_token_ids = a.stop_token_ids;
    s.ignore_eos = a.ignore_eos;
    s.skip_special_tokens = a.skip_special_tokens;
    s.min_tokens = a.min_tokens;
    s.json_object = a.json_object;
    s.json_schema = a.json_schema;
    s.json_trigger = a.json_trigger;
    s.json_trigger_first = a.json_trigger_first;
    s.json_trigger_head = a.json_trigger_head;
    s.json_answer = a.json_answer;
    s.bad_words = a.bad_words;
    s.allowed_token_ids = a.allowed_token_ids;
    s.reasoning_close = a.reasoning_close;
    s.reasoning_open = a.reasoning_open;
    s.choice = a.choice;
    s.regex = a.regex;
    s.grammar = a.grammar;
    s.predicted_tokens = a.max_new;
    s.arrival_s = now;
    const auto spec = s;
    const auto r = core.submit(std::move(s));
    if (r == scheduler_core::submit_result::accepted) {
      if (!std::count(order_.begin(), order_.end(), id))
        order_.push_back(id);
      specs_[id] = spec;
      finished_.erase(id);
      tokens_.erase(id);
      cancelled_.erase(id);
    }
    check_invariants();
    return to_str(r);
  }

  std::string admit() {
    now += 1;
    return apply(core.admit(now));
  }

  /// Answers 1's reservation: granted only if `grant` and the pool has room.
  std::string pages(std::uint64_t id, bool grant = true) {
    now += 1;
    auto i = reserve_pending_.find(id);
    EXPECT_NE(i, reserve_pending_.end()) << "no reservation pending for " << id;
    bool granted = false;
    if (i != reserve_pending_.end()) {
      if (grant) {
        // The core never reserves more than the pool holds.
        granted = pool.allocate({page_owner_kind::request, id}, i->second);
        EXPECT_TRUE(granted) << "the pool cannot hold " << id << "'s " << i->second << " pages";
      }
      if (granted) {
        pages_held_[id] = i->second;
        ++page_grants;
      }
      reserve_pending_.erase(i);
    }
    return apply(core.on_pages(id, granted, now));
  }

  std::string adapter(std::uint64_t id, bool grant = true) {
    now += 1;
    auto i = acquire_pending_.find(id);
    EXPECT_NE(i, acquire_pending_.end()) << "no acquisition pending for " << id;
    if (i != acquire_pending_.end()) {
      if (grant) {
        adapter_held_[id] = i->second;
        ++adapter_pins_[i->second];
        ++adapter_grants;
      }
      acquire_pending_.erase(i);
    }
    return apply(core.on_adapter(id, grant, now));
  }

  /// next_step(); at most one step may be in flight.
  std::string step() {
    now += 1;
    auto batch = core.next_step(now);
    if (in_flight_) {
      EXPECT_TRUE(batch.empty()) << "a second step while one is in flight";
    } else if (!batch.empty()) {
      in_flight_ = std::move(batch);
      EXPECT_TRUE(core.step_in_flight());
      return describe(*in_flight_);
    }
    return describe(batch);
  }

  /// The in-flight step returns, with tokens from `tokens` (or the default).
  std::string done(std::optional<std::vector<std::int32_t>> tokens = std::nullopt) {
    now += 1;
    EXPECT_TRUE(in_flight_.has_value()) << "no step in flight";
    if (!in_flight_)
      return "no step";
    auto batch = std::move(*in_flight_);
    in_flight_.reset();
    std::vector<std::int32_t> t;
    if (tokens) {
      t = *tokens;
    } else {
      for (const auto& e : batch)
        t.push_back(token_of(e));
    }
    return apply(core.on_step_done(batch, t, now));
  }

  std::string failed() {
    now += 1;
    EXPECT_TRUE(in_flight_.has_value()) << "no step in flight";
    if (!in_flight_)
      return "no step";
    auto batch = std::move(*in_flight_);
    in_flight_.reset();
    return apply(core.on_step_failed(batch, now));
  }

  std::string cancel(std::uint64_t id) {
    now += 1;
    auto [found, fx] = core.cancel(id, now);
    if (found)
      cancelled_.insert(id);
    const auto d = apply(std::move(fx));
    return std::string{found ? "true" : "false"} + (d.empty() ? "" : " " + d);
  }

  std::string memory_changed() {
    core.on_memory_changed();
    check_invariants();
    return "";
  }

  // -- observing --------------------------------------------------------------

  /// Letters for each submitted id (w a r u f), then counts:
  /// "wa w1 a1 r0 p3" (p: reserved KV pages), plus " ap2" while admitted
  /// requests pin adapters of 2 pages, " step" while a step is in flight and
  /// " blocked" while admission waits for memory.
  std::string state() const {
    std::string s;
    for (auto id : order_)
      s += letter(core.state_of(id));
    s += " w" + std::to_string(core.waiting()) + " a" + std::to_string(core.admitting()) + " r"
         + std::to_string(core.running()) + " p" + std::to_string(core.reserved_pages());
    if (core.adapter_pages_in_use() > 0)
      s += " ap" + std::to_string(core.adapter_pages_in_use());
    if (core.step_in_flight())
      s += " step";
    if (core.memory_blocked())
      s += " blocked";
    return s;
  }

  bool step_pending() const { return in_flight_.has_value(); }
  /// The in-flight step's first entry; null when none.
  const gpu::step_entry* in_flight() const {
    return in_flight_ && !in_flight_->empty() ? &in_flight_->front() : nullptr;
  }
  bool grants_pending() const { return !reserve_pending_.empty() || !acquire_pending_.empty(); }
  const std::map<std::uint64_t, std::uint64_t>& reserve_pending() const { return reserve_pending_; }
  const std::map<std::uint64_t, std::uint32_t>& acquire_pending() const { return acquire_pending_; }
  const std::vector<scheduler_effects::token>& tokens_of(std::uint64_t id) { return tokens_[id]; }
  std::optional<scheduler_effects::finish> finish_of(std::uint64_t id) const {
    auto i = finished_.find(id);
    return i == finished_.end() ? std::nullopt : std::optional{i->second};
  }
  /// Everything granted has come back: no pages or adapter pins held.
  bool all_returned() const {
    return pages_held_.empty() && adapter_held_.empty() && pool.free_pages() == pool.total_pages();
  }

  scheduler_core core;
  page_pool pool;
  double now = 0;
  token_fn token_of = [](const gpu::step_entry& e) {
    return static_cast<std::int32_t>(500 + e.output_index);
  };
  // Counters over a run.
  std::uint64_t reserves = 0, page_grants = 0, page_releases = 0, acquires = 0, adapter_grants = 0,
                adapter_releases = 0, trims = 0, trim_pages = 0, finishes = 0;
  std::map<finish_reason, std::uint64_t> reasons;

private:
  std::string apply(scheduler_effects fx) {
    const auto d = describe(fx);
    for (const auto& r : fx.reserves) {
      ++reserves;
      EXPECT_FALSE(reserve_pending_.contains(r.request_id)) << "double reserve " << r.request_id;
      EXPECT_FALSE(pages_held_.contains(r.request_id)) << "reserve while holding " << r.request_id;
      EXPECT_EQ(r.pages, policies::pages_for(static_cast<std::uint32_t>(specs_[r.request_id].prompt.size()),
                                             specs_[r.request_id].max_new_tokens, limits_.page_tokens));
      reserve_pending_[r.request_id] = r.pages;
    }
    for (const auto& a : fx.acquires) {
      ++acquires;
      EXPECT_FALSE(acquire_pending_.contains(a.request_id)) << "double acquire " << a.request_id;
      EXPECT_FALSE(adapter_held_.contains(a.request_id)) << "acquire while holding " << a.request_id;
      EXPECT_EQ(a.adapter_id, specs_[a.request_id].adapter_id);
      acquire_pending_[a.request_id] = a.adapter_id;
    }
    for (auto id : fx.release_pages) {
      ++page_releases;
      auto i = pages_held_.find(id);
      EXPECT_NE(i, pages_held_.end()) << "release_pages of " << id << " which holds none";
      if (i != pages_held_.end()) {
        EXPECT_EQ(pool.release({page_owner_kind::request, id}), i->second);
        pages_held_.erase(i);
      }
    }
    for (const auto& a : fx.release_adapters) {
      ++adapter_releases;
      auto i = adapter_held_.find(a.request_id);
      EXPECT_NE(i, adapter_held_.end()) << "release_adapter of " << a.request_id << " which holds none";
      if (i != adapter_held_.end()) {
        EXPECT_EQ(i->second, a.adapter_id);
        --adapter_pins_[i->second];
        adapter_held_.erase(i);
      }
    }
    if (fx.trim_pages > 0) {
      ++trims;
      trim_pages += fx.trim_pages;
    }
    for (const auto& t : fx.tokens) {
      EXPECT_FALSE(finished_.contains(t.request_id)) << "token after finish " << t.request_id;
      auto& v = tokens_[t.request_id];
      EXPECT_EQ(t.index, v.size()) << "token index of " << t.request_id;
      v.push_back(t);
    }
    for (const auto& f : fx.finished) {
      ++finishes;
      ++reasons[f.reason];
      const auto id = f.request_id;
      EXPECT_FALSE(finished_.contains(id)) << "second finish of " << id;
      // A request ends with nothing held and nothing outstanding.
      EXPECT_FALSE(reserve_pending_.contains(id)) << id;
      EXPECT_FALSE(acquire_pending_.contains(id)) << id;
      EXPECT_FALSE(pages_held_.contains(id)) << id;
      EXPECT_FALSE(adapter_held_.contains(id)) << id;
      EXPECT_EQ(f.completion_tokens, tokens_[id].size()) << id;
      EXPECT_LE(f.completion_tokens, specs_[id].max_new_tokens) << id;
      EXPECT_EQ(f.prompt_tokens, specs_[id].prompt.size()) << id;
      if (f.reason == finish_reason::length) {
        EXPECT_EQ(f.completion_tokens, specs_[id].max_new_tokens) << id;
      }
      if (cancelled_.contains(id)) {
        EXPECT_EQ(f.reason, finish_reason::cancelled) << id;
      }
      EXPECT_EQ(f.times.arrival_s, specs_[id].arrival_s) << id;
      EXPECT_EQ(f.times.finished_s, now) << id;
      if (f.times.first_token_s >= 0) {
        EXPECT_GE(f.times.first_scheduled_s, f.times.arrival_s) << id;
        EXPECT_GT(f.times.first_token_s, f.times.first_scheduled_s) << id;
      }
      finished_[id] = f;
    }
    check_invariants();
    return d;
  }

  void check_invariants() {
    std::uint64_t reserved = 0;
    for (const auto& [id, p] : reserve_pending_)
      reserved += p;
    for (const auto& [id, p] : pages_held_)
      reserved += p;
    EXPECT_EQ(core.reserved_pages(), reserved);
    // Adapter pages: those of each distinct adapter an admitted request pins.
    std::map<std::uint32_t, std::uint64_t> adapters;
    for (auto id : order_) {
      const auto st = core.state_of(id);
      const auto& spec = specs_[id];
      if (spec.adapter_id != 0
          && (st == request_state::admitting || st == request_state::ready
              || st == request_state::running))
        adapters[spec.adapter_id] = spec.adapter_pages;
    }
    std::uint64_t adapter_pages = 0;
    for (const auto& [a, p] : adapters)
      adapter_pages += p;
    EXPECT_EQ(core.adapter_pages_in_use(), adapter_pages);
    EXPECT_LE(core.reserved_pages() + core.adapter_pages_in_use(), limits_.total_pages);
    EXPECT_EQ(core.waiting() + core.admitting() + core.running(), core.in_system());
    std::size_t waiting = 0, admitting = 0, batch = 0, live = 0;
    for (auto id : order_) {
      switch (core.state_of(id)) {
        case request_state::waiting:
          ++waiting;
          break;
        case request_state::admitting:
          ++admitting;
          break;
        case request_state::ready:
        case request_state::running:
          ++batch;
          break;
        case request_state::swapping_out:
        case request_state::swapping_in:
          ADD_FAILURE() << "this shell never swaps";
          break;
        case request_state::finished:
          break;
      }
      if (core.state_of(id) != request_state::finished)
        ++live;
    }
    EXPECT_EQ(core.waiting(), waiting);
    EXPECT_EQ(core.admitting(), admitting);
    EXPECT_EQ(core.running(), batch);
    EXPECT_EQ(core.in_system(), live);
    EXPECT_LE(core.running() + core.admitting(), limits_.max_running);
    EXPECT_EQ(core.step_in_flight(), in_flight_.has_value());
  }

  scheduler_limits limits_;
  std::vector<std::uint64_t> order_;
  std::map<std::uint64_t, request_spec> specs_;
  std::map<std::uint64_t, std::uint64_t> reserve_pending_;
  std::map<std::uint64_t, std::uint64_t> pages_held_;
  std::map<std::uint64_t, std::uint32_t> acquire_pending_;
  std::map<std::uint64_t, std::uint32_t> adapter_held_;
  std::map<std::uint32_t, std::int64_t> adapter_pins_;
  std::map<std::uint64_t, std::vector<scheduler_effects::token>> tokens_;
  std::map<std::uint64_t, scheduler_effects::finish> finished_;
  std::set<std::uint64_t> cancelled_;
  std::optional<std::vector<gpu::step_entry>> in_flight_;
};

/// One row of a table: an action, the effects (or result) it gives, and the
/// engine state after it.
struct row {
  std::string what;
  std::function<std::string(engine&)> act;
  std::string result;
  std::string state;
};

void run_table(engine& e, const std::vector<row>& rows) {
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    SCOPED_TRACE("row " + std::to_string(i) + ": " + r.what);
    EXPECT_EQ(r.act(e), r.result);
    EXPECT_EQ(e.state(), r.state);
  }
}

// Shorthands for table actions.
auto submit(std::uint64_t id, request_args a = {}) {
  return [=](engine& e) { return e.submit(id, a); };
}
auto admit() { return [](engine& e) { return e.admit(); }; }
auto pages(std::uint64_t id, bool grant = true) {
  return [=](engine& e) { return e.pages(id, grant); };
}
auto adapter(std::uint64_t id, bool grant = true) {
  return [=](engine& e) { return e.adapter(id, grant); };
}
auto step() { return [](engine& e) { return e.step(); }; }
auto done() { return [](engine& e) { return e.done(); }; }
auto done_with(std::vector<std::int32_t> t) { return [=](engine& e) { return e.done(t); }; }
auto failed() { return [](engine& e) { return e.failed(); }; }
auto cancel(std::uint64_t id) { return [=](engine& e) { return e.cancel(id); }; }
auto memory_changed() { return [](engine& e) { return e.memory_changed(); }; }

scheduler_limits limits(std::uint64_t total_pages, std::uint32_t max_running = 8,
                        std::uint32_t token_budget = 1000, std::uint32_t max_waiting = 100) {
  scheduler_limits l;
  l.max_running = max_running;
  l.token_budget = token_budget;
  l.max_waiting = max_waiting;
  l.total_pages = total_pages;
  l.page_tokens = 4;
  return l;
}

// -- the life of one request ---------------------------------------------------------

TEST(scheduler_core, one_request_goes_through_every_state) {
  engine e{limits(100)};
  // prompt 5 + 3 new tokens = 8 tokens = 2 pages of 4.
  run_table(e, {
    {"submit", submit(1, {.prompt = 5, .max_new = 3, .adapter = 7}), "accepted", "w w1 a0 r0 p0"},
    {"admit", admit(), "R1:2 A1@7", "a w0 a1 r0 p2"},
    {"nothing ready to step", step(), "step[]", "a w0 a1 r0 p2"},
    {"pages granted", pages(1), "", "a w0 a1 r0 p2"},
    {"adapter granted", adapter(1), "", "r w0 a0 r1 p2"},
    {"prefill step", step(), "step[1:5/0#0]", "r w0 a0 r1 p2 step"},
    {"token 0", done(), "T1#0", "u w0 a0 r1 p2"},
    {"decode", step(), "step[1:1/5#1]", "u w0 a0 r1 p2 step"},
    {"token 1", done(), "T1#1", "u w0 a0 r1 p2"},
    {"decode", step(), "step[1:1/6#2]", "u w0 a0 r1 p2 step"},
    {"token 2: done, everything released", done(), "-P1 -A1@7 T1#2 F1:length/3", "f w0 a0 r0 p0"},
    {"nothing left", step(), "step[]", "f w0 a0 r0 p0"},
  });
  EXPECT_EQ(e.core.in_system(), 0u);
  EXPECT_FALSE(e.core.has_work());
  EXPECT_TRUE(e.all_returned());
  const auto f = e.finish_of(1);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->prompt_tokens, 5u);
  EXPECT_EQ(f->completion_tokens, 3u);
  // Virtual clock: submitted at 1, first step at 6, first token at 7, done at 11.
  EXPECT_EQ(f->times.arrival_s, 1.0);
  EXPECT_EQ(f->times.first_scheduled_s, 6.0);
  EXPECT_EQ(f->times.first_token_s, 7.0);
  EXPECT_EQ(f->times.finished_s, 11.0);
  std::vector<std::int32_t> toks;
  for (const auto& t : e.tokens_of(1))
    toks.push_back(t.token);
  EXPECT_EQ(toks, (std::vector<std::int32_t>{500, 501, 502}));
}

TEST(scheduler_core, base_model_request_needs_no_adapter) {
  engine e{limits(100)};
  run_table(e, {
    {"submit", submit(1, {.prompt = 4, .max_new = 1}), "accepted", "w w1 a0 r0 p0"},
    {"admit", admit(), "R1:2", "a w0 a1 r0 p2"},
    {"pages granted: ready", pages(1), "", "r w0 a0 r1 p2"},
    {"prefill", step(), "step[1:4/0#0]", "r w0 a0 r1 p2 step"},
    {"one token is all", done(), "-P1 T1#0 F1:length/1", "f w0 a0 r0 p0"},
  });
  EXPECT_TRUE(e.all_returned());
}

TEST(scheduler_core, sim_backend_requests_produce_exactly_max_new_tokens) {
  const gpu::sim_backend backend{*gpu::find_model_preset("llama-2-7b"),
                                 *gpu::find_gpu_spec("H100-80GB"), 11};
  engine e{limits(1000, 4, 64), &backend.vocab()};
  e.token_of = [&](const gpu::step_entry& x) { return backend.token_for(x); };
  const std::vector<std::uint32_t> max_new{1, 2, 5, 9, 16, 3};
  for (std::uint64_t id = 1; id <= max_new.size(); ++id)
    ASSERT_EQ(e.submit(id, {.prompt = static_cast<std::uint32_t>(3 * id), .max_new = max_new[id - 1]}),
              "accepted");
  for (int guard = 0; e.core.in_system() > 0 && guard < 200; ++guard) {
    e.admit();
    while (!e.reserve_pending().empty())
      e.pages(e.reserve_pending().begin()->first);
    e.step();
    if (e.step_pending()) {
      // Run the batch through the backend itself.
      e.done();
    }
  }
  ASSERT_EQ(e.core.in_system(), 0u);
  for (std::uint64_t id = 1; id <= max_new.size(); ++id) {
    const auto f = e.finish_of(id);
    ASSERT_TRUE(f.has_value()) << id;
    EXPECT_EQ(f->reason, finish_reason::length) << id;
    EXPECT_EQ(f->completion_tokens, max_new[id - 1]) << id;
    const auto& toks = e.tokens_of(id);
    ASSERT_EQ(toks.size(), max_new[id - 1]) << id;
    for (std::uint32_t k = 0; k < toks.size(); ++k) {
      EXPECT_EQ(toks[k].index, k);
      gpu::step_entry x;
      x.seed = id * 7919;
      x.output_index = k;
      EXPECT_EQ(toks[k].token, backend.token_for(x)) << id << "#" << k;
    }
  }
  EXPECT_EQ(e.reasons[finish_reason::length], max_new.size());
  EXPECT_EQ(e.reserves, e.page_releases);
  EXPECT_TRUE(e.all_returned());
}

// -- submit ---------------------------------------------------------------------

TEST(scheduler_core, submit_refuses_duplicates_full_queues_and_oversized_requests) {
  // 10 pages of 4 tokens; at most 2 waiting.
  engine e{limits(10, 1, 1000, 2)};
  run_table(e, {
    {"fits the pool exactly", submit(1, {.prompt = 30, .max_new = 10}), "accepted", "w w1 a0 r0 p0"},
    {"one token too many", submit(2, {.prompt = 30, .max_new = 11}), "too_large", "w w1 a0 r0 p0"},
    {"duplicate while waiting", submit(1, {.prompt = 1, .max_new = 1}), "duplicate", "w w1 a0 r0 p0"},
    {"second waiting", submit(3, {.prompt = 1, .max_new = 1}), "accepted", "ww w2 a0 r0 p0"},
    {"queue full", submit(4, {.prompt = 1, .max_new = 1}), "queue_full", "ww w2 a0 r0 p0"},
    {"admit 1 (max_running 1)", admit(), "R1:10", "aw w1 a1 r0 p10"},
    {"duplicate while admitting", submit(1), "duplicate", "aw w1 a1 r0 p10"},
    {"room in the queue again", submit(4, {.prompt = 1, .max_new = 1}), "accepted", "aww w2 a1 r0 p10"},
    {"granted", pages(1), "", "rww w2 a0 r1 p10"},
    {"duplicate while ready", submit(1), "duplicate", "rww w2 a0 r1 p10"},
    {"prefill", step(), "step[1:30/0#0]", "rww w2 a0 r1 p10 step"},
    {"duplicate while in step", submit(1), "duplicate", "rww w2 a0 r1 p10 step"},
    {"token", done(), "T1#0", "uww w2 a0 r1 p10"},
    {"cancel 1", cancel(1), "true -P1 F1:cancelled/1", "fww w2 a0 r0 p0"},
    {"still full", submit(1, {.prompt = 1, .max_new = 1}), "queue_full", "fww w2 a0 r0 p0"},
    {"cancel 3", cancel(3), "true F3:cancelled/0", "ffw w1 a0 r0 p0"},
    {"a finished id may be used again", submit(1, {.prompt = 1, .max_new = 1}), "accepted", "wfw w2 a0 r0 p0"},
  });
}

// -- denials ---------------------------------------------------------------------

TEST(scheduler_core, denied_pages_requeue_in_arrival_order_and_block_until_memory_changes) {
  // 12 pages; every request needs 3 (prompt 8 + 4 new).
  engine e{limits(12)};
  const request_args r{.prompt = 8, .max_new = 4};
  run_table(e, {
    {"submit 1", submit(1, r), "accepted", "w w1 a0 r0 p0"},
    {"submit 2", submit(2, r), "accepted", "ww w2 a0 r0 p0"},
    {"submit 3", submit(3, r), "accepted", "www w3 a0 r0 p0"},
    {"admit all three", admit(), "R1:3 R2:3 R3:3", "aaa w0 a3 r0 p9"},
    {"1 granted", pages(1), "", "raa w0 a2 r1 p9"},
    {"2 denied: back to waiting, trim asked", pages(2, false), "trim3", "rwa w1 a1 r1 p6 blocked"},
    {"4 arrives", submit(4, r), "accepted", "rwaw w2 a1 r1 p6 blocked"},
    {"blocked: admit does nothing", admit(), "", "rwaw w2 a1 r1 p6 blocked"},
    {"3 denied too, queued before 4", pages(3, false), "trim3", "rwww w3 a0 r1 p3 blocked"},
    {"memory changed", memory_changed(), "", "rwww w3 a0 r1 p3"},
    // 9 pages free: 2, 3 and 4 fit, admitted in arrival order.
    {"admit resumes in arrival order", admit(), "R2:3 R3:3 R4:3", "raaa w0 a3 r1 p12"},
    {"2 granted", pages(2), "", "rraa w0 a2 r2 p12"},
    {"3 granted", pages(3), "", "rrra w0 a1 r3 p12"},
    {"4 granted", pages(4), "", "rrrr w0 a0 r4 p12"},
  });
}

TEST(scheduler_core, a_denied_head_request_goes_back_before_later_arrivals) {
  // max_running 1: only the head is ever admitting; 3 pages each.
  engine e{limits(12, 1)};
  const request_args r{.prompt = 8, .max_new = 4};
  run_table(e, {
    {"submit 1", submit(1, r), "accepted", "w w1 a0 r0 p0"},
    {"submit 2", submit(2, r), "accepted", "ww w2 a0 r0 p0"},
    {"submit 3", submit(3, r), "accepted", "www w3 a0 r0 p0"},
    {"admit 1", admit(), "R1:3", "aww w2 a1 r0 p3"},
    {"1 denied", pages(1, false), "trim3", "www w3 a0 r0 p0 blocked"},
    {"memory changed", memory_changed(), "", "www w3 a0 r0 p0"},
    {"1 is admitted first again", admit(), "R1:3", "aww w2 a1 r0 p3"},
    {"granted", pages(1), "", "rww w2 a0 r1 p3"},
  });
}

TEST(scheduler_core, a_finish_that_frees_pages_unblocks_admission) {
  engine e{limits(6)};
  const request_args r{.prompt = 8, .max_new = 4}; // 3 pages
  run_table(e, {
    {"submit 1", submit(1, {.prompt = 4, .max_new = 1}), "accepted", "w w1 a0 r0 p0"},
    {"admit 1", admit(), "R1:2", "a w0 a1 r0 p2"},
    {"granted", pages(1), "", "r w0 a0 r1 p2"},
    {"submit 2", submit(2, r), "accepted", "rw w1 a0 r1 p2"},
    {"admit 2", admit(), "R2:3", "ra w0 a1 r1 p5"},
    {"2 denied (adapters hold the room)", pages(2, false), "trim3", "rw w1 a0 r1 p2 blocked"},
    {"prefill 1", step(), "step[1:4/0#0]", "rw w1 a0 r1 p2 step blocked"},
    {"1 finishes and frees its pages", done(), "-P1 T1#0 F1:length/1", "fw w1 a0 r0 p0"},
    {"admit 2 again", admit(), "R2:3", "fa w0 a1 r0 p3"},
  });
}

TEST(scheduler_core, adapter_denial_releases_granted_pages_and_requeues) {
  engine e{limits(100)};
  run_table(e, {
    {"submit 1", submit(1, {.prompt = 4, .max_new = 4, .adapter = 3}), "accepted", "w w1 a0 r0 p0"},
    {"submit 2", submit(2, {.prompt = 4, .max_new = 4}), "accepted", "ww w2 a0 r0 p0"},
    {"admit", admit(), "R1:2 R2:2 A1@3", "aa w0 a2 r0 p4"},
    {"1's pages granted", pages(1), "", "aa w0 a2 r0 p4"},
    {"1's adapter fails: pages back, requeued", adapter(1, false), "-P1", "wa w1 a1 r0 p2 blocked"},
    {"2 granted meanwhile", pages(2), "", "wr w1 a0 r1 p2 blocked"},
    {"memory changed", memory_changed(), "", "wr w1 a0 r1 p2"},
    {"admit 1 again", admit(), "R1:2 A1@3", "ar w0 a1 r1 p4"},
    {"adapter granted first this time", adapter(1), "", "ar w0 a1 r1 p4"},
    {"pages denied: adapter back, requeued", pages(1, false), "-A1@3 trim2", "wr w1 a0 r1 p2 blocked"},
  });
}

// An adapter that fails to load on an otherwise idle server: the request is
// requeued and memory_blocked is set. Nothing runs or awaits a grant, and the
// scheduler actor (actors/scheduler_actor.cpp) calls on_memory_changed() only
// when a trim comes back, so the core must ask for one (or otherwise leave
// itself a way forward), or admission stays blocked for good.
TEST(scheduler_core, adapter_failure_on_an_idle_core_does_not_wedge_admission) {
  engine e{limits(100)};
  run_table(e, {
    {"submit", submit(1, {.prompt = 4, .max_new = 4, .adapter = 3, .adapter_pages = 5}), "accepted", "w w1 a0 r0 p0"},
    {"admit", admit(), "R1:2 A1@3", "a w0 a1 r0 p2 ap5"},
    {"pages granted", pages(1), "", "a w0 a1 r0 p2 ap5"},
  });
  const auto trims_before = e.trims;
  EXPECT_EQ(e.adapter(1, false), "-P1 trim5");
  EXPECT_EQ(e.state(), "w w1 a0 r0 p0 blocked");
  const bool will_run_again = e.core.has_work();
  const bool asked_for_trim = e.trims > trims_before;
  const bool ended = e.core.state_of(1) == request_state::finished;
  EXPECT_TRUE(will_run_again || asked_for_trim || ended)
    << "after an adapter denial with nothing running, admitting or trimming, the core is "
       "memory_blocked="
    << e.core.memory_blocked() << " with " << e.core.waiting()
    << " waiting and no effect that leads to on_memory_changed(): admission is wedged";
}

TEST(scheduler_core, adapter_pages_count_once_per_adapter_in_use) {
  // 12 pages; requests of 2 KV pages; adapter 1 takes 3 pages, adapter 2 takes 4.
  engine e{limits(12)};
  run_table(e, {
    {"submit 1 (adapter 1)", submit(1, {.adapter = 1, .adapter_pages = 3}), "accepted", "w w1 a0 r0 p0"},
    {"submit 2 (adapter 1)", submit(2, {.adapter = 1, .adapter_pages = 3}), "accepted", "ww w2 a0 r0 p0"},
    {"submit 3 (adapter 2)", submit(3, {.adapter = 2, .adapter_pages = 4}), "accepted", "www w3 a0 r0 p0"},
    {"submit 4 (base)", submit(4), "accepted", "wwww w4 a0 r0 p0"},
    // 2+3 for 1, 2 for 2 (adapter 1 already counted), 2+4 for 3: 13 > 12.
    {"admit 1 and 2", admit(), "R1:2 R2:2 A1@1 A2@1", "aaww w2 a2 r0 p4 ap3"},
    {"1 granted", pages(1), "", "aaww w2 a2 r0 p4 ap3"},
    {"1's adapter", adapter(1), "", "raww w2 a1 r1 p4 ap3"},
    {"2 granted", pages(2), "", "raww w2 a1 r1 p4 ap3"},
    {"2's adapter", adapter(2), "", "rrww w2 a0 r2 p4 ap3"},
    {"3 does not fit yet", admit(), "", "rrww w2 a0 r2 p4 ap3"},
    {"cancel 1: adapter 1 still in use by 2", cancel(1), "true -P1 -A1@1 F1:cancelled/0", "frww w2 a0 r1 p2 ap3"},
    // 12 - 2 - 3 = 7 free: 3 takes 2 + 4, then 4 needs 2 > 1.
    {"3 fits now", admit(), "R3:2 A3@2", "fraw w1 a1 r1 p4 ap7"},
    {"cancel 2: adapter 1 unused", cancel(2), "true -P2 -A2@1 F2:cancelled/0", "ffaw w1 a1 r0 p2 ap4"},
    {"4 fits", admit(), "R4:2", "ffaa w0 a2 r0 p4 ap4"},
    {"3's adapter fails: trim of its pages", adapter(3, false), "trim4", "ffaa w0 a2 r0 p4 ap4 blocked"},
    {"3's pages granted: released, 3 waits again", pages(3), "-P3", "ffwa w1 a1 r0 p2 blocked"},
  });
}

TEST(scheduler_core, too_large_counts_the_adapter_pages) {
  engine e{limits(10)};
  // 30 + 10 tokens = 10 KV pages: the pool exactly, without an adapter.
  EXPECT_EQ(e.submit(1, {.prompt = 30, .max_new = 10}), "accepted");
  EXPECT_EQ(e.submit(2, {.prompt = 30, .max_new = 10, .adapter = 1, .adapter_pages = 1}), "too_large");
  EXPECT_EQ(e.submit(3, {.prompt = 26, .max_new = 10, .adapter = 1, .adapter_pages = 1}), "accepted");
}

TEST(scheduler_core, fit_context_cuts_the_output_to_what_the_pool_holds) {
  scheduler_core core{limits(10), std::make_unique<policies::fcfs_scheduling_policy>(), nullptr};
  request_spec s;
  s.prompt.assign(30, 7);
  s.max_new_tokens = 100;
  s.predicted_tokens = 100;
  s.min_tokens = 50;
  s.request_id = 1;
  EXPECT_EQ(core.submit(s), scheduler_core::submit_result::too_large) << "without fit_context";
  s.fit_context = true;
  s.request_id = 3;
  s.prompt.assign(41, 7);
  EXPECT_EQ(core.submit(s), scheduler_core::submit_result::too_large) << "a prompt the pool cannot hold";
  s.request_id = 2;
  s.prompt.assign(30, 7);
  ASSERT_EQ(core.submit(s), scheduler_core::submit_result::accepted);
  double now = 1;
  auto fx = core.admit(now);
  ASSERT_EQ(fx.reserves.size(), 1u);
  EXPECT_EQ(fx.reserves[0].pages, 10u) << "30 + 10 tokens: the whole pool";
  fx = core.on_pages(2, true, now);
  // It runs to 10 tokens (min_tokens cut to them), then ends for length.
  std::size_t tokens = 0;
  std::optional<finish_reason> reason;
  for (int i = 0; i < 20 && !reason; ++i) {
    const auto batch = core.next_step(now += 1);
    ASSERT_EQ(batch.size(), 1u);
    fx = core.on_step_done(batch, std::vector<std::int32_t>{500}, now += 1);
    tokens += fx.tokens.size();
    if (!fx.finished.empty())
      reason = fx.finished[0].reason;
  }
  EXPECT_EQ(tokens, 10u);
  EXPECT_EQ(reason, finish_reason::length);
}

/// Admits scripted ids, one list per call, and records what it was shown.
class scripted_policy final : public policies::scheduling_policy {
public:
  struct seen {
    std::vector<std::uint64_t> waiting;
    std::vector<std::uint64_t> running;
    std::vector<std::uint32_t> adapters_in_use;
    policies::schedule_limits limits;
  };

  scripted_policy(std::vector<std::vector<std::uint64_t>> script, std::vector<seen>* log)
    : script_(std::move(script)), log_(log) {}

  policies::schedule_decision schedule(const policies::schedule_input& in) override {
    seen s;
    for (const auto& w : in.waiting)
      s.waiting.push_back(w.request_id);
    for (const auto& r : in.running)
      s.running.push_back(r.request_id);
    s.adapters_in_use.assign(in.adapters_in_use.begin(), in.adapters_in_use.end());
    s.limits = in.limits;
    log_->push_back(s);
    if (next_ >= script_.size())
      return {};
    policies::schedule_decision d;
    d.admit = script_[next_++];
    return d;
  }
  std::string_view name() const noexcept override { return "scripted"; }

private:
  std::vector<std::vector<std::uint64_t>> script_;
  std::size_t next_ = 0;
  std::vector<seen>* log_;
};

TEST(scheduler_core, a_policy_may_admit_out_of_order_and_unknown_ids_are_ignored) {
  std::vector<scripted_policy::seen> log;
  auto policy = std::make_unique<scripted_policy>(
    std::vector<std::vector<std::uint64_t>>{{3, 99, 1}, {2, 2}, {4}}, &log);
  engine e{limits(20, 5), nullptr, std::move(policy)};
  run_table(e, {
    {"submit 1", submit(1), "accepted", "w w1 a0 r0 p0"},
    {"submit 2", submit(2, {.adapter = 6, .adapter_pages = 3}), "accepted", "ww w2 a0 r0 p0"},
    {"submit 3", submit(3, {.adapter = 5, .adapter_pages = 1}), "accepted", "www w3 a0 r0 p0"},
    {"3 and 1 (99 is nobody)", admit(), "R3:2 R1:2 A3@5", "awa w1 a2 r0 p4 ap1"},
    {"3 granted", pages(3), "", "awa w1 a2 r0 p4 ap1"},
    {"3's adapter", adapter(3), "", "awr w1 a1 r1 p4 ap1"},
    {"1 denied: back before 2", pages(1, false), "trim2", "wwr w2 a0 r1 p2 ap1 blocked"},
    {"memory changed", memory_changed(), "", "wwr w2 a0 r1 p2 ap1"},
    {"2 named twice: admitted once", admit(), "R2:2 A2@6", "war w1 a1 r1 p4 ap4"},
    {"submit 4", submit(4), "accepted", "warw w2 a1 r1 p4 ap4"},
    {"4 overtakes 1", admit(), "R4:2", "wara w1 a2 r1 p6 ap4"},
  });
  ASSERT_EQ(log.size(), 3u);
  // What the policy was shown: waiting in arrival order, the batch, the
  // adapters in use, and limits net of admitting requests and pinned pages.
  EXPECT_EQ(log[0].waiting, (std::vector<std::uint64_t>{1, 2, 3}));
  EXPECT_TRUE(log[0].running.empty());
  EXPECT_TRUE(log[0].adapters_in_use.empty());
  EXPECT_EQ(log[0].limits.max_running, 5u);
  EXPECT_EQ(log[0].limits.free_pages, 20u);
  EXPECT_EQ(log[0].limits.page_tokens, 4u);
  EXPECT_EQ(log[0].limits.token_budget, 1000u);
  EXPECT_EQ(log[1].waiting, (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(log[1].running, std::vector<std::uint64_t>{3});
  EXPECT_EQ(log[1].adapters_in_use, std::vector<std::uint32_t>{5});
  EXPECT_EQ(log[1].limits.max_running, 5u);
  EXPECT_EQ(log[1].limits.free_pages, 20u - 2 - 1);
  EXPECT_EQ(log[2].waiting, (std::vector<std::uint64_t>{1, 4}));
  EXPECT_EQ(log[2].running, std::vector<std::uint64_t>{3});
  EXPECT_EQ(log[2].adapters_in_use, (std::vector<std::uint32_t>{5, 6}));
  EXPECT_EQ(log[2].limits.max_running, 4u); // 2 is admitting
  EXPECT_EQ(log[2].limits.free_pages, 20u - 4 - 4);
}

// -- cancel ---------------------------------------------------------------------

TEST(scheduler_core, cancel_while_waiting_finishes_at_once) {
  engine e{limits(100)};
  run_table(e, {
    {"submit 1", submit(1), "accepted", "w w1 a0 r0 p0"},
    {"submit 2", submit(2), "accepted", "ww w2 a0 r0 p0"},
    {"cancel 1", cancel(1), "true F1:cancelled/0", "fw w1 a0 r0 p0"},
    {"again: already finished", cancel(1), "false", "fw w1 a0 r0 p0"},
    {"unknown id", cancel(99), "false", "fw w1 a0 r0 p0"},
    {"admit takes 2", admit(), "R2:2", "fa w0 a1 r0 p2"},
  });
}

TEST(scheduler_core, cancel_while_admitting_finishes_when_both_grants_are_back) {
  engine e{limits(100)};
  run_table(e, {
    {"submit", submit(1, {.adapter = 4}), "accepted", "w w1 a0 r0 p0"},
    {"admit", admit(), "R1:2 A1@4", "a w0 a1 r0 p2"},
    {"cancel: grants outstanding", cancel(1), "true", "a w0 a1 r0 p2"},
    {"cancel twice", cancel(1), "false", "a w0 a1 r0 p2"},
    {"pages granted: adapter still out", pages(1), "", "a w0 a1 r0 p2"},
    {"adapter granted: both released", adapter(1), "-P1 -A1@4 F1:cancelled/0", "f w0 a0 r0 p0"},
  });
  EXPECT_TRUE(e.all_returned());
}

TEST(scheduler_core, cancel_while_admitting_with_denials_releases_only_grants) {
  engine e{limits(100)};
  run_table(e, {
    {"submit", submit(1, {.adapter = 4}), "accepted", "w w1 a0 r0 p0"},
    {"admit", admit(), "R1:2 A1@4", "a w0 a1 r0 p2"},
    {"cancel", cancel(1), "true", "a w0 a1 r0 p2"},
    {"adapter granted", adapter(1), "", "a w0 a1 r0 p2"},
    {"pages denied: adapter released", pages(1, false), "-A1@4 trim2 F1:cancelled/0", "f w0 a0 r0 p0 blocked"},
  });
  EXPECT_TRUE(e.all_returned());
}

TEST(scheduler_core, cancel_while_ready_finishes_at_once) {
  engine e{limits(100)};
  run_table(e, {
    {"submit", submit(1, {.adapter = 4}), "accepted", "w w1 a0 r0 p0"},
    {"admit", admit(), "R1:2 A1@4", "a w0 a1 r0 p2"},
    {"pages", pages(1), "", "a w0 a1 r0 p2"},
    {"adapter", adapter(1), "", "r w0 a0 r1 p2"},
    {"cancel", cancel(1), "true -P1 -A1@4 F1:cancelled/0", "f w0 a0 r0 p0"},
    {"nothing to step", step(), "step[]", "f w0 a0 r0 p0"},
  });
  EXPECT_TRUE(e.all_returned());
}

TEST(scheduler_core, cancel_in_step_finishes_when_the_step_returns) {
  engine e{limits(100)};
  run_table(e, {
    {"submit 1", submit(1, {.max_new = 5}), "accepted", "w w1 a0 r0 p0"},
    {"submit 2", submit(2, {.max_new = 5}), "accepted", "ww w2 a0 r0 p0"},
    {"admit", admit(), "R1:3 R2:3", "aa w0 a2 r0 p6"},
    {"1 granted", pages(1), "", "ra w0 a1 r1 p6"},
    {"2 granted", pages(2), "", "rr w0 a0 r2 p6"},
    {"prefill both", step(), "step[1:4/0#0 2:4/0#0]", "rr w0 a0 r2 p6 step"},
    {"tokens", done(), "T1#0 T2#0", "uu w0 a0 r2 p6"},
    {"decode both", step(), "step[1:1/4#1 2:1/4#1]", "uu w0 a0 r2 p6 step"},
    {"cancel 1 in step: deferred", cancel(1), "true", "uu w0 a0 r2 p6 step"},
    {"cancel 1 again", cancel(1), "false", "uu w0 a0 r2 p6 step"},
    {"step returns: 1 cancelled, no token", done(), "-P1 T2#1 F1:cancelled/1", "fu w0 a0 r1 p3"},
    {"2 goes on alone", step(), "step[2:1/5#2]", "fu w0 a0 r1 p3 step"},
    {"cancel 2 in step", cancel(2), "true", "fu w0 a0 r1 p3 step"},
    {"failed step still says cancelled", failed(), "-P2 F2:cancelled/2", "ff w0 a0 r0 p0"},
  });
  EXPECT_TRUE(e.all_returned());
}

TEST(scheduler_core, cancel_while_running_between_steps_finishes_at_once) {
  engine e{limits(100)};
  run_table(e, {
    {"submit", submit(1, {.max_new = 5, .adapter = 2}), "accepted", "w w1 a0 r0 p0"},
    {"admit", admit(), "R1:3 A1@2", "a w0 a1 r0 p3"},
    {"pages", pages(1), "", "a w0 a1 r0 p3"},
    {"adapter", adapter(1), "", "r w0 a0 r1 p3"},
    {"prefill", step(), "step[1:4/0#0]", "r w0 a0 r1 p3 step"},
    {"token", done(), "T1#0", "u w0 a0 r1 p3"},
    {"cancel", cancel(1), "true -P1 -A1@2 F1:cancelled/1", "f w0 a0 r0 p0"},
  });
  EXPECT_TRUE(e.all_returned());
}

// -- steps ---------------------------------------------------------------------

TEST(scheduler_core, at_most_one_step_in_flight) {
  engine e{limits(100)};
  run_table(e, {
    {"submit 1", submit(1, {.max_new = 3}), "accepted", "w w1 a0 r0 p0"},
    {"admit", admit(), "R1:2", "a w0 a1 r0 p2"},
    {"granted", pages(1), "", "r w0 a0 r1 p2"},
    {"prefill", step(), "step[1:4/0#0]", "r w0 a0 r1 p2 step"},
    {"second step refused", step(), "step[]", "r w0 a0 r1 p2 step"},
    {"submit 2", submit(2, {.max_new = 1}), "accepted", "rw w1 a0 r1 p2 step"},
    {"admit during the step", admit(), "R2:2", "ra w0 a1 r1 p4 step"},
    {"granted during the step", pages(2), "", "rr w0 a0 r2 p4 step"},
    {"still one step", step(), "step[]", "rr w0 a0 r2 p4 step"},
    {"step returns", done(), "T1#0", "ur w0 a0 r2 p4"},
    {"2 joins the next step", step(), "step[1:1/4#1 2:4/0#0]", "ur w0 a0 r2 p4 step"},
    {"refused again", step(), "step[]", "ur w0 a0 r2 p4 step"},
    {"both produce", done(), "-P2 T1#1 T2#0 F2:length/1", "uf w0 a0 r1 p2"},
  });
  EXPECT_FALSE(e.core.step_in_flight());
  EXPECT_TRUE(e.core.has_work());
}

TEST(scheduler_core, has_work_tracks_what_admit_and_next_step_could_do) {
  engine e{limits(100)};
  EXPECT_FALSE(e.core.has_work());
  e.submit(1);
  EXPECT_TRUE(e.core.has_work());
  e.admit();
  EXPECT_FALSE(e.core.has_work()); // awaiting the grant
  e.pages(1);
  EXPECT_TRUE(e.core.has_work());
  e.step();
  EXPECT_FALSE(e.core.has_work()); // step in flight
  e.done();
  EXPECT_TRUE(e.core.has_work());
}

TEST(scheduler_core, token_budget_limits_prefill_joins) {
  // Budget 10 tokens per step.
  engine e{limits(100, 8, 10)};
  run_table(e, {
    {"submit 1 (prompt 8)", submit(1, {.prompt = 8, .max_new = 3}), "accepted", "w w1 a0 r0 p0"},
    {"admit 1 alone", admit(), "R1:3", "a w0 a1 r0 p3"},
    {"granted", pages(1), "", "r w0 a0 r1 p3"},
    {"submit 2 (prompt 8)", submit(2, {.prompt = 8, .max_new = 2}), "accepted", "rw w1 a0 r1 p3"},
    // The policy sees 1 as one running token: 1 + 8 <= 10.
    {"admit 2", admit(), "R2:3", "ra w0 a1 r1 p6"},
    {"granted", pages(2), "", "rr w0 a0 r2 p6"},
    {"submit 3 (prompt 1)", submit(3, {.prompt = 1, .max_new = 2}), "accepted", "rrw w1 a0 r2 p6"},
    {"admit 3", admit(), "R3:1", "rra w0 a1 r2 p7"},
    {"granted", pages(3), "", "rrr w0 a0 r3 p7"},
    // 8 + 8 > 10: 2's prefill waits; 3's prompt of 1 still fits (8 + 1).
    {"prefill 1 and 3", step(), "step[1:8/0#0 3:1/0#0]", "rrr w0 a0 r3 p7 step"},
    {"tokens", done(), "T1#0 T3#0", "uru w0 a0 r3 p7"},
    // 1 + 8 + 1 = 10: everyone fits now.
    {"decodes and 2's prefill", step(), "step[1:1/8#1 2:8/0#0 3:1/1#1]", "uru w0 a0 r3 p7 step"},
    {"tokens", done(), "-P3 T1#1 T2#0 T3#1 F3:length/2", "uuf w0 a0 r2 p6"},
  });
}

TEST(scheduler_core, a_lone_prefill_may_exceed_the_token_budget) {
  engine e{limits(100, 8, 10)};
  run_table(e, {
    {"submit (prompt 30)", submit(1, {.prompt = 30, .max_new = 2}), "accepted", "w w1 a0 r0 p0"},
    {"admitted alone", admit(), "R1:8", "a w0 a1 r0 p8"},
    {"granted", pages(1), "", "r w0 a0 r1 p8"},
    {"prefill anyway", step(), "step[1:30/0#0]", "r w0 a0 r1 p8 step"},
    {"token", done(), "T1#0", "u w0 a0 r1 p8"},
  });
}

TEST(scheduler_core, max_running_counts_admitting_requests) {
  engine e{limits(100, 2)};
  run_table(e, {
    {"submit 1", submit(1), "accepted", "w w1 a0 r0 p0"},
    {"submit 2", submit(2), "accepted", "ww w2 a0 r0 p0"},
    {"submit 3", submit(3), "accepted", "www w3 a0 r0 p0"},
    {"admit two", admit(), "R1:2 R2:2", "aaw w1 a2 r0 p4"},
    {"no room while they admit", admit(), "", "aaw w1 a2 r0 p4"},
    {"1 ready", pages(1), "", "raw w1 a1 r1 p4"},
    {"still no room", admit(), "", "raw w1 a1 r1 p4"},
    {"2 denied", pages(2, false), "trim2", "rww w2 a0 r1 p2 blocked"},
    {"memory changed", memory_changed(), "", "rww w2 a0 r1 p2"},
    {"one slot: 2 before 3", admit(), "R2:2", "raw w1 a1 r1 p4"},
  });
}

TEST(scheduler_core, failed_step_finishes_everyone_in_it_with_error) {
  engine e{limits(100)};
  run_table(e, {
    {"submit 1", submit(1, {.adapter = 1}), "accepted", "w w1 a0 r0 p0"},
    {"submit 2", submit(2), "accepted", "ww w2 a0 r0 p0"},
    {"admit", admit(), "R1:2 R2:2 A1@1", "aa w0 a2 r0 p4"},
    {"1 pages", pages(1), "", "aa w0 a2 r0 p4"},
    {"1 adapter", adapter(1), "", "ra w0 a1 r1 p4"},
    {"step with 1 only", step(), "step[1:4/0#0]", "ra w0 a1 r1 p4 step"},
    {"2 granted during it", pages(2), "", "rr w0 a0 r2 p4 step"},
    {"step fails: 1 errors, 2 untouched", failed(), "-P1 -A1@1 F1:error/0", "fr w0 a0 r1 p2"},
    {"2 runs", step(), "step[2:4/0#0]", "fr w0 a0 r1 p2 step"},
    {"short token list: 2 errors", done_with({}), "-P2 F2:error/0", "ff w0 a0 r0 p0"},
  });
  EXPECT_TRUE(e.all_returned());
}

// -- eos and stop strings -----------------------------------------------------------

TEST(scheduler_core, eos_token_finishes_with_reason_eos) {
  fake_tokenizer vocab;
  engine e{limits(100), &vocab};
  run_table(e, {
    {"submit", submit(1, {.max_new = 10}), "accepted", "w w1 a0 r0 p0"},
    {"admit", admit(), "R1:4", "a w0 a1 r0 p4"},
    {"granted", pages(1), "", "r w0 a0 r1 p4"},
    {"prefill", step(), "step[1:4/0#0]", "r w0 a0 r1 p4 step"},
    {"a word", done_with({40}), "T1#0", "u w0 a0 r1 p4"},
    {"decode", step(), "step[1:1/4#1]", "u w0 a0 r1 p4 step"},
    {"eos", done_with({fake_tokenizer::eos}), "-P1 T1#1 F1:eos/2", "f w0 a0 r0 p0"},
  });
}

TEST(scheduler_core, eos_wins_over_length_on_the_last_token) {
  fake_tokenizer vocab;
  engine e{limits(100), &vocab};
  run_table(e, {
    {"submit", submit(1, {.max_new = 1}), "accepted", "w w1 a0 r0 p0"},
    {"admit", admit(), "R1:2", "a w0 a1 r0 p2"},
    {"granted", pages(1), "", "r w0 a0 r1 p2"},
    {"prefill", step(), "step[1:4/0#0]", "r w0 a0 r1 p2 step"},
    {"eos", done_with({fake_tokenizer::eos}), "-P1 T1#0 F1:eos/1", "f w0 a0 r0 p0"},
  });
}

TEST(scheduler_core, without_a_tokenizer_no_token_is_eos) {
  engine e{limits(100)};
  run_table(e, {
    {"submit", submit(1, {.max_new = 2, .stop = {"x"}}), "accepted", "w w1 a0 r0 p0"},
    {"admit", admit(), "R1:2", "a w0 a1 r0 p2"},
    {"granted", pages(1), "", "r w0 a0 r1 p2"},
    {"prefill", step(), "step[1:4/0#0]", "r w0 a0 r1 p2 step"},
    {"token 2 is no eos here", done_with({2}), "T1#0", "u w0 a0 r1 p2"},
  });
}

struct stop_case {
  std::string name;
  std::vector<std::string> stop;
  std::vector<std::int32_t> tokens; ///< fed one per step
  std::string expected;             ///< effects of the last step
  std::uint32_t completion;
};

/// Admits request 1 (submitted to `e`) and runs a step for each of
/// `tokens`, checking that each but the last is an ordinary token; the
/// effects of the last step.
std::string admit_and_feed(engine& e, const std::vector<std::int32_t>& tokens) {
  e.admit();
  e.pages(1);
  std::string last;
  for (std::size_t k = 0; k < tokens.size(); ++k) {
    if (e.step() == "step[]") {
      ADD_FAILURE() << "no step for token " << k;
      return last;
    }
    last = e.done(std::vector<std::int32_t>{tokens[k]});
    if (k + 1 < tokens.size()) {
      EXPECT_EQ(last, "T1#" + std::to_string(k)) << "token " << k;
    }
  }
  return last;
}

TEST(scheduler_core, stop_strings_finish_with_reason_stop) {
  fake_tokenizer vocab;
  vocab.words = {{10, "Hel"}, {11, "lo"}, {12, " wor"}, {13, "ld"}, {14, "!"}, {15, "l"},
                 {fake_tokenizer::eos, "</s>"}};
  const std::vector<stop_case> table{
    {"whole token", {"!"}, {10, 14}, "-P1 T1#1 F1:stop/2", 2},
    {"spans two tokens", {"lo w"}, {10, 11, 12}, "-P1 T1#2 F1:stop/3", 3},
    {"spans three tokens", {"llo wo"}, {10, 11, 12}, "-P1 T1#2 F1:stop/3", 3},
    {"inside one token", {"wo"}, {10, 12}, "-P1 T1#1 F1:stop/2", 2},
    {"first of several", {"zzz", "ld"}, {10, 11, 12, 13}, "-P1 T1#3 F1:stop/4", 4},
    {"special tokens add no text", {"Hello"}, {10, 99, 11}, "-P1 T1#2 F1:stop/3", 3},
    {"never matches: length", {"xyz"}, {10, 11, 12, 13, 14, 15}, "-P1 T1#5 F1:length/6", 6},
    {"stop wins over length", {"ld"}, {10, 11, 12, 14, 15, 13}, "-P1 T1#5 F1:stop/6", 6},
    {"eos wins over stop", {"</s>"}, {10, fake_tokenizer::eos}, "-P1 T1#1 F1:eos/2", 2},
    {"repeated letters", {"lll"}, {15, 15, 15}, "-P1 T1#2 F1:stop/3", 3},
  };
  for (const auto& c : table) {
    SCOPED_TRACE(c.name);
    engine e{limits(100), &vocab};
    ASSERT_EQ(e.submit(1, {.prompt = 2, .max_new = 6, .stop = c.stop}), "accepted");
    EXPECT_EQ(admit_and_feed(e, c.tokens), c.expected);
    const auto f = e.finish_of(1);
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->completion_tokens, c.completion);
    EXPECT_TRUE(e.all_returned());
  }
}

/// Rows of one request each (2 prompt tokens): its name, its arguments,
/// the tokens fed one per step, and the effects of the last step.
using output_rows = std::vector<std::tuple<std::string, request_args, std::vector<std::int32_t>, std::string>>;

void expect_outputs(const fake_tokenizer& vocab, const output_rows& rows) {
  for (auto [name, args, tokens, expected] : rows) {
    SCOPED_TRACE(name);
    engine e{limits(100), &vocab};
    args.prompt = 2;
    ASSERT_EQ(e.submit(1, args), "accepted");
    EXPECT_EQ(admit_and_feed(e, tokens), expected);
    EXPECT_TRUE(e.all_returned());
  }
}

TEST(scheduler_core, stop_strings_match_special_tokens_own_texts_where_the_request_keeps_them) {
  fake_tokenizer vocab;
  vocab.words = {{10, "Hel"}, {11, "lo"}};
  vocab.specials = {{99, "<|x|>"}};
  const output_rows table{
    {"kept: the special text ends it", {.max_new = 6, .stop = {"lo<|x|>"}, .skip_special_tokens = false}, {10, 11, 99},
     "-P1 T1#2 F1:stop/3"},
    {"skipped: it adds no text", {.max_new = 3, .stop = {"lo<|x|>"}}, {10, 11, 99}, "-P1 T1#2 F1:length/3"},
    {"skipped: the text around it joins", {.max_new = 6, .stop = {"Hello"}}, {10, 99, 11}, "-P1 T1#2 F1:stop/3"},
    {"kept: it parts the text around it", {.max_new = 3, .stop = {"Hello"}, .skip_special_tokens = false},
     {10, 99, 11}, "-P1 T1#2 F1:length/3"},
  };
  expect_outputs(vocab, table);
}

TEST(scheduler_core, stop_tokens_ignore_eos_and_min_tokens_decide_which_token_ends_the_output) {
  fake_tokenizer vocab;
  vocab.words = {{10, "Hel"}, {14, "!"}};
  constexpr auto eos = fake_tokenizer::eos;
  struct row {
    std::string name;
    request_args args;
    std::vector<std::int32_t> tokens; ///< fed one per step
    std::string expected;             ///< effects of the last step
  };
  const std::vector<row> table{
    {"a stop token", {.max_new = 6, .stop_token_ids = {14, 20}}, {10, 14}, "-P1 T1#1 F1:stop/2"},
    {"ignore_eos: eos is a token", {.max_new = 3, .ignore_eos = true}, {eos, eos, 10}, "-P1 T1#2 F1:length/3"},
    {"ignore_eos keeps stop tokens", {.max_new = 6, .stop_token_ids = {eos}, .ignore_eos = true}, {10, eos}, "-P1 T1#1 F1:stop/2"},
    // A backend that samples from no logits may draw them all the same.
    {"min_tokens holds off eos", {.max_new = 6, .min_tokens = 2}, {eos, eos, eos}, "-P1 T1#2 F1:eos/3"},
    {"min_tokens holds off stop tokens", {.max_new = 6, .stop_token_ids = {14}, .min_tokens = 2}, {14, 14, 14},
     "-P1 T1#2 F1:stop/3"},
    {"stop strings end the output within min_tokens", {.max_new = 6, .stop = {"l!"}, .min_tokens = 5}, {10, 14},
     "-P1 T1#1 F1:stop/2"},
    {"min_tokens of max_tokens: length", {.max_new = 2, .min_tokens = 2}, {eos, eos}, "-P1 T1#1 F1:length/2"},
  };
  for (auto c : table) {
    SCOPED_TRACE(c.name);
    engine e{limits(100), &vocab};
    c.args.prompt = 2;
    ASSERT_EQ(e.submit(1, c.args), "accepted");
    EXPECT_EQ(admit_and_feed(e, c.tokens), c.expected);
    EXPECT_TRUE(e.all_returned());
  }
}

TEST(scheduler_core, every_end_token_ends_the_output_and_min_tokens_holds_them_all_off) {
  fake_tokenizer vocab;
  vocab.ends = {9, fake_tokenizer::eos, 7}; // a model with three (Llama 3 Instruct has two)
  const output_rows table{
    {"the first", {.max_new = 6}, {10, fake_tokenizer::eos}, "-P1 T1#1 F1:eos/2"},
    {"another", {.max_new = 6}, {10, 9}, "-P1 T1#1 F1:eos/2"},
    {"a third", {.max_new = 6}, {7}, "-P1 T1#0 F1:eos/1"},
    {"min_tokens holds them off", {.max_new = 6, .min_tokens = 2}, {9, 7, 9}, "-P1 T1#2 F1:eos/3"},
    {"ignore_eos: they are tokens", {.max_new = 3, .ignore_eos = true}, {9, 7, 2}, "-P1 T1#2 F1:length/3"},
  };
  expect_outputs(vocab, table);
}

// -- JSON output (response_format json_object) --------------------------------------

using testing::samplable;

/// Each step of request 1 (admitted, its pages granted): the token it
/// samples and the tokens the step must leave samplable (in any order).
using constrained_turns = std::vector<std::pair<std::int32_t, std::vector<std::int32_t>>>;

/// Runs the turns, checking what each step leaves samplable; each step's
/// effects.
std::vector<std::string> run_turns(engine& e, const constrained_turns& turns) {
  e.admit();
  e.pages(1);
  std::vector<std::string> effects;
  for (std::size_t k = 0; k < turns.size(); ++k) {
    SCOPED_TRACE("token " + std::to_string(k));
    if (e.step() == "step[]") {
      ADD_FAILURE() << "no step";
      break;
    }
    auto want = turns[k].second;
    std::sort(want.begin(), want.end());
    EXPECT_EQ(samplable(*e.in_flight(), 1000), want);
    effects.push_back(e.done(std::vector<std::int32_t>{turns[k].first}));
  }
  return effects;
}

TEST(scheduler_core, a_json_object_request_samples_only_tokens_that_keep_it_json_and_ends_when_it_closes) {
  fake_tokenizer vocab;
  vocab.words = {{100, "{"}, {101, "\"a\""}, {102, ":"}, {103, "1"}, {104, "}"}, {105, "x"}, {106, " "}, {107, "1}"}};
  engine e{limits(100), &vocab};
  ASSERT_EQ(e.submit(1, {.prompt = 2, .max_new = 10, .stop_token_ids = {103}, .json_object = true}), "accepted");
  const auto effects = run_turns(e, {
    {100, {100, 106}},           // the object opens; nothing else may start it (not the eos token 2)
    {101, {101, 106, 104}},      // a key, or the close
    {102, {102, 106}},           // the colon
    {103, {100, 101, 103, 106, 107}}, // a value; 103 is a stop token too, but this is no end
  });
  // A stop token ends it (the text so far is no JSON, as a stop string's).
  EXPECT_EQ(effects, (std::vector<std::string>{"T1#0", "T1#1", "T1#2", "-P1 T1#3 F1:stop/4"}));
  // Without the stop token: the close ends it, finish stop.
  ASSERT_EQ(e.submit(2, {.prompt = 2, .max_new = 10, .json_object = true}), "accepted");
  e.admit();
  e.pages(2);
  for (const auto t : {100, 101, 102}) {
    ASSERT_NE(e.step(), "step[]");
    e.done(std::vector<std::int32_t>{t});
  }
  ASSERT_NE(e.step(), "step[]");
  EXPECT_EQ(e.done(std::vector<std::int32_t>{107}), "-P2 T2#3 F2:stop/4");
  EXPECT_TRUE(e.all_returned());
}

TEST(scheduler_core, a_choice_request_samples_only_tokens_that_keep_to_a_choice_and_ends_on_a_whole_one) {
  fake_tokenizer vocab;
  constexpr auto eos = fake_tokenizer::eos;
  vocab.words = {{100, "y"}, {101, "es"}, {102, "yes"}, {103, "n"}, {104, "o"}, {105, "!"}, {106, "x"}, {107, "es!"}};
  engine e{limits(100), &vocab};
  ASSERT_EQ(e.submit(1, {.prompt = 2, .max_new = 10, .choice = {"yes!", "no", "yes"}}), "accepted");
  const auto effects = run_turns(e, {
    {100, {100, 102, 103}}, // the start of a choice, never the eos token
    {101, {101, 107}},      // "es" or "es!"
    {105, {105, eos}},      // "yes" is whole and "yes!" goes on from it: "!" or the end
  });
  // "yes!" is whole and no choice goes on from it.
  EXPECT_EQ(effects, (std::vector<std::string>{"T1#0", "T1#1", "-P1 T1#2 F1:stop/3"}));
  // A whole choice no other goes on from ends it at once; at one that
  // another goes on from, the end token ends it (eos).
  EXPECT_TRUE(e.all_returned());
  // A token off the choices (a backend that samples from no logits) ends
  // the output with an error.
  expect_outputs(vocab, {{"whole, no other goes on", {.max_new = 10, .choice = {"yes", "no"}}, {103, 104},
                          "-P1 T1#1 F1:stop/2"},
                         {"whole, another goes on: the end token", {.max_new = 10, .choice = {"yes", "yes!"}},
                          {102, eos}, "-P1 T1#1 F1:eos/2"},
                         {"off the choices", {.max_new = 10, .choice = {"yes", "no"}}, {100, 106},
                          "-P1 T1#1 F1:error/2"}});
}

TEST(scheduler_core, a_regex_request_samples_only_tokens_that_keep_it_matching_and_ends_where_nothing_may_follow) {
  fake_tokenizer vocab;
  constexpr auto eos = fake_tokenizer::eos;
  vocab.words = {{100, "1"}, {101, "23"}, {102, "4"}, {103, "x"}, {104, "12345"}};
  engine e{limits(100), &vocab};
  ASSERT_EQ(e.submit(1, {.prompt = 2, .max_new = 10, .regex = "[0-9]{2,3}"}), "accepted");
  const auto effects = run_turns(e, {
    {100, {100, 101, 102}},  // a digit or two, never five, nor the eos token
    {102, {100, 101, 102}},  // "1" then one or two more
    {102, {100, 102, eos}},  // "14" matches, and a third digit may follow: or the end
  });
  EXPECT_EQ(effects, (std::vector<std::string>{"T1#0", "T1#1", "-P1 T1#2 F1:stop/3"})) << "\"144\": nothing may follow";
  expect_outputs(vocab, {{"a match the end token ends", {.max_new = 10, .regex = "[0-9]{2,3}"}, {101, eos},
                          "-P1 T1#1 F1:eos/2"},
                         {"off the expression", {.max_new = 10, .regex = "[0-9]{2,3}"}, {100, 103},
                          "-P1 T1#1 F1:error/2"}});
}

TEST(scheduler_core, a_grammar_request_samples_only_tokens_that_keep_it_a_sentence_and_ends_where_nothing_may_follow) {
  fake_tokenizer vocab;
  constexpr auto eos = fake_tokenizer::eos;
  vocab.words = {{100, "("}, {101, ")"}, {102, "x"}, {103, "(x"}, {104, "))"}, {105, "y"}, {106, "</t>"}};
  // Balanced parentheses around one x: no regular expression says so.
  const std::string grammar = R"G(root ::= "(" root ")" | "x")G";
  engine e{limits(100), &vocab};
  ASSERT_EQ(e.submit(1, {.prompt = 2, .max_new = 10, .grammar = grammar}), "accepted");
  const auto effects = run_turns(e, {
    {100, {100, 102, 103}}, // an opening, or x; never a close, nor the end
    {103, {100, 102, 103}},
    {101, {101, 104}},      // "((x": closes only
    {101, {101}},           // "((x)": one more, and only one
  });
  EXPECT_EQ(effects, (std::vector<std::string>{"T1#0", "T1#1", "T1#2", "-P1 T1#3 F1:stop/4"}))
    << "a whole sentence that nothing may follow ends the output";
  expect_outputs(vocab, {{"at once", {.max_new = 10, .grammar = grammar}, {102}, "-P1 T1#0 F1:stop/1"},
                         {"a sentence that may go on: the end token ends it", {.max_new = 10, .grammar = "root ::= [xy]+"},
                          {102, 105, eos}, "-P1 T1#2 F1:eos/3"},
                         {"off the grammar", {.max_new = 10, .grammar = grammar}, {100, 105}, "-P1 T1#1 F1:error/2"},
                         {"after the thinking",
                          {.max_new = 10, .reasoning_close = "</t>", .grammar = grammar},
                          {105, 106, 103, 101},
                          "-P1 T1#3 F1:stop/4"}});
}

TEST(scheduler_core, a_reasoning_models_guided_choice_or_regex_holds_the_content_after_its_thinking) {
  fake_tokenizer vocab;
  constexpr auto eos = fake_tokenizer::eos;
  vocab.words = {{100, "<think>"}, {101, "hmm"}, {102, "</think>"}, {103, "no"},
                 {104, "t sure"},  {105, "yes"}, {106, "x"},        {107, "4"}};
  engine e{limits(100), &vocab};
  ASSERT_EQ(e.submit(1, {.prompt = 2, .max_new = 10, .reasoning_close = "</think>", .reasoning_open = "<think>",
                         .choice = {"yes", "no", "not sure"}}),
            "accepted");
  const auto effects = run_turns(e, {
    {100, {100, 103, 105}},                     // the thinking opens, or a choice begins at once
    {101, {100, 101, 102, 103, 104, 105, 106, 107}}, // free thinking, but no end before a choice
    {102, {100, 101, 102, 103, 104, 105, 106, 107}},
    {103, {103, 105}},                          // the content: a choice
    {eos, {104, eos}},                          // "no" is whole, "not sure" goes on from it
  });
  EXPECT_EQ(effects, (std::vector<std::string>{"T1#0", "T1#1", "T1#2", "T1#3", "-P1 T1#4 F1:eos/5"}));
  EXPECT_TRUE(e.all_returned());
  expect_outputs(vocab, {{"a choice at once, no thinking",
                          {.max_new = 10, .reasoning_close = "</think>", .reasoning_open = "<think>",
                           .choice = {"yes", "no"}},
                          {105},
                          "-P1 T1#0 F1:stop/1"},
                         {"the prompt opened the thinking; then a match",
                          {.max_new = 10, .reasoning_close = "</think>", .regex = "4"},
                          {106, 100, 102, 107},
                          "-P1 T1#3 F1:stop/4"},
                         {"off the choices after the thinking",
                          {.max_new = 10, .reasoning_close = "</think>", .choice = {"yes", "no"}},
                          {101, 102, 106},
                          "-P1 T1#2 F1:error/3"}});
}

TEST(scheduler_core, a_json_object_request_given_a_banned_token_ends_with_an_error) {
  // A backend that samples from no logits ignores the bans (the intake
  // refuses such requests there; the core still ends them cleanly).
  fake_tokenizer vocab;
  vocab.words = {{100, "{"}, {101, "}"}, {105, "x"}, {106, "{\"n\":n"}};
  engine e{limits(100), &vocab};
  ASSERT_EQ(e.submit(1, {.prompt = 2, .max_new = 10, .json_object = true}), "accepted");
  EXPECT_EQ(admit_and_feed(e, {100, 105}), "-P1 T1#1 F1:error/2");
  // A token whose bytes begin JSON that no token of the vocabulary can go
  // on with ("ull" is missing): the output ends with an error.
  ASSERT_EQ(e.submit(2, {.prompt = 2, .max_new = 10, .json_object = true}), "accepted");
  e.admit();
  e.pages(2);
  ASSERT_NE(e.step(), "step[]");
  EXPECT_EQ(e.done(std::vector<std::int32_t>{106}), "-P2 T2#0 F2:error/1");
  EXPECT_TRUE(e.all_returned());
}

/// Request `id` submitted with `args` and run alone to its end: its
/// output's text (none, a failure added, if it stalls).
/// Runs request `id` alone to its end; its output's text (special tokens
/// shown by their own text where `shown`).
std::optional<std::string> run_alone(engine& e, const fake_tokenizer& vocab, std::uint64_t id, const request_args& args,
                                     bool shown = false) {
  EXPECT_EQ(e.submit(id, args), "accepted");
  e.admit();
  e.pages(id);
  while (!e.finish_of(id)) {
    if (e.step() == "step[]") {
      ADD_FAILURE() << "request " << id << " stalled";
      return std::nullopt;
    }
    e.done();
  }
  std::string text;
  for (const auto& t : e.tokens_of(id))
    text += shown ? vocab.shown(t.token, true) : vocab.decode(t.token);
  return text;
}

/// A vocabulary of `pieces` (token 100 the first), and the id after the last.
std::pair<fake_tokenizer, std::int32_t> pieces_vocab(const std::vector<std::string>& pieces) {
  fake_tokenizer vocab;
  for (std::size_t i = 0; i < pieces.size(); ++i)
    vocab.words[static_cast<std::int32_t>(100 + i)] = pieces[i];
  return {std::move(vocab), static_cast<std::int32_t>(100 + pieces.size())};
}

/// An object of one integer, "n".
const std::string counted_schema =
  R"({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false})";

/// Runs `count` requests one after another, each asking for `args` with a
/// random max_tokens below `max_new` and sampling at random among the tokens
/// its step allows; counts the outputs that ended whole (finish stop: parsed
/// and given to `check_whole`) and those cut short (each a beginning that
/// `machine` takes).
template <class Machine, class Check>
std::pair<int, int> sample_json_outputs(const std::vector<std::string>& pieces, request_args args,
                                        std::uint32_t max_new, int count, std::uint64_t seed,
                                        const Machine& machine, Check check_whole) {
  const auto vocab = pieces_vocab(pieces).first;
  std::mt19937_64 rng{seed};
  engine e{limits(1000, 8, 400), &vocab};
  e.token_of = [&](const gpu::step_entry& entry) {
    const auto ok = samplable(entry, 1000);
    EXPECT_FALSE(ok.empty());
    return ok.empty() ? 0 : ok[rng() % ok.size()];
  };
  int whole = 0, cut = 0;
  for (std::uint64_t id = 1; id <= static_cast<std::uint64_t>(count); ++id) {
    args.prompt = 2;
    args.max_new = 1 + static_cast<std::uint32_t>(rng() % max_new);
    const auto out = run_alone(e, vocab, id, args);
    if (!out)
      return {whole, cut};
    const auto& text = *out;
    SCOPED_TRACE(text);
    const auto f = *e.finish_of(id);
    if (f.reason == finish_reason::stop) {
      ++whole;
      check_whole(nlohmann::json::parse(text));
    } else {
      EXPECT_EQ(f.reason, finish_reason::length);
      ++cut;
      auto m = machine;
      EXPECT_TRUE(m.feed(text)) << "a beginning";
      EXPECT_FALSE(m.complete());
    }
  }
  EXPECT_TRUE(e.all_returned());
  return {whole, cut};
}

TEST(scheduler_core, random_json_object_outputs_are_json_objects_or_their_beginnings) {
  // Every byte the pieces hold is a token of its own too: no beginning of
  // JSON is left without a token to go on with.
  const std::vector<std::string> pieces{"{", "}", "[", "]", "\"", "\"k\":", ":", ",", " ", "\n  ", "1", "-", "0.",
                                        "5e", "+", "2", "true", "nul", "l", "\\", "n", "\"}", "x", "\xc3", "\xa9",
                                        "}}", "{\"", "\":\"", "]}", "e", "t", "r", "u", "a", "s", "f", "0"};
  const auto [whole, cut] = sample_json_outputs(pieces, {.json_object = true}, 40, 300, 17, json_machine{},
                                                [](const nlohmann::json& v) { EXPECT_TRUE(v.is_object()); });
  EXPECT_GT(whole, 20);
  EXPECT_GT(cut, 20);
}

TEST(scheduler_core, random_json_schema_outputs_are_values_of_the_schema_or_their_beginnings) {
  const std::string schema = R"({"type":"object","properties":{"n":{"type":"integer"},"ok":{"type":"boolean"},
    "tags":{"type":"array","items":{"enum":["x","yy"]},"maxItems":2}},"required":["n","ok"],"additionalProperties":false})";
  std::vector<std::string> pieces{"{", "}", "[", "]", "\"", ":", ",", " ", "\"n\":", "\"ok\":", "\"tags\":", "\"x\"",
                                  "\"yy\"", "-", "12", "true", "false", "1.5", "\"z\":1", "\"}", "],\"n\":"};
  // Every byte the schema may ask for is a token of its own too.
  for (const char c : std::string_view("0123456789ntrueofalsgkxy"))
    pieces.emplace_back(1, c);
  const auto check = [](const nlohmann::json& v) {
    ASSERT_TRUE(v.is_object());
    EXPECT_TRUE(v.contains("n") && v["n"].is_number_integer());
    EXPECT_TRUE(v.contains("ok") && v["ok"].is_boolean());
    for (const auto& [k, x] : v.items()) {
      EXPECT_TRUE(k == "n" || k == "ok" || k == "tags") << k;
      if (k == "tags") {
        EXPECT_LE(x.size(), 2u);
        for (const auto& tag : x)
          EXPECT_TRUE(tag == "x" || tag == "yy") << tag;
      }
    }
  };
  const auto [whole, cut] = sample_json_outputs(pieces, {.json_schema = schema}, 30, 200, 5,
                                                schema_machine(json_schema::compile(schema)), check);
  EXPECT_GT(whole, 10);
  EXPECT_GT(cut, 10);
  // A schema the intake would refuse is refused here too, and nothing is kept.
  fake_tokenizer vocab;
  engine e{limits(100), &vocab};
  EXPECT_THROW(e.submit(1, {.json_schema = R"({"type":"string"})"}), std::invalid_argument);
  EXPECT_TRUE(e.all_returned());
}

/// A sampler for `engine::token_of`: one of the samplable pieces (tokens
/// 100 up to `end`) or `specials`, and now and then (1 in 12) the end of the
/// output where that is samplable.
engine::token_fn pieces_or_end(std::mt19937_64& rng, std::int32_t end, std::vector<std::int32_t> specials = {}) {
  return [&rng, end, specials = std::move(specials)](const gpu::step_entry& entry) {
    std::vector<std::int32_t> ok;
    for (const auto t : samplable(entry, 1000))
      if ((t >= 100 && t < end) || std::find(specials.begin(), specials.end(), t) != specials.end()
          || (t == fake_tokenizer::eos && rng() % 12 == 0))
        ok.push_back(t);
    EXPECT_FALSE(ok.empty());
    return ok.empty() ? fake_tokenizer::eos : ok[rng() % ok.size()];
  };
}

TEST(scheduler_core, with_a_trigger_the_output_is_free_until_it_and_each_value_after_it_is_the_schemas) {
  const auto& schema = counted_schema;
  // Pieces that end the trigger and go on with what the value may or may
  // not begin with, a value closed with free text after it, and bytes.
  std::vector<std::string> pieces{"<t>", "<", "t", ">", "<t>{", "<t>x", "<t>\n{\"n\":", ">{", ">hi", "{", "}",
                                  "\"n\":", "12", " ", "hi", "}<t>", "}\n", "}x", "x", "\"", ":", "-", "<<t"};
  for (const char c : std::string_view("0123456789n"))
    pieces.emplace_back(1, c);
  const auto made = pieces_vocab(pieces);
  const auto& vocab = made.first;
  const auto end = made.second;
  std::mt19937_64 rng{23};
  engine e{limits(1000, 8, 400), &vocab};
  e.token_of = pieces_or_end(rng, end);
  int values = 0, open = 0, free_ends = 0;
  for (std::uint64_t id = 1; id <= 200; ++id) {
    const auto max_new = 1 + static_cast<std::uint32_t>(rng() % 30);
    // Every other request's output must begin with the trigger.
    const bool first = id % 2 == 0;
    const auto out = run_alone(e, vocab, id, {.prompt = 2, .max_new = max_new, .json_schema = schema,
                                              .json_trigger = "<t>", .json_trigger_first = first});
    ASSERT_TRUE(out.has_value());
    const auto& text = *out;
    SCOPED_TRACE(text);
    if (first) {
      EXPECT_TRUE(text.size() < 3 ? std::string_view("<t>").starts_with(text) : text.starts_with("<t>"));
    }
    const auto f = *e.finish_of(id);
    // A value's close does not end the output: the end-of-sequence token
    // (in free text) or the length does.
    EXPECT_TRUE(f.reason == finish_reason::eos || f.reason == finish_reason::length) << to_string(f.reason);
    // Each value after a trigger is whole, but the last may be cut short.
    for (std::size_t from = 0;;) {
      const auto at = text.find("<t>", from);
      if (at == std::string::npos) {
        ++free_ends;
        break;
      }
      auto m = schema_machine(json_schema::compile(schema));
      std::size_t i = at + 3;
      while (i < text.size() && !m.complete())
        ASSERT_TRUE(m.feed(static_cast<unsigned char>(text[i++]))) << "at " << i;
      if (!m.complete()) {
        EXPECT_EQ(f.reason, finish_reason::length) << "a value is not left open but by the length";
        ++open;
        break;
      }
      const auto v = nlohmann::json::parse(text.substr(at + 3, i - at - 3));
      EXPECT_TRUE(v.is_object() && v.size() == 1 && v["n"].is_number_integer()) << v.dump();
      ++values;
      from = i;
    }
  }
  EXPECT_GT(values, 30);
  EXPECT_GT(open, 10);
  EXPECT_GT(free_ends, 30);
  EXPECT_TRUE(e.all_returned());
}

TEST(scheduler_core, with_an_answer_beside_a_trigger_the_output_is_calls_or_one_value_of_the_answer_which_ends_it) {
  const auto& schema = counted_schema;
  const std::string answer = R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})";
  std::vector<std::string> pieces{"<t>", "<", "t", ">", "<t>{", ">{", "{", "}", "\"n\":", "12", " ", "hi", "}<t>",
                                  "}\n", "[", "]", "],", "]\n", ",", "[1", "x", "\"", ":", "-"};
  for (const char c : std::string_view("0123456789n"))
    pieces.emplace_back(1, c);
  const auto made = pieces_vocab(pieces);
  const auto& vocab = made.first;
  const auto end = made.second;
  std::mt19937_64 rng{31};
  engine e{limits(1000, 8, 400), &vocab};
  e.token_of = pieces_or_end(rng, end);
  int answers = 0, calls = 0;
  for (std::uint64_t id = 1; id <= 150; ++id) {
    const auto max_new = 1 + static_cast<std::uint32_t>(rng() % 20);
    const auto out = run_alone(e, vocab, id, {.prompt = 2, .max_new = max_new, .json_schema = schema,
                                              .json_trigger = "<t>", .json_answer = answer});
    ASSERT_TRUE(out.has_value());
    const auto& text = *out;
    SCOPED_TRACE(text);
    const auto f = *e.finish_of(id);
    if (text.size() < 3 ? std::string_view("<t>").starts_with(text) : text.starts_with("<t>")) {
      // Calls: as a trigger's output (the other tests read their values).
      EXPECT_TRUE(f.reason == finish_reason::eos || f.reason == finish_reason::length) << to_string(f.reason);
      ++calls;
      continue;
    }
    // The answer: a value of its schema, and its close ends the output.
    auto m = schema_machine(json_schema::compile(answer));
    ASSERT_TRUE(m.feed(std::string_view(text)));
    if (m.complete()) {
      EXPECT_EQ(f.reason, finish_reason::stop);
      const auto v = nlohmann::json::parse(text);
      EXPECT_TRUE(v.is_array() && !v.empty() && v.size() <= 3) << v.dump();
      ++answers;
    } else {
      EXPECT_EQ(f.reason, finish_reason::length) << "an answer is not left open but by the length";
    }
  }
  EXPECT_GT(answers, 20);
  EXPECT_GT(calls, 20);
  EXPECT_TRUE(e.all_returned());
}

TEST(scheduler_core, a_trigger_that_is_a_special_tokens_text_is_written_by_that_token_and_opens_an_array) {
  // Mistral's calls: "[TC]" a special token (99), the value after it an
  // array; the trigger may also be spelled out.
  const std::string schema = R"({"type":"array","items":)" + counted_schema + R"(,"minItems":1})";
  std::vector<std::string> pieces{"[", "]", "]hi", ",", "{", "}", "\"n\":", "12", " ", "hi", "[T", "C]", "x"};
  auto made = pieces_vocab(pieces);
  auto& vocab = made.first;
  const auto end = made.second;
  constexpr std::int32_t marker = 99;
  vocab.specials[marker] = "[TC]";
  std::mt19937_64 rng{29};
  engine e{limits(1000, 8, 400), &vocab};
  e.token_of = pieces_or_end(rng, end, {marker});
  int values = 0, by_token = 0;
  for (std::uint64_t id = 1; id <= 150; ++id) {
    const bool first = id % 2 == 0;
    const auto out = run_alone(e, vocab, id,
                               {.prompt = 2, .max_new = 1 + static_cast<std::uint32_t>(rng() % 30),
                                .json_schema = schema, .json_trigger = "[TC]", .json_trigger_first = first},
                               true);
    ASSERT_TRUE(out.has_value());
    for (const auto& t : e.tokens_of(id))
      by_token += t.token == marker;
    const auto& text = *out;
    SCOPED_TRACE(text);
    if (first) {
      EXPECT_TRUE(text.size() < 4 ? std::string_view("[TC]").starts_with(text) : text.starts_with("[TC]"));
    }
    for (std::size_t from = 0;;) {
      const auto at = text.find("[TC]", from);
      if (at == std::string::npos)
        break;
      auto m = schema_machine(json_schema::compile(schema));
      std::size_t i = at + 4;
      while (i < text.size() && !m.complete())
        ASSERT_TRUE(m.feed(static_cast<unsigned char>(text[i++]))) << "at " << i;
      if (!m.complete()) {
        EXPECT_EQ(e.finish_of(id)->reason, finish_reason::length);
        break;
      }
      const auto v = nlohmann::json::parse(text.substr(at + 4, i - at - 4));
      EXPECT_TRUE(v.is_array() && !v.empty()) << v.dump();
      ++values;
      from = i;
    }
  }
  EXPECT_GT(values, 20);
  EXPECT_GT(by_token, 20) << "the special token writes the trigger";
  EXPECT_TRUE(e.all_returned());
}

TEST(scheduler_core, a_headed_trigger_holds_a_name_its_mark_and_that_names_value_with_or_without_thinking_first) {
  // Mistral's later calls: "[TC]" (99) a name, "[A]" (98), the value of
  // that name's schema; both marks special tokens, or spelled out. Every
  // third request thinks first, up to "</t>".
  const std::string schema = R"({"type":"object","properties":{"f":)" + counted_schema
                             + R"(,"fg":{"type":"object","additionalProperties":false}}})";
  std::vector<std::string> pieces{"f", "g", "fg", "[T", "C]", "[A", "]", "{", "}", "\"n\":", "12", " ", "hi", "x",
                                  "}hi", "</t>", "hmm", "f[A]{"};
  auto made = pieces_vocab(pieces);
  auto& vocab = made.first;
  const auto end = made.second;
  constexpr std::int32_t call = 99, args = 98;
  vocab.specials[call] = "[TC]";
  vocab.specials[args] = "[A]";
  std::mt19937_64 rng{31};
  engine e{limits(1000, 8, 400), &vocab};
  e.token_of = pieces_or_end(rng, end, {call, args});
  int values[2] = {0, 0}, marks_by_token = 0, thought = 0;
  for (std::uint64_t id = 1; id <= 240; ++id) {
    const bool first = id % 2 == 0, thinks = id % 3 == 0;
    auto out = run_alone(e, vocab, id,
                         {.prompt = 2, .max_new = 1 + static_cast<std::uint32_t>(rng() % 30), .json_schema = schema,
                          .json_trigger = "[TC]", .json_trigger_first = first, .json_trigger_head = "[A]",
                          .reasoning_close = thinks ? "</t>" : ""},
                         true);
    ASSERT_TRUE(out.has_value());
    for (const auto& t : e.tokens_of(id))
      marks_by_token += t.token == args;
    auto text = std::move(*out);
    SCOPED_TRACE(text);
    if (thinks) {
      const auto close = text.find("</t>");
      if (close == std::string::npos)
        continue; // all thinking
      ++thought;
      text = text.substr(close + 4);
      if (first) // blanks may come before the content's leading trigger
        text.erase(0, std::min(text.size(), text.find_first_not_of(' ')));
    }
    if (first) {
      EXPECT_TRUE(text.size() < 4 ? std::string_view("[TC]").starts_with(text) : text.starts_with("[TC]"));
    }
    for (std::size_t from = 0;;) {
      const auto at = text.find("[TC]", from);
      if (at == std::string::npos)
        break;
      const auto rest = std::string_view(text).substr(at + 4);
      const auto mark = rest.find("[A]");
      if (mark == std::string_view::npos) {
        EXPECT_TRUE(std::string_view("f[A]").starts_with(rest) || std::string_view("fg[A]").starts_with(rest))
          << "a head begun, cut by the length";
        EXPECT_EQ(e.finish_of(id)->reason, finish_reason::length);
        break;
      }
      const auto name = rest.substr(0, mark);
      ASSERT_TRUE(name == "f" || name == "fg") << name;
      auto m = schema_machine(
        json_schema::compile(name == "f" ? counted_schema : R"({"type":"object","additionalProperties":false})"));
      std::size_t i = at + 4 + mark + 3;
      while (i < text.size() && !m.complete())
        ASSERT_TRUE(m.feed(static_cast<unsigned char>(text[i++]))) << "at " << i;
      if (!m.complete()) {
        EXPECT_EQ(e.finish_of(id)->reason, finish_reason::length);
        break;
      }
      ++values[name == "f" ? 0 : 1];
      from = i;
    }
  }
  EXPECT_GT(values[0], 10);
  EXPECT_GT(values[1], 10);
  EXPECT_GT(marks_by_token, 10) << "the mark's special token writes it";
  EXPECT_GT(thought, 20);
  EXPECT_TRUE(e.all_returned());
}

TEST(scheduler_core, bad_words_are_never_completed_and_allowed_token_ids_are_the_only_tokens_drawn) {
  // Pieces 100 "a" to 104 "e". Bad words: "ab" (100 101), "c" (102), and
  // "dd" (103 103); allowed, in every other request: a, b, d and the end.
  auto made = pieces_vocab({"a", "b", "c", "d", "e"});
  const auto& vocab = made.first;
  const std::vector<std::vector<std::int32_t>> bad{{100, 101}, {102}, {103, 103}};
  const std::vector<std::int32_t> allowed{fake_tokenizer::eos, 100, 101, 103};
  std::mt19937_64 rng{37};
  engine e{limits(1000, 8, 400), &vocab};
  std::vector<std::int32_t> seen_ok;
  e.token_of = [&](const gpu::step_entry& entry) {
    seen_ok = samplable(entry, vocab.vocab_size());
    std::vector<std::int32_t> pick;
    for (const auto t : seen_ok)
      if ((t >= 100 && t < made.second) || (t == fake_tokenizer::eos && rng() % 10 == 0))
        pick.push_back(t);
    EXPECT_FALSE(pick.empty());
    return pick.empty() ? fake_tokenizer::eos : pick[rng() % pick.size()];
  };
  int pairs_after_a = 0;
  for (std::uint64_t id = 1; id <= 80; ++id) {
    const bool only = id % 2 == 0;
    const auto out = run_alone(e, vocab, id,
                               {.prompt = 2, .max_new = 20, .bad_words = bad,
                                .allowed_token_ids = only ? allowed : std::vector<std::int32_t>{}});
    ASSERT_TRUE(out.has_value());
    SCOPED_TRACE(*out);
    EXPECT_EQ(out->find("ab"), std::string::npos);
    EXPECT_EQ(out->find('c'), std::string::npos);
    EXPECT_EQ(out->find("dd"), std::string::npos);
    if (only) {
      EXPECT_EQ(out->find('e'), std::string::npos) << "e is not allowed";
    }
    for (std::size_t i = 1; i < out->size(); ++i)
      pairs_after_a += (*out)[i - 1] == 'a';
    EXPECT_NE(e.finish_of(id)->reason, finish_reason::error);
  }
  EXPECT_GT(pairs_after_a, 20) << "\"a\" is written, only never followed by \"b\"";
  // Every token banned (the one allowed is a bad word): the backend draws
  // one anyway, and the request ends with an error rather than write it.
  e.token_of = [&](const gpu::step_entry&) { return std::int32_t{104}; };
  const auto stuck = run_alone(e, vocab, 99, {.prompt = 2, .max_new = 5, .bad_words = {{102}},
                                              .allowed_token_ids = {102}});
  ASSERT_TRUE(stuck.has_value());
  EXPECT_EQ(e.finish_of(99)->reason, finish_reason::error);
  EXPECT_TRUE(e.all_returned());
}

TEST(scheduler_core, a_reasoning_models_output_thinks_freely_and_then_its_content_is_the_schemas_value) {
  const auto& schema = counted_schema;
  std::vector<std::string> pieces{"<think>", "</think>", "</", "think>", "<", "hmm", " ", "\n", "{", "}", "\"n\":",
                                  "12", "x", "\"", ":", "-", "}\n", "\n\n{"};
  for (const char c : std::string_view("0123456789n"))
    pieces.emplace_back(1, c);
  const auto made = pieces_vocab(pieces);
  const auto& vocab = made.first;
  const auto end = made.second;
  std::mt19937_64 rng{41};
  engine e{limits(1000, 8, 400), &vocab};
  bool eos_offered = false;
  e.token_of = [&](const gpu::step_entry& entry) {
    std::vector<std::int32_t> ok;
    for (const auto t : samplable(entry, 1000)) {
      eos_offered = eos_offered || t == fake_tokenizer::eos;
      if (t >= 100 && t < end)
        ok.push_back(t);
    }
    EXPECT_FALSE(ok.empty());
    return ok.empty() ? fake_tokenizer::eos : ok[rng() % ok.size()];
  };
  int thought = 0, direct = 0, whole = 0;
  for (std::uint64_t id = 1; id <= 160; ++id) {
    // Odd requests: the output opens its thinking or answers at once
    // (Qwen3); even: the prompt opened it (DeepSeek R1).
    const bool opens = id % 2 == 1;
    const auto out = run_alone(e, vocab, id,
                               {.prompt = 2, .max_new = 1 + static_cast<std::uint32_t>(rng() % 40),
                                .json_schema = schema, .reasoning_close = "</think>",
                                .reasoning_open = opens ? "<think>" : ""});
    ASSERT_TRUE(out.has_value());
    const auto& text = *out;
    SCOPED_TRACE(text);
    const auto f = *e.finish_of(id);
    // The content, as the chat answer's reasoning parser reads it.
    const auto lead = text.find_first_not_of(" \n");
    std::string_view content = text;
    if (!opens || (lead != std::string::npos && text.compare(lead, 7, "<think>") == 0)) {
      const auto close = text.find("</think>");
      if (close == std::string::npos) {
        EXPECT_EQ(f.reason, finish_reason::length) << "thinking ends only at the length";
        continue;
      }
      content = std::string_view(text).substr(close + 8);
      ++thought;
    } else {
      ++direct;
    }
    auto m = schema_machine(json_schema::compile(schema));
    ASSERT_TRUE(m.feed(content)) << "the content is the value";
    if (f.reason == finish_reason::stop) {
      ASSERT_TRUE(m.complete());
      ++whole;
    } else {
      EXPECT_EQ(f.reason, finish_reason::length);
    }
  }
  EXPECT_FALSE(eos_offered) << "the output cannot end before its value";
  EXPECT_GT(thought, 30);
  EXPECT_GT(direct, 10);
  EXPECT_GT(whole, 20);
  EXPECT_TRUE(e.all_returned());
}

// -- property: every grant is released exactly once ---------------------------------

TEST(scheduler_core, random_runs_release_every_grant_exactly_once) {
  fake_tokenizer vocab;
  for (std::int32_t t = 100; t < 120; ++t)
    vocab.words[t] = std::string(1, static_cast<char>('a' + (t - 100)));
  for (std::uint64_t seed : {1u, 2u, 3u, 4u, 5u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng{seed};
    auto chance = [&](double p) { return std::uniform_real_distribution<>{0, 1}(rng) < p; };
    auto pick = [&](std::uint64_t n) { return rng() % n; };
    engine e{limits(48, 6, 40, 1000), &vocab};
    e.token_of = [&](const gpu::step_entry&) {
      // Mostly letters; sometimes EOS.
      return chance(0.03) ? fake_tokenizer::eos : static_cast<std::int32_t>(100 + pick(20));
    };
    std::uint64_t next_id = 1, accepted = 0;
    std::vector<std::uint64_t> ids;
    for (int iter = 0; iter < 3000 && (next_id <= 300 || e.core.in_system() > 0); ++iter) {
      // Arrivals.
      if (next_id <= 300 && chance(0.4)) {
        request_args a;
        a.prompt = 1 + static_cast<std::uint32_t>(pick(30));
        a.max_new = 1 + static_cast<std::uint32_t>(pick(12));
        a.adapter = chance(0.5) ? 1 + static_cast<std::uint32_t>(pick(4)) : 0;
        a.adapter_pages = a.adapter; // adapter k takes k pages
        if (chance(0.2))
          a.stop = {std::string(1, static_cast<char>('a' + pick(20)))};
        const auto r = e.submit(next_id, a);
        if (r == "accepted") {
          ++accepted;
          ids.push_back(next_id);
        } else {
          EXPECT_EQ(r, "too_large");
        }
        ++next_id;
      }
      // Random cancels at random points (including unknown and finished ids).
      if (!ids.empty() && chance(0.05))
        e.cancel(ids[pick(ids.size())]);
      e.admit();
      // ... and while grants are outstanding.
      if (!ids.empty() && chance(0.05))
        e.cancel(ids[pick(ids.size())]);
      // Answer some outstanding grants, in random order, some denied.
      for (int k = 0; k < 3; ++k) {
        if (!e.reserve_pending().empty() && chance(0.7)) {
          auto it = e.reserve_pending().begin();
          std::advance(it, static_cast<long>(pick(e.reserve_pending().size())));
          e.pages(it->first, !chance(0.1));
        }
        if (!e.acquire_pending().empty() && chance(0.7)) {
          auto it = e.acquire_pending().begin();
          std::advance(it, static_cast<long>(pick(e.acquire_pending().size())));
          e.adapter(it->first, !chance(0.1));
        }
      }
      // Steps: start one if none runs; the running one returns (or fails).
      if (e.step_pending()) {
        if (chance(0.7)) {
          if (chance(0.02))
            e.failed();
          else
            e.done();
        }
      } else {
        e.step();
      }
      // The shell's trim returns now and then; and whenever the core is
      // blocked with nothing in flight that could unblock it, kick it (the
      // adapter-denial wedge is tested on its own above).
      if (e.core.memory_blocked() && chance(0.3))
        e.memory_changed();
      if (e.core.memory_blocked() && !e.grants_pending() && !e.step_pending()
          && e.core.running() == 0 && e.core.admitting() == 0) {
        e.memory_changed();
      }
    }
    // Drain: answer everything, run to the end.
    for (int guard = 0; e.core.in_system() > 0 && guard < 2000; ++guard) {
      e.memory_changed();
      e.admit();
      while (!e.reserve_pending().empty())
        e.pages(e.reserve_pending().begin()->first);
      while (!e.acquire_pending().empty())
        e.adapter(e.acquire_pending().begin()->first);
      if (e.step_pending())
        e.done();
      else
        e.step();
    }
    ASSERT_EQ(e.core.in_system(), 0u);
    EXPECT_FALSE(e.step_pending());
    EXPECT_FALSE(e.grants_pending());
    EXPECT_TRUE(e.all_returned());
    EXPECT_EQ(e.core.reserved_pages(), 0u);
    EXPECT_EQ(e.finishes, accepted);
    for (auto id : ids)
      EXPECT_TRUE(e.finish_of(id).has_value()) << id;
    // Every granted reservation and adapter came back exactly once (the ledger
    // fails on a release of something not held; here: nothing is left held).
    EXPECT_EQ(e.page_grants, e.page_releases);
    EXPECT_EQ(e.adapter_grants, e.adapter_releases);
    // The run exercised what it is meant to.
    EXPECT_GT(e.reasons[finish_reason::length], 0u);
    EXPECT_GT(e.reasons[finish_reason::cancelled], 0u);
    EXPECT_GT(e.reasons[finish_reason::eos], 0u);
    EXPECT_GT(e.reasons[finish_reason::stop], 0u);
    EXPECT_GT(e.trims, 0u);
    EXPECT_GT(e.adapter_grants, 0u);
  }
}

TEST(scheduler_core, a_request_whose_adapter_keeps_failing_ends_with_an_error) {
  scheduler_limits limits;
  limits.total_pages = 100;
  limits.max_adapter_failures = 3;
  scheduler_core core{limits, std::make_unique<policies::fcfs_scheduling_policy>(), nullptr};
  request_spec spec;
  spec.request_id = 1;
  spec.prompt.assign(8, 5);
  spec.max_new_tokens = 4;
  spec.adapter_id = 7;
  spec.adapter_pages = 2;
  ASSERT_EQ(core.submit(spec), scheduler_core::submit_result::accepted);
  for (std::uint32_t attempt = 1; attempt <= 3; ++attempt) {
    SCOPED_TRACE(attempt);
    auto fx = core.admit(attempt);
    ASSERT_EQ(fx.reserves.size(), 1u);
    ASSERT_EQ(fx.acquires.size(), 1u);
    EXPECT_TRUE(core.on_pages(1, true, attempt).empty());
    fx = core.on_adapter(1, false, attempt);
    EXPECT_EQ(fx.trim_pages, 2u);
    ASSERT_EQ(fx.release_pages.size(), 1u); // the granted KV pages go back
    EXPECT_TRUE(fx.release_adapters.empty());
    if (attempt < 3) {
      EXPECT_TRUE(fx.finished.empty());
      EXPECT_EQ(core.state_of(1), request_state::waiting);
      core.on_memory_changed();
    } else {
      ASSERT_EQ(fx.finished.size(), 1u);
      EXPECT_EQ(fx.finished[0].reason, finish_reason::error);
      EXPECT_EQ(core.in_system(), 0u);
    }
  }
  EXPECT_EQ(core.reserved_pages(), 0u);
  EXPECT_EQ(core.adapter_pages_in_use(), 0u);
}

TEST(scheduler_core, steps_carry_input_tokens_and_the_granted_pages) {
  scheduler_limits limits;
  limits.total_pages = 100;
  limits.page_tokens = 4;
  scheduler_core core{limits, std::make_unique<policies::fcfs_scheduling_policy>(), nullptr};
  request_spec spec;
  spec.request_id = 9;
  spec.prompt = {11, 12, 13, 14, 15};
  spec.max_new_tokens = 3; // 8 tokens: 2 pages of 4
  ASSERT_EQ(core.submit(spec), scheduler_core::submit_result::accepted);
  auto fx = core.admit(0);
  ASSERT_EQ(fx.reserves.size(), 1u);
  EXPECT_EQ(fx.reserves[0].pages, 2u);
  core.on_pages(9, true, 0, {42, 7});
  auto step = core.next_step(0);
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0].tokens, spec.prompt);
  EXPECT_EQ(step[0].pages, (std::vector<std::uint32_t>{42, 7}));
  const std::vector<std::int32_t> first{100};
  core.on_step_done(step, first, 1);
  step = core.next_step(1);
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0].tokens, first); // decode feeds the last output token
  EXPECT_EQ(step[0].context_tokens, 5u);
  EXPECT_EQ(step[0].output_index, 1u);
  EXPECT_EQ(step[0].pages, (std::vector<std::uint32_t>{42, 7}));
}

TEST(scheduler_core, a_negative_token_ends_only_that_request_with_an_error) {
  scheduler_limits limits;
  limits.total_pages = 100;
  scheduler_core core{limits, std::make_unique<policies::fcfs_scheduling_policy>(), nullptr};
  for (std::uint64_t id : {1, 2}) {
    request_spec spec;
    spec.request_id = id;
    spec.prompt = {3, 4};
    spec.max_new_tokens = 4;
    spec.arrival_s = static_cast<double>(id);
    ASSERT_EQ(core.submit(spec), scheduler_core::submit_result::accepted);
  }
  auto fx = core.admit(3);
  ASSERT_EQ(fx.reserves.size(), 2u);
  core.on_pages(1, true, 3, {0});
  core.on_pages(2, true, 3, {1});
  auto step = core.next_step(3);
  ASSERT_EQ(step.size(), 2u);
  const std::vector<std::int32_t> tokens{-1, 50};
  fx = core.on_step_done(step, tokens, 4);
  ASSERT_EQ(fx.finished.size(), 1u);
  EXPECT_EQ(fx.finished[0].request_id, 1u);
  EXPECT_EQ(fx.finished[0].reason, finish_reason::error);
  EXPECT_EQ(fx.release_pages, (std::vector<std::uint64_t>{1}));
  ASSERT_EQ(fx.tokens.size(), 1u);
  EXPECT_EQ(fx.tokens[0].request_id, 2u);
  EXPECT_EQ(core.state_of(2), request_state::running);
}

/// Requests 1, 2 and 3 of `prompt` (4 tokens each), each as `ask` sets
/// it, admitted and prefilled in one step, which is returned.
/// A first-come-first-served core over 100 pages.
scheduler_core fcfs_core(const gpu::tokenizer* vocab = nullptr) {
  scheduler_limits limits;
  limits.total_pages = 100;
  return scheduler_core{limits, std::make_unique<policies::fcfs_scheduling_policy>(), vocab};
}

using adjustments = std::vector<std::pair<std::int32_t, float>>;

/// Request `id`'s logit adjustments in `step`, as (token, delta).
adjustments adjustments_of(const std::vector<gpu::step_entry>& step, std::uint64_t id) {
  adjustments out;
  for (const auto& e : step)
    if (e.request_id == id)
      for (const auto& a : e.logit_adjust)
        out.emplace_back(a.token, a.delta);
  return out;
}

std::vector<gpu::step_entry> three_in_one_prefill(scheduler_core& core, const std::vector<std::int32_t>& prompt,
                                                  const std::function<void(request_spec&)>& ask) {
  for (std::uint64_t id : {1, 2, 3}) {
    request_spec spec;
    spec.request_id = id;
    spec.prompt = prompt;
    spec.max_new_tokens = 4;
    spec.arrival_s = static_cast<double>(id);
    ask(spec);
    EXPECT_EQ(core.submit(spec), scheduler_core::submit_result::accepted);
  }
  core.admit(4);
  for (std::uint32_t id : {1, 2, 3})
    core.on_pages(id, true, 4, {id});
  return core.next_step(4);
}

TEST(scheduler_core, within_min_tokens_every_end_token_is_banned_unless_ignore_eos) {
  fake_tokenizer vocab;
  vocab.ends = {9, fake_tokenizer::eos, 7};
  auto core = fcfs_core(&vocab);
  const auto step = three_in_one_prefill(core, {5, 6, 7, 8}, [](request_spec& s) {
    s.min_tokens = s.request_id == 3 ? 0 : 2;
    s.ignore_eos = s.request_id == 2;
  });
  EXPECT_EQ(adjustments_of(step, 1), (adjustments{{fake_tokenizer::eos, -1e30f}, {7, -1e30f}, {9, -1e30f}}));
  EXPECT_EQ(adjustments_of(step, 2), adjustments{}) << "ignore_eos: no end token is banned";
  EXPECT_EQ(adjustments_of(step, 3), adjustments{}) << "past min_tokens";
}

TEST(scheduler_core, log_probabilities_reach_the_tokens_of_the_requests_that_asked_only) {
  auto core = fcfs_core();
  auto step = three_in_one_prefill(core, {3, 4}, [](request_spec& s) {
    s.logprobs = s.request_id == 2 ? -1 : static_cast<std::int32_t>(s.request_id);
  });
  ASSERT_EQ(step.size(), 3u);
  for (const auto& e : step)
    EXPECT_EQ(e.logprobs, e.request_id == 2 ? -1 : static_cast<std::int32_t>(e.request_id)) << "the backend is told";
  const std::vector<std::int32_t> tokens{-1, 50, 60};
  const std::vector<gpu::token_logprobs> lp{{-1.0f, {}}, {-2.0f, {}}, {-3.0f, {{60, -3.0f}, {61, -4.0f}}}};
  auto fx = core.on_step_done(step, tokens, 5, lp);
  // 1 failed (no token), 2 did not ask: only 3's token carries them.
  ASSERT_EQ(fx.tokens.size(), 2u);
  ASSERT_EQ(fx.logprobs.size(), 1u);
  EXPECT_EQ(fx.tokens[fx.logprobs[0].first].request_id, 3u);
  EXPECT_EQ(fx.logprobs[0].second.logprob, -3.0f);
  EXPECT_EQ(fx.logprobs[0].second.top.size(), 2u);
  // Merged after other effects, they still point at their token.
  scheduler_effects before;
  before.tokens.push_back({9, 0, 1});
  before.logprobs.emplace_back(0, gpu::token_logprobs{-9.0f, {}});
  before.merge(std::move(fx));
  ASSERT_EQ(before.logprobs.size(), 2u);
  EXPECT_EQ(before.tokens[before.logprobs[1].first].request_id, 3u);
  EXPECT_EQ(before.logprobs[1].second.logprob, -3.0f);
  // A backend that gave none (sim) leaves them out.
  step = core.next_step(6);
  ASSERT_EQ(step.size(), 2u);
  fx = core.on_step_done(step, std::vector<std::int32_t>{51, 61}, 7);
  EXPECT_EQ(fx.tokens.size(), 2u);
  EXPECT_TRUE(fx.logprobs.empty());
}

TEST(scheduler_core, prompt_log_probabilities_go_with_the_first_token_of_the_requests_that_asked_only) {
  auto core = fcfs_core();
  auto step = three_in_one_prefill(core, {3, 4, 5}, [](request_spec& s) {
    s.prompt_logprobs = s.request_id == 2 ? -1 : static_cast<std::int32_t>(s.request_id);
  });
  ASSERT_EQ(step.size(), 3u);
  for (const auto& e : step)
    EXPECT_EQ(e.prompt_logprobs, e.request_id == 2 ? -1 : static_cast<std::int32_t>(e.request_id))
      << "the backend is told on the prefill";
  const std::vector<gpu::token_logprobs> two{{-1.0f, {}}, {-2.0f, {}}};
  const std::vector<std::vector<gpu::token_logprobs>> lp{two, {}, two};
  auto fx = core.on_step_done(step, std::vector<std::int32_t>{-1, 50, 60}, 5, {}, lp);
  // 1 failed (no token), 2 did not ask: only 3's first token carries them.
  ASSERT_EQ(fx.tokens.size(), 2u);
  ASSERT_EQ(fx.prompt_logprobs.size(), 1u);
  EXPECT_EQ(fx.tokens[fx.prompt_logprobs[0].first].request_id, 3u);
  EXPECT_EQ(fx.tokens[fx.prompt_logprobs[0].first].index, 0u);
  ASSERT_EQ(fx.prompt_logprobs[0].second.size(), 2u);
  EXPECT_EQ(fx.prompt_logprobs[0].second[1].logprob, -2.0f);
  // Merged after other effects, they still point at their token.
  scheduler_effects before;
  before.tokens.push_back({9, 0, 1});
  before.merge(std::move(fx));
  ASSERT_EQ(before.prompt_logprobs.size(), 1u);
  EXPECT_EQ(before.tokens[before.prompt_logprobs[0].first].request_id, 3u);
  // Decode steps ask for none, and none are passed on.
  step = core.next_step(6);
  ASSERT_EQ(step.size(), 2u);
  for (const auto& e : step)
    EXPECT_EQ(e.prompt_logprobs, -1);
  fx = core.on_step_done(step, std::vector<std::int32_t>{51, 61}, 7, {},
                         std::vector<std::vector<gpu::token_logprobs>>{two, two});
  EXPECT_EQ(fx.tokens.size(), 2u);
  EXPECT_TRUE(fx.prompt_logprobs.empty());
}

TEST(scheduler_core, each_step_adjusts_logits_by_the_bias_and_the_penalties_on_the_output_so_far) {
  auto core = fcfs_core();
  auto step = three_in_one_prefill(core, {3, 4}, [](request_spec& s) {
    if (s.request_id == 1)
      s.logit_bias = {{2, 1.5f}, {60, -3.0f}};
    if (s.request_id != 2) {
      s.presence_penalty = 0.5f;
      s.frequency_penalty = 0.25f;
    }
  });
  ASSERT_EQ(step.size(), 3u);
  auto adjust_of = [&step](std::uint64_t id) { return adjustments_of(step, id); };
  EXPECT_EQ(adjust_of(1), (adjustments{{2, 1.5f}, {60, -3.0f}})) << "no output yet: the bias alone";
  EXPECT_TRUE(adjust_of(2).empty());
  EXPECT_TRUE(adjust_of(3).empty());
  core.on_step_done(step, std::vector<std::int32_t>{60, 60, 50}, 5);
  step = core.next_step(6);
  // logit - count * frequency - presence (+ bias), in token order.
  EXPECT_EQ(adjust_of(1), (adjustments{{2, 1.5f}, {60, -3.75f}}));
  EXPECT_TRUE(adjust_of(2).empty()) << "no penalty, no bias";
  EXPECT_EQ(adjust_of(3), (adjustments{{50, -0.75f}}));
  core.on_step_done(step, std::vector<std::int32_t>{60, 1, 7}, 7);
  step = core.next_step(8);
  EXPECT_EQ(adjust_of(1), (adjustments{{2, 1.5f}, {60, -4.0f}}));
  EXPECT_EQ(adjust_of(3), (adjustments{{7, -0.75f}, {50, -0.75f}}));
}

/// A request's repeated marks in a step: the tokens, in order.
std::vector<std::int32_t> repeated_of(const std::vector<gpu::step_entry>& step, std::uint64_t id) {
  std::vector<std::int32_t> out;
  for (const auto& e : step)
    if (e.request_id == id)
      for (const auto& a : e.logit_adjust)
        if (a.repeated)
          out.push_back(a.token);
  return out;
}

TEST(scheduler_core, a_repetition_penalty_marks_the_prompts_and_the_outputs_tokens_and_min_p_goes_along) {
  auto core = fcfs_core();
  auto step = three_in_one_prefill(core, {9, 3, 4, 3}, [](request_spec& s) {
    if (s.request_id == 1) {
      s.repetition_penalty = 1.3f;
      s.logit_bias = {{2, 1.5f}, {4, -1.0f}};
      s.presence_penalty = 0.5f;
    }
    if (s.request_id == 2)
      s.min_p = 0.05f;
    if (s.request_id == 3)
      s.repetition_penalty = 0.8f;
  });
  ASSERT_EQ(step.size(), 3u);
  for (const auto& e : step) {
    EXPECT_EQ(e.repetition_penalty, e.request_id == 1 ? 1.3f : e.request_id == 3 ? 0.8f : 1.0f);
    EXPECT_EQ(e.min_p, e.request_id == 2 ? 0.05f : 0.0f);
  }
  auto adjust_of = [&step](std::uint64_t id) { return adjustments_of(step, id); };
  // The prompt's distinct tokens marked, merged with the bias in token order.
  EXPECT_EQ(adjust_of(1), (adjustments{{2, 1.5f}, {3, 0.0f}, {4, -1.0f}, {9, 0.0f}}));
  EXPECT_EQ(repeated_of(step, 1), (std::vector<std::int32_t>{3, 4, 9}));
  EXPECT_TRUE(adjust_of(2).empty()) << "min_p alone adjusts nothing";
  EXPECT_EQ(repeated_of(step, 3), (std::vector<std::int32_t>{3, 4, 9}));
  core.on_step_done(step, std::vector<std::int32_t>{60, 60, 3}, 5);
  step = core.next_step(6);
  // The output's tokens join them; the presence penalty on them only.
  EXPECT_EQ(adjust_of(1), (adjustments{{2, 1.5f}, {3, 0.0f}, {4, -1.0f}, {9, 0.0f}, {60, -0.5f}}));
  EXPECT_EQ(repeated_of(step, 1), (std::vector<std::int32_t>{3, 4, 9, 60}));
  EXPECT_TRUE(adjust_of(2).empty());
  EXPECT_EQ(repeated_of(step, 3), (std::vector<std::int32_t>{3, 4, 9})) << "3 again: marked once";
  core.on_step_done(step, std::vector<std::int32_t>{2, 7, 5}, 7);
  step = core.next_step(8);
  EXPECT_EQ(adjust_of(1), (adjustments{{2, 1.0f}, {3, 0.0f}, {4, -1.0f}, {9, 0.0f}, {60, -0.5f}}))
    << "the bias and the presence penalty on one token";
  EXPECT_EQ(repeated_of(step, 1), (std::vector<std::int32_t>{2, 3, 4, 9, 60}));
  EXPECT_EQ(repeated_of(step, 3), (std::vector<std::int32_t>{3, 4, 5, 9}));
}

TEST(scheduler_core, min_tokens_bans_eos_and_the_stop_tokens_until_then_in_token_order) {
  fake_tokenizer vocab;
  auto core = fcfs_core(&vocab);
  auto step = three_in_one_prefill(core, {3, 4}, [](request_spec& s) {
    s.min_tokens = 2;
    if (s.request_id == 1) {
      s.logit_bias = {{1, 0.5f}, {2, 100.0f}, {60, -3.0f}};
      s.stop_token_ids = {0, 61};
    }
    if (s.request_id == 2)
      s.ignore_eos = true;
    if (s.request_id == 3)
      s.min_tokens = 0;
  });
  ASSERT_EQ(step.size(), 3u);
  auto adjust_of = [&step](std::uint64_t id) { return adjustments_of(step, id); };
  constexpr float banned = -1e30f;
  EXPECT_EQ(adjust_of(1), (adjustments{{0, banned}, {1, 0.5f}, {2, banned}, {60, -3.0f}, {61, banned}}))
    << "the bias on eos gives way to the ban";
  EXPECT_TRUE(adjust_of(2).empty()) << "eos ignored: not banned";
  EXPECT_TRUE(adjust_of(3).empty()) << "no min_tokens";
  core.on_step_done(step, std::vector<std::int32_t>{60, 60, 50}, 5);
  step = core.next_step(6);
  EXPECT_EQ(adjust_of(1), (adjustments{{0, banned}, {1, 0.5f}, {2, banned}, {60, -3.0f}, {61, banned}}))
    << "one token of two";
  core.on_step_done(step, std::vector<std::int32_t>{60, 60, 50}, 7);
  step = core.next_step(8);
  EXPECT_EQ(adjust_of(1), (adjustments{{1, 0.5f}, {2, 100.0f}, {60, -3.0f}})) << "two tokens: nothing banned";
}

/// The last reported waiting count per adapter, as a consumer applying
/// scheduler_effects::queued in order ends up with.
std::map<std::uint32_t, std::uint32_t> queued_after(const scheduler_effects& fx,
                                                    std::map<std::uint32_t, std::uint32_t> seen = {}) {
  for (const auto& [adapter, waiting] : fx.queued)
    seen[adapter] = waiting;
  return seen;
}

request_spec spec_with_adapter(std::uint64_t id, std::uint32_t adapter) {
  request_spec spec;
  spec.request_id = id;
  spec.prompt = {3, 4};
  spec.max_new_tokens = 2;
  spec.adapter_id = adapter;
  spec.adapter_rank = adapter == 0 ? 0 : 8;
  spec.adapter_pages = adapter == 0 ? 0 : 2;
  spec.arrival_s = static_cast<double>(id);
  return spec;
}

TEST(scheduler_core_adapters, reports_waiting_requests_per_adapter) {
  scheduler_limits limits;
  limits.total_pages = 100;
  limits.max_running = 1;
  scheduler_core core{limits, std::make_unique<policies::fcfs_scheduling_policy>(), nullptr};
  for (auto [id, adapter] : {std::pair{1, 5}, {2, 5}, {3, 6}, {4, 5}, {5, 0}})
    ASSERT_EQ(core.submit(spec_with_adapter(id, adapter)), scheduler_core::submit_result::accepted);
  auto fx = core.admit(10); // admits request 1 (adapter 5)
  auto seen = queued_after(fx);
  EXPECT_EQ(seen, (std::map<std::uint32_t, std::uint32_t>{{5, 2}, {6, 1}}));
  // A cancelled waiting request leaves the count; reported on the next admit.
  core.cancel(3, 11);
  seen = queued_after(core.admit(12), seen);
  EXPECT_EQ(seen[6], 0u);
  // Nothing changed: nothing reported.
  EXPECT_TRUE(core.admit(13).queued.empty());
}

TEST(scheduler_core_adapters, an_adapter_that_cannot_load_ends_its_request_with_adapter_error) {
  scheduler_limits limits;
  limits.total_pages = 100;
  scheduler_core core{limits, std::make_unique<policies::fcfs_scheduling_policy>(), nullptr};
  ASSERT_EQ(core.submit(spec_with_adapter(1, 5)), scheduler_core::submit_result::accepted);
  ASSERT_EQ(core.submit(spec_with_adapter(2, 6)), scheduler_core::submit_result::accepted);
  auto fx = core.admit(3);
  ASSERT_EQ(fx.acquires.size(), 2u);
  core.on_pages(1, true, 3, {0});
  core.on_pages(2, true, 3, {1});
  fx = core.on_adapter(1, scheduler_core::adapter_grant::failed, 4);
  ASSERT_EQ(fx.finished.size(), 1u);
  EXPECT_EQ(fx.finished[0].reason, finish_reason::adapter_error);
  EXPECT_EQ(fx.release_pages, (std::vector<std::uint64_t>{1}));
  EXPECT_TRUE(fx.release_adapters.empty()); // the failed adapter was never pinned
  fx = core.on_adapter(2, scheduler_core::adapter_grant::granted, 4);
  EXPECT_TRUE(fx.finished.empty());
  EXPECT_EQ(core.state_of(2), request_state::ready);
  EXPECT_EQ(core.in_system(), 1u);
}

/// Admits everything waiting, and aborts / squashes what it is told to next.
class abort_squash_policy final : public policies::scheduling_policy {
public:
  policies::schedule_decision schedule(const policies::schedule_input& in) override {
    policies::schedule_decision d;
    d.abort = std::exchange(abort, {});
    d.squash = std::exchange(squash, {});
    for (const auto& w : in.waiting)
      if (std::find(d.abort.begin(), d.abort.end(), w.request_id) == d.abort.end())
        d.admit.push_back(w.request_id);
    seen_running = in.running.size();
    return d;
  }
  std::string_view name() const noexcept override { return "abort_squash"; }
  std::vector<std::uint64_t> abort, squash;
  std::size_t seen_running = 0;
};

struct squash_fixture {
  squash_fixture() {
    scheduler_limits limits;
    limits.total_pages = 100;
    auto p = std::make_unique<abort_squash_policy>();
    policy = p.get();
    core = std::make_unique<scheduler_core>(limits, std::move(p), nullptr);
  }
  void submit(std::uint64_t id) {
    request_spec spec = spec_with_adapter(id, 0);
    spec.max_new_tokens = 4;
    ASSERT_EQ(core->submit(spec), scheduler_core::submit_result::accepted);
  }
  abort_squash_policy* policy;
  std::unique_ptr<scheduler_core> core;
};

TEST(scheduler_core_decisions, aborted_waiting_requests_finish_without_running) {
  squash_fixture f;
  f.submit(1);
  f.submit(2);
  f.policy->abort = {1, 99};
  auto fx = f.core->admit(5);
  ASSERT_EQ(fx.finished.size(), 1u);
  EXPECT_EQ(fx.finished[0].request_id, 1u);
  EXPECT_EQ(fx.finished[0].reason, finish_reason::aborted);
  EXPECT_TRUE(fx.release_pages.empty()) << "it held nothing";
  ASSERT_EQ(fx.reserves.size(), 1u);
  EXPECT_EQ(fx.reserves[0].request_id, 2u);
  EXPECT_EQ(f.core->aborted(), 1u);
  EXPECT_EQ(f.core->in_system(), 1u);
}

TEST(scheduler_core_decisions, a_squashed_request_recomputes_and_continues_its_output) {
  squash_fixture f;
  f.submit(1);
  f.core->admit(1);
  f.core->on_pages(1, true, 1, {0});
  auto step = f.core->next_step(1);
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0].new_tokens, 2u);
  auto fx = f.core->on_step_done(step, std::vector<std::int32_t>{50}, 2);
  step = f.core->next_step(2);
  fx = f.core->on_step_done(step, std::vector<std::int32_t>{51}, 3);
  ASSERT_EQ(fx.tokens.size(), 1u);
  // Squash it between steps (the policy runs when something waits): pages
  // back, waiting again; admitted again on the next round.
  f.submit(2);
  f.policy->squash = {1};
  fx = f.core->admit(4);
  EXPECT_EQ(fx.release_pages, (std::vector<std::uint64_t>{1}));
  EXPECT_EQ(f.core->squashed(), 1u);
  EXPECT_EQ(f.core->state_of(1), request_state::waiting);
  fx = f.core->admit(4);
  ASSERT_EQ(fx.reserves.size(), 1u);
  EXPECT_EQ(fx.reserves[0].request_id, 1u);
  f.core->on_pages(1, true, 4, {7});
  f.core->on_pages(2, true, 4, {8});
  step = f.core->next_step(5);
  ASSERT_EQ(step.size(), 2u);
  std::erase_if(step, [](const auto& e) { return e.request_id != 1; });
  // The prefill recomputes prompt + output so far and produces index 2.
  EXPECT_EQ(step[0].tokens, (std::vector<std::int32_t>{3, 4, 50, 51}));
  EXPECT_EQ(step[0].new_tokens, 4u);
  EXPECT_EQ(step[0].context_tokens, 0u);
  EXPECT_EQ(step[0].output_index, 2u);
  EXPECT_EQ(step[0].pages, (std::vector<std::uint32_t>{7}));
  fx = f.core->on_step_done(step, std::vector<std::int32_t>{52}, 6);
  ASSERT_EQ(fx.tokens.size(), 1u);
  EXPECT_EQ(fx.tokens[0].index, 2u);
  f.core->cancel(2, 6);
  step = f.core->next_step(7);
  std::erase_if(step, [](const auto& e) { return e.request_id != 1; });
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0].new_tokens, 1u);
  EXPECT_EQ(step[0].context_tokens, 4u);
  fx = f.core->on_step_done(step, std::vector<std::int32_t>{53}, 8);
  ASSERT_EQ(fx.finished.size(), 1u);
  EXPECT_EQ(fx.finished[0].reason, finish_reason::length);
  EXPECT_EQ(fx.finished[0].completion_tokens, 4u);
}

TEST(scheduler_core_decisions, a_squash_during_its_step_waits_for_the_step_and_drops_its_token) {
  squash_fixture f;
  f.submit(1);
  f.core->admit(1);
  f.core->on_pages(1, true, 1, {0});
  auto step = f.core->next_step(1);
  f.submit(2);
  f.policy->squash = {1};
  auto fx = f.core->admit(1);
  EXPECT_TRUE(fx.release_pages.empty()) << "not while its step runs";
  fx = f.core->on_step_done(step, std::vector<std::int32_t>{50}, 2);
  EXPECT_TRUE(fx.tokens.empty()) << "the squashed step's token is recomputed later";
  EXPECT_EQ(fx.release_pages, (std::vector<std::uint64_t>{1}));
  EXPECT_EQ(f.core->state_of(1), request_state::waiting);
}

} // namespace
} // namespace troupe
