// cuda_model: weights and scratch on the device, one step as a fixed
// sequence of launches on the model's stream (nothing waits on the host
// until the sampled tokens are copied back).
#include "gpu/cuda/model.hpp"

#include "gpu/cuda/check.hpp"
#include "gpu/random.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace troupe::gpu::cuda {

namespace {

// w[i] = uniform in [-scale, scale] keyed by (seed, i), as fp16 or bf16 bits.
__global__ void fill_uniform_kernel(std::uint16_t* w, std::uint64_t n, std::uint64_t seed,
                                    float scale, bool bf16) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::uint64_t{gridDim.x} * blockDim.x) {
    const float u = static_cast<float>(splitmix64(seed ^ splitmix64(i)) >> 40) * 0x1.0p-24f;
    const float x = (2.0f * u - 1.0f) * scale;
    w[i] = bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(x)) : __half_as_ushort(__float2half_rn(x));
  }
}

__global__ void fill_value(std::uint16_t* w, std::uint64_t n, std::uint16_t bits) {
  for (std::uint64_t i = blockIdx.x * std::uint64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::uint64_t{gridDim.x} * blockDim.x)
    w[i] = bits;
}

unsigned blocks_for(std::uint64_t n) {
  return static_cast<unsigned>(std::min<std::uint64_t>((n + 255) / 256, 4096));
}

template <class T>
bool grow(device_buffer<T>& b, std::uint64_t n) {
  if (b.size() >= n)
    return false;
  b = device_buffer<T>(n);
  return true;
}

// Whether two device plans make the same launches: every count and array
// address a launch reads. max_kv_len is host-side information no launch
// takes (it grows every decode step; comparing it would capture each step
// anew).
bool same_launches(const device_plan& a, const device_plan& b) noexcept {
  static_assert(sizeof(device_plan) == 216, "a device_plan field was added: compare it here");
  return a.seqs == b.seqs && a.rows == b.rows && a.token_ids == b.token_ids &&
         a.positions == b.positions && a.row_seq == b.row_seq && a.qo_indptr == b.qo_indptr &&
         a.last_row == b.last_row && a.kv_indptr == b.kv_indptr && a.kv_pages == b.kv_pages &&
         a.kv_len == b.kv_len && a.row_page == b.row_page && a.row_slot == b.row_slot &&
         a.slots == b.slots && a.lora_pages == b.lora_pages && a.row_lora == b.row_lora &&
         a.segments == b.segments && a.num_segments == b.num_segments && a.max_rank == b.max_rank &&
         a.items == b.items && a.num_items == b.num_items && a.tile_indptr == b.tile_indptr &&
         a.num_tiles == b.num_tiles && a.sampling == b.sampling && a.adjust_indptr == b.adjust_indptr &&
         a.adjust_tokens == b.adjust_tokens && a.adjust_deltas == b.adjust_deltas &&
         a.adjust_repeated == b.adjust_repeated &&
         a.max_new_tokens == b.max_new_tokens && a.sliding_window == b.sliding_window;
}

} // namespace

void fill_uniform(dtype t, std::uint16_t* data, std::uint64_t n, std::uint64_t seed, float scale,
                  cudaStream_t stream) {
  if (n == 0)
    return;
  fill_uniform_kernel<<<blocks_for(n), 256, 0, stream>>>(data, n, seed, scale, t == dtype::bf16);
  TROUPE_CUDA_CHECK(cudaGetLastError());
}

std::uint64_t model_config::weight_bytes() const noexcept {
  const std::uint64_t h = hidden;
  const std::uint64_t per_layer =
    2 * h + h * q_dim() + 2 * h * kv_dim() + q_dim() * h + 3 * h * intermediate +
    (qkv_bias ? q_dim() + 2 * std::uint64_t{kv_dim()} : 0) + (o_bias ? h : 0) + (qk_norm ? 2 * head_dim : 0);
  const std::uint64_t embeds = (tied_embeddings ? 1 : 2) * std::uint64_t{vocab} * h;
  return (layers * per_layer + embeds + h) * dtype_bytes(type);
}

