#include "messages/jinja.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <functional>
#include <map>
#include <optional>
#include <type_traits>
#include <variant>
#include <vector>

namespace troupe::jinja {
namespace {

using ojson = nlohmann::ordered_json;

[[noreturn]] void fail(int line, const std::string& what) {
  throw error("chat template line " + std::to_string(line) + ": " + what);
}

// ---------------------------------------------------------------- values

struct value;
struct undefined_t {
  std::string hint; ///< why it is undefined: "'x' is undefined"
};
struct none_t {};
struct list_t;
using list_ptr = std::shared_ptr<list_t>;
struct dict_t;
using dict_ptr = std::shared_ptr<dict_t>;
struct callable_t;
using callable_ptr = std::shared_ptr<const callable_t>;

using value_variant =
  std::variant<undefined_t, none_t, bool, std::int64_t, double, std::string, list_ptr, dict_ptr, callable_ptr>;

struct value {
  value_variant v;

  value() : v(undefined_t{}) {}
  template <class T>
    requires std::is_constructible_v<value_variant, T> && (!std::is_same_v<std::decay_t<T>, const char*>)
  value(T x) : v(std::move(x)) {}
  value(int x) : v(std::int64_t{x}) {}
  value(std::size_t x) : v(static_cast<std::int64_t>(x)) {}
  value(const char* s) : v(std::string(s)) {}

  bool is_undefined() const { return std::holds_alternative<undefined_t>(v); }
  bool is_none() const { return std::holds_alternative<none_t>(v); }
  bool is_bool() const { return std::holds_alternative<bool>(v); }
  bool is_int() const { return std::holds_alternative<std::int64_t>(v); }
  bool is_real() const { return std::holds_alternative<double>(v); }
  bool is_number() const { return is_int() || is_real() || is_bool(); }
  bool is_string() const { return std::holds_alternative<std::string>(v); }
  bool is_list() const { return std::holds_alternative<list_ptr>(v); }
  bool is_dict() const { return std::holds_alternative<dict_ptr>(v); }
  bool is_callable() const { return std::holds_alternative<callable_ptr>(v); }
  const std::string& str() const { return std::get<std::string>(v); }
  const list_ptr& list() const { return std::get<list_ptr>(v); }
  const dict_ptr& dict() const { return std::get<dict_ptr>(v); }
};

/// A list, or a tuple (Python's text of it differs: (1, 2)).
struct list_t : std::vector<value> {
  using std::vector<value>::vector;
  explicit list_t(std::vector<value> xs, bool is_tuple = false) : std::vector<value>(std::move(xs)), tuple(is_tuple) {}
  bool tuple = false;
};

struct dict_t {
  std::vector<std::pair<std::string, value>> items;
  bool is_namespace = false; ///< namespace(): its attributes may be set
  bool is_loop = false;      ///< a for loop's `loop`

  const value* find(std::string_view key) const {
    for (const auto& [k, v] : items)
      if (k == key)
        return &v;
    return nullptr;
  }
  void set(const std::string& key, value v) {
    for (auto& [k, old] : items)
      if (k == key) {
        old = std::move(v);
        return;
      }
    items.emplace_back(key, std::move(v));
  }
};

struct call_args {
  std::vector<value> positional;
  std::vector<std::pair<std::string, value>> named;
};

struct callable_t {
  std::string name;
  std::function<value(call_args&, int line)> fn;
};

value make_list(std::vector<value> xs = {}) { return value(std::make_shared<list_t>(std::move(xs))); }
value make_tuple(std::vector<value> xs) { return value(std::make_shared<list_t>(std::move(xs), true)); }

/// Values nest at most this deep (the variables, and the template's
/// expressions and blocks).
constexpr int max_nesting = 256;

value from_json(const ojson& j, int depth = 0) {
  if (depth > max_nesting)
    throw error("chat template: a variable nests deeper than " + std::to_string(max_nesting) + " levels");
  switch (j.type()) {
  case ojson::value_t::null: return value(none_t{});
  case ojson::value_t::boolean: return value(j.get<bool>());
  case ojson::value_t::number_integer: return value(j.get<std::int64_t>());
  case ojson::value_t::number_unsigned: {
    const auto u = j.get<std::uint64_t>();
    return u <= static_cast<std::uint64_t>(INT64_MAX) ? value(static_cast<std::int64_t>(u)) : value(static_cast<double>(u));
  }
  case ojson::value_t::number_float: return value(j.get<double>());
  case ojson::value_t::string: return value(j.get<std::string>());
  case ojson::value_t::array: {
    std::vector<value> xs;
    xs.reserve(j.size());
    for (const auto& x : j)
      xs.push_back(from_json(x, depth + 1));
    return make_list(std::move(xs));
  }
  case ojson::value_t::object: {
    auto d = std::make_shared<dict_t>();
    for (const auto& [k, x] : j.items())
      d->items.emplace_back(k, from_json(x, depth + 1));
    return value(d);
  }
  default: return value(none_t{});
  }
}

// ---------------------------------------------------------------- UTF-8

/// The code points of `s` (bytes that are not UTF-8 are one each).
std::vector<std::size_t> char_starts(std::string_view s) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < s.size();) {
    out.push_back(i);
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + n > s.size())
      n = 1;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80)
        n = 1;
    i += n;
  }
  return out;
}

std::size_t char_count(std::string_view s) { return char_starts(s).size(); }

std::uint32_t decode_at(std::string_view s, std::size_t i, std::size_t& n) {
  const auto c = static_cast<unsigned char>(s[i]);
  n = 1;
  if (c < 0x80)
    return c;
  std::size_t len = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (len == 1 || i + len > s.size())
    return c;
  std::uint32_t cp = c & (0x7F >> len);
  for (std::size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80)
      return c;
    cp = (cp << 6) | (b & 0x3F);
  }
  n = len;
  return cp;
}

/// Python's str.isspace, for strip() and split().
bool py_space(std::uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680
         || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F
         || cp == 0x3000;
}

/// `s` stripped of Python whitespace (or of the characters in `chars`) at
/// the ends asked for.
std::string py_strip(std::string_view s, bool left, bool right, const std::optional<std::string>& chars = {}) {
  const auto starts = char_starts(s);
  std::vector<std::uint32_t> set;
  if (chars) {
    for (std::size_t i = 0; i < chars->size();) {
      std::size_t n = 0;
      set.push_back(decode_at(*chars, i, n));
      i += n;
    }
  }
  const auto strips = [&](std::size_t k) {
    std::size_t n = 0;
    const auto cp = decode_at(s, starts[k], n);
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : py_space(cp);
  };
  std::size_t b = 0, e = starts.size();
  if (left)
    while (b < e && strips(b))
      ++b;
  if (right)
    while (e > b && strips(e - 1))
      --e;
  const auto from = b < starts.size() ? starts[b] : s.size();
  const auto to = e < starts.size() ? starts[e] : s.size();
  return std::string(s.substr(from, to - from));
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

/// Python's case mapping for the scripts chat templates meet most (ASCII,
/// Latin-1, Latin Extended-A, Greek, Cyrillic); other characters are kept.
std::uint32_t case_of(std::uint32_t c, bool upper) {
  if (c < 0x80)
    return static_cast<std::uint32_t>(upper ? std::toupper(static_cast<int>(c)) : std::tolower(static_cast<int>(c)));
  if (upper) {
    if ((c >= 0xE0 && c <= 0xFE && c != 0xF7) || (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) || (c >= 0x430 && c <= 0x44F))
      return c - 0x20;
    if (c == 0x3C2)
      return 0x3A3;
    if (c == 0xFF)
      return 0x178;
    if (c >= 0x450 && c <= 0x45F)
      return c - 0x50;
  } else {
    if ((c >= 0xC0 && c <= 0xDE && c != 0xD7) || (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) || (c >= 0x410 && c <= 0x42F))
      return c + 0x20;
    if (c == 0x178)
      return 0xFF;
    if (c >= 0x400 && c <= 0x40F)
      return c + 0x50;
  }
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17F) {
    // Pairs: even upper, odd lower, except 0x139-0x148 and 0x179-0x17E.
    const bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    const bool is_upper = ((c & 1) == 1) == odd_upper;
    if (upper && !is_upper)
      return c - 1;
    if (!upper && is_upper)
      return c + 1;
  }
  return c;
}

bool cased(std::uint32_t c) { return case_of(c, true) != c || case_of(c, false) != c; }

/// Each code point of `s` through `f(cp, index)`; bytes that are not UTF-8
/// kept as they are.
template <class F>
std::string map_chars(const std::string& s, F f) {
  std::string out;
  out.reserve(s.size());
  std::size_t k = 0;
  for (std::size_t i = 0; i < s.size(); ++k) {
    std::size_t n = 0;
    const auto cp = decode_at(s, i, n);
    if (n == 1 && cp >= 0x80)
      out += s[i];
    else
      append_utf8(out, f(cp, k));
    i += n;
  }
  return out;
}

std::string change_case(const std::string& s, bool upper) {
  return map_chars(s, [upper](std::uint32_t cp, std::size_t) { return case_of(cp, upper); });
}

// ---------------------------------------------------------------- Python's text of values

std::string float_repr(double d) {
  if (std::isnan(d))
    return "nan";
  if (std::isinf(d))
    return d > 0 ? "inf" : "-inf";
  if (d == 0)
    return std::signbit(d) ? "-0.0" : "0.0";
  // The shortest digits that read back, then Python's layout: positional
  // for exponents from -5 to 15, else d.ddde+XX.
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const auto e_at = sci.find('e');
  std::string mant = sci.substr(0, e_at);
  const int exp = std::stoi(sci.substr(e_at + 1));
  const bool neg = mant[0] == '-';
  if (neg)
    mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.')
      digits += c;
  std::string out;
  if (exp >= 16 || exp < -4) {
    out = digits.substr(0, 1);
    if (digits.size() > 1)
      out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  } else if (exp < 0) {
    out = "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
  } else {
    const auto point = static_cast<std::size_t>(exp + 1);
    if (digits.size() <= point)
      out = digits + std::string(point - digits.size(), '0') + ".0";
    else
      out = digits.substr(0, point) + "." + digits.substr(point);
  }
  return neg ? "-" + out : out;
}

std::string py_repr(const value& x);

std::string py_str(const value& x) {
  return std::visit(
    [&](const auto& a) -> std::string {
      using T = std::decay_t<decltype(a)>;
      if constexpr (std::is_same_v<T, undefined_t>)
        return "";
      else if constexpr (std::is_same_v<T, none_t>)
        return "None";
      else if constexpr (std::is_same_v<T, bool>)
        return a ? "True" : "False";
      else if constexpr (std::is_same_v<T, std::int64_t>)
        return std::to_string(a);
      else if constexpr (std::is_same_v<T, double>)
        return float_repr(a);
      else if constexpr (std::is_same_v<T, std::string>)
        return a;
      else
        return py_repr(x);
    },
    x.v);
}

std::string string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == q || c == '\\')
      out += std::string("\\") + c;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (u < 0x20 || u == 0x7F) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", u);
      out += b;
    } else
      out += c;
  }
  return out + q;
}

std::string py_repr(const value& x) {
  if (x.is_string())
    return string_repr(x.str());
  if (x.is_list()) {
    const bool t = x.list()->tuple;
    std::string out = t ? "(" : "[";
    for (std::size_t i = 0; i < x.list()->size(); ++i)
      out += (i ? ", " : "") + py_repr((*x.list())[i]);
    return out + (t ? (x.list()->size() == 1 ? ",)" : ")") : "]");
  }
  if (x.is_dict()) {
    if (x.dict()->is_namespace)
      return "<Namespace>";
    std::string out = "{";
    bool first = true;
    for (const auto& [k, v] : x.dict()->items) {
      out += (first ? "" : ", ") + string_repr(k) + ": " + py_repr(v);
      first = false;
    }
    return out + "}";
  }
  if (x.is_callable())
    return "<function " + std::get<callable_ptr>(x.v)->name + ">";
  return py_str(x);
}

std::string type_name(const value& x) {
  static const char* names[]{"undefined", "NoneType", "bool", "int", "float", "str", "list", "dict", "function"};
  if (x.is_dict() && x.dict()->is_namespace)
    return "Namespace";
  return names[x.v.index()];
}

