// UTF-8 to code points, for std::wregex as an oracle of the regular
// expressions Troupe reads (the tests' texts are well formed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace troupe::testing {

inline std::wstring wide(std::string_view s) {
  std::wstring out;
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
    std::uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (std::size_t k = 1; k < n && i + k < s.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(static_cast<wchar_t>(cp));
    i += n;
  }
  return out;
}

} // namespace troupe::testing
