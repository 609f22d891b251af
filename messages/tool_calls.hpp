// A chat's tool calls read from the model's output as it streams: each call
// from the moment its function's name and the start of its arguments are
// known, its arguments growing with the output, so a stream can send them
// as they come and a whole answer reads the same calls from the same text.
#pragma once

#include "messages/json_machine.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::openai {

/// How a chat offered tools (tool_choice not "none") has its calls read from
/// its output: each held to a schema of the tools' names and parameters,
/// read after the template's marker (`open`), each up to `close` or the
/// end. "auto": the output is text until a call begins (each call the model
/// opens is held to the schema, so it reads unless cut short). Forced: the
/// output begins with a call, and the calls that read from there are the
/// answer ("required"), or (`bare`: a named function, or no parallel calls)
/// it is one call's JSON, the marker in the prompt. An empty `open`
/// (chat_tool_call "{call}", Llama 3.1's JSON calls): calls are read only
/// where the output begins with one (after blanks), one JSON object after
/// another (blanks or ";" between), unconstrained with "auto"; forced, the
/// output is one call.
struct tool_format {
  bool forced = false;
  bool bare = false;
  std::vector<std::string> names;
  std::string open;
  std::string close;
  bool parallel = true;                    ///< parallel_tool_calls: false keeps the first call
  std::string arguments_key = "arguments"; ///< a call's arguments in the output
  /// The calls are one JSON array after the marker (chat_tool_call
  /// "[TOOL_CALLS] {calls}", Mistral's): "[", the calls separated by ",",
  /// "]"; no closing marker. With `bare`, the output is the array.
  bool array = false;
  /// Not empty: each call is named before its arguments (chat_tool_call
  /// "[TOOL_CALLS]{name}[ARGS]{arguments}", Mistral's later form): the
  /// marker, one of the tools' names, this mark, then the arguments
  /// object, then `close` (which may be left out). With `bare` (one
  /// function named; the prompt ends with the marker, its name and the
  /// mark), the output is that function's arguments object.
  std::string head;
};

/// A call read from the output, whole or so far.
struct read_call {
  std::string name;
  /// The arguments object's text as the model wrote it, less the blanks
  /// between its tokens: so far, or whole. Given as a string holding an
  /// object, that object's text, once the string is whole.
  std::string arguments;
  /// Its JSON object closed: the call is whole.
  bool whole = false;

  bool operator==(const read_call&) const = default;
};

/// Reads the calls in a chat's output, fed from where the first may open
/// (the template's marker, or the output's start) in pieces of any size.
/// A call is read as the marker (none with `bare` or an empty `open`),
/// blanks, one JSON object {"name": one of the tools', `arguments_key`: an
/// object, or a string holding one}, blanks, and the closing marker (which
/// may be left out before the next call or at the end; with an empty
/// `open`, blanks or ";" between calls). With `array`, the marker, "[" and
/// the calls' objects with "," between them (blanks around each). With a
/// `head`, the marker (none with `bare`), a name, the head, blanks, and
/// the arguments object itself. A call counts from when its name
/// is read (its member ended) and its arguments have begun (an object's
/// opening brace; a string, when it closes holding an object); from then on
/// it is the answer's, whatever follows. Reading stops at the first text
/// that is not the next byte of such a sequence (JSON as
/// messages/json_machine reads it, so a cut or broken call keeps the
/// arguments read before the break); with `bare`, or without parallel
/// calls, after the first call. After a whole call, text that opens no
/// call is passed over where calls have an opening marker: a marked call
/// after it is read (as vLLM's Hermes parser finds every marked call). Feeding the output in any pieces gives the
/// same calls as feeding it whole, and each read so far is a prefix of the
/// same call read later.
class call_reader {
public:
  explicit call_reader(tool_format format);

  /// Reads `text`, which follows what was fed before.
  void feed(std::string_view text);
  /// The calls that count so far, in the output's order.
  const std::vector<read_call>& calls() const noexcept { return calls_; }
  /// Every call that counts is whole (false with none).
  bool all_whole() const noexcept;

private:
  /// Reads the gap before the next call: blanks, markers, separators.
  void gap();
  /// Reads one byte of a call's JSON object.
  void object_byte(unsigned char c);
  /// A member of the call's object ended: its key and value are read.
  void member_ended();
  /// The call in the object counts (its name and arguments' start read).
  void maybe_count();

  tool_format format_;
  std::vector<read_call> calls_;
  bool stopped_ = false;
  /// Outside a call: the text since the last call ended (or the start),
  /// until it reads as the next call's start, or as none.
  std::string gap_;
  bool in_object_ = false;
  json_machine object_;
  bool in_value_ = false; ///< in a member of the call's object: past its ':'
  /// The member's key: as written (a JSON string) up to its ':', then
  /// decoded.
  std::string key_;
  std::string value_; ///< its value as written, so far, from its first byte
  bool arguments_object_ = false; ///< in the arguments member, an object
  std::optional<std::string> name_;
  bool has_arguments_ = false; ///< the arguments member ended
  std::string arguments_;      ///< the arguments object's text so far, blanks out
  bool counted_ = false;       ///< calls_.back() is this object's
  std::string head_name_;      ///< with a head: the name read before the object
};

} // namespace troupe::openai
