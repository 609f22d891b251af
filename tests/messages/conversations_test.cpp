// OpenAI's Conversations API over the front's store: conversations made,
// read, changed and deleted, their items listed a page at a time, a
// response going on from one, and its turn joining it.

#include "messages/conversations.hpp"
#include "tests/messages/builtin_template.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace troupe::openai {
namespace {

using json = nlohmann::json;
using testing::builtin;

/// Ids from a counter: "conv_1", "item_2", ...
struct counter_ids {
  int next = 0;
  std::string operator()(std::string_view prefix) { return std::string(prefix) + "_" + std::to_string(++next); }
};

struct conversations_api : ::testing::Test {
  conversation_store store{1 << 20};
  counter_ids ids;

  /// The answer's JSON; a test failure (and null) on an error.
  json ok(std::string_view method, std::string_view rest, std::string_view body = {}, std::string_view query = {}) {
    auto r = store.serve(method, rest, query, body, 1700000000, std::ref(ids));
    if (auto* e = std::get_if<api_error>(&r)) {
      ADD_FAILURE() << method << " " << rest << ": " << e->status << " " << e->message;
      return nullptr;
    }
    return json::parse(std::get<std::string>(r));
  }
  /// The error; a default one (status 0) and a test failure on an answer.
  api_error refused(std::string_view method, std::string_view rest, std::string_view body = {},
                    std::string_view query = {}) {
    auto r = store.serve(method, rest, query, body, 1700000000, std::ref(ids));
    if (auto* e = std::get_if<api_error>(&r))
      return *e;
    ADD_FAILURE() << method << " " << rest << " answered " << std::get<std::string>(r);
    return api_error{0, "", "", "", ""};
  }
};

TEST(kept_lru, an_entry_that_grows_pushes_out_the_least_recently_used_never_itself) {
  kept_lru<std::string> kept(1000);
  EXPECT_TRUE(kept.put("a", "A", 300));
  EXPECT_TRUE(kept.put("b", "B", 300));
  EXPECT_TRUE(kept.put("c", "C", 300));
  ASSERT_NE(kept.find("a"), nullptr); // a is now the most recently used: b the least
  EXPECT_TRUE(kept.reweigh("c", 500)); // 300 + 300 + 500: b goes
  EXPECT_EQ(kept.find("b"), nullptr);
  EXPECT_NE(kept.find("a"), nullptr);
  EXPECT_EQ(kept.bytes(), 800u);
  EXPECT_TRUE(kept.reweigh("c", 1000)); // all the room: a goes, c stays
  EXPECT_EQ(kept.size(), 1u);
  EXPECT_EQ(*kept.find("c"), "C");
  EXPECT_TRUE(kept.reweigh("c", 10)); // smaller
  EXPECT_EQ(kept.bytes(), 10u);
  EXPECT_FALSE(kept.reweigh("c", 1001)) << "larger than the whole store: dropped";
  EXPECT_EQ(kept.size(), 0u);
  EXPECT_EQ(kept.bytes(), 0u);
  EXPECT_FALSE(kept.reweigh("zz", 1));
}

TEST(kept_lru, each_entry_that_goes_is_told_but_not_one_put_again) {
  kept_lru<int> kept(100);
  std::vector<std::string> gone;
  kept.on_drop = [&](const std::string& id) { gone.push_back(id); };
  kept.put("a", 1, 40);
  kept.put("b", 2, 40);
  kept.put("a", 3, 40); // in place: not told
  EXPECT_TRUE(gone.empty());
  kept.put("c", 4, 40); // b, the least recently used, goes for room
  EXPECT_EQ(gone, (std::vector<std::string>{"b"}));
  kept.erase("c");
  EXPECT_FALSE(kept.reweigh("a", 101));
  EXPECT_EQ(gone, (std::vector<std::string>{"b", "c", "a"}));
  EXPECT_EQ(kept.size(), 0u);
}

TEST(conversation_store, each_change_is_heard_and_the_text_form_reads_back_the_same) {
  conversation_store store(1 << 20);
  counter_ids ids;
  std::map<std::string, std::string> files; // as the front's would hold them
  store.watch([&](const std::string& id, const conversation_store::entry& e) {
    files[id] = conversation_store::to_text(e);
  }, [&](const std::string& id) { files.erase(id); });
  const auto serve = [&](std::string_view method, const std::string& rest, std::string_view body) {
    return store.serve(method, rest, "", body, 1700000000, std::ref(ids));
  };
  const auto made = json::parse(std::get<std::string>(serve("POST", "", R"({"metadata": {"a": "b"},
      "items": [{"role": "user", "content": "Hi"}]})")));
  const auto id = made["id"].get<std::string>();
  ASSERT_EQ(files.count(id), 1u);
  const auto same = [&] {
    auto back = conversation_store::from_text(files.at(id));
    const auto* now = store.find(id);
    return back && now && back->created_at == now->created_at && back->metadata == now->metadata
           && back->items == now->items && back->session == now->session;
  };
  EXPECT_TRUE(same());
  serve("POST", "/" + id + "/items", R"({"items": [{"role": "assistant", "content": "Hello"}]})");
  EXPECT_TRUE(same());
  EXPECT_EQ(conversation_store::from_text(files.at(id))->items.size(), 2u);
  serve("POST", "/" + id, R"({"metadata": {"c": "d"}})");
  EXPECT_TRUE(same());
  serve("DELETE", "/" + id + "/items/" + store.find(id)->items[0].first, "");
  EXPECT_TRUE(same());
  store.add_turn(id, "resp_x", R"([{"role": "user", "content": "More?"}])",
                 R"({"id": "resp_x", "status": "completed", "output": []})");
  EXPECT_TRUE(same());
  EXPECT_EQ(store.find(id)->items.size(), 2u);
  // Read back into a new store, unheard, it serves as before.
  conversation_store again(1 << 20);
  ASSERT_TRUE(again.restore(id, *conversation_store::from_text(files.at(id))));
  EXPECT_EQ(std::get<std::string>(again.serve("GET", "/" + id + "/items", "", "", 0, std::ref(ids))),
            std::get<std::string>(store.serve("GET", "/" + id + "/items", "", "", 0, std::ref(ids))));
  serve("DELETE", "/" + id, "");
  EXPECT_TRUE(files.empty());
  for (const auto* bad : {"", "[]", R"({"created_at": 1})",
                          R"({"created_at": 1, "metadata": "[]", "session": "s", "items": []})",
                          R"({"created_at": 1, "metadata": "{}", "session": "s", "items": [["i", "not json"]]})",
                          R"({"created_at": 1, "metadata": "{}", "session": "s", "items": [["i"]]})"})
    EXPECT_FALSE(conversation_store::from_text(bad).has_value()) << bad;
}

TEST(response_store, each_put_is_heard_and_the_text_form_reads_back_the_same) {
  response_store store(1 << 20);
  std::map<std::string, std::string> files;
  store.watch([&](const std::string& id, const response_store::entry& e) { files[id] = response_store::to_text(e); },
              [&](const std::string& id) { files.erase(id); });
  const response_store::entry e{"resp_0", R"([{"role": "user", "content": "Hi"}])",
                                R"({"id": "resp_1", "status": "completed", "output": []})", "resp_0", "event: x\n\n"};
  ASSERT_TRUE(store.put("resp_1", e));
  const auto back = response_store::from_text(files.at("resp_1"));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->previous, e.previous);
  EXPECT_EQ(back->input_items, e.input_items);
  EXPECT_EQ(back->body, e.body);
  EXPECT_EQ(back->session, e.session);
  EXPECT_EQ(back->events, e.events);
  response_store again(1 << 20);
  EXPECT_TRUE(again.restore("resp_1", *back));
  EXPECT_EQ(again.find("resp_1")->body, e.body);
  store.erase("resp_1");
  EXPECT_TRUE(files.empty());
  for (const auto* bad : {"{", R"({"previous": ""})",
                          R"({"previous": "", "input_items": "{}", "body": "{\"output\": []}", "session": "", "events": ""})",
                          R"({"previous": "", "input_items": "[]", "body": "{}", "session": "", "events": ""})"})
    EXPECT_FALSE(response_store::from_text(bad).has_value()) << bad;
  // A response a crash left running reads back failed, its output kept.
  const auto failed = json::parse(failed_snapshot(R"({"id": "r", "status": "in_progress", "output": [1]})",
                                                  api_error{503, "server_error", "shutting_down", "stopped", ""}));
  EXPECT_EQ(failed["status"], "failed");
  EXPECT_EQ(failed["error"], json::parse(R"({"code": "shutting_down", "message": "stopped"})"));
  EXPECT_EQ(failed["output"], json::parse("[1]"));
}

