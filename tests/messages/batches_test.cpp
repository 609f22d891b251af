// OpenAI's Files API and Batch API, the parts without sockets: multipart
// uploads read (as Python's clients write them, and hostile ones refused),
// the file store's upload, list, read and delete, a batch request and its
// input file checked, the batch object, and the stores' text forms.

#include "messages/batches.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace troupe::openai {
namespace {

using json = nlohmann::json;
using namespace std::string_literals;

/// Ids from a counter: "file_1", "file_2", ...
struct counter_ids {
  int next = 0;
  std::string operator()(std::string_view prefix) { return std::string(prefix) + "_" + std::to_string(++next); }
};

/// Bytes a JSONL file would never hold: line ends, NUL, "--" and the
/// start of the boundary at a line's start, every byte value.
std::string binary_bytes() {
  std::string b = "{\"a\": 1}\r\n\0\0--\r\n--abc\r\n--\n"s;
  for (int c = 0; c < 256; ++c)
    b += static_cast<char>(c);
  return b + "\r\n";
}

/// A body as Python's requests (urllib3) writes one: CRLF, the purpose
/// field, then the file with its type.
std::string requests_body(std::string_view boundary, std::string_view purpose, std::string_view filename_field,
                          std::string_view content) {
  std::string b;
  b += "--" + std::string(boundary) + "\r\n";
  b += "Content-Disposition: form-data; name=\"purpose\"\r\n\r\n";
  b += std::string(purpose) + "\r\n";
  b += "--" + std::string(boundary) + "\r\n";
  b += "Content-Disposition: form-data; name=\"file\"; filename=" + std::string(filename_field) + "\r\n";
  b += "Content-Type: application/octet-stream\r\n\r\n";
  b += std::string(content) + "\r\n";
  b += "--" + std::string(boundary) + "--\r\n";
  return b;
}

const std::string boundary = "abc123def456";
const std::string form_type = "multipart/form-data; boundary=" + boundary;

std::vector<form_part> parts_of(std::string_view type, std::string_view body) {
  auto r = parse_multipart(type, body);
  if (auto* e = std::get_if<api_error>(&r)) {
    ADD_FAILURE() << e->message;
    return {};
  }
  return std::get<std::vector<form_part>>(r);
}

api_error refused_multipart(std::string_view type, std::string_view body) {
  auto r = parse_multipart(type, body);
  if (auto* e = std::get_if<api_error>(&r))
    return *e;
  ADD_FAILURE() << "read " << std::get<std::vector<form_part>>(r).size() << " parts of: " << body;
  return api_error{0, "", "", "", ""};
}

TEST(multipart, a_body_as_python_clients_write_it_reads_back_byte_for_byte) {
  const auto content = binary_bytes();
  const auto body = requests_body(boundary, "batch", R"("my \"data\".jsonl")", content);
  for (const auto* type : {"multipart/form-data; boundary=\"abc123def456\"", "multipart/form-data; boundary=abc123def456",
                           "Multipart/Form-Data;BOUNDARY=abc123def456 ", "multipart/form-data; charset=utf-8; Boundary=\"abc123def456\""}) {
    const auto parts = parts_of(type, body);
    ASSERT_EQ(parts.size(), 2u) << type;
    EXPECT_EQ(parts[0].name, "purpose");
    EXPECT_EQ(parts[0].filename, "");
    EXPECT_EQ(parts[0].content_type, "");
    EXPECT_EQ(parts[0].body, "batch");
    EXPECT_EQ(parts[1].name, "file");
    EXPECT_EQ(parts[1].filename, "my \"data\".jsonl");
    EXPECT_EQ(parts[1].content_type, "application/octet-stream");
    EXPECT_EQ(parts[1].body, content) << "the bytes between the blank line and the CRLF before the boundary";
  }
}

TEST(multipart, a_preamble_an_epilogue_bare_line_feeds_and_any_header_case_are_taken) {
  const auto body = "This is the preamble.\r\n--b\r\n"
                    "content-disposition: FORM-DATA; NAME=purpose\r\n\r\nbatch\r\n"
                    "--b  \r\n" // (blanks after a boundary: transport padding)
                    "CONTENT-TYPE: text/plain\r\n"
                    "Content-Disposition: form-data;\r\n name=\"file\"; filename=a.jsonl\r\n\r\n"
                    "\r\n" // an empty body
                    "--b--\r\nthe epilogue\r\n--b\r\nnot read"s;
  const auto parts = parts_of("multipart/form-data; boundary=b", body);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].name, "purpose");
  EXPECT_EQ(parts[0].body, "batch");
  EXPECT_EQ(parts[1].name, "file");
  EXPECT_EQ(parts[1].filename, "a.jsonl");
  EXPECT_EQ(parts[1].content_type, "text/plain");
  EXPECT_EQ(parts[1].body, "");

  const auto lf = "--b\nContent-Disposition: form-data; name=\"x\"\n\nline one\nline two\n--b\n"
                  "Content-Disposition: form-data; name=\"y\"\n\n\n--b--"s;
  const auto lf_parts = parts_of("multipart/form-data; boundary=b", lf);
  ASSERT_EQ(lf_parts.size(), 2u);
  EXPECT_EQ(lf_parts[0].body, "line one\nline two");
  EXPECT_EQ(lf_parts[1].body, "");
}

