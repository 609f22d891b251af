// A directory of small files, one per id: what the HTTP front keeps in
// memory (responses, conversations) written through to disk, so that a
// restart finds it again. Each file is written whole or not at all (a
// temporary renamed over it); files are read back oldest first. An id may
// also have a log, appended to between whole writes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace troupe {

class kept_files {
public:
  /// The directory `dir`, made where it is missing (temporaries a crash
  /// left in it removed); an error naming it and saying why where it cannot
  /// be made or written.
  /// With `sync`, each write and removal reaches the disk (fsync of the
  /// file, then of the directory) before it returns; appends are flushed
  /// in the background (append).
  static std::variant<kept_files, std::string> open(std::filesystem::path dir, bool sync = false);

  /// Writes `text` as the file of `id` (letters, digits, '_' and '-' only:
  /// ids the front made). False, with `why` set, where it could not.
  bool write(const std::string& id, std::string_view text, std::string& why) const;
  /// Removes the file of `id`, where there is one, and its log.
  void remove(const std::string& id) const;

  /// Appends `text` to the log of `id` (a file beside its own, for what
  /// changes a little at a time: a record per change, rather than the
  /// whole rewritten). False, with `why` set, where it could not (or, with
  /// sync, where an earlier append's flush failed); a crash may cut the
  /// last record short. A log whose file is gone is removed at the next
  /// open.
  /// With sync, the record is written at once and flushed to the disk by a
  /// thread of the directory's own, together with every record appended
  /// while the flush before was under way (group commit): the caller never
  /// waits for the disk, and a crash of the machine loses at most the
  /// records of the flush under way and those after it. With sync and
  /// `now`, on the disk before it returns instead.
  bool append(const std::string& id, std::string_view text, std::string& why, bool now = false) const;
  /// With sync: returns once every record appended before the call is on
  /// the disk (not while log flushes are held). Without: at once.
  void flush_logs() const;
  /// With sync: the log flushes done so far, each one fsync per log
  /// touched since the one before (0 without sync).
  std::uint64_t log_flushes() const;
  /// With sync, for tests: while held, appends queue up unflushed.
  void hold_log_flushes(bool held) const;
  /// Whether a log of `log_bytes` beside a file of `file_bytes` has
  /// outgrown it (and 1 MiB), so that the file is best written whole again
  /// and the log cleared: the one rule of the logs' callers.
  static bool log_outgrows(std::size_t file_bytes, std::size_t log_bytes) noexcept {
    return log_bytes > std::max<std::size_t>(file_bytes, std::size_t{1} << 20);
  }
  /// The log of `id` ("" where it has none).
  std::string read_log(const std::string& id) const;
  /// Removes the log of `id` (its records now in its file).
  void remove_log(const std::string& id) const;
  /// Every file's id and text, the least recently written first; files
  /// that cannot be read, and temporaries a stop left, are passed over.
  std::vector<std::pair<std::string, std::string>> read_all() const;

  const std::filesystem::path& dir() const noexcept { return dir_; }

private:
  class log_flusher;
  kept_files(std::filesystem::path dir, bool sync);
  void sync_dir() const;
  std::filesystem::path dir_;
  bool sync_ = false;
  /// With sync: the thread that flushes appends (shared by copies).
  std::shared_ptr<log_flusher> flusher_;
};

} // namespace troupe
