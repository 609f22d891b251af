// The attention references: K and V of one kv head gathered from the pages
// into fp32 once per item (or sequence), then per row and head the same
// online softmax the kernels run, or the plain two-pass one.
#include "gpu/cuda/reference_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace troupe::gpu::cuda {

namespace {

constexpr float neg_inf = -std::numeric_limits<float>::infinity();

// bits -> float for every 16-bit pattern of `t`.
const float* bits_table(dtype t) {
  static const std::vector<float> tables[2] = {
    [] {
      std::vector<float> v(65536);
      for (std::uint32_t b = 0; b < 65536; ++b)
        v[b] = f16_bits_to_f32(static_cast<std::uint16_t>(b));
      return v;
    }(),
    [] {
      std::vector<float> v(65536);
      for (std::uint32_t b = 0; b < 65536; ++b)
        v[b] = bf16_bits_to_f32(static_cast<std::uint16_t>(b));
      return v;
    }(),
  };
  return tables[t == dtype::f16 ? 0 : 1].data();
}

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument(what);
}

std::uint64_t pool_pages(const kv_layout& kv, std::size_t pool_elems) {
  if (kv.page_elems() == 0)
    fail("kv_layout has pages of 0 elements");
  return pool_elems / kv.page_elems();
}

// Checks what every attention reference reads.
void check_attention(const batch_plan& plan, const kv_layout& kv, std::uint32_t layer,
                     std::uint32_t heads, std::span<const std::uint16_t> q,
                     std::span<const std::uint16_t> pool) {
  if (kv.head_dim == 0 || kv.num_kv_heads == 0 || kv.page_tokens == 0)
    fail("attention reference: kv_layout with a zero dimension");
  if (layer >= kv.num_layers)
    fail("attention reference: layer " + std::to_string(layer) + " of " +
         std::to_string(kv.num_layers));
  if (heads == 0 || heads % kv.num_kv_heads != 0)
    fail("attention reference: " + std::to_string(heads) + " heads over " +
         std::to_string(kv.num_kv_heads) + " kv heads");
  const std::uint64_t rows = plan.rows();
  if (q.size() < rows * heads * kv.head_dim)
    fail("attention reference: q holds " + std::to_string(q.size()) + " elements, the plan needs " +
         std::to_string(rows * heads * kv.head_dim));
  if (plan.positions.size() != rows || plan.kv_indptr.size() != plan.seqs() + 1 ||
      plan.kv_len.size() != plan.seqs() || plan.qo_indptr.size() != plan.seqs() + 1)
    fail("attention reference: the plan's arrays disagree on rows and sequences");
  const std::uint64_t pages = pool_pages(kv, pool.size());
  for (auto p : plan.kv_pages)
    if (p >= pages)
      fail("attention reference: page " + std::to_string(p) + " outside the pool of " +
           std::to_string(pages));
  for (std::uint32_t s = 0; s < plan.seqs(); ++s) {
    const std::uint64_t cap = std::uint64_t{plan.kv_indptr[s + 1] - plan.kv_indptr[s]} * kv.page_tokens;
    if (plan.kv_len[s] > cap)
      fail("attention reference: sequence " + std::to_string(s) + " has " +
           std::to_string(plan.kv_len[s]) + " positions in " + std::to_string(cap) + " slots");
    for (std::uint32_t r = plan.qo_indptr[s]; r < plan.qo_indptr[s + 1]; ++r)
      if (plan.positions[r] < 0 || static_cast<std::uint32_t>(plan.positions[r]) >= plan.kv_len[s])
        fail("attention reference: row " + std::to_string(r) + " at position " +
             std::to_string(plan.positions[r]) + " of " + std::to_string(plan.kv_len[s]));
  }
  for (const auto& it : plan.items)
    if (it.seq >= plan.seqs() || it.q_begin >= it.q_end || it.q_end > rows ||
        it.kv_begin > it.kv_end || it.kv_end > plan.kv_len[it.seq])
      fail("attention reference: an item outside its sequence");
}

