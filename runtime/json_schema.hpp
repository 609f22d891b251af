// Output constrained to a JSON Schema (OpenAI's response_format
// {"type": "json_schema"}): the schema compiled into a graph of nodes, and a
// byte-level machine that reads JSON text and takes a byte only if the text
// can still become a value the schema accepts. json_vocab turns its states
// into the tokens the scheduler allows, as for json_object (which is the
// schema {"type": "object"}). No CAF, no I/O.
//
// The schema language is the part of JSON Schema that decides the shape of
// the text as it is written, left to right:
//   type (one or a list: object, array, string, number, integer, boolean,
//   null), properties, required, additionalProperties (false, true or a
//   schema), minProperties, maxProperties, items (one schema, or a list as drafts before 2020-12 wrote
//   prefixItems, with additionalItems), prefixItems, minItems, maxItems,
//   minLength, maxLength,
//   minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf (a
//   number so bounded is written without an exponent, in at most 18
//   digits),
//   format (date, time, date-time, uuid; email, hostname, ipv4, ipv6, uri,
//   uri-reference, duration, json-pointer, byte as patterns; password and
//   binary, which say nothing of the text), pattern (runtime/json_pattern),
//   enum, const, anyOf, oneOf (held as anyOf: only where no value matches two
//   of its alternatives, as a discriminated union's objects told apart by a
//   required const), allOf (of one schema; of several, or beside other
//   keywords, merged first: runtime/json_schema_merge), $ref into the same document
//   ("#", "#/$defs/x"),
//   propertyNames (of type, pattern, minLength, maxLength, format, enum,
//   const, and anyOf, oneOf, allOf and $ref of those), uniqueItems (of
//   scalar items: strings, numbers, booleans, null), patternProperties (a
//   name two patterns of different schemas match is not written),
//   dependentRequired (and dependencies of name lists) among properties.
// Annotations (title, description, default, examples, $schema, $id,
// $comment, deprecated, readOnly, writeOnly, $defs, definitions, and
// OpenAPI's discriminator) are skipped. Every other keyword is refused, naming it and where it stands,
// rather than ignored: an output that looks checked but is not would be
// worse than an error. A schema without "type" takes it from its keywords
// (properties: an object; items: an array; minLength, format or pattern: a string;
// none of them: any value).
//
// How the output is held to it: property names are written as their JSON
// strings are (the schema's spelling, escapes included), each at most once,
// in any order; the object closes only when its required properties are
// there; enum and const values are written as compact JSON. Numbers stay
// within what a reader holds: an integer is written without a fraction or
// exponent in at most 18 digits, another number in at most 24 digits and
// an exponent of at most 2 (one with bounds: 18 digits and no exponent). Names of additional properties are not checked
// for repeats (those of the schema's own properties are).
// propertyNames of an enum or const is held as those names being the
// object's properties (each with additionalProperties' schema), so each is
// written as the schema spells it, at most once; one of strings (a pattern,
// a length, a format) holds every name as it is written, as a string value
// of that schema is held. A property of the schema's own whose name
// propertyNames refuses is refused when the schema is compiled.
// uniqueItems: an item equal to one before it in its array (strings by the
// characters they write, escapes read; numbers by value: 1, 1.0 and 10e-1
// are one) is refused at the byte that would end it, or earlier, at the
// byte after which it could only end as one (true after a true).
#pragma once

#include "runtime/json_constraint.hpp"
#include "runtime/json_pattern.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace troupe {

class json_schema {
public:
  /// Compiles a schema's JSON text. Throws std::invalid_argument saying what
  /// is wrong and where (a JSON pointer into the schema).
  static std::shared_ptr<const json_schema> compile(std::string_view text);
  /// Any object: response_format json_object.
  static std::shared_ptr<const json_schema> any_object();

  /// Unique among the schemas compiled in this process (json_vocab's cache
  /// keys tell schemas apart by it).
  std::uint64_t id() const noexcept { return id_; }

  static constexpr std::uint32_t none = 0xFFFFFFFFu;
  static constexpr std::size_t max_nodes = 4096;
  static constexpr std::size_t max_properties = 64;
  static constexpr std::size_t max_pattern_properties = 8;

  enum class string_format : std::uint8_t { none, date, time, date_time, uuid };

