// The interface every executor backend implements (sim today; cpu and cuda
// later). The executor actor owns one backend and calls it from its own thread.
#pragma once

#include "gpu/step.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <utility>
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
  /// A special token's own text ("<|eot_id|>", "</s>"), which a request
  /// that keeps special tokens shows (vLLM's skip_special_tokens false);
  /// "" for any other id.
  virtual std::string special_text(std::int32_t /*token*/) const { return {}; }
  /// decode(), or where that is "" and `keep_special`, special_text().
  std::string shown(std::int32_t token, bool keep_special) const {
    auto text = decode(token);
    return text.empty() && keep_special ? special_text(token) : text;
  }
  /// Size of the vocabulary; valid ids are [0, vocab_size()).
  virtual std::int32_t vocab_size() const = 0;
  /// End-of-sequence id, or -1 when the model has none.
  virtual std::int32_t eos_token() const = 0;
  /// Every id that ends a sequence, eos_token() among them: a model may
  /// have several (Llama 3 Instruct's <|eot_id|> and <|end_of_text|>).
  virtual std::vector<std::int32_t> end_tokens() const {
    const auto eos = eos_token();
    return eos >= 0 ? std::vector<std::int32_t>{eos} : std::vector<std::int32_t>{};
  }
};

/// What loading one adapter onto the device took.
struct adapter_load {
  /// Empty on success; otherwise what was wrong, naming the file at fault.
  std::string error;
  /// Found in the host tier: no disk read.
  bool host_hit = false;
  /// Reading and parsing the files into the host tier (0 on a host hit).
  double disk_seconds = 0;
  /// Host to device.
  double copy_seconds = 0;
};

/// Which way a KV swap moves a request's cache pages.
enum class swap_direction : std::uint8_t {
  out, ///< device pool to host pool (preemption)
  in,  ///< host pool to device pool (resumption)
};

/// What a KV swap took.
struct swap_result {
  /// Empty on success; otherwise what was wrong.
  std::string error;
  /// Time of the copy (measured, or modelled where nothing moves).
  double seconds = 0;
};

/// Cache pages read out of a pool, page after page (for another node, or a
/// file). The sim backend moves no data: `data` stays empty there.
struct page_blob {
  /// Empty on success; otherwise what was wrong.
  std::string error;
  std::string data;
  double seconds = 0;
};

