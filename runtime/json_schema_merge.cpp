#include "runtime/json_schema_merge.hpp"

#include "runtime/json_pattern.hpp"
#include "runtime/json_value_text.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace troupe {

namespace {

using json = nlohmann::json;

[[noreturn]] void refuse(const std::string& path, const std::string& what) {
  throw std::invalid_argument("the schema at \"" + (path.empty() ? std::string("#") : "#" + path) + "\" " + what);
}

/// The keywords the merge takes from allOf's schemas.
constexpr std::string_view mergeable[] = {
  "type",      "properties", "required",  "additionalProperties", "minProperties", "maxProperties", "items",
  "minItems",  "maxItems",   "uniqueItems", "minLength",          "maxLength",     "pattern",       "format",
  "minimum",   "maximum",    "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "enum",         "const",
  "propertyNames", "anyOf",  "oneOf"};

bool among(std::string_view k) {
  return std::find(std::begin(mergeable), std::end(mergeable), k) != std::end(mergeable);
}

/// The most schemas merged in one document, and the most alternatives a
/// distributed anyOf or oneOf makes.
constexpr int most_merges = 256;
constexpr std::size_t most_alternatives = 64;
/// The longest chain of $ref and allOf followed while collecting.
constexpr int most_hops = 32;

/// What two schemas say together of one value (none: neither says
/// anything): one alone, false where either is, the other where one is
/// true, one where they are equal, else allOf of both (merged in turn).
std::optional<json> both(const std::optional<json>& a, const std::optional<json>& b) {
  if (!a)
    return b;
  if (!b)
    return a;
  if (*a == false || *b == false)
    return json(false);
  if (*a == true)
    return b;
  if (*b == true || *a == *b)
    return a;
  return json{{"allOf", {*a, *b}}};
}

/// What object schema `s` says of property `name`: its own schema of it,
/// or else its additionalProperties; none where it says nothing.
std::optional<json> of_name(const json& s, const std::string& name) {
  if (const auto p = s.find("properties"); p != s.end() && p->is_object() && p->contains(name))
    return (*p)[name];
  if (const auto a = s.find("additionalProperties"); a != s.end())
    return *a;
  return std::nullopt;
}

/// Pattern `pattern` (JSON Schema's, searched) matches the name `name`
/// (false for a pattern Troupe cannot read: the compiler says so).
bool pattern_matches(const std::string& pattern, const std::string& name) {
  try {
    const json_pattern p(pattern);
    auto at = p.start();
    for (std::size_t i = 0; i < name.size() && !at.empty();) {
      const auto c = static_cast<unsigned char>(name[i]);
      const std::size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
      char32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
      for (std::size_t k = 1; k < len && i + k < name.size(); ++k)
        cp = cp << 6 | (static_cast<unsigned char>(name[i + k]) & 0x3F);
      at = p.step(at, cp);
      i += len;
    }
    return !at.empty() && p.accepts(at);
  } catch (const std::invalid_argument&) {
    return false;
  }
}

/// A "type" as the names it allows ("integer" and "number" both kept).
std::vector<std::string> types_of(const json& t, const std::string& path) {
  std::vector<std::string> out;
  for (const auto& v : t.is_array() ? t : json::array({t})) {
    if (!v.is_string())
      refuse(path, "has allOf whose \"type\" " + t.dump() + " is not a type's name or a list of them");
    out.push_back(v.get<std::string>());
  }
  return out;
}

class merger {
public:
  explicit merger(json& doc) : doc_(doc) {}

