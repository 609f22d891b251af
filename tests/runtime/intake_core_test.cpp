// Tests for runtime/intake_core with a sim_backend (llama-2-7b on H100-80GB)
// and a two-adapter catalog: every refused frame gets one error with the
// right code and echoed id; a good generate becomes a submit spec; submit
// results, progress and finishes become accepted/token/done frames, once
// each; ids free up after the terminal reply; gone peers get nothing more.
#include "runtime/intake_core.hpp"

#include "gpu/sim_backend.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace troupe {
namespace {

static_assert(std::is_nothrow_move_constructible_v<outbound_frame>);
static_assert(std::is_nothrow_move_constructible_v<intake_actions>);
static_assert(std::is_nothrow_move_constructible_v<progress_batch>);
static_assert(std::is_trivially_copyable_v<token_event>);
static_assert(std::is_trivially_copyable_v<finish_event>);

using wire::error_code;
using sr = scheduler_core::submit_result;

std::shared_ptr<const gpu::sim_backend> make_backend() {
  return std::make_shared<const gpu::sim_backend>(*gpu::find_model_preset("llama-2-7b"),
                                                  *gpu::find_gpu_spec("H100-80GB"), 5);
}

/// "sql" (rank 8) and "chat" (rank 16), sized like llama-2-7b LoRA weights in
/// pages of 16 tokens of KV cache.
std::shared_ptr<const adapter_catalog> make_catalog() {
  const auto shape = *gpu::find_model_preset("llama-2-7b");
  return std::make_shared<const adapter_catalog>(
    std::vector<adapter_spec>{{"sql", 8, ""}, {"chat", 16, ""}}, adapter_generate_options{},
    [shape](std::uint32_t rank) { return shape.lora_adapter_bytes(rank); },
    shape.kv_bytes_per_token() * 16);
}

intake_limits small_limits() {
  intake_limits l;
  l.max_pending = 3;
  l.max_context = 64;
  l.base_seed = 1234;
  l.parse.max_frame_bytes = 4096;
  return l;
}

/// The parsed reply of a frame (fails the test for anything else).
wire::reply parsed(const outbound_frame& f) {
  auto r = wire::parse_reply(f.payload);
  if (auto* e = std::get_if<wire::parse_error>(&r)) {
    ADD_FAILURE() << "not a reply: " << f.payload << ": " << e->message;
    return wire::error_reply{};
  }
  return std::get<wire::reply>(r);
}

template <class T>
T as(const outbound_frame& f) {
  auto r = parsed(f);
  if (auto* x = std::get_if<T>(&r))
    return *x;
  ADD_FAILURE() << "unexpected reply kind: " << f.payload;
  return T{};
}

class intake_core_test : public ::testing::Test {
protected:
  intake_core_test() : intake_core_test(small_limits()) {}
  explicit intake_core_test(intake_limits l)
    : backend(make_backend()), catalog(make_catalog()), core(l, *catalog, backend) {}

  /// A generate frame with `id` and extra JSON fields.
  static std::string gen(const std::string& id, const std::string& extra = "") {
    return R"({"type":"generate","id":")" + id + R"(","prompt":"hi")"
           + (extra.empty() ? "" : "," + extra) + "}";
  }

  /// Sends a good generate and returns the internal id it was given.
  std::uint64_t submit(const std::string& peer, const std::string& id,
                       const std::string& extra = "") {
    auto a = core.on_frame(peer, gen(id, extra), now += 1);
    EXPECT_TRUE(a.replies.empty()) << (a.replies.empty() ? "" : a.replies[0].payload);
    EXPECT_TRUE(a.submit.has_value());
    return a.submit ? a.submit->request_id : 0;
  }

  /// Sends a frame that must be refused with one error reply.
  void expect_error(const std::string& peer, const std::string& frame, error_code code,
                    const std::string& id) {
    SCOPED_TRACE(frame.substr(0, 200));
    const auto rejected = core.rejected();
    const auto in_flight = core.in_flight();
    auto a = core.on_frame(peer, frame, now += 1);
    ASSERT_EQ(a.replies.size(), 1u);
    EXPECT_EQ(a.replies[0].peer, peer);
    const auto e = as<wire::error_reply>(a.replies[0]);
    EXPECT_EQ(e.code, code) << a.replies[0].payload;
    EXPECT_EQ(e.id, id);
    EXPECT_FALSE(e.message.empty());
    EXPECT_FALSE(a.submit.has_value());
    EXPECT_FALSE(a.cancel.has_value());
    EXPECT_EQ(a.ask, intake_actions::query::none);
    EXPECT_EQ(core.rejected(), rejected + 1);
    EXPECT_EQ(core.in_flight(), in_flight);
  }

  std::shared_ptr<const gpu::sim_backend> backend;
  std::shared_ptr<const adapter_catalog> catalog;
  intake_core core;
  double now = 0;
};

// -- refused frames -------------------------------------------------------------------

struct bad_frame {
  std::string name;
  std::string frame;
  error_code code;
  std::string id; ///< echoed
};

TEST_F(intake_core_test, each_bad_frame_gets_one_error_with_code_and_id) {
  const std::string prompt_60(60, 'x'); // 60 byte tokens
  std::string tokens_60 = "[";
  for (int i = 0; i < 60; ++i)
    tokens_60 += (i ? "," : "") + std::to_string(300 + i);
  tokens_60 += "]";
  const std::vector<bad_frame> table{
    {"not JSON", "hello", error_code::bad_request, ""},
    {"truncated JSON", R"({"type":"generate","id":"t1")", error_code::bad_request, ""},
    {"not an object", "[1,2]", error_code::bad_request, ""},
    {"unknown type", R"({"type":"launch","id":"u1"})", error_code::bad_request, "u1"},
    {"missing prompt", R"({"type":"generate","id":"m1"})", error_code::bad_request, "m1"},
    {"token id outside the vocabulary", R"({"type":"generate","id":"v1","prompt_tokens":[32000]})",
     error_code::bad_request, "v1"},
    {"max_tokens above max_context", gen("k1", R"("max_tokens":65)"), error_code::bad_request, "k1"},
    {"frame too large", gen("big", R"("stop":[")" + std::string(5000, 'a') + R"("])"),
     error_code::frame_too_large, ""},
    {"unknown adapter", gen("a1", R"("adapter":"nope")"), error_code::unknown_adapter, "a1"},
    {"adapter names are exact", gen("a2", R"("adapter":"SQL")"), error_code::unknown_adapter, "a2"},
    {"text prompt too long", R"({"type":"generate","id":"p1","prompt":")" + prompt_60
       + R"(","max_tokens":5})", error_code::prompt_too_long, "p1"},
    {"token prompt too long", R"({"type":"generate","id":"p2","prompt_tokens":)" + tokens_60
       + R"(,"max_tokens":5})", error_code::prompt_too_long, "p2"},
    {"max_tokens alone too long", gen("p3", R"("max_tokens":63)"), error_code::prompt_too_long, "p3"},
    {"cancel of an unknown id", R"({"type":"cancel","id":"c1"})", error_code::unknown_request, "c1"},
  };
  for (const auto& c : table) {
    SCOPED_TRACE(c.name);
    expect_error("peer-A", c.frame, c.code, c.id);
  }
  EXPECT_EQ(core.rejected(), table.size());
  EXPECT_EQ(core.in_flight(), 0u);
  EXPECT_EQ(core.accepted(), 0u);
}

TEST_F(intake_core_test, prompt_exactly_at_max_context_is_taken) {
  const std::string prompt_59(59, 'x');
  auto a = core.on_frame("p", R"({"type":"generate","id":"ok","prompt":")" + prompt_59
                                 + R"(","max_tokens":5})",
                         1.0);
  EXPECT_TRUE(a.replies.empty());
  ASSERT_TRUE(a.submit.has_value());
  EXPECT_EQ(a.submit->prompt.size() + a.submit->max_new_tokens, 64u);
}

TEST_F(intake_core_test, fit_context_cuts_max_tokens_to_what_the_context_leaves) {
  const std::string prompt_60(60, 'x');
  auto submitted = [&](const std::string& id, const std::string& prompt, const std::string& fields) {
    auto a = core.on_frame("p", R"({"type":"generate","id":")" + id + R"(","prompt":")" + prompt + R"(",)" + fields + "}",
                           1.0);
    EXPECT_TRUE(a.replies.empty()) << id;
    EXPECT_TRUE(a.submit.has_value()) << id;
    if (a.submit) // the scheduler's refusal frees its place (3 may be pending)
      (void)core.on_submit_result(a.submit->request_id, scheduler_core::submit_result::queue_full);
    return a.submit.value_or(request_spec{});
  };
  // No max_tokens: all the context leaves; the spec says so to the scheduler.
  auto s = submitted("f1", prompt_60, R"("fit_context":true)");
  EXPECT_EQ(s.max_new_tokens, 4u);
  EXPECT_TRUE(s.fit_context);
  EXPECT_EQ(s.predicted_tokens, 4u);
  // A max_tokens that would not fit: cut, with min_tokens; one that fits stays.
  s = submitted("f2", prompt_60, R"("fit_context":true,"max_tokens":30,"min_tokens":10)");
  EXPECT_EQ(s.max_new_tokens, 4u);
  EXPECT_EQ(s.min_tokens, 4u);
  s = submitted("f3", "Hi", R"("fit_context":true,"max_tokens":9)");
  EXPECT_EQ(s.max_new_tokens, 9u);
  s = submitted("f4", "Hi", R"("fit_context":true,"max_tokens":100000)");
  EXPECT_EQ(s.max_new_tokens, 62u) << "past the server's limit: cut too";
  EXPECT_FALSE(submitted("f5", "Hi", R"("max_tokens":9)").fit_context);
  // Only a prompt that fills the context is refused, saying so.
  expect_error("p", R"({"type":"generate","id":"f6","fit_context":true,"prompt":")" + std::string(64, 'x') + R"("})",
               error_code::prompt_too_long, "f6");
}