/// json.dumps(x, ensure_ascii=False, indent, separators, sort_keys), as
/// transformers' tojson filter.
void dump_json(const value& x, std::string& out, int indent, int depth, const std::string& item_sep,
               const std::string& key_sep, bool sort_keys, bool ascii, int line) {
  const auto newline = [&](int d) {
    if (indent >= 0)
      out += "\n" + std::string(static_cast<std::size_t>(indent * d), ' ');
  };
  if (x.is_none())
    out += "null";
  else if (x.is_bool())
    out += std::get<bool>(x.v) ? "true" : "false";
  else if (x.is_int())
    out += std::to_string(std::get<std::int64_t>(x.v));
  else if (x.is_real()) {
    const double d = std::get<double>(x.v);
    out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : float_repr(d);
  } else if (x.is_string()) {
    out += '"';
    const auto& str = x.str();
    for (std::size_t i = 0; i < str.size(); ++i) {
      const char c = str[i];
      const auto u = static_cast<unsigned char>(c);
      if (ascii && u >= 0x80) {
        std::size_t n = 0;
        const auto cp = decode_at(str, i, n);
        i += n - 1;
        char b[16];
        if (cp >= 0x10000)
          std::snprintf(b, sizeof b, "\\u%04x\\u%04x", 0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF));
        else
          std::snprintf(b, sizeof b, "\\u%04x", cp);
        out += b;
        continue;
      }
      switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (u < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", u);
          out += b;
        } else
          out += c;
      }
    }
    out += '"';
  } else if (x.is_list()) {
    const auto& xs = *x.list();
    if (xs.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (std::size_t i = 0; i < xs.size(); ++i) {
      if (i)
        out += item_sep;
      newline(depth + 1);
      dump_json(xs[i], out, indent, depth + 1, item_sep, key_sep, sort_keys, ascii, line);
    }
    newline(depth);
    out += ']';
  } else if (x.is_dict() && !x.dict()->is_namespace) {
    auto items = x.dict()->items;
    if (items.empty()) {
      out += "{}";
      return;
    }
    if (sort_keys)
      std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    out += '{';
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (i)
        out += item_sep;
      newline(depth + 1);
      dump_json(value(items[i].first), out, indent, depth + 1, item_sep, key_sep, sort_keys, ascii, line);
      out += key_sep;
      dump_json(items[i].second, out, indent, depth + 1, item_sep, key_sep, sort_keys, ascii, line);
    }
    newline(depth);
    out += '}';
  } else {
    fail(line, "tojson: Object of type " + type_name(x) + " is not JSON serializable"
                 + (x.is_undefined() ? " (" + std::get<undefined_t>(x.v).hint + ")" : ""));
  }
}

bool truthy(const value& x) {
  return std::visit(
    [](const auto& a) -> bool {
      using T = std::decay_t<decltype(a)>;
      if constexpr (std::is_same_v<T, undefined_t> || std::is_same_v<T, none_t>)
        return false;
      else if constexpr (std::is_same_v<T, bool>)
        return a;
      else if constexpr (std::is_same_v<T, std::int64_t> || std::is_same_v<T, double>)
        return a != 0;
      else if constexpr (std::is_same_v<T, std::string>)
        return !a.empty();
      else if constexpr (std::is_same_v<T, list_ptr>)
        return !a->empty();
      else if constexpr (std::is_same_v<T, dict_ptr>)
        return a->is_namespace || a->is_loop || !a->items.empty();
      else
        return true;
    },
    x.v);
}

double as_double(const value& x) {
  if (x.is_bool())
    return std::get<bool>(x.v) ? 1 : 0;
  if (x.is_int())
    return static_cast<double>(std::get<std::int64_t>(x.v));
  return std::get<double>(x.v);
}

[[noreturn]] void overflow() { throw error("chat template: integer overflow (integers here are 64-bit)"); }

/// a + b, a - b, a * b, failing where they overflow: Python's integers do
/// not, and Troupe's are 64-bit.
std::int64_t checked_add(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r))
    overflow();
  return r;
}
std::int64_t checked_sub(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r))
    overflow();
  return r;
}
std::int64_t checked_mul(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    overflow();
  return r;
}

std::int64_t as_int(const value& x) {
  if (x.is_bool())
    return std::get<bool>(x.v) ? 1 : 0;
  if (!x.is_int())
    throw error("chat template: an integer is needed here, got " + type_name(x));
  return std::get<std::int64_t>(x.v);
}

bool equal(const value& a, const value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_real() || b.is_real())
      return as_double(a) == as_double(b);
    return as_int(a) == as_int(b);
  }
  if (a.v.index() != b.v.index())
    return false;
  if (a.is_undefined() || a.is_none())
    return true;
  if (a.is_string())
    return a.str() == b.str();
  if (a.is_list()) {
    const auto &x = *a.list(), &y = *b.list();
    if (x.size() != y.size() || x.tuple != y.tuple)
      return false;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (!equal(x[i], y[i]))
        return false;
    return true;
  }
  if (a.is_dict()) {
    if (a.dict() == b.dict())
      return true;
    const auto &x = a.dict()->items, &y = b.dict()->items;
    if (x.size() != y.size() || a.dict()->is_namespace || b.dict()->is_namespace)
      return false;
    for (const auto& [k, v] : x) {
      const auto* w = b.dict()->find(k);
      if (w == nullptr || !equal(v, *w))
        return false;
    }
    return true;
  }
  return std::get<callable_ptr>(a.v) == std::get<callable_ptr>(b.v);
}

/// Python's ordering (<): numbers, strings (by code point, as bytes of
/// UTF-8 order), lists lexicographically.
bool less(const value& a, const value& b, int line) {
  if (a.is_number() && b.is_number()) {
    if (a.is_real() || b.is_real())
      return as_double(a) < as_double(b);
    return as_int(a) < as_int(b);
  }
  if (a.is_string() && b.is_string())
    return a.str() < b.str();
  if (a.is_list() && b.is_list()) {
    const auto &x = *a.list(), &y = *b.list();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (less(x[i], y[i], line))
        return true;
      if (less(y[i], x[i], line))
        return false;
    }
    return x.size() < y.size();
  }
  fail(line, "'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

/// The items a for loop (or a filter) goes over: a list's, a dict's keys, a
/// string's characters; undefined is empty.
std::vector<value> iterate(const value& x, int line) {
  if (x.is_list())
    return *x.list();
  if (x.is_dict() && !x.dict()->is_namespace) {
    std::vector<value> keys;
    for (const auto& [k, v] : x.dict()->items)
      keys.emplace_back(k);
    return keys;
  }
  if (x.is_string()) {
    std::vector<value> cs;
    const auto starts = char_starts(x.str());
    for (std::size_t i = 0; i < starts.size(); ++i)
      cs.emplace_back(x.str().substr(starts[i], (i + 1 < starts.size() ? starts[i + 1] : x.str().size()) - starts[i]));
    return cs;
  }
  if (x.is_undefined())
    return {};
  fail(line, "'" + type_name(x) + "' object is not iterable");
}

std::int64_t length(const value& x, int line) {
  if (x.is_string())
    return static_cast<std::int64_t>(char_count(x.str()));
  if (x.is_list())
    return static_cast<std::int64_t>(x.list()->size());
  if (x.is_dict() && !x.dict()->is_namespace)
    return static_cast<std::int64_t>(x.dict()->items.size());
  if (x.is_undefined())
    return 0;
  fail(line, "object of type '" + type_name(x) + "' has no len()");
}

// ---------------------------------------------------------------- lexer

enum class tk { text, var_begin, var_end, block_begin, block_end, name, string, integer, real, op, end };

struct token {
  tk kind;
  std::string text; ///< text, a name, a string's value, an operator, a number's digits
  int line;
};

bool name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_'; }
bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

/// Whitespace control: `-` strips all blanks and line breaks next to a tag.
void strip_leading_blanks(std::string& text) {
  text.erase(0, std::min(text.size(), text.find_first_not_of(" \t\n\r\f\v")));
}
void strip_trailing_blanks(std::string& text) {
  const auto keep = text.find_last_not_of(" \t\n\r\f\v");
  text.erase(keep == std::string::npos ? 0 : keep + 1);
}

class lexer {
public:
  explicit lexer(std::string_view src) : src_(src) {}

  std::vector<token> run() {
    bool strip_next = false;   // a '-' closed the last tag
    bool line_starting = true; // the text to come starts a line
    while (pos_ < src_.size()) {
      const auto at = next_tag(pos_);
      std::string text(src_.substr(pos_, at - pos_));
      if (strip_next)
        strip_leading_blanks(text);
      strip_next = false;
      if (at == src_.size()) {
        emit_text(std::move(text));
        pos_ = at;
        break;
      }
      const char kind = src_[at + 1];
      const char mod = at + 2 < src_.size() ? src_[at + 2] : '\0';
      if (mod == '-') {
        strip_trailing_blanks(text);
      } else if (mod != '+' && kind != '{') {
        // lstrip_blocks: blanks from a line's start to a block or comment tag.
        const auto nl = text.rfind('\n');
        const std::size_t from = nl == std::string::npos ? 0 : nl + 1;
        if ((nl != std::string::npos || line_starting)
            && text.find_first_not_of(" \t", from) == std::string::npos)
          text.erase(from);
      }
      emit_text(std::move(text));
      line_ += count_lines(pos_, at);
      pos_ = at + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
      if (kind == '#') {
        const auto close = src_.find("#}", pos_);
        if (close == std::string_view::npos)
          fail(line_, "a comment ({# ... #}) is not closed");
        const bool strip = close > pos_ && src_[close - 1] == '-';
        line_ += count_lines(pos_, close + 2);
        pos_ = close + 2;
        if (strip)
          strip_next = true;
        else
          trim_newline();
      } else {
        const bool block = kind == '%';
        out_.push_back({block ? tk::block_begin : tk::var_begin, "", line_});
        const char end_mod = lex_tag(block);
        out_.push_back({block ? tk::block_end : tk::var_end, "", line_});
        if (end_mod == '-')
          strip_next = true;
        else if (block && end_mod != '+')
          trim_newline();
        if (block && is_raw_start())
          lex_raw(strip_next);
      }
      line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
    }
    out_.push_back({tk::end, "", line_});
    return std::move(out_);
  }

private:
  std::size_t next_tag(std::size_t from) const {
    for (auto i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    return src_.size();
  }
  int count_lines(std::size_t a, std::size_t b) const {
    return static_cast<int>(std::count(src_.begin() + static_cast<std::ptrdiff_t>(a), src_.begin() + static_cast<std::ptrdiff_t>(b), '\n'));
  }
  void emit_text(std::string text) {
    if (!text.empty())
      out_.push_back({tk::text, std::move(text), line_});
  }
  void trim_newline() {
    if (pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      ++line_;
    } else if (pos_ + 1 < src_.size() && src_[pos_] == '\r' && src_[pos_ + 1] == '\n') {
      pos_ += 2;
      ++line_;
    }
  }

  /// The tokens of one tag up to its end; returns the end's modifier.
  char lex_tag(bool block) {
    int depth = 0;
    while (true) {
      if (pos_ >= src_.size())
        fail(line_, block ? "a tag ({% ... %}) is not closed" : "an expression ({{ ... }}) is not closed");
      const char c = src_[pos_];
      if (c == '\n')
        ++line_;
      if (std::isspace(static_cast<unsigned char>(c))) {
        ++pos_;
        continue;
      }
      if (depth == 0) {
        const std::string_view rest = src_.substr(pos_);
        const std::string_view close = block ? "%}" : "}}";
        if (rest.starts_with(close)) {
          pos_ += 2;
          return '\0';
        }
        if ((c == '-' || (block && c == '+')) && rest.substr(1).starts_with(close)) {
          pos_ += 3;
          return c;
        }
      }
      if (name_start(c)) {
        auto e = pos_;
        while (e < src_.size() && name_char(src_[e]))
          ++e;
        out_.push_back({tk::name, std::string(src_.substr(pos_, e - pos_)), line_});
        pos_ = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number();
      } else if (c == '\'' || c == '"') {
        lex_string(c);
      } else {
        static const char* ops[]{"==", "!=", "<=", ">=", "//", "**", "+", "-", "*", "/", "%", "~", "<", ">",
                                 "=",  "|",  ".",  ",",  ":",  "(", ")", "[", "]", "{", "}"};
        const std::string_view rest = src_.substr(pos_);
        const char* hit = nullptr;
        for (const char* op : ops)
          if (rest.starts_with(op)) {
            hit = op;
            break;
          }
        if (hit == nullptr)
          fail(line_, std::string("unexpected character '") + c + "' in a tag");
        const std::string op(hit);
        if (op == "(" || op == "[" || op == "{")
          ++depth;
        else if (op == ")" || op == "]" || op == "}") {
          if (depth == 0)
            fail(line_, "unexpected '" + op + "'");
          --depth;
        }
        out_.push_back({tk::op, op, line_});
        pos_ += op.size();
      }
    }
  }

  void lex_number() {
    auto e = pos_;
    bool real = false;
    while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_'))
      ++e;
    if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      real = true;
      ++e;
      while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e])))
        ++e;
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      auto f = e + 1;
      if (f < src_.size() && (src_[f] == '+' || src_[f] == '-'))
        ++f;
      if (f < src_.size() && std::isdigit(static_cast<unsigned char>(src_[f]))) {
        real = true;
        e = f;
        while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e])))
          ++e;
      }
    }
    std::string digits;
    for (auto i = pos_; i < e; ++i)
      if (src_[i] != '_')
        digits += src_[i];
    out_.push_back({real ? tk::real : tk::integer, digits, line_});
    pos_ = e;
  }

  void lex_string(char quote) {
    std::string out;
    auto i = pos_ + 1;
    while (true) {
      if (i >= src_.size())
        fail(line_, "a string is not closed");
      const char c = src_[i];
      if (c == quote)
        break;
      if (c == '\n')
        ++line_;
      if (c != '\\') {
        out += c;
        ++i;
        continue;
      }
      if (i + 1 >= src_.size())
        fail(line_, "a string is not closed");
      const char e = src_[i + 1];
      i += 2;
      switch (e) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '0': out += '\0'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case 'a': out += '\a'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case '\n': ++line_; break;
      case 'x':
      case 'u':
      case 'U': {
        const std::size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        std::uint32_t cp = 0;
        if (i + n > src_.size())
          fail(line_, "a string's \\" + std::string(1, e) + " escape is cut short");
        for (std::size_t k = 0; k < n; ++k) {
          const char h = src_[i + k];
          if (!std::isxdigit(static_cast<unsigned char>(h)))
            fail(line_, "a string's \\" + std::string(1, e) + " escape needs " + std::to_string(n) + " hex digits");
          cp = cp * 16 + static_cast<std::uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        i += n;
        append_utf8(out, cp);
        break;
      }
      default: out += '\\'; out += e; // Python keeps unknown escapes as written
      }
    }
    out_.push_back({tk::string, std::move(out), line_});
    pos_ = i + 1;
  }

  /// Whether the tag just lexed is {% raw %}.
  bool is_raw_start() const {
    const auto n = out_.size();
    return n >= 3 && out_[n - 2].kind == tk::name && out_[n - 2].text == "raw" && out_[n - 3].kind == tk::block_begin;
  }

  /// The text up to {% endraw %}, as it is.
  void lex_raw(bool& strip_next) {
    out_.resize(out_.size() - 3);
    auto search = pos_;
    while (true) {
      const auto at = src_.find("{%", search);
      if (at == std::string_view::npos)
        fail(line_, "{% raw %} is not closed by {% endraw %}");
      auto i = at + 2;
      const char mod = i < src_.size() ? src_[i] : '\0';
      if (mod == '-' || mod == '+')
        ++i;
      while (i < src_.size() && std::isspace(static_cast<unsigned char>(src_[i])))
        ++i;
      if (src_.substr(i).starts_with("endraw")) {
        i += 6;
        while (i < src_.size() && std::isspace(static_cast<unsigned char>(src_[i])))
          ++i;
        char end_mod = '\0';
        if (i < src_.size() && (src_[i] == '-' || src_[i] == '+'))
          end_mod = src_[i++];
        if (!src_.substr(i).starts_with("%}"))
          fail(line_, "{% endraw %} is malformed");
        std::string text(src_.substr(pos_, at - pos_));
        if (strip_next)
          strip_leading_blanks(text);
        if (mod == '-')
          strip_trailing_blanks(text);
        line_ += count_lines(pos_, i + 2);
        emit_text(std::move(text));
        pos_ = i + 2;
        strip_next = end_mod == '-';
        if (end_mod != '-' && end_mod != '+')
          trim_newline();
        return;
      }
      search = at + 2;
    }
  }

  std::string_view src_;
  std::size_t pos_ = 0;
  int line_ = 1;
  std::vector<token> out_;
};