  /// Rewrites the schema `s` at `path` and every schema inside it.
  void rewrite(json& s, const std::string& path, int depth) {
    if (depth > 256)
      refuse(path, "nests schemas deeper than 256");
    if (!s.is_object())
      return;
    if (const auto all = s.find("allOf"); all != s.end() && all->is_array() && !all->empty()) {
      bool beside = false;
      for (const auto& [k, v] : s.items())
        beside |= k != "allOf" && !json_text::is_annotation(k);
      if (all->size() > 1 || beside)
        replace(s, path);
    }
    if (!s.is_object())
      return;
    // A property's own name a pattern of patternProperties matches is held
    // to both schemas.
    if (const auto pp = s.find("patternProperties"); pp != s.end() && pp->is_object())
      if (const auto props = s.find("properties"); props != s.end() && props->is_object())
        for (auto& [name, sub] : props->items()) {
          json all = json::array({sub});
          for (const auto& [pattern, schema] : pp->items())
            if (pattern_matches(pattern, name))
              all.push_back(schema);
          if (all.size() > 1)
            sub = json{{"allOf", std::move(all)}};
        }
    for (auto& [k, v] : s.items()) {
      const auto at = path + "/" + json_text::pointer_token(k);
      if (k == "properties" || k == "$defs" || k == "definitions" || k == "patternProperties") {
        if (v.is_object())
          for (auto& [name, sub] : v.items())
            rewrite(sub, at + "/" + json_text::pointer_token(name), depth + 1);
      } else if (k == "items" || k == "additionalProperties" || k == "propertyNames" || k == "additionalItems") {
        if (v.is_array()) {
          for (std::size_t i = 0; i < v.size(); ++i)
            rewrite(v[i], at + "/" + std::to_string(i), depth + 1);
        } else {
          rewrite(v, at, depth + 1);
        }
      } else if (k == "anyOf" || k == "oneOf" || k == "allOf" || k == "prefixItems") {
        if (v.is_array())
          for (std::size_t i = 0; i < v.size(); ++i)
            rewrite(v[i], at + "/" + std::to_string(i), depth + 1);
      }
    }
  }

private:
  json& doc_;
  int merges_ = 0;

  /// `s` (an allOf, perhaps beside other keywords) becomes its merge; its
  /// annotations stay.
  void replace(json& s, const std::string& path) {
    if (++merges_ > most_merges)
      refuse(path, "has allOf merges past " + std::to_string(most_merges) + " in one schema");
    std::vector<json> parts;
    json kept = json::object();
    json rest = json::object();
    for (const auto& [k, v] : s.items()) {
      if (k == "allOf")
        continue;
      (json_text::is_annotation(k) ? kept : rest)[k] = v;
    }
    if (!rest.empty())
      collect(rest, path, parts, 0);
    const auto& all = s["allOf"];
    for (std::size_t i = 0; i < all.size(); ++i)
      collect(all[i], path + "/allOf/" + std::to_string(i), parts, 0);
    auto merged = merge(std::move(parts), path);
    if (merged == false) {
      // No value meets them all: a property so is never given.
      if (path.empty())
        refuse(path, "has allOf of schemas no value meets together");
      s = false;
      return;
    }
    if (merged.is_boolean())
      merged = json::object();
    for (const auto& [k, v] : kept.items())
      if (!merged.contains(k))
        merged[k] = v;
    s = std::move(merged);
  }

  /// The schemas `s` (at `path`) holds a value to, its allOf's flattened
  /// and its $ref followed, into `out` (annotations left out).
  void collect(const json& s, const std::string& path, std::vector<json>& out, int hops) {
    if (hops > most_hops)
      refuse(path, "has allOf or $ref that lead through more than " + std::to_string(most_hops)
                     + " schemas (one refers back to itself?)");
    if (s.is_boolean()) {
      out.push_back(s);
      return;
    }
    if (!s.is_object())
      refuse(path, "is " + std::string(s.type_name()) + "; a schema is an object or a boolean");
    json own = json::object();
    for (const auto& [k, v] : s.items()) {
      if (k == "$ref") {
        if (!v.is_string() || !v.get<std::string>().starts_with("#"))
          refuse(path, "has \"$ref\" " + v.dump() + "; Troupe follows only references into the same schema (\"#...\")");
        const auto pointer = v.get<std::string>().substr(1);
        const json* target = nullptr;
        try {
          target = &doc_.at(json::json_pointer(pointer));
        } catch (const json::exception&) {
          refuse(path, "has \"$ref\" " + v.dump() + ", which refers to nothing in the schema");
        }
        collect(json(*target), pointer, out, hops + 1); // (a copy: the document changes as it is merged)
      } else if (k == "allOf") {
        if (!v.is_array() || v.empty())
          refuse(path, "has \"allOf\" " + v.dump().substr(0, 80) + "; it must be a non-empty list of schemas");
        for (std::size_t i = 0; i < v.size(); ++i)
          collect(v[i], path + "/allOf/" + std::to_string(i), out, hops + 1);
      } else if (!json_text::is_annotation(k)) {
        if (!among(k))
          refuse(path, "has allOf of several schemas, one with \"" + k
                         + "\"; Troupe merges allOf's schemas where they use type, properties, required, "
                           "additionalProperties, minProperties, maxProperties, items (one schema), minItems, "
                           "maxItems, uniqueItems, minLength, maxLength, pattern, format, minimum, maximum, "
                           "exclusiveMinimum, exclusiveMaximum, multipleOf, enum, const, propertyNames, anyOf, "
                           "oneOf and $ref");
        own[k] = v;
      }
    }
    out.push_back(std::move(own));
  }