TEST_F(intake_core_test, tokenize_gives_the_prompt_a_generate_would_run_and_detokenize_its_text) {
  const std::string text = "The river runs deep";
  auto g = core.on_frame("p", R"({"type":"generate","id":"g","prompt":")" + text + R"("})", 1.0);
  ASSERT_TRUE(g.submit.has_value());
  auto t = core.on_frame("p", R"({"type":"tokenize","id":"t","prompt":")" + text + R"("})", 1.0);
  EXPECT_FALSE(t.submit.has_value()) << "nothing is run";
  ASSERT_EQ(t.replies.size(), 1u);
  EXPECT_EQ(t.replies[0].peer, "p");
  const auto tok = as<wire::tokenize_reply>(t.replies[0]);
  EXPECT_EQ(tok.id, "t");
  EXPECT_EQ(tok.tokens, g.submit->prompt);
  EXPECT_EQ(tok.max_context, 64u);
  const auto ids = std::string(wire::to_json(wire::request{wire::detokenize_request{"d", tok.tokens}}));
  auto d = core.on_frame("p", ids, 1.0);
  ASSERT_EQ(d.replies.size(), 1u);
  const auto back = as<wire::detokenize_reply>(d.replies[0]);
  EXPECT_EQ(back.id, "d");
  std::string expected;
  for (const auto id : tok.tokens)
    expected += backend->vocab().decode(id);
  EXPECT_EQ(back.text, expected);
  EXPECT_NE(back.text.find("river runs deep"), std::string::npos) << back.text;
  // Past the vocabulary: refused by the parser, naming the field.
  auto bad = core.on_frame("p", R"({"type":"detokenize","id":"d2","tokens":[40000]})", 1.0);
  ASSERT_EQ(bad.replies.size(), 1u);
  EXPECT_EQ(as<wire::error_reply>(bad.replies[0]).code, error_code::bad_request);
}

TEST_F(intake_core_test, duplicate_id_while_in_flight_is_refused_per_peer) {
  const auto first = submit("peer-A", "r1");
  expect_error("peer-A", gen("r1"), error_code::duplicate_id, "r1");
  // The first request is unaffected, and the same id from another peer is
  // another request.
  EXPECT_EQ(core.in_flight(), 1u);
  const auto other = submit("peer-B", "r1");
  EXPECT_NE(other, first);
  EXPECT_EQ(core.in_flight(), 2u);
}

TEST_F(intake_core_test, overloaded_when_max_pending_requests_are_in_flight) {
  submit("p", "r1");
  submit("p", "r2");
  submit("q", "r3");
  expect_error("p", gen("r4"), error_code::overloaded, "r4");
  expect_error("z", gen("r1"), error_code::overloaded, "r1");
  // One finishes: room again.
  core.on_progress({{}, {{1, static_cast<std::uint8_t>(finish_reason::length), 2, 1, 0, 0, 0}}, {}, {}});
  EXPECT_EQ(core.in_flight(), 2u);
  submit("p", "r4");
}

/// A sim backend that can be told it runs nothing more (as a poisoned CUDA
/// context makes the cuda backend), or that it computes log-probabilities
/// (the intake only passes them on).
class breakable_backend final : public gpu::executor_backend {
public:
  gpu::step_result run_step(std::span<const gpu::step_entry> b) override { return sim_->run_step(b); }
  double transfer_seconds(std::uint64_t bytes) const override { return sim_->transfer_seconds(bytes); }
  gpu::adapter_load load_adapter(std::uint32_t id, const std::string& path, std::uint64_t bytes,
                                 std::span<const std::uint32_t> pages) override {
    return sim_->load_adapter(id, path, bytes, pages);
  }
  void drop_adapter(std::uint32_t id) override { sim_->drop_adapter(id); }
  void forget_adapter(std::uint32_t id) override { sim_->forget_adapter(id); }
  gpu::swap_result swap_pages(gpu::swap_direction dir, std::span<const std::uint32_t> device_pages,
                              std::span<const std::uint32_t> host_pages, std::uint64_t bytes) override {
    return sim_->swap_pages(dir, device_pages, host_pages, bytes);
  }
  gpu::page_blob read_pages(bool host_pool, std::span<const std::uint32_t> pages, std::uint64_t bytes) override {
    return sim_->read_pages(host_pool, pages, bytes);
  }
  gpu::swap_result write_host_pages(std::span<const std::uint32_t> host_pages, const std::string& data,
                                    std::uint64_t bytes) override {
    return sim_->write_host_pages(host_pages, data, bytes);
  }
  const gpu::tokenizer& vocab() const override { return sim_->vocab(); }
  std::string name() const override { return "breakable"; }
  std::string broken() const override { return why; }
  bool computes_logprobs() const override { return logprobs; }
  bool computes_prompt_logprobs() const override { return logprobs; }

  std::string why;
  bool logprobs = false;

private:
  std::shared_ptr<gpu::sim_backend> sim_ = std::make_shared<gpu::sim_backend>(
    *gpu::find_model_preset("llama-2-7b"), *gpu::find_gpu_spec("H100-80GB"), 5);
};

TEST(intake_core_broken_backend, refuses_new_requests_and_fails_health_checks_saying_why) {
  auto backend = std::make_shared<breakable_backend>();
  const auto catalog = make_catalog();
  intake_core core{small_limits(), *catalog, backend};
  const auto health = [&] {
    auto h = core.on_frame("p", R"({"type":"health","id":"h"})", 1.0);
    EXPECT_EQ(h.replies.size(), 1u);
    return h.replies.empty() ? std::string{} : as<wire::health_reply>(h.replies[0]).status;
  };
  EXPECT_EQ(health(), "ok");
  auto a = core.on_frame("p", R"({"type":"generate","id":"before","prompt":"hi"})", 2.0);
  EXPECT_TRUE(a.submit.has_value()) << "a working backend takes requests";
  backend->why = "CUDA context on device 0: cudaErrorIllegalAddress";
  EXPECT_EQ(health(), "failed");
  auto b = core.on_frame("p", R"({"type":"generate","id":"after","prompt":"hi"})", 3.0);
  EXPECT_FALSE(b.submit.has_value());
  ASSERT_EQ(b.replies.size(), 1u);
  const auto e = as<wire::error_reply>(b.replies[0]);
  EXPECT_EQ(e.id, "after");
  EXPECT_EQ(e.code, error_code::internal);
  EXPECT_NE(e.message.find("cudaErrorIllegalAddress"), std::string::npos) << e.message;
  core.start_drain();
  EXPECT_EQ(health(), "failed") << "failed outranks draining";
}

TEST_F(intake_core_test, shutting_down_after_start_drain) {
  const auto id = submit("p", "r1");
  (void)core.on_submit_result(id, scheduler_core::submit_result::accepted);
  core.start_drain();
  EXPECT_TRUE(core.draining());
  expect_error("p", gen("r2"), error_code::shutting_down, "r2");
  // Health says so; cancels of in-flight requests still work.
  auto h = core.on_frame("p", R"({"type":"health","id":"h"})", 9.0);
  ASSERT_EQ(h.replies.size(), 1u);
  EXPECT_EQ(as<wire::health_reply>(h.replies[0]).status, "draining");
  auto c = core.on_frame("p", R"({"type":"cancel","id":"r1"})", 10.0);
  EXPECT_TRUE(c.replies.empty());
  ASSERT_TRUE(c.cancel.has_value());
  EXPECT_EQ(*c.cancel, id);
}

// -- good frames --------------------------------------------------------------------