// ---------------------------------------------------------------- syntax tree

struct interp;

struct expr {
  int line = 0;
  virtual ~expr() = default;
  virtual value eval(interp& in) const = 0;
};
using expr_ptr = std::unique_ptr<expr>;

struct stmt {
  int line = 0;
  virtual ~stmt() = default;
  virtual void run(interp& in) const = 0;
};
using stmt_ptr = std::unique_ptr<stmt>;
using body = std::vector<stmt_ptr>;

// ---------------------------------------------------------------- interpreter state

enum class flow { normal, break_, continue_ };

struct interp {
  const limits& lim;
  double now;
  std::string* out;
  std::vector<std::map<std::string, value, std::less<>>> scopes;
  std::size_t steps = 0;
  std::size_t depth = 0;
  flow pending = flow::normal;

  interp(const limits& l, double t, std::string* o) : lim(l), now(t), out(o) {}

  void step(int line) {
    if (++steps > lim.max_steps)
      fail(line, "the template ran more than " + std::to_string(lim.max_steps) + " steps");
  }
  void write(std::string_view s, int line) {
    if (out->size() + s.size() > lim.max_output_bytes)
      fail(line, "the rendered text is over " + std::to_string(lim.max_output_bytes) + " bytes");
    out->append(s);
  }
  /// Where the running macro's own scope begins (0: no macro): a macro
  /// sees its arguments and what it sets, then the template's top level
  /// and the globals, not the loops it is called from (as Jinja's).
  std::size_t base = 0;

  value lookup(std::string_view name) const {
    const auto find = [&](std::size_t i) -> const value* {
      const auto f = scopes[i].find(name);
      return f == scopes[i].end() ? nullptr : &f->second;
    };
    for (auto i = scopes.size(); i-- > base;)
      if (const auto* v = find(i))
        return *v;
    for (std::size_t i : {std::size_t{1}, std::size_t{0}}) // the top level, the globals
      if (i < base)
        if (const auto* v = find(i))
          return *v;
    return value(undefined_t{"'" + std::string(name) + "' is undefined"});
  }
  void assign(const std::string& name, value v) { scopes.back()[name] = std::move(v); }
  void run(const body& b) {
    for (const auto& s : b) {
      if (pending != flow::normal)
        return;
      step(s->line);
      s->run(*this);
    }
  }
};

/// Fails on an undefined value used as anything but text or a truth value.
const value& defined(const value& x, int line) {
  if (x.is_undefined())
    fail(line, std::get<undefined_t>(x.v).hint);
  return x;
}

// ---------------------------------------------------------------- attributes, items, methods

value method(const value& self, const std::string& name, int line);

value slice_of(const value& x, const value& a, const value& b, const value& c, int line) {
  const std::int64_t step = c.is_none() || c.is_undefined() ? 1 : as_int(defined(c, line));
  if (step == 0)
    fail(line, "slice step cannot be zero");
  std::vector<value> items;
  std::vector<std::size_t> starts;
  std::int64_t n = 0;
  if (x.is_list()) {
    n = static_cast<std::int64_t>(x.list()->size());
  } else if (x.is_string()) {
    starts = char_starts(x.str());
    n = static_cast<std::int64_t>(starts.size());
  } else {
    fail(line, "'" + type_name(x) + "' object is not subscriptable");
  }
  const auto clamp = [&](const value& v, std::int64_t dflt) -> std::int64_t {
    if (v.is_none() || v.is_undefined())
      return dflt;
    auto i = as_int(defined(v, line));
    if (i < 0)
      i += n;
    if (step > 0)
      return std::clamp<std::int64_t>(i, 0, n);
    return std::clamp<std::int64_t>(i, -1, n - 1);
  };
  const auto start = clamp(a, step > 0 ? 0 : n - 1);
  const auto stop = clamp(b, step > 0 ? n : -1);
  std::vector<std::int64_t> idx;
  for (auto i = start; step > 0 ? i < stop : i > stop;) {
    idx.push_back(i);
    if (__builtin_add_overflow(i, step, &i))
      break; // past either end
  }
  if (x.is_list()) {
    for (auto i : idx)
      items.push_back((*x.list())[static_cast<std::size_t>(i)]);
    return make_list(std::move(items));
  }
  std::string s;
  const auto& str = x.str();
  for (auto i : idx) {
    const auto from = starts[static_cast<std::size_t>(i)];
    const auto to = static_cast<std::size_t>(i) + 1 < starts.size() ? starts[static_cast<std::size_t>(i) + 1] : str.size();
    s += str.substr(from, to - from);
  }
  return value(std::move(s));
}

/// x[key]: an item first, then an attribute (Jinja's subscript).
value item_of(const value& x, const value& key, int line) {
  defined(x, line);
  if (x.is_dict()) {
    if (key.is_string()) {
      if (const auto* v = x.dict()->find(key.str()))
        return *v;
      if (!x.dict()->is_namespace)
        if (auto m = method(x, key.str(), line); !m.is_undefined())
          return m;
    }
    return value(undefined_t{"'dict object' has no attribute " + py_repr(key)});
  }
  if ((x.is_list() || x.is_string()) && (key.is_int() || key.is_bool())) {
    auto i = as_int(key);
    if (x.is_list()) {
      const auto n = static_cast<std::int64_t>(x.list()->size());
      if (i < 0)
        i += n;
      if (i < 0 || i >= n)
        return value(undefined_t{"list object has no element " + std::to_string(as_int(key))});
      return (*x.list())[static_cast<std::size_t>(i)];
    }
    const auto starts = char_starts(x.str());
    const auto n = static_cast<std::int64_t>(starts.size());
    if (i < 0)
      i += n;
    if (i < 0 || i >= n)
      return value(undefined_t{"str object has no element " + std::to_string(as_int(key))});
    const auto from = starts[static_cast<std::size_t>(i)];
    const auto to = static_cast<std::size_t>(i) + 1 < starts.size() ? starts[static_cast<std::size_t>(i) + 1] : x.str().size();
    return value(x.str().substr(from, to - from));
  }
  if (key.is_string())
    if (auto m = method(x, key.str(), line); !m.is_undefined())
      return m;
  return value(undefined_t{"'" + type_name(x) + " object' has no attribute " + py_repr(key)});
}

/// x.name: an attribute (a method) first, then an item (Jinja's getattr).
value attr_of(const value& x, const std::string& name, int line) {
  defined(x, line);
  if (x.is_dict()) {
    if (!x.dict()->is_namespace)
      if (auto m = method(x, name, line); !m.is_undefined())
        return m;
    if (const auto* v = x.dict()->find(name))
      return *v;
    return value(undefined_t{"'" + std::string(x.dict()->is_namespace ? "Namespace" : "dict object")
                             + "' has no attribute '" + name + "'"});
  }
  if (auto m = method(x, name, line); !m.is_undefined())
    return m;
  return value(undefined_t{"'" + type_name(x) + " object' has no attribute '" + name + "'"});
}

const value& arg(call_args& a, std::size_t i, const char* name, int line, const char* fn) {
  if (i < a.positional.size())
    return a.positional[i];
  for (const auto& [k, v] : a.named)
    if (k == name)
      return v;
  fail(line, std::string(fn) + "() is missing its argument '" + name + "'");
}

std::optional<value> opt_arg(call_args& a, std::size_t i, const char* name) {
  if (i < a.positional.size())
    return a.positional[i];
  for (const auto& [k, v] : a.named)
    if (k == name)
      return v;
  return std::nullopt;
}

void check_args(const call_args& a, std::size_t max_positional, std::initializer_list<const char*> names, int line,
                const std::string& fn) {
  if (a.positional.size() > max_positional)
    fail(line, fn + "() takes at most " + std::to_string(max_positional) + " arguments (" +
                 std::to_string(a.positional.size()) + " given)");
  for (const auto& kv : a.named) {
    const std::string& k = kv.first;
    if (std::find_if(names.begin(), names.end(), [&](const char* n) { return k == n; }) == names.end())
      fail(line, fn + "() got an unexpected keyword argument '" + k + "'");
  }
}

std::string need_string(const value& x, int line, const std::string& what) {
  if (!x.is_string())
    fail(line, what + " must be a string, got " + type_name(x));
  return x.str();
}

value bound(std::string name, std::function<value(call_args&, int)> fn) {
  return value(callable_ptr(std::make_shared<const callable_t>(callable_t{std::move(name), std::move(fn)})));
}

