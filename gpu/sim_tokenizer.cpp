#include "gpu/sim_tokenizer.hpp"

#include <algorithm>
#include <limits>
#include <string_view>

namespace troupe::gpu {

namespace {

// splitmix64 finalizer: spreads consecutive ids over all 64 bits.
std::uint64_t mix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

constexpr std::string_view consonants = "bdfgklmnprstvz";
constexpr std::string_view vowels = "aeiou";

} // namespace

sim_tokenizer::sim_tokenizer(std::uint32_t vocab_size)
  : vocab_size_(static_cast<std::int32_t>(
      std::clamp<std::uint32_t>(vocab_size, first_word_token + 1,
                                std::numeric_limits<std::int32_t>::max()))) {}

std::vector<std::int32_t> sim_tokenizer::encode(const std::string& text) const {
  std::vector<std::int32_t> ids;
  ids.reserve(text.size());
  for (const char c : text)
    ids.push_back(first_byte_token + static_cast<unsigned char>(c));
  return ids;
}

std::string sim_tokenizer::special_text(std::int32_t token) const {
  switch (token) {
  case pad_token:
    return "<pad>";
  case bos_token:
    return "<s>";
  case end_token:
    return "</s>";
  default:
    return {};
  }
}

std::string sim_tokenizer::decode(std::int32_t token) const {
  if (token < first_byte_token || token >= vocab_size_)
    return {};
  if (token < first_word_token)
    return std::string(1, static_cast<char>(token - first_byte_token));
  // One to three consonant-vowel syllables, all drawn from the id's hash.
  std::uint64_t h = mix64(static_cast<std::uint64_t>(token));
  const auto syllables = 1 + h % 3;
  h /= 3;
  std::string word = " ";
  for (std::uint64_t i = 0; i < syllables; ++i) {
    word += consonants[h % consonants.size()];
    h /= consonants.size();
    word += vowels[h % vowels.size()];
    h /= vowels.size();
  }
  return word;
}

} // namespace troupe::gpu