cuda_model::cuda_model(model_config cfg, kv_layout kv, std::uint64_t pool_pages,
                       cudaStream_t stream)
  : cfg_(std::move(cfg)), kv_(kv), pool_pages_(pool_pages), stream_(stream), blas_(stream) {
  if (kv_.num_layers != cfg_.layers || kv_.num_kv_heads != cfg_.kv_heads ||
      kv_.head_dim != cfg_.head_dim)
    throw cuda_error("cuda_model: the pool's layout (" + std::to_string(kv_.num_layers) +
                     " layers, " + std::to_string(kv_.num_kv_heads) + " KV heads of " +
                     std::to_string(kv_.head_dim) + ") does not match the model's");
  if (cfg_.inv_freq.empty() || cfg_.inv_freq.size() > cfg_.head_dim / 2 ||
      (cfg_.rope_long_after != 0 && cfg_.long_inv_freq.size() != cfg_.inv_freq.size()))
    throw cuda_error("cuda_model: " + std::to_string(cfg_.inv_freq.size()) + " rotary frequencies (" +
                     std::to_string(cfg_.long_inv_freq.size()) + " long ones) for head_dim " +
                     std::to_string(cfg_.head_dim));
  lora_ = lora_layout::make(kv_, cfg_.hidden, cfg_.q_dim());
  const std::uint64_t h = cfg_.hidden;
  embed_ = device_buffer<std::uint16_t>(std::uint64_t{cfg_.vocab} * h);
  final_norm_ = device_buffer<std::uint16_t>(h);
  if (!cfg_.tied_embeddings)
    lm_head_ = device_buffer<std::uint16_t>(std::uint64_t{cfg_.vocab} * h);
  layers_.resize(cfg_.layers);
  for (auto& l : layers_) {
    l.attn_norm = device_buffer<std::uint16_t>(h);
    l.wqkv = device_buffer<std::uint16_t>((std::uint64_t{cfg_.q_dim()} + 2 * cfg_.kv_dim()) * h);
    l.wo = device_buffer<std::uint16_t>(h * cfg_.q_dim());
    l.mlp_norm = device_buffer<std::uint16_t>(h);
    l.w_gate_up = device_buffer<std::uint16_t>(2 * std::uint64_t{cfg_.intermediate} * h);
    l.w_down = device_buffer<std::uint16_t>(h * cfg_.intermediate);
    if (cfg_.qkv_bias)
      l.bqkv = device_buffer<std::uint16_t>(std::uint64_t{cfg_.q_dim()} + 2 * cfg_.kv_dim());
    if (cfg_.o_bias)
      l.bo = device_buffer<std::uint16_t>(h);
    if (cfg_.qk_norm)
      l.qk_norm = device_buffer<std::uint16_t>(2 * std::uint64_t{cfg_.head_dim});
  }
  pool_ = device_buffer<std::uint16_t>(pool_pages_ * kv_.page_elems());
  // LongRoPE's long frequencies right after the short ones (rope_freqs).
  std::vector<float> freqs = cfg_.inv_freq;
  if (cfg_.rope_long_after != 0)
    freqs.insert(freqs.end(), cfg_.long_inv_freq.begin(), cfg_.long_inv_freq.end());
  inv_freq_ = device_buffer<float>(freqs.size());
  inv_freq_.upload(freqs);
}

cuda_model::~cuda_model() { drop_graphs(); }

void cuda_model::drop_graphs() noexcept {
  for (auto& g : graphs_)
    cudaGraphExecDestroy(g.exec);
  graphs_.clear();
  have_last_ = false;
}

void cuda_model::set_batched_qkv(bool on) noexcept {
  cfg_.batched_qkv = on;
  drop_graphs();
}

void cuda_model::set_gemv_rows(std::uint32_t rows) noexcept {
  cfg_.gemv_rows = rows;
  drop_graphs();
}

void cuda_model::set_step_graphs(std::uint32_t n) noexcept {
  cfg_.step_graphs = n;
  graphs_error_.clear(); // a new setting tries again
  drop_graphs();
}

void cuda_model::set_weight(weight w, std::uint32_t layer, std::span<const float> values) {
  std::vector<std::uint16_t> bits(values.size());
  std::transform(values.begin(), values.end(), bits.begin(),
                 [t = cfg_.type](float f) { return to_bits(t, f); });
  set_weight_bits(w, layer, bits);
}