TEST_F(intake_core_test, a_good_generate_becomes_a_submit_spec) {
  auto a = core.on_frame(
    "peer-A",
    R"({"type":"generate","id":"g1","prompt":"Hello!","adapter":"chat","max_tokens":7,)"
    R"("temperature":0.5,"top_p":0.9,"top_k":40,"seed":77,"stop":["\n","END"],"priority":3})",
    12.5);
  EXPECT_TRUE(a.replies.empty());
  ASSERT_TRUE(a.submit.has_value());
  const auto& s = *a.submit;
  const auto* chat = catalog->find("chat");
  ASSERT_NE(chat, nullptr);
  EXPECT_EQ(s.request_id, 1u);
  EXPECT_EQ(s.prompt, backend->vocab().encode("Hello!"));
  EXPECT_EQ(s.prompt.size(), 6u);
  EXPECT_EQ(s.max_new_tokens, 7u);
  EXPECT_EQ(s.adapter_id, chat->id);
  EXPECT_EQ(s.adapter_id, 2u);
  EXPECT_EQ(s.adapter_rank, 16u);
  EXPECT_EQ(s.adapter_pages, chat->pages);
  EXPECT_GT(s.adapter_pages, 0u);
  EXPECT_EQ(s.seed, 77u);
  EXPECT_FLOAT_EQ(s.temperature, 0.5f);
  EXPECT_FLOAT_EQ(s.top_p, 0.9f);
  EXPECT_EQ(s.top_k, 40);
  EXPECT_EQ(s.priority, 3);
  EXPECT_EQ(s.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_EQ(s.predicted_tokens, 7u);
  EXPECT_EQ(s.arrival_s, 12.5);
  EXPECT_EQ(core.in_flight(), 1u);
  EXPECT_EQ(core.accepted(), 0u); // not until the scheduler says so
}

TEST_F(intake_core_test, base_model_and_token_prompts) {
  auto a = core.on_frame("p", R"({"type":"generate","id":"g","prompt_tokens":[1,500,31999],"adapter":""})",
                         1.0);
  ASSERT_TRUE(a.submit.has_value());
  EXPECT_EQ(a.submit->prompt, (std::vector<std::int32_t>{1, 500, 31999}));
  EXPECT_EQ(a.submit->adapter_id, 0u);
  EXPECT_EQ(a.submit->adapter_rank, 0u);
  EXPECT_EQ(a.submit->adapter_pages, 0u);
  EXPECT_EQ(a.submit->max_new_tokens, 16u); // the protocol's default
}

TEST_F(intake_core_test, internal_ids_count_up_and_seeds_derive_from_them) {
  const auto s1 = core.on_frame("p", gen("a"), 1.0).submit;
  const auto s2 = core.on_frame("p", gen("b"), 2.0).submit;
  ASSERT_TRUE(s1 && s2);
  EXPECT_EQ(s1->request_id, 1u);
  EXPECT_EQ(s2->request_id, 2u);
  EXPECT_NE(s1->seed, s2->seed);
  // Same base seed and id: same seed; another base seed: another one.
  intake_core same{small_limits(), *catalog, backend};
  auto other_limits = small_limits();
  other_limits.base_seed = 4321;
  intake_core other{other_limits, *catalog, backend};
  const auto t1 = same.on_frame("x", gen("zz"), 5.0).submit;
  const auto u1 = other.on_frame("x", gen("a"), 1.0).submit;
  ASSERT_TRUE(t1 && u1);
  EXPECT_EQ(t1->seed, s1->seed);
  EXPECT_NE(u1->seed, s1->seed);
  // A refused frame uses up no id.
  core.on_frame("p", gen("c", R"("adapter":"nope")"), 3.0);
  const auto s3 = core.on_frame("p", gen("d"), 4.0).submit;
  ASSERT_TRUE(s3);
  EXPECT_EQ(s3->request_id, 3u);
}

TEST_F(intake_core_test, queries_are_handed_to_the_shell) {
  auto h = core.on_frame("p", R"({"type":"health","id":"h1"})", 1.0);
  ASSERT_EQ(h.replies.size(), 1u);
  EXPECT_EQ(h.replies[0].peer, "p");
  const auto hr = as<wire::health_reply>(h.replies[0]);
  EXPECT_EQ(hr.id, "h1");
  EXPECT_EQ(hr.status, "ok");
  auto s = core.on_frame("p", R"({"type":"stats","id":"s1"})", 2.0);
  EXPECT_TRUE(s.replies.empty());
  EXPECT_EQ(s.ask, intake_actions::query::stats);
  EXPECT_EQ(s.query_id, "s1");
  auto l = core.on_frame("p", R"({"type":"list_adapters","id":"l1"})", 3.0);
  EXPECT_TRUE(l.replies.empty());
  EXPECT_EQ(l.ask, intake_actions::query::adapters);
  EXPECT_EQ(l.query_id, "l1");
  EXPECT_EQ(core.rejected(), 0u);
}

TEST_F(intake_core_test, cancel_of_an_in_flight_request_names_its_internal_id) {
  const auto id = submit("p", "r1");
  (void)core.on_submit_result(id, scheduler_core::submit_result::accepted);
  auto c = core.on_frame("p", R"({"type":"cancel","id":"r1"})", 5.0);
  EXPECT_TRUE(c.replies.empty());
  ASSERT_TRUE(c.cancel.has_value());
  EXPECT_EQ(*c.cancel, id);
  // Another peer cannot cancel it.
  expect_error("q", R"({"type":"cancel","id":"r1"})", error_code::unknown_request, "r1");
  EXPECT_EQ(core.in_flight(), 1u); // still in flight until the scheduler finishes it
  EXPECT_TRUE(core.take_due_cancels().empty());
}

TEST_F(intake_core_test, a_cancel_before_the_scheduler_took_the_request_waits_for_it) {
  // Sent at once, the cancel could pass the submission on its way to the
  // scheduler (through the classifier) and find nothing there: it is held
  // until the scheduler has taken the request, then due once.
  const auto id = submit("p", "r1");
  auto c = core.on_frame("p", R"({"type":"cancel","id":"r1"})", 5.0);
  EXPECT_TRUE(c.replies.empty());
  EXPECT_FALSE(c.cancel.has_value());
  EXPECT_TRUE(core.take_due_cancels().empty());
  const auto out = core.on_submit_result(id, scheduler_core::submit_result::accepted);
  ASSERT_EQ(out.size(), 1u); // accepted: its done (cancelled) follows
  EXPECT_EQ(core.take_due_cancels(), (std::vector<std::uint64_t>{id}));
  EXPECT_TRUE(core.take_due_cancels().empty());
  // A refused submission ends the request: nothing to cancel.
  const auto refused = submit("p", "r2");
  (void)core.on_frame("p", R"({"type":"cancel","id":"r2"})", 6.0);
  (void)core.on_submit_result(refused, scheduler_core::submit_result::queue_full);
  EXPECT_TRUE(core.take_due_cancels().empty());
  // A peer gone: its taken requests are cancelled at once, the others once taken.
  const auto taken = submit("q", "s1");
  (void)core.on_submit_result(taken, scheduler_core::submit_result::accepted);
  const auto waiting = submit("q", "s2");
  EXPECT_EQ(core.on_peer_gone("q"), (std::vector<std::uint64_t>{taken}));
  EXPECT_TRUE(core.on_submit_result(waiting, scheduler_core::submit_result::accepted).empty()); // (no one to tell)
  EXPECT_EQ(core.take_due_cancels(), (std::vector<std::uint64_t>{waiting}));
}

// -- submit results --------------------------------------------------------------------

TEST_F(intake_core_test, accepted_is_sent_once) {
  const auto id = submit("peer-A", "r1");
  auto out = core.on_submit_result(id, sr::accepted);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].peer, "peer-A");
  const auto acc = as<wire::accepted_reply>(out[0]);
  EXPECT_EQ(acc.id, "r1");
  EXPECT_EQ(acc.prompt_tokens, 2u); // "hi"
  EXPECT_TRUE(core.on_submit_result(id, sr::accepted).empty());
  EXPECT_EQ(core.accepted(), 1u);
  EXPECT_EQ(core.in_flight(), 1u);
  EXPECT_TRUE(core.on_submit_result(999, sr::accepted).empty()); // unknown id
}

TEST_F(intake_core_test, refused_submissions_map_to_errors_and_free_the_id) {
  struct refusal_case {
    sr result;
    error_code code;
  };
  const std::vector<refusal_case> table{
    {sr::queue_full, error_code::overloaded},
    {sr::too_large, error_code::prompt_too_long},
    {sr::duplicate, error_code::internal},
  };
  for (const auto& c : table) {
    const auto id = submit("p", "r1");
    auto out = core.on_submit_result(id, c.result);
    ASSERT_EQ(out.size(), 1u);
    const auto e = as<wire::error_reply>(out[0]);
    EXPECT_EQ(e.code, c.code);
    EXPECT_EQ(e.id, "r1");
    EXPECT_EQ(core.in_flight(), 0u);
    // Nothing more for it, and the id is free again.
    EXPECT_TRUE(core.on_submit_result(id, c.result).empty());
    EXPECT_TRUE(core.on_progress({{{id, 0, 400}}, {{id, 0, 2, 1, 0, 0, 0}}, {}, {}}).empty());
  }
  EXPECT_EQ(core.accepted(), 0u);
}

