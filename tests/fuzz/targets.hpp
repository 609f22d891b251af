// Fuzz targets: each takes any bytes and must neither crash nor break one of
// its invariants (a broken invariant throws invariant_broken). libFuzzer
// drives them in a clang build with sanitizers (tools/fuzz.sh); the corpus
// test replays the inputs checked in under tests/fuzz/corpus/ in every build
// (those named ok-* must be accepted: the seeds reach past the refusals).
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string_view>

namespace troupe::fuzz {

/// What a target found wrong with an input it did not crash on.
struct invariant_broken : std::logic_error {
  using std::logic_error::logic_error;
};

struct target {
  std::string_view name; ///< also the corpus folder's name
  /// True when the input was accepted (parsed, translated, read), false
  /// when it was refused as it should be; throws invariant_broken otherwise.
  bool (*run)(std::span<const std::uint8_t> input);
};

/// Every target:
///   wire_request   the wire parser; what it accepts serializes and parses back
///                  the same; what it refuses becomes an error reply that serializes
///   wire_reply     the reply parser (troupe-client's); accepted replies round-trip
///   openai         completion, chat (the first byte picks the template), advise
///                  bodies, percent-decoding and API keys; every wire frame made
///                  from a body is one the wire parser reads, and every error
///                  serializes
///   openai_stream  a streamed answer holds the text of the whole one: the output
///                  cut before the first stop string, however it is chunked
///   config         the deployment-file loader; errors name the file
///   llama_config   config.json; an accepted one serializes and parses back the same
///   safetensors    a .safetensors file; every tensor it lists reads within the file
///   peft_config    adapter_config.json of a PEFT adapter
///   batches        a multipart upload (parts within the body; the file read back
///                  whole) or a batch's input file (unique ids, object bodies,
///                  errors naming lines; a running batch's text form read back)
///   trace          a trace file (Azure, ShareGPT lengths, conversations) as
///                  troupe-sim and troupe-bench read it
///   sim            a small deployment and workload on the virtual clock, with the
///                  policies, memory modes and tiers the input picks: every request
///                  ends once with all its tokens and gives every page back
///   sim_tiers      the same with a disk tier below the host pool, adapters in a
///                  partition of their own and predictive adapter prefetch
///   json_schema    a JSON Schema, a NUL byte and a text: the schema compiles or is
///                  refused; the text read byte by byte never reaches a dead end,
///                  and what is taken whole is a JSON object
///   grammar        a GBNF grammar, a NUL byte and a text: the grammar compiles or
///                  is refused; the text read byte by byte never reaches a dead
///                  end, and what is taken one byte at a time is taken whole
///   tokenizer_json a byte-level BPE tokenizer.json: refused naming the file, or
///                  it encodes to ids in its vocabulary (texts come back whole
///                  where it has no added tokens)
///   bpe_encode     a text through a trained tokenizer: BOS first, every byte
///                  back but the special tokens'
///   jinja          a chat template read and rendered over a chat with tools:
///                  refused saying where, or the same text each time, within limits
///   unicode_norm   any bytes in NFC, NFD, NFKC and NFKD: idempotent, the
///                  composed forms those of the decomposed, UTF-8 kept well-formed
std::span<const target> targets();

/// The target called `name`, or nullptr.
const target* find_target(std::string_view name);

} // namespace troupe::fuzz
