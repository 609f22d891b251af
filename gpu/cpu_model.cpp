// cpu_model: Hugging Face LlamaForCausalLM's forward pass in fp32 over a
// batch of sequences, with every base projection one product over all rows
// (gpu/cpu_gemm: a row's numbers do not depend on the batch), unmerged LoRA
// per sequence and the KV cache in host pages.
#include "gpu/cpu_model.hpp"

#include "gpu/cpu_gemm.hpp"
#include "gpu/rope.hpp"
#include "gpu/sampling.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <string>

namespace troupe::gpu {

namespace {

using std::size_t;

// The [out, in] shape of each lora_target's projection.
struct proj_dims {
  size_t out = 0;
  size_t in = 0;
};

std::array<proj_dims, lora_target_count> projection_dims(const llama_config& c) {
  const size_t h = c.hidden_size;
  const size_t qd = size_t{c.num_heads} * c.head_dim;
  const size_t kvd = size_t{c.num_kv_heads} * c.head_dim;
  const size_t inter = c.intermediate_size;
  return {proj_dims{qd, h},     proj_dims{kvd, h},   proj_dims{kvd, h},  proj_dims{h, qd},
          proj_dims{inter, h}, proj_dims{inter, h}, proj_dims{h, inter}};
}

bool weights_ok(const llama_weights& w) {
  const auto& c = w.config;
  if (c.hidden_size == 0 || c.intermediate_size == 0 || c.num_heads == 0 || c.num_kv_heads == 0 ||
      c.head_dim == 0 || c.head_dim % 2 != 0 || c.rotary_dims() % 2 != 0 || c.rotary_dims() > c.head_dim ||
      c.vocab_size == 0 ||
      c.num_heads % c.num_kv_heads != 0 || w.layers.size() != c.num_layers)
    return false;
  const size_t h = c.hidden_size;
  const auto dims = projection_dims(c);
  auto sized = [](const std::vector<float>& v, proj_dims d) { return v.size() == d.out * d.in; };
  // A bias is there exactly where the config says, of its projection's outputs.
  auto bias_ok = [](const std::vector<float>& b, bool has, proj_dims d) { return b.size() == (has ? d.out : 0); };
  for (const auto& l : w.layers) {
    if (l.attn_norm.size() != h || l.mlp_norm.size() != h || !sized(l.q, dims[0]) ||
        !sized(l.k, dims[1]) || !sized(l.v, dims[2]) || !sized(l.o, dims[3]) ||
        !sized(l.gate, dims[4]) || !sized(l.up, dims[5]) || !sized(l.down, dims[6]) ||
        !bias_ok(l.q_bias, c.qkv_bias, dims[0]) || !bias_ok(l.k_bias, c.qkv_bias, dims[1]) ||
        !bias_ok(l.v_bias, c.qkv_bias, dims[2]) || !bias_ok(l.o_bias, c.o_bias, dims[3]) ||
        l.q_norm.size() != (c.qk_norm ? c.head_dim : 0) || l.k_norm.size() != (c.qk_norm ? c.head_dim : 0))
      return false;
  }
  const size_t vh = size_t{c.vocab_size} * h;
  return w.embed.size() == vh && w.final_norm.size() == h && (w.lm_head.empty() || w.lm_head.size() == vh);
}

bool adapter_ok(const lora_adapter& a, const llama_config& c) {
  bool any = false;
  for (bool t : a.targets)
    any = any || t;
  if (!any)
    return true;
  if (a.rank == 0 || a.layers.size() != c.num_layers)
    return false;
  const auto dims = projection_dims(c);
  for (const auto& layer : a.layers)
    for (size_t t = 0; t < lora_target_count; ++t)
      if (a.targets[t] && (layer[t].a.size() != size_t{a.rank} * dims[t].in ||
                           layer[t].b.size() != dims[t].out * a.rank))
        return false;
  return true;
}

// y[r] += b for each of `rows` rows of b.size() values; nothing when b is empty.
void add_bias(float* y, const std::vector<float>& b, size_t rows) {
  const size_t n = b.size();
  for (size_t r = 0; r < rows && n > 0; ++r)
    for (size_t i = 0; i < n; ++i)
      y[r * n + i] += b[i];
}

// y[i] = x[i] * rsqrt(mean(x^2) + eps) * w[i], row by row; y may be x.
void rms_norm(const float* x, const float* w, float* y, size_t rows, size_t h, float eps) {
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * h;
    float* yr = y + r * h;
    double ss = 0;
    for (size_t i = 0; i < h; ++i)
      ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(h) + eps));
    for (size_t i = 0; i < h; ++i)
      yr[i] = w[i] * (xr[i] * inv);
  }
}

} // namespace