TEST(conversation_methods, each_path_takes_what_openai_serves_there) {
  EXPECT_EQ(conversation_methods(""), "POST");
  EXPECT_EQ(conversation_methods("/conv_1"), "GET, POST, DELETE");
  EXPECT_EQ(conversation_methods("/conv_1/items"), "GET, POST");
  EXPECT_EQ(conversation_methods("/conv_1/items/msg_2"), "GET, DELETE");
  for (const auto* none : {"/", "x", "/conv_1/", "/conv_1/other", "/conv_1/items/", "/conv_1/items/a/b", "//items"})
    EXPECT_EQ(conversation_methods(none), "") << none;
}

TEST_F(conversations_api, a_conversation_is_made_read_changed_and_deleted) {
  const auto made = ok("POST", "", R"({"metadata": {"topic": "demo"}})");
  ASSERT_TRUE(made.is_object());
  EXPECT_EQ(made, json::parse(R"({"id": "conv_1", "object": "conversation", "created_at": 1700000000,
                                  "metadata": {"topic": "demo"}})"));
  EXPECT_EQ(ok("GET", "/conv_1"), made);
  EXPECT_EQ(ok("POST", "", "")["metadata"], json::object()) << "an empty body makes one too";
  const auto changed = ok("POST", "/conv_1", R"({"metadata": {"topic": "other", "user": "u1"}})");
  EXPECT_EQ(changed["metadata"], json::parse(R"({"topic": "other", "user": "u1"})"));
  EXPECT_EQ(ok("GET", "/conv_1"), changed);
  EXPECT_EQ(ok("DELETE", "/conv_1"), json::parse(R"({"id": "conv_1", "object": "conversation.deleted",
                                                      "deleted": true})"));
  const auto gone = refused("GET", "/conv_1");
  EXPECT_EQ(gone.status, 404);
  EXPECT_NE(gone.message.find("no conversation conv_1"), std::string::npos) << gone.message;
  EXPECT_EQ(refused("DELETE", "/conv_1").status, 404);
  EXPECT_EQ(refused("GET", "/conv_1/items").status, 404);
}

