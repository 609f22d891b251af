#include "runtime/json_schema.hpp"

#include "runtime/json_schema_merge.hpp"
#include "runtime/json_value_text.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <atomic>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>

namespace troupe {

namespace {

using namespace json_text;

using json = nlohmann::json;

std::uint64_t next_schema_id() {
  static std::atomic<std::uint64_t> ids{1};
  return ids.fetch_add(1, std::memory_order_relaxed);
}


/// The bytes between the quotes of `name` written as a JSON string.
std::string written_name(const std::string& name) {
  const auto s = json(name).dump(-1, ' ', false, json::error_handler_t::strict);
  return s.substr(1, s.size() - 2);
}

/// A number times 1e18 as the text number_value reads.
std::string scaled_text(json_schema::scaled_decimal x) {
  const bool negative = x < 0;
  std::string digits;
  for (auto v = negative ? -x : x; v > 0; v /= 10)
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(v % 10)));
  return (negative ? "-" : "") + (digits.empty() ? std::string("0") : digits) + "e-18";
}

/// The strings `p` matches (each as item_value's text) into `out`, if
/// fewer than `limit`; false if it matches `limit` or more. A walk by
/// length over the characters each beginning may take next, which stops
/// once `limit` matches, or `limit` beginnings of one length (each goes on
/// to a match of its own), are found.
bool pattern_strings(const json_pattern& p, std::size_t limit, std::vector<std::string>& out) {
  std::vector<std::string> found;
  std::vector<std::pair<json_pattern::states, std::string>> level{{p.start(), "s"}};
  // A pattern whose matches lie farther apart than this is taken as
  // matching many.
  constexpr int most_lengths = 4096;
  for (int length = 0; !level.empty(); ++length) {
    if (length == most_lengths)
      return false;
    std::vector<std::pair<json_pattern::states, std::string>> next;
    for (const auto& [at, text] : level) {
      if (p.accepts(at))
        found.push_back(text);
      // The characters `at` may take, by halving the code points' range.
      std::vector<std::pair<char32_t, char32_t>> ranges = {{0xE000, 0x10FFFF}, {0, 0xD7FF}};
      while (!ranges.empty() && next.size() < limit) {
        const auto [lo, hi] = ranges.back();
        ranges.pop_back();
        if (!p.may_take(at, lo, hi))
          continue;
        if (lo < hi) {
          const char32_t mid = lo + (hi - lo) / 2;
          ranges.emplace_back(mid + 1, hi);
          ranges.emplace_back(lo, mid);
          continue;
        }
        auto longer = text;
        put_utf8(longer, lo);
        next.emplace_back(p.step(at, lo), std::move(longer));
      }
    }
    if (found.size() >= limit || next.size() >= limit)
      return false;
    level = std::move(next);
  }
  out.insert(out.end(), found.begin(), found.end());
  return true;
}

constexpr std::string_view keywords[] = {"type",      "properties", "required",  "additionalProperties",
                                         "minProperties", "maxProperties",
                                         "items",     "prefixItems", "additionalItems", "minItems",   "maxItems",
                                         "minLength",
                                         "maxLength", "minimum",    "maximum",   "exclusiveMinimum", "multipleOf",
                                         "exclusiveMaximum", "format", "pattern", "enum", "const",
                                         "anyOf",     "oneOf",      "allOf",      "$ref", "propertyNames",
                                         "uniqueItems", "patternProperties", "dependentRequired", "dependencies"};
/// The keywords a propertyNames schema (and those it leads to) may use.
constexpr std::string_view name_keywords[] = {"type",  "pattern", "minLength", "maxLength", "format", "enum",
                                              "const", "anyOf",   "oneOf",     "allOf",     "$ref"};

template <std::size_t N>
bool among(const std::string_view (&set)[N], std::string_view k) {
  return std::find(std::begin(set), std::end(set), k) != std::end(set);
}

} // namespace

class json_schema::compiler {
public:
  compiler(const json& doc, json_schema& schema)
      : doc_(doc), schema_(schema), nodes_(schema.nodes_), patterns_(schema.patterns_) {}

  /// The node of the schema at `path` (a JSON pointer into the document),
  /// made once however often it is referred to.
  std::uint32_t at(const std::string& path) {
    if (const auto it = made_.find(path); it != made_.end())
      return it->second;
    const json* s = nullptr;
    try {
      s = &doc_.at(json::json_pointer(path));
    } catch (const json::exception&) {
      fail(path, "refers to nothing in the schema");
    }
    if (nodes_.size() >= max_nodes)
      fail(path, "makes the schema larger than " + std::to_string(max_nodes) + " schemas");
    const auto i = static_cast<std::uint32_t>(nodes_.size());
    nodes_.emplace_back();
    made_.emplace(path, i);
    auto n = build(*s, path);
    nodes_[i] = std::move(n);
    return i;
  }

  /// The oneOf schemas' paths, and the node made of a path.
  const std::vector<std::string>& one_ofs() const noexcept { return one_of_; }
  /// The paths of the schemas with "uniqueItems": true.
  const std::vector<std::string>& uniques() const noexcept { return unique_; }
  std::uint32_t made(const std::string& path) const { return made_.at(path); }

  [[noreturn]] static void fail(const std::string& path, const std::string& what) {
    throw std::invalid_argument("the schema at \"" + (path.empty() ? std::string("#") : "#" + path) + "\" " + what);
  }

private:
  static std::uint32_t count(const json& v, const std::string& path, const char* keyword) {
    if (!v.is_number_unsigned() || v.get<std::uint64_t>() > 0xFFFFFFFEu)
      fail(path, std::string("has \"") + keyword + "\" " + v.dump() + "; it must be a non-negative integer");
    return static_cast<std::uint32_t>(v.get<std::uint64_t>());
  }

  /// A pair of counts: `low` and `high` as the schema gives them, low <= high.
  static void bounds(const json& s, const std::string& path, const char* low_word, const char* high_word,
                     std::uint32_t& low, std::uint32_t& high) {
    if (const auto m = s.find(low_word); m != s.end())
      low = count(*m, path, low_word);
    if (const auto m = s.find(high_word); m != s.end())
      high = count(*m, path, high_word);
    if (low > high)
      fail(path, std::string("has ") + low_word + " " + std::to_string(low) + " above " + high_word + " "
                   + std::to_string(high));
  }