void cuda_model::set_weight_bits(weight w, std::uint32_t layer, std::span<const std::uint16_t> bits) {
  const auto per_layer = [&]() -> layer_weights& {
    if (layer >= layers_.size())
      throw cuda_error("cuda_model::set_weight: layer " + std::to_string(layer) + " of " +
                       std::to_string(layers_.size()));
    return layers_[layer];
  };
  device_buffer<std::uint16_t>* dst = nullptr;
  std::uint64_t offset = 0;
  std::uint64_t n = 0;
  const std::uint64_t inter_rows = std::uint64_t{cfg_.intermediate} * cfg_.hidden;
  const std::uint64_t q_elems = std::uint64_t{cfg_.q_dim()} * cfg_.hidden;
  const std::uint64_t kv_elems = std::uint64_t{cfg_.kv_dim()} * cfg_.hidden;
  switch (w) {
    case weight::embed: dst = &embed_; break;
    case weight::final_norm: dst = &final_norm_; break;
    case weight::lm_head: dst = cfg_.tied_embeddings ? &embed_ : &lm_head_; break;
    case weight::attn_norm: dst = &per_layer().attn_norm; break;
    case weight::wq: dst = &per_layer().wqkv; n = q_elems; break;
    case weight::wk: dst = &per_layer().wqkv; offset = q_elems; n = kv_elems; break;
    case weight::wv: dst = &per_layer().wqkv; offset = q_elems + kv_elems; n = kv_elems; break;
    case weight::wo: dst = &per_layer().wo; break;
    case weight::mlp_norm: dst = &per_layer().mlp_norm; break;
    case weight::w_gate: dst = &per_layer().w_gate_up; n = inter_rows; break;
    case weight::w_up: dst = &per_layer().w_gate_up; offset = inter_rows; n = inter_rows; break;
    case weight::w_down: dst = &per_layer().w_down; break;
    case weight::bq: dst = &per_layer().bqkv; n = cfg_.q_dim(); break;
    case weight::bk: dst = &per_layer().bqkv; offset = cfg_.q_dim(); n = cfg_.kv_dim(); break;
    case weight::bv:
      dst = &per_layer().bqkv;
      offset = cfg_.q_dim() + std::uint64_t{cfg_.kv_dim()};
      n = cfg_.kv_dim();
      break;
    case weight::bo: dst = &per_layer().bo; break;
    case weight::q_norm: dst = &per_layer().qk_norm; n = cfg_.head_dim; break;
    case weight::k_norm: dst = &per_layer().qk_norm; offset = cfg_.head_dim; n = cfg_.head_dim; break;
  }
  if (dst->size() == 0)
    throw cuda_error("cuda_model::set_weight: weight " + std::to_string(static_cast<int>(w)) +
                     " is a bias or norm the model's config does not have");
  if (n == 0)
    n = dst->size();
  if (bits.size() != n)
    throw cuda_error("cuda_model::set_weight: weight " + std::to_string(static_cast<int>(w)) +
                     " of layer " + std::to_string(layer) + " takes " + std::to_string(n) +
                     " values, got " + std::to_string(bits.size()));
  TROUPE_CUDA_CHECK(cudaMemcpy(dst->data() + offset, bits.data(), n * 2, cudaMemcpyHostToDevice));
  // Landed before any stream's next step (a pageable copy may return staged).
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
}