struct cpu_model::impl {
  llama_weights w;
  llama_config c;
  std::uint64_t num_pages = 0;
  std::uint32_t page_tokens = 0;
  bool ok = false;
  std::array<proj_dims, lora_target_count> dims{};
  rope_table rope; // inv_freq: [rotary_dim / 2]
  std::vector<float> kv;       // [num_pages, layers, 2, page_tokens, kv_heads * head_dim]

  // Scratch, grown as needed and kept between passes.
  std::vector<float> x, h, q, k, v, att, g, u, tmp, cos, sin, scores, last;
  std::vector<size_t> row_off;

  size_t kvd() const { return size_t{c.num_kv_heads} * c.head_dim; }
  size_t qd() const { return size_t{c.num_heads} * c.head_dim; }

  // K (which = 0) or V (which = 1) of `layer` in `page`: [page_tokens, kvd].
  float* kv_block(std::uint32_t page, size_t layer, size_t which) {
    const size_t block = size_t{page_tokens} * kvd();
    return kv.data() + ((size_t{page} * c.num_layers + layer) * 2 + which) * block;
  }

  // A hidden cache packs hidden_size floats per token into the K and V
  // blocks of a layer (contiguous): hidden_tokens() tokens per page.
  size_t hidden_tokens() const { return c.hidden_size == 0 ? 0 : 2 * size_t{page_tokens} * kvd() / c.hidden_size; }
  bool hidden_saves() const { return hidden_tokens() > page_tokens; }

  // cos and sin of each rotary pair at `pos` (angle pos * inv[j] in fp32,
  // as HF computes it), times the table's scale: cr, sr [rotary_dim / 2].
  // `inv`: the table's frequencies for the pass (rope_table::for_length).
  void rope_angles(const std::vector<float>& inv, float pos, float* cr, float* sr) const {
    for (size_t j = 0; j < inv.size(); ++j) {
      const float angle = pos * inv[j];
      cr[j] = static_cast<float>(std::cos(static_cast<double>(angle))) * rope.scale;
      sr[j] = static_cast<float>(std::sin(static_cast<double>(angle))) * rope.scale;
    }
  }

  // HF's rotate_half over the leading rotary_dim elements of each of
  // `heads` heads at `p`: (a, b) -> (a cos - b sin, b cos + a sin) for the
  // pairs (j, j + rotary_dim / 2); the rest of a head passes through.
  void rotate(float* p, size_t heads, const float* cr, const float* sr) const {
    const size_t half = rope.inv_freq.size();
    for (size_t hh = 0; hh < heads; ++hh, p += c.head_dim) {
      for (size_t j = 0; j < half; ++j) {
        const float a = p[j];
        const float b = p[j + half];
        p[j] = a * cr[j] - b * sr[j];
        p[j + half] = b * cr[j] + a * sr[j];
      }
    }
  }
  float* hidden_slot(std::span<const std::uint32_t> pages, size_t layer, size_t pos) {
    const size_t per = hidden_tokens();
    return kv_block(pages[pos / per], layer, 0) + (pos % per) * c.hidden_size;
  }
  size_t tokens_per_page(const cpu_sequence& s) const { return s.hidden ? hidden_tokens() : page_tokens; }

