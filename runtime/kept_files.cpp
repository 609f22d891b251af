#include "runtime/kept_files.hpp"

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <system_error>
#include <thread>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

namespace troupe {

namespace {

constexpr std::string_view suffix = ".json";
constexpr std::string_view log_suffix = ".log";

bool valid_id(std::string_view id) {
  return !id.empty() && id.size() <= 200 && std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

/// Writes all of `text` to `fd` (fsynced with `sync`) and closes it: 0, or
/// the errno of what failed.
int write_and_close(int fd, std::string_view text, bool sync) {
  int err = 0;
  for (std::size_t done = 0; err == 0 && done < text.size();) {
    const auto n = ::write(fd, text.data() + done, text.size() - done);
    if (n > 0)
      done += static_cast<std::size_t>(n);
    else if (n < 0 && errno != EINTR)
      err = errno;
  }
  if (err == 0 && sync && ::fsync(fd) != 0)
    err = errno;
  if (::close(fd) != 0 && err == 0)
    err = errno;
  return err;
}

void sync_directory(const std::filesystem::path& dir) {
  // A rename, creation or removal in it on the disk: the directory synced.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

} // namespace

/// Flushes appended logs on a thread of its own: each round takes every
/// log appended to since the round before and fsyncs it once (and the
/// directory where one was new), so that appends that come while a flush
/// is under way share the next.
class kept_files::log_flusher {
public:
  explicit log_flusher(std::filesystem::path dir) : dir_(std::move(dir)) {}
  log_flusher(const log_flusher&) = delete;
  log_flusher& operator=(const log_flusher&) = delete;
  ~log_flusher() {
    {
      std::lock_guard lock{mutex_};
      stop_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable())
      thread_.join(); // after a last round for what is pending
  }

  void appended(std::filesystem::path log, bool created) {
    {
      std::lock_guard lock{mutex_};
      if (!thread_.joinable()) // started by the first append: a directory without logs has none
        thread_ = std::thread([this] { run(); });
      pending_.insert(std::move(log));
      new_entry_ = new_entry_ || created;
      ++appended_;
    }
    wake_.notify_all();
  }

  void flush() {
    std::unique_lock lock{mutex_};
    const auto want = appended_;
    wake_.wait(lock, [&] { return flushed_ >= want; });
  }

  void hold(bool held) {
    {
      std::lock_guard lock{mutex_};
      held_ = held;
    }
    wake_.notify_all();
  }

  std::uint64_t rounds() {
    std::lock_guard lock{mutex_};
    return rounds_;
  }

  /// The first flush failure since the last call ("" for none).
  std::string take_error() {
    std::lock_guard lock{mutex_};
    return std::exchange(error_, {});
  }

private:
  void run() {
    std::unique_lock lock{mutex_};
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || (!held_ && !pending_.empty()); });
      if (pending_.empty()) // (stopping)
        return;
      const auto logs = std::exchange(pending_, {});
      const bool new_entry = std::exchange(new_entry_, false);
      const auto upto = appended_;
      lock.unlock();
      std::string failed;
      for (const auto& log : logs) {
        // fsync flushes the file's data whichever descriptor wrote it; a
        // log removed meanwhile (its records in its file now) is passed over.
        const int fd = ::open(log.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0)
          continue;
        if (::fsync(fd) != 0 && failed.empty())
          failed = "cannot flush " + log.string() + ": " + std::strerror(errno);
        ::close(fd);
      }
      if (new_entry)
        sync_directory(dir_);
      lock.lock();
      if (error_.empty())
        error_ = std::move(failed);
      flushed_ = upto;
      ++rounds_;
      wake_.notify_all();
    }
  }

  const std::filesystem::path dir_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::set<std::filesystem::path> pending_;
  bool new_entry_ = false;
  bool held_ = false;
  bool stop_ = false;
  std::uint64_t appended_ = 0, flushed_ = 0, rounds_ = 0;
  std::string error_;
  std::thread thread_;
};

kept_files::kept_files(std::filesystem::path dir, bool sync)
  : dir_(std::move(dir)), sync_(sync), flusher_(sync ? std::make_shared<log_flusher>(dir_) : nullptr) {}

void kept_files::flush_logs() const {
  if (flusher_)
    flusher_->flush();
}

std::uint64_t kept_files::log_flushes() const { return flusher_ ? flusher_->rounds() : 0; }

void kept_files::hold_log_flushes(bool held) const {
  if (flusher_)
    flusher_->hold(held);
}