// K (which 0) or V (1) of kv head `kvh` at positions [a, b) of sequence
// `seq`: [b - a, head_dim] fp32.
std::vector<float> gather(const float* table, const batch_plan& plan, const kv_layout& kv,
                          std::uint32_t layer, std::span<const std::uint16_t> pool,
                          std::uint32_t seq, std::uint32_t kvh, std::uint32_t which,
                          std::uint32_t a, std::uint32_t b) {
  const std::uint32_t hd = kv.head_dim;
  std::vector<float> out(std::size_t{b - a} * hd);
  for (std::uint32_t t = a; t < b; ++t) {
    const std::uint32_t page = plan.kv_pages[plan.kv_indptr[seq] + t / kv.page_tokens];
    const std::uint16_t* src =
      pool.data() + kv.offset(page, layer, which, t % kv.page_tokens) + std::size_t{kvh} * hd;
    float* dst = out.data() + std::size_t{t - a} * hd;
    for (std::uint32_t d = 0; d < hd; ++d)
      dst[d] = table[src[d]];
  }
  return out;
}

// Query head `h` of row `r`, fp32.
std::vector<float> query(const float* table, std::span<const std::uint16_t> q, std::uint32_t r,
                         std::uint32_t heads, std::uint32_t h, std::uint32_t hd) {
  std::vector<float> out(hd);
  const std::uint16_t* src = q.data() + (std::size_t{r} * heads + h) * hd;
  for (std::uint32_t d = 0; d < hd; ++d)
    out[d] = table[src[d]];
  return out;
}

float dot(const float* a, const float* b, std::uint32_t n) {
  float s = 0.0f;
  for (std::uint32_t i = 0; i < n; ++i)
    s += a[i] * b[i];
  return s;
}

std::vector<std::uint16_t> round_all(dtype t, const std::vector<float>& f) {
  std::vector<std::uint16_t> out(f.size());
  for (std::size_t i = 0; i < f.size(); ++i)
    out[i] = to_bits(t, f[i]);
  return out;
}

// The item's partial, without re-checking the arguments.
attention_partial item_partial(const float* table, const batch_plan& plan, const kv_layout& kv,
                               std::uint32_t layer, std::uint32_t heads, float scale,
                               std::span<const std::uint16_t> q,
                               std::span<const std::uint16_t> pool, const attention_item& it) {
  const std::uint32_t hd = kv.head_dim;
  const std::uint32_t group = heads / kv.num_kv_heads;
  attention_partial part;
  part.rows = it.q_end - it.q_begin;
  part.heads = heads;
  part.head_dim = hd;
  part.o.assign(std::size_t{part.rows} * heads * hd, 0.0f);
  part.m.assign(std::size_t{part.rows} * heads, neg_inf);
  part.l.assign(std::size_t{part.rows} * heads, 0.0f);
  std::vector<float> acc(hd);
  std::vector<float> s(attention_kv_tile);
  for (std::uint32_t kvh = 0; kvh < kv.num_kv_heads; ++kvh) {
    const auto k = gather(table, plan, kv, layer, pool, it.seq, kvh, 0, it.kv_begin, it.kv_end);
    const auto v = gather(table, plan, kv, layer, pool, it.seq, kvh, 1, it.kv_begin, it.kv_end);
    for (std::uint32_t r = 0; r < part.rows; ++r) {
      const auto pos = static_cast<std::uint32_t>(plan.positions[it.q_begin + r]);
      const std::uint32_t end = std::min(it.kv_end, pos + 1);
      // The first position the row sees: its sliding window's.
      const std::uint32_t window = plan.sliding_window;
      const std::uint32_t first = window > 0 && pos + 1 > window ? pos + 1 - window : 0;
      for (std::uint32_t g = 0; g < group; ++g) {
        const std::uint32_t h = kvh * group + g;
        const auto qh = query(table, q, it.q_begin + r, heads, h, hd);
        float m = neg_inf;
        float l = 0.0f;
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (std::uint32_t t0 = it.kv_begin; t0 < end; t0 += attention_kv_tile) {
          const std::uint32_t n = std::min(end - t0, attention_kv_tile);
          float tile_max = neg_inf;
          for (std::uint32_t j = 0; j < n; ++j) {
            s[j] = t0 + j < first ? neg_inf
                                  : dot(qh.data(), k.data() + std::size_t{t0 + j - it.kv_begin} * hd, hd) * scale;
            tile_max = std::max(tile_max, s[j]);
          }
          if (tile_max == neg_inf)
            continue; // all before the window: the kernels' tile changes nothing
          const float m_new = std::max(m, tile_max);
          const float alpha = std::exp(m - m_new); // 0 while m is -inf
          l *= alpha;
          for (auto& a : acc)
            a *= alpha;
          for (std::uint32_t j = 0; j < n; ++j) {
            const float p = std::exp(s[j] - m_new);
            l += p;
            const float* vt = v.data() + std::size_t{t0 + j - it.kv_begin} * hd;
            for (std::uint32_t d = 0; d < hd; ++d)
              acc[d] += p * vt[d];
          }
          m = m_new;
        }
        const std::size_t at = std::size_t{r} * heads + h;
        part.m[at] = m;
        part.l[at] = l;
        for (std::uint32_t d = 0; d < hd; ++d)
          part.o[at * hd + d] = l > 0.0f ? acc[d] / l : 0.0f;
      }
    }
  }
  return part;
}

} // namespace

