// The Llama forward pass on the GPU: cuBLAS for every base projection over
// the whole token-flattened batch, this backend's kernels for the rest
// (norms, rotary embeddings, paged attention, SwiGLU, sampling) and S-LoRA's
// kernels for the adapters, whose weights sit in the same page pool as the
// KV cache. Weights are fp16 or bf16 in HF's [out, in] layout; the pool is
// one cudaMalloc. One thread drives a model at a time, on its stream.
#pragma once

#include "gpu/cuda/device_buffer.hpp"
#include "gpu/cuda/dtype.hpp"
#include "gpu/cuda/gemm.hpp"
#include "gpu/cuda/kernels.hpp"
#include "gpu/cuda/plan.hpp"
#include "gpu/cuda/plan_upload.hpp"

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace troupe::gpu::cuda {

struct model_config {
  std::uint32_t hidden = 0;
  std::uint32_t intermediate = 0;
  std::uint32_t layers = 0;
  std::uint32_t heads = 0;
  std::uint32_t kv_heads = 0;
  std::uint32_t head_dim = 0;
  std::uint32_t vocab = 0;
  float rms_eps = 1e-6f;
  /// [rotary_dim / 2] rotary inverse frequencies, scaling applied: the
  /// leading rotary_dim (at most head_dim) elements of each head turn
  /// (rope_table).
  std::vector<float> inv_freq;
  /// What cos and sin are multiplied by (LongRoPE's attention factor).
  float rope_scale = 1.0f;
  /// LongRoPE: a step's rows of a sequence longer than rope_long_after
  /// after it turn by long_inv_freq ([rotary_dim / 2]); 0: inv_freq only.
  std::vector<float> long_inv_freq;
  std::uint32_t rope_long_after = 0;
  bool tied_embeddings = false;
  /// Biases on the q, k and v projections (Qwen2's), and on o.
  bool qkv_bias = false;
  bool o_bias = false;
  /// Each head of q and of k RMS-normalised before the rotation (Qwen3's).
  bool qk_norm = false;
  /// Mistral 7B v0.1's sliding window (llama_config::sliding_window); 0:
  /// none. Every plan the model runs must be made for it
  /// (plan_inputs::sliding_window).
  std::uint32_t sliding_window = 0;
  dtype type = dtype::f16;
  /// The q, k and v projections as one strided-batched cuBLAS call (two
  /// with grouped-query heads: q, then k and v) instead of three: fewer
  /// launches per layer. Off gives the three separate calls (the benchmark
  /// measures both).
  bool batched_qkv = true;
  /// Steps of at most this many rows (decode batches of up to 4) run their
  /// linear layers on gemv, a matrix-vector kernel that reads each weight
  /// once in long coalesced runs, instead of cuBLAS; 0 keeps cuBLAS for
  /// every step (the benchmark measures both).
  std::uint32_t gemv_rows = gemv_max_rows;
  /// Steps whose launches repeat an earlier step's (the same device plan:
  /// counts and array addresses; a decode batch of the same sequences and
  /// adapters, step after step) replay a CUDA graph captured from them,
  /// one launch for the step's dozens. At most this many graphs are kept
  /// (the least recently used replaced); a step is captured the second
  /// time in a row its launches come. 0: every step launches directly.
  std::uint32_t step_graphs = 0;

  std::uint32_t q_dim() const noexcept { return heads * head_dim; }
  std::uint32_t kv_dim() const noexcept { return kv_heads * head_dim; }
  /// Bytes of all weights (what a decode step must read at least once).
  std::uint64_t weight_bytes() const noexcept;
};

/// Fills `n` values of type `t` at `data` with a uniform draw in
/// [-scale, scale] keyed by (seed, index), enqueued on `stream`: random
/// weights, and random operands for measurements (constant or zero operands
/// run faster than real data on tensor cores).
void fill_uniform(dtype t, std::uint16_t* data, std::uint64_t n, std::uint64_t seed, float scale,
                  cudaStream_t stream);

/// Which weight of a layer (or of the model) set_weight writes.
enum class weight : std::uint8_t {
  embed,       ///< [vocab, hidden]
  final_norm,  ///< [hidden]
  lm_head,     ///< [vocab, hidden] (the embedding when tied)
  attn_norm,   ///< per layer [hidden]
  wq,          ///< [q_dim, hidden]
  wk,          ///< [kv_dim, hidden]
  wv,          ///< [kv_dim, hidden]
  wo,          ///< [hidden, q_dim]
  mlp_norm,    ///< [hidden]
  w_gate,      ///< [intermediate, hidden]
  w_up,        ///< [intermediate, hidden]
  w_down,      ///< [hidden, intermediate]
  bq,          ///< [q_dim] (qkv_bias)
  bk,          ///< [kv_dim] (qkv_bias)
  bv,          ///< [kv_dim] (qkv_bias)
  bo,          ///< [hidden] (o_bias)
  q_norm,      ///< [head_dim] (qk_norm)
  k_norm,      ///< [head_dim] (qk_norm)
};

/// The parts of a step, in the order a layer runs them (norm and lora come
/// twice per layer), for a probe that times them.
enum class step_part : std::uint8_t {
  embed, norm, qkv, lora, rope_kv, attention, o, gate_up, swiglu, down, head, sample, end
};
constexpr const char* to_string(step_part p) noexcept {
  constexpr const char* names[] = {"embed", "norm", "qkv", "lora", "rope_kv", "attention", "o",
                                   "gate_up", "swiglu", "down", "head", "sample", "end"};
  return names[static_cast<int>(p)];
}

class cuda_model {
public:
  /// Allocates the weights (unset) and a pool of `pool_pages` pages laid
  /// out as `kv` (which must match the config's layers and KV heads).
  cuda_model(model_config cfg, kv_layout kv, std::uint64_t pool_pages, cudaStream_t stream);
  ~cuda_model();
  cuda_model(const cuda_model&) = delete;
  cuda_model& operator=(const cuda_model&) = delete;

  /// Writes weight `w` (of `layer` for per-layer weights) from fp32 values,
  /// rounded to the model's type. Throws cuda_error naming the weight when
  /// the size is wrong.
  void set_weight(weight w, std::uint32_t layer, std::span<const float> values);
  /// set_weight from values already of the model's type (16-bit patterns:
  /// weight_bits of a checkpoint's tensor), copied as they are.
  void set_weight_bits(weight w, std::uint32_t layer, std::span<const std::uint16_t> bits);
  /// Fills every weight with a seeded uniform draw in [-scale, scale] (the
  /// norms with 1): a model of the right shape for speed measurements.
  void randomize(std::uint64_t seed, float scale);

  /// Runs one step of `plan` (planned against this model's pool) and
  /// writes one token per sequence into `tokens` (plan order), returning
  /// when they are on the host.
  void forward(const batch_plan& plan, std::span<std::int32_t> tokens);
  /// Enqueues the step without waiting: the tokens land in device memory
  /// (device_tokens()) when the stream reaches them. `before_layer(l)`,
  /// when given, runs on the host before layer l's work is enqueued (to make
  /// the stream wait for that layer's cache: cudaStreamWaitEvent).
  void enqueue_forward(const batch_plan& plan,
                       const std::function<void(std::uint32_t layer)>& before_layer = {});
  /// enqueue_forward in two parts: upload_plan grows the scratch for `plan`
  /// and copies it to the device (on the stream); enqueue_step enqueues the
  /// step's launches, and nothing else, so a stream capture of it is a
  /// CUDA graph of the step that replays while the upload's view stays
  /// valid (until the next upload_plan).
  device_plan upload_plan(const batch_plan& plan);
  void enqueue_step(const device_plan& d,
                    const std::function<void(std::uint32_t layer)>& before_layer = {});
  /// Called on the host as the step is enqueued, before each part's
  /// launches (and with `end` after the last), so a benchmark can record an
  /// event on the stream there and time each part; none by default.
  void set_probe(std::function<void(step_part)> probe) { probe_ = std::move(probe); }
  /// Switches model_config::batched_qkv (the weights' layout is the same
  /// either way).
  void set_batched_qkv(bool on) noexcept;
  /// Sets model_config::gemv_rows.
  void set_gemv_rows(std::uint32_t rows) noexcept;
  /// Sets model_config::step_graphs (0 drops the graphs kept); after a
  /// refused capture, step graphs are tried again.
  void set_step_graphs(std::uint32_t n) noexcept;
  /// Graphs kept now, and steps replayed from one so far.
  std::size_t step_graphs_kept() const noexcept { return graphs_.size(); }
  std::uint64_t steps_replayed() const noexcept { return replayed_; }
  /// Why step graphs stopped (a capture CUDA refused; steps then launch
  /// directly), empty while they work.
  const std::string& step_graphs_error() const noexcept { return graphs_error_; }
  /// Grows the step's scratch buffers now for steps of up to `rows` token
  /// rows, `seqs` sequences and adapters of rank `rank` (they grow on demand
  /// too; reserving them at start keeps the pool from taking their memory).
  void reserve_scratch(std::uint32_t rows, std::uint32_t seqs, std::uint32_t rank);
  /// Device bytes reserve_scratch(rows, seqs, rank) takes for `cfg`, the
  /// attention's split workspace aside.
  static std::uint64_t scratch_bytes(const model_config& cfg, std::uint32_t rows, std::uint32_t seqs,
                                     std::uint32_t rank) noexcept;
  const std::int32_t* device_tokens() const noexcept { return tokens_.data(); }
  /// The last step's logits, [seqs, vocab] fp32, on the device.
  const float* device_logits() const noexcept { return logits_.data(); }
  /// After a step, before the next: the logits of its token rows [first,
  /// first + count) (a prompt's log-probabilities), from the final hidden
  /// states the step leaves in its scratch, into `out` ([count, vocab] fp32,
  /// device memory), enqueued on the model's stream. Throws cuda_error for
  /// rows the last step did not have.
  void enqueue_row_logits(std::uint32_t first, std::uint32_t count, float* out);

  /// Copies host page i (page_bytes() of it, in pool layout: an adapter
  /// packed by pack_lora_adapter, a cache read out earlier) into pool page
  /// pages[i], on `stream`; `host` should be pinned for the copy to run
  /// asynchronously. Throws cuda_error for a page outside the pool.
  void write_pages(std::span<const std::uint32_t> pages, const std::uint16_t* host,
                   cudaStream_t stream);

  const model_config& config() const noexcept { return cfg_; }
  const kv_layout& kv() const noexcept { return kv_; }
  const lora_layout& lora() const noexcept { return lora_; }
  std::uint64_t pool_pages() const noexcept { return pool_pages_; }
  /// The unified pool: KV pages and adapter pages.
  void* pool() const noexcept { return pool_.data(); }
  std::uint64_t page_bytes() const noexcept { return kv_.page_elems() * dtype_bytes(cfg_.type); }
  cudaStream_t stream() const noexcept { return stream_; }

private:
  struct layer_weights {
    // wqkv: [q_dim + 2 kv_dim, hidden], wq then wk then wv; bqkv their
    // biases (empty without qkv_bias), bo o's (empty without o_bias).
    device_buffer<std::uint16_t> attn_norm, wqkv, wo, mlp_norm, w_gate_up, w_down, bqkv, bo;
    // q_norm then k_norm ([head_dim] each; empty without qk_norm).
    device_buffer<std::uint16_t> qk_norm;
  };
  struct scratch {
    std::uint32_t rows = 0, seqs = 0, rank = 0;
    std::uint64_t partial = 0;
    // qkv: the step's q, then k, then v ([rows, q_dim], [rows, kv_dim] x 2);
    // qk_normed: q, then k, normalised per head (qk_norm only).
    device_buffer<std::uint16_t> residual, h, qkv, qk_normed, attn, proj, gate_up, mlp, last;
    device_buffer<float> lora_tmp, partial_buf;
  };
  /// The scratch for `plan`; true when a buffer was reallocated.
  bool ensure_scratch(const batch_plan& plan);
  /// The step's launches (enqueue_step without graphs).
  void launch_step(const device_plan& d, const std::function<void(std::uint32_t layer)>& before_layer);
  /// enqueue_step through a graph: replays the one of `d`'s launches, or
  /// captures it; false when the step should launch directly.
  bool replay_step(const device_plan& d);
  /// Forgets every graph: they hold the scratch's addresses and the
  /// switches' choices.
  void drop_graphs() noexcept;
  /// y = x w^T as blas::linear_batched (count 1: blas::linear; strides
  /// then unused), on gemv where the rows are few enough and its
  /// conditions hold, else on cuBLAS.
  /// fp32 logits [rows, vocab] of `rows` final hidden states `x`: the LM
  /// head (the embedding when tied).
  void head_logits(const void* x, std::uint32_t rows, float* out);
  void linear(const void* x, const void* w, std::uint64_t w_stride, void* y, std::uint64_t y_stride,
              std::uint32_t rows, std::uint32_t in, std::uint32_t out, std::uint32_t count = 1,
              bool out_f32 = false);
  /// q, k, v = s_.h times the layer's wq, wk, wv.
  void project_qkv(const layer_weights& w, std::uint32_t rows, void* q, void* k, void* v);
  bool ensure_rows(std::uint64_t rows, std::uint64_t seqs, std::uint64_t lora_floats);
  /// y[i] += LoRA of projs[i] (all reading x) for the plan's adapters: one
  /// shrink and one expand launch.
  void add_lora(const device_plan& d, std::uint32_t layer, std::span<const lora_proj> projs,
                const void* x, std::span<void* const> ys);

  model_config cfg_;
  kv_layout kv_;
  lora_layout lora_;
  std::uint64_t pool_pages_ = 0;
  cudaStream_t stream_ = nullptr;
  blas blas_;
  plan_upload upload_;
  device_buffer<std::uint16_t> embed_, final_norm_, lm_head_;
  std::vector<layer_weights> layers_;
  device_buffer<std::uint16_t> pool_;
  device_buffer<float> inv_freq_;
  scratch s_;
  std::function<void(step_part)> probe_;
  device_buffer<float> logits_;
  device_buffer<float> adjusted_logits_; // logits_ with the step's logit adjustments, sampled from
  std::uint32_t step_rows_ = 0; // rows of the last step enqueued
  device_buffer<std::int32_t> tokens_;
  struct step_graph {
    device_plan plan;
    cudaGraphExec_t exec = nullptr;
    std::uint64_t used = 0; // graph_clock_ at its last replay
  };
  std::vector<step_graph> graphs_;
  device_plan last_plan_{}; // the last step launched directly
  bool have_last_ = false;
  std::uint64_t graph_clock_ = 0, replayed_ = 0;
  std::string graphs_error_;
};

} // namespace troupe::gpu::cuda