TEST(multipart, malformed_bodies_are_refused_saying_what_is_wrong) {
  const auto good = requests_body(boundary, "batch", "\"a.jsonl\"", "{}");
  const auto expect = [](const api_error& e, std::string_view says) {
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(e.message.find(says), std::string::npos) << e.message;
  };
  expect(refused_multipart("application/json", good), "must be multipart/form-data");
  expect(refused_multipart("", good), "must be multipart/form-data");
  expect(refused_multipart("multipart/form-data", good), "no boundary");
  expect(refused_multipart("multipart/form-data; boundary=", good), "no boundary");
  expect(refused_multipart("multipart/form-data; boundary=\"abc123def456", good), "not closed");
  expect(refused_multipart("multipart/form-data; boundary=other", good), "not framed by the boundary \"other\"");
  expect(refused_multipart(form_type, "no boundary here"), "not framed");
  expect(refused_multipart(form_type, "--abc123def456\r\nX-Other: 1\r\n\r\nbody\r\n--abc123def456--"),
         "no Content-Disposition");
  expect(refused_multipart(form_type, "--abc123def456\r\nContent-Disposition: attachment; name=\"a\"\r\n\r\nx\r\n"
                                      "--abc123def456--"),
         "not form-data");
  expect(refused_multipart(form_type, "--abc123def456\r\nContent-Disposition: form-data; filename=\"a\"\r\n\r\nx\r\n"
                                      "--abc123def456--"),
         "has no name");
  expect(refused_multipart(form_type, "--abc123def456\r\nContent-Disposition: form-data; name=\"a\r\n\r\nx\r\n"
                                      "--abc123def456--"),
         "not closed");
  expect(refused_multipart(form_type, "--abc123def456\r\nContent-Disposition form-data\r\n\r\nx\r\n"
                                      "--abc123def456--"),
         "no colon");
  expect(refused_multipart(form_type, "--abc123def456\r\nContent-Disposition: form-data; name=a\r\n\r\nx\r\n"
                                      "--abc123def456\r\n"),
         "part 2's headers do not end");
  expect(refused_multipart(form_type, "--abc123def456\r\nContent-Disposition: form-data; name=a\r\n\r\nx\r\n"),
         "final boundary");
  expect(refused_multipart(form_type, "--abc123def456\r\nContent-Disposition: form-data; name=a\r\n\r\nx\r\n"
                                      "--abc123def456"),
         "final boundary");
  expect(refused_multipart(form_type, "--abc123def456"), "final boundary");
  expect(refused_multipart(form_type, "--abc123def456xx\r\n"), "not framed");
}

TEST(multipart, no_truncation_or_change_of_a_body_crashes_and_each_cut_one_is_refused) {
  const auto body = requests_body(boundary, "batch", R"("a\"b.jsonl")", binary_bytes());
  const auto last = body.rfind("--\r\n"); // the final boundary's closing "--"
  for (std::size_t n = 0; n <= body.size(); ++n) {
    const auto r = parse_multipart(form_type, std::string_view(body).substr(0, n));
    EXPECT_EQ(std::holds_alternative<api_error>(r), n < last + 2) << "prefix of " << n << " bytes";
    const auto tail = parse_multipart(form_type, std::string_view(body).substr(n)); // (must not crash)
    (void)tail;
  }
  for (std::size_t k = 0; k < body.size(); ++k)
    for (const char c : {'\0', '\r', '\n', '-', '"', '\\', ';', ':'}) {
      auto changed = body;
      changed[k] = c;
      (void)parse_multipart(form_type, changed);
      (void)parse_multipart("multipart/form-data; boundary=\"" + changed.substr(0, k) + "\"", changed);
    }
  EXPECT_TRUE(std::holds_alternative<std::vector<form_part>>(parse_multipart(form_type, body)));
}

// --- file_store ---

struct files_api : ::testing::Test {
  file_store store{1 << 20};
  counter_ids ids;
  std::int64_t now = 1700000000;

  std::variant<std::string, api_error> upload(std::string_view content, std::string_view purpose = "batch",
                                              std::string_view filename = "\"in.jsonl\"") {
    return store.upload(form_type, requests_body(boundary, purpose, filename, content), now, std::ref(ids));
  }
  json uploaded(std::string_view content) {
    auto r = upload(content);
    if (auto* e = std::get_if<api_error>(&r)) {
      ADD_FAILURE() << e->message;
      return nullptr;
    }
    return json::parse(std::get<std::string>(r));
  }
  api_error refused_upload(std::string_view content, std::string_view purpose = "batch",
                           std::string_view filename = "\"in.jsonl\"") {
    auto r = upload(content, purpose, filename);
    if (auto* e = std::get_if<api_error>(&r))
      return *e;
    ADD_FAILURE() << "uploaded: " << std::get<std::string>(r);
    return api_error{0, "", "", "", ""};
  }
  file_store::served ok(std::string_view method, std::string_view rest, std::string_view query = {}) {
    auto r = store.serve(method, rest, query);
    if (auto* e = std::get_if<api_error>(&r)) {
      ADD_FAILURE() << method << " " << rest << "?" << query << ": " << e->status << " " << e->message;
      return {};
    }
    return std::get<file_store::served>(r);
  }
  json listed(std::string_view query = {}) { return json::parse(ok("GET", "", query).body); }
  api_error refused(std::string_view method, std::string_view rest, std::string_view query = {}) {
    auto r = store.serve(method, rest, query);
    if (auto* e = std::get_if<api_error>(&r))
      return *e;
    ADD_FAILURE() << method << " " << rest << "?" << query << " answered " << std::get<file_store::served>(r).body;
    return api_error{0, "", "", "", ""};
  }
  /// The ids a list answer holds, in order.
  static std::vector<std::string> ids_of(const json& list) {
    std::vector<std::string> out;
    for (const auto& f : list["data"])
      out.push_back(f["id"].get<std::string>());
    return out;
  }
};