  /// The schema of what meets all of `parts`: anyOf and oneOf inside
  /// distributed over the rest.
  json merge(std::vector<json> parts, const std::string& path) {
    std::string word;
    std::vector<json> branches;
    json base = json::object();
    for (auto& p : parts) {
      if (p.is_boolean()) {
        if (p == false)
          return false;
        continue;
      }
      for (const char* w : {"anyOf", "oneOf"}) {
        const auto it = p.find(w);
        if (it == p.end())
          continue;
        if (!it->is_array() || it->empty())
          refuse(path, "has \"" + std::string(w) + "\" " + it->dump().substr(0, 80)
                         + "; it must be a non-empty list of schemas");
        if (!word.empty() && word != w)
          refuse(path, "has allOf of an anyOf and a oneOf; Troupe merges allOf over one kind of them");
        word = w;
        branches.push_back(std::move(*it));
        p.erase(w);
      }
      base = merge_two(std::move(base), p, path);
    }
    if (branches.empty())
      return base;
    // Each alternative met with the rest (and with the other lists' alternatives):
    // merged in turn, as allOf, when the result is rewritten.
    std::vector<json> combos{base};
    for (const auto& list : branches) {
      std::vector<json> next;
      for (const auto& c : combos)
        for (const auto& alt : list) {
          next.push_back(json{{"allOf", {c, alt}}});
          if (next.size() > most_alternatives)
            refuse(path, "has allOf whose anyOf or oneOf make more than " + std::to_string(most_alternatives)
                           + " alternatives");
        }
      combos = std::move(next);
    }
    return json{{word, std::move(combos)}};
  }

  /// `a` and `b` together (neither holds allOf, anyOf, oneOf or $ref).
  static json merge_two(json a, const json& b, const std::string& path) {
    if (a.is_boolean() || b.is_boolean())
      return a == false || b == false ? json(false) : a.is_boolean() ? b : a;
    if (a.empty())
      return b;
    // Types: those both allow (an integer is a number).
    if (a.contains("type") && b.contains("type")) {
      const auto x = types_of(a["type"], path), y = types_of(b["type"], path);
      json shared = json::array();
      const auto has = [](const std::vector<std::string>& v, std::string_view t) {
        return std::find(v.begin(), v.end(), t) != v.end();
      };
      for (const auto& t : x) {
        std::string kept;
        if (has(y, t))
          kept = t;
        else if ((t == "integer" && has(y, "number")) || (t == "number" && has(y, "integer")))
          kept = "integer";
        if (!kept.empty() && std::find(shared.begin(), shared.end(), kept) == shared.end())
          shared.push_back(kept);
      }
      if (shared.empty())
        return false; // no value has both types
      a["type"] = shared.size() == 1 ? shared[0] : shared;
    } else if (b.contains("type")) {
      a["type"] = b["type"];
    }
    merge_objects(a, b, path);
    // Bounds: the tighter.
    for (const char* low : {"minProperties", "minItems", "minLength", "minimum", "exclusiveMinimum"})
      if (const auto v = b.find(low); v != b.end())
        if (!a.contains(low) || *v > a[low])
          a[low] = *v;
    for (const char* high : {"maxProperties", "maxItems", "maxLength", "maximum", "exclusiveMaximum"})
      if (const auto v = b.find(high); v != b.end())
        if (!a.contains(high) || *v < a[high])
          a[high] = *v;
    if (const auto v = b.find("uniqueItems"); v != b.end())
      a["uniqueItems"] = a.value("uniqueItems", false) == true || *v == true;
    if (const auto v = b.find("items"); v != b.end()) {
      if (v->is_array() || (a.contains("items") && a["items"].is_array()))
        refuse(path, "has allOf of schemas with \"items\" as a list; Troupe merges items of one schema");
      a["items"] = *both(a.contains("items") ? std::optional<json>(a["items"]) : std::nullopt, *v);
    }
    // What cannot be written as one: the same or refused.
    for (const char* same : {"pattern", "format", "propertyNames"})
      if (const auto v = b.find(same); v != b.end()) {
        if (a.contains(same) && a[same] != *v)
          refuse(path, "has allOf of schemas with different \"" + std::string(same) + "\" (" + a[same].dump() + " and "
                         + v->dump() + "); Troupe merges only equal ones");
        a[same] = *v;
      }
    if (const auto v = b.find("multipleOf"); v != b.end()) {
      if (a.contains("multipleOf") && a["multipleOf"] != *v) {
        if (!v->is_number_unsigned() || !a["multipleOf"].is_number_unsigned() || *v == 0 || a["multipleOf"] == 0)
          refuse(path, "has allOf of schemas with different \"multipleOf\" (" + a["multipleOf"].dump() + " and "
                         + v->dump() + "); Troupe merges those of integers, by their least common multiple");
        const auto x = a["multipleOf"].get<std::uint64_t>(), y = v->get<std::uint64_t>();
        const auto g = std::gcd(x, y);
        if (x / g > 1'000'000'000'000'000'000ull / y)
          refuse(path, "has allOf whose multipleOf values' least common multiple is past 10^18");
        a["multipleOf"] = x / g * y;
      } else {
        a["multipleOf"] = *v;
      }
    }
    // Values: those both list.
    const auto values = [](const json& s) -> std::optional<json> {
      if (const auto c = s.find("const"); c != s.end())
        return json::array({*c});
      if (const auto e = s.find("enum"); e != s.end())
        return *e;
      return std::nullopt;
    };
    if (const auto vb = values(b)) {
      if (const auto va = values(a)) {
        if (!va->is_array() || !vb->is_array())
          refuse(path, "has allOf with an \"enum\" that is not a list");
        json shared = json::array();
        for (const auto& x : *va)
          if (std::find(vb->begin(), vb->end(), x) != vb->end())
            shared.push_back(x);
        if (shared.empty())
          return false; // no value both list
        a.erase("const");
        a["enum"] = std::move(shared);
      } else {
        a.erase("const");
        a["enum"] = *vb;
      }
    }
    return a;
  }

