// Output held to a list of texts or to a regular expression (vLLM's
// guided_choice and guided_regex): one of the two byte machines, which the
// scheduler steps alike, alone or after a reasoning model's thinking
// (runtime/reasoning_gate). No CAF, no I/O.
#pragma once

#include "runtime/choice_constraint.hpp"
#include "runtime/regex_constraint.hpp"

#include <variant>

namespace troupe {

/// The output's machine: it is whole when complete() and not extendable();
/// complete() and extendable(), the end-of-sequence token may end it.
using held_machine = std::variant<choice_machine, regex_machine>;

} // namespace troupe