  /// minimum, maximum and their exclusive forms: on a node whose numbers
  /// are integers, the least and greatest integer they leave; on one that
  /// takes other numbers, the least and greatest multiple of 1e-18.
  static void number_bounds(const json& s, const std::string& path, node& n) {
    constexpr double most = 999'999'999'999'999'999.0; // 18 digits
    bool any = false;
    double low = -most, high = most;
    for (const char* word : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      const auto v = s.find(word);
      if (v == s.end())
        continue;
      if (!v->is_number())
        fail(path, std::string("has \"") + word + "\" " + v->dump() + "; it must be a number");
      any = true;
      const double x = v->get<double>();
      const std::string_view w = word;
      if (w == "minimum") {
        low = std::max(low, std::ceil(x));
        n.number_low = std::max(n.number_low, scaled(*v, true));
      } else if (w == "exclusiveMinimum") {
        low = std::max(low, std::floor(x) + 1);
        n.number_low = std::max(n.number_low, scaled(*v, false) + 1);
      } else if (w == "maximum") {
        high = std::min(high, std::floor(x));
        n.number_high = std::min(n.number_high, scaled(*v, false));
      } else {
        high = std::min(high, std::ceil(x) - 1);
        n.number_high = std::min(n.number_high, scaled(*v, true) - 1);
      }
    }
    if (const auto m = s.find("multipleOf"); m != s.end()) {
      if (!m->is_number() || m->get<double>() <= 0)
        fail(path, "has \"multipleOf\" " + m->dump() + "; it must be a number above 0");
      const auto scaled_up = scaled(*m, true);
      if (scaled_up != scaled(*m, false) || scaled_up >= scaled_decimal_most)
        fail(path, "has \"multipleOf\" " + m->dump() + "; Troupe takes one of at most 18 digits after the point, "
                     "below 1e18");
      any = true;
      n.number_multiple = scaled_up;
      // An integer is a multiple of p / 10^18 when it is one of p / gcd(p, 10^18).
      const auto whole = scaled_up / gcd(scaled_up, pow10(18));
      n.multiple = static_cast<std::int64_t>(std::min<scaled_decimal>(whole, scaled_decimal_most / pow10(18)));
    }
    if (!any)
      return;
    // The least multiple from `low` on, below 0 too.
    const auto first_multiple = [](auto low, auto m) { return low >= 0 ? (low + m - 1) / m * m : -(-low / m * m); };
    if (n.types & t_number) {
      if (n.number_low > n.number_high || n.number_low >= scaled_decimal_most || n.number_high <= -scaled_decimal_most
          || (n.number_multiple != 0 && first_multiple(n.number_low, n.number_multiple) > n.number_high))
        fail(path, "has bounds that no number of at most 18 digits lies within");
      n.number_bounded = true;
      return;
    }
    if (!(n.types & t_integer))
      fail(path, "has a minimum, maximum or \"multipleOf\", which bound numbers: Troupe takes them beside \"type\": "
                 "\"number\" or \"integer\"");
    if (low > high)
      fail(path, "has bounds that no integer of at most 18 digits lies within");
    n.minimum = static_cast<std::int64_t>(std::max(low, -most));
    n.maximum = static_cast<std::int64_t>(std::min(high, most));
    if (first_multiple(n.minimum, n.multiple) > n.maximum)
      fail(path, "has bounds that no integer of at most 18 digits lies within");
    n.bounded = true;
  }

  /// A JSON number times 1e18, rounded up or down to an integer, from its
  /// shortest decimal text (as the schema's author wrote it: 0.1 is a
  /// tenth); past +-1e36, +-1e36.
  static scaled_decimal scaled(const json& v, bool up) {
    const auto d = decimal_of(v.dump());
    const auto& digits = d.digits;
    const bool negative = d.negative;
    if (digits.empty())
      return 0;
    // (a double's exponent: within an int)
    int exponent = static_cast<int>(d.exponent);
    exponent += 18;
    if (static_cast<int>(digits.size()) + exponent > 36)
      return negative ? -scaled_decimal_most : scaled_decimal_most;
    // The digits that stay (those before the scaled point), and whether any
    // dropped after it was not 0.
    const int keep = static_cast<int>(digits.size()) + std::min(exponent, 0);
    scaled_decimal m = 0;
    for (int k = 0; k < keep; ++k)
      m = m * 10 + (digits[static_cast<std::size_t>(k)] - '0');
    for (int k = 0; k < exponent; ++k)
      m *= 10;
    const bool dropped = keep < static_cast<int>(digits.size())
                         && digits.find_first_not_of('0', static_cast<std::size_t>(std::max(keep, 0)))
                              != std::string::npos;
    if (!negative)
      return m + (up && dropped ? 1 : 0);
    return -m - (!up && dropped ? 1 : 0);
  }

  static std::uint8_t type_of(const json& t, const std::string& path) {
    static const std::map<std::string, std::uint8_t, std::less<>> names = {
      {"object", t_object}, {"array", t_array},     {"string", t_string}, {"number", t_number},
      {"integer", t_integer}, {"boolean", t_boolean}, {"null", t_null},
    };
    const auto one = [&](const json& v) -> std::uint8_t {
      const auto it = v.is_string() ? names.find(v.get<std::string>()) : names.end();
      if (it == names.end())
        fail(path, "has \"type\" " + v.dump()
                     + "; a type is \"object\", \"array\", \"string\", \"number\", \"integer\", \"boolean\" or "
                       "\"null\"");
      return it->second;
    };
    if (!t.is_array())
      return one(t);
    if (t.empty())
      fail(path, "has an empty \"type\" list: no value would do");
    std::uint8_t bits = 0;
    for (const auto& v : t)
      bits |= one(v);
    return bits;
  }

