#include "runtime/reasoning_counter.hpp"

#include <algorithm>
#include <stdexcept>

namespace troupe {

reasoning_counter::reasoning_counter(std::string open, std::string close)
    : open_(std::move(open)), close_(std::move(close)), phase_(open_.empty() ? phase::thinking : phase::start) {
  if (close_.empty())
    throw std::invalid_argument("reasoning_counter: an empty closing mark");
}

void reasoning_counter::think(std::string_view text) {
  seen_ += text;
  if (seen_.find(close_) != std::string::npos) {
    phase_ = phase::content;
    seen_.clear();
    return;
  }
  // Only a mark's beginning can reach into the next token.
  if (const auto keep = close_.size() - 1; seen_.size() > keep)
    seen_.erase(0, seen_.size() - keep);
}

void reasoning_counter::feed(std::string_view text) {
  switch (phase_) {
  case phase::content:
    return;
  case phase::thinking:
    ++count_;
    think(text);
    return;
  case phase::start: {
    seen_ += text;
    // Blanks first, as the chat answer's reader skips them.
    seen_.erase(0, std::min(seen_.size(), seen_.find_first_not_of(" \t\r\n")));
    const std::string_view rest = seen_;
    if (rest.size() < open_.size() && std::string_view(open_).starts_with(rest)) {
      ++pending_; // may still be the mark's beginning (or blanks only)
      return;
    }
    if (!rest.starts_with(open_)) {
      phase_ = phase::content; // the output answers at once
      seen_.clear();
      return;
    }
    count_ = pending_ + 1;
    pending_ = 0;
    const std::string after{rest.substr(open_.size())};
    seen_.clear();
    phase_ = phase::thinking;
    think(after);
    return;
  }
  }
}

} // namespace troupe