std::vector<std::string> py_split(const std::string& s, const std::optional<std::string>& sep, std::int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    std::size_t from = 0;
    while (maxsplit < 0 || static_cast<std::int64_t>(out.size()) < maxsplit) {
      const auto at = s.find(*sep, from);
      if (at == std::string::npos)
        break;
      out.push_back(s.substr(from, at - from));
      from = at + sep->size();
    }
    out.push_back(s.substr(from));
    return out;
  }
  // Runs of whitespace, none at the ends.
  std::size_t i = 0;
  const auto skip_space = [&] {
    while (i < s.size()) {
      std::size_t n = 0;
      if (!py_space(decode_at(s, i, n)))
        break;
      i += n;
    }
  };
  skip_space();
  while (i < s.size()) {
    if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) == maxsplit) {
      out.push_back(py_strip(s.substr(i), false, true));
      return out;
    }
    const auto from = i;
    while (i < s.size()) {
      std::size_t n = 0;
      if (py_space(decode_at(s, i, n)))
        break;
      i += n;
    }
    out.push_back(s.substr(from, i - from));
    skip_space();
  }
  return out;
}

/// Python's str.title(): a cased character after one that is not is
/// upper case, the rest lower.
std::string title_case(const std::string& s) {
  bool prev_cased = false;
  return map_chars(s, [&](std::uint32_t cp, std::size_t) {
    const auto out = case_of(cp, !prev_cased);
    prev_cased = cased(cp) || (cp < 0x80 && std::isalpha(static_cast<int>(cp)));
    return out;
  });
}

/// Jinja's title filter: each word (after runs of blanks, '-', '(', '{',
/// '[' or '<') its first character upper case, the rest lower.
std::string title_words(const std::string& s) {
  bool word_start = true;
  return map_chars(s, [&](std::uint32_t cp, std::size_t) {
    const bool sep = py_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
    const auto out = sep ? cp : case_of(cp, word_start);
    word_start = sep;
    return out;
  });
}

/// Python's str.capitalize(): the first character upper case, the rest
/// lower.
std::string capitalize(const std::string& s) {
  return map_chars(s, [](std::uint32_t cp, std::size_t k) { return case_of(cp, k == 0); });
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, std::int64_t count) {
  if (from.empty()) {
    // Python puts `to` between characters and at both ends.
    std::string out;
    const auto starts = char_starts(s);
    std::int64_t done = 0;
    for (std::size_t i = 0; i <= starts.size(); ++i) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (i < starts.size())
        out += s.substr(starts[i], (i + 1 < starts.size() ? starts[i + 1] : s.size()) - starts[i]);
    }
    return out;
  }
  std::string out;
  std::size_t at = 0;
  std::int64_t done = 0;
  while (count < 0 || done < count) {
    const auto hit = s.find(from, at);
    if (hit == std::string::npos)
      break;
    out += s.substr(at, hit - at) + to;
    at = hit + from.size();
    ++done;
  }
  return out + s.substr(at);
}

/// The methods chat templates call on strings and dicts (Jinja's sandbox
/// lets these through); undefined when `self` has no such method.
value method(const value& self, const std::string& name, int line) {
  (void)line;
  if (self.is_string()) {
    const std::string s = self.str();
    if (name == "strip" || name == "lstrip" || name == "rstrip")
      return bound(name, [s, name](call_args& a, int l) {
        check_args(a, 1, {}, l, name);
        std::optional<std::string> chars;
        if (!a.positional.empty() && !a.positional[0].is_none())
          chars = need_string(a.positional[0], l, name + "()'s argument");
        return value(py_strip(s, name != "rstrip", name != "lstrip", chars));
      });
    if (name == "upper" || name == "lower")
      return bound(name, [s, name](call_args& a, int l) {
        check_args(a, 0, {}, l, name);
        return value(change_case(s, name == "upper"));
      });
    if (name == "title")
      return bound(name, [s](call_args& a, int l) {
        check_args(a, 0, {}, l, "title");
        return value(title_case(s));
      });
    if (name == "capitalize")
      return bound(name, [s](call_args& a, int l) {
        check_args(a, 0, {}, l, "capitalize");
        return value(capitalize(s));
      });
    if (name == "startswith" || name == "endswith")
      return bound(name, [s, name](call_args& a, int l) {
        check_args(a, 1, {}, l, name);
        const auto& p = arg(a, 0, "prefix", l, name.c_str());
        std::vector<std::string> options;
        if (p.is_list())
          for (const auto& x : *p.list())
            options.push_back(need_string(x, l, name + "()'s argument"));
        else
          options.push_back(need_string(p, l, name + "()'s argument"));
        for (const auto& o : options)
          if (name == "startswith" ? s.starts_with(o) : s.ends_with(o))
            return value(true);
        return value(false);
      });
    if (name == "split" || name == "rsplit")
      return bound(name, [s, name](call_args& a, int l) {
        check_args(a, 2, {"sep", "maxsplit"}, l, name);
        std::optional<std::string> sep;
        if (auto x = opt_arg(a, 0, "sep"); x && !x->is_none())
          sep = need_string(*x, l, name + "()'s separator");
        if (sep && sep->empty())
          fail(l, name + "(): empty separator");
        std::int64_t maxsplit = -1;
        if (auto x = opt_arg(a, 1, "maxsplit"))
          maxsplit = as_int(*x);
        if (name == "rsplit" && maxsplit >= 0)
          fail(l, "rsplit() with maxsplit is not supported");
        std::vector<value> parts;
        for (auto& p : py_split(s, sep, maxsplit))
          parts.emplace_back(std::move(p));
        return make_list(std::move(parts));
      });
    if (name == "replace")
      return bound(name, [s](call_args& a, int l) {
        check_args(a, 3, {}, l, "replace");
        const auto from = need_string(arg(a, 0, "old", l, "replace"), l, "replace()'s old");
        const auto to = need_string(arg(a, 1, "new", l, "replace"), l, "replace()'s new");
        const std::int64_t count = a.positional.size() > 2 ? as_int(a.positional[2]) : -1;
        return value(replace_all(s, from, to, count));
      });
    if (name == "find" || name == "count")
      return bound(name, [s, name](call_args& a, int l) {
        check_args(a, 1, {}, l, name);
        const auto sub = need_string(arg(a, 0, "sub", l, name.c_str()), l, name + "()'s argument");
        if (name == "find") {
          const auto at = s.find(sub);
          return at == std::string::npos ? value(std::int64_t{-1})
                                          : value(static_cast<std::int64_t>(char_count(std::string_view(s).substr(0, at))));
        }
        if (sub.empty())
          return value(static_cast<std::int64_t>(char_count(s) + 1));
        std::int64_t n = 0;
        for (auto at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size()))
          ++n;
        return value(n);
      });
    if (name == "join")
      return bound(name, [s](call_args& a, int l) {
        check_args(a, 1, {}, l, "join");
        std::string out;
        bool first = true;
        for (const auto& x : iterate(defined(arg(a, 0, "iterable", l, "join"), l), l)) {
          out += (first ? "" : s) + need_string(x, l, "join()'s items");
          first = false;
        }
        return value(out);
      });
    if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isupper" || name == "islower")
      return bound(name, [s, name](call_args& a, int l) {
        check_args(a, 0, {}, l, name);
        if (s.empty())
          return value(false);
        bool cased = false;
        for (const char c : s) {
          const auto u = static_cast<unsigned char>(c);
          if (name == "isdigit" && !std::isdigit(u))
            return value(false);
          if (name == "isalpha" && !std::isalpha(u))
            return value(false);
          if (name == "isspace" && !std::isspace(u))
            return value(false);
          if (name == "isupper" && std::islower(u))
            return value(false);
          if (name == "islower" && std::isupper(u))
            return value(false);
          cased = cased || std::isalpha(u);
        }
        return value(name == "isupper" || name == "islower" ? cased : true);
      });
    return value();
  }
  if (self.is_dict() && !self.dict()->is_namespace) {
    const auto d = self.dict();
    if (name == "items" || name == "keys" || name == "values")
      return bound(name, [d, name](call_args& a, int l) {
        check_args(a, 0, {}, l, name);
        std::vector<value> out;
        for (const auto& [k, v] : d->items)
          out.push_back(name == "keys" ? value(k) : name == "values" ? v : make_tuple({value(k), v}));
        return make_list(std::move(out));
      });
    if (name == "get")
      return bound(name, [d](call_args& a, int l) {
        check_args(a, 2, {}, l, "get");
        const auto& key = arg(a, 0, "key", l, "get");
        if (key.is_string())
          if (const auto* v = d->find(key.str()))
            return *v;
        return a.positional.size() > 1 ? a.positional[1] : value(none_t{});
      });
    return value();
  }
  return value();
}

// ---------------------------------------------------------------- filters and tests

value apply_test(const std::string& name, const value& x, call_args& a, int line);

/// Items of `seq` whose attribute `attr` (dotted) passes the test `test`
/// (truthiness with none), for select/reject(attr).
value select_items(const value& seq, call_args& a, bool by_attr, bool keep, int line, const std::string& fn) {
  std::size_t first = 0;
  std::string attr;
  if (by_attr) {
    attr = need_string(arg(a, 0, "attribute", line, fn.c_str()), line, fn + "()'s attribute");
    first = 1;
  }
  std::optional<std::string> test;
  call_args rest;
  if (a.positional.size() > first) {
    test = need_string(a.positional[first], line, fn + "()'s test");
    rest.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(first) + 1, a.positional.end());
  }
  std::vector<value> out;
  for (const auto& x : iterate(defined(seq, line), line)) {
    value probe = x;
    if (by_attr) {
      std::size_t from = 0;
      while (true) {
        const auto dot = attr.find('.', from);
        const auto part = attr.substr(from, dot == std::string::npos ? std::string::npos : dot - from);
        probe = probe.is_undefined() ? probe : item_of(probe, value(part), line);
        if (dot == std::string::npos)
          break;
        from = dot + 1;
      }
    }
    const bool pass = test ? truthy(apply_test(*test, probe, rest, line)) : truthy(probe);
    if (pass == keep)
      out.push_back(x);
  }
  return make_list(std::move(out));
}