  // Scratch for K and V recomputed from a hidden cache: [ctx, kvd] each.
  std::vector<float> hk, hv, hh, hcs; // hcs: cos and sin of one position
  void recompute_kv(const cpu_sequence& seq, size_t layer);

  std::string refusal(const cpu_sequence& s) const;
  bool batch_ok(std::span<const cpu_sequence> batch) const;
  void add_lora(std::span<const cpu_sequence> batch, size_t layer, lora_target t, const float* in,
                float* out);
  void attention(std::span<const cpu_sequence> batch, size_t layer);
  std::vector<float> forward(std::span<const cpu_sequence> batch,
                             const std::function<void(std::size_t)>& before_layer);
  // The LM head on `rows` final hidden rows: [rows, vocab].
  std::vector<float> head(const float* normed, size_t rows) const;
};

std::string cpu_model::impl::refusal(const cpu_sequence& s) const {
  if (!ok)
    return "the model's weights do not match its config";
  if (s.tokens.empty())
    return "no new tokens";
  for (auto t : s.tokens)
    if (t < 0 || static_cast<std::uint64_t>(t) >= c.vocab_size)
      return "token " + std::to_string(t) + " is outside the vocabulary of " + std::to_string(c.vocab_size);
  if (s.hidden && !hidden_saves())
    return "a hidden cache, which this model's KV heads make no smaller than K and V";
  const std::uint64_t per = tokens_per_page(s);
  const std::uint64_t need = std::uint64_t{s.start_pos} + s.tokens.size();
  const std::uint64_t pages_needed = (need + per - 1) / per;
  if (s.pages.size() < pages_needed)
    return std::to_string(s.pages.size()) + " cache pages for " + std::to_string(need) + " tokens, which need "
           + std::to_string(pages_needed);
  for (size_t i = 0; i < pages_needed; ++i)
    if (s.pages[i] >= num_pages)
      return "cache page " + std::to_string(s.pages[i]) + " is outside the pool of " + std::to_string(num_pages);
  if (s.adapter != nullptr && !adapter_ok(*s.adapter, c))
    return "an adapter whose matrices do not fit the model";
  return {};
}

bool cpu_model::impl::batch_ok(std::span<const cpu_sequence> batch) const {
  return std::all_of(batch.begin(), batch.end(), [&](const cpu_sequence& s) { return refusal(s).empty(); });
}

// out[rows of s] += scale * (in[rows of s] A^T) B^T for each sequence whose adapter targets t.
void cpu_model::impl::add_lora(std::span<const cpu_sequence> batch, size_t layer, lora_target t,
                               const float* in, float* out) {
  const auto ti = static_cast<size_t>(t);
  const auto d = dims[ti];
  for (size_t s = 0; s < batch.size(); ++s) {
    const lora_adapter* a = batch[s].adapter;
    if (a == nullptr || !a->targets[ti])
      continue;
    const auto& m = a->layers[layer][ti];
    const size_t n = batch[s].tokens.size();
    const size_t r = a->rank;
    if (tmp.size() < n * r)
      tmp.resize(n * r);
    gemm_xwt(in + row_off[s] * d.in, m.a.data(), tmp.data(), n, r, d.in, 1.0f, 0.0f);
    gemm_xwt(tmp.data(), m.b.data(), out + row_off[s] * d.out, n, d.out, r, a->scale, 1.0f);
  }
}