void cuda_model::randomize(std::uint64_t seed, float scale) {
  std::uint64_t k = 0;
  auto fill = [&](device_buffer<std::uint16_t>& b) {
    fill_uniform(cfg_.type, b.data(), b.size(), splitmix64(seed + ++k), scale, stream_);
  };
  const std::uint16_t one = to_bits(cfg_.type, 1.0f);
  auto ones = [&](device_buffer<std::uint16_t>& b) {
    fill_value<<<blocks_for(b.size()), 256, 0, stream_>>>(b.data(), b.size(), one);
    TROUPE_CUDA_CHECK(cudaGetLastError());
  };
  fill(embed_);
  fill(lm_head_);
  ones(final_norm_);
  for (auto& l : layers_) {
    ones(l.attn_norm);
    ones(l.mlp_norm);
    if (l.qk_norm.size() > 0)
      ones(l.qk_norm);
    for (auto* b : {&l.wqkv, &l.wo, &l.w_gate_up, &l.w_down, &l.bqkv, &l.bo})
      if (b->size() > 0)
        fill(*b);
  }
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void cuda_model::write_pages(std::span<const std::uint32_t> pages, const std::uint16_t* host,
                             cudaStream_t stream) {
  const std::uint64_t elems = kv_.page_elems();
  for (std::size_t p = 0; p < pages.size(); ++p) {
    if (pages[p] >= pool_pages_)
      throw cuda_error("cuda_model::write_pages: page " + std::to_string(pages[p]) +
                       " outside the pool of " + std::to_string(pool_pages_));
    TROUPE_CUDA_CHECK(cudaMemcpyAsync(pool_.data() + pages[p] * elems, host + p * elems,
                                      page_bytes(), cudaMemcpyHostToDevice, stream));
  }
}

bool cuda_model::ensure_scratch(const batch_plan& plan) {
  const bool rows = ensure_rows(plan.rows(), plan.seqs(), std::uint64_t{lora_max_fused} * plan.rows() * plan.max_rank);
  return grow(s_.partial_buf, attention_workspace_floats(plan, cfg_.heads, cfg_.head_dim)) || rows;
}

void cuda_model::reserve_scratch(std::uint32_t rows, std::uint32_t seqs, std::uint32_t rank) {
  if (ensure_rows(rows, seqs, std::uint64_t{lora_max_fused} * rows * rank))
    drop_graphs();
}

std::uint64_t cuda_model::scratch_bytes(const model_config& cfg, std::uint32_t rows,
                                        std::uint32_t seqs, std::uint32_t rank) noexcept {
  const std::uint64_t per_row = 3ull * cfg.hidden + 2ull * cfg.q_dim() + 2ull * cfg.kv_dim() +
                                3ull * cfg.intermediate +
                                (cfg.qk_norm ? std::uint64_t{cfg.q_dim()} + cfg.kv_dim() : 0);
  const std::uint64_t per_seq = cfg.hidden;
  return (rows * per_row + seqs * per_seq) * dtype_bytes(cfg.type) +
         2 * std::uint64_t{seqs} * cfg.vocab * sizeof(float) + std::uint64_t{seqs} * sizeof(std::int32_t) +
         std::uint64_t{lora_max_fused} * rows * rank * sizeof(float);
}

bool cuda_model::ensure_rows(std::uint64_t rows, std::uint64_t seqs, std::uint64_t lora_floats) {
  bool grew = false;
  if (rows > s_.rows) {
    grew = true;
    s_.rows = static_cast<std::uint32_t>(rows);
    const std::uint64_t h = cfg_.hidden;
    s_.residual = device_buffer<std::uint16_t>(rows * h);
    s_.h = device_buffer<std::uint16_t>(rows * h);
    s_.qkv = device_buffer<std::uint16_t>(rows * (cfg_.q_dim() + 2 * cfg_.kv_dim()));
    if (cfg_.qk_norm)
      s_.qk_normed = device_buffer<std::uint16_t>(rows * (cfg_.q_dim() + cfg_.kv_dim()));
    s_.attn = device_buffer<std::uint16_t>(rows * cfg_.q_dim());
    s_.proj = device_buffer<std::uint16_t>(rows * h);
    s_.gate_up = device_buffer<std::uint16_t>(rows * 2 * cfg_.intermediate);
    s_.mlp = device_buffer<std::uint16_t>(rows * cfg_.intermediate);
  }
  if (seqs > s_.seqs) {
    grew = true;
    s_.seqs = static_cast<std::uint32_t>(seqs);
    s_.last = device_buffer<std::uint16_t>(seqs * cfg_.hidden);
    logits_ = device_buffer<float>(seqs * cfg_.vocab);
    adjusted_logits_ = device_buffer<float>(seqs * cfg_.vocab);
    tokens_ = device_buffer<std::int32_t>(seqs);
  }
  return grow(s_.lora_tmp, lora_floats) || grew;
}

void cuda_model::add_lora(const device_plan& d, std::uint32_t layer, std::span<const lora_proj> projs,
                          const void* x, std::span<void* const> ys) {
  if (d.max_rank == 0)
    return;
  const bool gathered = d.max_new_tokens <= 1;
  lora_shrink(cfg_.type, d, lora_, layer, projs, x, pool_.data(), gathered, s_.lora_tmp.data(), stream_);
  lora_expand(cfg_.type, d, lora_, layer, projs, s_.lora_tmp.data(), pool_.data(), gathered, ys, stream_);
}

void cuda_model::linear(const void* x, const void* w, std::uint64_t w_stride, void* y,
                        std::uint64_t y_stride, std::uint32_t rows, std::uint32_t in,
                        std::uint32_t out, std::uint32_t count, bool out_f32) {
  linear_on(blas_, cfg_.type, x, w, w_stride, y, y_stride, rows, in, out, count, out_f32, cfg_.gemv_rows);
}

void cuda_model::project_qkv(const layer_weights& w, std::uint32_t rows, void* q, void* k,
                             void* v) {
  const std::uint32_t h = cfg_.hidden, qd = cfg_.q_dim(), kvd = cfg_.kv_dim();
  const std::uint16_t* wq = w.wqkv.data();
  const std::uint16_t* wk = wq + std::uint64_t{qd} * h;
  const std::uint16_t* wv = wk + std::uint64_t{kvd} * h;
  if (!cfg_.batched_qkv) {
    linear(s_.h.data(), wq, 0, q, 0, rows, h, qd);
    linear(s_.h.data(), wk, 0, k, 0, rows, h, kvd);
    linear(s_.h.data(), wv, 0, v, 0, rows, h, kvd);
  } else if (qd == kvd) { // every head has its own K and V: three of one shape
    linear(s_.h.data(), wq, std::uint64_t{qd} * h, q, std::uint64_t{rows} * qd, rows, h, qd, 3);
  } else { // grouped-query heads: q alone, then k and v together
    linear(s_.h.data(), wq, 0, q, 0, rows, h, qd);
    linear(s_.h.data(), wk, std::uint64_t{kvd} * h, k, std::uint64_t{rows} * kvd, rows, h, kvd, 2);
  }
}

void cuda_model::enqueue_forward(const batch_plan& plan,
                                 const std::function<void(std::uint32_t)>& before_layer) {
  if (plan.rows() == 0)
    return;
  enqueue_step(upload_plan(plan), before_layer);
}

device_plan cuda_model::upload_plan(const batch_plan& plan) {
  if (plan.sliding_window != cfg_.sliding_window)
    throw cuda_error("cuda_model: a plan for a sliding window of " + std::to_string(plan.sliding_window) +
                     " positions, but the model's is " + std::to_string(cfg_.sliding_window) + " (0: none)");
  if (ensure_scratch(plan))
    drop_graphs();
  return upload_.upload(plan, stream_);
}

void cuda_model::enqueue_step(const device_plan& d,
                              const std::function<void(std::uint32_t)>& before_layer) {
  if (d.rows == 0)
    return;
  step_rows_ = d.rows;
  // A step that waits on other streams layer by layer, or is timed part by
  // part, launches directly.
  if (cfg_.step_graphs > 0 && graphs_error_.empty() && !before_layer && !probe_ && replay_step(d))
    return;
  launch_step(d, before_layer);
}

bool cuda_model::replay_step(const device_plan& d) {
  // Inside the caller's own capture (the benchmark's), the launches go into
  // that graph as they are.
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream_, &capturing) != cudaSuccess || capturing != cudaStreamCaptureStatusNone)
    return false;
  ++graph_clock_;
  for (auto& g : graphs_)
    if (same_launches(g.plan, d)) {
      TROUPE_CUDA_CHECK(cudaGraphLaunch(g.exec, stream_));
      g.used = graph_clock_;
      ++replayed_;
      return true;
    }
  const bool repeated = have_last_ && same_launches(last_plan_, d);
  last_plan_ = d;
  have_last_ = true;
  if (!repeated)
    return false;
  // The second time in a row: capture it. Nothing in launch_step
  // synchronizes or allocates; a capture CUDA refuses all the same turns
  // step graphs off, and the step launches directly.
  const auto refused = [&](const std::string& what, cudaError_t e) {
    cudaGetLastError(); // a failed capture's error is not sticky
    graphs_error_ = what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
    drop_graphs();
    return false;
  };
  if (const auto e = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal); e != cudaSuccess)
    return refused("cudaStreamBeginCapture", e);
  cudaGraph_t graph = nullptr;
  try {
    launch_step(d, {});
  } catch (...) {
    cudaStreamEndCapture(stream_, &graph);
    if (graph != nullptr)
      cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  if (const auto e = cudaStreamEndCapture(stream_, &graph); e != cudaSuccess)
    return refused("cudaStreamEndCapture", e);
  cudaGraphExec_t exec = nullptr;
  const auto made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (made != cudaSuccess)
    return refused("cudaGraphInstantiate", made);
  if (graphs_.size() >= cfg_.step_graphs) { // the least recently used goes
    auto lru = std::min_element(graphs_.begin(), graphs_.end(),
                                [](const auto& a, const auto& b) { return a.used < b.used; });
    cudaGraphExecDestroy(lru->exec);
    graphs_.erase(lru);
  }
  graphs_.push_back({d, exec, graph_clock_});
  TROUPE_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
  ++replayed_;
  return true;
}

