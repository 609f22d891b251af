#include "messages/batches.hpp"

#include "messages/conversations.hpp"
#include "messages/responses.hpp"
#include "messages/wire.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <unordered_map>
#include <type_traits>
#include <utility>

namespace troupe::openai {

namespace {

using json = nlohmann::ordered_json;

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

/// At most `n` bytes of what a client sent, to quote it in a message.
std::string quoted(std::string_view s, std::size_t n = 60) {
  return std::string(s.substr(0, n)) + (s.size() > n ? "..." : "");
}

char lower(char c) noexcept {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

std::string lowered(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), lower);
  return out;
}

bool blank(char c) noexcept {
  return c == ' ' || c == '\t';
}

std::string_view trimmed(std::string_view s) noexcept {
  while (!s.empty() && blank(s.front()))
    s.remove_prefix(1);
  while (!s.empty() && blank(s.back()))
    s.remove_suffix(1);
  return s;
}

/// A header value read as "VALUE; NAME=VALUE; NAME="QUOTED"": the first
/// value, then its parameters (names lowered, quoted values unescaped).
struct header_value {
  std::string value;
  std::vector<std::pair<std::string, std::string>> params;
  /// The first parameter named `name`, or none.
  const std::string* param(std::string_view name) const {
    for (const auto& [n, v] : params)
      if (n == name)
        return &v;
    return nullptr;
  }
};

/// None where a quoted value is not closed.
std::optional<header_value> read_header_value(std::string_view s) {
  header_value out;
  auto semi = s.find(';');
  out.value = std::string(trimmed(s.substr(0, semi)));
  std::size_t at = semi == std::string_view::npos ? s.size() : semi;
  while (at < s.size()) {
    ++at; // past ';'
    while (at < s.size() && blank(s[at]))
      ++at;
    if (at >= s.size())
      break;
    std::size_t end = at;
    while (end < s.size() && s[end] != '=' && s[end] != ';')
      ++end;
    auto name = lowered(trimmed(s.substr(at, end - at)));
    at = end;
    std::string value;
    if (at < s.size() && s[at] == '=') {
      ++at;
      while (at < s.size() && blank(s[at]))
        ++at;
      if (at < s.size() && s[at] == '"') {
        ++at;
        bool closed = false;
        while (at < s.size()) {
          const char c = s[at++];
          if (c == '"') {
            closed = true;
            break;
          }
          if (c == '\\') {
            if (at >= s.size())
              break;
            value += s[at++];
          } else {
            value += c;
          }
        }
        if (!closed)
          return std::nullopt;
        while (at < s.size() && s[at] != ';') // (what follows a quoted value is read past)
          ++at;
      } else {
        end = at;
        while (end < s.size() && s[end] != ';')
          ++end;
        value = std::string(trimmed(s.substr(at, end - at)));
        at = end;
      }
    }
    if (!name.empty())
      out.params.emplace_back(std::move(name), std::move(value));
  }
  return out;
}

/// Whether `listed` ("GET, DELETE") holds `method`.
bool takes(std::string_view listed, std::string_view method) {
  while (!listed.empty()) {
    const auto comma = listed.find(',');
    if (trimmed(listed.substr(0, comma)) == method)
      return true;
    listed = comma == std::string_view::npos ? std::string_view{} : listed.substr(comma + 1);
  }
  return false;
}

/// A query's `limit`: an integer from 1 to `most`.
std::optional<api_error> read_limit(const std::string& value, std::size_t most, std::size_t& limit) {
  if (value.empty() || value.size() > 6 || value.find_first_not_of("0123456789") != std::string::npos
      || std::stoul(value) < 1 || std::stoul(value) > most)
    return bad_request("query parameter \"limit\" must be an integer from 1 to " + std::to_string(most) + ", got \""
                         + quoted(value, 40) + "\"",
                       "limit");
  limit = std::stoul(value);
  return std::nullopt;
}

constexpr char base64_digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64(std::string_view s) {
  std::string out;
  out.reserve((s.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < s.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, s.size() - i);
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 3; ++k)
      v = (v << 8) | (k < n ? static_cast<unsigned char>(s[i + k]) : 0u);
    for (std::size_t k = 0; k < 4; ++k)
      out += k <= n ? base64_digits[(v >> (18 - 6 * k)) & 0x3Fu] : '=';
  }
  return out;
}

/// None where `s` is not base64 with its padding.
std::optional<std::string> unbase64(std::string_view s) {
  if (s.size() % 4 != 0)
    return std::nullopt;
  const auto digit = [](char c) -> int {
    if (c >= 'A' && c <= 'Z')
      return c - 'A';
    if (c >= 'a' && c <= 'z')
      return c - 'a' + 26;
    if (c >= '0' && c <= '9')
      return c - '0' + 52;
    if (c == '+')
      return 62;
    if (c == '/')
      return 63;
    return -1;
  };
  std::string out;
  out.reserve(s.size() / 4 * 3);
  for (std::size_t i = 0; i < s.size(); i += 4) {
    const bool last = i + 4 == s.size();
    std::size_t pad = 0;
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      const char c = s[i + k];
      if (c == '=' && last && k >= 2) {
        ++pad;
        v <<= 6;
        continue;
      }
      const int d = digit(c);
      if (d < 0 || pad > 0)
        return std::nullopt;
      v = (v << 6) | static_cast<std::uint32_t>(d);
    }
    for (std::size_t k = 0; k < 3 - pad; ++k)
      out += static_cast<char>((v >> (16 - 8 * k)) & 0xFFu);
  }
  return out;
}

