// The text of JSON values as the schema's compiler and machine compare
// them (a string by the characters it writes, escapes read; a number by its
// exact value), UTF-8 out of code points, the arithmetic of decimals scaled
// by 1e18, and the words of schema documents. Shared by
// runtime/json_schema.cpp (the compiler), runtime/schema_machine.cpp (the
// machine) and runtime/json_schema_merge.cpp; not for other callers. No
// CAF, no I/O.
#pragma once

#include "runtime/json_schema.hpp"

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

namespace troupe::json_text {

using scaled_decimal = json_schema::scaled_decimal;

/// 10 to the power `k` (k >= 0).
inline scaled_decimal pow10(int k) {
  scaled_decimal p = 1;
  while (k-- > 0)
    p *= 10;
  return p;
}

/// The greatest common divisor of `a` and `b`.
inline scaled_decimal gcd(scaled_decimal a, scaled_decimal b) {
  while (b != 0)
    a = std::exchange(b, a % b);
  return a;
}

/// Appends code point `cp` to `out` in UTF-8.
void put_utf8(std::string& out, char32_t cp);
/// A JSON string's content (between its quotes) as the characters it
/// writes, in UTF-8, up to its last whole character; `whole`: the bytes of
/// `raw` those take (the rest begins a character). `raw` is as json_machine
/// takes it: well-formed, a high surrogate's escape followed by a low one's.
std::string decoded(std::string_view raw, std::size_t& whole);

/// A JSON number's text as its sign, its digits (leading zeros dropped)
/// and the exponent that makes them its value: digits * 10^exponent.
struct decimal {
  bool negative = false;
  std::string digits;
  long exponent = 0;
};

decimal decimal_of(std::string_view text);
/// A JSON number's value as text two numbers share exactly when they are
/// equal: 1, 1.0, 10e-1 and 0.1e1 alike, -0 as 0.
std::string number_value(std::string_view text);
/// An item's value (a scalar's JSON text as written) as text two items
/// share exactly when they are equal as JSON values: a string by the
/// characters it writes ("a" and "\u0061" alike), a number by its value.
/// Kinds never share one: "s..." a string, "#..." a number, true, false
/// and null as they are.
std::string item_value(std::string_view raw);

/// The character a JSON escape "\\c" writes (c not 'u'), or -1 where
/// "\\c" is no escape.
int escaped(unsigned char c) noexcept;

/// `name` as a JSON pointer's reference token ("~" and "/" escaped).
std::string pointer_token(std::string_view name);
/// A keyword the compiler reads past: an annotation (title, description,
/// ...), or where schemas are kept ($defs, definitions).
bool is_annotation(std::string_view keyword);

} // namespace troupe::json_text
