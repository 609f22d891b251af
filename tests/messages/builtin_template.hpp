// A built-in chat template by name, for the tests of messages/ (a failure
// where the name makes none).
#pragma once

#include "messages/openai.hpp"

#include <gtest/gtest.h>

namespace troupe::openai::testing {

inline chat_template builtin(const char* name) {
  auto t = make_chat_template(name);
  if (auto* e = std::get_if<chat_template_error>(&t)) {
    ADD_FAILURE() << name << ": " << e->key << " " << e->what;
    return {};
  }
  return std::get<chat_template>(std::move(t));
}

} // namespace troupe::openai::testing
