#include "runtime/choice_constraint.hpp"

#include "messages/json_machine.hpp"

#include <cstdint>

namespace troupe {

choice_machine::choice_machine(std::shared_ptr<const std::vector<std::string>> choices)
  : choices_(std::move(choices)), last_(choices_->size()) {}

bool choice_machine::step(unsigned char c) {
  // In sorted order, the choices that go on with `c` after the output read
  // are one run within those the output begins.
  const auto& all = *choices_;
  const auto ch = static_cast<char>(c);
  auto first = first_;
  while (first < last_ && (all[first].size() <= read_ || all[first][read_] != ch))
    ++first;
  if (first == last_)
    return false;
  auto last = first;
  while (last < last_ && all[last].size() > read_ && all[last][read_] == ch)
    ++last;
  first_ = first;
  last_ = last;
  ++read_;
  return true;
}

bool choice_machine::feed(std::string_view bytes) {
  return feed_all(*this, bytes, [](choice_machine& m, unsigned char c) { return m.step(c); });
}

bool choice_machine::complete() const noexcept {
  // The shortest of the run comes first.
  return first_ < last_ && (*choices_)[first_].size() == read_;
}

bool choice_machine::extendable() const noexcept {
  return last_ - first_ > (complete() ? 1u : 0u);
}

std::string choice_machine::key() const {
  std::string k = "\xfe";
  for (auto i = first_; i < last_; ++i) {
    const std::string_view rest = std::string_view((*choices_)[i]).substr(read_);
    const auto n = static_cast<std::uint32_t>(rest.size());
    k.append(reinterpret_cast<const char*>(&n), sizeof n);
    k += rest;
  }
  return k;
}

} // namespace troupe