/// Bytes kept in a JSON object losslessly: under `key` as a string where
/// they are UTF-8, else under `key`_base64.
void put_bytes(json& j, const std::string& key, std::string_view bytes) {
  if (wire::valid_utf8(bytes))
    j[key] = bytes;
  else
    j[key + "_base64"] = base64(bytes);
}

/// Reads back what put_bytes wrote; none where neither is there.
std::optional<std::string> get_bytes(const json& j, const std::string& key) {
  if (const auto it = j.find(key); it != j.end())
    return it->is_string() ? std::optional<std::string>(it->get<std::string>()) : std::nullopt;
  if (const auto it = j.find(key + "_base64"); it != j.end() && it->is_string())
    return unbase64(it->get_ref<const std::string&>());
  return std::nullopt;
}

api_error file_not_kept(std::string_view id) {
  return api_error{404, "invalid_request_error", "not_found",
                   "no file " + quoted(id, 80) + ": it was never uploaded or written, or was deleted", ""};
}

json file_object(std::string_view id, const file_store::entry& e) {
  return json{{"id", id},
              {"object", "file"},
              {"bytes", e.content.size()},
              {"created_at", e.created_at},
              {"filename", e.filename},
              {"purpose", e.purpose},
              {"status", "processed"},
              {"expires_at", nullptr},
              {"status_details", nullptr}};
}

/// A multipart part's headers read: a 400 where they are not those of a
/// form field.
std::optional<api_error> read_part_headers(std::string_view headers, std::size_t number, form_part& part) {
  std::vector<std::pair<std::string, std::string>> fields; // (name lowered, value)
  while (!headers.empty()) {
    const auto eol = headers.find('\n');
    auto line = headers.substr(0, eol);
    headers = eol == std::string_view::npos ? std::string_view{} : headers.substr(eol + 1);
    if (!line.empty() && line.back() == '\r')
      line.remove_suffix(1);
    if (!line.empty() && blank(line.front()) && !fields.empty()) { // a folded line goes on the header before it
      fields.back().second += " " + std::string(trimmed(line));
      continue;
    }
    const auto colon = line.find(':');
    if (colon == std::string_view::npos)
      return bad_request("multipart body: part " + std::to_string(number) + " has a header line with no colon: \""
                         + quoted(line, 40) + "\"");
    fields.emplace_back(lowered(trimmed(line.substr(0, colon))), std::string(trimmed(line.substr(colon + 1))));
  }
  const auto named = [&](std::string_view name) -> const std::string* {
    for (const auto& [n, v] : fields)
      if (n == name)
        return &v;
    return nullptr;
  };
  const auto* disposition = named("content-disposition");
  if (disposition == nullptr)
    return bad_request("multipart body: part " + std::to_string(number)
                       + " has no Content-Disposition header (form-data; name=\"...\")");
  const auto d = read_header_value(*disposition);
  if (!d)
    return bad_request("multipart body: part " + std::to_string(number)
                       + "'s Content-Disposition has a quoted value that is not closed");
  if (lowered(d->value) != "form-data")
    return bad_request("multipart body: part " + std::to_string(number) + "'s Content-Disposition is \""
                       + quoted(d->value, 40) + "\", not form-data");
  const auto* name = d->param("name");
  if (name == nullptr || name->empty())
    return bad_request("multipart body: part " + std::to_string(number)
                       + "'s Content-Disposition has no name (form-data; name=\"...\")");
  part.name = *name;
  if (const auto* filename = d->param("filename"))
    part.filename = *filename;
  if (const auto* type = named("content-type"))
    part.content_type = *type;
  return std::nullopt;
}

const char* const batch_statuses[] = {"validating", "failed",  "in_progress", "finalizing",
                                      "completed",  "expired", "cancelling",  "cancelled"};

json optional_time(const std::optional<std::int64_t>& t) {
  return t ? json(*t) : json();
}

/// A batch's times that are none (null) until they come, by name.
constexpr std::array<std::pair<const char*, std::optional<std::int64_t> batch::*>, 7> batch_times{{
  {"in_progress_at", &batch::in_progress_at},
  {"finalizing_at", &batch::finalizing_at},
  {"completed_at", &batch::completed_at},
  {"failed_at", &batch::failed_at},
  {"expired_at", &batch::expired_at},
  {"cancelling_at", &batch::cancelling_at},
  {"cancelled_at", &batch::cancelled_at},
}};

} // namespace