void write_kv_reference(dtype, const batch_plan& plan, const kv_layout& kv, std::uint32_t layer,
                        std::span<const std::uint16_t> k, std::span<const std::uint16_t> v,
                        std::span<std::uint16_t> pool) {
  const std::uint32_t kvd = kv.kv_dim();
  const std::uint64_t rows = plan.rows();
  if (layer >= kv.num_layers)
    fail("write_kv reference: layer " + std::to_string(layer) + " of " +
         std::to_string(kv.num_layers));
  if (k.size() < rows * kvd || v.size() < rows * kvd)
    fail("write_kv reference: K or V shorter than " + std::to_string(rows) + " rows of " +
         std::to_string(kvd));
  if (plan.row_page.size() != rows || plan.row_slot.size() != rows)
    fail("write_kv reference: the plan's row pages and slots disagree with its rows");
  const std::uint64_t pages = pool_pages(kv, pool.size());
  for (std::uint64_t r = 0; r < rows; ++r) {
    if (plan.row_page[r] >= pages || plan.row_slot[r] >= kv.page_tokens)
      fail("write_kv reference: row " + std::to_string(r) + " goes to page " +
           std::to_string(plan.row_page[r]) + " slot " + std::to_string(plan.row_slot[r]) +
           ", outside the pool");
    std::copy_n(k.data() + r * kvd, kvd,
                pool.data() + kv.offset(plan.row_page[r], layer, 0, plan.row_slot[r]));
    std::copy_n(v.data() + r * kvd, kvd,
                pool.data() + kv.offset(plan.row_page[r], layer, 1, plan.row_slot[r]));
  }
}

attention_partial attention_item_reference(dtype t, const batch_plan& plan, const kv_layout& kv,
                                           std::uint32_t layer, std::uint32_t heads, float scale,
                                           std::span<const std::uint16_t> q,
                                           std::span<const std::uint16_t> pool,
                                           std::uint32_t item) {
  check_attention(plan, kv, layer, heads, q, pool);
  if (item >= plan.items.size())
    fail("attention_item_reference: item " + std::to_string(item) + " of " +
         std::to_string(plan.items.size()));
  return item_partial(bits_table(t), plan, kv, layer, heads, scale, q, pool, plan.items[item]);
}

std::vector<float> merge_attention_partials(std::span<const attention_partial> parts) {
  if (parts.empty())
    fail("merge_attention_partials: no partials");
  const auto& first = parts.front();
  for (const auto& p : parts)
    if (p.rows != first.rows || p.heads != first.heads || p.head_dim != first.head_dim ||
        p.o.size() != first.o.size() || p.m.size() != first.m.size() ||
        p.l.size() != first.l.size())
      fail("merge_attention_partials: partials of different shapes");
  const std::uint32_t hd = first.head_dim;
  std::vector<float> out(first.o.size(), 0.0f);
  std::vector<float> w(parts.size());
  for (std::size_t at = 0; at < first.m.size(); ++at) {
    float mx = neg_inf;
    for (const auto& p : parts)
      mx = std::max(mx, p.m[at]);
    float total = 0.0f;
    for (std::size_t k = 0; k < parts.size(); ++k) {
      w[k] = parts[k].l[at] > 0.0f ? parts[k].l[at] * std::exp(parts[k].m[at] - mx) : 0.0f;
      total += w[k];
    }
    if (total <= 0.0f)
      continue;
    for (std::uint32_t d = 0; d < hd; ++d) {
      float acc = 0.0f;
      for (std::size_t k = 0; k < parts.size(); ++k)
        acc += w[k] * parts[k].o[at * hd + d];
      out[at * hd + d] = acc / total;
    }
  }
  return out;
}

