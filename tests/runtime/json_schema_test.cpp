// Output held to a JSON Schema (response_format json_schema): what the
// compiler refuses, and the machine against a validator of the same schema
// language written here over nlohmann (the oracle): it takes a whole text
// exactly when the oracle accepts its value, and a byte-by-byte walk through
// the bytes it allows never reaches a dead end and ends in a valid value.
#include "runtime/json_schema.hpp"
#include "runtime/json_trigger.hpp"

#include "messages/openai.hpp"

#include "tests/support/list_tokenizer.hpp"
#include "tests/support/wide.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <optional>
#include <random>
#include <regex>
#include <stdexcept>

namespace troupe {
namespace {

using json = nlohmann::json;

schema_machine machine(const std::string& schema) {
  return schema_machine(json_schema::compile(schema));
}

bool reads_whole(const std::string& schema, std::string_view text) {
  auto m = machine(schema);
  return m.feed(text) && m.complete();
}

std::string refusal(const std::string& schema) {
  try {
    (void)json_schema::compile(schema);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// -- the oracle ---------------------------------------------------------------------

/// The types schema `s` lists, or those its keywords imply; none: any.
std::vector<std::string> types_of(const json& s) {
  std::vector<std::string> types;
  if (s.contains("type")) {
    if (s["type"].is_array())
      for (const auto& t : s["type"])
        types.push_back(t);
    else
      types.push_back(s["type"]);
    return types;
  }
  if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")
      || s.contains("propertyNames"))
    types.push_back("object");
  if (s.contains("items") || s.contains("minItems") || s.contains("maxItems") || s.contains("uniqueItems"))
    types.push_back("array");
  if (s.contains("minLength") || s.contains("maxLength") || s.contains("format") || s.contains("pattern"))
    types.push_back("string");
  return types;
}

/// The formats, by regular expressions and a calendar (an oracle written
/// apart from the machine's).
bool formatted(const std::string& format, const std::string& x) {
  static const std::regex date(R"((\d{4})-(\d{2})-(\d{2}))");
  static const std::regex time(R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,9})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))");
  static const std::regex uuid(R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})");
  const auto is_date = [&](const std::string& t) {
    std::smatch m;
    if (!std::regex_match(t, m, date))
      return false;
    const int y = std::stoi(m[1]), mo = std::stoi(m[2]), d = std::stoi(m[3]);
    const bool leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    const int days[] = {31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return y >= 1000 && mo >= 1 && mo <= 12 && d >= 1 && d <= days[mo - 1];
  };
  if (format == "date")
    return is_date(x);
  if (format == "time")
    return std::regex_match(x, time);
  if (format == "date-time")
    return x.size() > 11 && x[10] == 'T' && is_date(x.substr(0, 10)) && std::regex_match(x.substr(11), time);
  return std::regex_match(x, uuid);
}

using testing::wide;

/// JSON Schema's pattern: an ECMA-262 search, here std::wregex's over code
/// points (its \s and \w are ASCII's: the test's patterns use them on
/// ASCII text only).
bool matches(const std::string& pattern, const std::string& x) {
  return std::regex_search(wide(x), std::wregex(wide(pattern), std::regex::ECMAScript));
}

bool valid(const json& doc, const json& s, const json& v) {
  if (s.is_boolean())
    return s.get<bool>();
  if (s.contains("$ref"))
    return valid(doc, doc.at(json::json_pointer(s["$ref"].get<std::string>().substr(1))), v);
  if (s.contains("allOf")) { // each, and what stands beside them
    for (const auto& a : s["allOf"])
      if (!valid(doc, a, v))
        return false;
    auto rest = s;
    rest.erase("allOf");
    return valid(doc, rest, v);
  }
  if (s.contains("anyOf")) {
    for (const auto& a : s["anyOf"])
      if (valid(doc, a, v))
        return true;
    return false;
  }
  if (s.contains("oneOf")) { // exactly one
    int matched = 0;
    for (const auto& a : s["oneOf"])
      matched += valid(doc, a, v);
    return matched == 1;
  }
  // Enum and const values compare as written (compact JSON).
  if (s.contains("enum")) {
    for (const auto& e : s["enum"])
      if (e.dump() == v.dump())
        return true;
    return false;
  }
  if (s.contains("const"))
    return s["const"].dump() == v.dump();
  const auto types = types_of(s);
  const auto is = [&](const char* t) { return types.empty() || std::find(types.begin(), types.end(), t) != types.end(); };
  if (v.is_object()) {
    if (!is("object"))
      return false;
    const auto props = s.value("properties", json::object());
    const auto patterned = s.value("patternProperties", json::object());
    for (const auto& [k, x] : v.items()) {
      bool named = props.contains(k);
      if (named && !valid(doc, props[k], x))
        return false;
      for (const auto& [p, ps] : patterned.items())
        if (matches(p, k)) {
          named = true;
          if (!valid(doc, ps, x))
            return false;
        }
      if (!named && s.contains("additionalProperties") && !valid(doc, s["additionalProperties"], x))
        return false;
    }
    for (const auto& r : s.value("required", json::array()))
      if (!v.contains(r.get<std::string>()))
        return false;
    for (const char* word : {"dependentRequired", "dependencies"}) {
      const auto deps = s.value(word, json::object());
      for (const auto& [given, needs] : deps.items())
        if (v.contains(given))
          for (const auto& r : needs)
            if (!v.contains(r.get<std::string>()))
              return false;
    }
    if (s.contains("propertyNames"))
      for (const auto& [k, x] : v.items())
        if (!valid(doc, s["propertyNames"], json(k)))
          return false;
    return v.size() >= s.value("minProperties", 0u) && v.size() <= s.value("maxProperties", 0xFFFFFFFFu);
  }
  if (v.is_array()) {
    if (!is("array") || v.size() < s.value("minItems", 0u) || v.size() > s.value("maxItems", 0xFFFFFFFFu))
      return false;
    // The first items by position (prefixItems, or items as a list), the
    // rest by items (additionalItems beside a list).
    const bool listed = s.contains("items") && s["items"].is_array();
    const json none = json::array();
    const json& prefix = listed ? s["items"] : s.contains("prefixItems") ? s["prefixItems"] : none;
    const json rest = s.value(listed ? "additionalItems" : "items", json(true));
    for (std::size_t k = 0; k < v.size(); ++k)
      if (!valid(doc, k < prefix.size() ? prefix[k] : rest, v[k]))
        return false;
    // uniqueItems: nlohmann compares numbers by value (1 == 1.0) and
    // strings by their characters.
    if (s.value("uniqueItems", false))
      for (std::size_t i = 0; i < v.size(); ++i)
        for (std::size_t j = i + 1; j < v.size(); ++j)
          if (v[i] == v[j])
            return false;
    return true;
  }
  if (v.is_string()) {
    std::size_t chars = 0; // code points
    for (const char c : v.get<std::string>())
      chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    return is("string") && chars >= s.value("minLength", 0u) && chars <= s.value("maxLength", 0xFFFFFFFFu)
           && (!s.contains("format") || formatted(s["format"], v.get<std::string>()))
           && (!s.contains("pattern") || matches(s["pattern"], v.get<std::string>()));
  }
  if (v.is_boolean())
    return is("boolean");
  if (v.is_null())
    return is("null");
  const auto x = v.get<double>();
  const bool within = x >= s.value("minimum", -1e300) && x <= s.value("maximum", 1e300)
                      && x > s.value("exclusiveMinimum", -1e300) && x < s.value("exclusiveMaximum", 1e300)
                      && (!s.contains("multipleOf") || std::fmod(x, s["multipleOf"].get<double>()) == 0);
  if (v.is_number_integer())
    return (is("integer") || is("number")) && within;
  return is("number") && within;
}

/// The names the machine holds to at most once in an object: the schema's
/// properties' and those its propertyNames list (enum, const).
std::vector<std::string> own_names(const json& doc) {
  std::vector<std::string> out;
  const auto listed = [&](const auto& self, const json& s, int depth) -> void {
    if (!s.is_object() || depth > 8)
      return;
    if (s.contains("$ref"))
      self(self, doc.at(json::json_pointer(s["$ref"].get<std::string>().substr(1))), depth + 1);
    for (const char* word : {"anyOf", "oneOf", "allOf"})
      for (const auto& a : s.value(word, json::array()))
        self(self, a, depth + 1);
    for (const auto& v : s.value("enum", json::array()))
      out.push_back(v.get<std::string>());
    if (s.contains("const"))
      out.push_back(s["const"].get<std::string>());
  };
  const auto collect = [&](const auto& self, const json& j) -> void {
    if (j.is_object()) {
      for (const auto& [k, v] : j.items()) {
        if (k == "properties")
          for (const auto& [name, sub] : v.items())
            out.push_back(name);
        if (k == "propertyNames")
          listed(listed, v, 0);
        self(self, v);
      }
    } else if (j.is_array()) {
      for (const auto& v : j)
        self(self, v);
    }
  };
  collect(collect, doc);
  return out;
}

/// Whether the oracle accepts `text`; nullopt for a number nlohmann cannot
/// hold (valid JSON it refuses), and for a name given twice that is not
/// one of the schema's own (the machine takes other names without looking
/// for repeats, the oracle's parser keeps only the last).
std::optional<bool> oracle(const std::string& schema, std::string_view text) {
  // JSON Schema leaves an object's duplicate names to the parser (nlohmann
  // keeps the last); the machine refuses repeats of its own names, as the
  // oracle here does.
  const auto own = own_names(json::parse(schema));
  std::vector<std::vector<std::string>> names;
  bool duplicate = false;
  bool other_duplicate = false;
  json v;
  try {
    v = json::parse(text, [&](int, json::parse_event_t e, json& parsed) {
      if (e == json::parse_event_t::object_start)
        names.emplace_back();
      else if (e == json::parse_event_t::object_end)
        names.pop_back();
      else if (e == json::parse_event_t::key) {
        auto& seen = names.back();
        const auto name = parsed.get<std::string>();
        if (std::find(seen.begin(), seen.end(), name) != seen.end())
          (std::find(own.begin(), own.end(), name) != own.end() ? duplicate : other_duplicate) = true;
        seen.push_back(name);
      }
      return true;
    });
  } catch (const json::parse_error&) {
    return false;
  } catch (const json::out_of_range&) {
    return std::nullopt;
  }
  if (duplicate)
    return false;
  if (other_duplicate)
    return std::nullopt;
  const auto doc = json::parse(schema);
  return v.is_object() && valid(doc, doc, v);
}

// propertyNames and uniqueItems as Pydantic writes them: dict[constr(pattern=...), int],
// set[constr(max_length=2)], set[conint(ge=0, le=20)]; dict[Color, float] (an enum's names
// by $ref), set[Color], set[bool | None]; names of a length beside a property of the
// schema's own, names in a format, a set of mixed scalars.
const std::string keyed = R"({"type":"object","properties":{
    "counts":{"type":"object","propertyNames":{"pattern":"^[a-c]{1,3}$","examples":["a","bc","cab"]},
      "additionalProperties":{"type":"integer"}},
    "tags":{"type":"array","items":{"type":"string","maxLength":2},"uniqueItems":true},
    "ids":{"type":"array","items":{"type":"integer","minimum":0,"maximum":20},"uniqueItems":true,"maxItems":5}},
  "required":["counts"],"additionalProperties":false})";
const std::string colored = R"({"$defs":{"Color":{"enum":["red","green","blue"],"title":"Color","type":"string"}},
  "type":"object","properties":{
    "by_color":{"type":"object","propertyNames":{"$ref":"#/$defs/Color"},"additionalProperties":{"type":"number"}},
    "colors":{"type":"array","items":{"$ref":"#/$defs/Color"},"uniqueItems":true},
    "flags":{"type":"array","items":{"anyOf":[{"type":"boolean"},{"type":"null"}]},"uniqueItems":true}},
  "required":["colors"],"additionalProperties":false})";
const std::string named = R"({"type":"object","properties":{
    "meta":{"type":"object","properties":{"id":{"type":"integer"}},"propertyNames":{"minLength":2,"maxLength":4},
      "additionalProperties":{"type":"string"}},
    "days":{"type":"object","propertyNames":{"format":"date"},"additionalProperties":{"type":"boolean"}},
    "mixed":{"type":"array","items":{"anyOf":[{"type":"string","maxLength":1},{"type":"integer","minimum":0,
      "maximum":3},{"const":"k"}]},"uniqueItems":true,"minItems":1}},
  "additionalProperties":false})";

// Schemas that use every keyword the compiler takes; their enum and const
// values are strings (a number's one compact spelling is the machine's rule
// the oracle does not know).
const std::vector<std::string>& schemas() {
  static const std::vector<std::string> all = {
    R"({"type":"object"})",
    R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},
        "required":["name","age"],"additionalProperties":false})",
    R"({"type":"object","properties":{"a":{"type":"number"},"ab":{"type":"boolean"},"b":{"type":["string","null"]}},
        "required":["ab"]})",
    R"({"type":"object","properties":{"tags":{"type":"array","items":{"enum":["x","xy","y"]},"minItems":1,"maxItems":3},
        "kind":{"const":"k"}},"required":["tags","kind"],"additionalProperties":{"type":"integer"}})",
    R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},
        "required":["v"],"additionalProperties":false}},"$ref":"#/$defs/node"})",
    R"({"anyOf":[{"type":"object","properties":{"t":{"const":"a"},"x":{"type":"integer"}},"required":["t","x"],"additionalProperties":false},
                 {"type":"object","properties":{"t":{"const":"b"},"y":{"type":"array","items":{"type":"string"}}},"required":["t"],"additionalProperties":false}]})",
    R"({"type":"object","title":"T","description":"d","properties":{"q":{"allOf":[{"type":"array","items":{"type":"object","properties":{"z":true}}}]},
        "e":{"type":"string","enum":["","a\"b","é"]}},"additionalProperties":false})",
    R"({"type":"object","properties":{"c":{"$ref":"#"},"v":{"type":"integer"},"l":{"type":"array","items":{"$ref":"#"}}},
        "additionalProperties":false})",
    R"({"type":"object","properties":{"age":{"type":"integer","minimum":18,"maximum":120},"t":{"type":"integer",
        "exclusiveMinimum":-40,"exclusiveMaximum":0},"n":{"type":["integer","null"],"minimum":7,"maximum":7}},
        "required":["age"],"additionalProperties":false})",
    // How many names: minProperties and maxProperties, with and without
    // other names.
    R"({"type":"object","properties":{"few":{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"null"},
        "c":{"type":"boolean"}},"required":["a"],"minProperties":2,"maxProperties":2,"additionalProperties":false},
        "many":{"minProperties":3,"additionalProperties":{"type":"integer"},"properties":{"k":{"const":"v"}}}},
        "required":["few"],"maxProperties":2})",
    // Tuples: prefixItems with the rest refused (Pydantic's tuple[int, str])
    // or of one schema; draft 7's items as a list with additionalItems.
    R"({"type":"object","properties":{"pt":{"type":"array","prefixItems":[{"type":"integer"},{"type":"string","maxLength":2}],
        "items":false,"minItems":1},"old":{"type":"array","items":[{"type":"boolean"},{"enum":["x","y"]}],
        "additionalItems":{"type":"null"}},"tail":{"prefixItems":[{"const":"a"}],"items":{"type":"integer"}}},
        "required":["pt"],"additionalProperties":false})",
    // A discriminated union (Pydantic's: oneOf of $refs, OpenAPI's
    // discriminator), and alternatives of different types.
    R"({"$defs":{"cat":{"type":"object","properties":{"pet":{"const":"cat"},"lives":{"type":"integer"}},"required":["pet"],
        "additionalProperties":false},"dog":{"type":"object","properties":{"pet":{"enum":["dog","puppy"]},"good":{"type":"boolean"}},
        "required":["pet","good"],"additionalProperties":false}},
        "type":"object","properties":{"animal":{"oneOf":[{"$ref":"#/$defs/cat"},{"$ref":"#/$defs/dog"}],
        "discriminator":{"propertyName":"pet"}},"id":{"oneOf":[{"type":"integer"},{"type":"string","maxLength":2},{"type":"null"}]}},
        "required":["animal"],"additionalProperties":false})",
    R"({"type":"object","properties":{"code":{"type":"string","minLength":2,"maxLength":3},"note":{"maxLength":1},
        "tag":{"anyOf":[{"type":"string","minLength":4},{"type":"string","maxLength":1}]}},"required":["code"]})",
    R"({"type":"object","properties":{"d":{"type":"string","format":"date"},"t":{"format":"time"},
        "at":{"format":"date-time"},"id":{"type":["string","null"],"format":"uuid"}},"required":["d"]})",
    R"({"type":"object","properties":{"zip":{"type":"string","pattern":"^[0-9]{5}(-[0-9]{4})?$","examples":["12345","00000-1234"]},
        "id":{"pattern":"^[A-Z]{2,3}_\\d+$","examples":["AB_1","XYZ_2026"]},
        "word":{"type":["string","null"],"pattern":"ab|^c","examples":["cat","tabby","ab"]},
        "tail":{"pattern":"é.?$","examples":["café","éx","té!"]}},"required":["zip","id"],"additionalProperties":false})",
    R"({"type":"object","properties":{"q":{"pattern":"^[\"\\\\/]+$","examples":["\"","\\/\""]},
        "ws":{"pattern":"^\\n\\t?(?:x|y)*$","examples":["\n","\n\txy"]},
        "u":{"pattern":"^\\u00e9[^a-z\\d]{0,2}$","examples":["é","éÉ!"]}},"additionalProperties":false})",
    keyed,
    colored,
    named,
    // patternProperties: names each pattern reads as they are written.
    R"({"type":"object","properties":{"name":{"type":"string"}},"patternProperties":{"^[a-k]+$":{"type":"integer"},)"
    R"("^y":{"type":"integer","minimum":0}},"additionalProperties":{"type":"boolean"},"maxProperties":4})",
    // A pattern and a length together.
    R"({"type":"object","properties":{"w":{"type":"string","pattern":"^(ab)+$|^x","minLength":2,"maxLength":5,)"
    R"("examples":["ab","abab","xy","x123"]}},"required":["w"],"additionalProperties":false})",
  };
  return all;
}