std::variant<std::vector<form_part>, api_error> parse_multipart(std::string_view content_type, std::string_view body) {
  const auto type = read_header_value(content_type);
  if (!type)
    return bad_request("the Content-Type has a quoted value that is not closed: \"" + quoted(content_type, 80) + "\"");
  if (lowered(type->value) != "multipart/form-data")
    return bad_request("the Content-Type must be multipart/form-data (with a boundary), got \""
                       + quoted(content_type, 80) + "\"");
  const auto* boundary = type->param("boundary");
  if (boundary == nullptr || boundary->empty())
    return bad_request("the Content-Type multipart/form-data has no boundary parameter (boundary=...)");
  if (boundary->size() > 200)
    return bad_request("the multipart boundary is " + std::to_string(boundary->size())
                       + " characters long; at most 200 are taken (RFC 2046: 70)");
  const std::string dash = "--" + *boundary;
  const auto size = body.size();
  // A delimiter is "--BOUNDARY" at a line's start, followed by "--" (the
  // last), blanks or a line end; elsewhere the text is part of a body.
  const auto delimiter_at = [&](std::size_t at) {
    const auto after = at + dash.size();
    if (after >= size)
      return true; // (cut short: found, and then refused as such)
    const char c = body[after];
    if (c == '-')
      return after + 1 < size && body[after + 1] == '-';
    return blank(c) || c == '\r' || c == '\n';
  };
  // The '\n' that begins the next delimiter from `from`, or npos.
  const std::string line_dash = "\n" + dash;
  const auto next_delimiter = [&](std::size_t from) {
    for (auto at = body.find(line_dash, from); at != std::string_view::npos; at = body.find(line_dash, at + 1))
      if (delimiter_at(at + 1))
        return at;
    return std::string_view::npos;
  };
  std::size_t at = 0; // where the first delimiter begins
  if (!(body.starts_with(dash) && delimiter_at(0))) {
    const auto found = next_delimiter(0);
    if (found == std::string_view::npos)
      return bad_request("multipart body: it is not framed by the boundary \"" + quoted(*boundary, 80)
                         + "\" the Content-Type gives");
    at = found + 1;
  }
  std::vector<form_part> parts;
  for (std::size_t p = at + dash.size();;) {
    if (body.substr(p).starts_with("--"))
      return parts; // the final boundary (what follows is an epilogue)
    if (parts.size() == max_form_parts)
      return bad_request("multipart body: more than " + std::to_string(max_form_parts) + " parts");
    while (p < size && blank(body[p]))
      ++p;
    if (p < size && body[p] == '\r')
      ++p;
    if (p >= size || body[p] != '\n')
      return bad_request("multipart body: the final boundary (\"--" + quoted(*boundary, 80)
                         + "--\") is missing, or a boundary is not followed by a line end");
    ++p;
    // The part's headers, up to a blank line.
    const auto headers_from = p;
    std::size_t headers_end = std::string_view::npos;
    for (;;) {
      const auto eol = body.find('\n', p);
      if (eol == std::string_view::npos)
        break;
      const bool empty = eol == p || (eol == p + 1 && body[p] == '\r');
      if (empty)
        headers_end = p;
      p = eol + 1;
      if (empty)
        break;
    }
    const auto number = parts.size() + 1;
    if (headers_end == std::string_view::npos)
      return bad_request("multipart body: part " + std::to_string(number)
                         + "'s headers do not end in a blank line (the body is cut short)");
    form_part part;
    if (auto bad = read_part_headers(body.substr(headers_from, headers_end - headers_from), number, part))
      return std::move(*bad);
    // Its body: up to the line end before the next delimiter.
    const auto next = next_delimiter(p);
    if (next == std::string_view::npos)
      return bad_request("multipart body: part " + std::to_string(number) + " (\"" + quoted(part.name, 40)
                         + "\") is not closed by a boundary: the final boundary (\"--" + quoted(*boundary, 80)
                         + "--\") is missing");
    auto end = next;
    if (end > p && body[end - 1] == '\r')
      --end;
    part.body = std::string(body.substr(p, end - p));
    parts.push_back(std::move(part));
    p = next + 1 + dash.size();
  }
}

// --- file_store ---