TEST_F(conversations_api, items_are_listed_a_page_at_a_time_read_and_deleted) {
  const auto made = ok("POST", "", R"({"items": [{"role": "user", "content": "Hi"},
                                                 {"type": "message", "role": "assistant", "content": "Hello"}]})");
  const std::string at = "/" + made["id"].get<std::string>();
  auto page = ok("GET", at + "/items");
  ASSERT_EQ(page["data"].size(), 2u);
  EXPECT_EQ(page["object"], "list");
  EXPECT_EQ(page["has_more"], false);
  // The newest first, typed, text as parts, each with an id.
  EXPECT_EQ(page["data"][0]["content"], json::parse(R"([{"type": "output_text", "text": "Hello"}])"));
  EXPECT_EQ(page["data"][1]["content"], json::parse(R"([{"type": "input_text", "text": "Hi"}])"));
  EXPECT_EQ(page["data"][1]["type"], "message");
  const auto hi = page["data"][1]["id"].get<std::string>();
  const auto hello = page["data"][0]["id"].get<std::string>();
  EXPECT_NE(hi, hello);
  EXPECT_EQ(page["first_id"], hello);
  EXPECT_EQ(page["last_id"], hi);
  // Added: answered with the items added, each its id (its own where given).
  const auto added = ok("POST", at + "/items", R"({"items": [{"role": "user", "content": "Weather?"},
      {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}", "id": "fc_mine"},
      {"type": "function_call_output", "call_id": "c1", "output": "sunny"}]})");
  ASSERT_EQ(added["data"].size(), 3u);
  EXPECT_EQ(added["data"][1]["id"], "fc_mine");
  EXPECT_EQ(added["first_id"], added["data"][0]["id"]);
  EXPECT_EQ(added["has_more"], false);
  page = ok("GET", at + "/items", {}, "order=asc&limit=2&after=" + hi);
  ASSERT_EQ(page["data"].size(), 2u);
  EXPECT_EQ(page["data"][0]["id"], hello);
  EXPECT_EQ(page["data"][1], added["data"][0]);
  EXPECT_EQ(page["has_more"], true);
  EXPECT_EQ(ok("GET", at + "/items/fc_mine"), added["data"][1]);
  // Deleted: answered with the conversation; the others stay in order.
  EXPECT_EQ(ok("DELETE", at + "/items/" + hello), ok("GET", at));
  page = ok("GET", at + "/items", {}, "order=asc");
  ASSERT_EQ(page["data"].size(), 4u);
  EXPECT_EQ(page["data"][0]["id"], hi);
  EXPECT_EQ(page["data"][1]["id"], added["data"][0]["id"]);
  EXPECT_EQ(refused("GET", at + "/items/" + hello).status, 404);
  EXPECT_EQ(refused("DELETE", at + "/items/" + hello).status, 404);
  EXPECT_EQ(refused("GET", at + "/items", {}, "after=nope").param, "after");
}