/// Runs steps of a continuous batch. run_step is called by one thread at a
/// time; the adapter calls may come from another thread (the copy engine's)
/// while a step runs.
class executor_backend {
public:
  virtual ~executor_backend() = default;
  /// Runs one iteration over `batch` and returns one token per entry; a
  /// negative token means the backend could not run that entry, which ends
  /// that request with an error and leaves the others running.
  virtual step_result run_step(std::span<const step_entry> batch) = 0;
  /// Seconds a host-to-device copy of `bytes` takes on this backend.
  virtual double transfer_seconds(std::uint64_t bytes) const = 0;
  /// Makes adapter `id` usable by run_step: from the host tier, or read from
  /// `path` (its PEFT directory; empty where the backend needs no files)
  /// into the host tier first. `bytes` is its device size and
  /// `device_pages` the unified pool's pages the memory pool granted it
  /// (backends whose weights live in the pool write them there; the others
  /// ignore them). A failure leaves the adapter absent; other adapters are
  /// unaffected.
  virtual adapter_load load_adapter(std::uint32_t id, const std::string& path, std::uint64_t bytes,
                                    std::span<const std::uint32_t> device_pages) = 0;
  /// Frees adapter `id` on the device (evicted or unloaded); its host copy
  /// stays in the host tier. No step may be using it.
  virtual void drop_adapter(std::uint32_t id) = 0;
  /// Forgets adapter `id` in the host tier too (unregistered).
  virtual void forget_adapter(std::uint32_t id) = 0;
  /// Copies a request's cache pages (K and V, or a hidden cache) between
  /// the device pool and the host pool, page i to page i, `bytes` in all:
  /// out reads `device_pages` into `host_pages`, in writes `host_pages`
  /// back into `device_pages` (which may differ from those swapped out).
  /// Called from the copy engine's thread, for pages no step is using.
  virtual swap_result swap_pages(swap_direction dir, std::span<const std::uint32_t> device_pages,
                                 std::span<const std::uint32_t> host_pages, std::uint64_t bytes) = 0;
  /// Reads `pages` of the device pool (`host_pool` false) or of the host
  /// pool into one buffer, `bytes` in all, leaving them as they are. Called
  /// from the copy engine's thread, for pages no step is using.
  virtual page_blob read_pages(bool host_pool, std::span<const std::uint32_t> pages,
                               std::uint64_t bytes) {
    (void)host_pool;
    (void)pages;
    (void)bytes;
    return {name() + " backend cannot read cache pages", {}, 0};
  }
  /// Writes a buffer from read_pages into `host_pages` of the host pool.
  virtual swap_result write_host_pages(std::span<const std::uint32_t> host_pages,
                                       const std::string& data, std::uint64_t bytes) {
    (void)host_pages;
    (void)data;
    (void)bytes;
    return {name() + " backend cannot write cache pages", 0};
  }
  /// Layer-wise streaming (Symphony): stream_in copies layer after layer and
  /// a step entry naming the stream computes each layer once it is in.
  virtual bool streams_layers() const { return false; }
  /// Copies `host_pages` into `device_pages` (as swap_pages in) layer by
  /// layer, publishing each layer under `stream` as it lands; a step with an
  /// entry naming the stream may run meanwhile. The stream is forgotten
  /// once a step has used it, or by end_stream.
  virtual swap_result stream_in(std::uint64_t stream, std::span<const std::uint32_t> device_pages,
                                std::span<const std::uint32_t> host_pages, std::uint64_t bytes) {
    (void)stream;
    return swap_pages(swap_direction::in, device_pages, host_pages, bytes);
  }
  /// A stream that no step will use (its request ended first): forget it.
  virtual void end_stream(std::uint64_t stream) const { (void)stream; }
  /// Tokens a page of `kv_page_tokens` KV tokens holds as a hidden cache,
  /// or 0 where the backend keeps no hidden caches or they would save
  /// nothing (grouped-query attention with 2·kv_heads·head_dim <= hidden size).
  virtual std::uint32_t hidden_cache_tokens_per_page(std::uint32_t kv_page_tokens) const {
    (void)kv_page_tokens;
    return 0;
  }
  /// LongRoPE (Phi-3.5 and Phi-4 mini): a pass after which a sequence
  /// holds more tokens than this turns by other frequencies than a shorter
  /// one, as in Hugging Face, so a cache made by one is not read by the
  /// other: the scheduler recomputes a sequence that grows past it. 0: the
  /// model turns every pass alike.
  virtual std::uint32_t rope_long_after() const { return 0; }
  /// The tokenizer of the served model.
  virtual const tokenizer& vocab() const = 0;
  /// Whether run_step fills step_result::logprobs for entries that ask
  /// (step_entry::logprobs >= 0); backends without logits (sim) do not,
  /// and the server refuses requests for them.
  virtual bool computes_logprobs() const { return false; }
  /// Whether run_step also fills step_result::prompt_logprobs for entries
  /// that ask (step_entry::prompt_logprobs >= 0); the server refuses such
  /// requests on backends that do not.
  virtual bool computes_prompt_logprobs() const { return false; }
  /// Non-empty once the backend can run nothing more, saying why (a fault
  /// that poisoned the CUDA context: every later call fails until the
  /// process ends). The server then takes no new requests, reports
  /// "failed" to health checks, and troupe-serve stops. Any thread may call it.
  virtual std::string broken() const { return {}; }
  /// What the operator should hear of that failed no request: a feature
  /// that switched itself off, and why (the cuda backend's step graphs,
  /// after a capture CUDA refused). Each is given once; empty when there is
  /// nothing new. Called by run_step's thread, after run_step.
  virtual std::string notice() { return {}; }
  /// Figures for the server's stats (name, value), read by run_step's
  /// thread between steps; none by default. counters(): totals that only
  /// grow; gauges(): levels that may go down as well.
  virtual std::vector<std::pair<std::string, double>> counters() const { return {}; }
  virtual std::vector<std::pair<std::string, double>> gauges() const { return {}; }
  /// Short name for logs and stats ("sim", "cpu", "cuda").
  virtual std::string name() const = 0;
};

} // namespace troupe::gpu