  node build(const json& s, const std::string& path) {
    node n;
    if (s.is_boolean()) {
      if (!s.get<bool>()) {
        // No value: a property so is never given (allOf's merge makes
        // these); the top level so, or an item, leaves no output.
        if (path.empty())
          fail(path, "is false: no value would do");
        n.types = 0;
      }
      return n; // true: any value
    }
    if (!s.is_object())
      fail(path, "is " + std::string(s.type_name()) + "; a schema is an object or a boolean");
    std::vector<std::string_view> present;
    for (const auto& [k, v] : s.items()) {
      if (is_annotation(k))
        continue;
      if (!among(keywords, k))
        fail(path, "has \"" + k
                     + "\", which Troupe does not enforce; it takes type, properties, required, "
                       "additionalProperties, minProperties, maxProperties, items, prefixItems, additionalItems, minItems, maxItems, minLength, "
                       "maxLength, minimum, maximum, multipleOf, "
                       "exclusiveMinimum, exclusiveMaximum, format (date, time, date-time, duration, uuid, email, hostname, ipv4, ipv6, uri, uri-reference, json-pointer, byte; password, binary), "
                       "pattern, enum, const, anyOf, oneOf (of alternatives no value matches two of), allOf (several "
                       "merged into one), $ref, propertyNames, uniqueItems (of scalar items), patternProperties and "
                       "dependentRequired");
      present.push_back(*std::find(std::begin(keywords), std::end(keywords), k));
    }
    const auto has = [&](std::string_view k) { return std::find(present.begin(), present.end(), k) != present.end(); };
    const auto alone = [&](std::string_view k, std::initializer_list<std::string_view> beside) {
      for (const auto p : present)
        if (p != k && std::find(beside.begin(), beside.end(), p) == beside.end())
          fail(path, "has \"" + std::string(k) + "\" beside \"" + std::string(p)
                       + "\"; Troupe takes it only with annotations around it");
    };

    if (has("$ref")) {
      alone("$ref", {});
      const auto& ref = s["$ref"];
      if (!ref.is_string() || ref.get<std::string>().empty() || ref.get<std::string>()[0] != '#')
        fail(path, "has \"$ref\" " + ref.dump() + "; Troupe follows only references into the same schema (\"#...\")");
      n.any_of.push_back(at(ref.get<std::string>().substr(1)));
      return n;
    }
    if (has("allOf")) {
      alone("allOf", {});
      const auto& all = s["allOf"];
      if (!all.is_array() || all.size() != 1)
        fail(path, "has \"allOf\" " + all.dump().substr(0, 80) + "; it must be a non-empty list of schemas");
      n.any_of.push_back(at(path + "/allOf/0"));
      return n;
    }
    for (const char* word : {"anyOf", "oneOf"}) {
      if (!has(word))
        continue;
      alone(word, {});
      const auto& any = s[word];
      if (!any.is_array() || any.empty())
        fail(path, "has \"" + std::string(word) + "\" " + any.dump() + "; it must be a non-empty list of schemas");
      for (std::size_t i = 0; i < any.size(); ++i)
        n.any_of.push_back(at(path + "/" + word + "/" + std::to_string(i)));
      if (std::string_view(word) == "oneOf")
        one_of_.push_back(path); // its alternatives checked apart once all is made
      return n;
    }
    if (has("enum") || has("const")) {
      const bool is_enum = has("enum");
      alone(is_enum ? "enum" : "const", {"type"});
      const auto& values = is_enum ? s["enum"] : s["const"];
      if (is_enum && (!values.is_array() || values.empty()))
        fail(path, "has \"enum\" " + values.dump() + "; it must be a non-empty list of values");
      const auto types = has("type") ? type_of(s["type"], path) : std::uint8_t{t_any};
      const auto add = [&](const json& v) {
        const std::uint8_t t = v.is_object()            ? t_object
                               : v.is_array()           ? t_array
                               : v.is_string()          ? t_string
                               : v.is_boolean()         ? t_boolean
                               : v.is_null()            ? t_null
                               : v.is_number_integer()  ? t_integer | t_number
                                                        : t_number;
        if ((t & types) == 0)
          fail(path, "has the value " + v.dump() + " whose type its \"type\" refuses");
        auto text = v.dump(-1, ' ', false, json::error_handler_t::strict);
        if (std::find(n.literals.begin(), n.literals.end(), text) == n.literals.end())
          n.literals.push_back(std::move(text));
      };
      if (is_enum)
        for (const auto& v : values)
          add(v);
      else
        add(values);
      return n;
    }

    const bool object_words = has("properties") || has("required") || has("additionalProperties")
                              || has("minProperties") || has("maxProperties") || has("propertyNames");
    const bool array_words = has("items") || has("prefixItems") || has("additionalItems") || has("minItems")
                             || has("maxItems") || has("uniqueItems");
    const bool string_words = has("minLength") || has("maxLength") || has("format") || has("pattern");
    if (has("type"))
      n.types = type_of(s["type"], path);
    else if (object_words || array_words || string_words)
      n.types = static_cast<std::uint8_t>((object_words ? t_object : 0) | (array_words ? t_array : 0)
                                          | (string_words ? t_string : 0));
    if (n.types & t_integer && n.types & t_number)
      n.types = static_cast<std::uint8_t>(n.types & ~t_integer); // any number covers the integers

    if (const auto p = s.find("properties"); p != s.end()) {
      if (!p->is_object())
        fail(path, "has \"properties\" " + p->dump() + "; it must be an object of schemas");
      if (p->size() > max_properties)
        fail(path, "has " + std::to_string(p->size()) + " properties; Troupe takes at most "
                     + std::to_string(max_properties) + " in one object");
      for (const auto& [name, sub] : p->items())
        n.properties.emplace_back(written_name(name), at(path + "/properties/" + pointer_token(name)));
    }
    if (const auto a = s.find("additionalProperties"); a != s.end()) {
      if (a->is_boolean())
        n.additional = a->get<bool>() ? 0 : none;
      else
        n.additional = at(path + "/additionalProperties");
    }
    if (const auto pp = s.find("patternProperties"); pp != s.end()) {
      if (!pp->is_object())
        fail(path, "has \"patternProperties\" " + pp->dump().substr(0, 80)
                     + "; it must be an object of patterns and the schemas of the values of names they match");
      if (pp->size() > max_pattern_properties)
        fail(path, "has " + std::to_string(pp->size()) + " patternProperties; Troupe takes at most "
                     + std::to_string(max_pattern_properties) + " in one object");
      for (const auto& [pattern, sub] : pp->items()) {
        const auto at_pattern = path + "/patternProperties/" + pointer_token(pattern);
        try {
          patterns_.push_back(std::make_shared<const json_pattern>(pattern));
        } catch (const std::invalid_argument& e) {
          fail(at_pattern, std::string("is the schema of a pattern Troupe cannot read: ") + e.what());
        }
        const auto index = static_cast<std::uint32_t>(patterns_.size() - 1);
        n.pattern_properties.emplace_back(index, at(at_pattern));
      }
    }
    if (has("propertyNames"))
      property_names(path, n);
    // The index of property `name` (a JSON value) among n's; none.
    const auto property = [&](const json& name) -> std::size_t {
      const auto it = name.is_string() ? std::find_if(n.properties.begin(), n.properties.end(),
                                                      [&](const auto& e) {
                                                        return e.first == written_name(name.get<std::string>());
                                                      })
                                       : n.properties.end();
      return it == n.properties.end() ? none : static_cast<std::size_t>(it - n.properties.begin());
    };
    if (const auto r = s.find("required"); r != s.end()) {
      if (!r->is_array())
        fail(path, "has \"required\" " + r->dump() + "; it must be a list of property names");
      for (const auto& name : *r) {
        const auto i = property(name);
        if (i == none)
          fail(path, "requires " + name.dump() + ", which is not among its \"properties\""
                       + std::string(has("propertyNames") && n.names == none
                                       ? " (nor among the names its \"propertyNames\" lists, where it allows them)"
                                       : ""));
        n.required |= std::uint64_t{1} << i;
      }
    }
    // dependentRequired, and dependencies (before draft 2019-09) of name
    // lists: a property given makes others required.
    for (const char* word : {"dependentRequired", "dependencies"}) {
      const auto d = s.find(word);
      if (d == s.end())
        continue;
      const auto at = path + "/" + word;
      if (!d->is_object())
        fail(at, "is " + d->dump().substr(0, 80) + "; it must be an object of property names and the names they require");
      const auto index = [&](const json& name, const std::string& where) {
        const auto i = property(name);
        if (i == none)
          fail(where, "names " + name.dump() + ", which is not among its \"properties\"; Troupe holds what "
                      "properties require among those");
        return i;
      };
      for (const auto& [name, list] : d->items()) {
        const auto where = at + "/" + pointer_token(name);
        if (!list.is_array())
          fail(where, std::string(std::string_view(word) == "dependencies"
                                    ? "is a schema: Troupe holds dependencies of name lists (dependentSchemas' form "
                                      "is not enforced)"
                                    : "must be a list of property names"));
        const auto i = index(json(name), where);
        n.dependent.resize(n.properties.size(), 0);
        for (const auto& other : list)
          n.dependent[i] |= std::uint64_t{1} << index(other, where);
      }
    }
    // Through each other: what a property makes required makes more
    // required in turn; and what a required property makes required is.
    for (bool changed = !n.dependent.empty(); changed;) {
      changed = false;
      for (auto& d : n.dependent) {
        const auto more = json_schema::required_now(n, d) & ~n.required;
        changed |= (d | more) != d;
        d |= more;
      }
      const auto required = json_schema::required_now(n, n.required);
      changed |= required != n.required;
      n.required = required;
    }
    // Items: the first by position (prefixItems; before draft 2020-12,
    // items as a list), the rest of one schema (items; beside a list,
    // additionalItems); false: no more.
    const auto items = s.find("items");
    const auto prefix = s.find("prefixItems");
    const bool listed = items != s.end() && items->is_array();
    if (prefix != s.end() && (!prefix->is_array() || prefix->empty()))
      fail(path, "has \"prefixItems\" " + prefix->dump() + "; it must be a non-empty list of schemas");
    if (prefix != s.end() && listed)
      fail(path, "has \"prefixItems\" beside \"items\" as a list: give the first items' schemas once");
    if (has("additionalItems") && !listed)
      fail(path, "has \"additionalItems\" without \"items\" as a list of the first items' schemas");
    const char* first_word = listed ? "items" : "prefixItems";
    if (listed || prefix != s.end())
      for (std::size_t k = 0; k < (listed ? *items : *prefix).size(); ++k)
        n.prefix_items.push_back(at(path + "/" + first_word + "/" + std::to_string(k)));
    const char* rest_word = listed ? "additionalItems" : "items";
    bool no_more = false;
    if (const auto rest = s.find(rest_word); rest != s.end()) {
      if (rest->is_boolean())
        no_more = !rest->get<bool>();
      else
        n.items = at(path + "/" + rest_word);
    }
    bounds(s, path, "minProperties", "maxProperties", n.min_names, n.max_names);
    if (n.additional == none && n.min_names > n.properties.size())
      fail(path, "has minProperties " + std::to_string(n.min_names) + " but takes only its "
                   + std::to_string(n.properties.size()) + " properties");
    if (static_cast<std::uint32_t>(std::popcount(n.required)) > n.max_names)
      fail(path, "requires more properties than its maxProperties " + std::to_string(n.max_names));
    bounds(s, path, "minItems", "maxItems", n.min_items, n.max_items);
    if (const auto u = s.find("uniqueItems"); u != s.end()) {
      if (!u->is_boolean())
        fail(path, "has \"uniqueItems\" " + u->dump() + "; it must be true or false");
      if (u->get<bool>() && (n.types & t_array)) {
        n.unique = true;
        unique_.push_back(path); // its items checked once all is made
      }
    }
    if (no_more) {
      n.max_items = std::min<std::uint32_t>(n.max_items, static_cast<std::uint32_t>(n.prefix_items.size()));
      if (n.min_items > n.max_items)
        fail(path, "has minItems " + std::to_string(n.min_items) + " but takes no more than "
                     + std::to_string(n.max_items) + " items (\"" + rest_word + "\": false)");
    }
    bounds(s, path, "minLength", "maxLength", n.min_length, n.max_length);
    number_bounds(s, path, n);
    if (const auto f = s.find("format"); f != s.end()) {
      static const std::map<std::string, string_format, std::less<>> formats = {
        {"date", string_format::date}, {"time", string_format::time},
        {"date-time", string_format::date_time}, {"uuid", string_format::uuid}};
      // Formats held as a pattern of the whole string.
      static const std::map<std::string, std::string, std::less<>> patterned = {
        // A dot-atom local part (RFC 5322, no quoted forms), "@", a host
        // name of at least two labels.
        {"email", "^[A-Za-z0-9!#$%&'*+/=?^_{|}~-]+(\\.[A-Za-z0-9!#$%&'*+/=?^_{|}~-]+)*@" + host_label
                    + "(\\." + host_label + ")+$"},
        // RFC 1123: labels of 1 to 63 letters, digits and inner hyphens.
        {"hostname", "^" + host_label + "(\\." + host_label + ")*$"},
        {"ipv4", "^(" + octet + "\\.){3}" + octet + "$"},
        // RFC 3986's absolute form: a scheme, ':', then characters a URI
        // may hold (a percent sign only as a whole escape).
        {"uri", "^[A-Za-z][A-Za-z0-9+.-]*:" + uri_chars + "*$"},
        // A reference: the same characters, the scheme left out or not.
        {"uri-reference", "^" + uri_chars + "*$"},
        {"ipv6", "^" + ipv6() + "$"},
        // ISO 8601's duration, the seconds with a fraction or not
        // (Pydantic writes a timedelta so: "P1DT2H0.5S").
        {"duration", "^P(" + duration_date + "(" + duration_time + ")?|" + duration_time + "|[0-9]+W)$"},
        // RFC 6901: "/"-led tokens, "~" only as "~0" or "~1".
        {"json-pointer", "^(/([^/~]|~[01])*)*$"},
        // OpenAPI's base64 ("byte"): whole groups of four, "=" padding.
        {"byte", "^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"}};
      // Formats that say nothing of the text (OpenAPI's annotations).
      static const std::set<std::string, std::less<>> any_text = {"password", "binary"};
      const auto name = f->is_string() ? f->get<std::string>() : std::string();
      const auto it = formats.find(name);
      const auto as_pattern = patterned.find(name);
      if (it == formats.end() && as_pattern == patterned.end() && !any_text.contains(name))
        fail(path, "has \"format\" " + f->dump() + "; Troupe writes the formats " + format_names);
      if (!(n.types & t_string))
        fail(path, "has a \"format\" but takes no strings");
      if (any_text.contains(name)) {
        // (any string: minLength, maxLength and pattern still hold it)
      } else if (it != formats.end()) {
        n.format = it->second;
      } else {
        if (has("pattern"))
          fail(path, "has \"format\" " + f->dump() + " beside \"pattern\"; Troupe holds " + name
                       + " as a pattern, and one pattern to a string");
        patterns_.push_back(std::make_shared<const json_pattern>(as_pattern->second));
        n.pattern = static_cast<std::uint32_t>(patterns_.size() - 1);
      }
    }
    if (const auto p = s.find("pattern"); p != s.end()) {
      if (!p->is_string())
        fail(path, "has \"pattern\" " + p->dump() + "; it must be a regular expression in a string");
      if (!(n.types & t_string))
        fail(path, "has a \"pattern\" but takes no strings");
      if (has("format"))
        fail(path, "has \"pattern\" beside \"format\"; Troupe takes one of the two on a string");
      try {
        patterns_.push_back(std::make_shared<const json_pattern>(p->get<std::string>()));
      } catch (const std::invalid_argument& e) {
        fail(path, "has \"pattern\" " + p->dump() + ": " + e.what());
      }
      n.pattern = static_cast<std::uint32_t>(patterns_.size() - 1);
    }
    if (n.pattern != none && (n.min_length > 0 || n.max_length != 0xFFFFFFFFu)) {
      const auto& p = *patterns_[n.pattern];
      if (!p.reaches_accept(p.start(), n.min_length, n.max_length))
        fail(path, "has a pattern no string of " + std::to_string(n.min_length) + " to "
                     + (n.max_length == 0xFFFFFFFFu ? std::string("any number of") : std::to_string(n.max_length))
                     + " characters matches: no value would do");
    }
    return n;
  }