TEST_F(conversations_api, ids_stay_unique_and_references_read_the_conversations_items) {
  const auto made = ok("POST", "", R"({"items": [{"role": "user", "content": "Hi", "id": "m1"},
                                                 {"type": null, "role": "assistant", "content": "Hello"}]})");
  const std::string at = "/" + made["id"].get<std::string>();
  // An item sent back as it was listed (its id taken) is listed under one of its own.
  const auto again = ok("POST", at + "/items", R"({"items": [{"role": "user", "content": "Hi", "id": "m1"},
                                                              {"role": "user", "content": "Hi", "id": "m1"}]})");
  ASSERT_EQ(again["data"].size(), 2u);
  EXPECT_EQ(again["data"][0]["id"], "m1_2");
  EXPECT_EQ(again["data"][1]["id"], "m1_3");
  EXPECT_EQ(ok("GET", at + "/items/m1_2")["content"][0]["text"], "Hi");
  // A page at a time reaches every item once.
  std::vector<std::string> seen;
  for (std::string after;;) {
    const auto page = ok("GET", at + "/items", {}, "limit=1" + (after.empty() ? "" : "&after=" + after));
    for (const auto& i : page["data"])
      seen.push_back(i["id"]);
    if (!page["has_more"].get<bool>() || seen.size() > 10)
      break;
    after = page["last_id"].get<std::string>();
  }
  EXPECT_EQ(seen.size(), 4u);
  // A reference names one of the conversation's items (or one before it in
  // the call); the conversation keeps the item itself.
  const auto referred = ok("POST", at + "/items", R"({"items": [{"type": "item_reference", "id": "m1"}]})");
  ASSERT_EQ(referred["data"].size(), 1u);
  EXPECT_EQ(referred["data"][0]["content"][0]["text"], "Hi");
  EXPECT_NE(referred["data"][0]["id"], "m1");
  EXPECT_EQ(referred["data"][0]["type"], "message");
  EXPECT_EQ(refused("POST", at + "/items", R"({"items": [{"type": "item_reference", "id": "zz"}]})").param, "items");
  // An id must be a string.
  const auto e = refused("POST", at + "/items", R"({"items": [{"role": "user", "content": "x", "id": 7}]})");
  EXPECT_NE(e.message.find("items[0].id"), std::string::npos) << e.message;
}