TEST_F(files_api, an_upload_is_listed_read_and_deleted) {
  std::map<std::string, std::string> kept; // as the front's files would hold them
  store.watch([&](const std::string& id, const file_store::entry& e) { kept[id] = file_store::to_text(e); },
              [&](const std::string& id) { kept.erase(id); });
  const auto content = "{\"custom_id\": \"a\"}\n"s;
  const auto f = uploaded(content);
  EXPECT_EQ(f, json::parse(R"({"id": "file_1", "object": "file", "bytes": 19, "created_at": 1700000000,
      "filename": "in.jsonl", "purpose": "batch", "status": "processed", "expires_at": null,
      "status_details": null})"));
  EXPECT_EQ(kept.count("file_1"), 1u);
  EXPECT_EQ(store.size(), 1u);
  EXPECT_EQ(store.bytes(), content.size());

  EXPECT_EQ(json::parse(ok("GET", "/file_1").body), f);
  EXPECT_EQ(json::parse(ok("GET", "/file%5f1").body), f) << "a percent-encoded id";
  const auto raw = ok("GET", "/file_1/content");
  EXPECT_EQ(raw.body, content);
  EXPECT_EQ(raw.content_type, "application/octet-stream");
  const auto list = listed();
  EXPECT_EQ(list["object"], "list");
  EXPECT_EQ(list["data"], json::array({f}));
  EXPECT_EQ(list["first_id"], "file_1");
  EXPECT_EQ(list["last_id"], "file_1");
  EXPECT_EQ(list["has_more"], false);

  EXPECT_EQ(json::parse(ok("DELETE", "/file_1").body),
            json::parse(R"({"id": "file_1", "object": "file", "deleted": true})"));
  EXPECT_TRUE(kept.empty());
  EXPECT_EQ(store.size(), 0u);
  EXPECT_EQ(store.bytes(), 0u);
  for (const auto* rest : {"/file_1", "/file_1/content"}) {
    const auto e = refused("GET", rest);
    EXPECT_EQ(e.status, 404);
    EXPECT_EQ(e.code, "not_found");
    EXPECT_NE(e.message.find("no file file_1"), std::string::npos) << e.message;
  }
  EXPECT_EQ(refused("DELETE", "/file_1").status, 404);
  EXPECT_EQ(listed(), json::parse(R"({"object": "list", "data": [], "first_id": null, "last_id": null,
      "has_more": false})"));
}

TEST_F(files_api, the_paths_and_methods_served) {
  EXPECT_EQ(file_store::methods(""), "GET, POST");
  EXPECT_EQ(file_store::methods("/file_1"), "GET, DELETE");
  EXPECT_EQ(file_store::methods("/file_1/content"), "GET");
  for (const auto* none : {"/", "/file_1/", "/file_1/other", "/file_1/content/x", "x", "//content"})
    EXPECT_EQ(file_store::methods(none), "") << none;
  uploaded("{}");
  EXPECT_EQ(refused("DELETE", "/file_1/content").status, 405);
  EXPECT_EQ(refused("POST", "/file_1").status, 405);
  EXPECT_EQ(refused("GET", "/file_1/other").status, 404);
  const auto e = refused("GET", "/file_1", "x=1");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "x");
}

TEST_F(files_api, an_upload_needs_purpose_batch_and_a_named_file_with_bytes) {
  auto e = refused_upload("{}", "fine-tune");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "purpose");
  EXPECT_NE(e.message.find("only \"batch\" is"), std::string::npos) << e.message;
  e = refused_upload("", "batch");
  EXPECT_EQ(e.param, "file");
  EXPECT_NE(e.message.find("is empty"), std::string::npos) << e.message;
  e = refused_upload("{}", "batch", "\"\"");
  EXPECT_EQ(e.param, "file");
  EXPECT_NE(e.message.find("filename"), std::string::npos) << e.message;
  e = refused_upload("{}", "batch", "\"\xf0.jsonl\""); // (kept, it would read back otherwise from its file)
  EXPECT_EQ(e.param, "file");
  EXPECT_NE(e.message.find("not UTF-8"), std::string::npos) << e.message;

  const auto part = [](std::string_view name, std::string_view value) {
    return "--" + boundary + "\r\nContent-Disposition: form-data; name=\"" + std::string(name) + "\"\r\n\r\n"
           + std::string(value) + "\r\n";
  };
  const auto end = "--" + boundary + "--\r\n";
  const auto upload_of = [&](const std::string& body) {
    auto r = store.upload(form_type, body, now, std::ref(ids));
    return std::holds_alternative<api_error>(r) ? std::get<api_error>(r) : api_error{0, "", "", "", ""};
  };
  e = upload_of(part("file", "{}") + end);
  EXPECT_EQ(e.param, "purpose") << "no purpose part";
  e = upload_of(part("purpose", "batch") + end);
  EXPECT_EQ(e.param, "file") << "no file part";
  e = upload_of(part("purpose", "batch") + part("model", "x") + end);
  EXPECT_EQ(e.param, "model");
  EXPECT_NE(e.message.find("unknown part \"model\""), std::string::npos) << e.message;
  e = upload_of(part("purpose", "batch") + part("purpose", "batch") + end);
  EXPECT_EQ(e.param, "purpose");
  e = upload_of("not multipart");
  EXPECT_EQ(e.status, 400);
  const auto wrong_type = store.upload("application/json", "{}", now, std::ref(ids));
  ASSERT_TRUE(std::holds_alternative<api_error>(wrong_type));
  EXPECT_NE(std::get<api_error>(wrong_type).message.find("multipart/form-data"), std::string::npos);
  EXPECT_EQ(store.size(), 0u);
  EXPECT_EQ(ids.next, 0) << "no id is spent on a refused upload";
}