  /// propertyNames at `path`'s schema `n` (its properties and
  /// additionalProperties read): the names it lists become `n`'s
  /// properties; one of strings stays as n.names. Refuses a form Troupe
  /// does not hold names to, and a property of `n`'s whose name it refuses.
  void property_names(const std::string& path, node& n) {
    const auto where = path + "/propertyNames";
    std::vector<std::string> walked;
    name_words(where, walked);
    const auto names = at(where); // (what it leads to is whole: name_words let nothing lead back)
    std::vector<std::string> listed;     // names an enum or const gives, as written
    std::vector<std::uint32_t> strings;  // string nodes
    bool any = false;                    // a string node that takes any name
    for (const auto& [a, lit] : schema_.find_alternatives(names)) {
      const auto& alt = nodes_[a];
      if (lit != none) {
        const auto& text = alt.literals[lit];
        if (text[0] != '"')
          fail(where, "has the name " + text + ", which is no string: property names are strings");
        auto name = text.substr(1, text.size() - 2);
        if (std::find(listed.begin(), listed.end(), name) == listed.end())
          listed.push_back(std::move(name));
      } else if (alt.types & t_string) {
        any |= alt.format == string_format::none && alt.pattern == none && alt.min_length == 0
               && alt.max_length == 0xFFFFFFFFu;
        strings.push_back(a);
      }
    }
    if (any)
      return; // every name will do
    if (listed.empty() && strings.empty())
      fail(where, "takes no strings, and property names are strings");
    if (!listed.empty() && !strings.empty())
      fail(where, "mixes names it lists (enum, const) with strings of a pattern, length or format; Troupe takes "
                  "one kind of the two in propertyNames");
    // Strings none of which can be longer than "": as if "" were listed
    // (or nothing), so that a name never begins that could only close on
    // one given before.
    if (!strings.empty() && std::none_of(strings.begin(), strings.end(), [&](std::uint32_t a) {
          return schema_machine::string_longer(schema_, a);
        })) {
      if (schema_machine::name_allowed(schema_, strings, ""))
        listed.emplace_back();
      strings.clear();
    }
    const auto allowed = [&](const std::string& written) {
      return strings.empty() ? std::find(listed.begin(), listed.end(), written) != listed.end()
                             : schema_machine::name_allowed(schema_, strings, written);
    };
    for (const auto& [name, value] : n.properties)
      if (!allowed(name))
        fail(path, "has the property \"" + name + "\", a name its \"propertyNames\" refuses: it could never be "
                   "written");
    if (!strings.empty()) {
      n.names = names;
      return;
    }
    // Listed names: each is a property, of additionalProperties' schema
    // where it is not one already; no other name may come.
    if (!n.pattern_properties.empty())
      fail(path, "has \"propertyNames\" that lists names beside \"patternProperties\"; Troupe takes one of the two "
                 "with listed names");
    if (n.additional != none)
      for (auto& name : listed) {
        if (std::find_if(n.properties.begin(), n.properties.end(), [&](const auto& e) { return e.first == name; })
            != n.properties.end())
          continue;
        if (n.properties.size() >= max_properties)
          fail(path, "has \"propertyNames\" listing names that make more than " + std::to_string(max_properties)
                       + " properties; Troupe takes at most " + std::to_string(max_properties) + " in one object");
        n.properties.emplace_back(std::move(name), n.additional);
      }
    n.additional = none;
  }