// With `added` watched, as the front keeps conversations in files: a turn
// or added items are told as an addition (appended to a log), any other
// change whole; the file with its log replayed reads back the same, a
// record a crash cut short ends the replay, and a record already in the
// file adds nothing.
TEST(conversation_store, additions_are_told_apart_and_a_log_replays_onto_the_file) {
  conversation_store store(1 << 20);
  counter_ids ids;
  std::map<std::string, std::string> files, logs;
  int wholes = 0, additions = 0;
  store.watch(
    [&](const std::string& id, const conversation_store::entry& e) {
      files[id] = conversation_store::to_text(e);
      logs.erase(id);
      ++wholes;
    },
    [&](const std::string& id) {
      files.erase(id);
      logs.erase(id);
    },
    [&](const std::string& id, const conversation_store::entry& e, std::size_t first) {
      logs[id] += conversation_store::log_record(e, first);
      ++additions;
    });
  const auto serve = [&](std::string_view method, const std::string& rest, std::string_view body) {
    return store.serve(method, rest, "", body, 1700000000, std::ref(ids));
  };
  const auto id = json::parse(std::get<std::string>(serve("POST", "", R"({"items": [{"role": "user", "content": "Hi"}]})")))
                    ["id"].get<std::string>();
  EXPECT_EQ(wholes, 1);
  const auto read_back = [&](std::string_view log) {
    auto e = conversation_store::from_text(files.at(id));
    conversation_store::replay_log(*e, log);
    return e->items;
  };
  serve("POST", "/" + id + "/items", R"({"items": [{"role": "assistant", "content": "Hello"}]})");
  store.add_turn(id, "resp_7", R"([{"role": "user", "content": "More?"}])",
                 R"({"id": "resp_7", "status": "completed", "output": [{"id": "msg_7_0", "type": "message",
                     "role": "assistant", "content": [{"type": "output_text", "text": "Sure."}]}]})");
  EXPECT_EQ(additions, 2);
  EXPECT_EQ(wholes, 1) << "additions alone: no whole write";
  ASSERT_EQ(store.find(id)->items.size(), 4u);
  EXPECT_EQ(read_back(logs[id]), store.find(id)->items);
  // A turn joins once: a second add_turn is no addition.
  store.add_turn(id, "resp_7", R"([{"role": "user", "content": "More?"}])",
                 R"({"id": "resp_7", "status": "completed", "output": [{"id": "msg_7_0", "type": "message",
                     "role": "assistant", "content": [{"type": "output_text", "text": "Sure."}]}]})");
  EXPECT_EQ(additions, 2);
  // A record cut short ends the replay; one already in the file adds nothing.
  const auto log = logs[id];
  const auto first_record = log.substr(0, log.find('\n') + 1);
  EXPECT_EQ(read_back(log.substr(0, log.size() - 5)).size(), 2u) << "the second record cut short";
  EXPECT_EQ(read_back(first_record + "[[\"x\", \"not json\"]]\n" + log).size(), 2u) << "a record that is none ends it";
  EXPECT_EQ(read_back(log + log).size(), 4u) << "the same records twice";
  auto e = conversation_store::from_text(files.at(id));
  EXPECT_EQ(conversation_store::replay_log(*e, log), 3u) << "one item, then a turn of two";
  EXPECT_EQ(conversation_store::replay_log(*e, log), 0u);
  // Any other change is whole, and clears the log.
  serve("POST", "/" + id, R"({"metadata": {"c": "d"}})");
  EXPECT_EQ(wholes, 2);
  EXPECT_EQ(logs.count(id), 0u);
  EXPECT_EQ(read_back(""), store.find(id)->items);
}

// A turn that pushes out the oldest items is told whole, not as an addition.
TEST(conversation_store, a_turn_that_pushes_out_older_items_is_told_whole) {
  conversation_store store(3000);
  counter_ids ids;
  int wholes = 0, additions = 0;
  store.watch([&](const std::string&, const conversation_store::entry&) { ++wholes; }, [](const std::string&) {},
              [&](const std::string&, const conversation_store::entry&, std::size_t) { ++additions; });
  const auto id = json::parse(std::get<std::string>(store.serve("POST", "", "", "{}", 0, std::ref(ids))))["id"]
                    .get<std::string>();
  const std::string body = R"({"id": "resp_x", "status": "completed", "output": []})";
  int k = 0;
  for (; wholes == 1 && k < 20; ++k)
    store.add_turn(id, "resp_" + std::to_string(k),
                   json::array({{{"role", "user"}, {"content", std::string(200, 'a' + k)}}}).dump(), body);
  EXPECT_EQ(wholes, 2) << "the turn that made room";
  EXPECT_EQ(additions, k - 1);
}

TEST(conversation_store, a_turn_the_store_cannot_hold_beside_the_oldest_items_pushes_them_out) {
  conversation_store store(3000);
  counter_ids ids;
  const auto made = json::parse(std::get<std::string>(store.serve("POST", "", "", "{}", 0, std::ref(ids))));
  const auto id = made["id"].get<std::string>();
  const std::string body = R"({"id": "resp_x", "status": "completed", "output": []})";
  for (int k = 0; k < 20; ++k)
    store.add_turn(id, "resp_" + std::to_string(k), json::array({{{"role", "user"}, {"content", std::string(200, 'a' + k)}}}).dump(),
                   body);
  const auto* e = store.find(id);
  ASSERT_NE(e, nullptr) << "the conversation stays";
  EXPECT_LT(e->items.size(), 20u);
  EXPECT_LE(store.bytes(), store.capacity());
  EXPECT_NE(e->items.back().second.find(std::string(200, 'a' + 19)), std::string::npos) << "the newest kept";
  // A turn larger than the whole store drops the conversation.
  store.add_turn(id, "resp_big", json::array({{{"role", "user"}, {"content", std::string(4000, 'z')}}}).dump(), body);
  EXPECT_EQ(store.find(id), nullptr);
}