// att[row] = softmax(q K^T / sqrt(hd)) V over positions 0..pos of the row's
// sequence; with a sliding window, over the last sliding_window of them.
void cpu_model::impl::attention(std::span<const cpu_sequence> batch, size_t layer) {
  const size_t hd = c.head_dim;
  const size_t kd = kvd();
  const size_t qdim = qd();
  const size_t group = c.num_heads / c.num_kv_heads;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  const gemm_kernel kernel = best_gemm_kernel(); // either gives the same scores
  for (size_t s = 0; s < batch.size(); ++s) {
    const auto& seq = batch[s];
    const size_t n = seq.tokens.size();
    const size_t ctx = size_t{seq.start_pos} + n;
    if (scores.size() < ctx)
      scores.resize(ctx);
    if (seq.hidden)
      recompute_kv(seq, layer);
    for (size_t i = 0; i < n; ++i) {
      const size_t row = row_off[s] + i;
      const size_t len = size_t{seq.start_pos} + i + 1;
      const size_t first = c.sliding_window > 0 && len > c.sliding_window ? len - c.sliding_window : 0;
      for (size_t head = 0; head < c.num_heads; ++head) {
        const size_t kvh = head / group;
        const float* qh = q.data() + row * qdim + head * hd;
        float mx = -std::numeric_limits<float>::infinity();
        for (size_t t = first; t < len; ++t) {
          const float* kt = seq.hidden ? hk.data() + t * kd + kvh * hd
                                       : kv_block(seq.pages[t / page_tokens], layer, 0) +
                                           (t % page_tokens) * kd + kvh * hd;
          scores[t] = dot(qh, kt, hd, kernel) * scale;
          mx = std::max(mx, scores[t]);
        }
        float sum = 0;
        for (size_t t = first; t < len; ++t) {
          scores[t] = std::exp(scores[t] - mx);
          sum += scores[t];
        }
        const float inv = 1.0f / sum;
        float* oh = att.data() + row * qdim + head * hd;
        std::fill(oh, oh + hd, 0.0f);
        for (size_t t = first; t < len; ++t) {
          const float* vt = seq.hidden ? hv.data() + t * kd + kvh * hd
                                       : kv_block(seq.pages[t / page_tokens], layer, 1) +
                                           (t % page_tokens) * kd + kvh * hd;
          axpy(oh, vt, scores[t] * inv, hd, kernel);
        }
      }
    }
  }
}

// K and V of every position of a hidden-cache sequence, from its stored
// hidden states: the same projections (and LoRA) as when K and V are cached,
// and rotary embeddings at each token's own position.
void cpu_model::impl::recompute_kv(const cpu_sequence& seq, size_t layer) {
  const size_t hid = c.hidden_size;
  const size_t kd = kvd();
  const size_t ctx = size_t{seq.start_pos} + seq.tokens.size();
  hh.resize(ctx * hid);
  hk.resize(ctx * kd);
  hv.resize(ctx * kd);
  for (size_t t = 0; t < ctx; ++t)
    std::copy_n(hidden_slot(seq.pages, layer, t), hid, hh.data() + t * hid);
  const auto& lw = w.layers[layer];
  gemm_xwt(hh.data(), lw.k.data(), hk.data(), ctx, kd, hid, 1.0f, 0.0f);
  gemm_xwt(hh.data(), lw.v.data(), hv.data(), ctx, kd, hid, 1.0f, 0.0f);
  add_bias(hk.data(), lw.k_bias, ctx);
  add_bias(hv.data(), lw.v_bias, ctx);
  if (const lora_adapter* a = seq.adapter) {
    for (auto [target, out] : {std::pair{lora_target::k, &hk}, std::pair{lora_target::v, &hv}}) {
      const auto ti = static_cast<size_t>(target);
      if (!a->targets[ti])
        continue;
      const auto& m = a->layers[layer][ti];
      if (tmp.size() < ctx * a->rank)
        tmp.resize(ctx * a->rank);
      gemm_xwt(hh.data(), m.a.data(), tmp.data(), ctx, a->rank, hid, 1.0f, 0.0f);
      gemm_xwt(tmp.data(), m.b.data(), out->data(), ctx, kd, a->rank, a->scale, 1.0f);
    }
  }
  if (c.qk_norm)
    rms_norm(hk.data(), lw.k_norm.data(), hk.data(), ctx * c.num_kv_heads, c.head_dim, c.rms_norm_eps);
  const size_t half = rope.inv_freq.size();
  hcs.resize(2 * half);
  const auto& inv = rope.for_length(ctx);
  for (size_t t = 0; t < ctx; ++t) {
    rope_angles(inv, static_cast<float>(t), hcs.data(), hcs.data() + half);
    rotate(hk.data() + t * kd, c.num_kv_heads, hcs.data(), hcs.data() + half);
  }
}