TEST(file_store, a_full_store_refuses_uploads_but_keeps_the_servers_own_files) {
  file_store store(100);
  counter_ids ids;
  const auto up = [&](std::size_t n) {
    return store.upload(form_type, requests_body(boundary, "batch", "\"f\"", std::string(n, 'x')), 1, std::ref(ids));
  };
  ASSERT_TRUE(std::holds_alternative<std::string>(up(60)));
  const auto full = up(41);
  ASSERT_TRUE(std::holds_alternative<api_error>(full));
  const auto& e = std::get<api_error>(full);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "file_store_full");
  EXPECT_NE(e.message.find("holds 60 of its 100 bytes"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("file_store_mb"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("DELETE /v1/files/ID"), std::string::npos) << e.message;
  ASSERT_TRUE(std::holds_alternative<std::string>(up(40))) << "just fits";

  const auto out = store.add("batch_1_output.jsonl", "batch_output", std::string(500, 'o'), 2, std::ref(ids));
  ASSERT_NE(store.find(out), nullptr) << "results are kept past the capacity";
  EXPECT_EQ(store.find(out)->content.size(), 500u);
  EXPECT_EQ(store.find(out)->purpose, "batch_output");
  EXPECT_EQ(store.bytes(), 600u);
  EXPECT_TRUE(std::holds_alternative<api_error>(up(1)));
  EXPECT_TRUE(store.erase(out));
  EXPECT_FALSE(store.erase(out));
  EXPECT_EQ(store.bytes(), 100u);
  EXPECT_TRUE(store.erase("file_1"));
  EXPECT_TRUE(std::holds_alternative<std::string>(up(60))) << "room again once files are deleted";

  file_store off(0);
  const auto refused = off.upload(form_type, requests_body(boundary, "batch", "\"f\"", "{}"), 1, std::ref(ids));
  ASSERT_TRUE(std::holds_alternative<api_error>(refused));
  EXPECT_EQ(std::get<api_error>(refused).code, "file_store_full");
  EXPECT_NE(std::get<api_error>(refused).message.find("file_store_mb is 0"), std::string::npos);
}

TEST_F(files_api, the_list_pages_by_limit_after_order_and_purpose) {
  // file_1 .. file_3 uploaded at one second (listed by the order they came
  // in), file_4 an output written later, file_5 earlier.
  uploaded("1");
  uploaded("2");
  uploaded("3");
  store.add("out.jsonl", "batch_output", "4", now + 10, std::ref(ids));
  store.add("old.jsonl", "batch_output", "5", now - 10, std::ref(ids));
  using ids_t = std::vector<std::string>;
  EXPECT_EQ(ids_of(listed()), (ids_t{"file_4", "file_3", "file_2", "file_1", "file_5"})) << "newest first";
  EXPECT_EQ(ids_of(listed("order=asc")), (ids_t{"file_5", "file_1", "file_2", "file_3", "file_4"}));
  auto page = listed("limit=2");
  EXPECT_EQ(ids_of(page), (ids_t{"file_4", "file_3"}));
  EXPECT_EQ(page["first_id"], "file_4");
  EXPECT_EQ(page["last_id"], "file_3");
  EXPECT_EQ(page["has_more"], true);
  page = listed("limit=2&after=file_3");
  EXPECT_EQ(ids_of(page), (ids_t{"file_2", "file_1"}));
  EXPECT_EQ(page["has_more"], true);
  page = listed("limit=2&after=file_1");
  EXPECT_EQ(ids_of(page), (ids_t{"file_5"}));
  EXPECT_EQ(page["has_more"], false);
  EXPECT_EQ(ids_of(listed("purpose=batch&order=asc")), (ids_t{"file_1", "file_2", "file_3"}));
  page = listed("purpose=batch_output&limit=1");
  EXPECT_EQ(ids_of(page), (ids_t{"file_4"}));
  EXPECT_EQ(page["has_more"], true);
  page = listed("purpose=batch&after=file_2");
  EXPECT_EQ(ids_of(page), (ids_t{"file_1"}));
  EXPECT_EQ(page["has_more"], false) << "file_5 is not of the purpose";
  EXPECT_EQ(ids_of(listed("limit=10000")).size(), 5u);
  EXPECT_TRUE(ids_of(listed("purpose=fine-tune")).empty());

  for (const auto& [query, param] : std::vector<std::pair<std::string, std::string>>{
         {"limit=0", "limit"}, {"limit=10001", "limit"}, {"limit=x", "limit"}, {"limit=", "limit"},
         {"limit=-1", "limit"}, {"order=up", "order"}, {"after=file_9", "after"}, {"purpose=", "purpose"},
         {"foo=1", "foo"}, {"limit=1&cursor=x", "cursor"}}) {
    const auto e = refused("GET", "", query);
    EXPECT_EQ(e.status, 400) << query;
    EXPECT_EQ(e.param, param) << query;
    EXPECT_NE(e.message.find(param), std::string::npos) << e.message;
  }
}

TEST(file_store, the_text_form_keeps_every_byte_and_restore_is_unheard) {
  file_store::entry e{"all bytes.bin", "batch", 1700000000, {}, 7};
  for (int c = 0; c < 256; ++c)
    e.content += static_cast<char>(c);
  const auto text = file_store::to_text(e);
  EXPECT_TRUE(json::parse(text).is_object());
  const auto back = file_store::from_text(text);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->content, e.content);
  EXPECT_EQ(back->filename, e.filename);
  EXPECT_EQ(back->purpose, e.purpose);
  EXPECT_EQ(back->created_at, e.created_at);
  EXPECT_EQ(back->seq, 7u);
  // Each byte alone, and text that is UTF-8 (kept readable).
  for (int c = 0; c < 256; ++c) {
    e.content = std::string(1, static_cast<char>(c)) + "x";
    EXPECT_EQ(file_store::from_text(file_store::to_text(e))->content, e.content) << c;
  }
  for (const auto* s : {"{\"a\": \"\xc3\xa9\"}\n", "\xed\xa0\x80", "\xc0\xaf", "\xf4\x90\x80\x80", "\xe2\x82", ""}) {
    e.content = s;
    EXPECT_EQ(file_store::from_text(file_store::to_text(e))->content, e.content) << s;
  }
  e.content = "{\"custom_id\": \"a\"}\n";
  EXPECT_EQ(json::parse(file_store::to_text(e))["content"], e.content);
  for (const auto* bad : {"", "[]", R"({"filename": "a", "purpose": "batch", "created_at": 1, "seq": 1})",
                          R"({"filename": "a", "purpose": "batch", "created_at": 1, "seq": 1, "content_base64": "abc"})",
                          R"({"filename": "a", "purpose": "batch", "created_at": 1, "seq": 1, "content_base64": "a=bc"})",
                          R"({"filename": "a", "purpose": "batch", "created_at": 1, "seq": -1, "content": ""})",
                          R"({"filename": 1, "purpose": "batch", "created_at": 1, "seq": 1, "content": ""})"})
    EXPECT_FALSE(file_store::from_text(bad).has_value()) << bad;

  // Read back into a new store, unheard; files added later come after it.
  file_store store(10);
  counter_ids ids;
  int heard = 0;
  store.watch([&](const std::string&, const file_store::entry&) { ++heard; }, [](const std::string&) {});
  auto big = *file_store::from_text(text);
  store.restore("file_old", big);
  EXPECT_EQ(heard, 0);
  EXPECT_EQ(store.bytes(), 256u) << "kept past the capacity";
  EXPECT_EQ(store.find("file_old")->content, big.content);
  const auto id = store.add("o", "batch_output", "x", 1700000000, std::ref(ids));
  EXPECT_EQ(heard, 1);
  EXPECT_GT(store.find(id)->seq, 7u);
  const auto list = json::parse(std::get<file_store::served>(store.serve("GET", "", "order=asc")).body);
  EXPECT_EQ(list["data"][0]["id"], "file_old");
  EXPECT_EQ(list["data"][1]["id"], id);
}