std::variant<std::string, api_error> file_store::upload(std::string_view content_type, std::string_view body,
                                                        std::int64_t now, const id_maker& fresh) {
  auto read = parse_multipart(content_type, body);
  if (auto* e = std::get_if<api_error>(&read))
    return std::move(*e);
  auto& parts = std::get<std::vector<form_part>>(read);
  form_part* purpose = nullptr;
  form_part* file = nullptr;
  for (auto& part : parts) {
    auto* slot = part.name == "purpose" ? &purpose : part.name == "file" ? &file : nullptr;
    if (slot == nullptr)
      return bad_request("unknown part \"" + quoted(part.name, 40) + "\": POST /v1/files takes file and purpose",
                         part.name.substr(0, 40));
    if (*slot != nullptr)
      return bad_request("the part \"" + part.name + "\" is given twice", part.name);
    *slot = &part;
  }
  if (purpose == nullptr)
    return bad_request("missing part \"purpose\": \"batch\", the only purpose served", "purpose");
  if (purpose->body != "batch")
    return bad_request("purpose \"" + quoted(purpose->body, 40) + "\" is not served: only \"batch\" is", "purpose");
  if (file == nullptr)
    return bad_request("missing part \"file\": the file to upload (a part with a filename)", "file");
  if (file->filename.empty())
    return bad_request("the part \"file\" must be a file: its Content-Disposition needs a filename", "file");
  if (!wire::valid_utf8(file->filename))
    return bad_request("the file's name is not UTF-8 text", "file");
  if (file->body.empty())
    return bad_request("the file \"" + quoted(file->filename, 80) + "\" is empty", "file");
  const auto size = file->body.size();
  if (capacity_ == 0)
    return api_error{400, "invalid_request_error", "file_store_full",
                     "the server keeps no uploaded files ([http] file_store_mb is 0)", "file"};
  if (size > capacity_ || bytes_ > capacity_ - size)
    return api_error{400, "invalid_request_error", "file_store_full",
                     "the file store holds " + std::to_string(bytes_) + " of its " + std::to_string(capacity_)
                       + " bytes ([http] file_store_mb), and this file's " + std::to_string(size)
                       + " bytes do not fit: delete files (DELETE /v1/files/ID) to make room",
                     "file"};
  const auto id = fresh("file");
  entry e{std::move(file->filename), "batch", now, std::move(file->body), next_seq_++};
  keep(id, std::move(e));
  const auto& kept = files_.find(id)->second;
  if (added_)
    added_(id, kept);
  return dump(file_object(id, kept));
}

std::string file_store::add(std::string filename, std::string purpose, std::string content, std::int64_t now,
                            const id_maker& fresh) {
  auto id = fresh("file");
  keep(id, entry{std::move(filename), std::move(purpose), now, std::move(content), next_seq_++});
  if (added_)
    added_(id, files_.find(id)->second);
  return id;
}

void file_store::keep(std::string id, entry e) {
  bytes_ += e.content.size();
  if (const auto it = files_.find(id); it != files_.end()) {
    bytes_ -= it->second.content.size();
    it->second = std::move(e);
  } else {
    files_.emplace(std::move(id), std::move(e));
  }
}

void file_store::restore(std::string id, entry e) {
  if (e.seq == 0)
    e.seq = next_seq_;
  next_seq_ = std::max(next_seq_, e.seq + 1);
  keep(std::move(id), std::move(e));
}

const file_store::entry* file_store::find(std::string_view id) const {
  const auto it = files_.find(id);
  return it == files_.end() ? nullptr : &it->second;
}

bool file_store::erase(std::string_view id) {
  const auto it = files_.find(id);
  if (it == files_.end())
    return false;
  bytes_ -= it->second.content.size();
  const std::string gone = it->first;
  files_.erase(it);
  if (dropped_)
    dropped_(gone);
  return true;
}

std::string_view file_store::methods(std::string_view rest) {
  if (rest.empty())
    return "GET, POST";
  const auto named = named_parts(rest);
  if (!named)
    return "";
  const auto& parts = *named;
  if (parts.size() == 1)
    return "GET, DELETE";
  if (parts.size() == 2 && parts[1] == "content")
    return "GET";
  return "";
}

std::variant<file_store::served, api_error> file_store::serve(std::string_view method, std::string_view rest,
                                                              std::string_view query) {
  const auto allowed = methods(rest);
  if (allowed.empty())
    return api_error{404, "invalid_request_error", "not_found",
                     "no such path: /v1/files" + quoted(rest, 80) + " (the Files API serves /v1/files, "
                       "/v1/files/ID and /v1/files/ID/content)",
                     ""};
  if (!takes(allowed, method))
    return api_error{405, "invalid_request_error", "method_not_allowed",
                     std::string(method.substr(0, 10)) + " is not served on /v1/files" + quoted(rest, 80)
                       + ": it takes " + std::string(allowed),
                     ""};
  if (rest.empty()) {
    if (method != "GET")
      return bad_request("POST /v1/files is an upload: a multipart/form-data body of file and purpose");
    return list(query);
  }
  for (const auto& [key, value] : query_pairs(query))
    if (!key.empty())
      return bad_request("query parameter \"" + quoted(key, 40) + "\" is not served: " + std::string(method)
                           + " /v1/files/ID takes none",
                         key.substr(0, 40));
  const auto parts = path_parts(rest);
  const auto& id = parts[0];
  const auto it = files_.find(id);
  if (it == files_.end())
    return file_not_kept(id);
  if (parts.size() == 2)
    return served{it->second.content, "application/octet-stream"};
  if (method == "DELETE") {
    erase(id);
    return served{dump(json{{"id", id}, {"object", "file"}, {"deleted", true}})};
  }
  return served{dump(file_object(id, it->second))};
}

