// Messages that cross nodes (CAF's binary format over the middleman) keep
// every field: a field missing from its inspect overload would arrive as its
// default on the other node (a request's session did, once).
#include "messages/type_ids.hpp"

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <gtest/gtest.h>

#include <vector>

namespace troupe {
namespace {

template <class T>
T round_trip(T x) {
  std::vector<char> buf;
  caf::binary_serializer out{nullptr, buf};
  EXPECT_FALSE(out(x)) << "serializing";
  T y{};
  caf::binary_deserializer in{nullptr, buf};
  EXPECT_FALSE(in(y)) << "deserializing";
  return y;
}

TEST(serialize, a_request_keeps_every_field) {
  request_spec s;
  s.request_id = 7;
  s.prompt = {1, 2, 3};
  s.max_new_tokens = 9;
  s.fit_context = true;
  s.adapter_id = 4;
  s.adapter_rank = 16;
  s.adapter_pages = 5;
  s.seed = 11;
  s.temperature = 0.5f;
  s.top_p = 0.9f;
  s.top_k = 40;
  s.logprobs = 5;
  s.prompt_logprobs = 2;
  s.presence_penalty = -0.5f;
  s.frequency_penalty = 1.5f;
  s.logit_bias = {{3, 100.0f}, {9, -2.5f}};
  s.min_p = 0.05f;
  s.repetition_penalty = 1.3f;
  s.priority = -2;
  s.session = 0xabcdef;
  s.stop = {"\n\n"};
  s.stop_token_ids = {2, 40};
  s.ignore_eos = true;
  s.skip_special_tokens = false;
  s.min_tokens = 9;
  s.json_object = true;
  s.json_schema = R"({"type":"object","required":["a"],"properties":{"a":{"enum":[1,"x"]}}})";
  s.json_trigger = "<tool_call>";
  s.json_trigger_first = true;
  s.json_trigger_head = "[ARGS]";
  s.json_answer = R"({"type":"array"})";
  s.reasoning_close = "</think>";
  s.reasoning_open = "<think>";
  s.choice = {"yes", "no"};
  s.regex = "[a-z]+";
  s.queue = 2;
  s.predicted_tokens = 33;
  s.arrival_s = 12.5;
  const auto r = round_trip(s);
  EXPECT_EQ(r.request_id, s.request_id);
  EXPECT_EQ(r.prompt, s.prompt);
  EXPECT_EQ(r.max_new_tokens, s.max_new_tokens);
  EXPECT_EQ(r.fit_context, s.fit_context);
  EXPECT_EQ(r.adapter_id, s.adapter_id);
  EXPECT_EQ(r.adapter_rank, s.adapter_rank);
  EXPECT_EQ(r.adapter_pages, s.adapter_pages);
  EXPECT_EQ(r.seed, s.seed);
  EXPECT_EQ(r.temperature, s.temperature);
  EXPECT_EQ(r.top_p, s.top_p);
  EXPECT_EQ(r.top_k, s.top_k);
  EXPECT_EQ(r.logprobs, s.logprobs);
  EXPECT_EQ(r.prompt_logprobs, s.prompt_logprobs);
  EXPECT_EQ(r.presence_penalty, s.presence_penalty);
  EXPECT_EQ(r.frequency_penalty, s.frequency_penalty);
  ASSERT_EQ(r.logit_bias.size(), 2u);
  EXPECT_EQ(r.logit_bias[1].token, 9);
  EXPECT_EQ(r.logit_bias[1].delta, -2.5f);
  EXPECT_EQ(r.min_p, s.min_p);
  EXPECT_EQ(r.repetition_penalty, s.repetition_penalty);
  EXPECT_EQ(r.priority, s.priority);
  EXPECT_EQ(r.session, s.session);
  EXPECT_EQ(r.stop, s.stop);
  EXPECT_EQ(r.stop_token_ids, s.stop_token_ids);
  EXPECT_EQ(r.ignore_eos, s.ignore_eos);
  EXPECT_EQ(r.skip_special_tokens, s.skip_special_tokens);
  EXPECT_EQ(r.min_tokens, s.min_tokens);
  EXPECT_EQ(r.json_object, s.json_object);
  EXPECT_EQ(r.json_schema, s.json_schema);
  EXPECT_EQ(r.json_trigger, s.json_trigger);
  EXPECT_EQ(r.json_trigger_first, s.json_trigger_first);
  EXPECT_EQ(r.json_trigger_head, s.json_trigger_head);
  EXPECT_EQ(r.json_answer, s.json_answer);
  EXPECT_EQ(r.reasoning_close, s.reasoning_close);
  EXPECT_EQ(r.reasoning_open, s.reasoning_open);
  EXPECT_EQ(r.choice, s.choice);
  EXPECT_EQ(r.regex, s.regex);
  EXPECT_EQ(r.queue, s.queue);
  EXPECT_EQ(r.predicted_tokens, s.predicted_tokens);
  EXPECT_EQ(r.arrival_s, s.arrival_s);
}

TEST(serialize, a_session_cache_and_progress_keep_every_field) {
  session_kv kv{42, {5, 6, 7}, 9, 3, std::string("\0\1\2kv", 5), "why"};
  const auto k = round_trip(kv);
  EXPECT_EQ(k.session, kv.session);
  EXPECT_EQ(k.tokens, kv.tokens);
  EXPECT_EQ(k.adapter_id, 9u);
  EXPECT_EQ(k.pages, kv.pages);
  EXPECT_EQ(k.data, kv.data);
  EXPECT_EQ(k.error, kv.error);

  progress_batch b;
  b.tokens.push_back({3, 4, 99});
  b.finished.push_back({3, 1, 10, 5, 1.5, 2.5, 3.5, 8});
  b.logprobs.push_back({3, 4, {-0.5f, {{99, -0.5f}, {7, -1.25f}}}});
  b.prompt_logprobs.push_back({3, {{-2.0f, {{8, -1.0f}}}, {-3.0f, {}}}});
  const auto p = round_trip(b);
  ASSERT_EQ(p.prompt_logprobs.size(), 1u);
  EXPECT_EQ(p.prompt_logprobs[0].request_id, 3u);
  ASSERT_EQ(p.prompt_logprobs[0].logprobs.size(), 2u);
  EXPECT_EQ(p.prompt_logprobs[0].logprobs[0].top.at(0).token, 8);
  EXPECT_EQ(p.prompt_logprobs[0].logprobs[1].logprob, -3.0f);
  ASSERT_EQ(p.logprobs.size(), 1u);
  EXPECT_EQ(p.logprobs[0].request_id, 3u);
  EXPECT_EQ(p.logprobs[0].index, 4u);
  EXPECT_EQ(p.logprobs[0].logprobs.logprob, -0.5f);
  ASSERT_EQ(p.logprobs[0].logprobs.top.size(), 2u);
  EXPECT_EQ(p.logprobs[0].logprobs.top[1].token, 7);
  EXPECT_EQ(p.logprobs[0].logprobs.top[1].logprob, -1.25f);
  ASSERT_EQ(p.tokens.size(), 1u);
  EXPECT_EQ(p.tokens[0].request_id, 3u);
  EXPECT_EQ(p.tokens[0].index, 4u);
  EXPECT_EQ(p.tokens[0].token, 99);
  ASSERT_EQ(p.finished.size(), 1u);
  EXPECT_EQ(p.finished[0].reason, 1u);
  EXPECT_EQ(p.finished[0].prompt_tokens, 10u);
  EXPECT_EQ(p.finished[0].completion_tokens, 5u);
  EXPECT_EQ(p.finished[0].queue_ms, 1.5);
  EXPECT_EQ(p.finished[0].ttft_ms, 2.5);
  EXPECT_EQ(p.finished[0].e2e_ms, 3.5);
  EXPECT_EQ(p.finished[0].cached_tokens, 8u);
}

TEST(serialize, a_step_keeps_what_it_asks_and_what_it_gives) {
  gpu::step_entry e;
  e.request_id = 2;
  e.logprobs = 3;
  e.prompt_logprobs = 1;
  e.logit_adjust = {{4, -1.25f}, {6, 0.0f, true}};
  e.min_p = 0.1f;
  e.repetition_penalty = 1.5f;
  e.tokens = {1, 2};
  EXPECT_EQ(round_trip(e).logprobs, 3);
  ASSERT_EQ(round_trip(e).logit_adjust.size(), 2u);
  EXPECT_EQ(round_trip(e).logit_adjust[0].token, 4);
  EXPECT_EQ(round_trip(e).logit_adjust[0].delta, -1.25f);
  EXPECT_FALSE(round_trip(e).logit_adjust[0].repeated);
  EXPECT_TRUE(round_trip(e).logit_adjust[1].repeated);
  EXPECT_EQ(round_trip(e).min_p, 0.1f);
  EXPECT_EQ(round_trip(e).repetition_penalty, 1.5f);
  EXPECT_EQ(round_trip(e).prompt_logprobs, 1);
  gpu::step_result r;
  r.tokens = {5};
  r.logprobs = {{-0.25f, {{5, -0.25f}}}};
  r.prompt_logprobs = {{{-1.5f, {}}}};
  r.device_seconds = 0.5;
  const auto back = round_trip(r);
  ASSERT_EQ(back.prompt_logprobs.size(), 1u);
  ASSERT_EQ(back.prompt_logprobs[0].size(), 1u);
  EXPECT_EQ(back.prompt_logprobs[0][0].logprob, -1.5f);
  EXPECT_EQ(back.tokens, r.tokens);
  ASSERT_EQ(back.logprobs.size(), 1u);
  EXPECT_EQ(back.logprobs[0].logprob, -0.25f);
  ASSERT_EQ(back.logprobs[0].top.size(), 1u);
  EXPECT_EQ(back.logprobs[0].top[0].token, 5);
  EXPECT_EQ(back.device_seconds, 0.5);
}

TEST(serialize, stats_keep_their_kinds) {
  // A node's stats reach the router so: a kind lost would sum its levels.
  const stat_values v{stat_counter("intake_accepted", 3), stat_gauge("requests_running", 2),
                      stat_level("ttft_ms_p99", 41.5)};
  EXPECT_EQ(round_trip(v), v);
}

TEST(serialize, a_cache_transfer_keeps_its_operation_and_data) {
  transfer_order o;
  o.adapter_id = 1;
  o.bytes = 4096;
  o.path = "/tmp/x.kv";
  o.kind = 3;
  o.request_id = 8;
  o.device_pages = {1, 2};
  o.host_pages = {3, 4};
  o.kv_op = static_cast<std::uint8_t>(kv_op::file_to_host);
  o.data = "abc";
  const auto r = round_trip(o);
  EXPECT_EQ(r.adapter_id, o.adapter_id);
  EXPECT_EQ(r.bytes, o.bytes);
  EXPECT_EQ(r.path, o.path);
  EXPECT_EQ(r.kind, o.kind);
  EXPECT_EQ(r.request_id, o.request_id);
  EXPECT_EQ(r.device_pages, o.device_pages);
  EXPECT_EQ(r.host_pages, o.host_pages);
  EXPECT_EQ(r.kv_op, o.kv_op);
  EXPECT_EQ(r.data, o.data);
  transfer_report rep{"err", true, 1.0, 2.0, "data"};
  const auto q = round_trip(rep);
  EXPECT_EQ(q.error, rep.error);
  EXPECT_EQ(q.host_hit, rep.host_hit);
  EXPECT_EQ(q.disk_seconds, rep.disk_seconds);
  EXPECT_EQ(q.copy_seconds, rep.copy_seconds);
  EXPECT_EQ(q.data, rep.data);
}

} // namespace
} // namespace troupe
