// Output held to one of a list of texts (vLLM's guided_choice): a byte-level
// recognizer of the texts' prefixes, which json_vocab turns into the tokens
// that may come next, as it does for JSON. The scheduler bans every other
// token at each step and ends the output when it is one of the texts that no
// other text goes on from (where one does, the end-of-sequence token may end
// it there). No CAF, no I/O.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace troupe {

/// The output so far against the choices: the choices it begins, a range of
/// the sorted list.
class choice_machine {
public:
  /// `choices` sorted, distinct, none empty.
  explicit choice_machine(std::shared_ptr<const std::vector<std::string>> choices);

  /// Takes `c` if the output read so far and `c` begin a choice; otherwise
  /// returns false and stays as it was.
  bool step(unsigned char c);
  /// Takes every byte of `bytes`, or returns false having taken none.
  bool feed(std::string_view bytes);
  /// The output is one of the choices.
  bool complete() const noexcept;
  /// A longer choice begins with the output.
  bool extendable() const noexcept;
  /// What decides which bytes may follow (equal keys: the same bytes may
  /// follow): the rest of each choice the output begins. Its first byte,
  /// 0xFE, is no other machine's.
  std::string key() const;

private:
  std::shared_ptr<const std::vector<std::string>> choices_;
  std::size_t first_ = 0; ///< the choices the output begins: [first_, last_)
  std::size_t last_ = 0;
  std::size_t read_ = 0; ///< bytes of output read
};

} // namespace troupe