// --- batches ---

TEST(batch_create, a_request_is_read_and_each_bad_field_named) {
  auto r = parse_batch_create(R"({"input_file_id": "file_1", "endpoint": "/v1/chat/completions",
      "completion_window": "24h", "metadata": {"job": "nightly"}, "output_expires_after": {"anchor": "created_at",
      "seconds": 3600}})");
  ASSERT_TRUE(std::holds_alternative<batch_create>(r)) << std::get<api_error>(r).message;
  const auto& c = std::get<batch_create>(r);
  EXPECT_EQ(c.input_file_id, "file_1");
  EXPECT_EQ(c.endpoint, "/v1/chat/completions");
  EXPECT_EQ(c.completion_window, "24h");
  EXPECT_EQ(json::parse(c.metadata), json::parse(R"({"job": "nightly"})"));
  for (const auto* endpoint : {"/v1/completions", "/v1/responses"}) {
    auto ok = parse_batch_create(R"({"input_file_id": "f", "endpoint": ")" + std::string(endpoint) + "\"}");
    ASSERT_TRUE(std::holds_alternative<batch_create>(ok)) << endpoint;
    EXPECT_EQ(std::get<batch_create>(ok).metadata, "null");
    EXPECT_EQ(std::get<batch_create>(ok).completion_window, "24h");
  }

  std::string many = "{";
  for (int k = 0; k < 17; ++k)
    many += (k ? ", \"k" : "\"k") + std::to_string(k) + "\": \"v\"";
  many += "}";
  for (const auto& [body, param, says] : std::vector<std::tuple<std::string, std::string, std::string>>{
         {"nope", "", "not valid JSON"},
         {"[]", "", "must be a JSON object"},
         {R"({"endpoint": "/v1/completions"})", "input_file_id", "missing field \"input_file_id\""},
         {R"({"input_file_id": 1, "endpoint": "/v1/completions"})", "input_file_id", "must be a file id"},
         {R"({"input_file_id": "f"})", "endpoint", "missing field \"endpoint\""},
         {R"({"input_file_id": "f", "endpoint": "/v1/embeddings"})", "endpoint",
          "/v1/completions, /v1/chat/completions, /v1/responses"},
         {R"({"input_file_id": "f", "endpoint": "/v1/completions", "completion_window": "48h"})", "completion_window",
          "\"24h\""},
         {R"({"input_file_id": "f", "endpoint": "/v1/completions", "metadata": "x"})", "metadata", "metadata"},
         {R"({"input_file_id": "f", "endpoint": "/v1/completions", "metadata": )" + many + "}", "metadata", "17 pairs"},
         {R"({"input_file_id": "f", "endpoint": "/v1/completions", "model": "m"})", "model", "unknown field \"model\""},
       }) {
    auto e = parse_batch_create(body);
    ASSERT_TRUE(std::holds_alternative<api_error>(e)) << body;
    EXPECT_EQ(std::get<api_error>(e).status, 400) << body;
    EXPECT_EQ(std::get<api_error>(e).param, param) << body;
    EXPECT_NE(std::get<api_error>(e).message.find(says), std::string::npos) << std::get<api_error>(e).message;
  }
}

std::string request_line(std::string_view id, std::string_view url = "/v1/chat/completions") {
  return R"({"custom_id": ")" + std::string(id) + R"(", "method": "POST", "url": ")" + std::string(url)
         + R"(", "body": {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}})";
}

std::vector<batch_line_error> errors_of(std::string_view content, std::string_view endpoint = "/v1/chat/completions") {
  auto r = read_batch_input(content, endpoint);
  if (!std::holds_alternative<std::vector<batch_line_error>>(r)) {
    ADD_FAILURE() << "read as good: " << content;
    return {};
  }
  return std::get<std::vector<batch_line_error>>(r);
}

TEST(batch_input, a_good_file_reads_as_its_requests) {
  const auto content = request_line("a") + "\r\n\r\n" + request_line("b") + "\r\n   \n" + request_line("c") + "\n";
  auto r = read_batch_input(content, "/v1/chat/completions");
  ASSERT_TRUE(std::holds_alternative<std::vector<batch_line>>(r));
  const auto& lines = std::get<std::vector<batch_line>>(r);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].custom_id, "a");
  EXPECT_EQ(lines[1].custom_id, "b");
  EXPECT_EQ(lines[2].custom_id, "c");
  EXPECT_EQ(json::parse(lines[0].body), json::parse(R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}]})"));
  // No newline at the end.
  auto one = read_batch_input(request_line("x", "/v1/completions"), "/v1/completions");
  ASSERT_TRUE(std::holds_alternative<std::vector<batch_line>>(one));
  EXPECT_EQ(std::get<std::vector<batch_line>>(one).size(), 1u);
}