TEST_F(intake_core_test, submit_failed_sends_internal_once) {
  const auto id = submit("p", "r1");
  auto out = core.on_submit_failed(id, "scheduler down");
  ASSERT_EQ(out.size(), 1u);
  const auto e = as<wire::error_reply>(out[0]);
  EXPECT_EQ(e.code, error_code::internal);
  EXPECT_EQ(e.id, "r1");
  EXPECT_NE(e.message.find("scheduler down"), std::string::npos);
  EXPECT_TRUE(core.on_submit_failed(id, "again").empty());
  EXPECT_EQ(core.in_flight(), 0u);
}

// -- progress ------------------------------------------------------------------------

finish_event fin(std::uint64_t id, finish_reason why, std::uint32_t prompt, std::uint32_t completion,
                 std::uint32_t cached = 0) {
  return {id, static_cast<std::uint8_t>(why), prompt, completion, 1.5, 2.5, 4.0, cached};
}

std::string text_of(const gpu::tokenizer& v, const std::vector<std::int32_t>& toks) {
  std::string s;
  for (auto t : toks)
    s += v.decode(t);
  return s;
}

TEST_F(intake_core_test, streaming_requests_get_token_chunks_then_a_bare_done) {
  const auto id = submit("peer-S", "s1", R"("stream":true)");
  ASSERT_EQ(core.on_submit_result(id, sr::accepted).size(), 1u);
  const std::vector<std::int32_t> w1{3 + 'H', 3 + 'i', 400};
  auto out = core.on_progress({{{id, 0, w1[0]}, {id, 1, w1[1]}, {id, 2, w1[2]}}, {}, {}, {}});
  ASSERT_EQ(out.size(), 1u); // one chunk, no second accepted
  EXPECT_EQ(out[0].peer, "peer-S");
  auto t = as<wire::token_reply>(out[0]);
  EXPECT_EQ(t.id, "s1");
  EXPECT_EQ(t.index, 0u);
  EXPECT_EQ(t.tokens, w1);
  EXPECT_EQ(t.text, text_of(backend->vocab(), w1));
  EXPECT_EQ(t.text.substr(0, 2), "Hi");
  out = core.on_progress({{{id, 3, 401}}, {fin(id, finish_reason::length, 2, 4, 1)}, {}, {}});
  ASSERT_EQ(out.size(), 2u);
  t = as<wire::token_reply>(out[0]);
  EXPECT_EQ(t.index, 3u);
  EXPECT_EQ(t.tokens, std::vector<std::int32_t>{401});
  const auto d = as<wire::done_reply>(out[1]);
  EXPECT_EQ(d.id, "s1");
  EXPECT_EQ(d.finish_reason, "length");
  EXPECT_EQ(d.prompt_tokens, 2u);
  EXPECT_EQ(d.completion_tokens, 4u);
  EXPECT_EQ(d.cached_tokens, 1u);
  EXPECT_DOUBLE_EQ(d.time.queue_ms, 1.5);
  EXPECT_DOUBLE_EQ(d.time.ttft_ms, 2.5);
  EXPECT_DOUBLE_EQ(d.time.e2e_ms, 4.0);
  EXPECT_FALSE(d.tokens.has_value());
  EXPECT_FALSE(d.text.has_value());
  EXPECT_EQ(core.in_flight(), 0u);
  // Nothing after the terminal reply.
  EXPECT_TRUE(core.on_progress({{{id, 4, 402}}, {fin(id, finish_reason::length, 2, 5)}, {}, {}}).empty());
}

TEST_F(intake_core_test, streamed_chunks_end_on_character_boundaries_and_the_last_takes_the_rest) {
  // Byte tokens split characters: "é" is C3 A9, "你" E4 BD A0, "😀" F0 9F 98 80.
  const auto id = submit("peer-U", "u1", R"("stream":true)");
  ASSERT_EQ(core.on_submit_result(id, sr::accepted).size(), 1u);
  auto byte = [](unsigned b) { return static_cast<std::int32_t>(3 + b); };
  auto chunk_text = [&](std::vector<token_event> toks, std::vector<finish_event> fins = {}) {
    auto out = core.on_progress({std::move(toks), std::move(fins), {}, {}});
    EXPECT_GE(out.size(), 1u);
    return out.empty() ? std::string{} : as<wire::token_reply>(out[0]).text;
  };
  EXPECT_EQ(chunk_text({{id, 0, byte('a')}, {id, 1, byte(0xC3)}}), "a");
  EXPECT_EQ(chunk_text({{id, 2, byte(0xA9)}, {id, 3, byte(0xE4)}, {id, 4, byte(0xBD)}}), "\xC3\xA9");
  EXPECT_EQ(chunk_text({{id, 5, byte(0xA0)}}), "\xE4\xBD\xA0");
  EXPECT_EQ(chunk_text({{id, 6, byte(0xF0)}, {id, 7, byte(0x9F)}, {id, 8, byte(0x98)}}), "");
  EXPECT_EQ(chunk_text({{id, 9, byte(0x80)}, {id, 10, byte('b')}}), "\xF0\x9F\x98\x80" "b");
  // A stray continuation byte can never complete: it is not held (and the
  // wire writes it as U+FFFD).
  EXPECT_EQ(chunk_text({{id, 11, byte(0x80)}}), "\xEF\xBF\xBD");
  // The last chunk (its request finishes in the same batch) takes all, even
  // a character the model left unfinished.
  auto out = core.on_progress({{{id, 12, byte(0xE4)}}, {fin(id, finish_reason::length, 2, 13)}, {}, {}});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(as<wire::token_reply>(out[0]).tokens, std::vector<std::int32_t>{byte(0xE4)});
  EXPECT_EQ(as<wire::done_reply>(out[1]).completion_tokens, 13u);
  EXPECT_EQ(core.in_flight(), 0u);
}

TEST_F(intake_core_test, first_tokens_before_the_submit_result_send_accepted_first) {
  const auto id = submit("p", "s1", R"("stream":true)");
  auto out = core.on_progress({{{id, 0, 400}}, {}, {}, {}});
  ASSERT_EQ(out.size(), 2u);
  const auto acc = as<wire::accepted_reply>(out[0]);
  EXPECT_EQ(acc.id, "s1");
  EXPECT_EQ(acc.prompt_tokens, 2u);
  EXPECT_EQ(as<wire::token_reply>(out[1]).index, 0u);
  EXPECT_EQ(core.accepted(), 1u);
  // The late submit result does not repeat it.
  EXPECT_TRUE(core.on_submit_result(id, sr::accepted).empty());
  EXPECT_EQ(core.accepted(), 1u);
}

TEST_F(intake_core_test, non_streaming_requests_get_one_done_with_tokens_and_text) {
  const auto id = submit("p", "n1", R"("stop":["!"])");
  ASSERT_EQ(core.on_submit_result(id, sr::accepted).size(), 1u);
  EXPECT_TRUE(core.on_progress({{{id, 0, 3 + 'O'}}, {}, {}, {}}).empty());
  EXPECT_TRUE(core.on_progress({{{id, 1, 3 + 'k'}, {id, 2, 3 + '!'}}, {}, {}, {}}).empty());
  auto out = core.on_progress({{}, {fin(id, finish_reason::stop, 2, 3)}, {}, {}});
  ASSERT_EQ(out.size(), 1u);
  const auto d = as<wire::done_reply>(out[0]);
  EXPECT_EQ(d.id, "n1");
  EXPECT_EQ(d.finish_reason, "stop");
  ASSERT_TRUE(d.tokens.has_value());
  EXPECT_EQ(*d.tokens, (std::vector<std::int32_t>{3 + 'O', 3 + 'k', 3 + '!'}));
  ASSERT_TRUE(d.text.has_value());
  EXPECT_EQ(*d.text, "Ok!");
  EXPECT_EQ(d.completion_tokens, 3u);
  EXPECT_EQ(core.in_flight(), 0u);
}

TEST_F(intake_core_test, the_thinkings_tokens_are_counted_in_the_done_reply) {
  // One token a character: "<t>a</t>" thinks (8 tokens), "ok" answers.
  const std::string output = "<t>a</t>ok";
  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streamed" : "whole");
    const auto id = submit("p", stream ? "r2" : "r1",
                           std::string(R"("reasoning_close":"</t>","reasoning_open":"<t>")") + (stream ? R"(,"stream":true)" : ""));
    ASSERT_EQ(core.on_submit_result(id, sr::accepted).size(), 1u);
    for (std::size_t i = 0; i < output.size(); i += 3) { // in chunks that cut the marks
      std::vector<token_event> batch;
      for (std::size_t j = i; j < std::min(output.size(), i + 3); ++j)
        batch.push_back({id, static_cast<std::uint32_t>(j), 3 + output[j]});
      (void)core.on_progress({batch, {}, {}, {}});
    }
    auto out = core.on_progress({{}, {fin(id, finish_reason::stop, 2, 10)}, {}, {}});
    ASSERT_EQ(out.size(), 1u);
    const auto d = as<wire::done_reply>(out[0]);
    EXPECT_EQ(d.reasoning_tokens, 8u);
  }
  // Output that answers at once, and a request that names no marks: none.
  for (const char* fields : {R"("reasoning_close":"</t>","reasoning_open":"<t>")", R"("max_tokens":4)"}) {
    const auto id = submit("p", "r3", fields);
    ASSERT_EQ(core.on_submit_result(id, sr::accepted).size(), 1u);
    (void)core.on_progress({{{id, 0, 3 + 'o'}, {id, 1, 3 + '<'}, {id, 2, 3 + 't'}}, {}, {}, {}});
    auto out = core.on_progress({{}, {fin(id, finish_reason::stop, 2, 3)}, {}, {}});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(as<wire::done_reply>(out[0]).reasoning_tokens, 0u) << fields;
  }
}