value apply_filter(const std::string& name, const value& x, call_args& a, int line) {
  if (name == "trim") {
    check_args(a, 1, {"chars"}, line, name);
    std::optional<std::string> chars;
    if (auto c = opt_arg(a, 0, "chars"); c && !c->is_none())
      chars = need_string(*c, line, "trim()'s chars");
    return value(py_strip(py_str(x), true, true, chars));
  }
  if (name == "length" || name == "count") {
    check_args(a, 0, {}, line, name);
    return value(length(x, line));
  }
  if (name == "tojson") {
    // transformers' signature: tojson(x, ensure_ascii=False, indent=None,
    // separators=None, sort_keys=False).
    check_args(a, 4, {"ensure_ascii", "indent", "separators", "sort_keys"}, line, name);
    const bool ascii = truthy(opt_arg(a, 0, "ensure_ascii").value_or(value(false)));
    int indent = -1;
    if (auto i = opt_arg(a, 1, "indent"); i && !i->is_none())
      indent = static_cast<int>(std::max<std::int64_t>(0, as_int(defined(*i, line))));
    std::string item_sep = indent >= 0 ? "," : ", ", key_sep = ": ";
    if (auto s = opt_arg(a, 2, "separators"); s && !s->is_none()) {
      const auto parts = iterate(*s, line);
      if (parts.size() != 2)
        fail(line, "tojson(): separators must be a pair of strings");
      item_sep = need_string(parts[0], line, "tojson()'s separators");
      key_sep = need_string(parts[1], line, "tojson()'s separators");
    }
    bool sort = false;
    if (auto s = opt_arg(a, 3, "sort_keys"))
      sort = truthy(*s);
    std::string out;
    dump_json(x, out, indent, 0, item_sep, key_sep, sort, ascii, line);
    return value(std::move(out));
  }
  if (name == "upper" || name == "lower") {
    check_args(a, 0, {}, line, name);
    return value(change_case(py_str(x), name == "upper"));
  }
  if (name == "title") {
    check_args(a, 0, {}, line, name);
    return value(title_words(py_str(x)));
  }
  if (name == "capitalize") {
    check_args(a, 0, {}, line, name);
    return value(capitalize(py_str(x)));
  }
  if (name == "default" || name == "d") {
    check_args(a, 2, {"default_value", "boolean"}, line, name);
    const auto dflt = opt_arg(a, 0, "default_value").value_or(value(""));
    const bool boolean = truthy(opt_arg(a, 1, "boolean").value_or(value(false)));
    return (x.is_undefined() || (boolean && !truthy(x))) ? dflt : x;
  }
  if (name == "string") {
    check_args(a, 0, {}, line, name);
    return value(py_str(x));
  }
  if (name == "safe" || name == "list" || name == "first" || name == "last" || name == "reverse" || name == "items"
      || name == "unique") {
    check_args(a, 0, {}, line, name);
    if (name == "safe")
      return x;
    if (name == "items") {
      if (x.is_undefined())
        return make_list();
      if (!x.is_dict() || x.dict()->is_namespace)
        fail(line, "items(): can only be applied to a mapping, got " + type_name(x));
      call_args none;
      return std::get<callable_ptr>(method(x, "items", line).v)->fn(none, line);
    }
    auto xs = iterate(defined(x, line), line);
    if (name == "list")
      return make_list(std::move(xs));
    if (name == "first")
      return xs.empty() ? value(undefined_t{"No first item, sequence was empty."}) : xs.front();
    if (name == "last")
      return xs.empty() ? value(undefined_t{"No last item, sequence was empty."}) : xs.back();
    if (name == "unique") {
      std::vector<value> out;
      for (auto& v : xs)
        if (std::none_of(out.begin(), out.end(), [&](const value& o) { return equal(o, v); }))
          out.push_back(std::move(v));
      return make_list(std::move(out));
    }
    std::reverse(xs.begin(), xs.end());
    if (x.is_string()) {
      std::string s;
      for (const auto& c : xs)
        s += c.str();
      return value(std::move(s));
    }
    return make_list(std::move(xs));
  }
  if (name == "join") {
    check_args(a, 2, {"d", "attribute"}, line, name);
    const auto sep = py_str(opt_arg(a, 0, "d").value_or(value("")));
    std::optional<value> attr = opt_arg(a, 1, "attribute");
    std::string out;
    bool first = true;
    for (const auto& v : iterate(defined(x, line), line)) {
      out += (first ? "" : sep) + py_str(attr ? item_of(v, *attr, line) : v);
      first = false;
    }
    return value(std::move(out));
  }
  if (name == "replace") {
    check_args(a, 3, {}, line, name);
    return value(replace_all(py_str(x), py_str(arg(a, 0, "old", line, "replace")), py_str(arg(a, 1, "new", line, "replace")),
                             a.positional.size() > 2 ? as_int(a.positional[2]) : -1));
  }
  if (name == "int") {
    check_args(a, 1, {"default"}, line, name);
    const auto dflt = opt_arg(a, 0, "default").value_or(value(std::int64_t{0}));
    if (x.is_int() || x.is_bool())
      return value(as_int(x));
    if (x.is_real())
      return value(static_cast<std::int64_t>(std::get<double>(x.v)));
    if (x.is_string()) {
      const auto s = py_strip(x.str(), true, true);
      std::int64_t v = 0;
      const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
      if (r.ec == std::errc() && r.ptr == s.data() + s.size())
        return value(v);
      double d = 0;
      const auto rd = std::from_chars(s.data(), s.data() + s.size(), d);
      if (rd.ec == std::errc() && rd.ptr == s.data() + s.size())
        return value(static_cast<std::int64_t>(d));
    }
    return dflt;
  }
  if (name == "float") {
    check_args(a, 1, {"default"}, line, name);
    const auto dflt = opt_arg(a, 0, "default").value_or(value(0.0));
    if (x.is_number())
      return value(as_double(x));
    if (x.is_string()) {
      const auto s = py_strip(x.str(), true, true);
      double d = 0;
      const auto r = std::from_chars(s.data(), s.data() + s.size(), d);
      if (r.ec == std::errc() && r.ptr == s.data() + s.size())
        return value(d);
    }
    return dflt;
  }
  if (name == "abs") {
    check_args(a, 0, {}, line, name);
    if (x.is_int() || x.is_bool())
      return value(as_int(x) < 0 ? checked_sub(0, as_int(x)) : as_int(x));
    if (x.is_real())
      return value(std::fabs(std::get<double>(x.v)));
    fail(line, "bad operand type for abs(): '" + type_name(x) + "'");
  }
  if (name == "indent") {
    check_args(a, 3, {"width", "first", "blank"}, line, name);
    const auto w = opt_arg(a, 0, "width").value_or(value(std::int64_t{4}));
    const std::string pad = w.is_string() ? w.str() : std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, as_int(w))), ' ');
    const bool first = truthy(opt_arg(a, 1, "first").value_or(value(false)));
    const bool blank = truthy(opt_arg(a, 2, "blank").value_or(value(false)));
    const auto s = py_str(x);
    std::string out;
    std::size_t from = 0;
    bool first_line = true;
    while (true) {
      const auto nl = s.find('\n', from);
      const auto ln = s.substr(from, nl == std::string::npos ? std::string::npos : nl - from);
      if ((first_line ? first : true) && (blank || !py_strip(ln, true, true).empty()))
        out += pad;
      out += ln;
      if (nl == std::string::npos)
        break;
      out += '\n';
      from = nl + 1;
      first_line = false;
    }
    return value(std::move(out));
  }
  if (name == "escape" || name == "e") {
    check_args(a, 0, {}, line, name);
    std::string out;
    for (const char c : py_str(x)) {
      switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
      }
    }
    return value(std::move(out));
  }
  if (name == "map") {
    std::vector<value> out;
    if (const auto at = opt_arg(a, 99, "attribute")) {
      check_args(a, 0, {"attribute", "default"}, line, name);
      const auto dflt = opt_arg(a, 99, "default");
      for (const auto& v : iterate(defined(x, line), line)) {
        auto got = item_of(v, *at, line);
        out.push_back(got.is_undefined() && dflt ? *dflt : got);
      }
      return make_list(std::move(out));
    }
    if (a.positional.empty())
      fail(line, "map() needs a filter name or attribute=");
    const auto filter = need_string(a.positional[0], line, "map()'s filter");
    call_args rest;
    rest.positional.assign(a.positional.begin() + 1, a.positional.end());
    rest.named = a.named;
    for (const auto& v : iterate(defined(x, line), line)) {
      auto r = rest;
      out.push_back(apply_filter(filter, v, r, line));
    }
    return make_list(std::move(out));
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr")
    return select_items(x, a, name.ends_with("attr"), name.starts_with("select"), line, name);
  if (name == "sort") {
    check_args(a, 3, {"reverse", "case_sensitive", "attribute"}, line, name);
    const bool rev = truthy(opt_arg(a, 0, "reverse").value_or(value(false)));
    const auto attr = opt_arg(a, 2, "attribute");
    auto xs = iterate(defined(x, line), line);
    const auto key = [&](const value& v) { return attr ? item_of(v, *attr, line) : v; };
    std::stable_sort(xs.begin(), xs.end(), [&](const value& p, const value& q) {
      return rev ? less(key(q), key(p), line) : less(key(p), key(q), line);
    });
    return make_list(std::move(xs));
  }
  if (name == "dictsort") {
    check_args(a, 0, {}, line, name);
    if (!x.is_dict())
      fail(line, "dictsort(): can only be applied to a mapping, got " + type_name(x));
    auto items = x.dict()->items;
    std::stable_sort(items.begin(), items.end(), [](const auto& p, const auto& q) { return p.first < q.first; });
    std::vector<value> out;
    for (auto& [k, v] : items)
      out.push_back(make_tuple({value(k), v}));
    return make_list(std::move(out));
  }
  if (name == "sum" || name == "min" || name == "max") {
    check_args(a, 0, {}, line, name);
    const auto xs = iterate(defined(x, line), line);
    if (name == "sum") {
      value total(std::int64_t{0});
      for (const auto& v : xs) {
        if (!v.is_number())
          fail(line, "sum(): unsupported operand type " + type_name(v));
        total = total.is_real() || v.is_real() ? value(as_double(total) + as_double(v)) : value(checked_add(as_int(total), as_int(v)));
      }
      return total;
    }
    if (xs.empty())
      return value(undefined_t{"No aggregated item, sequence was empty."});
    value best = xs.front();
    for (const auto& v : xs)
      if (name == "min" ? less(v, best, line) : less(best, v, line))
        best = v;
    return best;
  }
  if (name == "wordcount") {
    check_args(a, 0, {}, line, name);
    return value(static_cast<std::int64_t>(py_split(py_str(x), std::nullopt, -1).size()));
  }
  fail(line, "unknown filter '" + name + "'");
}

value apply_test(const std::string& name, const value& x, call_args& a, int line) {
  const auto other = [&]() -> const value& { return arg(a, 0, "other", line, name.c_str()); };
  if (name == "defined")
    return value(!x.is_undefined());
  if (name == "undefined")
    return value(x.is_undefined());
  if (name == "none")
    return value(x.is_none());
  if (name == "string")
    return value(x.is_string());
  if (name == "number")
    return value(x.is_int() || x.is_real() || x.is_bool());
  if (name == "integer")
    return value(x.is_int());
  if (name == "float")
    return value(x.is_real());
  if (name == "boolean")
    return value(x.is_bool());
  if (name == "true")
    return value(x.is_bool() && std::get<bool>(x.v));
  if (name == "false")
    return value(x.is_bool() && !std::get<bool>(x.v));
  if (name == "mapping")
    return value(x.is_dict() && !x.dict()->is_namespace);
  if (name == "sequence")
    return value(x.is_list() || x.is_string() || (x.is_dict() && !x.dict()->is_namespace));
  if (name == "iterable")
    return value(x.is_list() || x.is_string() || (x.is_dict() && !x.dict()->is_namespace));
  if (name == "callable")
    return value(x.is_callable());
  if (name == "even" || name == "odd") {
    if (!x.is_int())
      fail(line, "the test '" + name + "' needs an integer, got " + type_name(x));
    const auto v = std::get<std::int64_t>(x.v);
    return value((v % 2 == 0) == (name == "even"));
  }
  if (name == "divisibleby") {
    const auto d = as_int(defined(arg(a, 0, "num", line, "divisibleby"), line));
    if (d == 0)
      fail(line, "divisibleby(0)");
    return value(as_int(defined(x, line)) % d == 0);
  }
  if (name == "lower" || name == "upper") {
    const auto s = py_str(x);
    return value(s == change_case(s, name == "upper"));
  }
  if (name == "eq" || name == "equalto" || name == "==")
    return value(equal(x, other()));
  if (name == "ne" || name == "!=")
    return value(!equal(x, other()));
  if (name == "lt" || name == "lessthan" || name == "<")
    return value(less(x, other(), line));
  if (name == "gt" || name == "greaterthan" || name == ">")
    return value(less(other(), x, line));
  if (name == "le" || name == "<=")
    return value(!less(other(), x, line));
  if (name == "ge" || name == ">=")
    return value(!less(x, other(), line));
  if (name == "sameas") {
    const auto& o = other();
    if (x.is_list() || x.is_dict())
      return value(x.v.index() == o.v.index() && (x.is_list() ? x.list() == o.list() : x.dict() == o.dict()));
    return value(x.v.index() == o.v.index() && equal(x, o));
  }
  if (name == "in") {
    const auto& o = other();
    if (o.is_string())
      return value(x.is_string() && o.str().find(x.str()) != std::string::npos);
    for (const auto& v : iterate(o, line))
      if (equal(v, x))
        return value(true);
    return value(false);
  }
  fail(line, "unknown test '" + name + "'");
}

// ---------------------------------------------------------------- expressions

struct literal : expr {
  value v;
  value eval(interp&) const override { return v; }
};

struct name_ref : expr {
  std::string name;
  value eval(interp& in) const override { return in.lookup(name); }
};

struct list_lit : expr {
  std::vector<expr_ptr> items;
  bool tuple = false;
  value eval(interp& in) const override {
    std::vector<value> out;
    for (const auto& e : items)
      out.push_back(e->eval(in));
    return tuple ? make_tuple(std::move(out)) : make_list(std::move(out));
  }
};

struct dict_lit : expr {
  std::vector<std::pair<expr_ptr, expr_ptr>> items;
  value eval(interp& in) const override {
    auto d = std::make_shared<dict_t>();
    for (const auto& [k, v] : items) {
      const auto key = k->eval(in);
      if (!key.is_string())
        fail(line, "dictionary keys must be strings here, got " + type_name(key));
      d->set(key.str(), v->eval(in));
    }
    return value(d);
  }
};

struct get_attr : expr {
  expr_ptr obj;
  std::string name;
  value eval(interp& in) const override { return attr_of(obj->eval(in), name, line); }
};

struct get_item : expr {
  expr_ptr obj, key;
  value eval(interp& in) const override {
    const auto o = obj->eval(in);
    return item_of(o, key->eval(in), line);
  }
};

