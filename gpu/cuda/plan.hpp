// CPU-side planning for the CUDA backend: where K, V and adapter weights sit
// in the unified page pool, and how one step's batch is laid out for the
// kernels (token-flattened rows, page tables, LoRA segments and slots,
// attention work items). Plain C++ with no CUDA: the planner runs on the
// executor's thread while the previous step computes, and is unit-tested on
// machines without a GPU. Every kernel and its CPU reference read the same
// plan, so one layout is defined once, here.
#pragma once

#include "gpu/step.hpp"

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace troupe::gpu::cuda {

/// K and V in a page: [num_layers][2 (K, V)][page_tokens][kv_dim] elements,
/// the cpu backend's layout, so one layer of a page is contiguous (a layer
/// streams in on its own) and a page moves between pools as one block.
struct kv_layout {
  std::uint32_t num_layers = 0;
  std::uint32_t num_kv_heads = 0;
  std::uint32_t head_dim = 0;
  std::uint32_t page_tokens = 0;

  constexpr std::uint32_t kv_dim() const noexcept { return num_kv_heads * head_dim; }
  /// Elements of one layer of a page (K and V).
  constexpr std::uint64_t layer_elems() const noexcept { return 2ull * page_tokens * kv_dim(); }
  /// Elements of a page.
  constexpr std::uint64_t page_elems() const noexcept { return num_layers * layer_elems(); }
  /// Element offset, in the pool, of the K (`which` 0) or V (1) vector of
  /// the token in slot `slot` of `page`, at `layer`.
  constexpr std::uint64_t offset(std::uint32_t page, std::uint32_t layer, std::uint32_t which,
                                 std::uint32_t slot) const noexcept {
    return std::uint64_t{page} * page_elems() + std::uint64_t{layer} * layer_elems() +
           (std::uint64_t{which} * page_tokens + slot) * kv_dim();
  }
};

/// The four projections LoRA adapts on the cuda backend (S-LoRA's set).
enum class lora_proj : std::uint8_t { q = 0, k = 1, v = 2, o = 3 };
inline constexpr std::uint32_t lora_proj_count = 4;

/// Where an adapter's weights sit in its pool pages. They are rows of
/// `row_width` elements (fewer used where a matrix is narrower), whole rows
/// per page, `rows_per_page` of them. For layer l, projection p and j < r:
///   A side (s = 0): row j of PEFT's lora_A.weight [r, in_dim];
///   B side (s = 1): column j of lora_B.weight [out_dim, r] (a row of B^T);
/// at row ((l * 4 + p) * 2 + s) * r + j, which lives in the adapter's page
/// row / rows_per_page at element (row % rows_per_page) * row_width. The
/// shrink kernels read A rows and the expand kernels B^T rows, both
/// contiguous, so a gather over non-contiguous pages costs one lookup per row.
struct lora_layout {
  std::uint32_t num_layers = 0;
  std::uint32_t hidden = 0; ///< model hidden size: q/k/v's input, o's output
  std::uint32_t q_dim = 0;  ///< heads * head_dim: q's output, o's input
  std::uint32_t kv_dim = 0; ///< kv_heads * head_dim: k's and v's output
  std::uint32_t row_width = 0;
  std::uint32_t rows_per_page = 0;
  /// Elements between the starts of two pool pages (kv_layout::page_elems);
  /// a page may end in a tail no row uses.
  std::uint64_t page_elems = 0;

  /// The layout for a pool of `kv` pages and a model of `hidden`, `q_dim`.
  /// rows_per_page is 0 (unusable) when a page holds less than one row.
  static lora_layout make(const kv_layout& kv, std::uint32_t hidden, std::uint32_t q_dim) noexcept;

  std::uint32_t in_dim(lora_proj p) const noexcept;
  std::uint32_t out_dim(lora_proj p) const noexcept;
  /// Rows an adapter of rank `r` takes, and the pages they fill.
  constexpr std::uint64_t rows(std::uint32_t r) const noexcept {
    return 8ull * num_layers * r;
  }
  std::uint64_t pages(std::uint32_t r) const noexcept;
  constexpr std::uint64_t row_index(std::uint32_t layer, lora_proj p, std::uint32_t side,
                                    std::uint32_t j, std::uint32_t r) const noexcept {
    return ((std::uint64_t{layer} * lora_proj_count + static_cast<std::uint32_t>(p)) * 2 + side) *
               r + j;
  }
};

/// An adapter resident in the pool, as the backend knows it.
struct resident_adapter {
  std::uint32_t rank = 0;
  float scale = 0;                 ///< alpha / r (or alpha / sqrt(r), rsLoRA)
  std::vector<std::uint32_t> pages; ///< lora_layout::pages(rank) of them, in row order
};

/// A distinct adapter of one step, as the LoRA kernels index it.
struct lora_slot {
  std::uint32_t rank = 0;
  float scale = 0;
  std::uint32_t page_offset = 0; ///< its first page in batch_plan::lora_pages
};

/// A maximal run of token rows that use one adapter (SGMV's segment).
struct lora_segment {
  std::uint32_t first_row = 0;
  std::uint32_t rows = 0;
  std::uint32_t slot = 0;
};

/// Sampling parameters of one sequence (gpu/sampling.hpp's rules).
struct sample_params {
  float temperature = 1.0f;
  float top_p = 1.0f;
  std::int32_t top_k = 0;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f; ///< for its adjust_repeated tokens
  std::uint32_t output_index = 0;
  std::uint64_t seed = 0;
};

/// One unit of attention work: query rows [q_begin, q_end) of sequence
/// `seq` (rows of the flattened batch) against its cache positions
/// [kv_begin, kv_end); causal: a row at position p sees positions <= p only
/// (and, with batch_plan::sliding_window w, above p - w).
/// A tile's items are merged by their softmax statistics.
struct attention_item {
  std::uint32_t seq = 0;
  std::uint32_t q_begin = 0;
  std::uint32_t q_end = 0;
  std::uint32_t kv_begin = 0;
  std::uint32_t kv_end = 0;
};

/// How attention work is cut: query rows per tile and cache positions per
/// item (a long context splits into several items, computed in parallel and
/// merged: flash-decoding). kv_chunk 0 keeps each tile whole.
struct attention_split {
  std::uint32_t q_tile = 64;
  std::uint32_t kv_chunk = 0;
};

/// One step's batch, laid out for the kernels. Sequences are the batch's
/// accepted entries, grouped by adapter (stable within a group: base-model
/// sequences first, then adapters in order of first appearance), so each
/// adapter's rows are one segment.
struct batch_plan {
  /// Sequence i of the plan is batch entry order[i].
  std::vector<std::uint32_t> order;
  /// Entries left out, each with what was wrong (their requests fail alone).
  std::vector<std::pair<std::uint32_t, std::string>> rejected;

  // -- token rows ------------------------------------------------------------
  std::vector<std::int32_t> token_ids;   ///< [rows]
  std::vector<std::int32_t> positions;   ///< [rows] position of each row in its sequence
  std::vector<std::uint32_t> row_seq;    ///< [rows] sequence of each row
  std::vector<std::uint32_t> qo_indptr;  ///< [seqs + 1] rows of sequence i: [qo_indptr[i], qo_indptr[i+1])
  std::vector<std::uint32_t> last_row;   ///< [seqs] the row whose logits are sampled

  // -- KV pages --------------------------------------------------------------
  std::vector<std::uint32_t> kv_indptr; ///< [seqs + 1] into kv_pages
  std::vector<std::uint32_t> kv_pages;  ///< each sequence's pages, in position order
  std::vector<std::uint32_t> kv_len;    ///< [seqs] positions in the cache after this step
  /// Row r's K and V go to page kv_pages[kv_indptr[seq] + pos / page_tokens],
  /// slot pos % page_tokens: precomputed as [rows] page ids and slots.
  std::vector<std::uint32_t> row_page;
  std::vector<std::uint32_t> row_slot;

  // -- LoRA --------------------------------------------------------------------
  std::vector<lora_slot> slots;          ///< distinct adapters of the step
  std::vector<std::uint32_t> lora_pages; ///< their pages, slot after slot
  std::vector<std::int32_t> row_lora;    ///< [rows] slot of each row, -1: base model (BGMV)
  std::vector<lora_segment> segments;    ///< runs of rows with an adapter (SGMV)
  std::uint32_t max_rank = 0;

  // -- attention ---------------------------------------------------------------
  /// The model's sliding window (plan_inputs::sliding_window): a row at
  /// position p sees positions p - w + 1 to p; 0: every position to p. Each
  /// tile's items begin at the first position its first row sees.
  std::uint32_t sliding_window = 0;
  std::vector<attention_item> items;
  /// Tiles: items [tile_indptr[t], tile_indptr[t+1]) share query rows.
  std::vector<std::uint32_t> tile_indptr;

  // -- sampling ----------------------------------------------------------------
  std::vector<sample_params> sampling; ///< [seqs]
  /// Each sequence's step_entry::logit_adjust: sequence i's are
  /// [adjust_indptr[i], adjust_indptr[i+1]) of the three arrays (repeated:
  /// 1 or 0); all four empty when no sequence has any (the step samples its
  /// logits as they are).
  std::vector<std::uint32_t> adjust_indptr;
  std::vector<std::int32_t> adjust_tokens;
  std::vector<float> adjust_deltas;
  std::vector<std::uint8_t> adjust_repeated;

  std::uint32_t max_new_tokens = 0; ///< longest run of rows of one sequence
  std::uint32_t max_kv_len = 0;

  std::uint32_t seqs() const noexcept { return static_cast<std::uint32_t>(order.size()); }
  std::uint32_t rows() const noexcept { return static_cast<std::uint32_t>(token_ids.size()); }
  /// Every sequence feeds one token (a decode-only step).
  bool decode_only() const noexcept { return max_new_tokens <= 1; }
};

/// Why this backend's kernels cannot serve a model of `hidden` and `heads`
/// query heads over pages of `kv` ("" when they can): attention takes
/// head_dim 64 or 128 and whole groups of at most 64 query heads per KV
/// head; an adapter needs pages that hold at least one of its rows.
std::string unsupported_model(std::uint32_t hidden, std::uint32_t heads, const kv_layout& kv);

/// Pages in a device pool sized from free memory: what is left of
/// `free_bytes` after the weights and the largest step's scratch, times
/// `fraction`, in whole pages of `page_bytes`; 0 when nothing is left.
std::uint64_t pool_pages_for(std::uint64_t free_bytes, std::uint64_t weight_bytes,
                             std::uint64_t scratch_bytes, double fraction,
                             std::uint64_t page_bytes) noexcept;

/// What the planner needs of the backend.
struct plan_inputs {
  kv_layout kv;
  std::uint32_t vocab_size = 0;
  std::uint64_t pool_pages = 0;
  /// The adapter with this id, or nullptr when it is not resident.
  std::function<const resident_adapter*(std::uint32_t id)> adapter;
  attention_split split;
  /// llama_config::sliding_window (Mistral 7B v0.1's); 0: none.
  std::uint32_t sliding_window = 0;
};

/// How a step on `sms` multiprocessors cuts its attention (kv_heads heads
/// of cache): tiles of 64 query rows, each tile whole (kv_chunk 0) where the
/// batch's tiles give the kernels at least two blocks per multiprocessor
/// (tiles x kv_heads >= 2 sms: splitting would only add a merge), else
/// contexts cut into items of 256 positions, so that a few long sequences
/// still spread over the GPU (flash-decoding).
attention_split split_for(std::span<const step_entry> batch, std::uint32_t kv_heads, std::uint32_t sms);

/// Lays out `batch`. An entry with no tokens, a token outside the
/// vocabulary, too few pages (or a page outside the pool) for its context
/// plus new tokens, a hidden cache, or an adapter that is not resident (or
/// whose rank differs from the entry's) is rejected with the reason; the
/// others are planned.
batch_plan plan_batch(std::span<const step_entry> batch, const plan_inputs& in);

} // namespace troupe::gpu::cuda