TEST_F(intake_core_test, kept_special_tokens_show_their_text_but_for_the_one_that_ended_the_output) {
  // The sim vocabulary's specials: 1 <s>, 2 </s> (end of sequence).
  const auto a = 3 + 'a', b = 3 + 'b';
  struct row {
    std::string name;
    std::string extra;
    std::vector<std::int32_t> tokens;
    finish_reason why;
    std::string text;
  };
  const std::vector<row> table{
    {"skipped (the default)", "", {a, 1, b, 2}, finish_reason::eos, "ab"},
    {"kept; the ending </s> is not", R"("skip_special_tokens":false)", {a, 1, b, 2}, finish_reason::eos, "a<s>b"},
    {"kept; a stop token that ended it is not", R"("skip_special_tokens":false,"stop_token_ids":[1])", {a, 1},
     finish_reason::stop, "a"},
    {"kept; cut by length, the last shows", R"("skip_special_tokens":false,"stop_token_ids":[1],"max_tokens":2)",
     {a, 1}, finish_reason::length, "a<s>"},
    {"kept; with ignore_eos, </s> is a token", R"("skip_special_tokens":false,"ignore_eos":true,"max_tokens":2)",
     {a, 2}, finish_reason::length, "a</s>"},
  };
  int n = 0;
  for (const auto& r : table) {
    SCOPED_TRACE(r.name);
    for (const bool stream : {false, true}) {
      const auto extra = r.extra + (r.extra.empty() ? "" : ",") + (stream ? R"("stream":true)" : R"("stream":false)");
      const auto id = submit("p", "k" + std::to_string(++n), extra);
      ASSERT_EQ(core.on_submit_result(id, sr::accepted).size(), 1u);
      // All but the last token, then the last with the finish.
      progress_batch first, last;
      for (std::uint32_t i = 0; i + 1 < r.tokens.size(); ++i)
        first.tokens.push_back({id, i, r.tokens[i]});
      last.tokens.push_back({id, static_cast<std::uint32_t>(r.tokens.size() - 1), r.tokens.back()});
      last.finished.push_back(fin(id, r.why, 2, static_cast<std::uint32_t>(r.tokens.size())));
      std::string text;
      for (const auto& f : core.on_progress(first))
        text += as<wire::token_reply>(f).text;
      const auto out = core.on_progress(last);
      ASSERT_FALSE(out.empty());
      if (stream) {
        ASSERT_EQ(out.size(), 2u);
        text += as<wire::token_reply>(out[0]).text;
      } else {
        ASSERT_EQ(out.size(), 1u);
        text = as<wire::done_reply>(out[0]).text.value_or("?");
      }
      EXPECT_EQ(text, r.text) << (stream ? "streamed" : "whole");
    }
  }
}

TEST_F(intake_core_test, finish_reasons_map_to_done_or_internal_error) {
  struct reason_case {
    finish_reason why;
    std::string done_reason; ///< empty: an internal error instead
  };
  const std::vector<reason_case> table{
    {finish_reason::length, "length"},
    {finish_reason::eos, "eos"},
    {finish_reason::stop, "stop"},
    {finish_reason::cancelled, "cancelled"},
    {finish_reason::error, ""},
  };
  for (const auto& c : table) {
    SCOPED_TRACE(c.done_reason);
    const auto id = submit("p", "r");
    ASSERT_EQ(core.on_submit_result(id, sr::accepted).size(), 1u);
    auto out = core.on_progress({{}, {fin(id, c.why, 2, 0)}, {}, {}});
    ASSERT_EQ(out.size(), 1u);
    if (c.done_reason.empty()) {
      const auto e = as<wire::error_reply>(out[0]);
      EXPECT_EQ(e.code, error_code::internal);
      EXPECT_EQ(e.id, "r");
      // The server log names the request by the server's id: so does the reply.
      EXPECT_NE(e.message.find("request " + std::to_string(id)), std::string::npos) << e.message;
    } else {
      EXPECT_EQ(as<wire::done_reply>(out[0]).finish_reason, c.done_reason);
    }
    EXPECT_EQ(core.in_flight(), 0u);
  }
}

TEST_F(intake_core_test, a_batch_mixing_requests_gives_one_chunk_per_request) {
  const auto a = submit("p", "a", R"("stream":true)");
  const auto b = submit("q", "b", R"("stream":true)");
  const auto c = submit("p", "c"); // not streaming
  for (auto id : {a, b, c})
    ASSERT_EQ(core.on_submit_result(id, sr::accepted).size(), 1u);
  auto out = core.on_progress(
    {{{a, 0, 400}, {a, 1, 401}, {b, 0, 500}, {c, 0, 600}, {b, 1, 501}},
     {fin(b, finish_reason::eos, 2, 2)}, {}, {}});
  // a: one chunk of 2; b: two chunks (its tokens are not consecutive); c:
  // nothing yet; then b's done.
  ASSERT_EQ(out.size(), 4u);
  auto ta = as<wire::token_reply>(out[0]);
  EXPECT_EQ(out[0].peer, "p");
  EXPECT_EQ(ta.id, "a");
  EXPECT_EQ(ta.tokens, (std::vector<std::int32_t>{400, 401}));
  auto tb0 = as<wire::token_reply>(out[1]);
  EXPECT_EQ(out[1].peer, "q");
  EXPECT_EQ(tb0.id, "b");
  EXPECT_EQ(tb0.index, 0u);
  auto tb1 = as<wire::token_reply>(out[2]);
  EXPECT_EQ(tb1.index, 1u);
  EXPECT_EQ(tb1.tokens, std::vector<std::int32_t>{501});
  const auto db = as<wire::done_reply>(out[3]);
  EXPECT_EQ(db.id, "b");
  EXPECT_EQ(db.finish_reason, "eos");
  EXPECT_EQ(core.in_flight(), 2u);
  out = core.on_progress({{}, {fin(c, finish_reason::length, 2, 1)}, {}, {}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(*as<wire::done_reply>(out[0]).tokens, std::vector<std::int32_t>{600});
}

TEST_F(intake_core_test, after_done_the_id_can_be_reused) {
  const auto first = submit("p", "r1");
  ASSERT_EQ(core.on_submit_result(first, sr::accepted).size(), 1u);
  expect_error("p", gen("r1"), error_code::duplicate_id, "r1");
  ASSERT_EQ(core.on_progress({{}, {fin(first, finish_reason::length, 2, 0)}, {}, {}}).size(), 1u);
  const auto second = submit("p", "r1");
  EXPECT_NE(second, first);
  // Replies for the new request carry the reused client id.
  auto out = core.on_submit_result(second, sr::accepted);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(as<wire::accepted_reply>(out[0]).id, "r1");
  // Stale progress for the old internal id sends nothing.
  EXPECT_TRUE(core.on_progress({{{first, 0, 400}}, {fin(first, finish_reason::length, 2, 1)}, {}, {}}).empty());
  EXPECT_EQ(core.in_flight(), 1u);
}

// -- gone peers ----------------------------------------------------------------------

TEST_F(intake_core_test, a_gone_peer_gets_nothing_more) {
  const auto a1 = submit("gone", "a1", R"("stream":true)");
  const auto a2 = submit("gone", "a2");
  const auto b1 = submit("stays", "b1", R"("stream":true)");
  ASSERT_EQ(core.on_submit_result(a1, sr::accepted).size(), 1u);
  auto ids = core.on_peer_gone("gone");
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<std::uint64_t>{a1})); // a2 once the scheduler has it
  EXPECT_TRUE(core.on_peer_gone("gone").empty()); // reported once
  EXPECT_TRUE(core.on_peer_gone("nobody").empty());
  // a2's late submit result, tokens and finishes for a1/a2: no frames; a2's
  // cancel is due then.
  EXPECT_TRUE(core.take_due_cancels().empty());
  EXPECT_TRUE(core.on_submit_result(a2, sr::accepted).empty());
  EXPECT_EQ(core.take_due_cancels(), (std::vector<std::uint64_t>{a2}));
  auto out = core.on_progress({{{a1, 0, 400}, {a2, 0, 401}, {b1, 0, 402}}, {}, {}, {}});
  ASSERT_EQ(out.size(), 2u); // b1: accepted, then its token
  for (const auto& f : out)
    EXPECT_EQ(f.peer, "stays");
  EXPECT_TRUE(core.on_progress({{}, {fin(a1, finish_reason::cancelled, 2, 1),
                                     fin(a2, finish_reason::cancelled, 2, 1)}, {}, {}})
                .empty());
  EXPECT_EQ(core.in_flight(), 1u); // a1 and a2 are forgotten once finished
  out = core.on_progress({{}, {fin(b1, finish_reason::length, 2, 1)}, {}, {}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].peer, "stays");
  EXPECT_EQ(core.in_flight(), 0u);
}