void cuda_model::launch_step(const device_plan& d,
                             const std::function<void(std::uint32_t)>& before_layer) {
  if (d.rows > s_.rows || d.seqs > s_.seqs)
    throw cuda_error("cuda_model::enqueue_step: a plan of " + std::to_string(d.rows) + " rows and " +
                     std::to_string(d.seqs) + " sequences over scratch for " + std::to_string(s_.rows) +
                     " and " + std::to_string(s_.seqs) + ": upload it with upload_plan first");
  const dtype t = cfg_.type;
  const std::uint32_t rows = d.rows;
  const std::uint32_t h = cfg_.hidden;
  const float scale = 1.0f / std::sqrt(static_cast<float>(cfg_.head_dim));
  // q, k and v one after another in one buffer, as their weights are.
  std::uint16_t* const q = s_.qkv.data();
  std::uint16_t* const k = q + std::uint64_t{rows} * cfg_.q_dim();
  std::uint16_t* const v = k + std::uint64_t{rows} * cfg_.kv_dim();

  const auto part = [this](step_part p) {
    if (probe_)
      probe_(p);
  };
  // LongRoPE: each row by its sequence's length after the step.
  const rope_freqs freqs{.inv_freq = inv_freq_.data(),
                         .rotary_dim = static_cast<std::uint32_t>(2 * cfg_.inv_freq.size()),
                         .scale = cfg_.rope_scale,
                         .long_after = cfg_.rope_long_after,
                         .row_seq = d.row_seq,
                         .seq_len = d.kv_len};

  part(step_part::embed);
  embedding_gather(t, embed_.data(), d.token_ids, rows, h, s_.residual.data(), stream_);
  for (std::uint32_t l = 0; l < cfg_.layers; ++l) {
    if (before_layer)
      before_layer(l);
    auto& w = layers_[l];
    part(step_part::norm);
    // The previous layer's MLP output joins the residual inside the norm.
    if (l == 0)
      rmsnorm(t, s_.residual.data(), w.attn_norm.data(), cfg_.rms_eps, rows, h, s_.h.data(), stream_);
    else
      add_rmsnorm(t, s_.residual.data(), s_.proj.data(), w.attn_norm.data(), cfg_.rms_eps, rows, h,
                  s_.h.data(), stream_);
    part(step_part::qkv);
    project_qkv(w, rows, q, k, v);
    if (cfg_.qkv_bias) { // before the adapters, as PEFT adds them to the base layer's output
      add_bias(t, q, w.bqkv.data(), rows, cfg_.q_dim(), stream_);
      add_bias(t, k, w.bqkv.data() + cfg_.q_dim(), rows, cfg_.kv_dim(), stream_);
      add_bias(t, v, w.bqkv.data() + cfg_.q_dim() + cfg_.kv_dim(), rows, cfg_.kv_dim(), stream_);
    }
    // q, k and v read the same input: one shrink and one expand for all three.
    constexpr lora_proj qkv[] = {lora_proj::q, lora_proj::k, lora_proj::v};
    void* const qkv_out[] = {q, k, v};
    part(step_part::lora);
    add_lora(d, l, qkv, s_.h.data(), qkv_out);
    // Qwen3: each head of q and k normalised (the norm over head_dim, one
    // row per head) into a buffer of their own, which the rotation and
    // attention then read.
    void* qr = q;
    void* kr = k;
    if (cfg_.qk_norm) {
      qr = s_.qk_normed.data();
      kr = s_.qk_normed.data() + std::uint64_t{rows} * cfg_.q_dim();
      rmsnorm(t, q, w.qk_norm.data(), cfg_.rms_eps, rows * cfg_.heads, cfg_.head_dim, qr, stream_);
      rmsnorm(t, k, w.qk_norm.data() + cfg_.head_dim, cfg_.rms_eps, rows * cfg_.kv_heads, cfg_.head_dim, kr,
              stream_);
    }
    part(step_part::rope_kv);
    rope_write_kv(t, d, kv_, l, cfg_.heads, qr, kr, v, freqs, pool_.data(), stream_);
    part(step_part::attention);
    attention(t, d, kv_, l, cfg_.heads, scale, qr, pool_.data(), s_.partial_buf.data(),
              s_.attn.data(), stream_);
    part(step_part::o);
    linear(s_.attn.data(), w.wo.data(), 0, s_.proj.data(), 0, rows, cfg_.q_dim(), h);
    if (cfg_.o_bias)
      add_bias(t, s_.proj.data(), w.bo.data(), rows, h, stream_);
    constexpr lora_proj o[] = {lora_proj::o};
    void* const o_out[] = {s_.proj.data()};
    part(step_part::lora);
    add_lora(d, l, o, s_.attn.data(), o_out);
    part(step_part::norm);
    add_rmsnorm(t, s_.residual.data(), s_.proj.data(), w.mlp_norm.data(), cfg_.rms_eps, rows, h,
                s_.h.data(), stream_);
    part(step_part::gate_up);
    linear(s_.h.data(), w.w_gate_up.data(), 0, s_.gate_up.data(), 0, rows, h, 2 * cfg_.intermediate);
    part(step_part::swiglu);
    swiglu(t, s_.gate_up.data(), rows, cfg_.intermediate, s_.mlp.data(), stream_);
    part(step_part::down);
    linear(s_.mlp.data(), w.w_down.data(), 0, s_.proj.data(), 0, rows, cfg_.intermediate, h);
  }
  part(step_part::head);
  add_rmsnorm(t, s_.residual.data(), s_.proj.data(), final_norm_.data(), cfg_.rms_eps, rows, h,
              s_.h.data(), stream_);
  // Only each sequence's last row reaches the LM head. A row per sequence
  // (a decode step) is each sequence's last already, in order.
  const void* last = s_.h.data();
  if (d.rows != d.seqs) {
    embedding_gather(t, s_.h.data(), reinterpret_cast<const std::int32_t*>(d.last_row), d.seqs, h,
                     s_.last.data(), stream_);
    last = s_.last.data();
  }
  head_logits(last, d.seqs, logits_.data());
  part(step_part::sample);
  if (d.adjust_indptr != nullptr) { // sampled from the adjusted logits; logits_ stay the model's
    adjust_logits(d, logits_.data(), cfg_.vocab, adjusted_logits_.data(), stream_);
    sample(d, adjusted_logits_.data(), cfg_.vocab, tokens_.data(), stream_);
  } else {
    sample(d, logits_.data(), cfg_.vocab, tokens_.data(), stream_);
  }
  part(step_part::end);
  TROUPE_CUDA_CHECK(cudaGetLastError());
}

