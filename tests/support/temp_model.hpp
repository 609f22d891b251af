// Test support: a random Llama (and PEFT adapters) written by troupe-mkmodel
// into a fresh temporary directory, removed when the object goes. Needs
// TROUPE_MKMODEL_PATH (set by the gpu tests' CMake target).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#ifndef TROUPE_MKMODEL_PATH
#define TROUPE_MKMODEL_PATH ""
#endif

namespace troupe::testing {

class temp_model {
public:
  /// Runs troupe-mkmodel with `args` (e.g. "--hidden 64 --adapters 2");
  /// dir() is empty when that failed.
  explicit temp_model(const std::string& args) {
    std::string templ = (std::filesystem::temp_directory_path() / "troupe_model_XXXXXX").string();
    if (mkdtemp(templ.data()) == nullptr)
      return;
    const std::string cmd = std::string{"'"} + TROUPE_MKMODEL_PATH + "' --out '" + templ + "' " + args + " >/dev/null";
    if (std::system(cmd.c_str()) == 0)
      dir_ = templ;
    else
      std::filesystem::remove_all(templ);
  }
  ~temp_model() {
    std::error_code ec;
    if (!dir_.empty())
      std::filesystem::remove_all(dir_, ec);
  }
  temp_model(const temp_model&) = delete;
  temp_model& operator=(const temp_model&) = delete;

  const std::string& dir() const noexcept { return dir_; }

private:
  std::string dir_;
};

} // namespace troupe::testing
