// A vocabulary given as its tokens' strings, for tests of what depends on
// the bytes tokens stand for (JSON output, stop strings).
#pragma once

#include "gpu/backend.hpp"

#include <map>
#include <string>
#include <vector>

namespace troupe::testing {

/// Token t decodes to tokens[t]; token 0 should be "" (the end-of-sequence
/// token, standing for no text). Encoding is not needed by these tests.
/// `specials`: the own texts of tokens that stand for no text.
struct list_tokenizer final : gpu::tokenizer {
  explicit list_tokenizer(std::vector<std::string> t, std::map<std::int32_t, std::string> s = {})
    : tokens(std::move(t)), specials(std::move(s)) {}
  std::vector<std::int32_t> encode(const std::string&) const override { return {}; }
  std::string decode(std::int32_t t) const override {
    return t >= 0 && t < vocab_size() ? tokens[static_cast<std::size_t>(t)] : "";
  }
  std::string special_text(std::int32_t t) const override {
    const auto it = specials.find(t);
    return it == specials.end() ? std::string() : it->second;
  }
  std::int32_t vocab_size() const override { return static_cast<std::int32_t>(tokens.size()); }
  std::int32_t eos_token() const override { return 0; }
  std::vector<std::string> tokens;
  std::map<std::int32_t, std::string> specials;
};

} // namespace troupe::testing