TEST(batch_input, each_bad_line_is_listed_with_its_code_line_and_param) {
  const std::vector<std::string> lines = {
    request_line("a"),                                                               // 1: good
    "{not json",                                                                     // 2
    "[1, 2]",                                                                        // 3
    R"({"method": "POST", "url": "/v1/chat/completions", "body": {}})",              // 4
    R"({"custom_id": "d", "method": "GET", "url": "/v1/chat/completions", "body": {}})", // 5
    request_line("e", "/v1/completions"),                                            // 6
    R"({"custom_id": "f", "method": "POST", "url": "/v1/chat/completions", "body": "x"})", // 7
    request_line("a"),                                                               // 8: a's again
    R"({"custom_id": "g", "method": "POST", "url": "/v1/chat/completions", "body": {}, "extra": 1})", // 9
    R"({"custom_id": 5, "method": "POST", "url": "/v1/chat/completions", "body": {}})",  // 10
    R"({"custom_id": "h", "url": "/v1/chat/completions", "body": {}})",              // 11
    "",                                                                              // 12: skipped
    R"({"custom_id": "i", "method": "POST", "url": "/v1/chat/completions"})",        // 13
  };
  std::string content;
  for (const auto& l : lines)
    content += l + "\n";
  const auto errors = errors_of(content);
  struct want {
    std::string code;
    std::size_t line;
    std::string param;
  };
  const std::vector<want> expected = {
    {"invalid_json_line", 2, ""},          {"invalid_json_line", 3, ""},
    {"missing_required_parameter", 4, "custom_id"}, {"invalid_value", 5, "method"},
    {"invalid_value", 6, "url"},           {"invalid_value", 7, "body"},
    {"duplicate_custom_id", 8, "custom_id"}, {"unexpected_parameter", 9, "extra"},
    {"invalid_value", 10, "custom_id"},    {"missing_required_parameter", 11, "method"},
    {"missing_required_parameter", 13, "body"},
  };
  ASSERT_EQ(errors.size(), expected.size());
  for (std::size_t k = 0; k < expected.size(); ++k) {
    EXPECT_EQ(errors[k].code, expected[k].code) << k;
    EXPECT_EQ(errors[k].line, expected[k].line) << k;
    EXPECT_EQ(errors[k].param, expected[k].param) << k;
    EXPECT_EQ(errors[k].message.rfind("line " + std::to_string(expected[k].line) + ": ", 0), 0u) << errors[k].message;
  }
  EXPECT_NE(errors[4].message.find("\"/v1/completions\""), std::string::npos) << errors[4].message;
  EXPECT_NE(errors[4].message.find("the batch's endpoint is \"/v1/chat/completions\""), std::string::npos)
    << errors[4].message;
  EXPECT_NE(errors[6].message.find("that of line 1"), std::string::npos) << errors[6].message;
}

TEST(batch_input, empty_too_large_and_very_bad_files_are_refused_as_a_whole_or_the_first_100) {
  for (const auto* empty : {"", "\n", "\r\n\r\n", "  \n\t\n"}) {
    const auto e = errors_of(empty);
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].code, "empty_file");
    EXPECT_EQ(e[0].line, 0u);
  }
  std::string bad;
  for (int k = 0; k < 250; ++k)
    bad += "x\n";
  const auto capped = errors_of(bad);
  ASSERT_EQ(capped.size(), 100u);
  EXPECT_EQ(capped.front().line, 1u);
  EXPECT_EQ(capped.back().line, 100u);

  std::string many;
  for (std::size_t k = 0; k <= max_batch_lines; ++k)
    many += "{}\n";
  const auto e = errors_of(many);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].code, "too_many_requests");
  EXPECT_EQ(e[0].line, 0u);
  EXPECT_NE(e[0].message.find("more than 50000"), std::string::npos) << e[0].message;
  many.clear();
  for (std::size_t k = 0; k < max_batch_lines; ++k)
    many += R"({"custom_id": "r)" + std::to_string(k) + R"(", "method": "POST", "url": "/v1/completions", "body": {}})"
            + "\n";
  auto r = read_batch_input(many, "/v1/completions");
  ASSERT_TRUE(std::holds_alternative<std::vector<batch_line>>(r)) << "50000 are taken";
  EXPECT_EQ(std::get<std::vector<batch_line>>(r).size(), max_batch_lines);
}

TEST(batch, the_object_has_openais_fields_null_where_unset) {
  batch b;
  b.endpoint = "/v1/completions";
  b.input_file_id = "file_1";
  b.created_at = 100;
  b.expires_at = 100 + 86400;
  const auto fresh = json::parse(batch_json("batch_1", b));
  EXPECT_EQ(fresh, json::parse(R"({"id": "batch_1", "object": "batch", "endpoint": "/v1/completions",
      "errors": null, "input_file_id": "file_1", "completion_window": "24h", "status": "validating",
      "output_file_id": null, "error_file_id": null, "created_at": 100, "in_progress_at": null,
      "expires_at": 86500, "finalizing_at": null, "completed_at": null, "failed_at": null, "expired_at": null,
      "cancelling_at": null, "cancelled_at": null, "request_counts": {"total": 0, "completed": 0, "failed": 0},
      "metadata": null})"));
  b.status = "completed";
  b.in_progress_at = 101;
  b.finalizing_at = 150;
  b.completed_at = 151;
  b.output_file_id = "file_2";
  b.error_file_id = "file_3";
  b.total = 3;
  b.completed = 2;
  b.failed = 1;
  b.metadata = R"({"a": "b"})";
  auto j = json::parse(batch_json("batch_1", b));
  EXPECT_EQ(j["status"], "completed");
  EXPECT_EQ(j["in_progress_at"], 101);
  EXPECT_EQ(j["finalizing_at"], 150);
  EXPECT_EQ(j["completed_at"], 151);
  EXPECT_EQ(j["failed_at"], nullptr);
  EXPECT_EQ(j["output_file_id"], "file_2");
  EXPECT_EQ(j["error_file_id"], "file_3");
  EXPECT_EQ(j["request_counts"], json::parse(R"({"total": 3, "completed": 2, "failed": 1})"));
  EXPECT_EQ(j["metadata"], json::parse(R"({"a": "b"})"));
  EXPECT_TRUE(b.ended());

  batch failed;
  failed.status = "failed";
  failed.failed_at = 5;
  failed.errors = {{"empty_file", "no requests", "", 0}, {"invalid_value", "line 2: bad", "url", 2}};
  j = json::parse(batch_json("batch_2", failed));
  EXPECT_EQ(j["errors"], json::parse(R"({"object": "list", "data": [
      {"code": "empty_file", "message": "no requests", "param": null, "line": null},
      {"code": "invalid_value", "message": "line 2: bad", "param": "url", "line": 2}]})"));
  EXPECT_EQ(j["failed_at"], 5);
  for (const auto* status : {"failed", "completed", "expired", "cancelled"}) {
    failed.status = status;
    EXPECT_TRUE(failed.ended()) << status;
  }
  for (const auto* status : {"validating", "in_progress", "finalizing", "cancelling"}) {
    failed.status = status;
    EXPECT_FALSE(failed.ended()) << status;
  }
}