  /// Refuses, naming it and where, a keyword Troupe does not hold property
  /// names to in the propertyNames schema at `path` or one it leads to.
  void name_words(const std::string& path, std::vector<std::string>& walked) const {
    if (std::find(walked.begin(), walked.end(), path) != walked.end())
      return;
    walked.push_back(path);
    const json* s = nullptr;
    try {
      s = &doc_.at(json::json_pointer(path));
    } catch (const json::exception&) {
      return; // at() says so
    }
    if (!s->is_object())
      return; // build() says what a schema must be
    for (const auto& [k, v] : s->items()) {
      if (is_annotation(k))
        continue;
      if (!among(name_keywords, k))
        fail(path, "has \"" + k
                     + "\" in a propertyNames schema, where Troupe does not enforce it: it holds property names to "
                       "type, pattern, minLength, maxLength, format, enum, const, anyOf, oneOf, allOf and $ref");
      if (k == "$ref" && v.is_string() && v.get<std::string>().starts_with("#"))
        name_words(v.get<std::string>().substr(1), walked);
      if ((k == "anyOf" || k == "oneOf" || k == "allOf") && v.is_array())
        for (std::size_t i = 0; i < v.size(); ++i)
          name_words(path + "/" + k + "/" + std::to_string(i), walked);
    }
  }