  /// A decimal times 1e18 (GCC's and Clang's 128-bit integer: 36 digits
  /// and a sign), and a bound past every number Troupe writes.
  __extension__ using scaled_decimal = __int128;
  static constexpr scaled_decimal scaled_decimal_most =
    static_cast<scaled_decimal>(1'000'000'000'000'000'000) * 1'000'000'000'000'000'000;

  enum type_bit : std::uint8_t {
    t_object = 1,
    t_array = 2,
    t_string = 4,
    t_number = 8, ///< any number
    t_integer = 16, ///< a number without fraction or exponent
    t_boolean = 32,
    t_null = 64,
    t_any = 127,
  };

  struct node {
    std::uint8_t types = t_any;
    /// enum / const: the only values, as compact JSON.
    std::vector<std::string> literals;
    /// anyOf (and $ref, allOf of one: a single alternative): the value is
    /// one of these nodes'.
    std::vector<std::uint32_t> any_of;
    /// Objects: each property's name as written between its quotes, and its
    /// node; the required ones as bits (bit i: properties[i]).
    std::vector<std::pair<std::string, std::uint32_t>> properties;
    std::uint64_t required = 0;
    /// dependentRequired (and dependencies' lists): by property, the
    /// properties it makes required once it is given (empty: none).
    std::vector<std::uint64_t> dependent;
    /// minProperties and maxProperties: how many names the object gives.
    std::uint32_t min_names = 0;
    std::uint32_t max_names = 0xFFFFFFFFu;
    /// The node of other properties' values; none: no other properties.
    std::uint32_t additional = 0;
    /// patternProperties: each pattern (an index into the schema's
    /// patterns) and the node of the values of names it matches (names
    /// not among the properties; a property's own name the pattern matches
    /// has both schemas merged into its own when the schema is compiled).
    std::vector<std::pair<std::uint32_t, std::uint32_t>> pattern_properties;
    /// Arrays: the first items' nodes by position (prefixItems), and the
    /// rest's (items).
    std::vector<std::uint32_t> prefix_items;
    std::uint32_t items = 0;
    std::uint32_t min_items = 0;
    std::uint32_t max_items = 0xFFFFFFFFu;
    /// Integers: the least and greatest (minimum, maximum and their
    /// exclusive forms); bounded: either was given.
    std::int64_t minimum = -999'999'999'999'999'999;
    std::int64_t maximum = 999'999'999'999'999'999;
    /// Integers: multipleOf, as the integer every value is a multiple of
    /// (1: any).
    std::int64_t multiple = 1;
    bool bounded = false; ///< minimum, maximum or multiple given
    /// Other numbers ("type": "number", written without an exponent in at
    /// most 18 digits, so every one is a multiple of 1e-18 below 1e18):
    /// the least and greatest such multiple minimum, maximum and their
    /// exclusive forms leave, times 1e18; number_bounded: any was given.
    bool number_bounded = false;
    scaled_decimal number_low = -scaled_decimal_most;
    scaled_decimal number_high = scaled_decimal_most;
    /// multipleOf times 1e18 (0: none); it makes the number bounded too.
    scaled_decimal number_multiple = 0;
    /// Strings: characters (code points; an escape is one).
    std::uint32_t min_length = 0;
    std::uint32_t max_length = 0xFFFFFFFFu;
    /// Strings: "format", of those Troupe writes to (RFC 3339's date,
    /// full-time and date-time; RFC 9562's uuid).
    string_format format = string_format::none;
    /// Strings: "pattern", an index into the schema's patterns (none: no
    /// pattern).
    std::uint32_t pattern = none;
    /// Objects: propertyNames of strings, the node every name is held to as
    /// it is written (none: any name; one of listed names is held as
    /// properties instead).
    std::uint32_t names = none;
    /// Arrays: uniqueItems: no item equals one before it (its items are
    /// scalars).
    bool unique = false;
    /// The least nesting a value of this node takes (0: a scalar will do;
    /// unreachable: no finite value), and as an object or an array (its
    /// required properties' and items' included); each literal's.
    std::uint8_t min_depth = unreachable;
    std::uint8_t object_depth = unreachable;
    std::uint8_t array_depth = unreachable;
    std::vector<std::uint8_t> literal_depth;
  };
  static constexpr std::uint8_t unreachable = 255;