void cuda_model::enqueue_row_logits(std::uint32_t first, std::uint32_t count, float* out) {
  if (count == 0)
    return;
  if (std::uint64_t{first} + count > step_rows_)
    throw cuda_error("cuda_model::enqueue_row_logits: rows " + std::to_string(first) + " to " +
                     std::to_string(std::uint64_t{first} + count) + " of a step of " + std::to_string(step_rows_));
  head_logits(s_.h.data() + std::uint64_t{first} * cfg_.hidden, count, out);
  TROUPE_CUDA_CHECK(cudaGetLastError());
}

void cuda_model::head_logits(const void* x, std::uint32_t rows, float* out) {
  const void* head = cfg_.tied_embeddings ? embed_.data() : lm_head_.data();
  linear(x, head, 0, out, 0, rows, cfg_.hidden, cfg_.vocab, 1, true);
}

void cuda_model::forward(const batch_plan& plan, std::span<std::int32_t> tokens) {
  if (tokens.size() < plan.seqs())
    throw cuda_error("cuda_model::forward: room for " + std::to_string(tokens.size()) +
                     " tokens, the plan has " + std::to_string(plan.seqs()) + " sequences");
  enqueue_forward(plan);
  if (plan.seqs() == 0)
    return;
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(tokens.data(), tokens_.data(), plan.seqs() * sizeof(std::int32_t),
                                    cudaMemcpyDeviceToHost, stream_));
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

} // namespace troupe::gpu::cuda