struct get_slice : expr {
  expr_ptr obj, start, stop, step; // null: not given
  value eval(interp& in) const override {
    const auto o = defined(obj->eval(in), line);
    const auto ev = [&](const expr_ptr& e) { return e ? e->eval(in) : value(none_t{}); };
    return slice_of(o, ev(start), ev(stop), ev(step), line);
  }
};

struct arg_exprs {
  std::vector<expr_ptr> positional;
  std::vector<std::pair<std::string, expr_ptr>> named;

  call_args eval(interp& in) const {
    call_args a;
    for (const auto& e : positional)
      a.positional.push_back(e->eval(in));
    for (const auto& [k, e] : named)
      a.named.emplace_back(k, e->eval(in));
    return a;
  }
};

struct call : expr {
  expr_ptr fn;
  arg_exprs args;
  value eval(interp& in) const override {
    const auto f = fn->eval(in);
    if (f.is_undefined())
      fail(line, std::get<undefined_t>(f.v).hint);
    if (!f.is_callable())
      fail(line, "'" + type_name(f) + "' object is not callable");
    auto a = args.eval(in);
    return std::get<callable_ptr>(f.v)->fn(a, line);
  }
};

struct filter_expr : expr {
  expr_ptr obj;
  std::string name;
  arg_exprs args;
  value eval(interp& in) const override {
    const auto x = obj->eval(in);
    auto a = args.eval(in);
    return apply_filter(name, x, a, line);
  }
};

struct test_expr : expr {
  expr_ptr obj;
  std::string name;
  arg_exprs args;
  bool negate = false;
  value eval(interp& in) const override {
    const auto x = obj->eval(in);
    auto a = args.eval(in);
    return value(truthy(apply_test(name, x, a, line)) != negate);
  }
};

struct not_expr : expr {
  expr_ptr e;
  value eval(interp& in) const override { return value(!truthy(e->eval(in))); }
};

struct neg_expr : expr {
  expr_ptr e;
  bool minus = true;
  value eval(interp& in) const override {
    const auto x = defined(e->eval(in), line);
    if (x.is_int() || x.is_bool())
      return value(minus ? checked_sub(0, as_int(x)) : as_int(x));
    if (x.is_real())
      return value(minus ? -std::get<double>(x.v) : std::get<double>(x.v));
    fail(line, "bad operand type for unary " + std::string(minus ? "-" : "+") + ": '" + type_name(x) + "'");
  }
};

struct logic_expr : expr {
  expr_ptr a, b;
  bool is_and = true;
  value eval(interp& in) const override {
    auto x = a->eval(in);
    if (truthy(x) != is_and)
      return x;
    return b->eval(in);
  }
};

struct cond_expr : expr {
  expr_ptr then, test, otherwise; // otherwise null: undefined
  value eval(interp& in) const override {
    if (truthy(test->eval(in)))
      return then->eval(in);
    return otherwise ? otherwise->eval(in) : value(undefined_t{"the conditional expression's else is undefined"});
  }
};

value binary(const std::string& op, const value& x, const value& y, int line) {
  if (op == "~")
    return value(py_str(x) + py_str(y));
  defined(x, line);
  defined(y, line);
  const auto type_error = [&]() -> value {
    fail(line, "unsupported operand type(s) for " + op + ": '" + type_name(x) + "' and '" + type_name(y) + "'");
  };
  if (op == "+") {
    if (x.is_string() && y.is_string())
      return value(x.str() + y.str());
    if (x.is_list() && y.is_list()) {
      auto xs = *x.list();
      xs.insert(xs.end(), y.list()->begin(), y.list()->end());
      return make_list(std::move(xs));
    }
  }
  if (op == "*") {
    const bool xs = x.is_string() || x.is_list();
    const bool ys = y.is_string() || y.is_list();
    if ((xs && (y.is_int() || y.is_bool())) || (ys && (x.is_int() || x.is_bool()))) {
      const auto& seq = xs ? x : y;
      const auto n = static_cast<std::size_t>(std::max<std::int64_t>(0, as_int(xs ? y : x)));
      // (Bounded before anything is made: a count past the bound, even of
      // an empty sequence, would take that many turns.)
      const auto size = seq.is_string() ? seq.str().size() : seq.list()->size();
      if (size == 0 || n == 0)
        return seq.is_string() ? value(std::string()) : make_list({});
      if (seq.is_string()) {
        if (n > (std::size_t{64} << 20) / size)
          fail(line, "a string repeated past 64 MiB");
        std::string out;
        out.reserve(size * n);
        for (std::size_t i = 0; i < n; ++i)
          out += seq.str();
        return value(std::move(out));
      }
      if (n > (std::size_t{1} << 20) / size)
        fail(line, "a list repeated past 1,048,576 items");
      std::vector<value> out;
      out.reserve(size * n);
      for (std::size_t i = 0; i < n; ++i)
        out.insert(out.end(), seq.list()->begin(), seq.list()->end());
      return make_list(std::move(out));
    }
  }
  if (op == "%" && x.is_string())
    fail(line, "string formatting with % is not supported; use ~ or format the parts");
  if (!x.is_number() || !y.is_number())
    return type_error();
  const bool real = x.is_real() || y.is_real();
  if (op == "/") {
    if (as_double(y) == 0)
      fail(line, "division by zero");
    return value(as_double(x) / as_double(y));
  }
  if (op == "**") {
    if (!real && as_int(y) >= 0) {
      // By squaring, each step checked.
      std::int64_t r = 1, base = as_int(x);
      for (auto e = as_int(y); e > 0; e >>= 1) {
        if (e & 1)
          r = checked_mul(r, base);
        if (e > 1)
          base = checked_mul(base, base);
      }
      return value(r);
    }
    return value(std::pow(as_double(x), as_double(y)));
  }
  if (real) {
    const double a = as_double(x), b = as_double(y);
    if (op == "+")
      return value(a + b);
    if (op == "-")
      return value(a - b);
    if (op == "*")
      return value(a * b);
    if (b == 0)
      fail(line, "float division by zero");
    if (op == "//")
      return value(std::floor(a / b));
    const double m = std::fmod(a, b);
    return value(m != 0 && ((m < 0) != (b < 0)) ? m + b : m);
  }
  const std::int64_t a = as_int(x), b = as_int(y);
  if (op == "+")
    return value(checked_add(a, b));
  if (op == "-")
    return value(checked_sub(a, b));
  if (op == "*")
    return value(checked_mul(a, b));
  if (b == 0)
    fail(line, "integer division or modulo by zero");
  if (b == -1)
    return value(op == "//" ? checked_sub(0, a) : std::int64_t{0});
  std::int64_t q = a / b, m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) {
    --q;
    m += b;
  }
  return value(op == "//" ? q : m);
}

struct binary_expr : expr {
  std::string op;
  expr_ptr a, b;
  value eval(interp& in) const override {
    const auto x = a->eval(in);
    return binary(op, x, b->eval(in), line);
  }
};

bool contains(const value& hay, const value& needle, int line) {
  if (hay.is_string()) {
    if (!needle.is_string())
      fail(line, "'in <string>' requires string as left operand, not " + type_name(needle));
    return hay.str().find(needle.str()) != std::string::npos;
  }
  if (hay.is_dict() && !hay.dict()->is_namespace)
    return needle.is_string() && hay.dict()->find(needle.str()) != nullptr;
  if (hay.is_list()) {
    for (const auto& v : *hay.list())
      if (equal(v, needle))
        return true;
    return false;
  }
  if (hay.is_undefined())
    fail(line, std::get<undefined_t>(hay.v).hint);
  fail(line, "argument of type '" + type_name(hay) + "' is not iterable");
}

struct compare_expr : expr {
  expr_ptr first;
  std::vector<std::pair<std::string, expr_ptr>> rest;
  value eval(interp& in) const override {
    auto x = first->eval(in);
    for (const auto& [op, e] : rest) {
      auto y = e->eval(in);
      bool ok = false;
      if (op == "==")
        ok = equal(x, y);
      else if (op == "!=")
        ok = !equal(x, y);
      else if (op == "in" || op == "not in")
        ok = contains(y, x, line) == (op == "in");
      else {
        defined(x, line);
        defined(y, line);
        ok = op == "<" ? less(x, y, line) : op == ">" ? less(y, x, line) : op == "<=" ? !less(y, x, line) : !less(x, y, line);
      }
      if (!ok)
        return value(false);
      x = std::move(y);
    }
    return value(true);
  }
};

// ---------------------------------------------------------------- statements

struct text_stmt : stmt {
  std::string text;
  void run(interp& in) const override { in.write(text, line); }
};

struct output_stmt : stmt {
  expr_ptr e;
  void run(interp& in) const override {
    const auto v = e->eval(in);
    in.write(py_str(v), line);
  }
};

struct if_stmt : stmt {
  std::vector<std::pair<expr_ptr, body>> branches;
  body otherwise;
  void run(interp& in) const override {
    for (const auto& [test, b] : branches)
      if (truthy(test->eval(in))) {
        in.run(b);
        return;
      }
    in.run(otherwise);
  }
};

/// Names a value is given to: one name, or several a sequence is unpacked
/// into.
struct target {
  std::vector<std::string> names;
  bool unpack = false;
  std::string ns_attr; ///< set ns.attr = ...: names[0] is the namespace

  void bind(interp& in, const value& v, int line) const {
    if (!ns_attr.empty()) {
      const auto ns = in.lookup(names[0]);
      if (!ns.is_dict() || !ns.dict()->is_namespace)
        fail(line, "cannot assign attribute on non-namespace object '" + names[0] + "'");
      ns.dict()->set(ns_attr, v);
      return;
    }
    if (!unpack) {
      in.assign(names[0], v);
      return;
    }
    const auto parts = iterate(defined(v, line), line);
    if (parts.size() != names.size())
      fail(line, "cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(names.size()) + " names");
    for (std::size_t i = 0; i < names.size(); ++i)
      in.assign(names[i], parts[i]);
  }
};

struct for_stmt : stmt {
  target tgt;
  expr_ptr iter;
  expr_ptr filter; // null: none
  body loop_body, otherwise;

  void run(interp& in) const override {
    const auto seq = iter->eval(in);
    auto items = iterate(seq, line);
    if (filter) {
      std::vector<value> kept;
      for (auto& x : items) {
        in.scopes.emplace_back();
        tgt.bind(in, x, line);
        const bool keep = truthy(filter->eval(in));
        in.scopes.pop_back();
        if (keep)
          kept.push_back(std::move(x));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      in.run(otherwise);
      return;
    }
    const auto n = static_cast<std::int64_t>(items.size());
    for (std::int64_t i = 0; i < n; ++i) {
      in.step(line);
      auto loop = std::make_shared<dict_t>();
      loop->is_loop = true;
      loop->items = {{"index", value(i + 1)},
                     {"index0", value(i)},
                     {"revindex", value(n - i)},
                     {"revindex0", value(n - i - 1)},
                     {"first", value(i == 0)},
                     {"last", value(i == n - 1)},
                     {"length", value(n)},
                     {"previtem", i > 0 ? items[static_cast<std::size_t>(i - 1)] : value(undefined_t{"there is no previous item"})},
                     {"nextitem", i + 1 < n ? items[static_cast<std::size_t>(i + 1)] : value(undefined_t{"there is no next item"})}};
      in.scopes.emplace_back();
      in.assign("loop", value(loop));
      tgt.bind(in, items[static_cast<std::size_t>(i)], line);
      in.run(loop_body);
      in.scopes.pop_back();
      const auto f = in.pending;
      in.pending = flow::normal;
      if (f == flow::break_)
        break;
    }
  }
};

struct set_stmt : stmt {
  target tgt;
  expr_ptr e;      // null: a block
  body captured;   // {% set x %}...{% endset %}
  void run(interp& in) const override {
    if (e) {
      tgt.bind(in, e->eval(in), line);
      return;
    }
    std::string text;
    auto* saved = in.out;
    in.out = &text;
    try {
      in.run(captured);
    } catch (...) {
      in.out = saved;
      throw;
    }
    in.out = saved;
    tgt.bind(in, value(std::move(text)), line);
  }
};

struct loop_control : stmt {
  flow f = flow::break_;
  void run(interp& in) const override { in.pending = f; }
};

struct macro_stmt : stmt {
  std::string name;
  std::vector<std::pair<std::string, expr_ptr>> params; // default null: required
  body macro_body;

