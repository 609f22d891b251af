// The interface every executor backend implements (sim today; cpu and cuda
// later). The executor actor owns one backend and calls it from its own thread.
#pragma once

#include "gpu/step.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace troupe::gpu {

/// Turns text into token ids and back for the model a backend serves.
class tokenizer {
public:
  virtual ~tokenizer() = default;
  /// Encodes `text`; never fails (unknown bytes map to byte tokens).
  virtual std::vector<std::int32_t> encode(const std::string& text) const = 0;
  /// Decodes one token to the text it stands for ("" for special tokens).
  virtual std::string decode(std::int32_t token) const = 0;
  /// Size of the vocabulary; valid ids are [0, vocab_size()).
  virtual std::int32_t vocab_size() const = 0;
  /// End-of-sequence id, or -1 when the model has none.
  virtual std::int32_t eos_token() const = 0;
};

/// Runs steps of a continuous batch. Called by one thread at a time.
class executor_backend {
public:
  virtual ~executor_backend() = default;
  /// Runs one iteration over `batch` and returns one token per entry; a
  /// negative token means the backend could not run that entry, which ends
  /// that request with an error and leaves the others running.
  virtual step_result run_step(std::span<const step_entry> batch) = 0;
  /// Seconds a host-to-device copy of `bytes` takes on this backend.
  virtual double transfer_seconds(std::uint64_t bytes) const = 0;
  /// The tokenizer of the served model.
  virtual const tokenizer& vocab() const = 0;
  /// Short name for logs and stats ("sim", "cpu", "cuda").
  virtual std::string name() const = 0;
};

} // namespace troupe::gpu
