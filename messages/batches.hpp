// OpenAI's Files API (/v1/files) and Batch API (/v1/batches), the parts
// that touch no socket: a multipart/form-data upload read into its parts,
// the files the HTTP front keeps (uploads, and the output and error files
// its batches write), a batch request and its input file checked as
// OpenAI checks them, the batch object, the lines of its output files, and
// the batches the front keeps. runtime/http_front routes the paths here and
// runs the batches' requests. Kept in memory (and, where the front watches
// the stores, in files), not shared between the fronts of a multi-node
// deployment.
#pragma once

#include "messages/openai.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace troupe::openai {

/// One part of a multipart/form-data body (RFC 7578): its field name, its
/// filename ("" where it is no file), its Content-Type ("" where it gives
/// none) and its bytes, exactly as sent.
struct form_part {
  std::string name;
  std::string filename;
  std::string content_type;
  std::string body;
};

/// Most parts a multipart body may hold (an upload needs two).
inline constexpr std::size_t max_form_parts = 16;

/// Reads a multipart/form-data body into its parts. `content_type` is the
/// request's Content-Type header value; its boundary parameter (quoted or
/// not) frames the body. Line ends are CRLF (bare LF is taken too); a
/// preamble before the first boundary and an epilogue after the last are
/// read past. A 400 saying what is wrong: not multipart/form-data, no
/// boundary, a body not framed by it, a part without
/// "Content-Disposition: form-data; name=...", a final boundary missing.
std::variant<std::vector<form_part>, api_error> parse_multipart(std::string_view content_type, std::string_view body);

/// The files of the Files API: those clients upload (purpose "batch") and
/// those the server writes (a batch's output and error files, purpose
/// "batch_output"). Uploads are bounded by their bytes; the server's own
/// files are always kept.
class file_store {
public:
  struct entry {
    std::string filename;
    std::string purpose;
    std::int64_t created_at = 0;
    std::string content;
    std::uint64_t seq = 0; ///< the order files were added in (files of one second are listed by it)
  };

  /// Takes uploads while the files hold at most `capacity` bytes of content
  /// (0: the Files API is off: every upload is refused).
  explicit file_store(std::size_t capacity) : capacity_(capacity) {}

  /// Makes an id no client can guess, with the given prefix ("file").
  using id_maker = std::function<std::string(std::string_view prefix)>;

  /// POST /v1/files: a multipart/form-data body with a `purpose` part
  /// ("batch", the only one served) and a `file` part with a filename; a
  /// 400 naming the part at fault (another part too), or code
  /// "file_store_full" where the file would take the files past the
  /// capacity. The file object's JSON; its id from fresh("file").
  std::variant<std::string, api_error> upload(std::string_view content_type, std::string_view body, std::int64_t now,
                                              const id_maker& fresh);

  /// Keeps a file the server writes itself (a batch's output or error
  /// file), even past the capacity: results are never lost (uploads are
  /// then refused until files are deleted). Its id, from fresh("file").
  std::string add(std::string filename, std::string purpose, std::string content, std::int64_t now,
                  const id_maker& fresh);

  /// An answer: its body and Content-Type.
  struct served {
    std::string body;
    std::string content_type = "application/json";
  };

  /// One call under /v1/files but the upload: `method` (one methods(rest)
  /// lists), `rest` the path after /v1/files ("", "/ID", "/ID/content";
  /// percent-encoded) and the query.
  ///   GET "": OpenAI's list of files, newest first (order=asc: oldest
  ///     first); query purpose (only those), limit (1 to 10000, default
  ///     10000), after (a file id: those after it).
  ///   GET "/ID": the file object. DELETE "/ID": {"id", "object": "file",
  ///     "deleted": true}. GET "/ID/content": the content as uploaded or
  ///     written (application/octet-stream).
  /// A 404 "not_found" for a file not kept, a 400 naming a bad query key.
  std::variant<served, api_error> serve(std::string_view method, std::string_view rest, std::string_view query);

  /// The methods a path under /v1/files takes, as an Allow header lists
  /// them ("GET, POST" for "", "GET, DELETE" for "/ID", "GET" for
  /// "/ID/content"); "" for any other path.
  static std::string_view methods(std::string_view rest);

  /// The file kept under `id`, or null.
  const entry* find(std::string_view id) const;
  /// Drops the file under `id` (told to watch's `dropped`); false where none is kept.
  bool erase(std::string_view id);

