#include "runtime/http_front.hpp"

#include "messages/openai.hpp"
#include "messages/batches.hpp"
#include "messages/conversations.hpp"
#include "messages/responses.hpp"
#include "messages/stat.hpp"
#include "runtime/kept_files.hpp"
#include "messages/wire.hpp"
#include "runtime/json_schema.hpp"
#include "runtime/zmq_io.hpp"

// Boost 1.74's awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_cat.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>
#include <zmq.h>

#include <sys/random.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <deque>
#include <stdexcept>
#include <thread>
#include <filesystem>
#include <functional>
#include <future>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace troupe {

namespace {

/// One request's wire replies as the intake sends them, and the timer that
/// wakes its coroutine when one comes (cancelled on arrival).
struct waiter {
  explicit waiter(asio::io_context& io) : wake(io, asio::steady_timer::time_point::max()) {}
  asio::steady_timer wake;
  std::deque<wire::reply> replies;
  bool closed = false; ///< the front is stopping: no reply will come
};

/// A background response (POST /v1/responses with background true) while
/// it runs: what a cancel or a delete needs (io thread only).
struct background_job {
  background_job(openai::response_request r, std::string wire_id, openai::response_answer a)
      : request(std::move(r)), id(std::move(wire_id)), answer(std::move(a)) {}
  openai::response_request request;
  std::string id; ///< its one wire request
  openai::response_answer answer;
  bool cancelled = false; ///< POST /v1/responses/ID/cancel: its status stays "cancelled"
  bool deleted = false;   ///< DELETE /v1/responses/ID: nothing is kept when it ends
  bool shutting_down = false; ///< cancelled as the server stops: it ends "failed"
  std::string status = "queued"; ///< "in_progress" once the intake took it
  /// Streamed (asked with stream): its events so far, and the streams
  /// following them, each woken (its timer cancelled) by every event.
  bool streamed = false;
  openai::event_log events;
  bool ended = false; ///< its last event is in
  std::vector<asio::steady_timer*> followers;
  void add(const std::string& sse) {
    if (sse.empty())
      return;
    events.add(sse);
    wake();
  }
  void wake() {
    for (auto* t : followers)
      t->cancel();
  }
};

/// Whether the peer of `sock` closed the connection or reset it (a look
/// without reading: a pipelined request stays for the next read).
bool peer_closed(tcp::socket& sock) {
  char probe = 0;
  const auto n = ::recv(sock.native_handle(), &probe, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/// Forgets wire ids' waiters when it goes out of scope.
template <class Pending>
struct forget_ids {
  Pending& pending;
  const std::vector<std::string>& ids;
  ~forget_ids() {
    for (const auto& id : ids)
      pending.erase(id);
  }
};

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
    .count();
}

const std::string& reply_id(const wire::reply& r) {
  return std::visit([](const auto& x) -> const std::string& { return x.id; }, r);
}

using response = http::response<http::string_body>;

response make(unsigned version, bool keep_alive, http::status status, std::string body,
              const char* content_type = "application/json") {
  response res{status, version};
  res.set(http::field::server, "troupe");
  res.set(http::field::content_type, content_type);
  res.keep_alive(keep_alive);
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

response error_response(unsigned version, bool keep_alive, const openai::api_error& e) {
  return make(version, keep_alive, static_cast<http::status>(e.status), openai::to_json(e));
}

openai::api_error api_error_of(int status, std::string type, std::string code, std::string message) {
  openai::api_error e;
  e.status = status;
  e.type = std::move(type);
  e.code = std::move(code);
  e.message = std::move(message);
  return e;
}

openai::api_error stopping() {
  return api_error_of(503, "server_error", "shutting_down", "the server is stopping");
}

/// The generating endpoints: OpenAI's completions, chat completions and
/// responses (a chat's, answered as the Responses API answers).
enum class api { completions, chat, responses };

/// A completion's answer, or a response's: the same steps.
class any_answer {
public:
  explicit any_answer(openai::completion_answer a) : a_(std::move(a)) {}
  explicit any_answer(openai::response_answer a) : a_(std::move(a)) {}
  std::string body(const std::vector<wire::done_reply>& done) const {
    return std::visit([&](const auto& a) { return a.body(done); }, a_);
  }
  std::string stream_start() {
    return std::visit([](auto& a) { return a.stream_start(); }, a_);
  }
  /// Choice `k` was accepted: what a completion's usage so far counts.
  void accepted(std::size_t k, std::uint32_t prompt_tokens) {
    if (auto* c = std::get_if<openai::completion_answer>(&a_))
      c->accepted(k, prompt_tokens);
  }
  std::string chunk(std::size_t k, const wire::token_reply& t) {
    return std::visit([&](auto& a) { return a.chunk(k, t); }, a_);
  }
  std::string choice_end(std::size_t k, const wire::done_reply& d) {
    return std::visit([&](auto& a) { return a.choice_end(k, d); }, a_);
  }
  std::string stream_end() {
    return std::visit([](auto& a) { return a.stream_end(); }, a_);
  }
  std::string stream_error(const openai::api_error& e) {
    return std::visit([&](auto& a) { return a.stream_error(e); }, a_);
  }
  /// A response's object once its stream ended; none for a completion.
  std::optional<std::string> finished() const {
    if (const auto* r = std::get_if<openai::response_answer>(&a_))
      return r->finished();
    return std::nullopt;
  }

private:
  std::variant<openai::completion_answer, openai::response_answer> a_;
};

} // namespace

struct http_front::impl : zmq_io::owned_socket {
  http_front_config cfg;
  std::string endpoint;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  std::optional<asio::posix::stream_descriptor> fd;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::thread thread;
  std::unordered_map<std::string, std::shared_ptr<waiter>> pending;
  /// Open connections, closed at stop so that every coroutine ends before
  /// the io thread does.
  std::unordered_set<beast::tcp_stream*> connections;
  std::uint64_t next_id = 0;
  bool stopped = false;
  /// Tools' parameters seen, compiled: whether the intake can hold a call
  /// offered with tool_choice "auto" to them (io thread only).
  json_schema_cache parameters;
  /// POST /v1/responses answers kept (io thread only), under ids no client
  /// can guess.
  openai::response_store stored{0};
  /// Background responses running, by response id (io thread only).
  std::unordered_map<std::string, std::shared_ptr<background_job>> jobs;
  /// /v1/conversations' conversations (io thread only).
  openai::conversation_store conversations{0};
  /// /v1/files' files and /v1/batches' batches (io thread only).
  openai::file_store files{0};
  openai::batch_store batches;
  /// A batch's run while its lines are taken: where it takes its next
  /// line, its lines in flight and their wire ids (cancelled with it), and
  /// when its state was last written to store_dir.
  struct batch_run {
    std::size_t next = 0;
    std::size_t running = 0;
    std::unordered_set<std::string> ids;
    bool expiring = false; ///< its window passed: no line is taken now
    std::size_t state_bytes = 0; ///< of its state as last written whole
    std::size_t log_bytes = 0;   ///< of its log since
  };
  std::unordered_map<std::string, batch_run> batch_runs;
  /// The running batches' ids (in progress or cancelling), oldest first:
  /// the order their lines are taken in.
  std::deque<std::string> running_batches;
  std::size_t batch_lines_running = 0;
  /// The server drains: no batch line is taken, and one the stop cut short
  /// is left to run again (a restart with store_dir resumes it).
  bool batches_held = false;
  bool pumping = false;
  bool pump_again = false;
  /// Writes a batch's state to store_dir whole, clearing its log (none:
  /// memory only); the bytes written.
  std::function<std::size_t(const std::string&, const openai::batch&)> write_batch;
  /// Appends a record to a batch's log in store_dir.
  std::function<void(const std::string&, std::string_view)> log_batch;

  /// `prefix`, "_" and 128 bits from the kernel's cryptographic generator,
  /// as 32 hex digits.
  static std::string fresh_id(std::string_view prefix) {
    static constexpr char hex[] = "0123456789abcdef";
    std::array<unsigned char, 16> bits{};
    for (std::size_t got = 0; got < bits.size();) {
      const auto n = getrandom(bits.data() + got, bits.size() - got, 0);
      if (n > 0)
        got += static_cast<std::size_t>(n);
      else if (errno != EINTR)
        throw std::runtime_error("getrandom failed");
    }
    std::string id = std::string(prefix) + "_";
    for (const auto b : bits) {
      id += hex[b >> 4];
      id += hex[b & 15];
    }
    return id;
  }

  /// What a previous_response_id names: its conversation, as input items.
  std::variant<openai::conversation, openai::api_error> earlier(const std::string& id) {
    auto turns = stored.chain(id);
    if (auto* missing = std::get_if<std::string>(&turns)) {
      auto e = api_error_of(404, "invalid_request_error", "previous_response_not_found",
                            "no stored response " + *missing + (*missing == id ? "" : " (an earlier turn of " + id + ")")
                              + ": it was not kept (store false), was deleted, or was dropped for room ([http] "
                                "response_store_mb); send the whole conversation in \"input\"");
      e.param = "previous_response_id";
      return e;
    }
    const auto& kept = std::get<std::vector<const openai::response_store::entry*>>(turns);
    if (const auto st = openai::response_state_of(kept.back()->body); st.running()) {
      auto e = api_error_of(400, "invalid_request_error", "previous_response_running",
                            "response " + id + " is still running in the background (status \"" + st.status
                              + "\"): poll GET /v1/responses/" + id + " until it ends, then go on from it");
      e.param = "previous_response_id";
      return e;
    }
    return openai::conversation_of(kept);
  }

  static std::string response_id() { return fresh_id("resp"); }

  /// Keeps the stores' entries in files under `dir` as well (responses/,
  /// conversations/), reading back those a run before left there: the
  /// least recently written first, so that the most recent stay where
  /// the bounds drop some. A response a crash left running is kept as
  /// failed. An error ("" for none) where the directories cannot be used.
  std::string keep_on_disk(const std::string& dir) {
    auto response_files = kept_files::open(std::filesystem::path(dir) / "responses", cfg.store_sync);
    if (auto* why = std::get_if<std::string>(&response_files))
      return *why;
    auto conversation_files = kept_files::open(std::filesystem::path(dir) / "conversations", cfg.store_sync);
    if (auto* why = std::get_if<std::string>(&conversation_files))
      return *why;
    const auto files = std::make_shared<std::pair<kept_files, kept_files>>(
      std::get<kept_files>(std::move(response_files)), std::get<kept_files>(std::move(conversation_files)));
    // (Entries the bounds drop while they are read back go from disk too.)
    const auto drop_response = [files](const std::string& id) { files->first.remove(id); };
    const auto drop_conversation = [files](const std::string& id) { files->second.remove(id); };
    const auto write = [](const kept_files& f, const std::string& id, const std::string& text) {
      if (std::string why; !f.write(id, text, why))
        spdlog::warn("http: {} is kept in memory only: {}", id, why);
    };
    stored.watch({}, drop_response);
    conversations.watch({}, drop_conversation);
    std::size_t skipped = 0;
    for (auto& [id, text] : files->first.read_all()) {
      auto e = openai::response_store::from_text(text);
      if (!e) {
        ++skipped;
        continue;
      }
      if (openai::response_state_of(e->body).running()) {
        // A crash left it running: it ended then, as a stop ends one.
        const auto stop = stopping();
        e->body = openai::failed_snapshot(e->body, stop);
        if (stored.restore(id, *e))
          write(files->first, id, openai::response_store::to_text(*e));
        else
          files->first.remove(id); // (larger than the whole store now)
      } else if (!stored.restore(id, std::move(*e))) {
        files->first.remove(id);
      }
    }
    // Per conversation, the bytes of its file and of its log since.
    const auto logged = std::make_shared<std::unordered_map<std::string, std::pair<std::size_t, std::size_t>>>();
    // A conversation is written whole when it is made or changed other
    // than at its end; a turn's items are appended to its log (on the disk
    // before the front goes on, with store_sync), until the log outgrows
    // the file (or 1 MiB): then it is written whole again. A long
    // conversation is so written a few times over, not once per turn.
    const auto whole = [files, write, logged](const std::string& id, const openai::conversation_store::entry& e) {
      const auto text = openai::conversation_store::to_text(e);
      write(files->second, id, text);
      files->second.remove_log(id);
      (*logged)[id] = {text.size(), 0};
    };
    for (auto& [id, text] : files->second.read_all()) {
      auto e = openai::conversation_store::from_text(text);
      if (!e) {
        ++skipped;
        continue;
      }
      // The turns added since it was written whole; written whole again
      // with them, so that no record a crash cut short stays in the log.
      const auto log = files->second.read_log(id);
      openai::conversation_store::replay_log(*e, log);
      if (!conversations.restore(id, std::move(*e)))
        files->second.remove(id);
      else if (!log.empty())
        whole(id, *conversations.find(id));
      else
        (*logged)[id] = {text.size(), 0};
    }
    if (auto why = keep_batches_on_disk(dir); !why.empty())
      return why;
    if (skipped > 0)
      spdlog::warn("http: {} files under {} are no response or conversation; left as they are", skipped, dir);
    stored.watch(
      [files, write](const std::string& id, const openai::response_store::entry& e) {
        write(files->first, id, openai::response_store::to_text(e));
      },
      drop_response);
    conversations.watch(
      whole,
      [drop_conversation, logged](const std::string& id) {
        logged->erase(id);
        drop_conversation(id);
      },
      [files, whole, logged](const std::string& id, const openai::conversation_store::entry& e, std::size_t first) {
        const auto record = openai::conversation_store::log_record(e, first);
        auto& [file_bytes, log_bytes] = (*logged)[id];
        std::string why;
        if (kept_files::log_outgrows(file_bytes, log_bytes + record.size())
            || !files->second.append(id, record, why, true)) {
          if (!why.empty())
            spdlog::warn("http: conversation {} is written whole: its log takes no more: {}", id, why);
          whole(id, e);
          return;
        }
        log_bytes += record.size();
      });
    return {};
  }

  /// keep_on_disk's files/ and batches/: files and batches read back (a
  /// batch that was running goes on from the lines it had written), then
  /// written through.
  std::string keep_batches_on_disk(const std::string& dir) {
    auto file_dir = kept_files::open(std::filesystem::path(dir) / "files", cfg.store_sync);
    if (auto* why = std::get_if<std::string>(&file_dir))
      return *why;
    auto batch_dir = kept_files::open(std::filesystem::path(dir) / "batches", cfg.store_sync);
    if (auto* why = std::get_if<std::string>(&batch_dir))
      return *why;
    const auto kept = std::make_shared<std::pair<kept_files, kept_files>>(std::get<kept_files>(std::move(file_dir)),
                                                                         std::get<kept_files>(std::move(batch_dir)));
    std::size_t skipped = 0;
    for (auto& [id, text] : kept->first.read_all()) {
      if (auto e = openai::file_store::from_text(text))
        files.restore(id, std::move(*e));
      else
        ++skipped;
    }
    std::vector<std::pair<std::string, openai::batch>> read;
    std::vector<std::string> replayed; // written whole again below, their logs cleared
    for (auto& [id, text] : kept->second.read_all()) {
      if (auto b = openai::batch_store::from_text(text)) {
        if (b->running()) { // the answers written since its state
          const auto log = kept->second.read_log(id);
          openai::replay_batch_log(*b, log);
          if (!log.empty())
            replayed.push_back(id);
        }
        read.emplace_back(id, std::move(*b));
      } else {
        ++skipped;
      }
    }
    // In the order they were made (the files' is the order they were last written).
    std::stable_sort(read.begin(), read.end(),
                     [](const auto& a, const auto& b) { return a.second.created_at < b.second.created_at; });
    for (auto& [id, b] : read)
      if (batches.put(id, std::move(b)).running())
        run_batch(id); // (goes on once the front serves)
    if (skipped > 0)
      spdlog::warn("http: {} files under {} are no file or batch; left as they are", skipped, dir);
    const auto write = [](const kept_files& f, const std::string& id, const std::string& text) {
      if (std::string why; !f.write(id, text, why))
        spdlog::warn("http: {} is kept in memory only: {}", id, why);
    };
    files.watch(
      [kept, write](const std::string& id, const openai::file_store::entry& e) {
        write(kept->first, id, openai::file_store::to_text(e));
      },
      [kept](const std::string& id) { kept->first.remove(id); });
    write_batch = [kept, write](const std::string& id, const openai::batch& b) {
      const auto text = openai::batch_store::to_text(b);
      write(kept->second, id, text);
      kept->second.remove_log(id);
      return text.size();
    };
    log_batch = [kept](const std::string& id, std::string_view record) {
      if (std::string why; !kept->second.append(id, record, why))
        spdlog::warn("http: batch {}'s answer is kept in memory only: {}", id, why);
    };
    // A record a crash cut short ends a log's replay: the answers after it
    // would not be read back. Each replayed batch starts a fresh log.
    for (const auto& id : replayed)
      if (const auto* b = batches.find(id))
        persist_batch(id, *b);
    return {};
  }

  /// What a response's `conversation` reads (none where the front keeps
  /// no conversations).
  openai::earlier_turns kept_conversations() {
    if (conversations.capacity() == 0)
      return {};
    return [this](const std::string& id) { return conversations.turns(id); };
  }

  /// What previous_response_id reads: the kept turns (none where the
  /// front keeps no responses).
  openai::earlier_turns kept_turns() {
    if (stored.capacity() == 0)
      return {};
    return [this](const std::string& id) { return earlier(id); };
  }

  /// A response's answer kept, where the request asked for it.
  /// A streamed background response's events go with it where the store
  /// has room for both, else the object alone.
  /// A response that ended (completed, or cut short as incomplete) in a
  /// conversation adds its input and output items to it.
  /// The response is kept before it joins its conversation, so that a
  /// batch line run again after a crash between the two finds it kept and
  /// joins it then (join_conversation adds a turn once).
  void keep_response(const openai::response_request& r, const std::string& id, std::string body,
                     const std::string& events = {}) {
    const bool joins = !r.conversation.empty() && openai::response_state_of(body).answered();
    if (r.store && (events.empty() || !stored.put(id, {r.previous_id, r.input_items, body, r.session, events})))
      stored.put(id, {r.previous_id, r.input_items, joins ? body : std::move(body), r.session});
    if (joins)
      join_conversation(r.conversation, id, r.input_items, body);
  }

  void join_conversation(const std::string& conversation, const std::string& id, const std::string& input_items,
                         const std::string& body) {
    try {
      conversations.add_turn(conversation, id, input_items, body);
    } catch (const std::exception& e) { // (none is known to throw: the response is kept all the same)
      spdlog::error("http: response {} did not join conversation {}: {}", id, conversation, e.what());
    }
  }

  /// A batch line's response id: the same on every run of the line, so
  /// that a run after a crash finds what the run before left.
  static std::string batch_line_response_id(std::string_view batch_id, std::size_t i) {
    return "resp_" + std::string(batch_id.substr(batch_id.find('_') + 1)) + "_" + std::to_string(i + 1);
  }

  /// The answer a batch line's earlier run kept under `id` (a crash came
  /// before the line's answer was written), joined to its conversation
  /// where it had not yet joined; none where no finished one is kept.
  std::optional<std::string> kept_line_answer(const std::string& id) {
    const auto* e = stored.find(id);
    if (e == nullptr)
      return std::nullopt;
    const auto state = openai::response_state_of(e->body);
    if (!state.answered())
      return std::nullopt;
    auto body = e->body;
    if (!state.conversation.empty())
      join_conversation(state.conversation, id, e->input_items, body);
    return body;
  }

  /// Whether a response request's prompt and output room fit the context
  /// (a tokenize round trip); none where the server does not answer.
  asio::awaitable<std::optional<bool>> fits_context(const openai::response_request& r) {
    auto [id, w] = expect();
    auto reply = co_await ask(w, id, openai::tokenize_frame(r, id));
    const auto* t = reply ? std::get_if<wire::tokenize_reply>(&*reply) : nullptr;
    if (t == nullptr)
      co_return std::nullopt;
    co_return t->max_context == 0 || t->tokens.size() + r.output_room <= t->max_context;
  }

  /// truncation "auto": `r`, or where its prompt would not fit the context,
  /// `r` made again (`reparse`) leaving out as few of its earliest earlier
  /// items as let it fit: a binary search over its cuts, a tokenize each.
  /// Where none fits, the most left out (the server refuses it, saying
  /// why); where the server does not answer, `r` as it is.
  asio::awaitable<openai::response_request>
  fitted(openai::response_request r,
         std::function<std::variant<openai::response_request, openai::api_error>(std::size_t)> reparse) {
    const auto whole = co_await fits_context(r);
    if (!whole || *whole)
      co_return r;
    const auto cuts = r.cuts;
    std::optional<openai::response_request> best;
    for (std::size_t lo = 0, hi = cuts.size(); lo < hi;) { // the first cut that fits is in [lo, hi)
      const auto mid = lo + (hi - lo) / 2;
      auto q = reparse(cuts[mid]);
      auto* made = std::get_if<openai::response_request>(&q);
      std::optional<bool> ok = false; // (one that cannot be made fits no better)
      if (made != nullptr)
        ok = co_await fits_context(*made);
      if (!ok)
        co_return r;
      if (*ok) {
        best = std::move(*made);
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    if (best)
      co_return std::move(*best);
    auto most = reparse(cuts.back());
    if (auto* q = std::get_if<openai::response_request>(&most))
      co_return std::move(*q);
    co_return r;
  }

  /// POST /v1/responses/input_tokens: the wire tokenize frame (id `id`) of
  /// the prompt the response would run, cut as truncation "auto" would cut
  /// it where it asks for that.
  asio::awaitable<std::variant<std::string, openai::api_error>> input_tokens_frame(const std::string& body,
                                                                                   const std::string& id) {
    std::function<std::variant<openai::response_request, openai::api_error>(std::size_t)> parse =
      [this, &body, &id, turns = kept_turns(), convs = kept_conversations()](std::size_t drop) {
        return openai::parse_response_request(body, cfg.model, id, *cfg.chat, {}, {}, turns, {}, convs, drop);
      };
    auto r = parse(0);
    if (auto* e = std::get_if<openai::api_error>(&r))
      co_return std::move(*e);
    auto q = std::get<openai::response_request>(std::move(r));
    if (q.truncate && !q.cuts.empty())
      q = co_await fitted(std::move(q), parse);
    co_return openai::tokenize_frame(q, id);
  }

  /// A background response's run: its status kept as it goes ("queued",
  /// "in_progress", then the whole response, or "failed" with the error);
  /// one a client cancelled or deleted keeps what that left.
  asio::awaitable<void> run_background(std::string resp_id, std::shared_ptr<background_job> job,
                                       std::shared_ptr<waiter> w) {
    const auto never = asio::steady_timer::time_point::max();
    const auto& r = job->request;
    auto& answer = job->answer;
    const bool streamed = job->streamed;
    bool accepted = false;
    std::string body;
    for (;;) {
      auto reply = co_await next(w, never);
      if (!reply) {
        const auto e = stopping();
        body = answer.snapshot("failed", &e);
        if (streamed)
          job->add(answer.stream_error(e));
        break;
      }
      if (std::holds_alternative<wire::accepted_reply>(*reply)) {
        accepted = true;
        job->status = "in_progress";
        if (!job->cancelled && !job->deleted)
          keep_response(r, resp_id, answer.snapshot("in_progress"));
        if (streamed)
          job->add(answer.stream_start());
      } else if (auto* t = std::get_if<wire::token_reply>(&*reply)) {
        job->add(answer.chunk(0, *t)); // (only a streamed request's come)
      } else if (auto* d = std::get_if<wire::done_reply>(&*reply)) {
        // A cancel that came after the end cancelled nothing: the answer stands.
        const bool cut = d->finish_reason == "cancelled";
        if (!cut)
          job->cancelled = false;
        if (cut && job->cancelled) {
          if (streamed)
            job->add(job->shutting_down
                       ? answer.stream_error(stopping())
                       : answer.error_event(api_error_of(400, "invalid_request_error", "response_cancelled",
                                                         "response " + resp_id
                                                           + (job->deleted ? " was deleted" : " was cancelled")
                                                           + " while it ran")));
        } else if (!streamed) {
          body = answer.body({std::move(*d)});
        } else {
          auto events = answer.choice_end(0, *d); // (before the end: it counts the usage)
          job->add(events + answer.stream_end());
          body = *answer.finished(); // (the stream's end made it)
        }
        break;
      } else if (auto* e = std::get_if<wire::error_reply>(&*reply)) {
        const auto err = openai::as_response_error(
          accepted ? openai::from_wire(e->code, e->message) : openai::refusal(r.chat, e->code, e->message), r);
        body = answer.snapshot("failed", &err);
        if (streamed)
          job->add(answer.stream_error(err));
        break;
      }
    }
    job->ended = true;
    job->wake();
    pending.erase(job->id);
    if (const auto j = jobs.find(resp_id); j != jobs.end() && j->second == job)
      jobs.erase(j);
    if (job->deleted)
      co_return;
    if (job->cancelled) {
      const auto e = stopping();
      body = job->shutting_down ? answer.snapshot("failed", &e) : answer.snapshot("cancelled");
    }
    if (!job->cancelled || streamed)
      keep_response(r, resp_id, std::move(body), job->events.text());
  }

  /// A streamed background response's events from `first` on, as they
  /// come, to a client (the one that created it, or one that reads it
  /// again); a client that goes away leaves the response running.
  asio::awaitable<bool> follow(beast::tcp_stream& stream, unsigned version, bool keep,
                               std::shared_ptr<background_job> job, std::size_t first) {
    boost::system::error_code ec;
    if (!co_await stream_head(stream, version, keep))
      co_return false;
    asio::steady_timer wake(io, asio::steady_timer::time_point::max());
    job->followers.push_back(&wake);
    struct unfollow {
      background_job& job;
      asio::steady_timer* t;
      ~unfollow() { std::erase(job.followers, t); }
    } unfollow_at_exit{*job, &wake};
    for (;;) {
      if (first < job->events.size() || job->ended) {
        const std::string out(job->events.from(first));
        first = job->events.size();
        if (job->ended)
          co_return co_await stream_last(stream, out, keep);
        co_await asio::async_write(stream, http::make_chunk(asio::buffer(out)),
                                   asio::redirect_error(asio::use_awaitable, ec));
        if (ec)
          co_return false;
        continue; // events may have come while it was written
      }
      co_await wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      wake.expires_at(asio::steady_timer::time_point::max());
    }
  }

  /// The headers of a stream of server-sent events.
  asio::awaitable<bool> stream_head(beast::tcp_stream& stream, unsigned version, bool keep) {
    http::response<http::empty_body> head{http::status::ok, version};
    head.set(http::field::server, "troupe");
    head.set(http::field::content_type, "text/event-stream");
    head.set(http::field::cache_control, "no-cache");
    head.keep_alive(keep);
    head.chunked(true);
    http::response_serializer<http::empty_body> sr{head};
    boost::system::error_code ec;
    co_await http::async_write_header(stream, sr, asio::redirect_error(asio::use_awaitable, ec));
    co_return !ec;
  }

  /// A stream's last events and the end of its body, in one write.
  asio::awaitable<bool> stream_last(beast::tcp_stream& stream, std::string_view out, bool keep) {
    boost::system::error_code ec;
    if (out.empty())
      co_await asio::async_write(stream, http::make_chunk_last(), asio::redirect_error(asio::use_awaitable, ec));
    else
      co_await asio::async_write(stream, beast::buffers_cat(http::make_chunk(asio::buffer(out)), http::make_chunk_last()),
                                 asio::redirect_error(asio::use_awaitable, ec));
    co_return !ec && keep;
  }

  /// Stops a running background response: its request cancelled, and its
  /// status "cancelled" (kept unless it is being deleted).
  void stop_background(const std::string& resp_id, background_job& job, bool deleting) {
    if (!job.cancelled && !job.deleted)
      cancel(job.id);
    job.deleted = job.deleted || deleting;
    job.cancelled = true;
    if (!job.deleted)
      keep_response(job.request, resp_id, job.answer.snapshot("cancelled"));
  }

  // -- the intake side ------------------------------------------------------

  /// Every reply ZeroMQ has ready, to its waiter; one for a request no
  /// longer waited for (its client went away) is dropped. ZMQ_FD is
  /// edge-triggered, so this runs after every wake-up and every send.
  void drain() {
    while (auto parts = zmq_io::receive(socket)) {
      if (parts->size() != 1)
        continue; // the intake sends one frame per reply
      auto parsed = wire::parse_reply(parts->front());
      if (auto* e = std::get_if<wire::parse_error>(&parsed)) {
        spdlog::warn("http: a reply from the intake that is not one: {}", e->message);
        continue;
      }
      auto& r = std::get<wire::reply>(parsed);
      auto w = pending.find(reply_id(r));
      if (w == pending.end())
        continue;
      w->second->replies.push_back(std::move(r));
      w->second->wake.cancel();
    }
  }

  /// A frame the intake would refuse for its size (its refusal names no
  /// request, so none would wait for it): the 413 to answer instead.
  std::optional<openai::api_error> oversized(const std::string& frame) const {
    if (frame.size() <= cfg.max_frame_bytes)
      return std::nullopt;
    return api_error_of(413, "invalid_request_error", "frame_too_large",
                        "the request as the engine takes it is " + std::to_string(frame.size())
                          + " bytes, over the limit of " + std::to_string(cfg.max_frame_bytes)
                          + " ([server] max_frame_bytes)");
  }

  /// Sends a wire frame; false when ZeroMQ would not take it.
  bool send(const std::string& frame) {
    const bool ok = zmq_send(socket, frame.data(), frame.size(), ZMQ_DONTWAIT) >= 0;
    if (!ok)
      spdlog::warn("http: cannot send to the intake: {}", zmq_strerror(zmq_errno()));
    drain();
    return ok;
  }

  /// The client of wire request `id` went away: the request is cancelled,
  /// its memory freed (its terminal reply then finds no waiter).
  void cancel(const std::string& id) {
    send("{\"type\":\"cancel\",\"id\":\"" + id + "\"}");
  }

  /// While a whole completion is computed nothing is written, so a client
  /// that goes away would not show until its answer: this watches the
  /// socket for its end, without reading (a pipelined request stays for the
  /// next read), and cancels the requests then. `done` ends the watch.
  asio::awaitable<void> watch_hangup(tcp::socket& sock, std::shared_ptr<bool> done, std::vector<std::string> ids) {
    boost::system::error_code ec;
    co_await sock.async_wait(tcp::socket::wait_read, asio::redirect_error(asio::use_awaitable, ec));
    if (*done || ec || stopped)
      co_return; // `sock` may be gone: only `done` is looked at first
    if (peer_closed(sock))
      for (const auto& id : ids)
        cancel(id); // the end of the stream, or a reset
  }

  /// A fresh wire id and its waiter.
  std::pair<std::string, std::shared_ptr<waiter>> expect() {
    auto id = "http-" + std::to_string(++next_id);
    auto w = std::make_shared<waiter>(io);
    pending[id] = w;
    return {std::move(id), w};
  }

  /// The next reply for `w`; nullopt when the front stops or `deadline`
  /// passes first.
  asio::awaitable<std::optional<wire::reply>> next(std::shared_ptr<waiter> w,
                                                   asio::steady_timer::time_point deadline) {
    while (w->replies.empty()) {
      if (w->closed || stopped || asio::steady_timer::clock_type::now() >= deadline)
        co_return std::nullopt;
      w->wake.expires_at(deadline);
      boost::system::error_code ec;
      co_await w->wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    auto r = std::move(w->replies.front());
    w->replies.pop_front();
    co_return r;
  }

  /// One request and its one reply (health, stats, list_adapters), waited
  /// for up to 10 s.
  asio::awaitable<std::optional<wire::reply>> ask(const char* type) {
    auto [id, w] = expect();
    co_return co_await ask(w, id, std::string("{\"type\":\"") + type + "\",\"id\":\"" + id + "\"}");
  }

  /// Sends `frame` (wire id `id`, waited for by `w`) and waits for its one
  /// reply up to 10 s.
  asio::awaitable<std::optional<wire::reply>> ask(std::shared_ptr<waiter> w, std::string id, std::string frame) {
    std::optional<wire::reply> r;
    if (send(frame))
      r = co_await next(w, asio::steady_timer::clock_type::now() + std::chrono::seconds(10));
    pending.erase(id);
    co_return r;
  }

  // -- the HTTP side --------------------------------------------------------

  asio::awaitable<void> accept_loop() {
    for (;;) {
      boost::system::error_code ec;
      auto sock = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (stopped)
        co_return;
      if (ec) {
        spdlog::warn("http: accept failed: {}", ec.message());
        continue;
      }
      // A stream is many small writes: without this, Nagle's algorithm holds
      // each one until the client's delayed ACK (40 ms on Linux) comes.
      sock.set_option(tcp::no_delay(true), ec);
      asio::co_spawn(io, connection(std::move(sock)), asio::detached);
    }
  }

  asio::awaitable<void> connection(tcp::socket sock) {
    beast::tcp_stream stream(std::move(sock));
    connections.insert(&stream);
    struct counted {
      std::unordered_set<beast::tcp_stream*>& open;
      beast::tcp_stream* self;
      ~counted() { open.erase(self); }
    } count{connections, &stream};
    if (connections.size() > cfg.max_connections) {
      auto res = make(11, false, http::status::service_unavailable,
                      openai::to_json(api_error_of(503, "server_error", "overloaded",
                                                   "too many connections (http.max_connections = "
                                                     + std::to_string(cfg.max_connections) + ")")));
      boost::system::error_code ec;
      co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
      co_return;
    }
    beast::flat_buffer buffer;
    for (;;) {
      http::request_parser<http::string_body> parser;
      // (Beast holds a Content-Length to the limit as it reads the header:
      // the largest one any request may have then, each its own after.)
      parser.body_limit(std::max<std::uint64_t>(cfg.max_body_bytes, cfg.file_store_bytes));
      stream.expires_after(std::chrono::seconds(300)); // an idle keep-alive connection
      boost::system::error_code ec;
      co_await http::async_read_header(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
      // An upload (POST /v1/files) may be as large as the file store.
      std::uint64_t limit = cfg.max_body_bytes;
      if (!ec && parser.get().method() == http::verb::post
          && std::string_view(parser.get().target().data(), parser.get().target().size()).starts_with("/v1/files")) {
        const auto key = parser.get()[http::field::authorization];
        if (openai::authorized(std::string_view(key.data(), key.size()), cfg.api_keys)) // (else 401 after a small body)
          limit = std::max<std::uint64_t>(limit, cfg.file_store_bytes);
      }
      parser.body_limit(limit);
      if (!ec && parser.content_length() && *parser.content_length() > limit)
        ec = http::error::body_limit;
      if (!ec && beast::iequals(parser.get()[http::field::expect], "100-continue")) {
        // curl asks before sending a body over 1 KiB, and waits a second
        // for the answer if none comes.
        http::response<http::empty_body> go_on{http::status::continue_, parser.get().version()};
        co_await http::async_write(stream, go_on, asio::redirect_error(asio::use_awaitable, ec));
      }
      if (!ec && !parser.is_done())
        co_await http::async_read(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
      if (ec == http::error::body_limit) {
        auto res = error_response(11, false, api_error_of(413, "invalid_request_error", "frame_too_large",
                                                          "the request body is over "
                                                            + std::to_string(limit) + " bytes"));
        co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
        // The client may still be sending the body: read it away (for a
        // while) so that closing does not reset the connection before the
        // client has read the answer.
        boost::system::error_code ignored;
        stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
        stream.expires_after(std::chrono::seconds(5));
        std::array<char, 65536> sink;
        while (!ec)
          co_await stream.async_read_some(asio::buffer(sink), asio::redirect_error(asio::use_awaitable, ec));
        co_return;
      }
      if (ec) {
        if (ec != http::error::end_of_stream && ec != beast::error::timeout && ec != asio::error::eof
            && ec != asio::error::connection_reset && ec != asio::error::operation_aborted) {
          // Not HTTP: say so once, then close.
          auto res = error_response(11, false, api_error_of(400, "invalid_request_error", "bad_request",
                                                            "not an HTTP/1.1 request: " + ec.message()));
          co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
        }
        break;
      }
      stream.expires_never(); // a completion may stream for long
      auto req = parser.release();
      const bool keep = co_await handle(stream, req);
      if (!keep || stopped)
        break;
    }
    boost::system::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

  /// Answers one request; whether the connection stays open.
  asio::awaitable<bool> handle(beast::tcp_stream& stream, const http::request<http::string_body>& req) {
    const auto version = req.version();
    const bool keep = req.keep_alive();
    std::string_view target(req.target().data(), req.target().size());
    const auto mark = target.find('?');
    const auto query = mark == std::string_view::npos ? std::string_view{} : target.substr(mark + 1);
    target = target.substr(0, mark);
    boost::system::error_code ec;
    auto reply = [&](response res) -> asio::awaitable<bool> {
      co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
      co_return !ec && res.keep_alive();
    };
    const auto method = req.method();
    auto wrong_method = [&](const char* allowed) {
      auto res = error_response(version, keep,
                                api_error_of(405, "invalid_request_error", "method_not_allowed",
                                             std::string(target) + " takes " + allowed));
      res.set(http::field::allow, allowed);
      return res;
    };

    const auto authorization = req[http::field::authorization];
    // vLLM's tokenizer paths sit outside /v1/ but are the API's all the same.
    const bool tokenize = target == "/tokenize";
    const bool detokenize = target == "/detokenize";
    if ((target.starts_with("/v1/") || tokenize || detokenize)
        && !openai::authorized(std::string_view(authorization.data(), authorization.size()), cfg.api_keys)) {
      auto res = error_response(version, keep, openai::unauthorized(req.count(http::field::authorization) > 0));
      res.set(http::field::www_authenticate, "Bearer");
      co_return co_await reply(std::move(res));
    }
    if (const auto generating = endpoint_api(target)) {
      if (method != http::verb::post)
        co_return co_await reply(wrong_method("POST"));
      const auto kind = *generating;
      if (kind != api::completions && !cfg.chat)
        co_return co_await reply(error_response(
          version, keep,
          api_error_of(404, "invalid_request_error", "not_found",
                       std::string(kind == api::chat ? "chat completions" : "responses") + " are not served: "
                         + cfg.no_chat + "; use /v1/completions with the conversation as the prompt")));
      co_return co_await completion(stream, req, kind);
    }
    // OpenAI's count of a response request's input tokens.
    const bool input_tokens = target == "/v1/responses/input_tokens";
    if (input_tokens && !cfg.chat)
      co_return co_await reply(error_response(
        version, keep,
        api_error_of(404, "invalid_request_error", "not_found", "responses are not served: " + cfg.no_chat)));
    if (target.starts_with("/v1/responses/") && !input_tokens) {
      // A kept response: read, deleted, or (running in the background) cancelled.
      auto rest = target.substr(14);
      const bool cancelling = rest.ends_with("/cancel");
      const bool listing = rest.ends_with("/input_items");
      if (cancelling)
        rest.remove_suffix(7);
      if (listing)
        rest.remove_suffix(12);
      const auto id = openai::percent_decoded(rest);
      if (cancelling && method != http::verb::post)
        co_return co_await reply(wrong_method("POST"));
      if (listing && method != http::verb::get)
        co_return co_await reply(wrong_method("GET"));
      if (!cancelling && method != http::verb::get && method != http::verb::delete_)
        co_return co_await reply(wrong_method("GET, DELETE"));
      openai::retrieve_query asked;
      if (method == http::verb::get && !listing) {
        auto q = openai::parse_retrieve_query(query);
        if (auto* bad = std::get_if<openai::api_error>(&q))
          co_return co_await reply(error_response(version, keep, *bad));
        asked = std::get<openai::retrieve_query>(q);
      }
      const auto* e = stored.find(id);
      const auto job = jobs.find(id);
      if (e == nullptr && job != jobs.end() && !job->second->deleted) {
        // Dropped for room while it runs: kept again as it stands.
        const auto& j = *job->second;
        keep_response(j.request, id, j.answer.snapshot(j.cancelled ? "cancelled" : j.status));
        e = stored.find(id);
      }
      if (e == nullptr)
        co_return co_await reply(error_response(
          version, keep,
          api_error_of(404, "invalid_request_error", "not_found",
                       "no stored response " + id
                         + (stored.capacity() == 0 ? ": this server keeps none ([http] response_store_mb = 0)"
                                                   : ": it was not kept (store false), was deleted, or was dropped for "
                                                     "room ([http] response_store_mb)"))));
      if (listing) {
        auto page = openai::input_items_page(id, e->input_items, query);
        if (auto* bad = std::get_if<openai::api_error>(&page))
          co_return co_await reply(error_response(version, keep, *bad));
        co_return co_await reply(make(version, keep, http::status::ok, std::get<std::string>(std::move(page))));
      }
      if (cancelling) {
        // OpenAI's: only a background response; cancelling one that ended
        // (or twice) gives it as it is.
        if (!openai::response_state_of(e->body).background)
          co_return co_await reply(error_response(
            version, keep,
            api_error_of(400, "invalid_request_error", "not_background",
                         "response " + id + " did not run in the background (it was answered whole): only a "
                         "background response can be cancelled")));
        if (job != jobs.end())
          stop_background(id, *job->second, false);
        const auto* now = stored.find(id); // (none where the store had no room left for it)
        auto body = now != nullptr      ? now->body
                    : job != jobs.end() ? job->second->answer.snapshot("cancelled")
                                        : std::string();
        co_return co_await reply(make(version, keep, http::status::ok, std::move(body)));
      }
      if (method == http::verb::get && !asked.stream)
        co_return co_await reply(make(version, keep, http::status::ok, e->body));
      if (method == http::verb::get) {
        // Its events again, from after starting_after: as they come while
        // it runs, all at once once it ended.
        const bool running = job != jobs.end() && !job->second->deleted;
        if (running ? !job->second->streamed : e->events.empty())
          co_return co_await reply(error_response(
            version, keep,
            api_error_of(400, "invalid_request_error", "not_streamed",
                         "response " + id + " was not created with \"background\": true and \"stream\": true: only "
                         "such a response's events are kept (or they were dropped for room, [http] "
                         "response_store_mb); GET it without stream=true")));
        if (running)
          co_return co_await follow(stream, version, keep, job->second, asked.first());
        const openai::event_log log(e->events);
        const std::string out(log.from(asked.first()));
        if (!co_await stream_head(stream, version, keep))
          co_return false;
        co_return co_await stream_last(stream, out, keep);
      }
      if (job != jobs.end())
        stop_background(id, *job->second, true); // deleted while running: cancelled, nothing kept
      stored.erase(id);
      co_return co_await reply(
        make(version, keep, http::status::ok, "{\"id\":\"" + id + "\",\"object\":\"response\",\"deleted\":true}"));
    }
    if (target == "/v1/conversations" || target.starts_with("/v1/conversations/")) {
      // OpenAI's Conversations API: answered here, from the front's own store.
      const auto rest = target.substr(17);
      const auto allowed = openai::conversation_methods(rest);
      if (allowed.empty())
        co_return co_await reply(error_response(
          version, keep,
          api_error_of(404, "invalid_request_error", "not_found",
                       "no such path: " + std::string(target)
                         + " (served: /v1/conversations, /v1/conversations/ID, /v1/conversations/ID/items, "
                           "/v1/conversations/ID/items/ITEM)")));
      const std::string_view verb = method == http::verb::get      ? "GET"
                                    : method == http::verb::post   ? "POST"
                                    : method == http::verb::delete_ ? "DELETE"
                                                                    : "";
      if (verb.empty() || allowed.find(verb) == std::string_view::npos) {
        auto res = wrong_method(allowed.data()); // (a literal's view: it ends with its NUL)
        co_return co_await reply(std::move(res));
      }
      if (conversations.capacity() == 0)
        co_return co_await reply(error_response(
          version, keep,
          api_error_of(404, "invalid_request_error", "not_found",
                       "conversations are not kept here ([http] conversation_store_mb = 0); send the whole "
                       "conversation in a response's \"input\"")));
      std::variant<std::string, openai::api_error> answer;
      try {
        answer = conversations.serve(verb, rest, query, req.body(), unix_now(), fresh_id);
      } catch (const std::exception& e) { // (none is known to throw: an answer all the same)
        spdlog::error("http: {} {}: {}", verb, target, e.what());
        answer = api_error_of(500, "server_error", "internal", "the conversation could not be read or changed");
      }
      if (auto* bad = std::get_if<openai::api_error>(&answer))
        co_return co_await reply(error_response(version, keep, *bad));
      co_return co_await reply(make(version, keep, http::status::ok, std::get<std::string>(std::move(answer))));
    }
    if (target == "/v1/files" || target.starts_with("/v1/files/") || target == "/v1/batches"
        || target.starts_with("/v1/batches/")) {
      // OpenAI's Files and Batch APIs: answered here, from the front's own stores.
      const bool batch = target.starts_with("/v1/batches");
      const auto rest = target.substr(batch ? 11 : 9);
      const std::string_view verb = method == http::verb::get      ? "GET"
                                    : method == http::verb::post   ? "POST"
                                    : method == http::verb::delete_ ? "DELETE"
                                                                    : "";
      const std::string_view allowed = !batch                     ? openai::file_store::methods(rest)
                                       : rest.empty()             ? "GET, POST"
                                       : rest.ends_with("/cancel") ? "POST"
                                       : rest.size() > 1 && rest.find('/', 1) == std::string_view::npos ? "GET"
                                                                                                        : "";
      if (allowed.empty())
        co_return co_await reply(error_response(
          version, keep,
          api_error_of(404, "invalid_request_error", "not_found",
                       "no such path: " + std::string(target)
                         + (batch ? " (served: /v1/batches, /v1/batches/ID, /v1/batches/ID/cancel)"
                                  : " (served: /v1/files, /v1/files/ID, /v1/files/ID/content)"))));
      if (verb.empty() || allowed.find(verb) == std::string_view::npos) {
        auto res = wrong_method(std::string(allowed).c_str());
        co_return co_await reply(std::move(res));
      }
      if (files.capacity() == 0)
        co_return co_await reply(error_response(
          version, keep,
          api_error_of(404, "invalid_request_error", "not_found",
                       "files and batches are not served here ([http] file_store_mb = 0)")));
      std::variant<std::string, openai::api_error> answer;
      std::string content_type = "application/json";
      try {
        if (!batch && verb == "POST") {
          const auto type = req[http::field::content_type];
          answer = files.upload(std::string_view(type.data(), type.size()), req.body(), unix_now(), fresh_id);
        } else if (!batch) {
          auto got = files.serve(verb, rest, query);
          if (auto* e = std::get_if<openai::api_error>(&got)) {
            answer = std::move(*e);
          } else {
            auto& s = std::get<openai::file_store::served>(got);
            answer = std::move(s.body);
            content_type = s.content_type;
          }
        } else if (rest.empty()) {
          answer = verb == "POST" ? create_batch(req.body()) : batches.list(query);
        } else {
          auto id = rest.substr(1);
          const bool cancelling = id.ends_with("/cancel");
          if (cancelling)
            id.remove_suffix(7);
          const auto name = openai::percent_decoded(id);
          if (cancelling) {
            answer = cancel_batch(name);
          } else if (const auto* b = batches.find(name)) {
            answer = openai::batch_json(name, *b);
          } else {
            answer = api_error_of(404, "invalid_request_error", "not_found", "no batch " + name);
          }
        }
      } catch (const std::exception& e) { // (none is known to throw: an answer all the same)
        spdlog::error("http: {} {}: {}", verb, target, e.what());
        answer = api_error_of(500, "server_error", "internal", "the file or batch could not be read or changed");
      }
      if (auto* bad = std::get_if<openai::api_error>(&answer))
        co_return co_await reply(error_response(version, keep, *bad));
      auto res = make(version, keep, http::status::ok, std::get<std::string>(std::move(answer)), content_type.c_str());
      co_return co_await reply(std::move(res));
    }
    const bool advise = target == "/v1/advise";
    // vLLM's paths for adapters loaded and unloaded while serving.
    const bool load = target == "/v1/load_lora_adapter";
    const bool unload = target == "/v1/unload_lora_adapter";
    const bool post = advise || load || unload || tokenize || detokenize || input_tokens;
    // GET /v1/models/NAME: one model (an adapter's name may hold '/').
    constexpr std::string_view one_model = "/v1/models/";
    const bool named = target.starts_with(one_model) && target.size() > one_model.size();
    if (target == "/version") {
      if (method != http::verb::get)
        co_return co_await reply(wrong_method("GET"));
      co_return co_await reply(make(version, keep, http::status::ok, openai::version_json()));
    }
    if (post || named || target == "/v1/models" || target == "/health" || target == "/metrics") {
      if (method != (post ? http::verb::post : http::verb::get))
        co_return co_await reply(wrong_method(post ? "POST" : "GET"));
      if ((load || unload) && !cfg.adapter_updates)
        co_return co_await reply(error_response(
          version, keep,
          api_error_of(404, "invalid_request_error", "not_found",
                       std::string(target)
                         + " is not served: adapter updates over HTTP are off ([http] adapter_updates; with it, "
                           "set api_keys too, since a load reads a path on the server)")));
      std::optional<wire::reply> r;
      if (post) {
        auto [id, w] = expect();
        std::variant<std::string, openai::api_error> frame = openai::api_error{};
        if (input_tokens)
          frame = co_await input_tokens_frame(req.body(), id);
        else
          frame = advise                   ? openai::parse_advise(req.body(), id)
                  : tokenize || detokenize ? openai::parse_tokenizer_request(req.body(), id, tokenize,
                                                                             cfg.chat ? &*cfg.chat : nullptr, cfg.model)
                                           : openai::parse_adapter_update(req.body(), id, load);
        if (auto* e = std::get_if<openai::api_error>(&frame)) {
          pending.erase(id);
          co_return co_await reply(error_response(version, keep, *e));
        }
        r = co_await ask(w, id, std::get<std::string>(frame));
      } else {
        r = co_await ask(named || target == "/v1/models" ? "list_adapters" : target == "/health" ? "health" : "stats");
      }
      // Responses made of a conditional's class temporary are made before
      // the co_await: GCC 12 destroys such a temporary twice across a
      // coroutine's suspension.
      if (!r) {
        auto res = error_response(version, keep,
                                  stopped ? stopping()
                                          : api_error_of(504, "server_error", "timeout", "the server did not answer in 10 s"));
        co_return co_await reply(std::move(res));
      }
      if (const auto* e = std::get_if<wire::error_reply>(&*r)) {
        auto res = error_response(version, keep, (load || unload) ? openai::adapter_update_error(e->code, e->message)
                                                                  : openai::from_wire(e->code, e->message));
        co_return co_await reply(std::move(res));
      }
      if (const auto* a = std::get_if<wire::adapters_reply>(&*r); a != nullptr && named) {
        auto m = openai::model_json(openai::percent_decoded(target.substr(one_model.size())), cfg.model, *a,
                                    unix_now());
        if (auto* e = std::get_if<openai::api_error>(&m))
          co_return co_await reply(error_response(version, keep, *e));
        co_return co_await reply(make(version, keep, http::status::ok, std::get<std::string>(std::move(m))));
      }
      if (const auto* a = std::get_if<wire::adapters_reply>(&*r))
        co_return co_await reply(make(version, keep, http::status::ok, openai::models_json(cfg.model, *a, unix_now())));
      if (const auto* h = std::get_if<wire::health_reply>(&*r))
        co_return co_await reply(make(version, keep, h->status == "ok" ? http::status::ok
                                                                        : http::status::service_unavailable,
                                      "{\"status\":\"" + h->status + "\"}"));
      if (const auto* a = std::get_if<wire::advise_reply>(&*r))
        co_return co_await reply(make(version, keep, http::status::ok, openai::advise_json(*a)));
      if (const auto* a = std::get_if<wire::adapter_reply>(&*r))
        co_return co_await reply(make(version, keep, http::status::ok, openai::adapter_update_json(*a)));
      if (const auto* t = std::get_if<wire::tokenize_reply>(&*r)) {
        auto res = make(version, keep, http::status::ok,
                        input_tokens ? openai::input_tokens_json(*t) : openai::tokenize_json(*t));
        co_return co_await reply(std::move(res));
      }
      if (const auto* d = std::get_if<wire::detokenize_reply>(&*r))
        co_return co_await reply(make(version, keep, http::status::ok, openai::detokenize_json(*d)));
      if (auto* s = std::get_if<wire::stats_reply>(&*r)) {
        // With the front's own: what its stores keep, against their bounds.
        s->values.push_back(stat_gauge("http_responses_kept", static_cast<double>(stored.size())));
        s->values.push_back(stat_gauge("http_response_store_bytes", static_cast<double>(stored.bytes())));
        s->values.push_back(stat_gauge("http_conversations_kept", static_cast<double>(conversations.size())));
        s->values.push_back(stat_gauge("http_conversation_store_bytes", static_cast<double>(conversations.bytes())));
        s->values.push_back(stat_gauge("http_files_kept", static_cast<double>(files.size())));
        s->values.push_back(stat_gauge("http_file_store_bytes", static_cast<double>(files.bytes())));
        s->values.push_back(stat_gauge("http_batches_running", static_cast<double>(batch_runs.size())));
        s->values.push_back(stat_gauge("http_batch_lines_running", static_cast<double>(batch_lines_running)));
        auto res = make(version, keep, http::status::ok, openai::prometheus_text(*s), "text/plain; version=0.0.4");
        co_return co_await reply(std::move(res));
      }
      co_return co_await reply(error_response(
        version, keep, api_error_of(500, "server_error", "internal", "an unexpected reply from the server")));
    }
    co_return co_await reply(error_response(
      version, keep,
      api_error_of(404, "invalid_request_error", "not_found",
                   "no such path: " + std::string(target)
                     + " (served: POST /v1/completions, POST /v1/chat/completions, POST /v1/responses, "
                       "/v1/conversations, /v1/files, /v1/batches, "
                       "GET /v1/models[/NAME], POST /v1/advise, "
                       "POST /v1/load_lora_adapter, POST /v1/unload_lora_adapter, POST /tokenize, POST /detokenize, GET /health, "
                       "GET /metrics, GET /version)")));
  }

  /// POST /v1/completions with use_beam_search: each prompt's beams
  /// searched with one-token generates (messages/beam_search.hpp), a step's
  /// generates for all its live beams sent together; the answer gives the
  /// n best beams as a completion's choices.
  asio::awaitable<bool> beam_answer(beast::tcp_stream& stream, unsigned version, bool keep,
                                    const openai::completion_request& c, const std::string& base) {
    boost::system::error_code ec;
    auto fail = [&](const openai::api_error& e) -> asio::awaitable<bool> {
      auto res = error_response(version, keep, e);
      co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
      co_return !ec && keep;
    };
    const auto never = asio::steady_timer::time_point::max();
    auto w = std::make_shared<waiter>(io);
    std::vector<std::string> asked; // every id sent, forgotten at the end
    const forget_ids<decltype(pending)> forget_them{pending, asked};
    std::size_t sent_count = 0;
    bool overloaded = false;
    // Sends each frame (built for its fresh id) and waits for each one's
    // answer (its done, error, tokenize or detokenize reply), in order;
    // none where the server stops or the intake would not take a frame.
    auto ask_all = [&](const std::vector<std::function<std::string(const std::string&)>>& frames)
      -> asio::awaitable<std::optional<std::vector<wire::reply>>> {
      std::unordered_map<std::string, std::size_t> at;
      std::vector<std::string> ids;
      for (std::size_t k = 0; k < frames.size(); ++k) {
        ids.push_back(base + ".b" + std::to_string(++sent_count));
        pending[ids.back()] = w;
        asked.push_back(ids.back());
        at[ids.back()] = k;
      }
      for (std::size_t k = 0; k < frames.size(); ++k)
        if (!send(frames[k](ids[k]))) {
          for (std::size_t j = 0; j < k; ++j)
            cancel(ids[j]);
          overloaded = true;
          co_return std::nullopt;
        }
      std::vector<std::optional<wire::reply>> got(frames.size());
      for (std::size_t left = frames.size(); left > 0;) {
        auto r = co_await next(w, never);
        if (!r) {
          for (std::size_t k = 0; k < frames.size(); ++k)
            if (!got[k])
              cancel(ids[k]);
          co_return std::nullopt;
        }
        const auto i = at.find(reply_id(*r));
        if (i == at.end() || got[i->second] || std::holds_alternative<wire::accepted_reply>(*r)
            || std::holds_alternative<wire::token_reply>(*r))
          continue;
        got[i->second] = std::move(*r);
        pending.erase(i->first);
        --left;
      }
      std::vector<wire::reply> out;
      for (auto& g : got)
        out.push_back(std::move(*g));
      co_return out;
    };
    auto lost = [&]() -> openai::api_error {
      return overloaded ? api_error_of(503, "server_error", "overloaded", "the server cannot take the request now")
                        : stopping();
    };
    const auto per = std::max<std::uint32_t>(c.best_of, 1);
    const auto prompts = c.frames.size() / per;
    std::vector<wire::done_reply> dones;
    for (std::size_t p = 0; p < prompts; ++p) {
      const openai::beam_frames frames(c.frames[p * per]);
      std::vector<std::function<std::string(const std::string&)>> tokenize;
      tokenize.emplace_back([&frames](const std::string& id) { return frames.tokenize(id); });
      auto got = co_await ask_all(tokenize);
      if (!got)
        co_return co_await fail(lost());
      const auto* t = std::get_if<wire::tokenize_reply>(&got->front());
      if (t == nullptr) {
        const auto* e = std::get_if<wire::error_reply>(&got->front());
        co_return co_await fail(e ? openai::refusal(c, e->code, e->message)
                                  : api_error_of(500, "server_error", "internal", "an unexpected reply from the server"));
      }
      const auto prompt = frames.prompt_tokens().value_or(t->tokens);
      openai::beam_search search(prompt, t->end_tokens, *c.beam);
      for (auto live = search.step(); !live.empty(); live = search.step()) {
        if (peer_closed(stream.socket()))
          co_return false; // the client went away: the search stops between steps
        std::vector<std::function<std::string(const std::string&)>> steps;
        for (const auto& tokens : live)
          steps.emplace_back([&frames, &tokens, alternatives = search.alternatives()](const std::string& id) {
            return frames.step(id, tokens, alternatives);
          });
        auto answers = co_await ask_all(steps);
        if (!answers)
          co_return co_await fail(lost());
        for (std::size_t k = 0; k < answers->size(); ++k) {
          const auto& a = (*answers)[k];
          if (const auto* d = std::get_if<wire::done_reply>(&a); d != nullptr && d->logprobs && !d->logprobs->empty()) {
            search.extend(k, d->logprobs->front().top);
          } else if (const auto* e = std::get_if<wire::error_reply>(&a); e != nullptr && e->code == wire::error_code::prompt_too_long) {
            search.stop(k); // its context is full
          } else if (e != nullptr) {
            co_return co_await fail(openai::refusal(c, e->code, e->message));
          } else {
            co_return co_await fail(
              api_error_of(500, "server_error", "internal", "a beam's step came back without its log-probabilities"));
          }
        }
        if (!search.advance())
          break;
      }
      // The n best as a generate would have answered them: their texts read
      // back (the end token left out), fewer beams than n repeating the last.
      auto best = search.best();
      std::vector<std::vector<std::int32_t>> outputs;
      std::vector<std::function<std::string(const std::string&)>> reads;
      for (std::uint32_t i = 0; i < c.n; ++i) {
        const auto& b = best[std::min<std::size_t>(i, best.size() - 1)];
        outputs.emplace_back(b.tokens.begin(), b.tokens.end() - (b.ended ? 1 : 0));
      }
      for (const auto& o : outputs)
        if (!o.empty())
          reads.emplace_back([&o](const std::string& id) { return openai::beam_frames::detokenize(id, o); });
      auto texts = co_await ask_all(reads);
      if (!texts)
        co_return co_await fail(lost());
      std::size_t read = 0;
      for (std::uint32_t i = 0; i < c.n; ++i) {
        std::string text;
        if (!outputs[i].empty()) {
          const auto* d = std::get_if<wire::detokenize_reply>(&(*texts)[read++]);
          if (d == nullptr)
            co_return co_await fail(api_error_of(500, "server_error", "internal", "a beam's text could not be read"));
          text = d->text;
        }
        auto done = openai::beam_done(best[std::min<std::size_t>(i, best.size() - 1)], c.ids[p * per + i],
                                      std::move(text), static_cast<std::uint32_t>(prompt.size()), c.logprobs >= 0);
        done.tokens = outputs[i];
        dones.push_back(std::move(done));
      }
    }
    // Answered as n choices a prompt, in order.
    auto shown = c;
    shown.best_of = shown.n;
    shown.frames.resize(dones.size());
    shown.ids.resize(dones.size());
    const openai::completion_answer answer((c.chat ? "chatcmpl-" : "cmpl-") + base, unix_now(), shown);
    auto res = make(version, keep, http::status::ok, answer.body(dones));
    co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
    co_return !ec && keep;
  }

  /// A POST /v1/completions, /v1/chat/completions or /v1/responses request
  /// parsed: its wire frames, and for a response what it is kept as.
  struct prepared {
    openai::completion_request c;
    std::optional<openai::response_request> as_response;
    std::string resp_id;
    std::string base; ///< the wire ids' stem
    /// An error as the request's API names it (a response's own way).
    openai::api_error named(openai::api_error e) const {
      return as_response ? openai::as_response_error(std::move(e), *as_response) : e;
    }
    /// The answer it builds, with `created` its time.
    any_answer answer(api kind, std::int64_t created) const {
      if (as_response)
        return any_answer(openai::response_answer(resp_id, created, *as_response));
      return any_answer(openai::completion_answer((kind == api::chat ? "chatcmpl-" : "cmpl-") + base, created, c));
    }
  };

  /// Parses a request of `kind` (a response's earlier turns read, its
  /// conversation cut to fit where it asks for truncation).
  /// `resp_id`: a response's id where it must be this one (a batch line's).
  asio::awaitable<std::variant<prepared, openai::api_error>> prepare(const std::string& body, api kind,
                                                                      std::string resp_id = {}) {
    prepared p;
    p.base = "http-" + std::to_string(++next_id);
    const auto enforceable = [this](const std::string& schema) {
      try {
        (void)parameters.get(schema);
        return true;
      } catch (const std::invalid_argument&) {
        return false;
      }
    };
    // A response request is a chat's, its errors named as it names them.
    std::variant<openai::completion_request, openai::api_error> parsed = openai::api_error{};
    if (kind == api::responses) {
      const auto turns = kept_turns();
      // A new conversation's turns run in a session named by its first
      // response's id: the next turn reuses their K and V.
      p.resp_id = resp_id.empty() ? response_id() : std::move(resp_id);
      auto r = openai::parse_response_request(body, cfg.model, p.base, *cfg.chat, enforceable, cfg.sampling, turns,
                                              p.resp_id, kept_conversations());
      if (auto* e = std::get_if<openai::api_error>(&r))
        co_return std::move(*e);
      p.as_response = std::get<openai::response_request>(std::move(r));
      if (p.as_response->truncate && !p.as_response->cuts.empty()) {
        std::function<std::variant<openai::response_request, openai::api_error>(std::size_t)> reparse =
          [&, turns](std::size_t drop) {
            return openai::parse_response_request(body, cfg.model, p.base, *cfg.chat, enforceable, cfg.sampling,
                                                  turns, p.resp_id, kept_conversations(), drop);
          };
        p.as_response = co_await fitted(std::move(*p.as_response), std::move(reparse));
      }
      parsed = p.as_response->chat;
    } else {
      parsed = kind == api::chat
                 ? openai::parse_chat_completion(body, cfg.model, p.base, *cfg.chat, enforceable, cfg.sampling)
                 : openai::parse_completion(body, cfg.model, p.base, cfg.sampling);
    }
    if (auto* e = std::get_if<openai::api_error>(&parsed))
      co_return std::move(*e);
    p.c = std::get<openai::completion_request>(std::move(parsed));
    co_return p;
  }

  /// A request's choices (a prompt's n each: one wire request a choice)
  /// sent to the intake and followed; their replies come to one waiter,
  /// told apart by id. Its ids' waiters are forgotten at the end.
  struct call {
    impl& front;
    const prepared& p;
    std::size_t n;
    std::shared_ptr<waiter> w;
    std::unordered_map<std::string, std::size_t> index;
    /// Choices ended (a done or an error): the rest are cancelled when the
    /// answer cannot be given.
    std::vector<char> ended;
    /// What came for a choice after its accepted, while others were not.
    std::deque<wire::reply> later;
    forget_ids<decltype(impl::pending)> forget;

    call(impl& f, const prepared& pr)
        : front(f), p(pr), n(pr.c.ids.size()), w(std::make_shared<waiter>(f.io)), ended(n, 0),
          forget{f.pending, pr.c.ids} {
      for (std::size_t k = 0; k < n; ++k) {
        front.pending[p.c.ids[k]] = w;
        index[p.c.ids[k]] = k;
      }
    }
    void cancel_open() {
      for (std::size_t k = 0; k < n; ++k)
        if (!ended[k])
          front.cancel(p.c.ids[k]);
    }
    asio::awaitable<std::optional<wire::reply>> next_reply() {
      if (later.empty())
        co_return co_await front.next(w, asio::steady_timer::time_point::max());
      auto r = std::move(later.front());
      later.pop_front();
      co_return r;
    }

    /// Sends every choice and waits until each is taken on: nothing (and
    /// `answer` told each one's prompt), or the error to answer (the rest
    /// cancelled).
    asio::awaitable<std::optional<openai::api_error>> start(any_answer& answer) {
      for (const auto& frame : p.c.frames)
        if (auto e = front.oversized(frame)) {
          std::fill(ended.begin(), ended.end(), 1);
          co_return p.named(std::move(*e));
        }
      for (std::size_t k = 0; k < n; ++k)
        if (!front.send(p.c.frames[k])) {
          std::fill(ended.begin() + static_cast<std::ptrdiff_t>(k), ended.end(), 1);
          cancel_open();
          co_return api_error_of(503, "server_error", "overloaded", "the server cannot take the request now");
        }
      std::vector<char> accepted(n, 0);
      std::optional<openai::api_error> refused;
      for (std::size_t answered = 0; answered < n;) {
        auto r = co_await front.next(w, asio::steady_timer::time_point::max());
        if (!r) {
          cancel_open();
          co_return stopping();
        }
        const auto k = index.at(reply_id(*r));
        if (const auto* a = std::get_if<wire::accepted_reply>(&*r)) {
          accepted[k] = 1;
          answer.accepted(k, a->prompt_tokens);
          ++answered;
        } else if (auto* e = std::get_if<wire::error_reply>(&*r); e != nullptr && !accepted[k]) {
          ended[k] = 1;
          ++answered;
          if (!refused)
            refused = p.named(openai::refusal(p.c, e->code, e->message));
        } else {
          later.push_back(std::move(*r));
        }
      }
      if (refused)
        cancel_open();
      co_return refused;
    }

    /// After start: every choice's done (a choice's error ends it, the
    /// rest cancelled), or the error to answer.
    asio::awaitable<std::variant<std::vector<wire::done_reply>, openai::api_error>> dones() {
      std::vector<wire::done_reply> out(n);
      for (std::size_t finished = 0; finished < n;) {
        auto r = co_await next_reply();
        if (!r) {
          cancel_open();
          co_return stopping();
        }
        const auto k = index.at(reply_id(*r));
        if (ended[k])
          continue; // (a cancel's answer for a choice that had ended)
        if (auto* d = std::get_if<wire::done_reply>(&*r)) {
          out[k] = std::move(*d);
          ended[k] = 1;
          ++finished;
        } else if (auto* e = std::get_if<wire::error_reply>(&*r)) {
          ended[k] = 1;
          cancel_open();
          co_return p.named(openai::from_wire(e->code, e->message));
        }
      }
      co_return out;
    }
  };

  /// The whole answer's body of a call started: a response's kept (one
  /// whose requests were cancelled answers no one: it is not kept, nor
  /// does it join a conversation).
  asio::awaitable<std::variant<std::string, openai::api_error>> whole(call& k, any_answer& answer,
                                                                     bool* cut = nullptr) {
    auto got = co_await k.dones();
    if (auto* e = std::get_if<openai::api_error>(&got))
      co_return std::move(*e);
    const auto& dones = std::get<std::vector<wire::done_reply>>(got);
    if (cut != nullptr)
      *cut = std::any_of(dones.begin(), dones.end(), [](const auto& d) { return d.finish_reason == "cancelled"; });
    auto body = answer.body(dones);
    if (k.p.as_response && dones.at(0).finish_reason != "cancelled")
      keep_response(*k.p.as_response, k.p.resp_id, body);
    co_return body;
  }

  /// POST /v1/completions, /v1/chat/completions and /v1/responses: whole,
  /// or streamed as server-sent events.
  asio::awaitable<bool> completion(beast::tcp_stream& stream, const http::request<http::string_body>& req,
                                   api kind) {
    const auto version = req.version();
    const bool keep = req.keep_alive();
    boost::system::error_code ec;
    auto fail = [&](const openai::api_error& e) -> asio::awaitable<bool> {
      auto res = error_response(version, keep, e);
      co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
      co_return !ec && keep;
    };
    auto made = co_await prepare(req.body(), kind);
    if (auto* e = std::get_if<openai::api_error>(&made))
      co_return co_await fail(*e);
    const auto& p = std::get<prepared>(made);
    const auto& c = p.c;
    const auto& as_response = p.as_response;
    const auto& resp_id = p.resp_id;
    if (c.beam)
      co_return co_await beam_answer(stream, version, keep, c, p.base);
    if (as_response && as_response->background) {
      // Answered now, "queued"; run_background keeps its status as it runs.
      if (auto e = oversized(c.frames.at(0)))
        co_return co_await fail(p.named(std::move(*e)));
      auto w = std::make_shared<waiter>(io);
      const auto& wire_id = c.ids.at(0); // a response is one choice
      pending[wire_id] = w;
      if (!send(c.frames.at(0))) {
        pending.erase(wire_id);
        co_return co_await fail(
          api_error_of(503, "server_error", "overloaded", "the server cannot take the request now"));
      }
      auto job = std::make_shared<background_job>(*as_response, wire_id,
                                                  openai::response_answer(resp_id, unix_now(), *as_response));
      job->streamed = c.stream;
      auto queued = job->answer.snapshot("queued");
      keep_response(job->request, resp_id, queued);
      jobs[resp_id] = job;
      asio::co_spawn(io, run_background(resp_id, job, std::move(w)), asio::detached);
      if (job->streamed) // its events as they come; the response runs on should this client go
        co_return co_await follow(stream, version, keep, std::move(job), 0);
      auto res = make(version, keep, http::status::ok, std::move(queued));
      co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
      co_return !ec && keep;
    }
    call k(*this, p);
    auto answer = p.answer(kind, unix_now());
    // Until every choice is taken on (or one refused) nothing is sent.
    if (auto refused = co_await k.start(answer))
      co_return co_await fail(*refused);

    if (!c.stream) {
      auto done = std::make_shared<bool>(false);
      asio::co_spawn(io, watch_hangup(stream.socket(), done, c.ids), asio::detached);
      struct end_watch {
        std::shared_ptr<bool> done;
        tcp::socket& sock;
        ~end_watch() {
          *done = true;
          boost::system::error_code ignored;
          sock.cancel(ignored); // its wait, the only operation on the socket now
        }
      } end_watch_at_exit{done, stream.socket()};
      auto body = co_await whole(k, answer);
      if (auto* e = std::get_if<openai::api_error>(&body))
        co_return co_await fail(*e);
      auto res = make(version, keep, http::status::ok, std::get<std::string>(std::move(body)));
      co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
      co_return !ec && keep;
    }

    // Streaming: the headers now, then one chunk per write.
    bool open = co_await stream_head(stream, version, keep);
    auto write = [&](const std::string& s) -> asio::awaitable<bool> {
      if (!ec && !s.empty())
        co_await asio::async_write(stream, http::make_chunk(asio::buffer(s)),
                                   asio::redirect_error(asio::use_awaitable, ec));
      co_return !ec;
    };
    if (open)
      open = co_await write(answer.stream_start());
    if (!open) {
      k.cancel_open(); // the client went away: the requests are cancelled, their memory freed
      co_return false;
    }
    std::size_t finished = 0;
    for (;;) {
      // Everything the intake has sent by now goes out in one write.
      std::string out;
      bool end = false;
      auto r = co_await k.next_reply();
      for (;;) {
        if (!r) {
          out += answer.stream_error(stopping());
          end = true;
        } else {
          const auto i = k.index.at(reply_id(*r));
          if (auto* t = std::get_if<wire::token_reply>(&*r)) {
            out += answer.chunk(i, *t);
          } else if (auto* d = std::get_if<wire::done_reply>(&*r)) {
            k.ended[i] = 1;
            out += answer.choice_end(i, *d);
            if (++finished == k.n) {
              out += answer.stream_end();
              end = true;
              if (auto whole = answer.finished(); whole && as_response)
                keep_response(*as_response, resp_id, std::move(*whole));
            }
          } else if (auto* e = std::get_if<wire::error_reply>(&*r)) {
            k.ended[i] = 1;
            k.cancel_open();
            out += answer.stream_error(p.named(openai::from_wire(e->code, e->message)));
            end = true;
          }
        }
        if (end || (k.later.empty() && k.w->replies.empty()))
          break;
        r = co_await k.next_reply(); // at hand: does not wait
      }
      if (end) // the last events and the end of the body, in one write
        co_return co_await stream_last(stream, out, keep);
      if (!co_await write(out)) {
        k.cancel_open(); // the client went away
        co_return false;
      }
    }
  }

  // -- batches (OpenAI's Batch API) -------------------------------------------

  /// The generating API a path (a batch's endpoint) names.
  static std::optional<api> endpoint_api(std::string_view endpoint) {
    if (endpoint == "/v1/completions")
      return api::completions;
    if (endpoint == "/v1/chat/completions")
      return api::chat;
    if (endpoint == "/v1/responses")
      return api::responses;
    return std::nullopt;
  }

  /// Writes batch `id`'s state whole where the front keeps files.
  void persist_batch(const std::string& id, const openai::batch& b) {
    if (!write_batch)
      return;
    const auto bytes = write_batch(id, b);
    if (const auto it = batch_runs.find(id); it != batch_runs.end()) {
      it->second.state_bytes = bytes;
      it->second.log_bytes = 0;
    }
  }

  /// Line `i` of batch `id` answered (batch::answer's `error` and `text`):
  /// where the front keeps files, its record appended to the batch's log
  /// at once, so that a crash loses no answer. Once the log outgrows the
  /// state last written (and 1 MiB), the state is written whole and the log
  /// cleared: a batch's writes stay within a few times its size.
  void keep_batch_answer(const std::string& id, openai::batch& b, std::size_t i, bool error, std::string_view text) {
    if (!b.answer(i, error, text) || !log_batch)
      return;
    const auto record = openai::batch_log_record(i, error, text);
    log_batch(id, record);
    auto& run = batch_runs[id];
    run.log_bytes += record.size();
    if (kept_files::log_outgrows(run.state_bytes, run.log_bytes))
      persist_batch(id, b);
  }

  /// Batch `id` (made, or read back running) has its lines taken from now on.
  void run_batch(const std::string& id) {
    batch_runs.try_emplace(id);
    running_batches.push_back(id);
  }

  /// Takes batch lines while fewer than batch_concurrency run, the oldest
  /// batch's first; ends the batches with no line left to run.
  void pump_batches() {
    if (stopped)
      return;
    // (A line's coroutine may run to its end inside co_spawn, calling this
    // again: that call asks for another round rather than nesting.)
    if (pumping) {
      pump_again = true;
      return;
    }
    pumping = true;
    do {
      pump_again = false;
      pump_round();
    } while (pump_again && !stopped);
    pumping = false;
  }

  void pump_round() {
    const auto now = unix_now();
    const std::vector<std::string> order(running_batches.begin(), running_batches.end()); // (finish_batch drops from it)
    for (const auto& id : order) {
      auto* b = batches.find(id);
      auto& run = batch_runs[id];
      if (b->status == "in_progress" && now >= b->expires_at && !run.expiring) {
        run.expiring = true; // its lines in flight are cancelled: the rest expire
        for (const auto& wire_id : run.ids)
          cancel(wire_id);
      }
      const bool taking = b->status == "in_progress" && !run.expiring && !batches_held;
      while (taking && batch_lines_running < cfg.batch_concurrency && run.next < b->lines.size()) {
        const auto i = run.next++;
        if (b->finished[i])
          continue; // (its result was read back at start)
        ++run.running;
        ++batch_lines_running;
        asio::co_spawn(io, run_batch_line(id, i), asio::detached);
      }
      if (run.running == 0 && !batches_held && (!taking || run.next >= b->lines.size()))
        finish_batch(id, *b);
    }
  }

  /// Batch `id` has no line running and none to take: the lines it did not
  /// run are written as errors (batch_cancelled or batch_expired), its
  /// output and errors become files, and it ends.
  void finish_batch(const std::string& id, openai::batch& b) {
    const auto now = unix_now();
    const bool cancelling = b.status == "cancelling";
    const bool expiring = !cancelling && batch_runs[id].expiring;
    for (std::size_t i = 0; i < b.lines.size(); ++i)
      if (!b.finished[i] && (cancelling || expiring))
        b.answer(i, true,
                 openai::batch_error_line(fresh_id("batch_req"), b.lines[i].custom_id,
                                          cancelling ? "batch_cancelled" : "batch_expired",
                                          cancelling ? "the batch was cancelled before this request ran"
                                                     : "the batch's completion window (24h) passed before this request ran"));
    b.finalizing_at = now;
    if (!b.output.empty())
      b.output_file_id = files.add("batch_" + id + "_output.jsonl", "batch_output", std::move(b.output), now, fresh_id);
    if (!b.error_output.empty())
      b.error_file_id = files.add("batch_" + id + "_error.jsonl", "batch_output", std::move(b.error_output), now,
                                  fresh_id);
    if (cancelling) {
      b.status = "cancelled";
      b.cancelled_at = now;
    } else if (expiring) {
      b.status = "expired";
      b.expired_at = now;
    } else {
      b.status = "completed";
      b.completed_at = now;
    }
    b.lines = {};
    b.finished = {};
    b.output = {};
    b.error_output = {};
    batch_runs.erase(id);
    std::erase(running_batches, id);
    persist_batch(id, b);
  }

  /// Why a batch does not run a request it could run alone (none: it does).
  static std::optional<openai::api_error> batch_refusal(const prepared& p) {
    const char* what = p.c.stream                                ? "\"stream\": true"
                       : p.c.beam                                ? "\"use_beam_search\""
                       : p.as_response && p.as_response->background ? "\"background\": true"
                                                                    : nullptr;
    if (what == nullptr)
      return std::nullopt;
    return openai::bad_request(std::string("a batch's request cannot ask for ") + what
                                 + ": each is answered whole, into the batch's output file",
                               p.c.stream ? "stream" : p.c.beam ? "use_beam_search" : "background");
  }

  /// Runs line `i` of batch `id` as its endpoint's request would run, and
  /// writes its answer (or error) to the batch's output (or error) file.
  // (Not inlined into its caller: GCC 12 then takes the coroutine frame's
  // own operator delete for a mismatch with the new that made it.)
  [[gnu::noinline]] asio::awaitable<void> run_batch_line(std::string id, std::size_t i) {
    std::string custom_id;
    std::string body;
    api kind = api::completions;
    if (auto* b = batches.find(id)) {
      custom_id = b->lines[i].custom_id;
      body = openai::with_default_priority(b->lines[i].body, cfg.batch_priority);
      kind = endpoint_api(b->endpoint).value_or(api::completions);
    }
    std::variant<std::string, openai::api_error> out = openai::api_error{};
    std::string request_id;
    bool cut = false; // its requests were cancelled (the batch's cancel or window)
    const auto resp_id = kind == api::responses ? batch_line_response_id(id, i) : std::string{};
    std::optional<std::string> kept = kind == api::responses ? kept_line_answer(resp_id) : std::nullopt;
    try {
      std::variant<prepared, openai::api_error> made = openai::api_error{};
      if (!kept)
        made = co_await prepare(body, kind, resp_id);
      if (kept) {
        out = std::move(*kept); // answered by the run a crash cut short
        request_id = resp_id;
      } else if (auto* e = std::get_if<openai::api_error>(&made)) {
        out = std::move(*e);
      } else {
        const auto& p = std::get<prepared>(made);
        request_id = p.base;
        const auto* now = batches.find(id);
        if (now == nullptr || now->status == "cancelling" || batch_runs[id].expiring) {
          cut = true; // cancelled, or out of its window, while it was read: not run
        } else if (auto refused = batch_refusal(p)) {
          out = std::move(*refused);
        } else {
          call k(*this, p);
          auto answer = p.answer(kind, unix_now());
          auto& ids = batch_runs[id].ids;
          ids.insert(p.c.ids.begin(), p.c.ids.end());
          if (auto no = co_await k.start(answer))
            out = std::move(*no);
          else
            out = co_await whole(k, answer, &cut);
          for (const auto& wire_id : p.c.ids)
            batch_runs[id].ids.erase(wire_id);
        }
      }
    } catch (const std::exception& e) { // (none is known to throw: the line gets an answer all the same)
      spdlog::error("http: batch {} line {}: {}", id, i + 1, e.what());
      out = api_error_of(500, "server_error", "internal", "the request could not be run");
    }
    auto& run = batch_runs[id];
    --run.running;
    --batch_lines_running;
    auto* b = batches.find(id);
    const auto* e = std::get_if<openai::api_error>(&out);
    // Cut short by the stop: left to run again.
    const bool stopped_line = (stopped || batches_held) && (cut || (e != nullptr && e->code == stopping().code));
    if (b != nullptr && !stopped_line) {
      const auto line_id = fresh_id("batch_req");
      if (cut && (b->status == "cancelling" || run.expiring))
        keep_batch_answer(id, *b, i, true,
                          openai::batch_error_line(
                            line_id, custom_id, b->status == "cancelling" ? "batch_cancelled" : "batch_expired",
                            b->status == "cancelling"
                              ? "the batch was cancelled while this request ran"
                              : "the batch's completion window (24h) passed while this request ran"));
      else if (e != nullptr)
        keep_batch_answer(id, *b, i, true,
                          openai::batch_output_line(line_id, custom_id, e->status, request_id, openai::to_json(*e)));
      else
        keep_batch_answer(id, *b, i, false,
                          openai::batch_output_line(line_id, custom_id, 200, request_id, std::get<std::string>(out)));
    }
    pump_batches();
  }

  /// POST /v1/batches: the batch made from its input file (failed where a
  /// line is not one it can run), its lines taken as room allows.
  std::variant<std::string, openai::api_error> create_batch(std::string_view body) {
    auto asked = openai::parse_batch_create(body);
    if (auto* e = std::get_if<openai::api_error>(&asked))
      return std::move(*e);
    const auto& c = std::get<openai::batch_create>(asked);
    if (!cfg.chat && c.endpoint != "/v1/completions")
      return openai::bad_request("endpoint " + c.endpoint + " is not served here: " + cfg.no_chat, "endpoint");
    const auto* f = files.find(c.input_file_id);
    if (f == nullptr) {
      auto e = api_error_of(404, "invalid_request_error", "not_found",
                            "no file " + c.input_file_id + ": upload the batch's input with POST /v1/files first");
      e.param = "input_file_id";
      return e;
    }
    if (f->purpose != "batch")
      return openai::bad_request("file " + c.input_file_id + " has purpose \"" + f->purpose
                                   + "\": a batch's input is a file uploaded with purpose \"batch\"",
                                 "input_file_id");
    // The lines of running batches are held apart from the files they came
    // from: as many bytes of them as the file store holds, at most.
    std::size_t held = 0;
    for (const auto& other : running_batches)
      for (const auto& line : batches.find(other)->lines)
        held += line.body.size() + line.custom_id.size();
    if (held + f->content.size() > cfg.file_store_bytes)
      return api_error_of(429, "invalid_request_error", "batch_queue_full",
                          "the batches running hold " + std::to_string(held) + " bytes of requests; with this one's "
                            + std::to_string(f->content.size()) + " that would pass [http] file_store_mb ("
                            + std::to_string(cfg.file_store_bytes) + " bytes): create it once some have ended");
    const auto now = unix_now();
    openai::batch b;
    b.endpoint = c.endpoint;
    b.input_file_id = c.input_file_id;
    b.completion_window = c.completion_window;
    b.metadata = c.metadata;
    b.created_at = now;
    b.expires_at = now + 24 * 3600;
    auto lines = openai::read_batch_input(f->content, c.endpoint);
    if (auto* bad = std::get_if<std::vector<openai::batch_line_error>>(&lines)) {
      b.status = "failed";
      b.failed_at = now;
      b.errors = std::move(*bad);
    } else {
      b.lines = std::get<std::vector<openai::batch_line>>(std::move(lines));
      b.finished.assign(b.lines.size(), 0);
      b.total = b.lines.size();
      b.status = "in_progress";
      b.in_progress_at = now;
    }
    const auto id = fresh_id("batch");
    auto& kept = batches.put(id, std::move(b));
    if (kept.running())
      run_batch(id);
    persist_batch(id, kept);
    pump_batches();
    return openai::batch_json(id, *batches.find(id));
  }

  /// POST /v1/batches/ID/cancel: a running batch's lines in flight are
  /// cancelled, the rest not taken; it ends "cancelled" once none runs.
  /// One that ended is given as it is.
  std::variant<std::string, openai::api_error> cancel_batch(const std::string& id) {
    auto* b = batches.find(id);
    if (b == nullptr)
      return api_error_of(404, "invalid_request_error", "not_found", "no batch " + id);
    if (b->status == "in_progress") {
      b->status = "cancelling";
      b->cancelling_at = unix_now();
      for (const auto& wire_id : batch_runs[id].ids)
        cancel(wire_id);
      persist_batch(id, *b);
      pump_batches();
    }
    return openai::batch_json(id, *batches.find(id));
  }
};

http_front::http_front(std::unique_ptr<impl> p) : impl_(std::move(p)) {
}

http_front::~http_front() {
  stop();
}

std::variant<std::unique_ptr<http_front>, std::string> http_front::open(const http_front_config& cfg) {
  auto p = std::make_unique<impl>();
  p->cfg = cfg;
  p->stored = openai::response_store(cfg.response_store_bytes);
  p->conversations = openai::conversation_store(cfg.conversation_store_bytes);
  p->files = openai::file_store(cfg.file_store_bytes);
  if (!cfg.store_dir.empty())
    if (auto why = p->keep_on_disk(cfg.store_dir); !why.empty())
      return "http.store_dir: " + why;
  const auto colon = cfg.listen.rfind(':');
  if (colon == std::string::npos)
    return "http.listen \"" + cfg.listen + "\" is not \"host:port\"";
  boost::system::error_code ec;
  const auto host = cfg.listen.substr(0, colon);
  const auto address = asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  if (ec)
    return "http.listen \"" + cfg.listen + "\": \"" + host + "\" is not an IP address";
  const tcp::endpoint at{address, static_cast<unsigned short>(std::stoul(cfg.listen.substr(colon + 1)))};
  p->acceptor.open(at.protocol(), ec);
  if (!ec)
    p->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec)
    p->acceptor.bind(at, ec);
  if (!ec)
    p->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return "cannot listen for HTTP at " + cfg.listen + ": " + ec.message();
  const auto bound = p->acceptor.local_endpoint();
  p->endpoint = bound.address().to_string() + ":" + std::to_string(bound.port());

  p->ctx = zmq_ctx_new();
  p->socket = zmq_socket(p->ctx, ZMQ_DEALER);
  int zero = 0;
  int linger = 0;
  zmq_setsockopt(p->socket, ZMQ_SNDHWM, &zero, sizeof zero);
  zmq_setsockopt(p->socket, ZMQ_RCVHWM, &zero, sizeof zero);
  zmq_setsockopt(p->socket, ZMQ_LINGER, &linger, sizeof linger);
  if (zmq_connect(p->socket, cfg.intake.c_str()) != 0)
    return "the HTTP front cannot connect to the intake at " + cfg.intake + ": " + zmq_strerror(zmq_errno());
  int raw = -1;
  size_t len = sizeof raw;
  zmq_getsockopt(p->socket, ZMQ_FD, &raw, &len);
  p->fd.emplace(p->io, raw);
  asio::co_spawn(p->io, zmq_io::serve(*p->fd, p->stopped, [ip = p.get()] { ip->drain(); }, "http"), asio::detached);
  asio::co_spawn(p->io, p->accept_loop(), asio::detached);
  asio::post(p->io, [ip = p.get()] { ip->pump_batches(); }); // those read back from store_dir go on
  p->work.emplace(p->io.get_executor());
  auto* ip = p.get();
  p->thread = std::thread([ip] { ip->io.run(); });
  return std::unique_ptr<http_front>(new http_front(std::move(p)));
}

void http_front::stop() {
  auto& p = *impl_;
  if (!p.thread.joinable())
    return;
  asio::steady_timer grace(p.io);
  asio::post(p.io, [&p, &grace] {
    p.stopped = true;
    for (auto& [id, run] : p.batch_runs) // (lines still running are run again at the next start)
      if (auto* b = p.batches.find(id); b != nullptr && p.write_batch)
        p.write_batch(id, *b);
    boost::system::error_code ignored;
    p.acceptor.close(ignored);
    if (p.fd) {
      p.fd->cancel();
      p.fd->release(); // the descriptor belongs to ZeroMQ
    }
    // Whoever still waits for the intake is answered 503; a moment for those
    // answers to be written, then every connection is closed, so that every
    // coroutine ends and io.run() returns.
    for (auto& [id, w] : p.pending) {
      w->closed = true;
      w->wake.cancel();
    }
    grace.expires_after(std::chrono::milliseconds(200));
    grace.async_wait([&p](const boost::system::error_code&) {
      for (auto* c : p.connections)
        c->socket().close();
    });
    p.work.reset();
  });
  p.thread.join();
}

void http_front::cancel_background() {
  auto& p = *impl_;
  if (!p.thread.joinable())
    return;
  std::promise<void> done;
  asio::post(p.io, [&p, &done] {
    p.batches_held = true; // no line taken now; those in flight end as the drain lets them
    const auto e = stopping();
    for (auto& [id, job] : p.jobs)
      if (!job->cancelled && !job->deleted) {
        p.cancel(job->id);
        job->cancelled = true;
        job->shutting_down = true;
        p.keep_response(job->request, id, job->answer.snapshot("failed", &e));
      }
    done.set_value();
  });
  done.get_future().wait();
}

const std::string& http_front::endpoint() const noexcept {
  return impl_->endpoint;
}

} // namespace troupe