  static inline const std::string host_label = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
  static inline const std::string octet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
  static inline const std::string uri_chars = "([A-Za-z0-9._~!$&'()*+,;=:@/?#\\[\\]-]|%[0-9A-Fa-f]{2})";
  // A duration's date and time: each of their parts in order, any of them
  // left out but not all (ISO 8601's, which RFC 3339's grammar narrows).
  static inline const std::string duration_date = "[0-9]+Y([0-9]+M)?([0-9]+D)?|[0-9]+M([0-9]+D)?|[0-9]+D";
  static inline const std::string duration_seconds = "[0-9]+(\\.[0-9]+)?S";
  static inline const std::string duration_time = "T([0-9]+H([0-9]+M)?(" + duration_seconds + ")?|[0-9]+M("
                                                  + duration_seconds + ")?|" + duration_seconds + ")";
  static inline const std::string format_names =
    "date, time, date-time, duration, uuid, email, hostname, ipv4, ipv6, uri, uri-reference, json-pointer, byte, "
    "password and binary";
  /// RFC 4291's text forms (RFC 3986's IPv6address): eight groups of 1 to
  /// 4 hex digits, or fewer around one "::", the last two as an IPv4
  /// address or not.
  static std::string ipv6() {
    const std::string h = "[0-9A-Fa-f]{1,4}";
    const std::string ls32 = "(" + h + ":" + h + "|(" + octet + "\\.){3}" + octet + ")";
    // Up to `k` groups before the "::".
    const auto before = [&](int k) { return "((" + h + ":){0," + std::to_string(k - 1) + "}" + h + ")?"; };
    const auto groups = [&](int k) { return "(" + h + ":){" + std::to_string(k) + "}"; };
    return "(" + groups(6) + ls32 + "|::" + groups(5) + ls32 + "|" + before(1) + "::" + groups(4) + ls32 + "|"
           + before(2) + "::" + groups(3) + ls32 + "|" + before(3) + "::" + groups(2) + ls32 + "|" + before(4)
           + "::" + h + ":" + ls32 + "|" + before(5) + "::" + ls32 + "|" + before(6) + "::" + h + "|" + before(7)
           + "::)";
  }

  const json& doc_;
  json_schema& schema_;
  std::vector<node>& nodes_;
  std::vector<std::shared_ptr<const json_pattern>>& patterns_;
  std::map<std::string, std::uint32_t> made_;
  std::vector<std::string> one_of_;
  std::vector<std::string> unique_;
};