TEST(batch, output_and_error_lines_are_openais) {
  const auto line = batch_output_line("batch_req_1", "a", 200, "req_1", R"({"id": "cmpl-1", "choices": []})");
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  EXPECT_EQ(json::parse(line), json::parse(R"({"id": "batch_req_1", "custom_id": "a", "response": {
      "status_code": 200, "request_id": "req_1", "body": {"id": "cmpl-1", "choices": []}}, "error": null})"));
  EXPECT_EQ(json::parse(batch_output_line("r", "b", 400, "q", "not json"))["response"]["body"], "not json");
  const auto error = batch_error_line("batch_req_2", "b", "batch_expired", "the batch expired before it ran");
  ASSERT_EQ(error.back(), '\n');
  EXPECT_EQ(json::parse(error), json::parse(R"({"id": "batch_req_2", "custom_id": "b", "response": null,
      "error": {"code": "batch_expired", "message": "the batch expired before it ran"}})"));
}

TEST(batch_store, the_list_is_newest_first_and_pages_by_limit_and_after) {
  batch_store store;
  for (int k = 1; k <= 25; ++k) {
    batch b;
    b.created_at = k;
    store.put("batch_" + std::to_string(k), b);
  }
  EXPECT_EQ(store.size(), 25u);
  const auto list = [&](std::string_view q) {
    auto r = store.list(q);
    if (auto* e = std::get_if<api_error>(&r)) {
      ADD_FAILURE() << q << ": " << e->message;
      return json();
    }
    return json::parse(std::get<std::string>(r));
  };
  auto page = list("");
  ASSERT_EQ(page["data"].size(), 20u) << "20 by default";
  EXPECT_EQ(page["object"], "list");
  EXPECT_EQ(page["first_id"], "batch_25");
  EXPECT_EQ(page["last_id"], "batch_6");
  EXPECT_EQ(page["has_more"], true);
  EXPECT_EQ(page["data"][0]["object"], "batch");
  page = list("after=batch_6");
  ASSERT_EQ(page["data"].size(), 5u);
  EXPECT_EQ(page["first_id"], "batch_5");
  EXPECT_EQ(page["last_id"], "batch_1");
  EXPECT_EQ(page["has_more"], false);
  page = list("limit=2&after=batch_3");
  EXPECT_EQ(page["first_id"], "batch_2");
  EXPECT_EQ(page["last_id"], "batch_1");
  EXPECT_EQ(page["has_more"], false);
  page = list("limit=100&after=batch_1");
  EXPECT_TRUE(page["data"].empty());
  EXPECT_EQ(page["first_id"], nullptr);

  // Replaced in place: it keeps its place.
  batch again;
  again.status = "in_progress";
  store.put("batch_1", again);
  EXPECT_EQ(store.size(), 25u);
  EXPECT_EQ(store.find("batch_1")->status, "in_progress");
  EXPECT_EQ(store.find("batch_99"), nullptr);
  const auto all = store.all();
  ASSERT_EQ(all.size(), 25u);
  EXPECT_EQ(all.front().first, "batch_1");
  EXPECT_EQ(all.front().second, store.find("batch_1"));
  EXPECT_EQ(all.back().first, "batch_25");

  for (const auto& [query, param] : std::vector<std::pair<std::string, std::string>>{
         {"limit=0", "limit"}, {"limit=101", "limit"}, {"limit=ten", "limit"}, {"after=batch_0", "after"},
         {"order=asc", "order"}}) {
    auto r = store.list(query);
    ASSERT_TRUE(std::holds_alternative<api_error>(r)) << query;
    EXPECT_EQ(std::get<api_error>(r).status, 400);
    EXPECT_EQ(std::get<api_error>(r).param, param) << query;
  }
}