std::variant<kept_files, std::string> kept_files::open(std::filesystem::path dir, bool sync) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return "cannot make the directory " + dir.string() + ": " + ec.message();
  if (!std::filesystem::is_directory(dir, ec))
    return dir.string() + " is not a directory";
  // Temporaries a crash left behind, never renamed, and logs whose file a
  // crash removed before them: not kept.
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const auto name = it->path().filename().string();
    auto own = it->path();
    own.replace_extension(suffix);
    std::error_code ignored;
    if (name.ends_with(std::string(suffix) + ".tmp")
        || (name.ends_with(log_suffix) && !std::filesystem::exists(own, ignored)))
      std::filesystem::remove(it->path(), ignored);
  }
  ec.clear();
  kept_files files(std::move(dir), sync);
  std::string why;
  if (!files.write("write-check", "{}", why))
    return why;
  files.remove("write-check");
  return files;
}

bool kept_files::write(const std::string& id, std::string_view text, std::string& why) const {
  if (!valid_id(id)) {
    why = "not an id a file is named by: " + id.substr(0, 80);
    return false;
  }
  const auto path = dir_ / (id + std::string(suffix));
  auto temp = path;
  temp += ".tmp";
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    why = "cannot write " + temp.string() + ": " + std::strerror(errno);
    return false;
  }
  // With sync, the bytes are on the disk before the name points at them.
  if (const int err = write_and_close(fd, text, sync_); err != 0) {
    why = "cannot write " + temp.string() + ": " + std::strerror(err);
    std::error_code ignored;
    std::filesystem::remove(temp, ignored);
    return false;
  }
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  if (ec) {
    why = "cannot rename " + temp.string() + " to " + path.string() + ": " + ec.message();
    std::filesystem::remove(temp, ec);
    return false;
  }
  if (sync_)
    sync_dir();
  return true;
}

void kept_files::sync_dir() const { sync_directory(dir_); }

void kept_files::remove(const std::string& id) const {
  if (!valid_id(id))
    return;
  std::error_code ec;
  const bool gone = std::filesystem::remove(dir_ / (id + std::string(suffix)), ec);
  const bool log_gone = std::filesystem::remove(dir_ / (id + std::string(log_suffix)), ec);
  if ((gone || log_gone) && sync_)
    sync_dir();
}

bool kept_files::append(const std::string& id, std::string_view text, std::string& why, bool now) const {
  if (!valid_id(id)) {
    why = "not an id a file is named by: " + id.substr(0, 80);
    return false;
  }
  const auto path = dir_ / (id + std::string(log_suffix));
  // (Whether it is new matters only to a flush: its directory is synced too.)
  std::error_code ec;
  const bool created = sync_ && !std::filesystem::exists(path, ec);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    why = "cannot append to " + path.string() + ": " + std::strerror(errno);
    return false;
  }
  const bool sync_now = sync_ && now;
  if (const int err = write_and_close(fd, text, sync_now); err != 0) {
    why = "cannot append to " + path.string() + ": " + std::strerror(err);
    return false;
  }
  if (sync_now) {
    if (created)
      sync_dir();
  } else if (flusher_) {
    flusher_->appended(path, created);
    if (auto failed = flusher_->take_error(); !failed.empty()) {
      why = "an earlier record was not flushed to the disk: " + failed;
      return false;
    }
  }
  return true;
}

std::string kept_files::read_log(const std::string& id) const {
  if (!valid_id(id))
    return {};
  std::ifstream in(dir_ / (id + std::string(log_suffix)), std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return in ? text.str() : std::string{};
}

void kept_files::remove_log(const std::string& id) const {
  if (!valid_id(id))
    return;
  std::error_code ec;
  if (std::filesystem::remove(dir_ / (id + std::string(log_suffix)), ec) && sync_)
    sync_dir();
}

std::vector<std::pair<std::string, std::string>> kept_files::read_all() const {
  struct found {
    std::filesystem::file_time_type when;
    std::string id;
    std::filesystem::path path;
  };
  std::vector<found> files;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const auto name = it->path().filename().string();
    if (!name.ends_with(suffix) || !it->is_regular_file(ec))
      continue;
    const auto id = name.substr(0, name.size() - suffix.size());
    if (!valid_id(id))
      continue;
    const auto when = it->last_write_time(ec);
    if (!ec)
      files.push_back({when, id, it->path()});
  }
  std::sort(files.begin(), files.end(),
            [](const found& a, const found& b) { return a.when != b.when ? a.when < b.when : a.id < b.id; });
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& f : files) {
    std::ifstream in(f.path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (in)
      out.emplace_back(f.id, text.str());
  }
  return out;
}

} // namespace troupe
