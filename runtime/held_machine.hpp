// Output held to a list of texts, a regular expression or a grammar
// (vLLM's guided_choice, guided_regex and guided_grammar): one of the byte
// machines, which the scheduler steps alike, alone or after a reasoning
// model's thinking (runtime/reasoning_gate). No CAF, no I/O.
#pragma once

#include "runtime/choice_constraint.hpp"
#include "runtime/grammar_constraint.hpp"
#include "runtime/regex_constraint.hpp"

#include <variant>

namespace troupe {

/// The output's machine: it is whole when complete() and not extendable();
/// complete() and extendable(), the end-of-sequence token may end it.
using held_machine = std::variant<choice_machine, regex_machine, grammar_machine>;

} // namespace troupe