  void run(interp& in) const override {
    const auto* self = this;
    // The macro sees the variables of where it is called (the template's
    // top level, in chat templates) and its own arguments.
    in.assign(name, bound(name, [self, &in](call_args& a, int l) -> value {
      if (a.positional.size() > self->params.size())
        fail(l, "macro '" + self->name + "' takes " + std::to_string(self->params.size()) + " arguments ("
                  + std::to_string(a.positional.size()) + " given)");
      if (++in.depth > in.lim.max_depth)
        fail(l, "macro calls nest deeper than " + std::to_string(in.lim.max_depth));
      std::map<std::string, value, std::less<>> scope;
      for (std::size_t i = 0; i < self->params.size(); ++i) {
        const std::string& pname = self->params[i].first;
        const expr_ptr& dflt = self->params[i].second;
        if (i < a.positional.size()) {
          scope[pname] = a.positional[i];
          continue;
        }
        const auto named = std::find_if(a.named.begin(), a.named.end(), [&](const auto& kv) { return kv.first == pname; });
        if (named != a.named.end())
          scope[pname] = named->second;
        else
          scope[pname] = dflt ? dflt->eval(in) : value(undefined_t{"'" + pname + "' is undefined"});
      }
      for (const auto& kv : a.named) {
        const std::string& k = kv.first;
        if (std::none_of(self->params.begin(), self->params.end(), [&](const auto& p) { return p.first == k; }))
          fail(l, "macro '" + self->name + "' takes no keyword argument '" + k + "'");
      }
      std::string text;
      auto* saved = in.out;
      in.out = &text;
      const auto saved_base = in.base;
      in.base = in.scopes.size();
      in.scopes.push_back(std::move(scope));
      const auto restore = [&] {
        in.scopes.pop_back();
        in.base = saved_base;
        in.out = saved;
        --in.depth;
      };
      try {
        in.run(self->macro_body);
      } catch (...) {
        restore();
        throw;
      }
      restore();
      in.pending = flow::normal;
      return value(std::move(text));
    }));
  }
};

// ---------------------------------------------------------------- parser

bool known_filter(std::string_view n) {
  static constexpr std::string_view names[]{
    "abs",   "capitalize", "count",   "d",     "default", "dictsort", "e",       "escape",     "first",      "float",
    "indent", "int",       "items",   "join",  "last",    "length",   "list",    "lower",      "map",        "max",
    "min",   "reject",     "rejectattr", "replace", "reverse", "safe", "select",  "selectattr", "sort",       "string",
    "sum",   "title",      "tojson",  "trim",  "unique",  "upper",    "wordcount"};
  return std::find(std::begin(names), std::end(names), n) != std::end(names);
}

bool known_test(std::string_view n) {
  static constexpr std::string_view names[]{
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "even", "false", "float", "ge", "greaterthan",
    "gt", "in", "integer", "iterable", "le", "lessthan", "lower", "lt", "mapping", "ne", "none", "number", "odd",
    "sameas", "sequence", "string", "true", "undefined", "upper", "==", "!=", "<", ">", "<=", ">="};
  return std::find(std::begin(names), std::end(names), n) != std::end(names);
}

/// A node of the tree, at its line.
template <class N>
std::unique_ptr<N> node(int line) {
  auto n = std::make_unique<N>();
  n->line = line;
  return n;
}

class parser {
public:
  explicit parser(std::vector<token> toks) : t_(std::move(toks)) {}

  body parse_template() {
    std::string end;
    auto b = parse_body({}, end);
    return b;
  }

private:
  const token& cur() const { return t_[i_]; }
  const token& peek(std::size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  bool at_op(std::string_view op) const { return cur().kind == tk::op && cur().text == op; }
  bool at_name(std::string_view n) const { return cur().kind == tk::name && cur().text == n; }
  void expect_op(std::string_view op) {
    if (!at_op(op))
      fail(cur().line, "expected '" + std::string(op) + "', got " + describe(cur()));
    ++i_;
  }
  std::string expect_name() {
    if (cur().kind != tk::name)
      fail(cur().line, "expected a name, got " + describe(cur()));
    return t_[i_++].text;
  }
  void expect_block_end() {
    if (cur().kind != tk::block_end)
      fail(cur().line, "expected the end of the tag (%}), got " + describe(cur()));
    ++i_;
  }
  static std::string describe(const token& t) {
    switch (t.kind) {
    case tk::name: return "'" + t.text + "'";
    case tk::op: return "'" + t.text + "'";
    case tk::string: return "a string";
    case tk::integer:
    case tk::real: return "a number";
    case tk::block_end: return "the end of the tag";
    case tk::var_end: return "the end of the expression";
    case tk::end: return "the end of the template";
    default: return "text";
    }
  }

  /// Statements up to a tag named in `ends` (left unread; its name in
  /// `end`), or the template's end when `ends` is empty.
  body parse_body(std::initializer_list<std::string_view> ends, std::string& end) {
    body out;
    while (true) {
      const auto& t = cur();
      if (t.kind == tk::end) {
        if (ends.size() != 0) {
          std::string names;
          for (auto e : ends)
            names += (names.empty() ? "" : " or ") + std::string(e);
          fail(t.line, "the template ends before {% " + names + " %}");
        }
        return out;
      }
      if (t.kind == tk::text) {
        auto s = std::make_unique<text_stmt>();
        s->line = t.line;
        s->text = t.text;
        out.push_back(std::move(s));
        ++i_;
        continue;
      }
      if (t.kind == tk::var_begin) {
        ++i_;
        auto s = std::make_unique<output_stmt>();
        s->line = t.line;
        s->e = parse_expr();
        if (cur().kind != tk::var_end)
          fail(cur().line, "expected the end of the expression (}}), got " + describe(cur()));
        ++i_;
        out.push_back(std::move(s));
        continue;
      }
      // A block tag.
      const int line = t.line;
      ++i_;
      if (cur().kind != tk::name)
        fail(line, "a tag must begin with its name, got " + describe(cur()));
      const auto tag = cur().text;
      if (std::find(ends.begin(), ends.end(), tag) != ends.end()) {
        end = tag;
        return out;
      }
      ++i_;
      out.push_back(parse_tag(tag, line));
    }
  }

  /// The statements up to one of `ends` and that closing tag itself; the
  /// tag's name in `end`.
  body parse_block(std::initializer_list<std::string_view> ends, std::string& end, bool named_end = false) {
    auto b = parse_body(ends, end);
    ++i_; // the closing tag's name
    if (named_end && cur().kind == tk::name)
      ++i_; // {% endmacro name %}
    expect_block_end();
    return b;
  }

  stmt_ptr parse_tag(const std::string& tag, int line) {
    const nesting guard(*this);
    std::string end;
    if (tag == "if") {
      auto s = node<if_stmt>(line);
      auto test = parse_expr();
      expect_block_end();
      while (true) {
        auto b = parse_body({"elif", "else", "endif"}, end);
        s->branches.emplace_back(std::move(test), std::move(b));
        ++i_; // the tag's name
        if (end == "elif") {
          test = parse_expr();
          expect_block_end();
          continue;
        }
        expect_block_end();
        if (end == "else")
          s->otherwise = parse_block({"endif"}, end);
        return s;
      }
    }
    if (tag == "for") {
      auto s = node<for_stmt>(line);
      s->tgt = parse_target(false);
      if (!at_name("in"))
        fail(cur().line, "expected 'in' in the for tag, got " + describe(cur()));
      ++i_;
      s->iter = parse_or(); // `if` here filters the items
      if (at_name("if")) {
        ++i_;
        s->filter = parse_or();
      }
      if (at_name("recursive"))
        fail(cur().line, "recursive for loops are not supported");
      expect_block_end();
      s->loop_body = parse_block({"else", "endfor"}, end);
      if (end == "else")
        s->otherwise = parse_block({"endfor"}, end);
      return s;
    }
    if (tag == "set") {
      auto s = node<set_stmt>(line);
      s->tgt = parse_target(true);
      if (at_op("=")) {
        ++i_;
        s->e = parse_tuple_or_expr();
        expect_block_end();
        return s;
      }
      if (s->tgt.unpack || !s->tgt.ns_attr.empty())
        fail(line, "a {% set %} block assigns one name");
      expect_block_end();
      s->captured = parse_block({"endset"}, end);
      return s;
    }
    if (tag == "macro") {
      auto s = node<macro_stmt>(line);
      s->name = expect_name();
      expect_op("(");
      while (!at_op(")")) {
        auto pname = expect_name();
        expr_ptr dflt;
        if (at_op("=")) {
          ++i_;
          dflt = parse_expr();
        }
        s->params.emplace_back(std::move(pname), std::move(dflt));
        if (!at_op(","))
          break;
        ++i_;
      }
      expect_op(")");
      expect_block_end();
      s->macro_body = parse_block({"endmacro"}, end, true);
      return s;
    }
    if (tag == "break" || tag == "continue") {
      auto s = node<loop_control>(line);
      s->f = tag == "break" ? flow::break_ : flow::continue_;
      expect_block_end();
      return s;
    }
    if (tag == "generation") {
      // transformers' marker of the assistant's text (for training masks):
      // its body renders as it is.
      expect_block_end();
      auto s = node<if_stmt>(line);
      auto yes = std::make_unique<literal>();
      yes->v = value(true);
      s->branches.emplace_back(std::move(yes), parse_block({"endgeneration"}, end));
      return s;
    }
    fail(line, "unknown or unsupported tag '" + tag + "'");
  }

  /// A for or set target: a name, names separated by commas (unpacking),
  /// or (set only) ns.attr.
  target parse_target(bool allow_attr) {
    target tg;
    const bool paren = at_op("(");
    if (paren)
      ++i_;
    tg.names.push_back(expect_name());
    if (allow_attr && at_op(".")) {
      ++i_;
      tg.ns_attr = expect_name();
      return tg;
    }
    while (at_op(",")) {
      ++i_;
      tg.unpack = true;
      tg.names.push_back(expect_name());
    }
    if (paren)
      expect_op(")");
    return tg;
  }

  /// `a, b` in a set: a list of the values.
  expr_ptr parse_tuple_or_expr() {
    const int line = cur().line;
    auto first = parse_expr();
    if (!at_op(","))
      return first;
    auto l = node<list_lit>(line);
    l->tuple = true;
    l->items.push_back(std::move(first));
    while (at_op(",")) {
      ++i_;
      if (cur().kind == tk::block_end)
        break;
      l->items.push_back(parse_expr());
    }
    return l;
  }

  /// Counts the nesting of what is being read; refuses past max_nesting.
  struct nesting {
    parser& p;
    explicit nesting(parser& of) : p(of) {
      if (++p.depth_ > max_nesting)
        fail(p.cur().line, "the template nests deeper than " + std::to_string(max_nesting) + " levels");
    }
    ~nesting() { --p.depth_; }
    nesting(const nesting&) = delete;
    nesting& operator=(const nesting&) = delete;
  };

  expr_ptr parse_expr() {
    const nesting guard(*this);
    auto e = parse_or();
    while (at_name("if")) {
      const int line = cur().line;
      ++i_;
      auto c = node<cond_expr>(line);
      c->then = std::move(e);
      c->test = parse_or();
      if (at_name("else")) {
        ++i_;
        c->otherwise = parse_expr();
      }
      e = std::move(c);
    }
    return e;
  }

  expr_ptr parse_or() { return parse_logic(false); }
  expr_ptr parse_and() { return parse_logic(true); }

  /// `a or b or ...` (over and-chains), or `a and b and ...` (over nots).
  expr_ptr parse_logic(bool is_and) {
    const auto operand = [&] { return is_and ? parse_not() : parse_and(); };
    auto e = operand();
    while (at_name(is_and ? "and" : "or")) {
      const int line = cur().line;
      ++i_;
      auto l = node<logic_expr>(line);
      l->is_and = is_and;
      l->a = std::move(e);
      l->b = operand();
      e = std::move(l);
    }
    return e;
  }

  expr_ptr parse_not() {
    if (at_name("not")) {
      const int line = cur().line;
      ++i_;
      auto n = node<not_expr>(line);
      n->e = parse_not();
      return n;
    }
    return parse_compare();
  }

  expr_ptr parse_compare() {
    const int line = cur().line;
    auto e = parse_math1();
    std::vector<std::pair<std::string, expr_ptr>> rest;
    while (true) {
      std::string op;
      if (cur().kind == tk::op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">"
                                   || cur().text == "<=" || cur().text == ">=")) {
        op = cur().text;
        ++i_;
      } else if (at_name("in")) {
        op = "in";
        ++i_;
      } else if (at_name("not") && peek().kind == tk::name && peek().text == "in") {
        op = "not in";
        i_ += 2;
      } else {
        break;
      }
      rest.emplace_back(op, parse_math1());
    }
    if (rest.empty())
      return e;
    auto c = node<compare_expr>(line);
    c->first = std::move(e);
    c->rest = std::move(rest);
    return c;
  }

