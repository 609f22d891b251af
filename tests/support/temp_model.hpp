// Test support: a random Llama (and PEFT adapters) written by troupe-mkmodel
// into a fresh temporary directory, removed when the object goes. Needs
// TROUPE_MKMODEL_PATH (set by the gpu tests' CMake target).
#pragma once

#include "tests/support/temp_dir.hpp"

#include <cstdlib>
#include <string>

#ifndef TROUPE_MKMODEL_PATH
#define TROUPE_MKMODEL_PATH ""
#endif

namespace troupe::testing {

class temp_model {
public:
  /// Runs troupe-mkmodel with `args` (e.g. "--hidden 64 --adapters 2");
  /// dir() is empty when that failed.
  explicit temp_model(const std::string& args) {
    if (tmp_.dir().empty())
      return;
    const std::string cmd =
      std::string{"'"} + TROUPE_MKMODEL_PATH + "' --out '" + tmp_.path() + "' " + args + " >/dev/null";
    if (std::system(cmd.c_str()) == 0)
      dir_ = tmp_.path();
  }

  const std::string& dir() const noexcept { return dir_; }

private:
  temp_dir tmp_{"troupe_model"};
  std::string dir_; ///< tmp_'s path once troupe-mkmodel wrote the model there
};

} // namespace troupe::testing