std::variant<file_store::served, api_error> file_store::list(std::string_view query) const {
  std::size_t limit = 10000;
  bool ascending = false;
  std::optional<std::string> after;
  std::optional<std::string> purpose;
  for (const auto& [key, value] : query_pairs(query)) {
    if (key == "limit") {
      if (auto bad = read_limit(value, 10000, limit))
        return std::move(*bad);
    } else if (key == "order") {
      if (value != "asc" && value != "desc")
        return bad_request("query parameter \"order\" must be \"asc\" or \"desc\", got \"" + quoted(value, 40) + "\"",
                           "order");
      ascending = value == "asc";
    } else if (key == "after") {
      after = value;
    } else if (key == "purpose") {
      if (value.empty())
        return bad_request("query parameter \"purpose\" must name a purpose (\"batch\", \"batch_output\")", "purpose");
      purpose = value;
    } else if (!key.empty()) {
      return bad_request("query parameter \"" + quoted(key, 40)
                           + "\" is not served: GET /v1/files takes purpose, limit, order and after",
                         key.substr(0, 40));
    }
  }
  std::vector<std::pair<const std::string*, const entry*>> all;
  all.reserve(files_.size());
  for (const auto& [id, e] : files_)
    all.emplace_back(&id, &e);
  std::sort(all.begin(), all.end(), [&](const auto& a, const auto& b) {
    const auto ka = std::pair(a.second->created_at, a.second->seq);
    const auto kb = std::pair(b.second->created_at, b.second->seq);
    return ascending ? ka < kb : kb < ka;
  });
  std::size_t first = 0;
  if (after) {
    const auto at = std::find_if(all.begin(), all.end(), [&](const auto& f) { return *f.first == *after; });
    if (at == all.end())
      return bad_request("query parameter \"after\": no file \"" + quoted(*after, 80) + "\"", "after");
    first = static_cast<std::size_t>(at - all.begin()) + 1;
  }
  json data = json::array();
  bool more = false;
  std::string first_id, last_id;
  for (auto k = first; k < all.size(); ++k) {
    if (purpose && all[k].second->purpose != *purpose)
      continue;
    if (data.size() == limit) {
      more = true;
      break;
    }
    data.push_back(file_object(*all[k].first, *all[k].second));
    if (first_id.empty())
      first_id = *all[k].first;
    last_id = *all[k].first;
  }
  return served{dump(json{{"object", "list"},
                          {"data", data},
                          {"first_id", first_id.empty() ? json() : json(first_id)},
                          {"last_id", last_id.empty() ? json() : json(last_id)},
                          {"has_more", more}})};
}

std::string file_store::to_text(const entry& e) {
  json j{{"filename", e.filename}, {"purpose", e.purpose}, {"created_at", e.created_at}, {"seq", e.seq}};
  put_bytes(j, "content", e.content);
  return dump(j);
}

std::optional<file_store::entry> file_store::from_text(std::string_view text) {
  const auto j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j.value("filename", json()).is_string() || !j.value("purpose", json()).is_string()
      || !j.value("created_at", json()).is_number_integer() || !j.value("seq", json()).is_number_unsigned())
    return std::nullopt;
  auto content = get_bytes(j, "content");
  if (!content)
    return std::nullopt;
  return entry{j["filename"].get<std::string>(), j["purpose"].get<std::string>(), j["created_at"].get<std::int64_t>(),
               std::move(*content), j["seq"].get<std::uint64_t>()};
}

// --- batches ---

std::string with_default_priority(std::string_view body, std::int32_t priority) {
  if (priority == 0)
    return std::string(body);
  auto j = json::parse(body, nullptr, false);
  if (!j.is_object() || j.contains("priority"))
    return std::string(body);
  j["priority"] = priority;
  return dump(j);
}

std::variant<batch_create, api_error> parse_batch_create(std::string_view body) {
  const auto doc = json::parse(body, nullptr, false);
  if (doc.is_discarded())
    return bad_request("the body is not valid JSON");
  if (!doc.is_object())
    return bad_request("the body must be a JSON object, got " + std::string(doc.type_name()));
  for (const auto& [key, value] : doc.items())
    if (key != "input_file_id" && key != "endpoint" && key != "completion_window" && key != "metadata"
        && key != "output_expires_after")
      return bad_request("unknown field \"" + quoted(key, 40)
                           + "\": POST /v1/batches takes input_file_id, endpoint, completion_window, metadata and "
                             "output_expires_after",
                         key.substr(0, 40));
  std::string endpoints;
  for (const auto e : batch_endpoints)
    endpoints += (endpoints.empty() ? "" : ", ") + std::string(e);
  batch_create out;
  const auto file = doc.find("input_file_id");
  if (file == doc.end() || file->is_null())
    return bad_request("missing field \"input_file_id\": the id of a file uploaded with purpose \"batch\"",
                       "input_file_id");
  if (!file->is_string() || file->get_ref<const std::string&>().empty())
    return bad_request("field \"input_file_id\" must be a file id (a string)", "input_file_id");
  out.input_file_id = file->get<std::string>();
  const auto endpoint = doc.find("endpoint");
  if (endpoint == doc.end() || endpoint->is_null())
    return bad_request("missing field \"endpoint\": one of " + endpoints, "endpoint");
  if (!endpoint->is_string()
      || std::find(std::begin(batch_endpoints), std::end(batch_endpoints), endpoint->get_ref<const std::string&>())
           == std::end(batch_endpoints))
    return bad_request("field \"endpoint\" must be one of " + endpoints + ", got "
                         + quoted(endpoint->is_string() ? endpoint->get<std::string>() : dump(*endpoint), 80),
                       "endpoint");
  out.endpoint = endpoint->get<std::string>();
  if (const auto window = doc.find("completion_window"); window != doc.end() && *window != json("24h"))
    return bad_request("field \"completion_window\" must be \"24h\" (the only window served), got "
                         + quoted(dump(*window), 40),
                       "completion_window");
  if (const auto m = doc.find("metadata"); m != doc.end() && !m->is_null()) {
    auto meta = metadata_of(*m);
    if (auto* e = std::get_if<api_error>(&meta))
      return std::move(*e);
    out.metadata = std::get<std::string>(std::move(meta));
  }
  return out;
}