std::vector<float> attention_reference_f32(dtype t, const batch_plan& plan, const kv_layout& kv,
                                           std::uint32_t layer, std::uint32_t heads, float scale,
                                           std::span<const std::uint16_t> q,
                                           std::span<const std::uint16_t> pool) {
  check_attention(plan, kv, layer, heads, q, pool);
  if (plan.tile_indptr.empty() || plan.tile_indptr.back() != plan.items.size())
    fail("attention reference: tile_indptr does not end at the plan's items");
  const float* table = bits_table(t);
  const std::size_t width = std::size_t{heads} * kv.head_dim;
  std::vector<float> out(plan.rows() * width, 0.0f);
  std::vector<attention_partial> parts;
  for (std::size_t tile = 0; tile + 1 < plan.tile_indptr.size(); ++tile) {
    parts.clear();
    for (std::uint32_t i = plan.tile_indptr[tile]; i < plan.tile_indptr[tile + 1]; ++i)
      parts.push_back(item_partial(table, plan, kv, layer, heads, scale, q, pool, plan.items[i]));
    if (parts.empty())
      continue;
    const std::vector<float> merged =
      parts.size() == 1 ? parts.front().o : merge_attention_partials(parts);
    const std::uint32_t q_begin = plan.items[plan.tile_indptr[tile]].q_begin;
    std::copy(merged.begin(), merged.end(), out.begin() + q_begin * width);
  }
  return out;
}

std::vector<std::uint16_t> attention_reference(dtype t, const batch_plan& plan,
                                               const kv_layout& kv, std::uint32_t layer,
                                               std::uint32_t heads, float scale,
                                               std::span<const std::uint16_t> q,
                                               std::span<const std::uint16_t> pool) {
  return round_all(t, attention_reference_f32(t, plan, kv, layer, heads, scale, q, pool));
}

std::vector<float> attention_unsplit_reference_f32(dtype t, const batch_plan& plan,
                                                   const kv_layout& kv, std::uint32_t layer,
                                                   std::uint32_t heads, float scale,
                                                   std::span<const std::uint16_t> q,
                                                   std::span<const std::uint16_t> pool) {
  check_attention(plan, kv, layer, heads, q, pool);
  const float* table = bits_table(t);
  const std::uint32_t hd = kv.head_dim;
  const std::uint32_t group = heads / kv.num_kv_heads;
  const std::size_t width = std::size_t{heads} * hd;
  std::vector<float> out(plan.rows() * width, 0.0f);
  std::vector<float> s;
  for (std::uint32_t seq = 0; seq < plan.seqs(); ++seq) {
    s.resize(plan.kv_len[seq]);
    for (std::uint32_t kvh = 0; kvh < kv.num_kv_heads; ++kvh) {
      const auto k = gather(table, plan, kv, layer, pool, seq, kvh, 0, 0, plan.kv_len[seq]);
      const auto v = gather(table, plan, kv, layer, pool, seq, kvh, 1, 0, plan.kv_len[seq]);
      for (std::uint32_t r = plan.qo_indptr[seq]; r < plan.qo_indptr[seq + 1]; ++r) {
        const auto len = static_cast<std::uint32_t>(plan.positions[r]) + 1;
        const std::uint32_t window = plan.sliding_window;
        const std::uint32_t first = window > 0 && len > window ? len - window : 0;
        for (std::uint32_t g = 0; g < group; ++g) {
          const std::uint32_t h = kvh * group + g;
          const auto qh = query(table, q, r, heads, h, hd);
          float mx = neg_inf;
          for (std::uint32_t j = first; j < len; ++j) {
            s[j] = dot(qh.data(), k.data() + std::size_t{j} * hd, hd) * scale;
            mx = std::max(mx, s[j]);
          }
          float sum = 0.0f;
          for (std::uint32_t j = first; j < len; ++j) {
            s[j] = std::exp(s[j] - mx);
            sum += s[j];
          }
          float* o = out.data() + r * width + std::size_t{h} * hd;
          for (std::uint32_t j = first; j < len; ++j) {
            const float p = s[j] / sum;
            const float* vt = v.data() + std::size_t{j} * hd;
            for (std::uint32_t d = 0; d < hd; ++d)
              o[d] += p * vt[d];
          }
        }
      }
    }
  }
  return out;
}

std::vector<std::uint16_t> attention_unsplit_reference(dtype t, const batch_plan& plan,
                                                       const kv_layout& kv, std::uint32_t layer,
                                                       std::uint32_t heads, float scale,
                                                       std::span<const std::uint16_t> q,
                                                       std::span<const std::uint16_t> pool) {
  return round_all(t, attention_unsplit_reference_f32(t, plan, kv, layer, heads, scale, q, pool));
}

} // namespace troupe::gpu::cuda
