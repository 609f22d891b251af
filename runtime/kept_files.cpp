#include "runtime/kept_files.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>

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

} // namespace

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

void kept_files::sync_dir() const {
  // The rename (or the removal) itself on the disk: the directory synced.
  const int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void kept_files::remove(const std::string& id) const {
  if (!valid_id(id))
    return;
  std::error_code ec;
  const bool gone = std::filesystem::remove(dir_ / (id + std::string(suffix)), ec);
  const bool log_gone = std::filesystem::remove(dir_ / (id + std::string(log_suffix)), ec);
  if ((gone || log_gone) && sync_)
    sync_dir();
}

bool kept_files::append(const std::string& id, std::string_view text, std::string& why) const {
  if (!valid_id(id)) {
    why = "not an id a file is named by: " + id.substr(0, 80);
    return false;
  }
  const auto path = dir_ / (id + std::string(log_suffix));
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    why = "cannot append to " + path.string() + ": " + std::strerror(errno);
    return false;
  }
  if (const int err = write_and_close(fd, text, sync_); err != 0) {
    why = "cannot append to " + path.string() + ": " + std::strerror(err);
    return false;
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