std::variant<std::vector<batch_line>, std::vector<batch_line_error>> read_batch_input(std::string_view content,
                                                                                       std::string_view endpoint) {
  // The file's lines, each with its number, blank ones left out.
  std::vector<std::pair<std::size_t, std::string_view>> given;
  for (std::size_t number = 1; !content.empty(); ++number) {
    const auto eol = content.find('\n');
    auto line = content.substr(0, eol);
    content = eol == std::string_view::npos ? std::string_view{} : content.substr(eol + 1);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos)
      continue;
    if (given.size() == max_batch_lines) // (counted no further: a hostile file's lines are not all kept)
      return std::vector<batch_line_error>{{"too_many_requests",
                                            "the input file holds more than " + std::to_string(max_batch_lines)
                                              + " requests, the most a batch takes",
                                            "", 0}};
    given.emplace_back(number, line);
  }
  using errors = std::vector<batch_line_error>;
  if (given.empty())
    return errors{{"empty_file", "the input file holds no requests (one JSON object a line)", "", 0}};
  std::vector<batch_line> lines;
  errors wrong;
  std::unordered_map<std::string, std::size_t> seen; // custom_id: its line
  const std::string to = std::string(endpoint);
  for (const auto& [line_number, text] : given) {
    if (wrong.size() == max_batch_errors)
      break;
    const auto number = line_number; // (a structured binding, which lambdas cannot all capture)
    const auto at = "line " + std::to_string(number) + ": ";
    const auto fail = [&](std::string code, std::string message, std::string param = {}) {
      wrong.push_back({std::move(code), at + message, std::move(param), number});
    };
    const auto j = json::parse(text, nullptr, false);
    if (j.is_discarded()) {
      fail("invalid_json_line", "not valid JSON");
      continue;
    }
    if (!j.is_object()) {
      fail("invalid_json_line",
           "not a JSON object, but " + std::string(j.type_name()) + " (a request: custom_id, method, url and body)");
      continue;
    }
    bool unexpected = false;
    for (const auto& [key, value] : j.items())
      if (key != "custom_id" && key != "method" && key != "url" && key != "body") {
        fail("unexpected_parameter",
             "unknown key \"" + quoted(key, 40) + "\": a request takes custom_id, method, url and body",
             key.substr(0, 40));
        unexpected = true;
        break;
      }
    if (unexpected)
      continue;
    bool missing = false;
    for (const auto* key : {"custom_id", "method", "url", "body"})
      if (!j.contains(key)) {
        fail("missing_required_parameter", std::string("missing \"") + key + "\"", key);
        missing = true;
        break;
      }
    if (missing)
      continue;
    const auto& id = j["custom_id"];
    if (!id.is_string() || id.get_ref<const std::string&>().empty()) {
      fail("invalid_value", "\"custom_id\" must be a string, not empty", "custom_id");
      continue;
    }
    if (j["method"] != json("POST")) {
      fail("invalid_value", "\"method\" must be \"POST\", got " + quoted(dump(j["method"]), 40), "method");
      continue;
    }
    if (j["url"] != json(to)) {
      fail("invalid_value",
           "\"url\" is " + quoted(dump(j["url"]), 80) + ", but the batch's endpoint is \"" + to
             + "\": every request must go to it",
           "url");
      continue;
    }
    if (!j["body"].is_object()) {
      fail("invalid_value", "\"body\" must be a JSON object (the request's body)", "body");
      continue;
    }
    const auto& custom_id = id.get_ref<const std::string&>();
    if (const auto [it, fresh] = seen.emplace(custom_id, number); !fresh) {
      fail("duplicate_custom_id",
           "custom_id \"" + quoted(custom_id, 80) + "\" is that of line " + std::to_string(it->second)
             + " too: each request's custom_id must be unique in the file",
           "custom_id");
      continue;
    }
    lines.push_back({custom_id, dump(j["body"])});
  }
  if (!wrong.empty())
    return wrong;
  return lines;
}

