// allOf of several schemas, merged into one schema before the compiler
// (runtime/json_schema.hpp) reads the document: OpenAPI's composition
// ({"allOf": [{"$ref": "#/$defs/Base"}, {"properties": {...}}]}), zod's and
// TypeScript's intersections. The merge is exact: a value meets the merged
// schema exactly when it meets every one of allOf's. Objects merge by name
// (a property's schemas, or an object's additionalProperties where it does
// not list the name, are merged in turn; a name one of them forbids is
// left out), types by intersection, bounds by the tighter, enum and const
// by the values they share, multipleOf of integers by their least common
// multiple; an anyOf or oneOf inside is distributed over the rest (the
// merged schema is anyOf, or oneOf, of the merges). What cannot merge
// exactly (two different patterns or formats, a keyword outside those) is
// refused, naming it and where. No CAF, no I/O.
#pragma once

#include <nlohmann/json.hpp>

namespace troupe {

/// Replaces in `doc` (a parsed schema) each allOf of two or more schemas,
/// or allOf beside other keywords, with its merge; annotations beside it
/// ($defs among them) stay. References are followed into `doc`. Throws
/// std::invalid_argument ("the schema at \"#...\" ...") for what cannot be
/// merged or no value meets.
void merge_all_of(nlohmann::json& doc);

} // namespace troupe