  /// A value of node `i` can begin `depth` containers deep and stay
  /// within json_machine::max_depth.
  bool fits(std::uint32_t i, std::size_t depth) const noexcept {
    return nodes_[i].min_depth != unreachable && depth + nodes_[i].min_depth <= json_machine::max_depth;
  }

  /// The properties object node `n` requires with those of `seen` given
  /// (bits): its required ones and those the given ones make required.
  static std::uint64_t required_now(const node& n, std::uint64_t seen) noexcept {
    auto out = n.required;
    for (std::size_t i = 0; i < n.dependent.size(); ++i)
      if (seen >> i & 1)
        out |= n.dependent[i];
    return out;
  }

  /// The node of array node `n`'s item at `index` (from 0).
  static std::uint32_t item(const node& n, std::uint32_t index) noexcept {
    return index < n.prefix_items.size() ? n.prefix_items[index] : n.items;
  }

  /// Node 0 is any value.
  const node& at(std::uint32_t i) const { return nodes_[i]; }
  std::uint32_t root() const noexcept { return root_; }
  /// A node's pattern (node::pattern).
  const json_pattern& pattern(std::uint32_t i) const { return *patterns_[i]; }

  /// What a value of node `i` may be: the nodes and literals anyOf and
  /// $ref lead to. A literal alternative is {node, literal index}; a typed
  /// one {node, none}. Found once, when the schema is compiled.
  using alternative = std::pair<std::uint32_t, std::uint32_t>;
  const std::vector<alternative>& alternatives(std::uint32_t i) const { return alternatives_[i]; }

private:
  class compiler;
  std::vector<alternative> find_alternatives(std::uint32_t i) const;
  /// No value is of both nodes (both alternatives), as far as their types,
  /// literals and required properties' values tell (false: they may
  /// share one). `depth`: properties followed so far.
  bool apart(std::uint32_t a, std::uint32_t b, int depth = 0) const;
  bool apart(alternative x, alternative y, int depth) const;
  void measure_depths();
  /// How many different values node `i` (scalars) takes, counted up to
  /// `limit` (limit: that many or more).
  std::size_t distinct_values(std::uint32_t i, std::size_t limit) const;
  std::vector<node> nodes_;
  std::vector<std::shared_ptr<const json_pattern>> patterns_;
  std::vector<std::vector<alternative>> alternatives_; ///< by node
  std::uint32_t root_ = 0;
  std::uint64_t id_ = 0;
};

/// Compiled schemas by their text: requests that share a schema compile it
/// once (and share json_vocab's answers, which its id keys). Forgets them
/// all at once past `capacity`.
class json_schema_cache {
public:
  explicit json_schema_cache(std::size_t capacity = 64) : capacity_(capacity) {}
  /// json_schema::compile(text), or what it gave before; throws as it does.
  std::shared_ptr<const json_schema> get(const std::string& text);

private:
  std::size_t capacity_;
  std::unordered_map<std::string, std::shared_ptr<const json_schema>> by_text_;
};

/// Reads JSON text byte by byte and takes a byte only if the text can still
/// become a value of the schema (whose top is an object). Where the schema
/// leaves more than one reading open (anyOf, enum values that begin alike)
/// it follows each until the bytes tell them apart.
class schema_machine {
public:
  static constexpr std::size_t max_readings = 64;
  /// Numbers a program reading the output can hold: an integer's digits
  /// fit in 64 bits; others are doubles.
  static constexpr std::uint8_t max_integer_digits = 18;
  static constexpr std::uint8_t max_digits = 24;
  static constexpr std::uint8_t max_exponent_digits = 2;
  /// Bytes tried at most when looking, in an item of an array with
  /// uniqueItems, for a way on to a value not given before (past it the
  /// item is taken as open: only pathological patterns or bounds take so
  /// long).
  static constexpr int max_item_search = 1 << 14;

  /// In a string value with a format: which, where in it, and what the
  /// text so far says of what may follow (the year and month a day must
  /// fit, an hour's first digit, a fraction's digits).
  struct format_state {
    json_schema::string_format format = json_schema::string_format::none;
    std::uint8_t at = 0;
    std::uint16_t year = 0;
    std::uint8_t month = 0;
    std::uint8_t digit = 0;
  };

  explicit schema_machine(std::shared_ptr<const json_schema> schema);