TEST_F(conversations_api, bad_bodies_and_queries_are_refused_naming_what_was_wrong) {
  struct bad_case {
    std::string body;
    std::string param;
    std::string says;
  };
  std::string many_pairs = "{";
  for (int k = 0; k < 17; ++k)
    many_pairs += (k ? ",\"k" : "\"k") + std::to_string(k) + "\": \"v\"";
  many_pairs += "}";
  std::string many_items = "[";
  for (int k = 0; k < 21; ++k)
    many_items += std::string(k ? "," : "") + R"({"role": "user", "content": "x"})";
  many_items += "]";
  const bad_case cases[] = {
    {"[1]", "", "must be a JSON object"},
    {"{", "", "not valid JSON"},
    {R"({"title": "x"})", "title", "takes items, metadata"},
    {R"({"metadata": []})", "metadata", "an object of strings"},
    {R"({"metadata": )" + many_pairs + "}", "metadata", "17 pairs"},
    {R"({"metadata": {")" + std::string(65, 'k') + R"(": "v"}})", "metadata", "longer than 64"},
    {R"({"metadata": {"k": 1}})", "metadata", "metadata.k"},
    {R"({"metadata": {"k": ")" + std::string(513, 'v') + R"("}})", "metadata", "at most 512"},
    {R"({"items": {}})", "items", "an array"},
    {R"({"items": )" + many_items + "}", "items", "21 items"},
    {R"({"items": [{"role": "user", "content": "x"}, {"type": "web_search_call"}]})", "items", "items[1].type"},
    {R"({"items": [{"role": "robot", "content": "x"}]})", "items", "items[0].role"},
  };
  for (const auto& c : cases) {
    const auto e = refused("POST", "", c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_NE(e.message.find(c.says), std::string::npos) << c.body << ": " << e.message;
  }
  EXPECT_EQ(refused("POST", "", "{}", "limit=1").param, "limit");
  EXPECT_EQ(store.size(), 0u) << "nothing made by a refused call";
  const auto at = "/" + ok("POST", "")["id"].get<std::string>();
  EXPECT_EQ(refused("POST", at + "/items", R"({"items": []})").param, "items");
  EXPECT_EQ(refused("POST", at + "/items", "{}").param, "items");
  EXPECT_EQ(refused("POST", at, "{}").param, "metadata");
  EXPECT_EQ(refused("POST", at, R"({"metadata": {}, "items": []})").param, "items");
  EXPECT_EQ(refused("GET", at, {}, "limit=3").param, "limit");
  EXPECT_EQ(refused("GET", at + "/items", {}, "limit=101").param, "limit");
  EXPECT_EQ(refused("GET", at + "/items", {}, "order=up").param, "order");
  EXPECT_EQ(refused("GET", at + "/items", {}, "sort=x").param, "sort");
  EXPECT_TRUE(ok("GET", at + "/items", {}, "include=message.output_text.logprobs").is_object());
  EXPECT_EQ(ok("GET", at + "/items")["data"], json::array());
}

TEST(conversation_store, the_least_recently_used_conversation_goes_for_room_and_one_too_large_is_refused) {
  conversation_store store(2000);
  counter_ids ids;
  const auto make = [&](std::size_t text) {
    const auto body = R"({"items": [{"role": "user", "content": ")" + std::string(text, 'x') + R"("}]})";
    return store.serve("POST", "", "", body, 0, std::ref(ids));
  };
  ASSERT_TRUE(std::holds_alternative<std::string>(make(500))); // conv_1
  ASSERT_TRUE(std::holds_alternative<std::string>(make(500))); // conv_3
  ASSERT_NE(store.find("conv_1"), nullptr);                    // conv_3 the least recently used
  ASSERT_TRUE(std::holds_alternative<std::string>(make(500))); // conv_5
  EXPECT_EQ(store.find("conv_3"), nullptr);
  EXPECT_NE(store.find("conv_1"), nullptr);
  EXPECT_LE(store.bytes(), store.capacity());
  const auto huge = make(3000);
  ASSERT_TRUE(std::holds_alternative<api_error>(huge));
  EXPECT_EQ(std::get<api_error>(huge).param, "items");
  EXPECT_NE(store.find("conv_1"), nullptr) << "a refused one pushes none out";
  EXPECT_NE(store.find("conv_5"), nullptr);
}

TEST(conversation_store, a_response_goes_on_from_its_conversation_and_its_turn_joins_it) {
  const auto chatml = builtin("chatml");
  conversation_store store(1 << 20);
  counter_ids ids;
  const auto made = json::parse(std::get<std::string>(
    store.serve("POST", "", "", R"({"items": [{"role": "user", "content": "Hi"},
                                               {"role": "assistant", "content": "Hello"}]})",
                0, std::ref(ids))));
  const auto id = made["id"].get<std::string>();
  const earlier_turns kept = [&](const std::string& c) { return store.turns(c); };
  const earlier_turns no_responses;
  auto parse = [&](const std::string& body) {
    return parse_response_request(body, "base", "h7", chatml, {}, {}, no_responses, "resp_new", kept);
  };
  // The conversation's items come first; it runs in the conversation's
  // session (the store keeps no responses here) and names it.
  for (const auto& named : {json(id), json{{"id", id}}}) {
    auto r = parse(json{{"model", "base"}, {"input", "More?"}, {"conversation", named}}.dump());
    ASSERT_TRUE(std::holds_alternative<response_request>(r)) << std::get<api_error>(r).message;
    const auto& req = std::get<response_request>(r);
    EXPECT_EQ(req.conversation, id);
    EXPECT_EQ(req.session, id);
    const auto frame = json::parse(req.chat.frames.at(0));
    EXPECT_EQ(frame["session"], id);
    const auto prompt = frame["prompt"].get<std::string>();
    const auto hi = prompt.find("Hi"), hello = prompt.find("Hello"), more = prompt.find("More?");
    EXPECT_TRUE(hi < hello && hello < more && more != std::string::npos) << prompt;
    EXPECT_EQ(json::parse(req.echo)["conversation"], json({{"id", id}}));
  }
  const auto refused = [&](const std::string& body) {
    auto r = parse(body);
    return std::holds_alternative<api_error>(r) ? std::get<api_error>(r) : api_error{0, "", "", "", ""};
  };
  EXPECT_EQ(refused(R"({"input": "q", "conversation": "conv_none"})").status, 404);
  EXPECT_EQ(refused(R"({"input": "q", "conversation": "conv_none"})").param, "conversation");
  EXPECT_EQ(refused(R"({"input": "q", "conversation": 7})").param, "conversation");
  EXPECT_EQ(refused(R"({"input": "q", "conversation": {"id": "x", "more": 1}})").param, "conversation");
  const auto both = refused(json{{"input", "q"}, {"conversation", id}, {"previous_response_id", "resp_1"}}.dump());
  EXPECT_NE(both.message.find("cannot both be given"), std::string::npos) << both.message;
  // A server that keeps no conversations refuses the field.
  auto none = parse_response_request(json{{"input", "q"}, {"conversation", id}}.dump(), "base", "h7", chatml);
  ASSERT_TRUE(std::holds_alternative<api_error>(none));
  EXPECT_NE(std::get<api_error>(none).message.find("conversation_store_mb = 0"), std::string::npos);

  // The turn ends: its input, then its output, join the conversation; the
  // input items take the ids GET /v1/responses/ID/input_items gives them.
  const std::string input = R"([{"role": "user", "content": "More?"}])";
  const std::string body = R"({"id": "resp_abc", "object": "response", "status": "completed", "output": [
      {"id": "msg_out", "type": "message", "status": "completed", "role": "assistant",
       "content": [{"type": "output_text", "text": "Sure", "annotations": []}]}]})";
  store.add_turn(id, "resp_abc", input, body);
  const auto listed = json::parse(std::get<std::string>(input_items_page("resp_abc", input, "")));
  const auto page = json::parse(std::get<std::string>(store.serve("GET", "/" + id + "/items", "order=asc", "", 0,
                                                                  std::ref(ids))));
  ASSERT_EQ(page["data"].size(), 4u);
  EXPECT_EQ(page["data"][2], listed["data"][0]);
  EXPECT_EQ(page["data"][3]["id"], "msg_out");
  // The same response's turn again (a batch line run after a crash): it
  // joins once.
  store.add_turn(id, "resp_abc", input, body);
  EXPECT_EQ(store.find(id)->items.size(), 4u);
  // The next turn reads all four.
  auto r = parse(json{{"model", "base"}, {"input", "Again"}, {"conversation", id}}.dump());
  ASSERT_TRUE(std::holds_alternative<response_request>(r));
  const auto prompt = json::parse(std::get<response_request>(r).chat.frames.at(0))["prompt"].get<std::string>();
  EXPECT_LT(prompt.find("More?"), prompt.find("Sure"));
  EXPECT_LT(prompt.find("Sure"), prompt.find("Again"));
  // truncation "auto": the cuts leave the earlier items beginning with a
  // user's message (or none); a cut drops the earliest.
  const auto truncated = [&](std::size_t drop) {
    return parse_response_request(
      json{{"model", "base"}, {"input", "Again"}, {"conversation", id}, {"truncation", "auto"}}.dump(), "base", "h7",
      chatml, {}, {}, no_responses, "resp_new", kept, drop);
  };
  auto whole = truncated(0);
  ASSERT_TRUE(std::holds_alternative<response_request>(whole));
  EXPECT_TRUE(std::get<response_request>(whole).truncate);
  EXPECT_EQ(std::get<response_request>(whole).cuts, (std::vector<std::size_t>{2, 4}));
  EXPECT_EQ(json::parse(std::get<response_request>(whole).echo)["truncation"], "auto");
  auto cut = truncated(2);
  ASSERT_TRUE(std::holds_alternative<response_request>(cut));
  EXPECT_EQ(std::get<response_request>(cut).dropped, 2u);
  const auto shorter = json::parse(std::get<response_request>(cut).chat.frames.at(0))["prompt"].get<std::string>();
  EXPECT_EQ(shorter.find("Hello"), std::string::npos) << shorter;
  EXPECT_NE(shorter.find("More?"), std::string::npos) << shorter;
  EXPECT_LT(shorter.size(), prompt.size());
  const auto all_gone = json::parse(std::get<response_request>(truncated(4)).chat.frames.at(0))["prompt"];
  EXPECT_EQ(all_gone.get<std::string>().find("Sure"), std::string::npos);
  ASSERT_TRUE(std::holds_alternative<api_error>(truncated(1)));
  EXPECT_EQ(std::get<api_error>(truncated(1)).param, "truncation");
  EXPECT_TRUE(std::get<response_request>(r).cuts.empty()) << "none without truncation \"auto\"";
  EXPECT_EQ(json::parse(std::get<response_request>(r).echo)["truncation"], "disabled");

  // An item_reference names an item before it (the conversation's, or the
  // input's own) and stands for it, in the prompt and in the turn kept.
  const auto hello_id = page["data"][1]["id"].get<std::string>();
  auto referring = parse(json{{"model", "base"},
                              {"conversation", id},
                              {"input", json::array({{{"type", "item_reference"}, {"id", "msg_out"}},
                                                     {{"role", "user"}, {"content", "Once more"}, {"id", "u1"}},
                                                     {{"type", "item_reference"}, {"id", "u1"}}})}}
                           .dump());
  ASSERT_TRUE(std::holds_alternative<response_request>(referring)) << std::get<api_error>(referring).message;
  const auto& rq = std::get<response_request>(referring);
  const auto said = json::parse(rq.chat.frames.at(0))["prompt"].get<std::string>();
  EXPECT_NE(said.find("Once more"), said.rfind("Once more")) << "the reference stands for the item: " << said;
  const auto own = json::parse(rq.input_items);
  ASSERT_EQ(own.size(), 3u);
  EXPECT_FALSE(own[0].contains("id")) << "a copy, listed under an id of its own";
  EXPECT_EQ(own[0]["role"], "assistant");
  auto copy = own[1];
  copy.erase("id");
  EXPECT_EQ(own[2], copy);
  EXPECT_NE(hello_id, "");
  for (const auto* bad : {R"([{"type": "item_reference", "id": "nope"}])",
                          R"([{"type": "item_reference"}])",
                          R"([{"type": "item_reference", "id": "u2"}, {"role": "user", "content": "x", "id": "u2"}])"}) {
    const auto e = refused(json{{"model", "base"}, {"conversation", id}, {"input", json::parse(bad)}}.dump());
    EXPECT_EQ(e.status, 400) << bad;
    EXPECT_EQ(e.param, "input") << bad;
    EXPECT_NE(e.message.find("input[0]"), std::string::npos) << e.message;
  }
  // A conversation no longer kept takes no turn (and none is made).
  ASSERT_TRUE(std::holds_alternative<std::string>(store.serve("DELETE", "/" + id, "", "", 0, std::ref(ids))));
  store.add_turn(id, "resp_def", input, body);
  EXPECT_EQ(store.find(id), nullptr);
}

} // namespace
} // namespace troupe::openai
