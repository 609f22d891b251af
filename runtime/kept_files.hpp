// A directory of small files, one per id: what the HTTP front keeps in
// memory (responses, conversations) written through to disk, so that a
// restart finds it again. Each file is written whole or not at all (a
// temporary renamed over it); files are read back oldest first. An id may
// also have a log, appended to between whole writes.
#pragma once

#include <filesystem>
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
  /// file, then of the directory) before it returns.
  static std::variant<kept_files, std::string> open(std::filesystem::path dir, bool sync = false);

  /// Writes `text` as the file of `id` (letters, digits, '_' and '-' only:
  /// ids the front made). False, with `why` set, where it could not.
  bool write(const std::string& id, std::string_view text, std::string& why) const;
  /// Removes the file of `id`, where there is one, and its log.
  void remove(const std::string& id) const;

  /// Appends `text` to the log of `id` (a file beside its own, for what
  /// changes a little at a time: a record per change, rather than the
  /// whole rewritten). False, with `why` set, where it could not; a crash
  /// may cut the last record short. With sync, on the disk before it
  /// returns. A log whose file is gone is removed at the next open.
  bool append(const std::string& id, std::string_view text, std::string& why) const;
  /// The log of `id` ("" where it has none).
  std::string read_log(const std::string& id) const;
  /// Removes the log of `id` (its records now in its file).
  void remove_log(const std::string& id) const;
  /// Every file's id and text, the least recently written first; files
  /// that cannot be read, and temporaries a stop left, are passed over.
  std::vector<std::pair<std::string, std::string>> read_all() const;

  const std::filesystem::path& dir() const noexcept { return dir_; }

private:
  kept_files(std::filesystem::path dir, bool sync) : dir_(std::move(dir)), sync_(sync) {}
  void sync_dir() const;
  std::filesystem::path dir_;
  bool sync_ = false;
};

} // namespace troupe
