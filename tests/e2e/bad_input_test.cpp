// End to end: bad input never crashes or hangs the server; each bad frame
// gets one error reply that says what was wrong, and the server keeps serving.
#include "tests/support/deployment_fixture.hpp"

#include <gtest/gtest.h>

#include <zmq.h>

namespace troupe::testing {
namespace {

struct bad_case {
  const char* name;
  std::string frame;
  wire::error_code code;
  std::string echoed_id;
  std::string mentions; ///< a word the message must contain
};

std::vector<bad_case> bad_cases() {
  return {
    {"not json", "hello {", wire::error_code::bad_request, "", "JSON"},
    {"empty frame", "", wire::error_code::bad_request, "", "JSON"},
    {"array", "[1,2]", wire::error_code::bad_request, "", "object"},
    {"unknown type", R"({"type":"explode","id":"u1"})", wire::error_code::bad_request, "u1", "explode"},
    {"missing type", R"({"id":"m0"})", wire::error_code::bad_request, "m0", "type"},
    {"missing id", R"({"type":"generate","prompt":"x"})", wire::error_code::bad_request, "", "id"},
    {"missing prompt", R"({"type":"generate","id":"m1"})", wire::error_code::bad_request, "m1", "prompt"},
    {"ill-typed prompt", R"({"type":"generate","id":"m2","prompt":5})", wire::error_code::bad_request, "m2", "prompt"},
    {"ill-typed stream", R"({"type":"generate","id":"m3","prompt":"x","stream":"yes"})", wire::error_code::bad_request, "m3", "stream"},
    {"negative max_tokens", R"({"type":"generate","id":"n1","prompt":"x","max_tokens":-5})", wire::error_code::bad_request, "n1", "max_tokens"},
    {"zero max_tokens", R"({"type":"generate","id":"n2","prompt":"x","max_tokens":0})", wire::error_code::bad_request, "n2", "max_tokens"},
    {"absurd max_tokens", R"({"type":"generate","id":"n3","prompt":"x","max_tokens":1000000000000})", wire::error_code::bad_request, "n3", "max_tokens"},
    {"fractional max_tokens", R"({"type":"generate","id":"n4","prompt":"x","max_tokens":1.5})", wire::error_code::bad_request, "n4", "max_tokens"},
    {"bad temperature", R"({"type":"generate","id":"t1","prompt":"x","temperature":-1})", wire::error_code::bad_request, "t1", "temperature"},
    {"unknown field", R"({"type":"generate","id":"f1","prompt":"x","max_tokenz":3})", wire::error_code::bad_request, "f1", "max_tokenz"},
    {"token out of range", R"({"type":"generate","id":"k1","prompt_tokens":[1,99999999]})", wire::error_code::bad_request, "k1", "prompt_tokens"},
    {"unknown adapter", R"({"type":"generate","id":"a1","prompt":"x","adapter":"no-such"})", wire::error_code::unknown_adapter, "a1", "no-such"},
    {"prompt too long", R"({"type":"generate","id":"p1","prompt":")" + std::string(4000, 'x') + R"(","max_tokens":200})", wire::error_code::prompt_too_long, "p1", "context"},
    {"cancel unknown id", R"({"type":"cancel","id":"nobody"})", wire::error_code::unknown_request, "nobody", "nobody"},
    {"frame over limit", R"({"type":"generate","id":"big","prompt":")" + std::string(70000, 'y') + R"("})", wire::error_code::frame_too_large, "", "bytes"},
    {"invalid utf-8", std::string("{\"type\":\"generate\",\"id\":\"\xff\xfe\"}"), wire::error_code::bad_request, "", ""},
  };
}

TEST(bad_input, every_bad_frame_gets_one_clear_error_and_the_server_keeps_serving) {
  auto dep = start_from_file("tests/e2e/configs/sim-instant.toml");
  ASSERT_NE(dep, nullptr);
  client_connection c{dep->endpoint()};
  for (const auto& bc : bad_cases()) {
    SCOPED_TRACE(bc.name);
    ASSERT_TRUE(c.send_raw(bc.frame));
    auto got = c.receive(std::chrono::seconds(10));
    ASSERT_TRUE(got.has_value()) << "no reply";
    auto* reply = std::get_if<wire::reply>(&*got);
    ASSERT_NE(reply, nullptr);
    auto* err = std::get_if<wire::error_reply>(reply);
    ASSERT_NE(err, nullptr) << "expected an error reply";
    EXPECT_EQ(err->code, bc.code) << err->message;
    EXPECT_EQ(err->id, bc.echoed_id);
    EXPECT_FALSE(err->message.empty());
    EXPECT_NE(err->message.find(bc.mentions), std::string::npos) << err->message;
  }
  // Still serving, on the same connection and on a new one.
  for (int k = 0; k < 2; ++k) {
    client_connection fresh{dep->endpoint()};
    auto& conn = k == 0 ? c : fresh;
    wire::generate_request g;
    g.id = "after-" + std::to_string(k);
    g.prompt = "still there?";
    g.max_tokens = 5;
    ASSERT_TRUE(conn.send(g));
    std::map<std::string, reply_log> logs;
    ASSERT_TRUE(collect(conn, {g.id}, logs));
    ASSERT_NE(logs[g.id].done(), nullptr);
    EXPECT_EQ(logs[g.id].done()->completion_tokens, 5u);
  }
  EXPECT_EQ(dep->stop(), 0u);
}

TEST(bad_input, multipart_frames_are_refused_with_an_error) {
  auto dep = start_from_file("tests/e2e/configs/sim-instant.toml");
  ASSERT_NE(dep, nullptr);
  void* ctx = zmq_ctx_new();
  void* s = zmq_socket(ctx, ZMQ_DEALER);
  int linger = 0;
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  ASSERT_EQ(zmq_connect(s, dep->endpoint().c_str()), 0);
  const std::string a = R"({"type":"health",)";
  const std::string b = R"("id":"h"})";
  zmq_send(s, a.data(), a.size(), ZMQ_SNDMORE);
  zmq_send(s, b.data(), b.size(), 0);
  zmq_pollitem_t item{s, 0, ZMQ_POLLIN, 0};
  ASSERT_EQ(zmq_poll(&item, 1, 10000), 1);
  char buf[4096];
  const int n = zmq_recv(s, buf, sizeof buf, 0);
  ASSERT_GT(n, 0);
  auto parsed = wire::parse_reply(std::string_view(buf, static_cast<std::size_t>(n)));
  auto* reply = std::get_if<wire::reply>(&parsed);
  ASSERT_NE(reply, nullptr);
  auto* err = std::get_if<wire::error_reply>(reply);
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(err->code, wire::error_code::bad_request);
  zmq_close(s);
  zmq_ctx_term(ctx);
  EXPECT_EQ(dep->stop(), 0u);
}

} // namespace
} // namespace troupe::testing