std::vector<float> cpu_model::impl::forward(std::span<const cpu_sequence> batch,
                                            const std::function<void(std::size_t)>& before_layer) {
  if (batch.empty() || !batch_ok(batch))
    return {};
  const size_t hid = c.hidden_size;
  const size_t half = rope.inv_freq.size();
  const size_t kd = kvd();
  const size_t qdim = qd();
  const size_t inter = c.intermediate_size;
  const size_t nb = batch.size();

  row_off.assign(nb + 1, 0);
  for (size_t s = 0; s < nb; ++s)
    row_off[s + 1] = row_off[s] + batch[s].tokens.size();
  const size_t rows = row_off[nb];

  x.resize(rows * hid);
  h.resize(rows * hid);
  q.resize(rows * qdim);
  k.resize(rows * kd);
  v.resize(rows * kd);
  att.resize(rows * qdim);
  g.resize(rows * inter);
  u.resize(rows * inter);
  cos.resize(rows * half);
  sin.resize(rows * half);

  // Embeddings and each row's rotary angles, as HF computes them in fp32.
  for (size_t s = 0; s < nb; ++s) {
    for (size_t i = 0; i < batch[s].tokens.size(); ++i) {
      const size_t row = row_off[s] + i;
      const float* e = w.embed.data() + static_cast<size_t>(batch[s].tokens[i]) * hid;
      std::copy(e, e + hid, x.data() + row * hid);
      // Hugging Face's choice for the pass: the sequence's length after it.
      rope_angles(rope.for_length(size_t{batch[s].start_pos} + batch[s].tokens.size()),
                  static_cast<float>(size_t{batch[s].start_pos} + i), cos.data() + row * half,
                  sin.data() + row * half);
    }
  }

  for (size_t l = 0; l < c.num_layers; ++l) {
    if (before_layer)
      before_layer(l);
    const auto& lw = w.layers[l];
    rms_norm(x.data(), lw.attn_norm.data(), h.data(), rows, hid, c.rms_norm_eps);
    gemm_xwt(h.data(), lw.q.data(), q.data(), rows, qdim, hid, 1.0f, 0.0f);
    gemm_xwt(h.data(), lw.k.data(), k.data(), rows, kd, hid, 1.0f, 0.0f);
    gemm_xwt(h.data(), lw.v.data(), v.data(), rows, kd, hid, 1.0f, 0.0f);
    add_bias(q.data(), lw.q_bias, rows);
    add_bias(k.data(), lw.k_bias, rows);
    add_bias(v.data(), lw.v_bias, rows);
    add_lora(batch, l, lora_target::q, h.data(), q.data());
    add_lora(batch, l, lora_target::k, h.data(), k.data());
    add_lora(batch, l, lora_target::v, h.data(), v.data());
    if (c.qk_norm) { // each head of q and k on its own, in place
      rms_norm(q.data(), lw.q_norm.data(), q.data(), rows * c.num_heads, c.head_dim, c.rms_norm_eps);
      rms_norm(k.data(), lw.k_norm.data(), k.data(), rows * c.num_kv_heads, c.head_dim, c.rms_norm_eps);
    }

    for (size_t s = 0; s < nb; ++s) {
      const auto& seq = batch[s];
      for (size_t i = 0; i < seq.tokens.size(); ++i) {
        const size_t row = row_off[s] + i;
        rotate(q.data() + row * qdim, c.num_heads, cos.data() + row * half, sin.data() + row * half);
        rotate(k.data() + row * kd, c.num_kv_heads, cos.data() + row * half, sin.data() + row * half);
        const size_t pos = size_t{seq.start_pos} + i;
        if (seq.hidden) {
          // The normalised input of the QKV projection; K and V are
          // recomputed from it in attention().
          std::copy_n(h.data() + row * hid, hid, hidden_slot(seq.pages, l, pos));
          continue;
        }
        const size_t slot = (pos % page_tokens) * kd;
        const std::uint32_t page = seq.pages[pos / page_tokens];
        std::copy_n(k.data() + row * kd, kd, kv_block(page, l, 0) + slot);
        std::copy_n(v.data() + row * kd, kd, kv_block(page, l, 1) + slot);
      }
    }
    attention(batch, l);

    // x += o(att); h is free again, so it holds the projection.
    gemm_xwt(att.data(), lw.o.data(), h.data(), rows, hid, qdim, 1.0f, 0.0f);
    add_bias(h.data(), lw.o_bias, rows);
    add_lora(batch, l, lora_target::o, att.data(), h.data());
    for (size_t i = 0; i < rows * hid; ++i)
      x[i] += h[i];

    rms_norm(x.data(), lw.mlp_norm.data(), h.data(), rows, hid, c.rms_norm_eps);
    gemm_xwt(h.data(), lw.gate.data(), g.data(), rows, inter, hid, 1.0f, 0.0f);
    gemm_xwt(h.data(), lw.up.data(), u.data(), rows, inter, hid, 1.0f, 0.0f);
    add_lora(batch, l, lora_target::gate, h.data(), g.data());
    add_lora(batch, l, lora_target::up, h.data(), u.data());
    for (size_t i = 0; i < rows * inter; ++i)
      g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    gemm_xwt(g.data(), lw.down.data(), h.data(), rows, hid, inter, 1.0f, 0.0f);
    add_lora(batch, l, lora_target::down, g.data(), h.data());
    for (size_t i = 0; i < rows * hid; ++i)
      x[i] += h[i];
  }

  // Final norm and LM head on each sequence's last new token; every new
  // token's final norm kept where a sequence asks.
  last.resize(nb * hid);
  for (size_t s = 0; s < nb; ++s) {
    std::copy(x.data() + (row_off[s + 1] - 1) * hid, x.data() + row_off[s + 1] * hid, h.data() + s * hid);
    if (auto* keep = batch[s].final_hidden) {
      const size_t n = row_off[s + 1] - row_off[s];
      keep->resize(n * hid);
      rms_norm(x.data() + row_off[s] * hid, w.final_norm.data(), keep->data(), n, hid, c.rms_norm_eps);
    }
  }
  rms_norm(h.data(), w.final_norm.data(), last.data(), nb, hid, c.rms_norm_eps);
  return head(last.data(), nb);
}

