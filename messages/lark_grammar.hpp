// Lark grammars (the form Outlines takes, and vLLM turns into EBNF for its
// grammar backend) as the GBNF the wire's `grammar` holds the output to.
//
// Read: rules and terminals `name: expansions` (a `?` or `!` before the
// name and a priority `.N` after it are read past), alternatives `|` (on
// the line or the next ones), strings "..." (with the `i` flag: any case),
// ranges "a".."z", regular expressions /.../ (flags s and m; classes,
// escapes \d \w \s and their negations, groups, alternatives, the repeats
// * + ? {m} {m,} {m,n}, lazy or possessive alike), names, groups ( ),
// optionals [ ], the repeats * + ? and ~ N, ~ N..M, aliases -> name (read
// past), `//` comments, `%import common.NAME` (and `-> ALIAS`, and
// `%import common (A, B)`) for Lark's common terminals. The start rule is
// `start`.
//
// `%ignore` is read past: the output holds no ignored text between the
// tokens, and a sentence without it is one of the grammar's all the same.
// Refused, saying what and on which line: templates, `%declare`,
// `%override`, `%extend`, imports from other grammars, anchors and
// lookarounds in expressions, the `i` and `x` flags on expressions, groups
// nested more than 64 deep.
#pragma once

#include <string>
#include <string_view>
#include <variant>

namespace troupe::openai {

/// Whether `text` reads as a Lark grammar rather than GBNF: no `::=`, and a
/// line that defines a name with `:`.
bool is_lark(std::string_view text);

/// The grammar as GBNF (its start rule `root`), or what is wrong and where
/// ("line 3: ...").
std::variant<std::string, std::string> lark_to_gbnf(std::string_view text);

} // namespace troupe::openai