  /// Takes `c` if the text may go on with it; otherwise returns false and
  /// stays as it was.
  bool feed(unsigned char c);
  /// Takes every byte of `bytes`, or returns false having taken none.
  bool feed(std::string_view bytes);
  /// The top-level value (an object or an array) has closed.
  bool complete() const noexcept { return lex_.complete(); }
  /// What decides which bytes may follow (equal keys: the same bytes may
  /// follow from here on; keys of different schemas differ).
  std::string key() const;
  const json_schema& schema() const noexcept { return *schema_; }

  /// A property name, as written between its quotes, is one that some of
  /// `names` (propertyNames' string nodes of `schema`) takes. For the
  /// compiler, which checks the schema's own names with it.
  static bool name_allowed(const json_schema& schema, const std::vector<std::uint32_t>& names,
                           std::string_view written);
  /// A string of `node` (of `schema`) may be more than "": some character
  /// can follow its opening quote.
  static bool string_longer(const json_schema& schema, std::uint32_t node);

private:
  friend class json_vocab;

  /// Values of the items an array with uniqueItems has given (item_value's
  /// texts, sorted).
  using item_values = std::vector<std::string>;
  /// One open container: its node and what has been written in it.
  struct frame {
    std::uint32_t node = 0;
    std::uint64_t seen = 0;   ///< object: the properties given (bits)
    std::uint32_t count = 0;  ///< array: the values begun; object: the names given
    std::uint32_t value = 0;  ///< object: the node of the value to come
    /// Object: the key so far, while it is a prefix of a name. Array with
    /// uniqueItems: the item's bytes so far, while one is written (else
    /// empty: a value's frame has no key then).
    std::string key;
    bool key_free = false;    ///< object: the key is no name's: an additional property
  };
  /// One reading of the text.
  struct reading {
    std::vector<frame> frames;           ///< one per container open outside a literal
    std::uint32_t literal_node = json_schema::none; ///< in an enum/const value: its node
    std::uint32_t literal = 0;           ///< its literal's index
    std::uint32_t literal_at = 0;        ///< bytes of it written
    bool integer = false;                ///< the number being written is an integer
    /// Writing a bounded number: its node, sign and digits' value so far
    /// (those after the point too: `fraction` of them, `point` read).
    std::uint32_t bounded_node = json_schema::none;
    bool negative = false;
    std::int64_t magnitude = 0;
    bool point = false;
    std::uint8_t fraction = 0;
    bool number_closed = false;          ///< the number written is a whole literal
    std::uint8_t digits = 0;             ///< the number's digits before its exponent
    std::uint8_t exponent_digits = 0;
    /// A reading item_live steps while it looks ahead: its item's bytes
    /// do not look ahead again. (Not the text's state: never in a key.)
    bool probe = false;
    /// In a string value with minLength or maxLength: its node and the
    /// characters written.
    std::uint32_t string_node = json_schema::none;
    std::uint32_t chars = 0;
    format_state format;
    /// In a string value with a pattern: its node, where the pattern's
    /// reading stands, and the bits of the character being written (UTF-8
    /// bytes or \u digits so far).
    std::uint32_t pattern_node = json_schema::none;
    json_pattern::states pattern_at;
    std::uint32_t pattern_cp = 0;
    /// In a key of an object with patternProperties: where each pattern's
    /// reading of the name stands (empty: it cannot match), and the bits
    /// of the character being written.
    std::vector<json_pattern::states> name_at;
    std::uint32_t name_cp = 0;
    /// In an array with uniqueItems: its items' values so far (null: none
    /// yet), kept alive by held_ and shared until a reading adds to them.
    /// Its items are scalars, so at most one such array is open, the
    /// innermost (a plain pointer in the reading, not one per frame: every
    /// machine copy copies these).
    const item_values* items = nullptr;
    void append_key(std::string& k) const;
  };