TEST(json_schema, refuses_what_it_cannot_enforce_and_says_what_and_where) {
  const std::vector<std::pair<std::string, std::string>> cases = {
    {R"({"type":"object","properties":{"a":{"type":"string","multipleOf":2}}})",
     R"("#/properties/a" has a minimum, maximum or "multipleOf", which bound numbers)"},
    {R"({"type":"object","properties":{"a":{"type":"number","multipleOf":0}}})", "it must be a number above 0"},
    {R"({"type":"object","properties":{"a":{"type":"number","multipleOf":1e-19}}})", "at most 18 digits after the point"},
    {R"({"type":"object","properties":{"a":{"type":"integer","multipleOf":10,"minimum":1,"maximum":9}}})",
     "no integer"},
    {R"({"type":"object","properties":{"a":{"pattern":"(a"}}})", R"("#/properties/a" has "pattern" "(a": a ( without its ))"},
    {R"({"type":"object","properties":{"a":{"pattern":"(a)\\1"}}})", "back-references are not supported"},
    {R"x({"type":"object","properties":{"a":{"pattern":"a(?=b)"}}})x", "lookaround"},
    {R"({"type":"object","properties":{"a":{"pattern":"\\bword"}}})", "word boundaries"},
    {R"({"type":"object","properties":{"a":{"pattern":"\\p{L}"}}})", "Unicode property escapes"},
    {R"({"type":"object","properties":{"a":{"pattern":"a^b"}}})", "^ only at the start"},
    {R"({"type":"object","properties":{"a":{"pattern":"a$b"}}})", "$ only at the end"},
    {R"({"type":"object","properties":{"a":{"pattern":"**"}}})", "nothing to repeat"},
    {R"({"type":"object","properties":{"a":{"pattern":"a{3,2}"}}})", "m below n"},
    {R"({"type":"object","properties":{"a":{"pattern":"a{1001}"}}})", "a repeat bound over 1000"},
    {R"({"type":"object","properties":{"a":{"pattern":"(a{100}){100}"}}})", "over 4096 states"},
    {R"({"type":"object","properties":{"a":{"pattern":"[\\ud800-\\udfff]"}}})", "a class no character can match"},
    {R"({"type":"object","properties":{"a":{"pattern":"[z-a]"}}})", "out of order"},
    {R"({"type":"object","properties":{"a":{"pattern":"\\q"}}})", "an unknown escape \\q"},
    {R"({"type":"object","properties":{"a":{"pattern":7}}})", "it must be a regular expression in a string"},
    {R"({"type":"object","properties":{"a":{"type":"integer","pattern":"x"}}})", "takes no strings"},
    {R"({"type":"object","properties":{"a":{"pattern":"^a{5}$","maxLength":3}}})",
     "has a pattern no string of 0 to 3 characters matches"},
    {R"({"type":"object","properties":{"a":{"pattern":"x","format":"date"}}})", "one of the two on a string"},
    {R"({"type":"object","properties":{"a":{"type":"strin"}}})", R"(has "type" "strin")"},
    {R"({"type":"object","properties":{"a":false},"required":["a"]})", "a required property or item has no value"},
    {R"({"type":"object","required":["a"]})", R"(requires "a", which is not among its "properties")"},
    {R"({"type":"string"})", "the output's top level must be one (\"type\": \"object\" or \"array\")"},
    {R"({"type":["object","null"]})", "the output's top level must be one"},
    {R"({"type":["array","integer"]})", "the output's top level must be one"},
    {R"({"enum":[1]})", "the output's top level must be one"},
    {R"({"anyOf":[{"type":"array"},{"const":"x"}]})", "the output's top level must be one"},
    {R"({"$ref":"#/$defs/x"})", R"("#/$defs/x" refers to nothing)"},
    {R"({"$ref":"#"})", "leads only back to itself"},
    {R"({"$ref":"other.json#/a"})", "only references into the same schema"},
    {R"({"allOf":[{"type":"object"},{"not":{}}]})", R"(one with "not"; Troupe merges)"},
    {R"({"type":"object","properties":{"a":{"type":"array","minItems":3,"maxItems":2}}})", "minItems 3 above maxItems 2"},
    {R"({"type":"object","properties":{"a":{"type":"array","minItems":-1}}})", "a non-negative integer"},
    {R"({"type":"object","properties":{"a":{"minLength":3,"maxLength":2}}})", "minLength 3 above maxLength 2"},
    {R"({"type":"object","properties":{"a":{"type":"string","minimum":0}}})", R"(beside "type": "number" or "integer")"},
    {R"({"type":"object","properties":{"a":{"type":"number","minimum":2,"exclusiveMaximum":2}}})",
     "no number of at most 18 digits"},
    {R"({"type":"object","properties":{"a":{"type":"number","minimum":1e18}}})", "no number of at most 18 digits"},
    {R"({"type":"object","properties":{"a":{"type":"number","maximum":-1e19}}})", "no number of at most 18 digits"},
    {R"({"type":"object","properties":{"a":{"type":"integer","minimum":1.5,"maximum":1.7}}})", "no integer"},
    {R"({"type":"object","properties":{"a":{"type":"integer","maximum":"9"}}})", R"("maximum" "9"; it must be a number)"},
    {R"({"type":"object","properties":{"a":{"enum":[]}}})", "non-empty list of values"},
    {R"({"type":"object","properties":{"a":{"type":"string","enum":[1]}}})", "whose type its \"type\" refuses"},
    {R"({"type":"object","properties":{"a":{"properties":{"x":true},"additionalProperties":false,"minProperties":2}}})",
     "has minProperties 2 but takes only its 1 properties"},
    {R"({"type":"object","properties":{"a":{"properties":{"x":true,"y":true},"required":["x","y"],"maxProperties":1}}})",
     "requires more properties than its maxProperties 1"},
    {R"({"type":"object","properties":{"a":{"prefixItems":[]}}})", R"(has "prefixItems" []; it must be a non-empty list)"},
    {R"({"type":"object","properties":{"a":{"prefixItems":[true],"items":[true]}}})", R"(beside "items" as a list)"},
    {R"({"type":"object","properties":{"a":{"additionalItems":false}}})", R"(has "additionalItems" without "items" as a list)"},
    {R"({"type":"object","properties":{"a":{"prefixItems":[true],"items":false,"minItems":2}}})",
     R"(has minItems 2 but takes no more than 1 items ("items": false))"},
    {R"({"type":"object","properties":{"a":{"anyOf":[{"type":"string"}],"type":"string"}}})", R"(has "anyOf" beside "type")"},
    {R"({"type":"object","properties":{"a":3}})", "a schema is an object or a boolean"},
    {R"({"type":"object","properties":{"a":{"oneOf":[{"type":"string"},{"type":"string","maxLength":2}]}}})",
     R"("#/properties/a" has "oneOf" whose alternatives 0 and 1 may both match)"},
    {R"({"type":"object","properties":{"a":{"oneOf":[{"type":"integer"},{"type":"number"}]}}})",
     "alternatives 0 and 1 may both match"},
    {R"({"type":"object","properties":{"a":{"oneOf":[{"const":"x"},{"type":"null"},{"enum":[1,"x"]}]}}})",
     "alternatives 0 and 2 may both match"},
    {R"({"type":"object","properties":{"a":{"oneOf":[{"type":"object","properties":{"k":{"const":1}}},)"
     R"({"type":"object","properties":{"k":{"const":2}},"required":["k"]}]}}})",
     "may both match"}, // k not required in the first: {} is both
    {R"({"type":"object","properties":{"a":{"oneOf":[]}}})", R"(has "oneOf" []; it must be a non-empty list)"},
    {R"({"type":"object",)", "the schema is no JSON"},
    {R"({"type":"object","properties":{"a":{"const":1e999}}})", "the schema is no JSON"},
    {R"({"type":"object","properties":{"a":{"$ref":"#"}},"required":["a"]})", "no finite value"},
  };
  for (const auto& [schema, says] : cases) {
    SCOPED_TRACE(schema);
    const auto what = refusal(schema);
    EXPECT_NE(what.find(says), std::string::npos) << what;
  }
  std::string wide = R"({"type":"object","properties":{)";
  for (int i = 0; i < 65; ++i)
    wide += (i ? "," : "") + std::string("\"p") + std::to_string(i) + "\":{}";
  EXPECT_NE(refusal(wide + "}}").find("at most 64"), std::string::npos);
  // Required objects 33 deep: json_machine takes 32 levels.
  const auto nested = [](int levels) {
    std::string s = R"({"type":"object"})";
    for (int i = 1; i < levels; ++i)
      s = R"({"type":"object","properties":{"a":)" + s + R"(},"required":["a"]})";
    return s;
  };
  EXPECT_EQ(refusal(nested(32)), "");
  EXPECT_NE(refusal(nested(33)).find("nest deeper than 32 levels"), std::string::npos) << refusal(nested(33));
  for (const auto& s : schemas())
    EXPECT_EQ(refusal(s), "") << s;
}

TEST(json_schema, holds_the_text_to_the_schema) {
  const std::string person = schemas()[1];
  EXPECT_TRUE(reads_whole(person, R"({"name":"Ann","age":41})"));
  EXPECT_TRUE(reads_whole(person, R"( { "age" : -3 , "name" : "" } )"));
  for (const std::string bad : {
         R"({"name":"Ann"})",                  // a required property missing
         R"({"name":"Ann","age":41.5})",       // not an integer
         R"({"name":"Ann","age":4e1})",        // an integer written with an exponent
         R"({"name":"Ann","age":"41"})",       // a string for an integer
         R"({"name":"Ann","age":41,"x":1})",   // no other properties
         R"({"name":"Ann","name":"Bo","age":1})", // a property twice
         R"({"nam\u0065":"Ann","age":41})",    // a name not as the schema writes it
       }) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(reads_whole(person, bad));
  }
  // A byte is refused where it stops the text from becoming valid, not later.
  auto m = machine(person);
  ASSERT_TRUE(m.feed(std::string_view(R"({"na)")));
  EXPECT_FALSE(m.feed('x')) << "no property begins \"nax\"";
  ASSERT_TRUE(m.feed(std::string_view(R"(me":"A")")));
  EXPECT_FALSE(m.feed('}')) << "age is required";
  ASSERT_TRUE(m.feed(std::string_view(R"(,"age":7)")));
  EXPECT_FALSE(m.feed('.'));
  EXPECT_FALSE(m.feed(',')) << "no property is left to give";
  EXPECT_TRUE(m.feed('}'));
  EXPECT_TRUE(m.complete());

  const std::string tags = schemas()[3];
  EXPECT_TRUE(reads_whole(tags, R"({"tags":["x","xy"],"kind":"k","n":3})"));
  EXPECT_FALSE(reads_whole(tags, R"({"tags":[],"kind":"k"})")) << "minItems";
  EXPECT_FALSE(reads_whole(tags, R"({"tags":["x","x","y","y"],"kind":"k"})")) << "maxItems";
  EXPECT_FALSE(reads_whole(tags, R"({"tags":["xyz"],"kind":"k"})")) << "not among the enum";
  EXPECT_FALSE(reads_whole(tags, R"({"tags":["x"],"kind":"k","n":"3"})")) << "additionalProperties";
  auto t = machine(tags);
  ASSERT_TRUE(t.feed(std::string_view(R"({"tags":["x","y","xy")")));
  EXPECT_FALSE(t.feed(',')) << "a fourth item is past maxItems";

  // Numbers as enum values are written one way, compactly.
  const std::string levels = R"({"type":"object","properties":{"l":{"enum":[1,10,2.5,-1,null,true]}}})";
  for (const std::string ok : {R"({"l":1})", R"({"l":10})", R"({"l":2.5})", R"({"l":-1})", R"({"l":null})",
                               R"({"l":true})"})
    EXPECT_TRUE(reads_whole(levels, ok)) << ok;
  for (const std::string bad : {R"({"l":100})", R"({"l":1.0})", R"({"l":2.50})", R"({"l":-10})", R"({"l":false})"})
    EXPECT_FALSE(reads_whole(levels, bad)) << bad;

  // Characters, not bytes, are counted; an escape is one.
  const std::string code = R"({"type":"object","properties":{"c":{"type":"string","minLength":2,"maxLength":3}}})";
  for (const std::string ok : {R"({"c":"ab"})", R"({"c":"abc"})", "{\"c\":\"\xc3\xa9\xc3\xa9\"}", R"({"c":"\n\u00e9"})"})
    EXPECT_TRUE(reads_whole(code, ok)) << ok;
  for (const std::string bad : {R"({"c":"a"})", R"({"c":"abcd"})", R"({"c":""})", R"({"c":"ab\n\t"})"})
    EXPECT_FALSE(reads_whole(code, bad)) << bad;
  auto c = machine(code);
  ASSERT_TRUE(c.feed(std::string_view(R"({"c":"a)")));
  EXPECT_FALSE(c.feed('"')) << "one character is too few";
  ASSERT_TRUE(c.feed(std::string_view("bc")));
  EXPECT_FALSE(c.feed('d')) << "a fourth is too many";
  EXPECT_TRUE(c.feed(std::string_view(R"("})")));

  // Formats: a byte that cannot go on to one is refused where it comes.
  const auto formats = [](const std::string& f) {
    return R"({"type":"object","properties":{"x":{"type":"string","format":")" + f + R"("}}})";
  };
  for (const auto& [f, ok] : std::vector<std::pair<std::string, std::string>>{
         {"date", "2024-02-29"}, {"date", "1999-12-31"}, {"time", "23:59:59Z"}, {"time", "00:00:00.123456789+05:30"},
         {"date-time", "2026-11-27T21:33:55-08:00"}, {"uuid", "123e4567-E89b-12d3-a456-426614174000"}})
    EXPECT_TRUE(reads_whole(formats(f), R"({"x":")" + ok + R"("})")) << f << " " << ok;
  for (const auto& [f, bad] : std::vector<std::pair<std::string, std::string>>{
         {"date", "2023-02-29"}, {"date", "2024-13-01"}, {"date", "2024-04-31"}, {"date", "0999-01-01"},
         {"date", "2024-1-01"}, {"time", "24:00:00Z"}, {"time", "12:60:00Z"}, {"time", "12:00:00"},
         {"time", "12:00:00.Z"}, {"time", "12:00:00.1234567890Z"}, {"date-time", "2026-11-27 21:33:55Z"},
         {"uuid", "123e4567e89b12d3a456426614174000"}, {"uuid", "123e4567-e89b-12d3-a456-42661417400g"}})
    EXPECT_FALSE(reads_whole(formats(f), R"({"x":")" + bad + R"("})")) << f << " " << bad;
  EXPECT_NE(refusal(formats("idn-email")).find(R"(has "format" "idn-email")"), std::string::npos);
  EXPECT_NE(refusal(R"({"type":"object","properties":{"x":{"type":"integer","format":"date"}}})").find("takes no strings"),
            std::string::npos);
  auto feb = machine(formats("date"));
  ASSERT_TRUE(feb.feed(std::string_view(R"({"x":"2023-02-)")));
  EXPECT_FALSE(feb.feed('3')) << "February has no 30th";
  ASSERT_TRUE(feb.feed('2'));
  EXPECT_FALSE(feb.feed('9')) << "nor, in 2023, a 29th";

  // Formats held as a pattern of the whole string.
  const auto format = [](const std::string& f) {
    return R"({"type":"object","properties":{"x":{"type":"string","format":")" + f + R"("}}})";
  };
  const std::vector<std::tuple<std::string, std::vector<std::string>, std::vector<std::string>>> patterned = {
    {"email",
     {"a@b.co", "first.last+tag@mail.example.org", "x_y-z@sub-1.example.com", "o'neil!#$%&*/=?^{|}~@a.b"},
     {"a@b", "@b.co", "a.@b.co", ".a@b.co", "a..b@c.de", "a@-b.co", "a@b-.co", "a b@c.de", "a@b.c_o", "a@@b.co",
      "a@" + std::string(64, 'x') + ".com"}},
    {"hostname", {"localhost", "a-b.example.com", "x1.y2", std::string(63, 'h')},
     {"-a", "a-", "a..b", "a_b", "a.", std::string(64, 'h'), ""}},
    {"ipv4", {"0.0.0.0", "192.168.1.255", "255.255.255.255", "10.0.0.1"},
     {"256.1.1.1", "1.2.3", "01.2.3.4", "1.2.3.4.5", "1.2.3.-4", "a.b.c.d"}},
    {"uri", {"https://example.com/a?b=c#d", "mailto:x@y.z", "urn:isbn:0-486", "http://[::1]:80/%20x"},
     {"//example.com", "1http://x", "http://a b", "http://x/%2", "http://x/%zz", "http://x/\\", ""}},
    {"uri-reference", {"//example.com/a", "../b?c#d", "", "https://x.y/%41", "#frag"},
     {"a b", "x/%2", "x\\y", "<a>"}},
    {"ipv6",
     {"::", "::1", "1::", "2001:db8::8a2e:370:7334", "2001:0db8:0000:0000:0000:ff00:0042:8329", "fe80::1:2:3:4:5:6",
      "::ffff:192.0.2.128", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:1.2.3.4", "1::8", "1:2:3:4:5:6:7::", "::2:3:4:5:6:7:8"},
     {":", ":::", "1:2:3:4:5:6:7", "1:2:3:4:5:6:7:8:9", "1::2::3", "12345::", "g::", "1:2:3:4:5:6:7:1.2.3.4",
      "::256.1.1.1", "1:", ":1", "1:2:3:4:5:6:7:8::", ""}},
    {"duration",
     {"P1Y", "P1Y2M3D", "P2M10D", "P3D", "PT4H", "PT4H5M6S", "PT5M", "PT0.5S", "P1DT2H0.25S", "P2W", "P1DT12H",
      "P1Y2D"},
     {"P", "PT", "P1H", "P1D2Y", "PT1D", "P1W2D", "PT.5S", "PT1.S", "1D", "P1DT", "PT1H2S3M", "P1M2Y", ""}},
    {"json-pointer", {"", "/", "/a/b", "/a~1b/~0c", "/\u00e9/0"}, {"a", "/a~", "/~2", "/a~b"}},
    {"byte", {"", "QQ==", "QUI=", "QUJD", "QUJDRA=="}, {"Q", "QQ=", "QUJD=", "Q===", "QU!D"}},
  };
  // Annotations: any string, still held to its length.
  for (const std::string f : {"password", "binary"}) {
    const auto held = R"({"type":"object","properties":{"x":{"type":"string","format":")" + f + R"(","maxLength":3}}})";
    EXPECT_TRUE(reads_whole(held, R"({"x":"a b"})")) << f;
    EXPECT_FALSE(reads_whole(held, R"({"x":"abcd"})")) << f;
  }
  for (const auto& [f, good, bad] : patterned) {
    for (const auto& v : good)
      EXPECT_TRUE(reads_whole(format(f), R"({"x":)" + json(v).dump() + "}")) << f << ": " << v;
    for (const auto& v : bad)
      EXPECT_FALSE(reads_whole(format(f), R"({"x":)" + json(v).dump() + "}")) << f << ": " << v;
  }
  EXPECT_NE(refusal(R"({"type":"object","properties":{"x":{"format":"email","pattern":"a"}}})")
              .find(R"(has "format" "email" beside "pattern"; Troupe holds email as a pattern, and one pattern)"),
            std::string::npos);
  // A format held as a pattern, and a length.
  const std::string short_mail = R"({"type":"object","properties":{"x":{"format":"email","maxLength":6}}})";
  EXPECT_TRUE(reads_whole(short_mail, R"({"x":"a@b.co"})"));
  EXPECT_FALSE(reads_whole(short_mail, R"({"x":"ab@c.de"})"));

  // A pattern and a length (Pydantic's Field(min_length=..., pattern=...)):
  // both hold, and a character is refused where no match within the
  // bounds would be left.
  const std::string word = R"({"type":"object","properties":{"x":{"pattern":"^[a-z]+$","minLength":2,"maxLength":4}}})";
  for (const std::string ok : {"ab", "abcd"})
    EXPECT_TRUE(reads_whole(word, R"({"x":")" + ok + R"("})")) << ok;
  for (const std::string bad : {"a", "abcde", "aB", ""})
    EXPECT_FALSE(reads_whole(word, R"({"x":")" + bad + R"("})")) << bad;
  auto either = machine(R"({"type":"object","properties":{"x":{"pattern":"^(a|bcd)$","minLength":2}}})");
  ASSERT_TRUE(either.feed(std::string_view(R"({"x":")")));
  EXPECT_FALSE(either.feed('a')) << "\"a\" matches but is too short, and nothing goes on from it";
  EXPECT_TRUE(either.feed(std::string_view(R"(bcd"})")));
  auto pairs = machine(R"({"type":"object","properties":{"x":{"pattern":"^(ab)+$","maxLength":3}}})");
  ASSERT_TRUE(pairs.feed(std::string_view(R"({"x":"ab)")));
  EXPECT_FALSE(pairs.feed('a')) << "\"aba\" could only match as \"abab\", past 3";
  EXPECT_TRUE(pairs.feed(std::string_view(R"("})")));
  auto escaped = machine(word);
  EXPECT_TRUE(escaped.feed(std::string_view(R"({"x":"\u0061\u0062\u0063\u0064")")));
  EXPECT_FALSE(escaped.feed(std::string_view(R"(\u0065)"))) << "a fifth character, escaped";

  // Integers within bounds, refused at the first digit that leaves them.
  const std::string aged = R"({"type":"object","properties":{"n":{"type":"integer","minimum":-5,"maximum":120}}})";
  for (const std::string ok : {R"({"n":-5})", R"({"n":0})", R"({"n":-0})", R"({"n":7})", R"({"n":99})", R"({"n":120})"})
    EXPECT_TRUE(reads_whole(aged, ok)) << ok;
  for (const std::string bad : {R"({"n":-6})", R"({"n":121})", R"({"n":1000})", R"({"n":-10})"})
    EXPECT_FALSE(reads_whole(aged, bad)) << bad;
  auto a = machine(aged);
  ASSERT_TRUE(a.feed(std::string_view(R"({"n":12)")));
  EXPECT_FALSE(a.feed('1')) << "121 is past the maximum";
  EXPECT_FALSE(a.feed('5')) << "so is 125";
  EXPECT_TRUE(a.feed(std::string_view("0}"))) << "120 is within";
  const std::string teen = R"({"type":"object","properties":{"n":{"type":"integer","minimum":10,"exclusiveMaximum":21}}})";
  auto tn = machine(teen);
  ASSERT_TRUE(tn.feed(std::string_view(R"({"n":)")));
  for (const char bad : {'-', '0', '3', '9'}) {
    auto probe = tn;
    EXPECT_FALSE(probe.feed(static_cast<unsigned char>(bad))) << bad;
  }
  ASSERT_TRUE(tn.feed('2'));
  EXPECT_FALSE(tn.feed('}')) << "2 alone is below 10";
  EXPECT_FALSE(tn.feed('1')) << "21 is excluded";
  EXPECT_TRUE(tn.feed(std::string_view("0}")));

  // Other numbers within bounds: written without an exponent, in at most 18
  // digits, refused at the byte that leaves them (every short text against
  // the bounds read as decimals).
  // (with multipleOf: the decimal it names, times 1e18)
  const auto e18 = [](const std::string& t) { // an exact decimal times 1e18
    __extension__ __int128 x = 0;
    int after = -1;
    for (const char c : t) {
      if (c == '.')
        after = 0;
      else if (c != '-') {
        x = x * 10 + (c - '0');
        after += after >= 0;
      }
    }
    for (int k = after < 0 ? 0 : after; k < 18; ++k)
      x *= 10;
    return x;
  };
  struct bounded_case {
    std::string schema;
    double lo, hi;
    std::string multiple; // "" none
  };
  const std::vector<bounded_case> bounded = {
    {R"({"type":"number","minimum":-2.5,"exclusiveMaximum":10})", -2.5, 10, ""},
    {R"({"type":"number","exclusiveMinimum":0,"maximum":0.25})", 0, 0.25, ""},
    {R"({"minimum":0.1,"maximum":0.1})", 0.1, 0.1, ""}, // (no type: other values as they are)
    {R"({"type":["number","null"],"minimum":-0.05,"maximum":-0.05})", -0.05, -0.05, ""},
    {R"({"type":"number","multipleOf":0.25,"minimum":-1,"maximum":50})", -1, 50, "0.25"},
    {R"({"type":"number","multipleOf":1.5})", -1e300, 1e300, "1.5"},
    {R"({"type":"integer","multipleOf":5,"exclusiveMinimum":-12,"maximum":200})", -12, 200, "5"},
    {R"({"type":"integer","multipleOf":2.5})", -1e300, 1e300, "5"}, // integers that are: multiples of 5
  };
  const std::regex plain(R"(-?(0|[1-9][0-9]*)(\.[0-9]+)?)");
  const std::regex whole_number(R"(-?(0|[1-9][0-9]*))");
  const std::string alphabet = "01257.-e";
  for (const auto& [x, lo, hi, multiple] : bounded) {
    SCOPED_TRACE(x);
    const bool integer = x.find("integer") != std::string::npos;
    const auto within = [&](const std::string& t) {
      const double v = std::strtod(t.c_str(), nullptr);
      const bool low_open = x.find("exclusiveMinimum") != std::string::npos;
      const bool high_open = x.find("exclusiveMaximum") != std::string::npos;
      return std::regex_match(t, integer ? whole_number : plain) && (low_open ? v > lo : v >= lo)
             && (high_open ? v < hi : v <= hi) && (multiple.empty() || e18(t) % e18(multiple) == 0);
    };
    const auto schema = R"({"type":"object","properties":{"x":)" + x + "}}";
    std::vector<std::string> texts = {""};
    for (std::size_t at = 0; at < texts.size(); ++at) {
      const auto t = texts[at];
      if (t.size() < 5)
        for (const char c : alphabet)
          texts.push_back(t + c);
      if (!t.empty()) {
        ASSERT_EQ(reads_whole(schema, R"({"x":)" + t + "}"), within(t)) << t;
      }
    }
    // Every byte it allows leaves a way to a number within them: random
    // walks never get stuck before the object closes.
    std::mt19937 walk_rng(11);
    const std::string bytes = "0123456789.-e}";
    for (int walk = 0; walk < 300; ++walk) {
      auto m = machine(schema);
      ASSERT_TRUE(m.feed(std::string_view(R"({"x":)")));
      std::string written;
      while (!m.complete()) {
        std::string ok;
        for (const char c : bytes) {
          auto probe = m;
          if (probe.feed(static_cast<unsigned char>(c)))
            ok += c;
        }
        ASSERT_FALSE(ok.empty()) << "stuck after " << written;
        const char c = ok[walk_rng() % ok.size()];
        ASSERT_TRUE(m.feed(static_cast<unsigned char>(c)));
        written += c;
      }
      written.pop_back(); // the '}'
      EXPECT_TRUE(within(written)) << written;
    }
  }
  EXPECT_TRUE(reads_whole(R"({"type":"object","properties":{"x":{"minimum":0.1}}})", R"({"x":"not a number"})"))
    << "bounds are on numbers only";
  EXPECT_TRUE(reads_whole(R"({"type":"object","properties":{"x":{"type":"number","minimum":0}}})",
                          R"({"x":123456789012345678})"));
  EXPECT_TRUE(reads_whole(R"({"type":"object","properties":{"x":{"type":"number","minimum":0}}})",
                          R"({"x":1234567890.12345678})"))
    << "18 digits";
  EXPECT_FALSE(reads_whole(R"({"type":"object","properties":{"x":{"type":"number","minimum":0}}})",
                           R"({"x":1234567890.123456789})"))
    << "19 digits";

  // Numbers a reader can hold.
  EXPECT_TRUE(reads_whole(person, R"({"name":"","age":-123456789012345678})"));
  EXPECT_FALSE(reads_whole(person, R"({"name":"","age":1234567890123456789})")) << "19 digits";
  const std::string any = R"({"type":"object"})";
  EXPECT_TRUE(reads_whole(any, R"({"x":1.2345678901234567890123e-99})"));
  EXPECT_FALSE(reads_whole(any, R"({"x":1.234567890123456789012345})")) << "25 digits";
  EXPECT_FALSE(reads_whole(any, R"({"x":1e100})")) << "a 3-digit exponent";

  // A recursive property is not offered where its object would nest too
  // deep: the text can always go on.
  const std::string tree = R"({"type":"object","properties":{"c":{"$ref":"#"},"v":{"type":"integer"}},"additionalProperties":false})";
  auto deep = machine(tree);
  for (std::size_t level = 1; level < json_machine::max_depth; ++level)
    ASSERT_TRUE(deep.feed(std::string_view(R"({"c":)"))) << level;
  ASSERT_TRUE(deep.feed('{')) << "the 32nd level";
  auto probe = deep;
  EXPECT_FALSE(probe.feed(std::string_view(R"("c")"))) << "its value would be a 33rd level";
  EXPECT_TRUE(probe.feed(std::string_view(R"("v":1)")));
  EXPECT_TRUE(deep.feed(std::string(json_machine::max_depth, '}')));
  EXPECT_TRUE(deep.complete());

  // anyOf follows each reading until the bytes tell them apart.
  const std::string tagged = schemas()[5];
  EXPECT_TRUE(reads_whole(tagged, R"({"t":"a","x":1})"));
  EXPECT_TRUE(reads_whole(tagged, R"({"t":"b","y":["s"]})"));
  EXPECT_TRUE(reads_whole(tagged, R"({"t":"b"})"));
  EXPECT_FALSE(reads_whole(tagged, R"({"t":"a","y":[]})"));
  EXPECT_FALSE(reads_whole(tagged, R"({"t":"a"})"));

  // A recursive schema through $ref.
  const std::string list = schemas()[4];
  EXPECT_TRUE(reads_whole(list, R"({"v":1,"next":{"v":2,"next":{"v":3,"next":null}}})"));
  EXPECT_FALSE(reads_whole(list, R"({"v":1,"next":{"next":null}})"));
}

TEST(json_schema, refuses_property_names_and_unique_items_it_cannot_hold_saying_what_and_where) {
  const std::vector<std::pair<std::string, std::string>> cases = {
    {R"({"type":"object","propertyNames":{"minimum":1}})",
     R"("#/propertyNames" has "minimum" in a propertyNames schema, where Troupe does not enforce it)"},
    {R"({"type":"object","propertyNames":{"not":{"const":"a"}}})", R"("#/propertyNames" has "not" in a propertyNames)"},
    {R"({"type":"object","propertyNames":{"$ref":"#/$defs/k"},"$defs":{"k":{"type":"string","properties":{}}}})",
     R"("#/$defs/k" has "properties" in a propertyNames schema)"},
    {R"({"type":"object","propertyNames":{"anyOf":[{"pattern":"^a"},{"maxProperties":1}]}})",
     R"("#/propertyNames/anyOf/1" has "maxProperties" in a propertyNames schema)"},
    {R"({"type":"object","propertyNames":{"$ref":"#"}})", R"("#" has "propertyNames" in a propertyNames schema)"},
    {R"({"type":"object","propertyNames":{"type":"integer"}})",
     R"("#/propertyNames" takes no strings, and property names are strings)"},
    {R"({"type":"object","propertyNames":{"enum":["a",1]}})",
     R"("#/propertyNames" has the name 1, which is no string)"},
    {R"({"type":"object","propertyNames":{"anyOf":[{"const":"a"},{"pattern":"^b"}]}})",
     R"("#/propertyNames" mixes names it lists (enum, const) with strings of a pattern, length or format)"},
    {R"({"type":"object","properties":{"b":{}},"propertyNames":{"pattern":"^a"}})",
     R"("#" has the property "b", a name its "propertyNames" refuses)"},
    {R"({"type":"object","properties":{"x":{"properties":{"abc":{}},"propertyNames":{"maxLength":2}}}})",
     R"("#/properties/x" has the property "abc", a name its "propertyNames" refuses)"},
    {R"({"type":"object","properties":{"b":{}},"propertyNames":{"enum":["a"]}})",
     R"("#" has the property "b", a name its "propertyNames" refuses)"},
    {R"({"type":"object","propertyNames":{"enum":["a","b"]},"required":["c"]})",
     R"(requires "c", which is not among its "properties" (nor among the names its "propertyNames" lists)"},
    {R"({"type":"object","propertyNames":{"enum":["a"]},"additionalProperties":false,"required":["a"]})",
     R"(requires "a", which is not among its "properties")"},
    {R"x({"type":"object","propertyNames":{"pattern":"a(?=b)"}})x", R"x("#/propertyNames" has "pattern" "a(?=b)")x"},
    {R"({"type":"object","propertyNames":{"format":"iri"}})", R"("#/propertyNames" has "format" "iri")"},
    {R"({"type":"object","propertyNames":{"pattern":"^a","format":"date"}})", "one of the two on a string"},
    {R"({"type":"object","propertyNames":false})", R"("#/propertyNames" takes no strings)"},
    {R"({"type":"object","properties":{"a":{"type":"array","uniqueItems":"yes"}}})",
     R"("#/properties/a" has "uniqueItems" "yes"; it must be true or false)"},
    {R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"object"},"uniqueItems":true}}})",
     R"("#/properties/a" has "uniqueItems": true, but its items may be objects or arrays; Troupe holds only scalar items unique)"},
    {R"({"type":"object","properties":{"a":{"uniqueItems":true}}})", "its items may be objects or arrays"},
    {R"({"type":"object","properties":{"a":{"items":{"anyOf":[{"type":"string"},{"type":"array"}]},"uniqueItems":true}}})",
     "its items may be objects or arrays"},
    {R"({"type":"object","properties":{"a":{"items":{"enum":["x",[1]]},"uniqueItems":true}}})",
     "its items may be objects or arrays"},
    {R"({"type":"array","items":{"$ref":"#"},"uniqueItems":true})", "its items may be objects or arrays"},
    {R"({"type":"object","properties":{"a":{"prefixItems":[{"type":"integer"}],"items":false,"uniqueItems":true}}})",
     R"("#/properties/a" has "uniqueItems" beside the first items' own schemas (prefixItems, or items as a list))"},
    {R"({"type":"object","properties":{"a":{"items":{"type":"boolean"},"uniqueItems":true,"minItems":3}}})",
     R"("#/properties/a" has "uniqueItems" and minItems 3, but its items take only 2 different values)"},
    {R"({"type":"object","properties":{"a":{"items":{"type":"integer","minimum":1,"maximum":3},"uniqueItems":true,"minItems":4}}})",
     "but its items take only 3 different values"},
    {R"({"type":"object","properties":{"a":{"items":{"type":"integer","multipleOf":5,"minimum":-12,"maximum":12},)"
     R"("uniqueItems":true,"minItems":6}}})",
     "but its items take only 5 different values"}, // -10 -5 0 5 10
    {R"({"type":"object","properties":{"a":{"items":{"type":"number","multipleOf":0.5,"minimum":0,"maximum":1},)"
     R"("uniqueItems":true,"minItems":4}}})",
     "but its items take only 3 different values"},
    {R"({"type":"object","properties":{"a":{"items":{"anyOf":[{"enum":["a",1,1.0,null]},{"type":"null"},{"const":"b"}]},)"
     R"("uniqueItems":true,"minItems":5}}})",
     "but its items take only 4 different values"}, // "a", 1 (1.0 is 1), null; "b"
    {R"({"type":"object","properties":{"a":{"items":{"pattern":"^(a|b\\u00e9?)$"},"uniqueItems":true,"minItems":4}}})",
     "but its items take only 3 different values"},
    {R"({"type":"object","properties":{"a":{"items":{"maxLength":0},"uniqueItems":true,"minItems":2}}})",
     "but its items take only 1 different values"},
  };
  for (const auto& [schema, says] : cases) {
    SCOPED_TRACE(schema);
    const auto what = refusal(schema);
    EXPECT_NE(what.find(says), std::string::npos) << what;
  }
  // What they take.
  for (const std::string ok : {
         R"({"type":"object","propertyNames":true})",
         R"({"type":"object","propertyNames":{"type":"string","title":"key"}})",
         R"({"type":"object","propertyNames":{"type":["string","null"],"maxLength":3}})",
         R"({"type":"object","propertyNames":{"anyOf":[{"pattern":"^a"},{"pattern":"^b"}]}})",
         R"({"type":"object","propertyNames":{"oneOf":[{"pattern":"^a"},{"type":"integer"}]}})",
         R"({"type":"object","propertyNames":{"anyOf":[{"type":"integer"},{"format":"uuid"}]}})",
         R"({"type":"object","properties":{"ab":{}},"propertyNames":{"allOf":[{"maxLength":2}]}})",
         R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"object"},"uniqueItems":false}}})",
         R"({"type":"object","properties":{"a":{"type":"string","uniqueItems":true}}})",
         R"({"type":"array","items":{"type":"integer"},"uniqueItems":true,"minItems":1000})",
         R"({"type":"array","items":{"pattern":"^[a-z]$"},"uniqueItems":true,"minItems":26})",
         R"({"type":"array","items":{"type":"integer","minimum":1,"maximum":3},"uniqueItems":true,"minItems":3})",
       })
    EXPECT_EQ(refusal(ok), "") << ok;
  EXPECT_NE(refusal(R"({"type":"array","items":{"pattern":"^[a-z]$"},"uniqueItems":true,"minItems":27})")
              .find("take only 26 different values"),
            std::string::npos);
  // Listed names become properties: at most 64 in one object.
  std::string many = R"({"type":"object","propertyNames":{"enum":[)";
  for (int i = 0; i < 65; ++i)
    many += (i ? ",\"n" : "\"n") + std::to_string(i) + "\"";
  EXPECT_NE(refusal(many + "]}}").find("listing names that make more than 64 properties"), std::string::npos)
    << refusal(many + "]}}");
  EXPECT_EQ(refusal(many + "]},\"additionalProperties\":false}"), "") << "no other name: none listed is one";
}

/// `m` refuses the next byte `c` and stays as it was.
::testing::AssertionResult refuses(schema_machine m, unsigned char c) {
  const auto before = m.key();
  if (m.feed(c))
    return ::testing::AssertionFailure() << "took " << json(std::string(1, static_cast<char>(c))).dump();
  if (m.key() != before)
    return ::testing::AssertionFailure() << "changed on refusing";
  return ::testing::AssertionSuccess();
}

TEST(json_schema, property_names_hold_every_name_as_it_is_written) {
  // To a pattern, read for the characters a name writes (Pydantic's
  // dict[constr(pattern=...), int]).
  const std::string counts = R"({"type":"object","propertyNames":{"pattern":"^[a-c]{1,3}$"},)"
                             R"("additionalProperties":{"type":"integer"}})";
  for (const std::string ok : {R"({"a":1,"bc":2,"cab":3})", R"({})", R"({"\u0061b":1})", R"({"c\u0062":1})"})
    EXPECT_TRUE(reads_whole(counts, ok)) << ok;
  for (const std::string bad : {R"({"d":1})", R"({"":1})", R"({"abca":1})", R"({"aB":1})", R"({"a":1,"\u0064":2})"})
    EXPECT_FALSE(reads_whole(counts, bad)) << bad;
  auto m = machine(counts);
  ASSERT_TRUE(m.feed(std::string_view(R"({")")));
  EXPECT_TRUE(refuses(m, '"')) << "no name is empty";
  ASSERT_TRUE(m.feed(std::string_view("ab")));
  EXPECT_TRUE(refuses(m, 'd'));
  ASSERT_TRUE(m.feed('c'));
  EXPECT_TRUE(refuses(m, 'a')) << "three characters at most";
  EXPECT_TRUE(refuses(m, '\\')) << "nor a fourth written as an escape";
  EXPECT_TRUE(m.feed(std::string_view(R"(":1})")) && m.complete());

  // Listed by an enum through $ref (dict[Color, float]): each name as the
  // schema spells it, at most once.
  for (const std::string ok : {R"({"colors":[],"by_color":{"red":1.5,"blue":2}})", R"({"colors":[],"by_color":{}})"})
    EXPECT_TRUE(reads_whole(colored, ok)) << ok;
  for (const std::string bad : {R"({"colors":[],"by_color":{"red":1,"red":2}})", R"({"colors":[],"by_color":{"pink":1}})",
                                R"({"colors":[],"by_color":{"r\u0065d":1}})"})
    EXPECT_FALSE(reads_whole(colored, bad)) << bad;
  auto c = machine(colored);
  ASSERT_TRUE(c.feed(std::string_view(R"({"colors":[],"by_color":{"red":1,"green":2,"blue":3)")));
  EXPECT_TRUE(refuses(c, ',')) << "no name is left";
  EXPECT_TRUE(c.feed(std::string_view("}}")) && c.complete());
  // The names it lists may be required (zod's record of an enum's keys).
  const std::string both = R"({"type":"object","propertyNames":{"enum":["a","b"]},"additionalProperties":{"type":"integer"},)"
                           R"("required":["a","b"]})";
  EXPECT_TRUE(reads_whole(both, R"({"b":2,"a":1})"));
  EXPECT_FALSE(reads_whole(both, R"({"a":1})"));
  EXPECT_FALSE(reads_whole(both, R"({"a":1,"b":2,"c":3})"));

  // A length beside a property of the schema's own, whose name it takes;
  // a format.
  for (const std::string ok : {R"({"meta":{"id":1,"abc":"x"}})", R"({"meta":{"abcd":"x","id":2}})",
                               R"({"days":{"2024-02-29":true,"1999-12-31":false}})", R"({"mixed":[1]})"})
    EXPECT_TRUE(reads_whole(named, ok)) << ok;
  for (const std::string bad : {R"({"meta":{"a":"x"}})", R"({"meta":{"abcde":"x"}})", R"({"meta":{"id":1,"id":2}})",
                                R"({"days":{"2023-02-29":true}})", R"({"days":{"today":true}})"})
    EXPECT_FALSE(reads_whole(named, bad)) << bad;
  auto d = machine(named);
  ASSERT_TRUE(d.feed(std::string_view(R"({"days":{"2023-02-2)")));
  EXPECT_TRUE(refuses(d, '9')) << "2023 has no February 29th";
  EXPECT_TRUE(d.feed('8'));

  // A name of the schema's own, given, where propertyNames takes no other
  // way on from its spelling: refused where it would be spelled whole,
  // not left to a close that cannot come. (Spelled otherwise, as
  // "\u0061", it is a name of another property, which the machine does not
  // check for repeats.)
  const std::string once = R"({"type":"object","properties":{"a":{"type":"integer"}},"propertyNames":{"pattern":"^a$"}})";
  auto o = machine(once);
  ASSERT_TRUE(o.feed(std::string_view(R"({"a":1,")")));
  EXPECT_TRUE(refuses(o, 'a'));
  // Only "" can be a name, and it is a property: it is given once.
  const std::string empty = R"({"type":"object","properties":{"":{"type":"integer"}},"propertyNames":{"maxLength":0}})";
  EXPECT_TRUE(reads_whole(empty, R"({"":1})"));
  auto e = machine(empty);
  ASSERT_TRUE(e.feed(std::string_view(R"({"":1)")));
  EXPECT_TRUE(refuses(e, ',')) << "no other name can come";
}

TEST(json_schema, unique_items_refuse_an_item_equal_to_one_before_at_the_byte_that_would_end_it) {
  const std::string strings = R"({"type":"array","items":{"type":"string"},"uniqueItems":true})";
  for (const std::string ok : {R"(["a","b",""])", R"(["a","ab","A"])", R"([])"})
    EXPECT_TRUE(reads_whole(strings, ok)) << ok;
  for (const std::string bad : {R"(["a","a"])", R"(["a","\u0061"])", "[\"\xc3\xa9\",\"\\u00E9\"]",
                                "[\"\xf0\x9f\x98\x80\",\"\\ud83d\\ude00\"]", R"(["\"","\u0022"])", R"(["","b",""])"})
    EXPECT_FALSE(reads_whole(strings, bad)) << bad;
  auto s = machine(strings);
  ASSERT_TRUE(s.feed(std::string_view(R"(["ab","a)")));
  ASSERT_TRUE(s.feed('b')) << "\"ab\" may still go on to \"abc\"";
  EXPECT_TRUE(refuses(s, '"')) << "the quote would end a second \"ab\"";
  EXPECT_TRUE(s.feed(std::string_view(R"(c"])")) && s.complete());

  // Numbers by value.
  const std::string numbers = R"({"type":"array","items":{"type":"number"},"uniqueItems":true})";
  EXPECT_TRUE(reads_whole(numbers, "[1,10,0.1,-1,1e3,2.5]"));
  for (const std::string bad : {"[1,1.0]", "[1,10e-1]", "[0.5,5e-1]", "[0,-0]", "[100,1e2]", "[0.0,0]", "[1.50,1.5]"})
    EXPECT_FALSE(reads_whole(numbers, bad)) << bad;
  auto n = machine(numbers);
  ASSERT_TRUE(n.feed(std::string_view("[1,1")));
  for (const char ending : {',', ']', ' '})
    EXPECT_TRUE(refuses(n, static_cast<unsigned char>(ending))) << ending;
  EXPECT_TRUE(n.feed(std::string_view("0]")) && n.complete());
  // An integer of 18 digits can only end, and ending would repeat it.
  const std::string ints = R"({"type":"array","items":{"type":"integer"},"uniqueItems":true})";
  auto big = machine(ints);
  ASSERT_TRUE(big.feed(std::string_view("[123456789012345678,12345678901234567")));
  EXPECT_TRUE(refuses(big, '8'));
  EXPECT_TRUE(big.feed('9'));
  // Few values: one given cannot begin again, and no comma comes when none
  // is left.
  const std::string few = R"({"type":"array","items":{"type":"integer","minimum":1,"maximum":3},"uniqueItems":true})";
  auto f = machine(few);
  ASSERT_TRUE(f.feed(std::string_view("[1,2,")));
  EXPECT_TRUE(refuses(f, '1'));
  EXPECT_TRUE(refuses(f, '2'));
  ASSERT_TRUE(f.feed('3'));
  EXPECT_TRUE(refuses(f, ',')) << "1, 2 and 3 are given";
  EXPECT_TRUE(f.feed(']') && f.complete());
  const std::string flags = R"({"type":"array","items":{"anyOf":[{"type":"boolean"},{"type":"null"}]},"uniqueItems":true})";
  auto b = machine(flags);
  ASSERT_TRUE(b.feed(std::string_view("[true,")));
  EXPECT_TRUE(refuses(b, 't')) << "true again could only end as true";
  ASSERT_TRUE(b.feed(std::string_view("null,false")));
  EXPECT_TRUE(refuses(b, ','));
  // Enum values, a format, a length: the first byte after which the item
  // could only end as one given is refused.
  auto colors = machine(colored);
  ASSERT_TRUE(colors.feed(std::string_view(R"({"colors":["red",")")));
  EXPECT_TRUE(refuses(colors, 'r'));
  EXPECT_TRUE(colors.feed(std::string_view(R"(blue"]})")) && colors.complete());
  const std::string dates = R"({"type":"array","items":{"type":"string","format":"date"},"uniqueItems":true})";
  auto day = machine(dates);
  ASSERT_TRUE(day.feed(std::string_view(R"(["2024-01-01","2024-01-0)")));
  EXPECT_TRUE(refuses(day, '1'));
  EXPECT_TRUE(day.feed(std::string_view(R"(2"])")));
  const std::string chars = R"({"type":"array","items":{"type":"string","maxLength":1},"uniqueItems":true})";
  auto one = machine(chars);
  ASSERT_TRUE(one.feed(std::string_view(R"(["a",")")));
  EXPECT_TRUE(refuses(one, 'a'));
  ASSERT_TRUE(one.feed(std::string_view("\\u006")));
  EXPECT_TRUE(refuses(one, '1')) << "\\u0061 is a";
  EXPECT_TRUE(one.feed(std::string_view("2\"]")));
  // Items of different kinds are different values; an array's items are
  // its own (an outer array without uniqueItems may repeat inner ones).
  EXPECT_TRUE(reads_whole(R"({"type":"array","items":{"type":["string","integer","boolean","null"]},"uniqueItems":true})",
                          R"(["1",1,true,"true",null,"null"])"));
  const std::string nested = R"({"type":"array","items":{"type":"array","items":{"type":"integer"},"uniqueItems":true}})";
  EXPECT_TRUE(reads_whole(nested, "[[1,2],[1,2],[2]]"));
  EXPECT_FALSE(reads_whole(nested, "[[1,2],[3,3]]"));
  EXPECT_TRUE(reads_whole(R"({"type":"object","properties":{"a":{"items":{"type":"integer"},"uniqueItems":true},)"
                          R"("b":{"items":{"type":"integer"},"uniqueItems":true}}})",
                          R"({"a":[1,2],"b":[1,2]})"));
  EXPECT_TRUE(reads_whole(R"({"type":"array","items":{"type":"integer"},"uniqueItems":false})", "[1,1]"));
}

TEST(json_schema, unique_items_take_an_array_whole_exactly_when_no_two_items_are_equal_values) {
  // Random arrays of scalars, each written one of several ways: taken
  // whole exactly when nlohmann finds no two items equal, and otherwise
  // refused at the first repeat's last byte (a string's closing quote, the
  // byte after a number) or, for true, false and null, its first.
  const std::string schema = R"({"type":"array","items":{"anyOf":[{"type":"string"},{"type":"number"},)"
                             R"({"type":"boolean"},{"type":"null"}]},"uniqueItems":true})";
  const std::vector<std::string> spellings = {
    R"("a")", R"("\u0061")", R"("b")", R"("")", R"("\"")", R"("\u0022")", "\"\xc3\xa9\"", R"("\u00e9")", R"("\u00E9")",
    "\"\xf0\x9f\x98\x80\"", R"("\ud83d\ude00")", R"("1")", R"("true")", R"("a\nb")", R"("a\u000Ab")",
    "1", "1.0", "10e-1", "0.1e1", "2", "-0", "0", "0.0", "1e2", "100", "-1", "-1.00", "true", "false", "null"};
  std::mt19937 rng(13);
  int repeated = 0, unrepeated = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text = "[";
    std::vector<json> values;
    std::size_t refused_at = std::string::npos;
    for (auto n = rng() % 7; n > 0; --n) {
      if (text.size() > 1)
        text += ",";
      const auto& x = spellings[rng() % spellings.size()];
      const auto v = json::parse(x);
      if (refused_at == std::string::npos && std::find(values.begin(), values.end(), v) != values.end())
        refused_at = v.is_string()              ? text.size() + x.size() - 1
                     : v.is_number()            ? text.size() + x.size()
                                                : text.size();
      values.push_back(v);
      text += x;
    }
    text += "]";
    SCOPED_TRACE(text);
    (refused_at == std::string::npos ? unrepeated : repeated) += 1;
    auto m = machine(schema);
    std::size_t at = 0;
    while (at < text.size() && m.feed(static_cast<unsigned char>(text[at])))
      ++at;
    if (refused_at == std::string::npos) {
      EXPECT_EQ(at, text.size());
      EXPECT_TRUE(m.complete());
    } else {
      EXPECT_EQ(at, refused_at);
    }
  }
  EXPECT_GT(repeated, 500);
  EXPECT_GT(unrepeated, 500);
}

TEST(json_schema, property_names_take_an_object_whole_exactly_when_they_allow_every_name) {
  // Random objects of names written one of several ways, against
  // propertyNames of a pattern, lengths, alternatives and a format; the
  // oracle reads each name's characters.
  const std::vector<std::string> held = {
    R"({"pattern":"^[ab]{1,2}$"})", R"({"minLength":1,"maxLength":2})",
    R"({"anyOf":[{"pattern":"^a"},{"type":"string","maxLength":1}]})", R"({"format":"date"})",
    R"({"$ref":"#/$defs/k"})"};
  const std::vector<std::string> names = {"a", "b", "ab", "ba", "abc", "", "c", "\\u0061", "\\u0062b", "\xc3\xa9",
                                          "\\u00e9x", "aa", "bb", "2024-01-01", "2023-02-29", "a\\nb", "\\n"};
  std::mt19937 rng(17);
  int taken = 0, refused = 0;
  for (const auto& names_schema : held) {
    const auto schema = R"({"type":"object","propertyNames":)" + names_schema
                        + R"(,"additionalProperties":{"type":"integer"},"$defs":{"k":{"enum":["ab","\u00e9x"]}}})";
    SCOPED_TRACE(schema);
    const auto doc = json::parse(schema);
    for (int i = 0; i < 300; ++i) {
      std::string text = "{";
      std::vector<std::string> written; // as characters: none twice
      bool want = true;
      for (auto n = rng() % 4; n > 0; --n) {
        const auto& x = names[rng() % names.size()];
        const auto name = json::parse("\"" + x + "\"").get<std::string>();
        if (std::find(written.begin(), written.end(), name) != written.end())
          continue;
        written.push_back(name);
        // An enum's names are written as the schema spells them.
        const bool spelled = !doc["propertyNames"].contains("$ref") || x.find('\\') == std::string::npos;
        want = want && spelled && valid(doc, doc["propertyNames"], json(name));
        text += (text.size() > 1 ? ",\"" : "\"") + x + "\":1";
      }
      text += "}";
      (want ? taken : refused) += 1;
      EXPECT_EQ(reads_whole(schema, text), want) << text;
    }
  }
  EXPECT_GT(taken, 200);
  EXPECT_GT(refused, 200);
}

TEST(json_schema, any_object_is_json_object) {
  auto m = schema_machine(json_schema::any_object());
  EXPECT_TRUE(m.feed(std::string_view(R"({"a":[1,{"b":null}],"c":"d"})")));
  EXPECT_TRUE(m.complete());
  auto n = schema_machine(json_schema::any_object());
  EXPECT_FALSE(n.feed('['));
  EXPECT_EQ(json_schema::any_object()->id(), json_schema::any_object()->id());
  EXPECT_NE(json_schema::compile(R"({"type":"object"})")->id(), json_schema::any_object()->id());
}

/// A random value of schema `s` (one of its anyOf or oneOf, one of its types).
json sample(const json& doc, const json& s, std::mt19937& rng, int depth = 0) {
  const auto pick = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); };
  if (s.is_boolean() || s.empty())
    return pick(2) ? json(static_cast<int>(pick(100))) : json("w");
  if (s.contains("$ref"))
    return sample(doc, doc.at(json::json_pointer(s["$ref"].get<std::string>().substr(1))), rng, depth + 1);
  if (s.contains("allOf"))
    return sample(doc, s["allOf"][0], rng, depth + 1);
  if (s.contains("anyOf") || s.contains("oneOf")) {
    const auto& a = s.contains("anyOf") ? s["anyOf"] : s["oneOf"];
    // Deep in a recursive schema, the last alternative (null) ends it.
    return sample(doc, a[depth > 6 ? a.size() - 1 : pick(a.size())], rng, depth + 1);
  }
  if (s.contains("enum"))
    return s["enum"][pick(s["enum"].size())];
  if (s.contains("const"))
    return s["const"];
  auto types = types_of(s);
  if (types.empty())
    types = {"string", "integer", "boolean", "null"};
  const auto t = types[pick(types.size())];
  if (t == "object") {
    json o = json::object();
    const auto props = s.value("properties", json::object());
    const auto required = s.value("required", json::array());
    for (const auto& [k, sub] : props.items())
      if (std::find(required.begin(), required.end(), k) != required.end() || (depth < 6 && pick(2)))
        o[k] = sample(doc, sub, rng, depth + 1);
    const bool others = !(s.contains("additionalProperties") && s["additionalProperties"] == false);
    // Another name: one of propertyNames' (not a property's), or zz0 to zz4.
    const auto other = [&](const std::string& fallback) -> std::optional<std::string> {
      if (!s.contains("propertyNames"))
        return fallback;
      const auto name = sample(doc, s["propertyNames"], rng, depth + 1).get<std::string>();
      return props.contains(name) ? std::nullopt : std::optional(name);
    };
    if (others && depth < 6 && pick(3) == 0)
      for (int more = 1 + static_cast<int>(pick(3)); more > 0; --more)
        if (const auto name = other("zz" + std::to_string(pick(5))))
          o[*name] = sample(doc, s.value("additionalProperties", json(true)), rng, depth + 1);
    // minProperties and maxProperties: more names, or fewer of those not
    // required.
    for (unsigned k = 0; o.size() < s.value("minProperties", 0u) && k < 100; ++k) {
      if (others) {
        if (const auto name = other("yy" + std::to_string(k)))
          o[*name] = sample(doc, s.value("additionalProperties", json(true)), rng, depth + 1);
      } else
        for (const auto& [name, sub] : props.items())
          if (!o.contains(name) && o.size() < s.value("minProperties", 0u))
            o[name] = sample(doc, sub, rng, depth + 1);
    }
    for (auto it = o.begin(); o.size() > s.value("maxProperties", 0xFFFFFFFFu) && it != o.end();) {
      if (std::find(required.begin(), required.end(), it.key()) == required.end())
        it = o.erase(it);
      else
        ++it;
    }
    return o;
  }
  if (t == "array") {
    json a = json::array();
    const bool listed = s.contains("items") && s["items"].is_array();
    const json prefix = listed ? s["items"] : s.value("prefixItems", json::array());
    const json rest = s.value(listed ? "additionalItems" : "items", json(true));
    const auto lo = s.value("minItems", 0u);
    auto hi = std::min(s.value("maxItems", 4u), lo + 3u);
    if (rest == json(false))
      hi = std::min(hi, static_cast<unsigned>(prefix.size()));
    // uniqueItems: an item equal to one before is drawn again (the
    // schemas' items take enough values for minItems).
    const bool unique = s.value("uniqueItems", false);
    const std::size_t n = depth < 6 ? lo + pick(hi - lo + 1) : lo;
    for (int tries = 0; a.size() < n && tries < 100; ++tries) {
      auto item = sample(doc, a.size() < prefix.size() ? prefix[a.size()] : rest, rng, depth + 1);
      if (!unique || std::find(a.begin(), a.end(), item) == a.end())
        a.push_back(std::move(item));
    }
    return a;
  }
  if (t == "string" && s.contains("pattern")) // the schema's examples match it
    return s["examples"][pick(s["examples"].size())];
  if (t == "string" && s.contains("format")) {
    const auto two = [&](std::size_t lo, std::size_t n) {
      const auto x = lo + pick(n);
      return std::string(x < 10 ? "0" : "") + std::to_string(x);
    };
    const auto date = std::to_string(1000 + pick(9000)) + "-" + two(1, 12) + "-" + two(1, 28);
    const auto time = two(0, 24) + ":" + two(0, 60) + ":" + two(0, 60) + (pick(2) ? "." + std::to_string(pick(1000)) : "")
                      + (pick(2) ? std::string("Z") : (pick(2) ? "+" : "-") + two(0, 24) + ":" + two(0, 60));
    const auto format = s["format"].get<std::string>();
    if (format == "uuid") {
      std::string u;
      for (int i = 0; i < 36; ++i)
        u += i == 8 || i == 13 || i == 18 || i == 23 ? '-' : "0123456789abcdefABCDEF"[pick(22)];
      return u;
    }
    return format == "date" ? date : format == "time" ? time : date + "T" + time;
  }
  if (t == "string") {
    const auto lo = s.value("minLength", 0u);
    const auto hi = std::min(s.value("maxLength", lo + 3u), lo + 3u);
    return std::string(lo + pick(hi - lo + 1), 'a' + static_cast<char>(pick(3)));
  }
  if (t == "integer") {
    const auto lo = std::max(-1000.0, std::max(s.value("minimum", -1e9), s.value("exclusiveMinimum", -1e9) + 1));
    const auto hi = std::min(1000.0, std::min(s.value("maximum", 1e9), s.value("exclusiveMaximum", 1e9) - 1));
    return static_cast<int>(lo) + static_cast<int>(pick(static_cast<std::size_t>(hi - lo) + 1));
  }
  if (t == "number")
    return pick(2) ? json(0.5 * static_cast<double>(pick(40))) : json(static_cast<int>(pick(9)));
  if (t == "boolean")
    return pick(2) == 0;
  return nullptr;
}

TEST(json_schema, takes_a_text_whole_exactly_when_the_oracle_accepts_it) {
  std::mt19937 rng(7);
  const std::string alphabet = R"({}[],:" 0123456789.-eExyzabtrufnlkvq)";
  std::size_t accepted = 0;
  std::size_t refused = 0;
  for (const auto& schema : schemas()) {
    SCOPED_TRACE(schema);
    const auto doc = json::parse(schema);
    for (int i = 0; i < 400; ++i) {
      const auto v = sample(doc, doc, rng);
      ASSERT_TRUE(v.is_object());
      auto text = i % 2 ? v.dump() : v.dump(1);
      ASSERT_EQ(oracle(schema, text), true) << text; // the sampler keeps to the schema
      ASSERT_TRUE(reads_whole(schema, text)) << text;
      // Mutated: inserted, removed and replaced bytes (no escapes, no
      // UTF-8: the oracle's values compare by their compact text).
      for (int k = 0; k < 6; ++k) {
        auto t = text;
        for (auto edits = 1 + rng() % 3; edits > 0 && !t.empty(); --edits) {
          const auto at = rng() % t.size();
          const char c = alphabet[rng() % alphabet.size()];
          switch (rng() % 3) {
          case 0: t.insert(t.begin() + static_cast<std::ptrdiff_t>(at), c); break;
          case 1: t.erase(at, 1); break;
          default: t[at] = c; break;
          }
        }
        if (t.find("-0") != std::string::npos || t.find("\\") != std::string::npos)
          continue; // -0: nlohmann reads an integer the enum spelling rule would not
        const auto judged = oracle(schema, t);
        if (!judged)
          continue;
        const bool want = *judged;
        (want ? accepted : refused) += 1;
        ASSERT_EQ(reads_whole(schema, t), want) << t << "\nfrom " << text;
      }
    }
  }
  EXPECT_GT(accepted, 500u) << "the mutations keep some texts valid";
  EXPECT_GT(refused, 5000u);
}

TEST(json_schema, a_pattern_takes_a_string_exactly_when_it_matches_however_the_string_is_written) {
  // Each pattern against random strings of its alphabet, written plainly
  // and with every character as a \u escape: taken whole iff std::wregex's
  // ECMAScript search finds the pattern in the string.
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
    {"^[0-9]{2,3}(-[0-9])?$", {"0", "5", "9", "-", "a"}},
    {"ab+c|^x", {"a", "b", "c", "x"}},
    {"^(?:a|bc)*d?$", {"a", "b", "c", "d"}},
    {"[^ab]", {"a", "b", "c"}},
    {"^.\\.$", {"a", ".", "\n", "é"}},
    {"^\\w+@\\w+$", {"a", "_", "@", "-", "1"}},
    {"é{2}", {"é", "e", "x"}},
    {"^[\"\\\\]\\t$", {"\"", "\\", "\t", "t"}},
    {"^(ab|a)(bc)?c$", {"a", "b", "c"}},
    {"^$", {"a"}},
  };
  std::mt19937 rng(3);
  std::size_t taken = 0, refused = 0;
  for (const auto& [pattern, alphabet] : cases) {
    SCOPED_TRACE(pattern);
    const std::string schema = R"({"type":"object","properties":{"a":{"pattern":)" + json(pattern).dump() + "}}}";
    for (int i = 0; i < 300; ++i) {
      std::string x;
      for (auto n = rng() % 7; n > 0; --n)
        x += alphabet[rng() % alphabet.size()];
      const bool want = matches(pattern, x);
      (want ? taken : refused) += 1;
      const auto plain = "{\"a\":" + json(x).dump() + "}";
      EXPECT_EQ(reads_whole(schema, plain), want) << plain;
      std::string escaped = "{\"a\":\"";
      for (const auto cp : wide(x)) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "\\u%04x", static_cast<unsigned>(cp));
        escaped += hex;
      }
      escaped += "\"}";
      EXPECT_EQ(reads_whole(schema, escaped), want) << escaped;
    }
  }
  EXPECT_GT(taken, 300u);
  EXPECT_GT(refused, 300u);
  // Part of a character is taken only while the pattern can take a
  // character it begins: é's lead byte, but not that of a CJK one.
  auto m = machine(R"({"type":"object","properties":{"a":{"pattern":"^é$"}}})");
  ASSERT_TRUE(m.feed(std::string_view(R"({"a":")")));
  auto lead = m;
  EXPECT_TRUE(lead.feed(static_cast<unsigned char>(0xC3)));
  EXPECT_FALSE(lead.feed(static_cast<unsigned char>(0xA8))) << "è is not é";
  EXPECT_FALSE(m.feed(static_cast<unsigned char>(0xE4)));
  EXPECT_FALSE(m.feed(std::string_view("\\u00e8")));
  EXPECT_TRUE(m.feed(std::string_view("\\u00E9\"}")));
  EXPECT_TRUE(m.complete());
}

/// The schema's property names and string values, each with the quote
/// that closes it: what a random walk writes whole, half the time.
std::vector<std::string> words_of(const json& schema) {
  std::vector<std::string> words;
  const auto collect = [&](const auto& self, const json& j) -> void {
    if (j.is_object()) {
      for (const auto& [k, v] : j.items()) {
        if (k == "properties")
          for (const auto& [name, sub] : v.items())
            words.push_back(name + "\"");
        self(self, v);
      }
    } else if (j.is_array()) {
      for (const auto& v : j)
        self(self, v);
    } else if (j.is_string()) {
      const auto d = j.dump();
      words.push_back(d.substr(1));
    }
  };
  collect(collect, schema);
  return words;
}

/// A random walk through the bytes `m` allows: half the time one of
/// `words` where it fits, else any allowed byte, most often a closing one.
/// The text when the walk ends a value (within 2,000 bytes); a test
/// failure at a dead end.
std::optional<std::string> walk(schema_machine m, std::vector<std::string>& words, std::mt19937& rng) {
  std::string text;
  while (!m.complete() && text.size() < 2000) {
    if (rng() % 2 == 0) {
      std::shuffle(words.begin(), words.end(), rng);
      const auto w = std::find_if(words.begin(), words.end(), [&](const std::string& x) {
        auto probe = m;
        return probe.feed(std::string_view(x));
      });
      if (w != words.end()) {
        EXPECT_TRUE(m.feed(std::string_view(*w)));
        text += *w;
        continue;
      }
    }
    std::vector<unsigned char> next;
    std::vector<double> weight;
    for (int c = 0; c < 256; ++c) {
      auto probe = m;
      if (!probe.feed(static_cast<unsigned char>(c)))
        continue;
      next.push_back(static_cast<unsigned char>(c));
      weight.push_back(c == '}' || c == ']' ? 20.0 : c == '"' ? 6.0 : c == ',' || c == ':' ? 2.0 : 0.2);
    }
    if (next.empty()) {
      ADD_FAILURE() << "a dead end after " << text;
      return std::nullopt;
    }
    const auto c = next[std::discrete_distribution<std::size_t>(weight.begin(), weight.end())(rng)];
    EXPECT_TRUE(m.feed(c));
    text += static_cast<char>(c);
  }
  if (!m.complete())
    return std::nullopt;
  return text;
}

TEST(json_schema, a_walk_through_the_bytes_it_allows_never_stops_short_and_ends_valid) {
  std::mt19937 rng(11);
  for (const auto& schema : schemas()) {
    SCOPED_TRACE(schema);
    const auto doc = json::parse(schema);
    auto words = words_of(doc);
    int whole = 0;
    for (int walk_no = 0; walk_no < 150; ++walk_no) {
      const auto text = walk(machine(schema), words, rng);
      if (!text)
        continue;
      ++whole;
      const auto v = json::parse(*text, nullptr, false);
      ASSERT_FALSE(v.is_discarded()) << json(*text).dump(-1, ' ', true, json::error_handler_t::replace);
      EXPECT_TRUE(valid(doc, doc, v)) << json(*text).dump(-1, ' ', true, json::error_handler_t::replace);
    }
    EXPECT_GT(whole, 30) << "walks end";
  }
}

TEST(json_schema, every_output_a_forced_tool_call_allows_is_answered_as_a_call_of_valid_arguments) {
  // The chat layer's schema of a forced call, compiled here as the intake
  // does; what the walk ends on is what a model could write.
  const std::string tools = R"([
    {"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
      "properties":{"city":{"type":"string","minLength":1},"unit":{"enum":["c","f"]}},"required":["city"],
      "additionalProperties":false}}},
    {"type":"function","function":{"name":"add","parameters":{"type":"object","$defs":{"n":{"type":"integer",
      "minimum":-99,"maximum":99}},"properties":{"a":{"$ref":"#/$defs/n"},"b":{"$ref":"#/$defs/n"}},
      "required":["a","b"],"additionalProperties":false}}},
    {"type":"function","function":{"name":"get_time"}}])";
  // "required" begins the output with the marker (json_trigger_first);
  // without parallel calls the marker is the prompt's and the output is
  // the call's JSON alone.
  const auto tpl = std::get<openai::chat_template>(openai::make_chat_template("chatml"));
  for (const std::string extra : {"", R"(,"parallel_tool_calls":false)"}) {
  SCOPED_TRACE(extra);
  auto parsed = openai::parse_chat_completion(
    R"({"model":"m","messages":[{"role":"user","content":"q"}],"tool_choice":"required","tools":)" + tools + extra + "}",
    "m", "h1", tpl);
  ASSERT_TRUE(std::holds_alternative<openai::completion_request>(parsed));
  const auto& request = std::get<openai::completion_request>(parsed);
  const auto frame = json::parse(request.frames.at(0));
  const auto schema = frame["json_schema"].dump();
  const std::string opening = frame.value("json_trigger_first", false) ? frame["json_trigger"].get<std::string>() : "";
  EXPECT_EQ(opening.empty(), !extra.empty());
  const auto params = json::parse(tools);
  auto words = words_of(frame["json_schema"]);
  std::mt19937 rng(5);
  std::map<std::string, int> called;
  for (int n = 0; n < 300; ++n) {
    const auto text = walk(machine(schema), words, rng);
    if (!text)
      continue;
    wire::done_reply d;
    d.finish_reason = "stop";
    d.text = opening + *text;
    const openai::completion_answer answer("chatcmpl-h1", 1, request);
    const auto choice = json::parse(answer.body({d}))["choices"][0];
    ASSERT_EQ(choice["finish_reason"], "tool_calls") << *text;
    ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
    const auto& fn = choice["message"]["tool_calls"][0]["function"];
    const auto name = fn["name"].get<std::string>();
    const auto args = json::parse(fn["arguments"].get<std::string>());
    ++called[name];
    const auto tool = std::find_if(params.begin(), params.end(), [&](const json& t) { return t["function"]["name"] == name; });
    ASSERT_NE(tool, params.end()) << name;
    const auto& p = (*tool)["function"];
    if (p.contains("parameters"))
      EXPECT_TRUE(valid(p["parameters"], p["parameters"], args)) << name << " " << args.dump();
    else
      EXPECT_EQ(args, json::object()) << "no parameters: no arguments";
  }
  EXPECT_EQ(called.size(), 3u) << "each function is called in some walk";
  for (const auto& [name, count] : called)
    EXPECT_GT(count, 20) << name;
  }
}

// -- allOf of several schemas, merged ---------------------------------------------

/// `count` random objects (up to 3 names of `keys`, values of `scalars`):
/// the machine of `text` reads each whole exactly where `want` says. How
/// many it takes and refuses.
std::pair<int, int> agrees_on_random_objects(const std::string& text, const std::vector<std::string>& keys,
                                             const std::vector<json>& scalars, std::mt19937& rng, int count,
                                             const std::function<bool(const json&)>& want) {
  int taken = 0, refused = 0;
  for (int k = 0; k < count; ++k) {
    json v = json::object();
    const auto n = rng() % 4;
    for (std::size_t i = 0; i < n; ++i)
      v[keys[rng() % keys.size()]] = scalars[rng() % scalars.size()];
    const bool ok = want(v);
    EXPECT_EQ(reads_whole(text, v.dump()), ok) << v.dump();
    (ok ? taken : refused) += 1;
  }
  return {taken, refused};
}

TEST(json_schema, allof_of_several_schemas_is_their_merge_which_takes_exactly_what_all_of_them_take) {
  const std::vector<std::string> schemas = {
    // OpenAPI's composition: a base by reference, then more properties.
    R"({"$defs":{"Base":{"type":"object","properties":{"id":{"type":"integer","minimum":0}},"required":["id"]}},)"
    R"("allOf":[{"$ref":"#/$defs/Base"},{"properties":{"name":{"type":"string","maxLength":3}},"required":["name"]}]})",
    // One closes the object: the other's extra property is left out.
    R"({"type":"object","allOf":[{"properties":{"id":{"type":"integer"},"a":{}},"additionalProperties":false},)"
    R"({"properties":{"a":{"type":"string"},"name":{"type":"string"}},"required":["a"]}]})",
    // A property's schemas merged in turn; types by intersection; bounds.
    R"({"type":"object","properties":{"id":{"allOf":[{"type":["integer","string"]},{"type":"number","minimum":3},)"
    R"({"maximum":7}]}},"required":["id"],"additionalProperties":false})",
    // Values both list; multipleOf of integers by their least common multiple.
    R"({"type":"object","properties":{"name":{"allOf":[{"enum":["abc","x","y"]},{"enum":["x","y","abcd"]}]},)"
    R"("id":{"allOf":[{"type":"integer","multipleOf":2},{"multipleOf":3}]}},"additionalProperties":false})",
    // anyOf inside, distributed over the rest; keywords beside allOf.
    R"({"type":"object","required":["kind"],"properties":{"kind":{"type":"string"}},"allOf":[{"anyOf":[)"
    R"({"properties":{"kind":{"const":"x"},"id":{"type":"integer"}},"required":["id"]},)"
    R"({"properties":{"kind":{"const":"y"},"name":{"type":"string"}}}]},{"maxProperties":2}]})",
    // additionalProperties merged: schemas of names neither lists.
    R"({"allOf":[{"type":"object","additionalProperties":{"type":"integer"}},)"
    R"({"properties":{"name":{"type":"string"}},"additionalProperties":{"minimum":3}}]})",
  };
  const std::vector<std::string> keys = {"id", "name", "kind", "a", "b", "x"};
  const std::vector<json> scalars = {0, 3, 6, 7, 12, -1, "abc", "abcd", "x", "y", true, nullptr, 2.5};
  std::mt19937 rng(41);
  for (const auto& text : schemas) {
    SCOPED_TRACE(text);
    const auto doc = json::parse(text);
    const auto [taken, refused] =
      agrees_on_random_objects(text, keys, scalars, rng, 3000, [&](const json& v) { return valid(doc, doc, v); });
    EXPECT_GT(taken, 5) << "values the schema takes are met";
    EXPECT_GT(refused, 5);
  }
  // What the merge makes of the composition: the base's required id and
  // the name's bound both hold.
  EXPECT_TRUE(reads_whole(schemas[0], R"({"id":4,"name":"abc"})"));
  EXPECT_FALSE(reads_whole(schemas[0], R"({"name":"abc"})"));
  EXPECT_FALSE(reads_whole(schemas[0], R"({"id":4,"name":"abcd"})"));
  EXPECT_FALSE(reads_whole(schemas[1], R"({"a":"s","name":"n"})")) << "name is left out by the closed schema";
  // What cannot merge, or meets no value, is refused saying what and where.
  for (const auto& [schema, says] : std::vector<std::pair<std::string, std::string>>{
         {R"({"type":"object","properties":{"s":{"allOf":[{"pattern":"^a"},{"pattern":"b$"}]}}})",
          R"("#/properties/s" has allOf of schemas with different "pattern")"},
         {R"({"type":"object","properties":{"s":{"allOf":[{"type":"string"},{"type":"integer"}]}},"required":["s"]})",
          "a required property or item has no value"},
         {R"({"allOf":[{"type":"object"},{"type":"array"}]})", "no value meets together"},
         {R"({"type":"object","properties":{"s":{"allOf":[{"type":"array"},{"prefixItems":[{}]}]}}})",
          R"(one with "prefixItems"; Troupe merges)"},
         {R"({"type":"object","allOf":[{"properties":{"a":{}},"additionalProperties":false},{"required":["b"]}]})",
          R"(require property "b" and take no property of that name)"},
         {R"({"$defs":{"a":{"allOf":[{"$ref":"#/$defs/a"},{"type":"object"}]}},"$ref":"#/$defs/a"})",
          "refers back to itself"},
         {R"({"type":"object","properties":{"s":{"allOf":[{"multipleOf":0.5},{"multipleOf":0.2}]}}})",
          R"(different "multipleOf")"},
         {R"({"allOf":[{"$ref":"#/$defs/none"},{"type":"object"}]})", "refers to nothing"},
       }) {
    EXPECT_NE(refusal(schema).find(says), std::string::npos) << schema << ": " << refusal(schema);
  }
  // A property no value meets is never given.
  for (const std::string never : {R"({"type":"object","properties":{"s":{"allOf":[{"type":"string"},{"type":"integer"}]}}})",
                                  R"({"type":"object","properties":{"s":{"allOf":[{"enum":[1,2]},{"const":3}]}}})",
                                  R"({"type":"object","properties":{"s":false}})"}) {
    EXPECT_TRUE(reads_whole(never, R"({"t":1})")) << never;
    EXPECT_FALSE(reads_whole(never, R"({"s":1})")) << never;
    EXPECT_FALSE(reads_whole(never, R"({"s":"x"})")) << never;
  }
  // $defs beside a merged top level stay, and references into them hold.
  EXPECT_TRUE(reads_whole(R"({"$defs":{"n":{"type":"integer"}},"allOf":[{"type":"object",)"
                          R"("properties":{"a":{"$ref":"#/$defs/n"}}},{"required":["a"]}]})",
                          R"({"a":1})"));
}

TEST(json_schema, pattern_properties_hold_each_name_a_pattern_matches_to_its_schema_and_others_to_additional) {
  const std::vector<std::string> schemas = {
    // Pydantic's dict with keys of a pattern (older versions), closed.
    R"({"type":"object","patternProperties":{"^[a-c]+$":{"type":"integer","minimum":3}},"additionalProperties":false})",
    // Names a pattern matches, the rest additional; a property the
    // pattern matches is held to both.
    R"({"type":"object","properties":{"ab":{"type":"integer","maximum":6}},"required":["ab"],)"
    R"("patternProperties":{"b":{"minimum":3}},"additionalProperties":{"type":"string"}})",
    // Two patterns: a name both match is not written (different schemas).
    R"({"type":"object","patternProperties":{"^a":{"type":"integer"},"b$":{"type":"string"}},)"
    R"("additionalProperties":false,"maxProperties":3})",
    // Open: other names take any value.
    R"({"type":"object","patternProperties":{"^x":{"enum":["x","y"]}}})",
  };
  const std::vector<std::string> keys = {"a", "ab", "b", "abc", "x", "xa", "cab", "\u00e9b", "d"};
  const std::vector<json> scalars = {0, 3, 6, 7, -1, "abc", "x", "y", true, nullptr};
  std::mt19937 rng(43);
  for (std::size_t k = 0; k < schemas.size(); ++k) {
    const auto& text = schemas[k];
    SCOPED_TRACE(text);
    const auto doc = json::parse(text);
    const auto [taken, refused] = agrees_on_random_objects(text, keys, scalars, rng, 2000, [&](const json& v) {
      // (a name both patterns of the third match is never written)
      return valid(doc, doc, v) && !(k == 2 && v.contains("ab"));
    });
    EXPECT_GT(taken, 20);
    EXPECT_GT(refused, 20);
  }
  // A closed object's name no pattern can match any more is refused at the
  // character that shows it.
  auto m = machine(schemas[0]);
  ASSERT_TRUE(m.feed(std::string_view(R"({"ab)")));
  EXPECT_FALSE(m.feed('d'));
  EXPECT_TRUE(m.feed(std::string_view(R"(c":4})")));
  EXPECT_TRUE(m.complete());
  // Escapes are read as the characters they write.
  EXPECT_TRUE(reads_whole(schemas[0], R"({"\u0061":3})"));
  EXPECT_FALSE(reads_whole(schemas[0], R"({"\u0064":3})"));
  // Refusals.
  for (const auto& [schema, says] : std::vector<std::pair<std::string, std::string>>{
         {R"x({"type":"object","patternProperties":{"(?=a)":{}}})x", "is the schema of a pattern Troupe cannot read"},
         {R"({"type":"object","patternProperties":[]})", "must be an object of patterns"},
         {R"({"type":"object","patternProperties":{"a":{}},"propertyNames":{"enum":["a"]}})", "lists names beside"},
         {R"({"allOf":[{"type":"object","patternProperties":{"a":{}}},{"required":[]}]})",
          R"(one with "patternProperties"; Troupe merges)"},
       })
    EXPECT_NE(refusal(schema).find(says), std::string::npos) << schema << ": " << refusal(schema);
}

TEST(json_schema, dependent_required_makes_properties_required_once_another_is_given) {
  const std::vector<std::string> schemas = {
    R"({"type":"object","properties":{"card":{"type":"string"},"billing":{"type":"string"},"name":{}},)"
    R"("dependentRequired":{"card":["billing"]}})",
    // Through each other, and room for them under maxProperties.
    R"({"type":"object","properties":{"a":{},"b":{},"c":{},"d":{}},"dependentRequired":{"a":["b"],"b":["c"]},)"
    R"("maxProperties":3,"additionalProperties":false})",
    // Before draft 2019-09: dependencies of name lists; a required one's.
    R"({"type":"object","properties":{"a":{},"b":{},"c":{}},"required":["a"],"dependencies":{"a":["c"]},)"
    R"("additionalProperties":false})",
  };
  const std::vector<std::string> keys = {"card", "billing", "name", "a", "b", "c", "d"};
  const std::vector<json> scalars = {1, "x"};
  std::mt19937 rng(47);
  for (const auto& text : schemas) {
    SCOPED_TRACE(text);
    const auto doc = json::parse(text);
    const auto [taken, refused] =
      agrees_on_random_objects(text, keys, scalars, rng, 2000, [&](const json& v) { return valid(doc, doc, v); });
    EXPECT_GT(taken, 20);
    EXPECT_GT(refused, 20);
  }
  // The object may not close before what was given requires; no name
  // begins for which there is no room.
  auto m = machine(schemas[0]);
  ASSERT_TRUE(m.feed(std::string_view(R"({"card":"1")")));
  EXPECT_FALSE(m.feed('}'));
  ASSERT_TRUE(m.feed(std::string_view(R"(,"billing":"x"})")));
  EXPECT_TRUE(m.complete());
  auto full = machine(schemas[1]);
  ASSERT_TRUE(full.feed(std::string_view(R"({"d":1,"c":1,)")));
  EXPECT_FALSE(full.feed(std::string_view(R"("a")"))) << "a needs b and c: four names, past maxProperties 3";
  for (const auto& [schema, says] : std::vector<std::pair<std::string, std::string>>{
         {R"({"type":"object","properties":{"a":{}},"dependentRequired":{"a":["z"]}})", R"(names "z", which is not among)"},
         {R"({"type":"object","properties":{"a":{}},"dependencies":{"a":{"required":["a"]}}})", "is a schema"},
         {R"({"type":"object","properties":{"a":{}},"dependentRequired":["a"]})", "must be an object"},
       })
    EXPECT_NE(refusal(schema).find(says), std::string::npos) << schema << ": " << refusal(schema);
}

// -- a trigger, then a value ---------------------------------------------------

const std::string counted =
  R"({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false})";

/// The oracle of a headed output, read afresh: free text up to each
/// `trigger`, then one of `heads`' names and `mark`, then bytes a fresh
/// machine of that name's schema takes until its value closes, then free
/// text again. False where a head or a value is broken.
bool headed_ok(const std::vector<trigger_head>& heads, const std::string& trigger, const std::string& mark,
               std::string_view text) {
  for (std::size_t from = 0;;) {
    const auto at = text.find(trigger, from);
    if (at == std::string_view::npos)
      return true;
    const auto rest = text.substr(at + trigger.size());
    const trigger_head* head = nullptr;
    for (const auto& h : heads) {
      const auto whole = h.name + mark;
      if (rest.size() < whole.size() ? whole.starts_with(rest) : rest.starts_with(whole)) {
        if (rest.size() < whole.size())
          return true; // a head begun
        head = &h;
      }
    }
    if (head == nullptr)
      return false;
    schema_machine m(head->schema);
    std::size_t i = at + trigger.size() + head->name.size() + mark.size();
    while (i < text.size() && !m.complete())
      if (!m.feed(static_cast<unsigned char>(text[i++])))
        return false;
    if (!m.complete())
      return true; // a value begun
    from = i;
  }
}

/// The oracle of a triggered output, read afresh: free text up to each
/// `trigger`, then bytes a fresh machine takes until its value closes,
/// then free text again. False where a value is broken.
bool triggered_ok(const std::string& schema, const std::string& trigger, std::string_view text) {
  return headed_ok({{"", json_schema::compile(schema)}}, trigger, "", text);
}

TEST(json_trigger, free_text_until_the_trigger_then_a_value_of_the_schema_then_free_text) {
  testing::list_tokenizer vocab({"", "x"});
  json_vocab v(vocab);
  const json_trigger t(v, "<tool>", json_schema::compile(counted));
  json_trigger::state s;
  ASSERT_TRUE(t.advance(s, "hi <to"));
  EXPECT_FALSE(s.value);
  EXPECT_EQ(s.matched, 3u);
  ASSERT_TRUE(t.advance(s, "ol>\n "));
  ASSERT_TRUE(s.value) << "the trigger opens a value";
  EXPECT_FALSE(t.advance(s, "x")) << "a value of the schema cannot begin with x";
  ASSERT_TRUE(s.value);
  ASSERT_TRUE(t.advance(s, R"({"n": 4)"));
  EXPECT_FALSE(t.advance(s, R"(,"m":1})")) << "no other property";
  EXPECT_FALSE(t.advance(s, "}\n<tool> x")) << "x cannot begin the next value";
  ASSERT_TRUE(s.value) << "as it was";
  ASSERT_TRUE(t.advance(s, "}\nok "));
  EXPECT_FALSE(s.value) << "after the value, free text";
  ASSERT_TRUE(t.advance(s, "<tool>"));
  ASSERT_TRUE(s.value);
  ASSERT_TRUE(t.advance(s, R"({"n":1}<tool>)"));
  EXPECT_TRUE(s.value) << "free text right after a value may open the next";
  // Overlapping beginnings: "<<tool>" holds the trigger.
  json_trigger::state u;
  ASSERT_TRUE(t.advance(u, "<<to<<tool>"));
  EXPECT_TRUE(u.value);
  const json_trigger aab(v, "aab", json_schema::any_object());
  json_trigger::state w;
  ASSERT_TRUE(aab.advance(w, "aaa"));
  EXPECT_EQ(w.matched, 2u);
  ASSERT_TRUE(aab.advance(w, "b"));
  EXPECT_TRUE(w.value);
  // Leading: the output must begin with the trigger, so a value follows.
  json_trigger::state lead;
  lead.leading = true;
  EXPECT_FALSE(t.advance(lead, "hi")) << "not the trigger";
  ASSERT_TRUE(t.advance(lead, "<to"));
  EXPECT_TRUE(lead.leading);
  EXPECT_FALSE(t.advance(lead, "x"));
  ASSERT_TRUE(t.advance(lead, "ol> {"));
  EXPECT_FALSE(lead.leading);
  EXPECT_TRUE(lead.value);
  EXPECT_THROW(json_trigger(v, "", json_schema::any_object()), std::invalid_argument);
  EXPECT_THROW(json_trigger(v, std::string(65, 'a'), json_schema::any_object()), std::invalid_argument);
}

TEST(json_schema, the_top_level_may_be_an_array_and_its_close_ends_the_output) {
  const auto items = json_schema::compile(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":2})");
  schema_machine m(items);
  EXPECT_FALSE(m.feed(std::string_view("{"))) << "an array, not an object";
  EXPECT_FALSE(m.feed(std::string_view("[]"))) << "one item at least";
  ASSERT_TRUE(m.feed(std::string_view(" [1, 2")));
  EXPECT_FALSE(m.feed(std::string_view(",3"))) << "two at most";
  EXPECT_FALSE(m.complete());
  ASSERT_TRUE(m.feed(std::string_view("]")));
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(m.feed(std::string_view("x")));
  // Either container, as the schema says; an object's schema takes no array.
  const auto either = json_schema::compile(R"({"anyOf":[{"type":"object"},{"type":"array","items":{"const":"a"}}]})");
  schema_machine a(either), o(either);
  EXPECT_TRUE(a.feed(std::string_view(R"(["a","a"])")) && a.complete());
  EXPECT_TRUE(o.feed(std::string_view(R"({"k":[1]})")) && o.complete());
  schema_machine obj(json_schema::compile(R"({"type":"object"})"));
  EXPECT_FALSE(obj.feed(std::string_view("[")));
  // A plain JSON object machine (response_format json_object) still takes
  // only an object.
  json_machine plain;
  EXPECT_FALSE(plain.feed(std::string_view("[")));
}

TEST(json_trigger, a_special_tokens_own_text_as_the_trigger_is_written_by_that_token_and_an_array_may_follow) {
  //                              0   1   2    3     4    5    6     7        8         9    10
  testing::list_tokenizer vocab({"", "", "[", "{}", "]", " ", "hi", "[TOOL", "_CALLS]", ",", "]hi"},
                                {{1, "[TOOL_CALLS]"}});
  json_vocab v(vocab);
  EXPECT_EQ(v.special("[TOOL_CALLS]"), 1);
  EXPECT_EQ(v.special("[TOOL"), -1);
  const json_trigger t(v, "[TOOL_CALLS]",
                       json_schema::compile(R"({"type":"array","items":{"type":"object"},"minItems":1})"));
  ASSERT_EQ(t.special_token(), 1);
  const auto allows = [&](const json_trigger::state& s, std::int32_t k) {
    const auto split = t.split(s);
    return std::binary_search(split->allowed.begin(), split->allowed.end(), k);
  };
  json_trigger::state s;
  ASSERT_TRUE(t.advance(s, 6));
  EXPECT_TRUE(allows(s, 1) && allows(s, 0)) << "free text: the marker or the end";
  ASSERT_TRUE(t.advance(s, 1));
  ASSERT_TRUE(s.value) << "the token opens a value";
  EXPECT_FALSE(allows(s, 1) || allows(s, 0) || allows(s, 3));
  EXPECT_TRUE(allows(s, 2) && allows(s, 5));
  ASSERT_TRUE(t.advance(s, 2));
  ASSERT_TRUE(t.advance(s, 3));
  EXPECT_TRUE(allows(s, 9) && allows(s, 4));
  ASSERT_TRUE(t.advance(s, 10));
  EXPECT_FALSE(s.value) << "the array's close ends the value, and free text follows in the same token";
  // The trigger spelled out in text opens a value too.
  ASSERT_TRUE(t.advance(s, 7));
  ASSERT_TRUE(t.advance(s, 8));
  ASSERT_TRUE(s.value);
  ASSERT_TRUE(t.advance(s, std::string_view("[{},{}]")));
  EXPECT_FALSE(s.value);
  // Leading: the token writes the whole trigger, only at its start.
  json_trigger::state lead;
  lead.leading = true;
  EXPECT_TRUE(allows(lead, 1) && allows(lead, 7) && allows(lead, 2)) << "\"[\" begins the trigger";
  EXPECT_FALSE(allows(lead, 0) || allows(lead, 6) || allows(lead, 3));
  ASSERT_TRUE(t.advance(lead, 1));
  EXPECT_FALSE(lead.leading);
  EXPECT_TRUE(lead.value);
  json_trigger::state begun;
  begun.leading = true;
  ASSERT_TRUE(t.advance(begun, 7));
  EXPECT_FALSE(allows(begun, 1));
  EXPECT_FALSE(t.advance(begun, 1)) << "the trigger's start written already";
  EXPECT_EQ(begun.matched, 5u) << "as it was";
  // Where no special token's text is the trigger, none writes it.
  const json_trigger plain(v, "<tool>", json_schema::any_object());
  EXPECT_EQ(plain.special_token(), -1);
  json_trigger::state p;
  ASSERT_TRUE(plain.advance(p, 1));
  EXPECT_FALSE(p.value);
}

/// One of `split`'s allowed tokens other than the end (token 0), drawn by
/// `rng`; -1 where there is none.
std::int32_t draw_going_on(const json_vocab::token_split& split, std::mt19937& rng) {
  std::vector<std::int32_t> go;
  for (const auto k : split.allowed)
    if (k != 0)
      go.push_back(k);
  return go.empty() ? -1 : go[rng() % go.size()];
}

/// Walks `t` over `tokens` (token 0 the end), every other walk leading,
/// checking each state's split against `readable` (the oracle of an output
/// read afresh): what is allowed reads, and outside a value what reads is
/// allowed; the end-of-sequence token only in free text. The values the
/// walks closed.
int walk_trigger(const json_trigger& t, const std::vector<std::string>& tokens, const std::string& trigger,
                 const std::function<bool(std::string_view)>& readable, unsigned seed) {
  std::mt19937 rng(seed);
  int values = 0;
  for (int walk = 0; walk < 200; ++walk) {
    json_trigger::state s;
    s.leading = walk % 2 == 1; // the output begins with the trigger
    std::string text;
    for (int step = 0; step < 30; ++step) {
      const auto split = t.split(s);
      for (std::int32_t k = 1; k < static_cast<std::int32_t>(tokens.size()); ++k) {
        const auto& bytes = tokens[static_cast<std::size_t>(k)];
        const bool allowed = std::binary_search(split->allowed.begin(), split->allowed.end(), k);
        EXPECT_NE(allowed, std::binary_search(split->banned.begin(), split->banned.end(), k));
        const auto next = text + bytes;
        // Leading, the text must begin the trigger or begin with it.
        const bool begins = walk % 2 == 0 || (next.size() < trigger.size() ? trigger.starts_with(next) : next.starts_with(trigger));
        const bool reads = begins && readable(next);
        if (allowed) {
          EXPECT_TRUE(reads) << json(text).dump() << " + " << json(bytes).dump();
        } else if (!s.value) {
          EXPECT_FALSE(reads) << "outside a value, only what breaks the output is banned: " << json(text).dump()
                              << " + " << json(bytes).dump();
        }
      }
      EXPECT_EQ(std::binary_search(split->allowed.begin(), split->allowed.end(), 0),
                !s.value && !s.leading && s.head == json_trigger::no_head)
        << "the end-of-sequence token is free text's";
      const auto k = draw_going_on(*split, rng);
      if (k < 0) {
        ADD_FAILURE() << "no token goes on from " << json(text).dump();
        return values;
      }
      const bool was_value = s.value.has_value();
      EXPECT_TRUE(t.advance(s, tokens[static_cast<std::size_t>(k)]));
      values += was_value && !s.value;
      text += tokens[static_cast<std::size_t>(k)];
    }
  }
  return values;
}

TEST(json_trigger, every_token_it_allows_keeps_the_output_readable_and_in_free_text_only_those) {
  std::vector<std::string> tokens = {"", "<", "tool", ">", "<tool>", "<tool>{", "<tool>x", ">{", ">\n{\"n\":", ">hi",
                                     "{", "}", "\"n\":", "\"n", "\":", "1", "-", " ", "\n", "hi", "}<tool>",
                                     "}\n", "}x", "x", "<<", "ool>{\"", "n", "\"", ":"};
  testing::list_tokenizer vocab(tokens);
  json_vocab v(vocab);
  const std::string trigger = "<tool>";
  const json_trigger t(v, trigger, json_schema::compile(counted));
  const auto values =
    walk_trigger(t, tokens, trigger, [&](std::string_view text) { return triggered_ok(counted, trigger, text); }, 9);
  EXPECT_GT(values, 50) << "walks close values";
}

// -- a headed trigger: a name and a mark, then a value ---------------------------

const std::string headed_schema =
  R"({"type":"object","properties":{"get_weather":{"type":"object","properties":{"city":{"$ref":"#/$defs/city"}},)"
  R"("required":["city"],"additionalProperties":false},"get_time":{"type":"object","additionalProperties":false}},)"
  R"("$defs":{"city":{"type":"string","maxLength":3}}})";

TEST(json_trigger, heads_are_the_top_levels_properties_each_with_its_schema_and_the_defs_beside_it) {
  json_schema_cache cache;
  const auto heads = trigger_heads(headed_schema, "[ARGS]", cache);
  ASSERT_EQ(heads.size(), 2u);
  EXPECT_EQ(heads[0].name, "get_time");
  EXPECT_EQ(heads[1].name, "get_weather");
  schema_machine weather(heads[1].schema);
  EXPECT_FALSE(weather.feed(std::string_view(R"({"city":"Lyon"})"))) << "the $ref into $defs holds: 3 at most";
  schema_machine w2(heads[1].schema);
  EXPECT_TRUE(w2.feed(std::string_view(R"({"city":"Ly"})")) && w2.complete());
  const auto refused = [&](const std::string& text, std::string_view mark, const std::string& says) {
    try {
      (void)trigger_heads(text, mark, cache);
      ADD_FAILURE() << text << " was taken";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused(R"({"type":"object"})", "[ARGS]", "\"properties\" hold");
  refused(R"({"properties":{}})", "[ARGS]", "\"properties\" hold");
  refused(R"({"properties":{"":{}}})", "[ARGS]", "not empty");
  refused(R"({"properties":{"a[ARGS]b":{}}})", "[ARGS]", "property \"a[ARGS]b\" holds the head's mark");
  refused(R"({"properties":{"a":{"type":"object"},"a]":{}}})", "]]", "cannot be told apart");
  refused(R"({"properties":{"f":{"type":"frog"}}})", "[ARGS]", "property \"f\": ");
  refused(R"({"properties":{"f":{"$ref":"#/properties/g"},"g":{}}})", "[ARGS]", "property \"f\": ");
}

TEST(json_trigger, headed_the_trigger_then_a_name_then_the_mark_then_a_value_of_that_names_schema) {
  //                              0   1   2   3      4           5        6    7    8           9    10
  testing::list_tokenizer vocab({"", "", "", "get", "_weather", "_time", "{", "}", "\"city\":", "\"", "x",
                                 // 11                12   13    14    15        16        17
                                 "get_time[ARGS]{", " ", "hi", "ge", "[ARGS]", "[TOOL", "_CALLS]get"},
                                {{1, "[TOOL_CALLS]"}, {2, "[ARGS]"}});
  json_vocab v(vocab);
  json_schema_cache cache;
  const json_trigger t(v, "[TOOL_CALLS]", "[ARGS]", trigger_heads(headed_schema, "[ARGS]", cache));
  EXPECT_TRUE(t.reads_special(1) && t.reads_special(2));
  EXPECT_FALSE(t.reads_special(0) || t.reads_special(3));
  const auto allows = [&](const json_trigger::state& s, std::int32_t k) {
    const auto split = t.split(s);
    EXPECT_NE(std::binary_search(split->allowed.begin(), split->allowed.end(), k),
              std::binary_search(split->banned.begin(), split->banned.end(), k));
    return std::binary_search(split->allowed.begin(), split->allowed.end(), k);
  };
  json_trigger::state s;
  ASSERT_TRUE(t.advance(s, 13));
  EXPECT_TRUE(allows(s, 1) && allows(s, 0) && allows(s, 2)) << "free text: the trigger, the end, any token";
  ASSERT_TRUE(t.advance(s, 1));
  ASSERT_NE(s.head, json_trigger::no_head) << "the trigger opens the heads";
  EXPECT_FALSE(s.value);
  for (const std::int32_t k : {0, 1, 2, 6, 12, 13, 4})
    EXPECT_FALSE(allows(s, k)) << k << ": a name comes first";
  EXPECT_TRUE(allows(s, 3) && allows(s, 11) && allows(s, 14));
  ASSERT_TRUE(t.advance(s, 3));
  EXPECT_FALSE(allows(s, 2)) << "\"get\" is no name: no mark yet";
  EXPECT_FALSE(t.advance(s, 2));
  ASSERT_TRUE(t.advance(s, 4));
  EXPECT_TRUE(allows(s, 2) && allows(s, 15)) << "the mark, as its token or its text";
  EXPECT_FALSE(allows(s, 6) || allows(s, 5));
  ASSERT_TRUE(t.advance(s, 2));
  ASSERT_TRUE(s.value) << "the mark opens the value";
  EXPECT_EQ(s.head, json_trigger::no_head);
  ASSERT_TRUE(t.advance(s, 6));
  EXPECT_FALSE(allows(s, 7)) << "get_weather's schema: city is required";
  EXPECT_FALSE(t.advance(s, 7));
  ASSERT_TRUE(t.advance(s, std::string_view(R"("city":"x"})")));
  EXPECT_FALSE(s.value) << "free text after the value";
  // Spelled in text, the trigger and the mark read alike; a token may
  // end the head and begin the value.
  ASSERT_TRUE(t.advance(s, 16));
  ASSERT_TRUE(t.advance(s, 17));
  EXPECT_TRUE(allows(s, 5)) << "\"_time\" goes on from \"get\"";
  ASSERT_TRUE(t.advance(s, std::string_view("_time[ARGS]")));
  ASSERT_TRUE(s.value);
  EXPECT_FALSE(t.advance(s, std::string_view(R"({"city":"x"})"))) << "get_time takes no properties";
  ASSERT_TRUE(t.advance(s, std::string_view("{}")));
  EXPECT_FALSE(s.value);
  ASSERT_TRUE(t.advance(s, std::string_view("[TOOL_CALLS]")));
  EXPECT_FALSE(t.advance(s, std::string_view("got"))) << "no name begins \"go\"";
  EXPECT_FALSE(t.advance(s, std::string_view("get_time{"))) << "the mark comes between";
  ASSERT_TRUE(t.advance(s, 11));
  EXPECT_TRUE(s.value);
  // Leading: the output begins with the trigger, then the heads.
  json_trigger::state lead;
  lead.leading = true;
  EXPECT_FALSE(allows(lead, 2) || allows(lead, 3) || allows(lead, 0));
  EXPECT_FALSE(t.advance(lead, 2)) << "the mark's token is no part of the trigger";
  ASSERT_TRUE(t.advance(lead, 1));
  EXPECT_FALSE(lead.leading);
  EXPECT_NE(lead.head, json_trigger::no_head);
  EXPECT_THROW(json_trigger(v, "[TOOL_CALLS]", "", trigger_heads(headed_schema, "[ARGS]", cache)),
               std::invalid_argument);
  EXPECT_THROW(json_trigger(v, "[TOOL_CALLS]", "[ARGS]", {}), std::invalid_argument);
}

TEST(json_trigger, headed_every_token_it_allows_keeps_the_output_readable_and_in_free_text_only_those) {
  std::vector<std::string> tokens = {"", "<c>", "<", "c>", "get", "_weather", "_time", "=", ">=", "=>{", "{", "}",
                                     "\"city\":", "\"", "x", "xy", " ", "hi", "}<c>", "<c>get_time=", "ge", "t",
                                     "_", "time={}", "}}", "w", "eather", ">", ">{}", "city", "\":", "a", "e", "g", "h", "i", "m", "r", "c", "y"};
  testing::list_tokenizer vocab(tokens);
  json_vocab v(vocab);
  json_schema_cache cache;
  const std::string trigger = "<c>", mark = "=>";
  const auto heads = trigger_heads(headed_schema, mark, cache);
  const json_trigger t(v, trigger, mark, heads);
  const auto values =
    walk_trigger(t, tokens, trigger, [&](std::string_view text) { return headed_ok(heads, trigger, mark, text); }, 17);
  EXPECT_GT(values, 30) << "walks close values";
}

// -- a trigger beside an answer: calls, or a value of the answer's schema ------

const std::string city_answer =
  R"({"type":"object","properties":{"city":{"type":"string","maxLength":4}},"required":["city"],)"
  R"("additionalProperties":false})";

TEST(json_trigger, with_an_answer_the_output_is_the_trigger_and_calls_or_one_value_of_the_answer_then_nothing) {
  //                              0   1   2    3        4      5     6           7    8     9
  testing::list_tokenizer vocab({"", "", "<", "tool>", "{", "\"city\":", "\"Rome\"}", "hi", " ", "[TOOL_CALLS]"},
                                {{1, "[TOOL_CALLS]"}});
  json_vocab v(vocab);
  const json_trigger t(v, "<tool>", json_schema::compile(counted), json_schema::compile(city_answer));
  ASSERT_TRUE(t.answers());
  const auto allows = [&](const json_trigger::state& s, std::int32_t k) {
    const auto split = t.split(s);
    EXPECT_NE(std::binary_search(split->allowed.begin(), split->allowed.end(), k),
              std::binary_search(split->banned.begin(), split->banned.end(), k));
    return std::binary_search(split->allowed.begin(), split->allowed.end(), k);
  };
  // The start: the trigger's first byte or the answer's.
  auto s = t.begin(false);
  EXPECT_TRUE(s.leading) << "an answer makes the start the trigger's or the answer's";
  ASSERT_TRUE(s.answer);
  EXPECT_TRUE(allows(s, 2) && allows(s, 4)) << "\"<\" begins the trigger, \"{\" the answer";
  EXPECT_FALSE(allows(s, 0) || allows(s, 7) || allows(s, 3) || allows(s, 6)) << "no end, no free text";
  EXPECT_FALSE(t.advance(s, "hi"));
  // The answer, then nothing.
  auto a = s;
  ASSERT_TRUE(t.advance(a, "{"));
  EXPECT_FALSE(a.leading);
  ASSERT_TRUE(a.answer) << "the output is the answer";
  EXPECT_FALSE(allows(a, 2) || allows(a, 0));
  EXPECT_TRUE(allows(a, 5));
  EXPECT_FALSE(t.advance(a, "\"n\":")) << "held to the answer's schema";
  ASSERT_TRUE(t.advance(a, "\"city\":"));
  EXPECT_FALSE(t.advance(a, "\"Romeo\"}")) << "maxLength";
  EXPECT_FALSE(t.advance(a, "\"Rome\"} hi")) << "nothing after the answer";
  ASSERT_TRUE(t.advance(a, "\"Rome\"}\n")) << "a blank in its last token";
  EXPECT_TRUE(a.done);
  EXPECT_FALSE(a.answer);
  EXPECT_FALSE(t.advance(a, " "));
  EXPECT_FALSE(t.advance(a, 0));
  EXPECT_TRUE(t.split(a)->allowed.empty());
  // The trigger, then calls and free text as without an answer.
  auto c = s;
  ASSERT_TRUE(t.advance(c, 2));
  EXPECT_TRUE(c.leading);
  EXPECT_FALSE(c.answer) << "\"<\" is no answer's";
  EXPECT_TRUE(allows(c, 3));
  EXPECT_FALSE(allows(c, 4));
  ASSERT_TRUE(t.advance(c, 3));
  ASSERT_TRUE(c.value);
  ASSERT_TRUE(t.advance(c, R"({"n":1} hi)"));
  EXPECT_FALSE(c.value || c.done || c.leading) << "free text after the call";
  EXPECT_TRUE(allows(c, 0));
  // The special token whose text is the trigger, at the start only.
  const json_trigger special(v, "[TOOL_CALLS]", json_schema::compile(counted), json_schema::compile(city_answer));
  auto m = special.begin(true);
  ASSERT_TRUE(special.advance(m, 1));
  EXPECT_TRUE(m.value && !m.answer);
  auto n = special.begin(false);
  ASSERT_TRUE(special.advance(n, 4));
  EXPECT_FALSE(special.advance(n, 1)) << "inside the answer";
  // Where the trigger and the answer begin alike, both read each byte until
  // one breaks; a whole trigger wins.
  const json_trigger alike(v, "{\"call\":", json_schema::compile(counted), json_schema::compile(city_answer));
  auto b = alike.begin(false);
  ASSERT_TRUE(alike.advance(b, "{\"c"));
  EXPECT_TRUE(b.leading && b.answer) << "either";
  auto city = b;
  ASSERT_TRUE(alike.advance(city, "ity\":\"Oslo\"}"));
  EXPECT_TRUE(city.done);
  auto call = b;
  ASSERT_TRUE(alike.advance(call, "all\":"));
  EXPECT_TRUE(call.value && !call.answer);
  EXPECT_FALSE(alike.advance(b, "x"));
}

/// The oracle of an output that is calls or an answer, read afresh: it
/// begins with `trigger` (or with a piece of it) and reads as triggered_ok
/// says, or a fresh machine of `answer` takes all of it, nothing after the
/// value's close but blanks.
bool answered_ok(const std::string& answer, const std::string& schema, const std::string& trigger,
                 std::string_view text) {
  if (text.size() < trigger.size() ? trigger.starts_with(text) : text.starts_with(trigger))
    return triggered_ok(schema, trigger, text);
  schema_machine m(json_schema::compile(answer));
  for (const char c : text)
    if (!m.feed(static_cast<unsigned char>(c)))
      return false;
  return true;
}

TEST(json_trigger, with_an_answer_every_token_it_allows_reads_and_at_the_start_and_in_free_text_only_those) {
  std::vector<std::string> tokens = {"", "<", "tool", ">", "<tool>", "<tool>{", "<tool>x", ">{", ">\n{\"n\":", "{",
                                     "}", "\"n\":", "\"city\":", "\"ci", "ty\":\"", "\"", "ab", "abcde", "1", " ",
                                     "\n", "hi", "}<tool>", "}\n", "}x", "x", "<<", "{\"city\":\"", "\"}", "{\"n", "n\":", "ci",
                                     "city\":\"", "\":"};
  testing::list_tokenizer vocab(tokens);
  json_vocab v(vocab);
  const std::string trigger = "<tool>";
  const json_trigger t(v, trigger, json_schema::compile(counted), json_schema::compile(city_answer));
  std::mt19937 rng(5);
  int answers = 0, calls = 0;
  for (int walk = 0; walk < 200; ++walk) {
    auto s = t.begin(false);
    std::string text;
    for (int step = 0; step < 30 && !s.done; ++step) {
      const auto split = t.split(s);
      const bool exact = !s.value && !(s.answer && !s.leading) && s.head == json_trigger::no_head;
      for (std::int32_t k = 1; k < static_cast<std::int32_t>(tokens.size()); ++k) {
        const auto& bytes = tokens[static_cast<std::size_t>(k)];
        const bool allowed = std::binary_search(split->allowed.begin(), split->allowed.end(), k);
        const bool reads = answered_ok(city_answer, counted, trigger, text + bytes);
        if (allowed) {
          EXPECT_TRUE(reads) << json(text).dump() << " + " << json(bytes).dump();
        } else if (exact) {
          EXPECT_FALSE(reads) << "at the start and in free text only what breaks the output is banned: "
                              << json(text).dump() << " + " << json(bytes).dump();
        }
      }
      EXPECT_EQ(std::binary_search(split->allowed.begin(), split->allowed.end(), 0),
                !s.value && !s.leading && !s.answer)
        << "the end-of-sequence token is free text's after a call";
      const auto k = draw_going_on(*split, rng);
      if (k < 0) {
        ADD_FAILURE() << "no token goes on from " << json(text).dump();
        break;
      }
      ASSERT_TRUE(t.advance(s, tokens[static_cast<std::size_t>(k)]));
      text += tokens[static_cast<std::size_t>(k)];
    }
    answers += s.done;
    calls += text.starts_with(trigger);
  }
  EXPECT_GT(answers, 30) << "walks close answers";
  EXPECT_GT(calls, 30) << "walks open calls";
}

/// Walks `m` at most `steps` tokens (each drawn by `rng` among those it
/// takes), checking in each state that the vocabulary allows exactly the
/// tokens feeding the machine takes.
void expect_vocabulary_agrees(json_vocab& v, const std::vector<std::string>& tokens, schema_machine m,
                              std::mt19937& rng, int steps) {
  for (int step = 0; step < steps && !m.complete(); ++step) {
    std::vector<std::int32_t> want;
    for (std::int32_t t = 1; t < static_cast<std::int32_t>(tokens.size()); ++t) {
      auto probe = m;
      if (probe.feed(std::string_view(tokens[static_cast<std::size_t>(t)])))
        want.push_back(t);
    }
    ASSERT_EQ(*v.allowed(m), want);
    if (want.empty())
      return; // this small vocabulary may not go on; bytes would
    ASSERT_TRUE(m.feed(std::string_view(tokens[static_cast<std::size_t>(want[rng() % want.size()])])));
  }
}

TEST(json_schema, the_vocabulary_allows_exactly_the_tokens_a_machine_takes_in_every_state_of_a_walk) {
  std::vector<std::string> tokens = {"", "{", "}", "[", "]", ",", ":", "\"", " ", "\n", "\"name", "\":", "\"age\":",
                                     "name", "age", "Ann", "a", "e", "x", "xy", "y", "k", "\"t\":\"", "\",", "1", "12",
                                     "0", "-", ".", "5", "e1", "null", "true", "false", "n", "ull", "\"}", "}}", "],",
                                     "\"v\":", "next", "tags", "kind", "\"x\"", "\"xy\"", "\"k\"",
                                     "\"code\":\"", "ab", "abcd", "\"tag\":\"",
                                     // propertyNames and uniqueItems (keyed, colored, named)
                                     "\"counts\":{", "\"ab\":", "\"c", "a\":", "\"tags\":[", "\"ids\":[", "\"a\"",
                                     "\"a\",", "2", "3", "1.0", "\\u0061", "\"colors\":[", "\"red\"", "\"blue\",",
                                     "\"by_color\":{", "\"red\":", "\"flags\":[", "true,", "\"mixed\":[",
                                     "\"meta\":{", "\"id\":", "\"days\":{", "\"2024-01-0", "1\":", "2\":"};
  testing::list_tokenizer vocab(tokens);
  json_vocab v(vocab, 8);
  std::mt19937 rng(3);
  for (const auto& schema : schemas()) {
    SCOPED_TRACE(schema);
    // One compiled schema for all its walks: json_vocab's answers for one
    // state are met again in another walk, and must fit it.
    const auto compiled = json_schema::compile(schema);
    for (int walk = 0; walk < 20; ++walk) {
      expect_vocabulary_agrees(v, tokens, schema_machine(compiled), rng, 40);
    }
  }
}

TEST(json_schema, inside_a_string_of_a_pattern_and_a_length_the_vocabulary_allows_what_the_machine_takes) {
  // The walk that reads such a string's bytes with the pattern and the
  // length alone, against feeding each token.
  std::vector<std::string> tokens = {"", "{\"w\":\"", "\"", "\"}", "a", "b", "ab", "aba", "abab", "x", "xy", "1",
                                     "12", "\\u0061", "\\u0062b", "ba", "\"}x", "ab\"", "b\"}"};
  testing::list_tokenizer vocab(tokens);
  json_vocab v(vocab, 8);
  std::mt19937 rng(53);
  for (const std::string schema :
       {R"({"type":"object","properties":{"w":{"type":"string","pattern":"^(ab)+$|^x","minLength":2,"maxLength":5}}})",
        R"({"type":"object","properties":{"w":{"type":"string","pattern":"^(a|bab)$","minLength":3}}})"}) {
    SCOPED_TRACE(schema);
    const auto compiled = json_schema::compile(schema);
    for (int walk = 0; walk < 40; ++walk) {
      schema_machine m(compiled);
      ASSERT_TRUE(m.feed(std::string_view(tokens[1])));
      expect_vocabulary_agrees(v, tokens, m, rng, 12);
    }
  }
}

TEST(json_schema, where_items_are_held_unique_or_names_to_propertyNames_the_vocabulary_allows_what_the_machine_takes) {
  // Sets and names: states alike but for the items given (or the name's
  // text) recur across walks of one compiled schema; json_vocab's cached
  // answers must tell them apart.
  const std::vector<std::string> tokens = {"", "{", "}", "[", "]", ",", " ", "\"", "\"a\"", "\"b\"", "\"a", "a", "b",
                                           "\"ab\"", "\\u0061", "\",", "1", "2", "1.0", "10", "0", "-", "e1", "true",
                                           "false", "null", "\"s\":[", "\"n\":[", "\"f\":[", "\"m\":{", "\":1",
                                           "\"ab\":", "\"c", "c\":", ":", "1,", "\"b\",", "],"};
  const std::string schema = R"({"type":"object","properties":{
      "s":{"type":"array","items":{"type":"string","maxLength":2},"uniqueItems":true},
      "n":{"type":"array","items":{"type":"number","minimum":0,"maximum":10},"uniqueItems":true},
      "f":{"type":"array","items":{"anyOf":[{"type":"boolean"},{"type":"null"},{"enum":["a","b"]}]},"uniqueItems":true},
      "m":{"type":"object","propertyNames":{"pattern":"^[abc]{1,2}$"},"additionalProperties":{"type":"integer"}}},
    "additionalProperties":false})";
  testing::list_tokenizer vocab(tokens);
  json_vocab v(vocab, 100'000); // every state's answer kept
  const auto compiled = json_schema::compile(schema);
  std::mt19937 rng(21);
  int steps = 0;
  for (int walk = 0; walk < 300; ++walk) {
    schema_machine m(compiled);
    for (int step = 0; step < 40 && !m.complete(); ++step, ++steps) {
      std::vector<std::int32_t> want;
      for (std::int32_t t = 1; t < vocab.vocab_size(); ++t) {
        auto probe = m;
        if (probe.feed(std::string_view(tokens[static_cast<std::size_t>(t)])))
          want.push_back(t);
      }
      ASSERT_EQ(*v.allowed(m), want) << walk << "/" << step;
      if (want.empty())
        break;
      ASSERT_TRUE(m.feed(std::string_view(tokens[static_cast<std::size_t>(want[rng() % want.size()])])));
    }
  }
  EXPECT_GT(steps, 3000);
}

TEST(json_schema, in_a_pattern_string_the_vocabulary_allows_exactly_the_tokens_a_machine_takes) {
  // json_vocab walks a pattern string's bytes with the pattern alone and
  // hands the closing quote to the whole machine: the same answers.
  std::vector<std::string> tokens = {"", "{", "}", "\"", "\",", "\"}", "\"zip\":\"", "\"id\":\"", "\"tail\":\"",
                                     "\"word\":\"", "123", "12345", "4", "-", "-12", "34\"", "AB", "X", "_", "_2",
                                     "7\"}", "caf", "é", "é\"", "\\u00e9", "\\u00", "e9", "\xC3", "\xA9", "ab", "c",
                                     "t", "ab\",", " ", ":", "null", "\\n", "\\", "\\\"", "\\t"};
  testing::list_tokenizer vocab(tokens);
  json_vocab v(vocab, 8);
  std::mt19937 rng(5);
  for (const auto& schema : schemas()) {
    if (schema.find("pattern") == std::string::npos)
      continue;
    SCOPED_TRACE(schema);
    for (int walk = 0; walk < 40; ++walk) {
      auto m = machine(schema);
      expect_vocabulary_agrees(v, tokens, m, rng, 30);
    }
  }
}

} // namespace
} // namespace troupe