std::string batch_json(std::string_view id, const batch& b) {
  json errors;
  if (!b.errors.empty()) {
    json data = json::array();
    for (const auto& e : b.errors)
      data.push_back(json{{"code", e.code},
                          {"message", e.message},
                          {"param", e.param.empty() ? json() : json(e.param)},
                          {"line", e.line == 0 ? json() : json(e.line)}});
    errors = json{{"object", "list"}, {"data", data}};
  }
  auto metadata = json::parse(b.metadata, nullptr, false);
  if (metadata.is_discarded())
    metadata = nullptr;
  json j{{"id", id},
         {"object", "batch"},
         {"endpoint", b.endpoint},
         {"errors", errors},
         {"input_file_id", b.input_file_id},
         {"completion_window", b.completion_window},
         {"status", b.status},
         {"output_file_id", b.output_file_id.empty() ? json() : json(b.output_file_id)},
         {"error_file_id", b.error_file_id.empty() ? json() : json(b.error_file_id)},
         {"created_at", b.created_at},
         {"expires_at", b.expires_at}};
  for (const auto& [name, time] : batch_times)
    j[name] = optional_time(b.*time);
  j["request_counts"] = {{"total", b.total}, {"completed", b.completed}, {"failed", b.failed}};
  j["metadata"] = metadata;
  return dump(j);
}

std::string batch_output_line(std::string_view line_id, std::string_view custom_id, int status_code,
                              std::string_view request_id, std::string_view body_json) {
  auto body = json::parse(body_json, nullptr, false);
  if (body.is_discarded())
    body = std::string(body_json);
  return dump(json{{"id", line_id},
                   {"custom_id", custom_id},
                   {"response", {{"status_code", status_code}, {"request_id", request_id}, {"body", body}}},
                   {"error", nullptr}})
         + "\n";
}

std::string batch_error_line(std::string_view line_id, std::string_view custom_id, std::string_view code,
                             std::string_view message) {
  return dump(json{{"id", line_id},
                   {"custom_id", custom_id},
                   {"response", nullptr},
                   {"error", {{"code", code}, {"message", message}}}})
         + "\n";
}

// --- batch_store ---

batch* batch_store::find(std::string_view id) {
  const auto it = batches_.find(id);
  return it == batches_.end() ? nullptr : &it->second;
}

batch& batch_store::put(std::string id, batch b) {
  if (const auto it = batches_.find(id); it != batches_.end()) {
    it->second = std::move(b);
    return it->second;
  }
  const auto it = batches_.emplace(std::move(id), std::move(b)).first;
  order_.push_back(it);
  return it->second;
}

std::vector<std::pair<std::string, batch*>> batch_store::all() {
  std::vector<std::pair<std::string, batch*>> out;
  out.reserve(order_.size());
  for (const auto it : order_)
    out.emplace_back(it->first, &it->second);
  return out;
}

std::variant<std::string, api_error> batch_store::list(std::string_view query) const {
  std::size_t limit = 20;
  std::optional<std::string> after;
  for (const auto& [key, value] : query_pairs(query)) {
    if (key == "limit") {
      if (auto bad = read_limit(value, 100, limit))
        return std::move(*bad);
    } else if (key == "after") {
      after = value;
    } else if (!key.empty()) {
      return bad_request("query parameter \"" + quoted(key, 40)
                           + "\" is not served: GET /v1/batches takes limit and after",
                         key.substr(0, 40));
    }
  }
  std::size_t first = 0; // from the newest
  if (after) {
    const auto at = std::find_if(order_.rbegin(), order_.rend(), [&](const auto& it) { return it->first == *after; });
    if (at == order_.rend())
      return bad_request("query parameter \"after\": no batch \"" + quoted(*after, 80) + "\"", "after");
    first = static_cast<std::size_t>(at - order_.rbegin()) + 1;
  }
  json data = json::array();
  for (auto k = first; k < order_.size() && data.size() < limit; ++k) {
    const auto it = order_[order_.size() - 1 - k];
    data.push_back(json::parse(batch_json(it->first, it->second)));
  }
  const bool more = first + data.size() < order_.size();
  return dump(json{{"object", "list"},
                   {"data", data},
                   {"first_id", data.empty() ? json() : data.front()["id"]},
                   {"last_id", data.empty() ? json() : data.back()["id"]},
                   {"has_more", more}});
}

bool batch::answer(std::size_t i, bool error, std::string_view text) {
  if (i >= finished.size() || finished[i] != 0)
    return false;
  finished[i] = 1;
  (error ? error_output : output) += text;
  ++(error ? failed : completed);
  return true;
}

std::string batch_log_record(std::size_t i, bool error, std::string_view text) {
  json j{{"line", i}, {"error", error}};
  put_bytes(j, "text", text);
  return dump(j) + "\n";
}

