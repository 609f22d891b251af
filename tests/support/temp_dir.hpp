// Test support: a fresh directory under the system's temporary one,
// removed with everything in it when the object goes.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace troupe::testing {

class temp_dir {
public:
  /// "<prefix>_XXXXXX" made unique by mkdtemp; dir() is empty when that
  /// failed (whatever is read from it then fails too).
  explicit temp_dir(const std::string& prefix) {
    std::string templ = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    if (mkdtemp(templ.data()) != nullptr)
      dir_ = templ;
  }
  ~temp_dir() {
    std::error_code ec;
    if (!dir_.empty())
      std::filesystem::remove_all(dir_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  const std::filesystem::path& dir() const noexcept { return dir_; }
  std::string path() const { return dir_.string(); }

private:
  std::filesystem::path dir_;
};

} // namespace troupe::testing