std::shared_ptr<const json_schema> json_schema::compile(std::string_view text) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) { // a syntax error, or a number past a double's range
    throw std::invalid_argument(std::string("the schema is no JSON: ") + e.what());
  }
  try {
    merge_all_of(doc); // (throws as the compiler does)
  } catch (const json::exception& e) { // a keyword's value of a kind the merge did not expect
    throw std::invalid_argument(std::string("the schema has an allOf that cannot be merged: ") + e.what());
  }
  auto s = std::make_shared<json_schema>();
  s->nodes_.emplace_back(); // node 0: any value
  compiler c(doc, *s);
  s->root_ = c.at("");
  for (std::uint32_t i = 0; i < s->nodes_.size(); ++i)
    s->alternatives_.push_back(s->find_alternatives(i));
  for (std::uint32_t i = 1; i < s->nodes_.size(); ++i)
    if (!s->nodes_[i].any_of.empty() && s->alternatives(i).empty())
      throw std::invalid_argument("the schema has a $ref or anyOf that leads only back to itself: no value would do");
  // oneOf is held as anyOf, so each value must match one alternative at most.
  for (const auto& path : c.one_ofs()) {
    const auto& any = s->nodes_[c.made(path)].any_of;
    for (std::size_t i = 0; i < any.size(); ++i)
      for (std::size_t j = i + 1; j < any.size(); ++j)
        if (!s->apart(any[i], any[j]))
          compiler::fail(path, "has \"oneOf\" whose alternatives " + std::to_string(i) + " and " + std::to_string(j)
                                 + " may both match one value; Troupe enforces oneOf only where none can (alternatives "
                                   "of different types or values, or objects told apart by a required property of "
                                   "different const or enum values, as a discriminated union's): anyOf takes any match");
  }
  // uniqueItems: items of one schema, scalars, enough of them.
  for (const auto& path : c.uniques()) {
    const auto& n = s->nodes_[c.made(path)];
    if (!n.prefix_items.empty())
      compiler::fail(path, "has \"uniqueItems\" beside the first items' own schemas (prefixItems, or items as a list); "
                           "Troupe holds items unique where one schema (items) gives them all");
    for (const auto& [a, lit] : s->alternatives(n.items)) {
      const auto& alt = s->nodes_[a];
      if (lit == none ? (alt.types & (t_object | t_array)) != 0
                      : alt.literals[lit][0] == '{' || alt.literals[lit][0] == '[')
        compiler::fail(path, "has \"uniqueItems\": true, but its items may be objects or arrays; Troupe holds only "
                             "scalar items unique (strings, numbers, booleans, null)");
    }
    if (n.min_items > 1) {
      // (Past 65,536 items an array is longer than any output: enough.)
      if (const auto values = s->distinct_values(n.items, std::min<std::uint32_t>(n.min_items, 65'536));
          values < std::min<std::uint32_t>(n.min_items, 65'536))
        compiler::fail(path, "has \"uniqueItems\" and minItems " + std::to_string(n.min_items)
                               + ", but its items take only " + std::to_string(values) + " different values");
    }
  }
  for (const auto& [n, lit] : s->alternatives(s->root_)) {
    const auto& root = s->nodes_[n];
    const bool container = lit == none ? root.types != 0 && (root.types & ~(t_object | t_array)) == 0
                                       : root.literals[lit][0] == '{' || root.literals[lit][0] == '[';
    if (!container)
      compiler::fail("", "is not an object's or an array's: the output's top level must be one (\"type\": "
                         "\"object\" or \"array\"), whose close ends it");
  }
  s->measure_depths();
  if (!s->fits(s->root_, 0))
    throw std::invalid_argument(
      s->nodes_[s->root_].min_depth == unreachable
        ? std::string("the schema has no finite value: a required property or item has no value, or leads "
                    "back to itself")
        : "the schema's values nest deeper than " + std::to_string(json_machine::max_depth) + " levels");
  s->id_ = next_schema_id();
  return s;
}

void json_schema::measure_depths() {
  // Least fixed point from "unreachable": a node's depth follows from its
  // alternatives', required properties' and items' (recursion through a
  // required property never comes down from unreachable).
  const auto deeper = [](std::uint8_t d) -> std::uint8_t { return d >= unreachable - 1 ? unreachable : d + 1; };
  for (auto& n : nodes_) {
    n.literal_depth.clear();
    for (const auto& text : n.literals) {
      std::uint8_t depth = 0, most = 0;
      bool in_string = false, escaped = false;
      for (const char c : text) {
        if (in_string) {
          in_string = escaped || c != '"';
          escaped = !escaped && c == '\\';
        } else if (c == '"') {
          in_string = true;
        } else if (c == '{' || c == '[') {
          most = std::max(most, ++depth);
        } else if (c == '}' || c == ']') {
          --depth;
        }
      }
      n.literal_depth.push_back(most);
    }
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (auto& n : nodes_) {
      std::uint8_t least = unreachable, object = unreachable, array = unreachable;
      if (!n.any_of.empty()) {
        for (const auto a : n.any_of)
          least = std::min(least, nodes_[a].min_depth);
      } else if (!n.literals.empty()) {
        least = *std::min_element(n.literal_depth.begin(), n.literal_depth.end());
      } else {
        if (n.types & (t_string | t_number | t_integer | t_boolean | t_null))
          least = 0;
        if (n.types & t_object) {
          std::uint8_t inner = 0;
          std::vector<std::uint8_t> others; // the values minProperties may add
          for (std::size_t i = 0; i < n.properties.size(); ++i) {
            const auto d = nodes_[n.properties[i].second].min_depth;
            if (n.required >> i & 1)
              inner = std::max(inner, d);
            else
              others.push_back(d);
          }
          const auto given = static_cast<std::uint32_t>(std::popcount(n.required));
          if (n.min_names > given) {
            // The `more` least deep of the other properties and as many
            // additional ones as it takes.
            const std::size_t more = n.min_names - given;
            std::sort(others.begin(), others.end());
            std::uint8_t worst = unreachable;
            // Other names: additional ones', or the patterns' (the least deep).
            auto a = n.additional != none ? nodes_[n.additional].min_depth : unreachable;
            for (const auto& pp : n.pattern_properties)
              a = std::min(a, nodes_[pp.second].min_depth);
            if (a != unreachable) {
              const auto cheaper = static_cast<std::size_t>(std::lower_bound(others.begin(), others.end(), a) - others.begin());
              worst = cheaper >= more ? others[more - 1] : a;
            } else if (others.size() >= more) {
              worst = others[more - 1];
            }
            inner = std::max(inner, worst);
          }
          object = deeper(inner);
        }
        if (n.types & t_array) {
          std::uint8_t inner = 0; // the required items' deepest
          for (std::size_t i = 0; i < std::min<std::size_t>(n.min_items, n.prefix_items.size()); ++i)
            inner = std::max(inner, nodes_[n.prefix_items[i]].min_depth);
          if (n.min_items > n.prefix_items.size())
            inner = std::max(inner, nodes_[n.items].min_depth);
          array = n.min_items > 0 ? deeper(inner) : 1;
        }
        least = std::min({least, object, array});
      }
      if (least != n.min_depth || object != n.object_depth || array != n.array_depth) {
        n.min_depth = least;
        n.object_depth = object;
        n.array_depth = array;
        changed = true;
      }
    }
  }
}

std::size_t json_schema::distinct_values(std::uint32_t i, std::size_t limit) const {
  std::vector<std::string> values; // item_value's texts
  const auto add = [&](std::string v) {
    if (std::find(values.begin(), values.end(), v) == values.end())
      values.push_back(std::move(v));
  };
  for (const auto& [a, lit] : alternatives(i)) {
    const auto& n = nodes_[a];
    if (lit != none) {
      add(item_value(n.literals[lit]));
      continue;
    }
    if (n.types & t_boolean) {
      add("true");
      add("false");
    }
    if (n.types & t_null)
      add("null");
    if (n.types & t_number) {
      // Numbers of at most 18 digits, by the least step they are apart
      // (multipleOf, else 1e-18); unbounded: many.
      if (!n.number_bounded)
        return limit;
      const scaled_decimal step = n.number_multiple != 0 ? n.number_multiple : 1;
      const auto first = n.number_low >= 0 ? (n.number_low + step - 1) / step : -(-n.number_low / step);
      const auto last = n.number_high >= 0 ? n.number_high / step : -((-n.number_high + step - 1) / step);
      if (last - first + 1 >= static_cast<scaled_decimal>(limit))
        return limit;
      for (auto k = first; k <= last; ++k)
        add(number_value(scaled_text(k * step)));
    } else if (n.types & t_integer) {
      if (!n.bounded)
        return limit;
      const auto m = n.multiple;
      const auto first = n.minimum >= 0 ? (n.minimum + m - 1) / m : -(-n.minimum / m);
      const auto last = n.maximum >= 0 ? n.maximum / m : -((-n.maximum + m - 1) / m);
      if (last - first + 1 >= static_cast<std::int64_t>(limit))
        return limit;
      for (auto k = first; k <= last; ++k)
        add(number_value(std::to_string(k * m)));
    }
    if (n.types & t_string) {
      if (n.pattern != none) {
        std::vector<std::string> matches;
        if (!pattern_strings(*patterns_[n.pattern], limit, matches))
          return limit;
        for (auto& m : matches) {
          // (within the length bounds: "s" and the characters in UTF-8)
          const auto chars = static_cast<std::uint32_t>(
            std::count_if(m.begin() + 1, m.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
          if (chars >= n.min_length && chars <= n.max_length)
            add(std::move(m));
        }
      } else if (n.max_length == 0) {
        add("s");
      } else {
        return limit; // every length, or a format's many strings
      }
    }
    if (values.size() >= limit)
      return limit;
  }
  return values.size();
}

std::shared_ptr<const json_schema> json_schema_cache::get(const std::string& text) {
  if (const auto known = by_text_.find(text); known != by_text_.end())
    return known->second;
  auto schema = json_schema::compile(text);
  if (by_text_.size() >= capacity_)
    by_text_.clear();
  by_text_.emplace(text, schema);
  return schema;
}

std::shared_ptr<const json_schema> json_schema::any_object() {
  static const auto any = compile(R"({"type":"object"})");
  return any;
}

namespace {

/// The types a literal (compact JSON) is of.
std::uint8_t literal_types(const std::string& text) {
  using s = json_schema;
  switch (text[0]) {
  case '{':
    return s::t_object;
  case '[':
    return s::t_array;
  case '"':
    return s::t_string;
  case 't':
  case 'f':
    return s::t_boolean;
  case 'n':
    return s::t_null;
  default:
    return text.find_first_of(".eE") == std::string::npos ? s::t_number | s::t_integer : s::t_number;
  }
}

/// Types with every number's bits where any number's are (an integer is a
/// number, and a number may be an integer).
std::uint8_t numbers_as_one(std::uint8_t t) {
  using s = json_schema;
  return t & (s::t_number | s::t_integer) ? t | s::t_number | s::t_integer : t;
}

} // namespace

bool json_schema::apart(std::uint32_t a, std::uint32_t b, int depth) const {
  for (const auto& x : alternatives(a))
    for (const auto& y : alternatives(b))
      if (!apart(x, y, depth))
        return false;
  return true;
}

bool json_schema::apart(alternative x, alternative y, int depth) const {
  const auto& nx = nodes_[x.first];
  const auto& ny = nodes_[y.first];
  const auto tx = x.second == none ? nx.types : literal_types(nx.literals[x.second]);
  const auto ty = y.second == none ? ny.types : literal_types(ny.literals[y.second]);
  if ((numbers_as_one(tx) & numbers_as_one(ty)) == 0)
    return true;
  if (x.second != none && y.second != none)
    return nx.literals[x.second] != ny.literals[y.second];
  // Two object schemas: a property both require whose values are apart.
  if (x.second != none || y.second != none || tx != t_object || ty != t_object || depth >= 8)
    return false;
  for (std::size_t i = 0; i < nx.properties.size(); ++i) {
    if ((nx.required >> i & 1u) == 0)
      continue;
    for (std::size_t j = 0; j < ny.properties.size(); ++j)
      if ((ny.required >> j & 1u) != 0 && nx.properties[i].first == ny.properties[j].first
          && apart(nx.properties[i].second, ny.properties[j].second, depth + 1))
        return true;
  }
  return false;
}

std::vector<json_schema::alternative> json_schema::find_alternatives(std::uint32_t i) const {
  std::vector<alternative> out;
  std::vector<std::uint32_t> seen;
  // Depth-first through anyOf and $ref; a node met again adds nothing new
  // (a reference cycle with no type on it adds nothing at all).
  const auto visit = [&](const auto& self, std::uint32_t at) -> void {
    if (std::find(seen.begin(), seen.end(), at) != seen.end())
      return;
    seen.push_back(at);
    const auto& n = nodes_[at];
    if (!n.any_of.empty()) {
      for (const auto a : n.any_of)
        self(self, a);
    } else if (!n.literals.empty()) {
      for (std::uint32_t l = 0; l < n.literals.size(); ++l)
        out.emplace_back(at, l);
    } else {
      out.emplace_back(at, none);
    }
  };
  visit(visit, i);
  return out;
}

} // namespace troupe