TEST_F(intake_core_test, a_gone_peers_refused_submission_sends_nothing) {
  const auto id = submit("gone", "a1");
  core.on_peer_gone("gone");
  EXPECT_TRUE(core.on_submit_result(id, sr::queue_full).empty());
  EXPECT_EQ(core.in_flight(), 0u);
  const auto id2 = submit("gone2", "a1");
  core.on_peer_gone("gone2");
  EXPECT_TRUE(core.on_submit_failed(id2, "x").empty());
  EXPECT_EQ(core.in_flight(), 0u);
}

// -- adapters at run time ------------------------------------------------------------

TEST_F(intake_core_test, load_adapter_asks_the_cache_then_serves_the_new_name) {
  auto a = core.on_frame("p", R"({"type":"load_adapter","id":"L","name":"new","rank":32})", now += 1);
  EXPECT_TRUE(a.replies.empty());
  ASSERT_TRUE(a.register_adapter.has_value());
  EXPECT_EQ(a.register_adapter->name, "new");
  EXPECT_EQ(a.register_adapter->rank, 32u);
  EXPECT_EQ(a.query_id, "L");
  // Not usable until the cache has registered it.
  expect_error("p", gen("g0", R"("adapter":"new")"), error_code::unknown_adapter, "g0");
  adapter_entry e;
  e.id = 7;
  e.name = "new";
  e.rank = 32;
  e.pages = 3;
  auto replies = core.on_registered("p", "L", e);
  ASSERT_EQ(replies.size(), 1u);
  const auto r = as<wire::adapter_reply>(replies[0]);
  EXPECT_EQ(r.id, "L");
  EXPECT_EQ(r.status, "loaded");
  EXPECT_EQ(r.rank, 32u);
  auto g = core.on_frame("p", gen("g1", R"("adapter":"new")"), now += 1);
  ASSERT_TRUE(g.submit.has_value());
  EXPECT_EQ(g.submit->adapter_id, 7u);
  EXPECT_EQ(g.submit->adapter_rank, 32u);
  EXPECT_EQ(g.submit->adapter_pages, 3u);
}

TEST_F(intake_core_test, load_adapter_refusals) {
  expect_error("p", R"({"type":"load_adapter","id":"L1","name":"sql","rank":8})",
               error_code::adapter_exists, "L1");
  auto a = core.on_frame("p", R"({"type":"load_adapter","id":"L2","name":"x","path":"/nowhere"})", now += 1);
  ASSERT_TRUE(a.register_adapter.has_value());
  auto replies = core.on_registered("p", "L2", std::string{"/nowhere/adapter_config.json: cannot open"});
  ASSERT_EQ(replies.size(), 1u);
  const auto e = as<wire::error_reply>(replies[0]);
  EXPECT_EQ(e.code, error_code::bad_adapter);
  EXPECT_NE(e.message.find("/nowhere"), std::string::npos);
  expect_error("p", gen("g", R"("adapter":"x")"), error_code::unknown_adapter, "g");
}

TEST_F(intake_core_test, unload_is_refused_while_requests_use_the_adapter) {
  const auto id = submit("p", "g1", R"("adapter":"sql")");
  EXPECT_EQ(core.adapter_users("sql"), 1u);
  expect_error("p", R"({"type":"unload_adapter","id":"U1","name":"sql"})", error_code::adapter_in_use, "U1");
  expect_error("p", R"({"type":"unload_adapter","id":"U2","name":"nope"})", error_code::unknown_adapter, "U2");
  // The request finishes: the adapter is free to go.
  progress_batch b;
  b.finished.push_back({id, static_cast<std::uint8_t>(finish_reason::length), 1, 0, 0, 0, 0});
  core.on_progress(b);
  EXPECT_EQ(core.adapter_users("sql"), 0u);
  auto a = core.on_frame("p", R"({"type":"unload_adapter","id":"U3","name":"sql"})", now += 1);
  EXPECT_TRUE(a.replies.empty());
  ASSERT_TRUE(a.unregister_adapter.has_value());
  EXPECT_EQ(a.unregister_adapter->name, "sql");
  // Forgotten at once: new requests for it are refused before the cache answers.
  expect_error("p", gen("g2", R"("adapter":"sql")"), error_code::unknown_adapter, "g2");
  auto replies = core.on_unregistered("p", "U3", *a.unregister_adapter, "");
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(as<wire::adapter_reply>(replies[0]).status, "unloaded");
}

TEST_F(intake_core_test, a_request_whose_adapter_fails_to_load_gets_bad_adapter) {
  const auto id = submit("p", "g1", R"("adapter":"chat")");
  progress_batch b;
  b.finished.push_back({id, static_cast<std::uint8_t>(finish_reason::adapter_error), 1, 0, 0, 0, 0});
  auto out = core.on_progress(b);
  ASSERT_EQ(out.size(), 2u); // accepted, then the terminal error
  const auto e = as<wire::error_reply>(out[1]);
  EXPECT_EQ(e.code, error_code::bad_adapter);
  EXPECT_NE(e.message.find("chat"), std::string::npos);
  EXPECT_EQ(core.in_flight(), 0u);
}

TEST_F(intake_core_test, log_probabilities_are_refused_where_the_backend_computes_none) {
  expect_error("p", gen("r1", R"("logprobs":2)"), error_code::bad_request, "r1");
  auto a = core.on_frame("p", gen("r2", R"("logprobs":2)"), now += 1);
  ASSERT_EQ(a.replies.size(), 1u);
  const auto e = as<wire::error_reply>(a.replies[0]);
  EXPECT_NE(e.message.find("\"logprobs\""), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("sim backend"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("best_of"), std::string::npos) << "what asks for them over HTTP: " << e.message;
  EXPECT_EQ(core.in_flight(), 0u);
  submit("p", "r3"); // the same request without them is served
  a = core.on_frame("p", gen("r4", R"("prompt_logprobs":0)"), now += 1);
  ASSERT_EQ(a.replies.size(), 1u);
  const auto p = as<wire::error_reply>(a.replies[0]);
  EXPECT_EQ(p.code, error_code::bad_request);
  EXPECT_NE(p.message.find("\"prompt_logprobs\""), std::string::npos) << p.message;
  EXPECT_NE(p.message.find("sim backend"), std::string::npos) << p.message;
  EXPECT_NE(p.message.find("echo"), std::string::npos) << p.message;
  EXPECT_EQ(core.in_flight(), 1u) << "r3 only";
}

TEST_F(intake_core_test, json_output_is_refused_where_the_backend_samples_from_no_logits) {
  auto a = core.on_frame("p", gen("j1", R"("response_format":"json_object")"), now += 1);
  ASSERT_EQ(a.replies.size(), 1u);
  EXPECT_FALSE(a.submit.has_value());
  const auto e = as<wire::error_reply>(a.replies[0]);
  EXPECT_EQ(e.code, error_code::bad_request);
  EXPECT_NE(e.message.find("\"response_format\""), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("sim backend"), std::string::npos) << e.message;
  EXPECT_EQ(core.in_flight(), 0u);
  a = core.on_frame("p", gen("j2", R"("json_schema":{"type":"object"})"), now += 1);
  ASSERT_EQ(a.replies.size(), 1u);
  EXPECT_FALSE(a.submit.has_value());
  const auto s = as<wire::error_reply>(a.replies[0]);
  EXPECT_NE(s.message.find("\"json_schema\""), std::string::npos) << s.message;
  EXPECT_NE(s.message.find("sim backend"), std::string::npos) << s.message;
  // With a trigger the output is free text first: served, all of it free.
  a = core.on_frame("p", gen("j3", R"("json_schema":{"type":"object"},"json_trigger":"<c>")"), now += 1);
  EXPECT_TRUE(a.replies.empty());
  ASSERT_TRUE(a.submit.has_value());
  EXPECT_FALSE(a.submit->json_object);
  EXPECT_EQ(a.submit->json_schema, "");
  EXPECT_EQ(a.submit->json_trigger, "");
  // Unless the output must begin with it: that is JSON output, refused.
  a = core.on_frame("p", gen("j4", R"("json_schema":{"type":"object"},"json_trigger":"<c>","json_trigger_first":true)"),
                    now += 1);
  ASSERT_EQ(a.replies.size(), 1u);
  EXPECT_FALSE(a.submit.has_value());
  EXPECT_NE(as<wire::error_reply>(a.replies[0]).message.find("sim backend"), std::string::npos);
  // So does an answer beside the trigger: the output is calls or JSON.
  a = core.on_frame("p", gen("j7", R"("json_schema":{"type":"object"},"json_trigger":"<c>","json_answer":{})"),
                    now += 1);
  ASSERT_EQ(a.replies.size(), 1u);
  EXPECT_FALSE(a.submit.has_value());
  EXPECT_NE(as<wire::error_reply>(a.replies[0]).message.find("field \"json_answer\": the sim backend"),
            std::string::npos)
    << as<wire::error_reply>(a.replies[0]).message;
  // Choices are held the same way: refused (e2e.serve_and_client reads
  // what the refusal says).
  expect_error("p", gen("j5", R"("choice":["yes","no"])"), error_code::bad_request, "j5");
  expect_error("p", gen("j6", R"("grammar":"root ::= [a-z]+")"), error_code::bad_request, "j6");
}


/// A generate of `prompt` with `extra` fields, as `id`, submitted and
/// accepted: what the scheduler is asked (request id 0 if not submitted).
request_spec accept_generate(intake_core& core, const std::string& id, const std::string& prompt,
                             const std::string& extra) {
  auto a = core.on_frame("p", R"({"type":"generate","id":")" + id + R"(","prompt":")" + prompt + "\"" + extra + "}", 1.0);
  EXPECT_TRUE(a.replies.empty()) << (a.replies.empty() ? std::string() : a.replies[0].payload);
  EXPECT_TRUE(a.submit.has_value());
  if (!a.submit)
    return {};
  EXPECT_EQ(core.on_submit_result(a.submit->request_id, sr::accepted).size(), 1u);
  return *a.submit;
}