TEST(batch_store, a_running_batch_reads_back_from_its_text_whole) {
  batch b;
  b.endpoint = "/v1/chat/completions";
  b.input_file_id = "file_1";
  b.metadata = R"({"k": "v"})";
  b.status = "in_progress";
  b.created_at = 10;
  b.expires_at = 10 + 86400;
  b.in_progress_at = 11;
  b.lines = {{"a", R"({"model":"m"})"}, {"b", R"({"model":"m","n":2})"}, {"c", "{}"}};
  b.finished = {1, 0, 1};
  b.output = batch_output_line("r1", "a", 200, "q1", R"({"x": "\u00e9"})");
  b.error_output = batch_output_line("r3", "c", 400, "q3", R"({"error": {}})") + std::string("\xff\x00", 2);
  b.total = 3;
  b.completed = 1;
  b.failed = 1;
  b.errors = {{"invalid_value", "m", "url", 4}};
  const auto back = batch_store::from_text(batch_store::to_text(b));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->endpoint, b.endpoint);
  EXPECT_EQ(back->input_file_id, b.input_file_id);
  EXPECT_EQ(back->completion_window, b.completion_window);
  EXPECT_EQ(back->metadata, b.metadata);
  EXPECT_EQ(back->status, b.status);
  EXPECT_EQ(back->created_at, b.created_at);
  EXPECT_EQ(back->expires_at, b.expires_at);
  EXPECT_EQ(back->in_progress_at, b.in_progress_at);
  EXPECT_FALSE(back->completed_at.has_value());
  ASSERT_EQ(back->lines.size(), 3u);
  for (std::size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(back->lines[k].custom_id, b.lines[k].custom_id);
    EXPECT_EQ(back->lines[k].body, b.lines[k].body);
  }
  EXPECT_EQ(back->finished, b.finished);
  EXPECT_EQ(back->output, b.output);
  EXPECT_EQ(back->error_output, b.error_output);
  EXPECT_EQ(back->total, 3u);
  EXPECT_EQ(back->completed, 1u);
  EXPECT_EQ(back->failed, 1u);
  ASSERT_EQ(back->errors.size(), 1u);
  EXPECT_EQ(back->errors[0].param, "url");
  EXPECT_EQ(back->errors[0].line, 4u);
  EXPECT_EQ(batch_json("batch_1", *back), batch_json("batch_1", b));

  auto j = json::parse(batch_store::to_text(b));
  for (const auto& [key, value] : std::vector<std::pair<std::string, json>>{
         {"status", "running"}, {"finished", "01"}, {"finished", "0x1"}, {"metadata", "[]"},
         {"lines", json::parse(R"([["a", "not json"]])")}, {"in_progress_at", "soon"}, {"total", -1}}) {
    auto changed = j;
    changed[key] = value;
    EXPECT_FALSE(batch_store::from_text(changed.dump()).has_value()) << key << " " << value;
  }
  for (const auto* bad : {"", "[]", "{}"})
    EXPECT_FALSE(batch_store::from_text(bad).has_value()) << bad;
}

TEST(batch_store, a_running_batchs_log_replays_its_answers_onto_its_state_once) {
  batch b;
  b.status = "in_progress";
  b.lines = {{"a", "{}"}, {"b", "{}"}, {"c", "{}"}, {"d", "{}"}};
  b.finished.assign(4, 0);
  b.total = 4;
  const auto out_a = batch_output_line("r1", "a", 200, "q1", R"({"x": 1})");
  const auto err_c = batch_output_line("r3", "c", 400, "q3", R"({"error": {}})");
  const auto out_d = batch_output_line("r4", "d", 200, "q4", R"({"x": 4})") + std::string("\xff", 1);
  EXPECT_TRUE(b.answer(0, false, out_a));
  EXPECT_FALSE(b.answer(0, false, out_a)) << "a line is answered once";
  EXPECT_FALSE(b.answer(9, false, out_a)) << "past the lines";
  // The state written with line a answered; then c and d logged, and a
  // again (a record the state's write came after).
  const auto state = batch_store::to_text(b);
  const auto log = batch_log_record(2, true, err_c) + batch_log_record(3, false, out_d) + batch_log_record(0, false, out_a);
  auto back = *batch_store::from_text(state);
  EXPECT_EQ(replay_batch_log(back, log), 2u);
  EXPECT_EQ(back.finished, (std::vector<std::uint8_t>{1, 0, 1, 1}));
  EXPECT_EQ(back.output, out_a + out_d) << "every byte, the not-UTF-8 one too";
  EXPECT_EQ(back.error_output, err_c);
  EXPECT_EQ(back.completed, 2u);
  EXPECT_EQ(back.failed, 1u);
  EXPECT_EQ(replay_batch_log(back, log), 0u) << "replayed again, nothing changes";
  // A record a crash cut short ends the replay; one past the lines is passed over.
  auto torn = *batch_store::from_text(state);
  const auto whole = batch_log_record(2, true, err_c);
  EXPECT_EQ(replay_batch_log(torn, batch_log_record(7, false, out_a) + whole + whole.substr(0, 10)), 1u);
  EXPECT_EQ(torn.failed, 1u);
  for (const auto* bad : {"not json\n", "{\"line\": -1, \"error\": false, \"text\": \"\"}\n",
                          "{\"line\": 1, \"error\": 0, \"text\": \"\"}\n", "{\"line\": 1, \"error\": false}\n"}) {
    auto t = *batch_store::from_text(state);
    EXPECT_EQ(replay_batch_log(t, std::string(bad) + batch_log_record(1, false, out_a)), 0u) << bad;
  }
}

TEST(batch_lines, run_at_the_batch_priority_unless_they_give_their_own) {
  EXPECT_EQ(nlohmann::json::parse(with_default_priority(R"({"model":"m","prompt":"p"})", -1)),
            nlohmann::json::parse(R"({"model":"m","prompt":"p","priority":-1})"));
  EXPECT_EQ(with_default_priority(R"({"model":"m","priority":7})", -1), R"({"model":"m","priority":7})")
    << "a line's own priority stands";
  EXPECT_EQ(with_default_priority(R"({"model":"m"})", 0), R"({"model":"m"})") << "0 is the default: nothing added";
}

TEST(multipart, more_parts_than_an_upload_needs_are_refused) {
  std::string body;
  for (std::size_t k = 0; k <= max_form_parts; ++k)
    body += "--b\r\nContent-Disposition: form-data; name=\"p" + std::to_string(k) + "\"\r\n\r\nv\r\n";
  body += "--b--\r\n";
  const auto r = parse_multipart("multipart/form-data; boundary=b", body);
  ASSERT_TRUE(std::holds_alternative<api_error>(r));
  EXPECT_NE(std::get<api_error>(r).message.find("more than 16 parts"), std::string::npos);
}

} // namespace
} // namespace troupe::openai