std::vector<float> cpu_model::impl::head(const float* normed, size_t rows) const {
  const float* lm = w.lm_head.empty() ? w.embed.data() : w.lm_head.data();
  std::vector<float> logits(rows * c.vocab_size);
  gemm_xwt(normed, lm, logits.data(), rows, c.vocab_size, c.hidden_size, 1.0f, 0.0f);
  return logits;
}

cpu_model::cpu_model(llama_weights weights, std::uint64_t num_pages, std::uint32_t page_tokens)
    : impl_(std::make_shared<impl>()) {
  auto& m = *impl_;
  m.w = std::move(weights);
  m.c = m.w.config;
  m.num_pages = num_pages;
  m.page_tokens = page_tokens;
  m.ok = page_tokens > 0 && weights_ok(m.w);
  if (!m.ok)
    return;
  m.dims = projection_dims(m.c);
  try {
    m.rope = rope_for(m.c);
  } catch (const std::invalid_argument&) { // longrope factors that do not fit the rotary pairs
    m.ok = false;
    return;
  }
  m.kv.assign(num_pages * m.c.num_layers * 2 * page_tokens * m.kvd(), 0.0f);
}

std::vector<float> cpu_model::head_logits(std::span<const float> final_hidden) const {
  const auto& m = *impl_;
  if (!m.ok || m.c.hidden_size == 0 || final_hidden.size() % m.c.hidden_size != 0)
    return {};
  return m.head(final_hidden.data(), final_hidden.size() / m.c.hidden_size);
}