  /// Hears each file added (uploaded or written) and each dropped: to keep
  /// a copy elsewhere, in files.
  void watch(std::function<void(const std::string& id, const entry& e)> added,
             std::function<void(const std::string& id)> dropped) {
    added_ = std::move(added);
    dropped_ = std::move(dropped);
  }
  /// Keeps `e` under `id` unheard by watch's `added` (one read back from
  /// where `added` wrote it), past the capacity too.
  void restore(std::string id, entry e);

  /// A file as text (a JSON object; content that is not UTF-8 in base64),
  /// and back; none where the text is not one.
  static std::string to_text(const entry& e);
  static std::optional<entry> from_text(std::string_view text);

  std::size_t bytes() const noexcept { return bytes_; } ///< content bytes of all files kept
  std::size_t size() const noexcept { return files_.size(); }
  std::size_t capacity() const noexcept { return capacity_; }

private:
  /// Keeps `e` under `id` (in place of one kept under it).
  void keep(std::string id, entry e);
  std::variant<served, api_error> list(std::string_view query) const;

  std::size_t capacity_;
  std::size_t bytes_ = 0;
  std::uint64_t next_seq_ = 1;
  std::map<std::string, entry, std::less<>> files_;
  std::function<void(const std::string&, const entry&)> added_;
  std::function<void(const std::string&)> dropped_;
};

/// Most requests one batch may hold (OpenAI's).
inline constexpr std::size_t max_batch_lines = 50000;

/// The endpoints a batch's requests may go to.
inline constexpr std::string_view batch_endpoints[] = {"/v1/completions", "/v1/chat/completions", "/v1/responses"};

/// A POST /v1/batches body, checked.
struct batch_create {
  std::string input_file_id;
  std::string endpoint;
  std::string completion_window = "24h";
  std::string metadata = "null"; ///< JSON text: null, or an object of strings
};

/// Reads a POST /v1/batches body ({"input_file_id", "endpoint",
/// "completion_window": "24h", "metadata"}; output_expires_after read
/// past); a 400 naming the field at fault, or another field.
std::variant<batch_create, api_error> parse_batch_create(std::string_view body);

/// One request of a batch's input file.
struct batch_line {
  std::string custom_id;
  std::string body; ///< the request body, a JSON object's text
};

/// What is wrong with a batch's input file, as OpenAI lists it in the
/// batch's `errors`.
/// A line's request body (a JSON object's text) with `priority` set to
/// `priority` where it gives none (as it was where it gives one, or where
/// `priority` is 0, the default).
std::string with_default_priority(std::string_view body, std::int32_t priority);

struct batch_line_error {
  std::string code;
  std::string message;
  std::string param; ///< "" for none
  std::size_t line = 0; ///< 1-based; 0: the file as a whole
};

/// Most errors a failed validation lists (the first ones).
inline constexpr std::size_t max_batch_errors = 100;

/// A batch's input file checked as OpenAI checks it: each line not empty
/// (blank lines, and the newline that ends the last, are read past; CRLF
/// line ends too) a JSON object of "custom_id" (a string, unique in the
/// file), "method" ("POST"), "url" (`endpoint`) and "body" (a JSON object),
/// no other keys. The requests, or the errors (one per line at most; the
/// first 100): codes "invalid_json_line", "missing_required_parameter",
/// "invalid_value", "duplicate_custom_id", "unexpected_parameter";
/// "empty_file" for a file of no requests, "too_many_requests" for one of
/// more than max_batch_lines.
std::variant<std::vector<batch_line>, std::vector<batch_line_error>> read_batch_input(std::string_view content,
                                                                                       std::string_view endpoint);