  expr_ptr make_binary(std::string op, expr_ptr a, expr_ptr b, int line) {
    auto x = node<binary_expr>(line);
    x->op = std::move(op);
    x->a = std::move(a);
    x->b = std::move(b);
    return x;
  }

  expr_ptr parse_math1() {
    auto e = parse_concat();
    while (at_op("+") || at_op("-")) {
      const auto op = cur().text;
      const int line = cur().line;
      ++i_;
      e = make_binary(op, std::move(e), parse_concat(), line);
    }
    return e;
  }

  expr_ptr parse_concat() {
    auto e = parse_math2();
    while (at_op("~")) {
      const int line = cur().line;
      ++i_;
      e = make_binary("~", std::move(e), parse_math2(), line);
    }
    return e;
  }

  expr_ptr parse_math2() {
    auto e = parse_pow();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const auto op = cur().text;
      const int line = cur().line;
      ++i_;
      e = make_binary(op, std::move(e), parse_pow(), line);
    }
    return e;
  }

  expr_ptr parse_pow() {
    auto e = parse_unary(true);
    while (at_op("**")) {
      const int line = cur().line;
      ++i_;
      e = make_binary("**", std::move(e), parse_unary(true), line);
    }
    return e;
  }

  expr_ptr parse_unary(bool with_filter) {
    const nesting guard(*this);
    const int line = cur().line;
    expr_ptr e;
    if (at_op("-") || at_op("+")) {
      const bool minus = cur().text == "-";
      ++i_;
      auto n = node<neg_expr>(line);
      n->minus = minus;
      n->e = parse_unary(false);
      e = std::move(n);
    } else {
      e = parse_postfix(parse_primary());
    }
    if (with_filter)
      e = parse_filters(std::move(e));
    return e;
  }

  expr_ptr parse_primary() {
    const auto& t = cur();
    const int line = t.line;
    if (t.kind == tk::string) {
      // Adjacent strings join, as in Python.
      std::string s;
      while (cur().kind == tk::string)
        s += t_[i_++].text;
      auto l = node<literal>(line);
      l->v = value(std::move(s));
      return l;
    }
    if (t.kind == tk::integer || t.kind == tk::real) {
      auto l = node<literal>(line);
      if (t.kind == tk::integer) {
        std::int64_t v = 0;
        const auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
        if (r.ec != std::errc())
          fail(line, "integer " + t.text + " is out of range");
        l->v = value(v);
      } else {
        l->v = value(std::stod(t.text));
      }
      ++i_;
      return l;
    }
    if (t.kind == tk::name) {
      ++i_;
      auto l = node<literal>(line);
      if (t.text == "true" || t.text == "True")
        l->v = value(true);
      else if (t.text == "false" || t.text == "False")
        l->v = value(false);
      else if (t.text == "none" || t.text == "None")
        l->v = value(none_t{});
      else {
        auto n = node<name_ref>(line);
        n->name = t.text;
        return n;
      }
      return l;
    }
    if (at_op("(")) {
      ++i_;
      auto e = parse_expr();
      if (at_op(",")) {
        auto l = node<list_lit>(line);
        l->tuple = true;
        l->items.push_back(std::move(e));
        while (at_op(",")) {
          ++i_;
          if (at_op(")"))
            break;
          l->items.push_back(parse_expr());
        }
        e = std::move(l);
      }
      expect_op(")");
      return e;
    }
    if (at_op("[")) {
      ++i_;
      auto l = node<list_lit>(line);
      while (!at_op("]")) {
        l->items.push_back(parse_expr());
        if (!at_op(","))
          break;
        ++i_;
      }
      expect_op("]");
      return l;
    }
    if (at_op("{")) {
      ++i_;
      auto d = node<dict_lit>(line);
      while (!at_op("}")) {
        auto k = parse_expr();
        expect_op(":");
        d->items.emplace_back(std::move(k), parse_expr());
        if (!at_op(","))
          break;
        ++i_;
      }
      expect_op("}");
      return d;
    }
    fail(line, "unexpected " + describe(t) + " in an expression");
  }

  arg_exprs parse_call_args() {
    arg_exprs a;
    expect_op("(");
    while (!at_op(")")) {
      if (cur().kind == tk::name && peek().kind == tk::op && peek().text == "=") {
        auto key = cur().text;
        i_ += 2;
        a.named.emplace_back(std::move(key), parse_expr());
      } else {
        if (!a.named.empty())
          fail(cur().line, "a positional argument follows a keyword argument");
        a.positional.push_back(parse_expr());
      }
      if (!at_op(","))
        break;
      ++i_;
    }
    expect_op(")");
    return a;
  }

  expr_ptr parse_call(expr_ptr fn, int line) {
    auto c = node<call>(line);
    c->fn = std::move(fn);
    c->args = parse_call_args();
    return c;
  }

  expr_ptr parse_postfix(expr_ptr e) {
    while (true) {
      const int line = cur().line;
      if (at_op(".")) {
        ++i_;
        auto g = node<get_attr>(line);
        g->obj = std::move(e);
        if (cur().kind == tk::integer) {
          auto k = node<get_item>(line);
          k->obj = std::move(g->obj);
          auto lit = std::make_unique<literal>();
          lit->v = value(std::int64_t{std::stoll(cur().text)});
          ++i_;
          k->key = std::move(lit);
          e = std::move(k);
          continue;
        }
        g->name = expect_name();
        e = std::move(g);
      } else if (at_op("[")) {
        ++i_;
        expr_ptr a, b, c;
        bool sliced = false;
        if (!at_op(":"))
          a = parse_expr();
        if (at_op(":")) {
          sliced = true;
          ++i_;
          if (!at_op("]") && !at_op(":"))
            b = parse_expr();
          if (at_op(":")) {
            ++i_;
            if (!at_op("]"))
              c = parse_expr();
          }
        }
        expect_op("]");
        if (sliced) {
          auto s = node<get_slice>(line);
          s->obj = std::move(e);
          s->start = std::move(a);
          s->stop = std::move(b);
          s->step = std::move(c);
          e = std::move(s);
        } else {
          auto k = node<get_item>(line);
          k->obj = std::move(e);
          k->key = std::move(a);
          e = std::move(k);
        }
      } else if (at_op("(")) {
        e = parse_call(std::move(e), line);
      } else {
        return e;
      }
    }
  }

  expr_ptr parse_filters(expr_ptr e) {
    while (true) {
      const int line = cur().line;
      if (at_op("|")) {
        ++i_;
        auto f = node<filter_expr>(line);
        f->obj = std::move(e);
        f->name = expect_name();
        if (!known_filter(f->name))
          fail(line, "unknown filter '" + f->name + "'");
        if (at_op("("))
          f->args = parse_call_args();
        e = std::move(f);
      } else if (at_name("is")) {
        ++i_;
        auto t = node<test_expr>(line);
        t->obj = std::move(e);
        if (at_name("not")) {
          t->negate = true;
          ++i_;
        }
        if (cur().kind == tk::name)
          t->name = t_[i_++].text;
        else if (cur().kind == tk::op && (cur().text == "==" || cur().text == "!=" || cur().text == "<"
                                          || cur().text == ">" || cur().text == "<=" || cur().text == ">="))
          t->name = t_[i_++].text;
        else
          fail(line, "expected a test's name after 'is', got " + describe(cur()));
        if (!known_test(t->name))
          fail(line, "unknown test '" + t->name + "'");
        if (at_op("(")) {
          t->args = parse_call_args();
        } else if ((cur().kind == tk::name || cur().kind == tk::string || cur().kind == tk::integer
                    || cur().kind == tk::real || at_op("[") || at_op("{"))
                   && !at_name("else") && !at_name("or") && !at_name("and") && !at_name("if") && !at_name("in")
                   && !at_name("is") && !at_name("not")) {
          t->args.positional.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(t);
      } else if (at_op("(")) {
        e = parse_call(std::move(e), line);
      } else {
        return e;
      }
    }
  }

  std::vector<token> t_;
  std::size_t i_ = 0;
  int depth_ = 0;
};

// ---------------------------------------------------------------- globals

std::string strftime_utc(const std::string& fmt, double now) {
  const auto secs = static_cast<std::time_t>(now);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  std::string out(256, '\0');
  const auto n = std::strftime(out.data(), out.size(), fmt.c_str(), &tm);
  if (n == 0 && !fmt.empty())
    return {};
  out.resize(n);
  return out;
}

void add_globals(interp& in, std::map<std::string, value, std::less<>>& g) {
  g["raise_exception"] = bound("raise_exception", [](call_args& a, int line) -> value {
    fail(line, "the chat template refused the request: "
                 + (a.positional.empty() ? std::string("(no message)") : py_str(a.positional[0])));
  });
  g["namespace"] = bound("namespace", [](call_args& a, int line) {
    auto d = std::make_shared<dict_t>();
    d->is_namespace = true;
    for (const auto& p : a.positional) {
      if (!p.is_dict())
        fail(line, "namespace() takes keyword arguments or a mapping");
      for (const auto& [k, v] : p.dict()->items)
        d->set(k, v);
    }
    for (const auto& [k, v] : a.named)
      d->set(k, v);
    return value(d);
  });
  g["range"] = bound("range", [](call_args& a, int line) {
    check_args(a, 3, {}, line, "range");
    if (a.positional.empty())
      fail(line, "range expected at least 1 argument, got 0");
    for (const auto& p : a.positional)
      if (!p.is_int() && !p.is_bool())
        fail(line, "range() takes integers, got " + type_name(p));
    std::int64_t start = 0, stop = 0, step = 1;
    if (a.positional.size() == 1) {
      stop = as_int(a.positional[0]);
    } else {
      start = as_int(a.positional[0]);
      stop = as_int(a.positional[1]);
      if (a.positional.size() == 3)
        step = as_int(a.positional[2]);
    }
    if (step == 0)
      fail(line, "range() arg 3 must not be zero");
    std::vector<value> out;
    for (auto i = start; step > 0 ? i < stop : i > stop;) {
      if (out.size() >= 100'000)
        fail(line, "range() is limited to 100000 items");
      out.emplace_back(i);
      if (__builtin_add_overflow(i, step, &i))
        break; // past the end of the 64-bit range, so past stop
    }
    return make_list(std::move(out));
  });
  g["dict"] = bound("dict", [](call_args& a, int line) {
    check_args(a, 0, {}, line, "dict");
    auto d = std::make_shared<dict_t>();
    for (const auto& [k, v] : a.named)
      d->set(k, v);
    return value(d);
  });
  const double now = in.now;
  g["strftime_now"] = bound("strftime_now", [now](call_args& a, int line) {
    check_args(a, 1, {}, line, "strftime_now");
    const auto fmt = need_string(arg(a, 0, "format", line, "strftime_now"), line, "strftime_now()'s format");
    return value(strftime_utc(fmt, now));
  });
}

} // namespace

struct program::impl {
  body top;
};

program::program(std::string_view source) {
  // As Jinja2 reads a template: every line break is "\n", and one at the
  // very end is dropped (keep_trailing_newline is off).
  std::string text;
  text.reserve(source.size());
  for (std::size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      text += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n')
        ++k;
    } else {
      text += source[k];
    }
  }
  if (!text.empty() && text.back() == '\n')
    text.pop_back();
  auto i = std::make_shared<impl>();
  try {
    i->top = parser(lexer(text).run()).parse_template();
  } catch (const error&) {
    throw;
  } catch (const std::exception& e) { // a number literal out of range, say
    throw error(std::string("chat template: ") + e.what());
  }
  impl_ = std::move(i);
}

std::string program::render(const nlohmann::ordered_json& vars, const limits& lim, double now) const {
  if (!vars.is_object())
    throw error("chat template: the variables must be a JSON object");
  if (now < 0)
    now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string out;
  interp in(lim, now, &out);
  in.scopes.emplace_back();
  add_globals(in, in.scopes.back());
  in.scopes.emplace_back();
  for (const auto& [k, v] : vars.items())
    in.scopes.back()[k] = from_json(v);
  try {
    in.run(impl_->top);
  } catch (const error&) {
    throw;
  } catch (const std::exception& e) {
    throw error(std::string("chat template: ") + e.what());
  }
  return out;
}

} // namespace troupe::jinja