TEST(intake_core, vllms_token_fields_cut_the_prompt_name_bad_words_as_tokens_and_need_logits) {
  auto backend = std::make_shared<breakable_backend>();
  backend->logprobs = true;
  const auto catalog = make_catalog();
  intake_core core{small_limits(), *catalog, backend};
  // The sim vocabulary: byte c is token 3 + c.
  const auto byte = [](char c) { return 3 + static_cast<std::int32_t>(static_cast<unsigned char>(c)); };
  auto s = accept_generate(core, "t1", "abcdef", R"(,"truncate_prompt_tokens":2)");
  EXPECT_EQ(s.prompt, (std::vector<std::int32_t>{byte('e'), byte('f')})) << "the last two tokens";
  s = accept_generate(core, "t2", "abc", R"(,"truncate_prompt_tokens":5)");
  EXPECT_EQ(s.prompt.size(), 3u) << "a shorter prompt whole";
  s = accept_generate(core, "t3", std::string(80, 'x'), R"(,"truncate_prompt_tokens":-1,"max_tokens":10)");
  EXPECT_EQ(s.prompt.size(), 54u) << "-1: what leaves room for max_tokens in the context of 64";
  EXPECT_EQ(s.max_new_tokens, 10u);
  intake_core other{small_limits(), *catalog, backend}; // (3 pending at most)
  s = accept_generate(other, "b1", "p", R"(,"bad_words":["ab","  ab"," c"],"allowed_token_ids":[9,3])");
  EXPECT_EQ(s.bad_words, (std::vector<std::vector<std::int32_t>>{{byte('a'), byte('b')}, {byte(' '), byte('a'), byte('b')},
                                                                 {byte('c')}, {byte(' '), byte('c')}}))
    << "each word alone and after a space, its own leading blanks cut, each sequence once";
  EXPECT_EQ(s.allowed_token_ids, (std::vector<std::int32_t>{3, 9}));
  // A backend that samples from no logits refuses both, saying why.
  backend->logprobs = false;
  for (const char* field : {R"("bad_words":["x"])", R"("allowed_token_ids":[1])"}) {
    auto a = other.on_frame("p", std::string(R"({"type":"generate","id":"r","prompt":"p",)") + field + "}", 2.0);
    ASSERT_EQ(a.replies.size(), 1u);
    EXPECT_FALSE(a.submit.has_value());
    const auto e = as<wire::error_reply>(a.replies[0]);
    EXPECT_EQ(e.code, error_code::bad_request);
    EXPECT_NE(e.message.find("samples from no logits"), std::string::npos) << e.message;
  }
}

TEST(intake_core_json, a_json_object_generate_asks_the_scheduler_for_json) {
  auto backend = std::make_shared<breakable_backend>();
  backend->logprobs = true;
  const auto catalog = make_catalog();
  intake_core core{small_limits(), *catalog, backend};
  EXPECT_TRUE(accept_generate(core, "j", "p", R"(,"response_format":"json_object")").json_object);
  const auto t = accept_generate(core, "t", "p", R"(,"response_format":"text")");
  EXPECT_FALSE(t.json_object);
  EXPECT_EQ(t.json_schema, "");
  const auto s = accept_generate(core, "s", "p", R"(,"json_schema":{"type":"object","required":[]})");
  EXPECT_FALSE(s.json_object);
  EXPECT_EQ(s.json_schema, R"({"type":"object","required":[]})");
  EXPECT_EQ(s.json_trigger, "");
}