std::size_t replay_batch_log(batch& b, std::string_view log) {
  std::size_t answered = 0;
  while (!log.empty()) {
    const auto end = log.find('\n');
    if (end == std::string_view::npos)
      break; // a record a crash cut short
    const auto j = json::parse(log.substr(0, end), nullptr, false);
    log.remove_prefix(end + 1);
    if (!j.is_object() || !j.value("line", json()).is_number_unsigned() || !j.value("error", json()).is_boolean())
      break;
    const auto text = get_bytes(j, "text");
    if (!text)
      break;
    answered += b.answer(j["line"].get<std::size_t>(), j["error"].get<bool>(), *text) ? 1 : 0;
  }
  return answered;
}

std::string batch_store::to_text(const batch& b) {
  json errors = json::array();
  for (const auto& e : b.errors)
    errors.push_back(json::array({e.code, e.message, e.param, e.line}));
  json lines = json::array();
  for (const auto& l : b.lines)
    lines.push_back(json::array({l.custom_id, l.body}));
  std::string finished;
  finished.reserve(b.finished.size());
  for (const auto f : b.finished)
    finished += f != 0 ? '1' : '0';
  json j{{"endpoint", b.endpoint},
         {"input_file_id", b.input_file_id},
         {"completion_window", b.completion_window},
         {"metadata", b.metadata},
         {"status", b.status},
         {"created_at", b.created_at},
         {"expires_at", b.expires_at},
         {"errors", errors},
         {"output_file_id", b.output_file_id},
         {"error_file_id", b.error_file_id},
         {"lines", lines},
         {"finished", finished},
         {"total", b.total},
         {"completed", b.completed},
         {"failed", b.failed}};
  for (const auto& [name, time] : batch_times)
    j[name] = optional_time(b.*time);
  put_bytes(j, "output", b.output);
  put_bytes(j, "error_output", b.error_output);
  return dump(j);
}

std::optional<batch> batch_store::from_text(std::string_view text) {
  const auto j = json::parse(text, nullptr, false);
  if (!j.is_object())
    return std::nullopt;
  batch b;
  // A field of the type `to` has (an optional one null too); false where not.
  const auto at = [&]<class T>(const char* key, T& to) {
    const auto it = j.find(key);
    if (it == j.end())
      return false;
    if constexpr (std::is_same_v<T, std::optional<std::int64_t>>) {
      if (it->is_null())
        return true;
      if (!it->is_number_integer())
        return false;
      to = it->get<std::int64_t>();
      return true;
    } else {
      const bool fits = std::is_same_v<T, std::string>    ? it->is_string()
                        : std::is_same_v<T, std::size_t> ? it->is_number_unsigned()
                                                          : it->is_number_integer();
      if (!fits)
        return false;
      to = it->template get<T>();
      return true;
    }
  };
  std::string finished;
  if (!at("endpoint", b.endpoint) || !at("input_file_id", b.input_file_id)
      || !at("completion_window", b.completion_window) || !at("metadata", b.metadata)
      || !at("status", b.status) || !at("created_at", b.created_at) || !at("expires_at", b.expires_at)
      || !std::all_of(batch_times.begin(), batch_times.end(), [&](const auto& t) { return at(t.first, b.*t.second); })
      || !at("output_file_id", b.output_file_id)
      || !at("error_file_id", b.error_file_id) || !at("finished", finished)
      || !at("total", b.total) || !at("completed", b.completed) || !at("failed", b.failed))
    return std::nullopt;
  if (std::find(std::begin(batch_statuses), std::end(batch_statuses), b.status) == std::end(batch_statuses))
    return std::nullopt;
  if (const auto m = json::parse(b.metadata, nullptr, false); !(m.is_null() || m.is_object()))
    return std::nullopt;
  const auto errors = j.find("errors");
  const auto lines = j.find("lines");
  if (errors == j.end() || !errors->is_array() || lines == j.end() || !lines->is_array())
    return std::nullopt;
  for (const auto& e : *errors) {
    if (!e.is_array() || e.size() != 4 || !e[0].is_string() || !e[1].is_string() || !e[2].is_string()
        || !e[3].is_number_unsigned())
      return std::nullopt;
    b.errors.push_back({e[0].get<std::string>(), e[1].get<std::string>(), e[2].get<std::string>(),
                        e[3].get<std::size_t>()});
  }
  for (const auto& l : *lines) {
    if (!l.is_array() || l.size() != 2 || !l[0].is_string() || !l[1].is_string()
        || !json::parse(l[1].get_ref<const std::string&>(), nullptr, false).is_object())
      return std::nullopt;
    b.lines.push_back({l[0].get<std::string>(), l[1].get<std::string>()});
  }
  if (finished.size() != b.lines.size() || finished.find_first_not_of("01") != std::string::npos)
    return std::nullopt;
  b.finished.reserve(finished.size());
  for (const char f : finished)
    b.finished.push_back(f == '1' ? 1 : 0);
  auto output = get_bytes(j, "output");
  auto error_output = get_bytes(j, "error_output");
  if (!output || !error_output)
    return std::nullopt;
  b.output = std::move(*output);
  b.error_output = std::move(*error_output);
  return b;
}

} // namespace troupe::openai