  /// properties, additionalProperties and required of `a` and `b` into `a`.
  static void merge_objects(json& a, const json& b, const std::string& path) {
    const bool any = a.contains("properties") || b.contains("properties") || a.contains("additionalProperties")
                     || b.contains("additionalProperties");
    json required = a.value("required", json::array());
    if (const auto r = b.find("required"); r != b.end()) {
      const auto names_only = [](const json& list) {
        return list.is_array() && std::all_of(list.begin(), list.end(), [](const json& x) { return x.is_string(); });
      };
      if (!names_only(*r) || !names_only(required))
        refuse(path, "has allOf with a \"required\" that is not a list of names");
      for (const auto& name : *r)
        if (std::find(required.begin(), required.end(), name) == required.end())
          required.push_back(name);
    }
    if (!required.empty())
      a["required"] = required;
    if (!any)
      return;
    std::vector<std::string> names;
    for (const json* s : {static_cast<const json*>(&a), &b})
      if (const auto p = s->find("properties"); p != s->end()) {
        if (!p->is_object())
          refuse(path, "has allOf with \"properties\" that is not an object");
        for (const auto& [name, v] : p->items())
          if (std::find(names.begin(), names.end(), name) == names.end())
            names.push_back(name);
      }
    const auto additional = both(a.contains("additionalProperties") ? std::optional<json>(a["additionalProperties"])
                                                                    : std::nullopt,
                                 b.contains("additionalProperties") ? std::optional<json>(b["additionalProperties"])
                                                                    : std::nullopt);
    json properties = json::object();
    for (const auto& name : names) {
      const auto c = both(of_name(a, name), of_name(b, name));
      if (c && *c == false && std::find(required.begin(), required.end(), name) != required.end())
        refuse(path, "has allOf of schemas that require property \"" + name + "\" and forbid it: no value would do");
      if (c && *c == false && additional && *additional == false)
        continue; // (left out: no other name is taken either)
      properties[name] = c ? *c : json(true); // (false: never given)
    }
    a["properties"] = std::move(properties);
    if (additional)
      a["additionalProperties"] = *additional;
    else
      a.erase("additionalProperties");
    for (const auto& name : required)
      if (!a["properties"].contains(name.get<std::string>()) && additional && *additional == false)
        refuse(path, "has allOf of schemas that require property " + name.dump()
                       + " and take no property of that name: no value would do");
  }
};

} // namespace

void merge_all_of(json& doc) {
  merger m(doc);
  m.rewrite(doc, "", 0);
}

} // namespace troupe