TEST(intake_core_json, a_trigger_goes_to_the_scheduler_with_its_schema) {
  auto backend = std::make_shared<breakable_backend>();
  backend->logprobs = true;
  const auto catalog = make_catalog();
  intake_core core{small_limits(), *catalog, backend};
  const auto tr = accept_generate(core, "tr", "p", R"(,"json_schema":{"type":"object"},"json_trigger":"<call>")");
  EXPECT_EQ(tr.json_schema, R"({"type":"object"})");
  EXPECT_EQ(tr.json_trigger, "<call>");
  EXPECT_FALSE(tr.json_trigger_first);
  const auto first = accept_generate(core, "tf", "p",
                                     R"(,"json_schema":{"type":"object"},"json_trigger":"<call>","json_trigger_first":true)");
  EXPECT_TRUE(first.json_trigger_first);
  EXPECT_EQ(first.reasoning_close, "");
  EXPECT_EQ(first.json_trigger_head, "");
  intake_core other{small_limits(), *catalog, backend}; // (3 pending at most)
  const auto headed = accept_generate(
    other, "hd", "p",
    R"(,"json_schema":{"properties":{"f":{"$ref":"#/$defs/a"}},"$defs":{"a":{"type":"object"}}},"json_trigger":"[C]","json_trigger_head":"[A]")");
  EXPECT_EQ(headed.json_trigger, "[C]");
  EXPECT_EQ(headed.json_trigger_head, "[A]");
  EXPECT_EQ(headed.json_answer, "");
  const auto answered = accept_generate(other, "an", "p",
                                        R"(,"json_schema":{"type":"object"},"json_trigger":"<call>",)"
                                        R"("json_answer":{"type":"array","items":{"type":"integer"}})");
  EXPECT_EQ(answered.json_answer, R"({"type":"array","items":{"type":"integer"}})");
  EXPECT_FALSE(answered.json_trigger_first);
  const auto thinks = accept_generate(core, "th", "p",
                                      R"(,"response_format":"json_object","reasoning_close":"</think>","reasoning_open":"<think>")");
  EXPECT_TRUE(thinks.json_object);
  EXPECT_EQ(thinks.reasoning_close, "</think>");
  EXPECT_EQ(thinks.reasoning_open, "<think>");
}

TEST(intake_core_json, a_schema_it_cannot_enforce_is_refused_saying_what_and_where_and_it_goes_on) {
  auto backend = std::make_shared<breakable_backend>();
  backend->logprobs = true;
  const auto catalog = make_catalog();
  intake_core core{small_limits(), *catalog, backend};
  const std::string head = R"({"type":"generate","id":"bad","prompt":"p","json_schema":)";
  // A headed trigger's schema: its properties' schemas, each compiled.
  const std::string headed = R"(,"json_trigger":"[C]","json_trigger_head":"[A]")";
  for (const auto& [schema, says] : std::vector<std::pair<std::string, std::string>>{
         {R"({"type":"object","properties":{"a":{"type":"string","format":"idn-email"}}})",
          R"("#/properties/a" has "format")"},
         {R"({"type":"number"})", "top level must be one (\"type\": \"object\" or \"array\")"},
         {R"({"$ref":"#/$defs/missing"})", "refers to nothing"},
         {R"({"type":"object"})" + headed, "\"properties\" hold"},
         {R"({"properties":{"f":{"type":"frog"}}})" + headed, "property \"f\": "},
         {R"({"properties":{"f[A]g":{}}})" + headed, "holds the head's mark"},
       }) {
    auto a = core.on_frame("p", head + schema + "}", 1.0);
    ASSERT_EQ(a.replies.size(), 1u);
    EXPECT_FALSE(a.submit.has_value());
    const auto e = as<wire::error_reply>(a.replies[0]);
    EXPECT_EQ(e.code, error_code::bad_request);
    EXPECT_NE(e.message.find("field \"json_schema\": "), std::string::npos) << e.message;
    EXPECT_NE(e.message.find(says), std::string::npos) << e.message;
  }
  // An answer's schema beside a trigger: compiled, and named.
  auto a = core.on_frame("p", head + R"({"type":"object"},"json_trigger":"<c>","json_answer":{"type":"number"}})", 1.0);
  ASSERT_EQ(a.replies.size(), 1u);
  EXPECT_FALSE(a.submit.has_value());
  const auto e = as<wire::error_reply>(a.replies[0]);
  EXPECT_TRUE(e.message.starts_with("field \"json_answer\": ")) << e.message;
  EXPECT_NE(e.message.find("top level must be one"), std::string::npos) << e.message;
  EXPECT_EQ(core.in_flight(), 0u);
  EXPECT_EQ(accept_generate(core, "ok", "p", R"(,"json_schema":{"type":"object"})").json_schema,
            R"({"type":"object"})");
}

TEST(intake_core_json, a_grammar_it_cannot_read_is_refused_saying_why_and_a_good_one_goes_to_the_scheduler) {
  auto backend = std::make_shared<breakable_backend>();
  backend->logprobs = true;
  const auto catalog = make_catalog();
  intake_core core{small_limits(), *catalog, backend};
  auto a = core.on_frame("p", R"({"type":"generate","id":"bad","prompt":"p","grammar":"root ::= item\nitem ::= x"})",
                         1.0);
  ASSERT_EQ(a.replies.size(), 1u);
  EXPECT_FALSE(a.submit.has_value());
  const auto e = as<wire::error_reply>(a.replies[0]);
  EXPECT_EQ(e.code, error_code::bad_request);
  EXPECT_TRUE(e.message.starts_with("field \"grammar\": ")) << e.message;
  EXPECT_EQ(core.in_flight(), 0u);
  EXPECT_EQ(accept_generate(core, "ok", "p", R"(,"grammar":"root ::= [a-z]+")").grammar, "root ::= [a-z]+");
}

TEST(intake_core_logprobs, go_with_each_token_streamed_or_whole_named_by_their_text) {
  auto backend = std::make_shared<breakable_backend>();
  backend->logprobs = true;
  const auto catalog = make_catalog();
  intake_core core{small_limits(), *catalog, backend};
  auto submit = [&](const std::string& id, const std::string& extra, std::int32_t logprobs) {
    const auto spec = accept_generate(core, id, "hi", extra);
    EXPECT_EQ(spec.logprobs, logprobs) << "the scheduler is told";
    return spec.request_id;
  };
  const auto streamed = submit("s", R"(,"stream":true,"logprobs":2)", 2);
  const auto whole = submit("w", R"(,"logprobs":0)", 0);
  const auto plain = submit("n", R"(,"stream":true)", -1);
  const auto& vocab = backend->vocab();
  auto lp = [](float own, std::vector<gpu::token_logprob> top) { return gpu::token_logprobs{own, std::move(top)}; };
  progress_batch b;
  b.tokens = {{streamed, 0, 40}, {streamed, 1, 41}, {whole, 0, 50}, {plain, 0, 60}};
  b.logprobs = {{streamed, 0, lp(-0.5f, {{40, -0.5f}, {7, -1.5f}})},
                {streamed, 1, lp(-2.0f, {{9, -0.25f}, {41, -2.0f}})},
                {whole, 0, lp(-0.125f, {})}};
  auto out = core.on_progress(b);
  ASSERT_EQ(out.size(), 2u); // a chunk each for the streamed ones
  const auto chunk = as<wire::token_reply>(out[0]);
  EXPECT_EQ(chunk.id, "s");
  ASSERT_EQ(chunk.logprobs.size(), 2u);
  EXPECT_EQ(chunk.logprobs[0].sampled.token, 40);
  EXPECT_EQ(chunk.logprobs[0].sampled.text, vocab.decode(40));
  EXPECT_EQ(chunk.logprobs[0].sampled.logprob, -0.5f);
  ASSERT_EQ(chunk.logprobs[0].top.size(), 2u);
  EXPECT_EQ(chunk.logprobs[0].top[1].token, 7);
  EXPECT_EQ(chunk.logprobs[0].top[1].text, vocab.decode(7));
  EXPECT_EQ(chunk.logprobs[0].top[1].logprob, -1.5f);
  EXPECT_EQ(chunk.logprobs[1].sampled.logprob, -2.0f);
  EXPECT_EQ(chunk.logprobs[1].top[0].token, 9);
  EXPECT_TRUE(as<wire::token_reply>(out[1]).logprobs.empty()) << "not asked for: none";

  progress_batch end;
  end.tokens = {{whole, 1, 51}};
  end.logprobs = {{whole, 1, lp(-3.0f, {})}};
  end.finished = {{whole, static_cast<std::uint8_t>(finish_reason::length), 1, 2, 0, 0, 0}};
  out = core.on_progress(end);
  ASSERT_EQ(out.size(), 1u);
  const auto done = as<wire::done_reply>(out[0]);
  ASSERT_TRUE(done.logprobs.has_value());
  ASSERT_EQ(done.logprobs->size(), 2u) << "one per token, in order";
  EXPECT_EQ((*done.logprobs)[0].sampled.token, 50);
  EXPECT_EQ((*done.logprobs)[0].sampled.logprob, -0.125f);
  EXPECT_TRUE((*done.logprobs)[0].top.empty());
  EXPECT_EQ((*done.logprobs)[1].sampled.token, 51);
  EXPECT_EQ((*done.logprobs)[1].sampled.logprob, -3.0f);
}

TEST(intake_core_logprobs, a_prompts_go_with_its_first_token_streamed_or_whole_each_token_named) {
  auto backend = std::make_shared<breakable_backend>();
  backend->logprobs = true;
  const auto catalog = make_catalog();
  intake_core core{small_limits(), *catalog, backend};
  const auto& vocab = backend->vocab();
  const auto prompt = vocab.encode("hello there");
  ASSERT_GE(prompt.size(), 2u);
  auto submit = [&](const std::string& id, const std::string& extra, std::int32_t asked) {
    const auto spec = accept_generate(core, id, "hello there", extra);
    EXPECT_EQ(spec.prompt_logprobs, asked) << "the scheduler is told";
    return spec.request_id;
  };
  const auto streamed = submit("s", R"(,"stream":true,"prompt_logprobs":1)", 1);
  const auto whole = submit("w", R"(,"prompt_logprobs":0)", 0);
  const auto plain = submit("n", R"(,"stream":true)", -1);
  // The backend's: one per prompt token after the first.
  std::vector<gpu::token_logprobs> lps;
  for (std::size_t k = 1; k < prompt.size(); ++k)
    lps.push_back({-static_cast<float>(k), {{7, -0.5f}}});
  auto expect_prompt = [&](const std::vector<wire::token_logprobs>& got, std::size_t top) {
    ASSERT_EQ(got.size(), prompt.size()) << "one per prompt token";
    EXPECT_EQ(got[0].sampled.token, prompt[0]);
    EXPECT_EQ(got[0].sampled.text, vocab.decode(prompt[0]));
    EXPECT_TRUE(std::isnan(got[0].sampled.logprob)) << "nothing precedes the first";
    EXPECT_TRUE(got[0].top.empty());
    for (std::size_t k = 1; k < prompt.size(); ++k) {
      EXPECT_EQ(got[k].sampled.token, prompt[k]);
      EXPECT_EQ(got[k].sampled.text, vocab.decode(prompt[k]));
      EXPECT_EQ(got[k].sampled.logprob, -static_cast<float>(k));
      ASSERT_EQ(got[k].top.size(), top);
      if (top > 0) {
        EXPECT_EQ(got[k].top[0].text, vocab.decode(7));
      }
    }
  };
  progress_batch b;
  b.tokens = {{streamed, 0, 40}, {whole, 0, 50}, {plain, 0, 60}};
  b.prompt_logprobs = {{streamed, lps}, {whole, lps}};
  auto out = core.on_progress(b);
  ASSERT_EQ(out.size(), 2u); // a chunk each for the streamed ones
  expect_prompt(as<wire::token_reply>(out[0]).prompt_logprobs, 1);
  EXPECT_TRUE(as<wire::token_reply>(out[1]).prompt_logprobs.empty()) << "not asked for: none";
  // Later chunks carry none.
  progress_batch next;
  next.tokens = {{streamed, 1, 41}};
  out = core.on_progress(next);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(as<wire::token_reply>(out[0]).prompt_logprobs.empty());

  progress_batch end;
  end.tokens = {{whole, 1, 51}};
  end.finished = {{whole, static_cast<std::uint8_t>(finish_reason::length), 1, 2, 0, 0, 0}};
  out = core.on_progress(end);
  ASSERT_EQ(out.size(), 1u);
  const auto done = as<wire::done_reply>(out[0]);
  ASSERT_TRUE(done.prompt_logprobs.has_value());
  expect_prompt(*done.prompt_logprobs, 1);
  EXPECT_FALSE(done.logprobs.has_value()) << "the output's were not asked for";
}

} // namespace
} // namespace troupe