std::vector<token_logprobs> cpu_model::prompt_logprobs(std::span<const float> final_hidden,
                                                       std::span<const std::int32_t> tokens,
                                                       std::uint32_t top) const {
  const std::size_t hid = impl_->c.hidden_size;
  const auto vocab = static_cast<std::size_t>(impl_->c.vocab_size);
  if (hid == 0 || vocab == 0 || final_hidden.size() != tokens.size() * hid)
    return {};
  std::vector<float> logits;
  return prompt_logprobs_of(tokens, vocab, prompt_logits_bytes / (vocab * sizeof(float)), top,
                            [&](std::size_t first, std::size_t rows) {
                              logits = head_logits(final_hidden.subspan(first * hid, rows * hid));
                              return std::span<const float>(logits);
                            });
}

std::string cpu_model::refusal(const cpu_sequence& seq) const {
  return impl_->refusal(seq);
}

std::vector<float> cpu_model::forward(std::span<const cpu_sequence> batch) {
  return impl_->forward(batch, {});
}

std::vector<float> cpu_model::forward(std::span<const cpu_sequence> batch,
                                      const std::function<void(std::size_t)>& before_layer) {
  return impl_->forward(batch, before_layer);
}

std::uint64_t cpu_model::page_floats() const noexcept {
  const auto& m = *impl_;
  return std::uint64_t{m.c.num_layers} * 2 * m.page_tokens * m.kvd();
}

bool cpu_model::read_page(std::uint32_t page, std::span<float> out) const {
  // Pages are contiguous in the store: [layers, 2, page_tokens, kvd] each.
  const auto n = page_floats();
  if (page >= impl_->num_pages || out.size() != n)
    return false;
  std::copy_n(impl_->kv.data() + page * n, n, out.data());
  return true;
}

bool cpu_model::write_page(std::uint32_t page, std::span<const float> in) {
  const auto n = page_floats();
  if (page >= impl_->num_pages || in.size() != n)
    return false;
  std::copy_n(in.data(), n, impl_->kv.data() + page * n);
  return true;
}

std::uint64_t cpu_model::layer_floats() const noexcept {
  return 2 * std::uint64_t{impl_->page_tokens} * impl_->kvd();
}

bool cpu_model::write_page_layer(std::uint32_t page, std::size_t layer, std::span<const float> in) {
  const auto n = layer_floats();
  if (page >= impl_->num_pages || layer >= impl_->c.num_layers || in.size() != n)
    return false;
  // [layers, 2, page_tokens, kvd] per page: a layer's K and V are adjacent.
  std::copy_n(in.data(), n, impl_->kv.data() + (std::uint64_t{page} * impl_->c.num_layers + layer) * n);
  return true;
}

const llama_config& cpu_model::config() const noexcept {
  return impl_->c;
}

std::uint32_t cpu_model::page_tokens() const noexcept {
  return impl_->page_tokens;
}

std::uint32_t cpu_model::hidden_page_tokens() const noexcept {
  return static_cast<std::uint32_t>(impl_->hidden_tokens());
}

bool cpu_model::hidden_saves() const noexcept {
  return impl_->hidden_saves();
}

std::uint64_t cpu_model::num_pages() const noexcept {
  return impl_->num_pages;
}

} // namespace troupe::gpu