  bool step(unsigned char c);
  /// Lists of item values, which readings point to.
  using held_values = std::vector<std::shared_ptr<const item_values>>;
  /// Reading `r` goes on with byte `c` (the lexer before and after it)
  /// into `out`: as many readings as it may become, none where it may not
  /// (lists of given values it makes go to held_).
  void advance(reading r, const json_machine& before, const json_machine& after, unsigned char c,
               std::vector<reading>& out);
  void begin_value(reading r, const json_machine& before, const json_machine& after, unsigned char c,
                   std::vector<reading>& out);
  /// A string's byte `c` (the lexer before it in `before`) under the
  /// checks reading `r` holds it to (format, pattern, length), a value's
  /// or, under propertyNames, a name's; at the closing quote they must be
  /// met, and are dropped. False: it may not come.
  static bool string_takes(const json_schema& s, reading& r, const json_machine& before, unsigned char c);
  /// Sets reading `r`'s string checks to those of string node `n`.
  static void begin_string(const json_schema& s, reading& r, std::uint32_t n);
  /// Reading `r`'s string checks take another character.
  static bool string_goes_on(const json_schema& s, const reading& r);
  /// The key being written under propertyNames can only close now, and
  /// would close on a name of the object's own it may not give (again).
  bool name_spent(const reading& r, std::size_t depth) const;
  /// Byte `c` of an item of an array with uniqueItems (reading `r`, the
  /// lexer after it `after`), added to the item's bytes: where it ends the
  /// item, false if its value is one given before (else the value is
  /// added to them); elsewhere (unless `r` is a probe) false if the item
  /// can no longer end on a value not given.
  bool item_byte(reading& r, const json_machine& after, unsigned char c);
  /// Reading `r`'s item has ended: false if its value is one given before
  /// in the array, else it is added to them (in a new list, into held_).
  bool end_item(reading& r);
  /// Keeps in held_ only the lists readings_ point to (a step's end: other
  /// readings and look-ahead made the rest).
  void hold();
  /// Reading `r` holds a string to some check (format, pattern, length).
  static bool string_checked(const reading& r) noexcept {
    return r.string_node != json_schema::none || r.format.format != json_schema::string_format::none
           || r.pattern_node != json_schema::none;
  }
  /// Reading `r`'s item (the lexer `lex` in it) can still end on a value
  /// not given before in its array.
  bool item_live(const reading& r, const json_machine& lex);
  /// After a comma in an array with uniqueItems (`lex` after it): some
  /// item not given before can begin.
  bool item_can_begin(const reading& r, const json_machine& lex);
  /// Byte `c` of a key (the lexer before it `before`) read by the
  /// patterns of object node `n`'s patternProperties into `r.name_at`;
  /// false where it may not come (a \u escape of half a surrogate pair,
  /// which the patterns cannot read, or a character after which no
  /// pattern can match and no other name is taken).
  static bool name_patterns_take(const json_schema& s, const json_schema::node& n, reading& r,
                                 const json_machine& before, unsigned char c);
  /// The node of the value of a key that names none of node `n`'s
  /// properties, as its patterns read it (`r.name_at`): the one pattern's
  /// that matches, or the patterns' that match where they have one node,
  /// or additionalProperties' where none does; none where it may not be
  /// given.
  static std::uint32_t other_value(const json_schema& s, const json_schema::node& n, const reading& r,
                                   std::size_t depth);
  /// The length checks of a string's byte `c` (not its closing quote;
  /// the lexer before it `before`): a character may begin where `chars`
  /// (those begun) is below `max`; with pattern `p`, whose reading after
  /// `c` is `at`, a character just written must leave some match within
  /// [min, max] characters.
  static bool length_takes(std::uint32_t min, std::uint32_t max, std::uint32_t& chars, const json_pattern* p,
                           const json_pattern::states& at, const json_machine& before, unsigned char c);
  /// A string value's byte `c` under its pattern; false: it may not come.
  /// `at` and `cp` are the reading's pattern_at and pattern_cp; a closing
  /// quote is taken when the pattern has matched (the caller then drops them).
  static bool pattern_takes(const json_pattern& p, json_pattern::states& at, std::uint32_t& cp,
                            const json_machine& before, unsigned char c);
  /// In a string value held to a pattern, with one reading: its pattern
  /// (json_vocab walks such a string's bytes with the pattern and the
  /// length alone).
  const json_pattern* pattern_string() const noexcept;
  /// Inside a string whose bytes no reading checks (plain text keeps it).
  bool free_text() const noexcept;

  std::shared_ptr<const json_schema> schema_;
  json_machine lex_;
  std::vector<reading> readings_;
  /// The lists of given item values readings_ point to, and during a step
  /// those it makes (null but for arrays with uniqueItems: a machine copy
  /// copies one pointer).
  std::shared_ptr<const held_values> held_;
};

} // namespace troupe