/// A batch: its request, where it is, and its run's results so far.
struct batch {
  std::string endpoint;
  std::string input_file_id;
  std::string completion_window = "24h";
  std::string metadata = "null"; ///< JSON text
  /// validating | failed | in_progress | finalizing | completed | expired |
  /// cancelling | cancelled
  std::string status = "validating";
  std::int64_t created_at = 0;
  std::int64_t expires_at = 0; ///< created_at + 24 h
  std::optional<std::int64_t> in_progress_at, finalizing_at, completed_at, failed_at, expired_at, cancelling_at,
    cancelled_at;
  std::vector<batch_line_error> errors; ///< a failed validation's
  std::string output_file_id;           ///< "" for none (null in JSON)
  std::string error_file_id;            ///< "" for none (null in JSON)
  // The run: kept while it runs, cleared once it ended.
  std::vector<batch_line> lines;
  std::vector<std::uint8_t> finished; ///< per line: 1 where its result is in `output` or `error_output`
  std::string output;                 ///< the output file's lines so far (each ends with \n)
  std::string error_output;           ///< the error file's lines so far
  std::size_t total = 0;
  std::size_t completed = 0;
  std::size_t failed = 0;
  /// Failed, completed, expired or cancelled: nothing more happens to it.
  /// In progress or cancelling: lines still run or are to be taken.
  bool running() const noexcept { return status == "in_progress" || status == "cancelling"; }
  /// Line `i` answered: `text` (a file line, with its newline) goes to the
  /// error file, counted failed, or to the output file, counted completed.
  /// False (nothing changes) where `i` is past the lines or finished.
  bool answer(std::size_t i, bool error, std::string_view text);
  bool ended() const noexcept {
    return status == "failed" || status == "completed" || status == "expired" || status == "cancelled";
  }
};

/// OpenAI's batch object: {"id", "object": "batch", "endpoint", "errors"
/// (null, or {"object": "list", "data": [{"code", "message", "param",
/// "line"}]}), "input_file_id", "completion_window", "status",
/// "output_file_id", "error_file_id", "created_at", "in_progress_at",
/// "expires_at", "finalizing_at", "completed_at", "failed_at",
/// "expired_at", "cancelling_at", "cancelled_at" (null where unset),
/// "request_counts": {"total", "completed", "failed"}, "metadata"}.
std::string batch_json(std::string_view id, const batch& b);

/// One line of a batch's output (or error) file, with its newline: {"id":
/// line_id, "custom_id", "response": {"status_code", "request_id", "body"
/// (`body_json` as JSON; a string where it is not JSON)}, "error": null}.
std::string batch_output_line(std::string_view line_id, std::string_view custom_id, int status_code,
                              std::string_view request_id, std::string_view body_json);

/// A line of the error file for a request that got no answer (the batch
/// expired, or was cancelled before it ran), with its newline: {"id",
/// "custom_id", "response": null, "error": {"code", "message"}}.
std::string batch_error_line(std::string_view line_id, std::string_view custom_id, std::string_view code,
                             std::string_view message);

/// A running batch's journal record, one line with its newline: line `i`
/// was answered with `text` (batch::answer's). Appended as each line ends,
/// so that a crash loses no answer; replay_batch_log reads them back.
std::string batch_log_record(std::size_t i, bool error, std::string_view text);

/// Applies a journal's records to `b` (a running batch read back) with
/// batch::answer: a record of a line finished already (its answer in the
/// state written after it) or past the lines is passed over; one that
/// does not parse (a write a crash cut short) ends the replay. How many
/// lines it answered.
std::size_t replay_batch_log(batch& b, std::string_view log);

/// The batches the front keeps, by id, in the order they were made. All
/// are kept: once ended, a batch is small (its run is cleared).
class batch_store {
public:
  batch_store() = default;
  // (The order views the map's own nodes.)
  batch_store(const batch_store&) = delete;
  batch_store& operator=(const batch_store&) = delete;

  /// The batch under `id`, or null.
  batch* find(std::string_view id);
  /// Keeps `b` under `id` (in place of one kept under it, which keeps its
  /// place in the order); the batch kept.
  batch& put(std::string id, batch b);

  /// GET /v1/batches: OpenAI's list {"object": "list", "data", "first_id",
  /// "last_id", "has_more"}, newest first; query limit (1 to 100, default
  /// 20) and after (a batch id: those made before it). A 400 naming a bad
  /// key or value.
  std::variant<std::string, api_error> list(std::string_view query) const;

  /// Every batch with its id, in the order they were made (the front
  /// resumes those that were running when it stopped).
  std::vector<std::pair<std::string, batch*>> all();

  /// A batch as text (a JSON object, its run too: a restart resumes it),
  /// and back; none where the text is not one.
  static std::string to_text(const batch& b);
  static std::optional<batch> from_text(std::string_view text);

  std::size_t size() const noexcept { return batches_.size(); }

private:
  std::map<std::string, batch, std::less<>> batches_;
  std::vector<std::map<std::string, batch, std::less<>>::iterator> order_; ///< oldest first
};

} // namespace troupe::openai
