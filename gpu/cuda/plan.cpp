// plan_batch and the page layouts: checks each entry, groups sequences by
// adapter, flattens rows, page tables and LoRA slots, and cuts attention
// into tiles and items.
#include "gpu/cuda/plan.hpp"

#include <algorithm>
#include <unordered_map>

namespace troupe::gpu::cuda {

lora_layout lora_layout::make(const kv_layout& kv, std::uint32_t hidden,
                              std::uint32_t q_dim) noexcept {
  lora_layout l;
  l.num_layers = kv.num_layers;
  l.hidden = hidden;
  l.q_dim = q_dim;
  l.kv_dim = kv.kv_dim();
  l.row_width = std::max({hidden, q_dim, l.kv_dim});
  l.page_elems = kv.page_elems();
  l.rows_per_page = l.row_width == 0 ? 0 : static_cast<std::uint32_t>(l.page_elems / l.row_width);
  return l;
}

std::uint32_t lora_layout::in_dim(lora_proj p) const noexcept {
  return p == lora_proj::o ? q_dim : hidden;
}

std::uint32_t lora_layout::out_dim(lora_proj p) const noexcept {
  switch (p) {
    case lora_proj::q: return q_dim;
    case lora_proj::k:
    case lora_proj::v: return kv_dim;
    case lora_proj::o: return hidden;
  }
  return 0;
}

std::uint64_t lora_layout::pages(std::uint32_t r) const noexcept {
  if (rows_per_page == 0)
    return 0;
  return (rows(r) + rows_per_page - 1) / rows_per_page;
}

namespace {

// Why `e` cannot run, or "" when it can.
std::string check_entry(const step_entry& e, const plan_inputs& in, const resident_adapter* a) {
  if (e.tokens.empty() || e.tokens.size() != e.new_tokens)
    return "entry has " + std::to_string(e.tokens.size()) + " tokens for " +
           std::to_string(e.new_tokens) + " new tokens";
  for (auto t : e.tokens)
    if (t < 0 || static_cast<std::uint32_t>(t) >= in.vocab_size)
      return "token " + std::to_string(t) + " outside the vocabulary of " +
             std::to_string(in.vocab_size);
  if (e.hidden)
    return "the cuda backend keeps no hidden caches";
  const std::uint64_t need = std::uint64_t{e.context_tokens} + e.new_tokens;
  const std::uint64_t pages = (need + in.kv.page_tokens - 1) / in.kv.page_tokens;
  if (e.pages.size() < pages)
    return std::to_string(need) + " cache positions need " + std::to_string(pages) +
           " pages, the entry has " + std::to_string(e.pages.size());
  for (std::uint64_t i = 0; i < pages; ++i)
    if (e.pages[i] >= in.pool_pages)
      return "page " + std::to_string(e.pages[i]) + " outside the pool of " +
             std::to_string(in.pool_pages);
  if (e.adapter_id != 0) {
    if (a == nullptr)
      return "adapter " + std::to_string(e.adapter_id) + " is not on the device";
    if (a->rank != e.adapter_rank)
      return "adapter " + std::to_string(e.adapter_id) + " has rank " + std::to_string(a->rank) +
             ", the entry says " + std::to_string(e.adapter_rank);
  }
  return {};
}

} // namespace

attention_split split_for(std::span<const step_entry> batch, std::uint32_t kv_heads, std::uint32_t sms) {
  constexpr std::uint32_t q_tile = 64, kv_chunk = 256;
  std::uint64_t tiles = 0;
  for (const auto& e : batch)
    tiles += (std::uint64_t{e.new_tokens} + q_tile - 1) / q_tile;
  const bool enough = tiles * kv_heads >= 2ull * sms;
  return {.q_tile = q_tile, .kv_chunk = enough ? 0 : kv_chunk};
}

batch_plan plan_batch(std::span<const step_entry> batch, const plan_inputs& in) {
  batch_plan p;
  if (in.kv.page_tokens == 0) {
    for (std::uint32_t i = 0; i < batch.size(); ++i)
      p.rejected.emplace_back(i, "the pool has pages of 0 tokens");
    p.qo_indptr.push_back(0);
    p.kv_indptr.push_back(0);
    p.tile_indptr.push_back(0);
    return p;
  }

  // Accept entries and group them by adapter: base model first, then
  // adapters in order of first appearance; stable within a group.
  std::vector<const resident_adapter*> adapter_of(batch.size(), nullptr);
  std::unordered_map<std::uint32_t, std::uint32_t> group_of; // adapter id -> group
  std::vector<std::uint32_t> group(batch.size(), 0);
  std::vector<std::uint32_t> accepted;
  for (std::uint32_t i = 0; i < batch.size(); ++i) {
    const auto& e = batch[i];
    const resident_adapter* a = nullptr;
    if (e.adapter_id != 0 && in.adapter)
      a = in.adapter(e.adapter_id);
    if (auto why = check_entry(e, in, a); !why.empty()) {
      p.rejected.emplace_back(i, std::move(why));
      continue;
    }
    adapter_of[i] = a;
    if (e.adapter_id != 0)
      group[i] = group_of.try_emplace(e.adapter_id, static_cast<std::uint32_t>(group_of.size() + 1))
                   .first->second;
    accepted.push_back(i);
  }
  std::stable_sort(accepted.begin(), accepted.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return group[a] < group[b]; });
  p.order = accepted;
  p.sliding_window = in.sliding_window;

  // LoRA slots, one per group, in group order.
  std::vector<std::int32_t> slot_of_group(group_of.size() + 1, -1);
  const std::uint32_t pt = in.kv.page_tokens;
  p.qo_indptr.push_back(0);
  p.kv_indptr.push_back(0);
  for (std::uint32_t s = 0; s < p.order.size(); ++s) {
    const auto& e = batch[p.order[s]];
    std::int32_t slot = -1;
    if (e.adapter_id != 0) {
      auto& known = slot_of_group[group[p.order[s]]];
      if (known < 0) {
        const auto* a = adapter_of[p.order[s]];
        known = static_cast<std::int32_t>(p.slots.size());
        p.slots.push_back({a->rank, a->scale, static_cast<std::uint32_t>(p.lora_pages.size())});
        p.lora_pages.insert(p.lora_pages.end(), a->pages.begin(), a->pages.end());
        p.max_rank = std::max(p.max_rank, a->rank);
      }
      slot = known;
    }

    const std::uint32_t first_row = p.rows();
    const std::uint32_t len = e.context_tokens + e.new_tokens;
    const std::uint32_t npages = (len + pt - 1) / pt;
    const std::uint32_t page_base = static_cast<std::uint32_t>(p.kv_pages.size());
    p.kv_pages.insert(p.kv_pages.end(), e.pages.begin(), e.pages.begin() + npages);
    for (std::uint32_t t = 0; t < e.new_tokens; ++t) {
      const std::uint32_t pos = e.context_tokens + t;
      p.token_ids.push_back(e.tokens[t]);
      p.positions.push_back(static_cast<std::int32_t>(pos));
      p.row_seq.push_back(s);
      p.row_page.push_back(p.kv_pages[page_base + pos / pt]);
      p.row_slot.push_back(pos % pt);
      p.row_lora.push_back(slot);
    }
    if (slot >= 0) {
      if (!p.segments.empty() && p.segments.back().slot == static_cast<std::uint32_t>(slot) &&
          p.segments.back().first_row + p.segments.back().rows == first_row)
        p.segments.back().rows += e.new_tokens;
      else
        p.segments.push_back({first_row, e.new_tokens, static_cast<std::uint32_t>(slot)});
    }
    p.qo_indptr.push_back(p.rows());
    p.kv_indptr.push_back(static_cast<std::uint32_t>(p.kv_pages.size()));
    p.kv_len.push_back(len);
    p.last_row.push_back(p.rows() - 1);
    p.sampling.push_back({e.temperature, e.top_p, e.top_k, e.min_p, e.repetition_penalty, e.output_index, e.seed});
    p.max_new_tokens = std::max(p.max_new_tokens, e.new_tokens);
    p.max_kv_len = std::max(p.max_kv_len, len);

    // Attention: tiles of q_tile rows; each tile's visible positions (from
    // its first row's window, up to its last row's) cut into kv_chunk items.
    const std::uint32_t q_tile = std::max<std::uint32_t>(in.split.q_tile, 1);
    const std::uint32_t window = in.sliding_window;
    for (std::uint32_t q0 = 0; q0 < e.new_tokens; q0 += q_tile) {
      const std::uint32_t q1 = std::min(e.new_tokens, q0 + q_tile);
      const std::uint32_t visible = e.context_tokens + q1; // positions < visible
      const std::uint32_t first_seen = e.context_tokens + q0 + 1;
      const std::uint32_t from = window > 0 && first_seen > window ? first_seen - window : 0;
      p.tile_indptr.push_back(static_cast<std::uint32_t>(p.items.size()));
      const std::uint32_t chunk = in.split.kv_chunk == 0 ? visible - from : in.split.kv_chunk;
      for (std::uint32_t k0 = from; k0 < visible; k0 += chunk)
        p.items.push_back({s, first_row + q0, first_row + q1, k0, std::min(visible, k0 + chunk)});
    }
  }
  p.tile_indptr.push_back(static_cast<std::uint32_t>(p.items.size())); // the last tile's end
  // Logit adjustments, in plan order, only where some sequence has any.
  if (std::any_of(p.order.begin(), p.order.end(), [&](std::uint32_t i) { return !batch[i].logit_adjust.empty(); })) {
    p.adjust_indptr.push_back(0);
    for (const auto i : p.order) {
      for (const auto& a : batch[i].logit_adjust) {
        p.adjust_tokens.push_back(a.token);
        p.adjust_deltas.push_back(a.delta);
        p.adjust_repeated.push_back(a.repeated ? 1 : 0);
      }
      p.adjust_indptr.push_back(static_cast<std::uint32_t>(p.adjust_tokens.size()));
    }
  }
  return p;
}

std::uint64_t pool_pages_for(std::uint64_t free_bytes, std::uint64_t weight_bytes,
                             std::uint64_t scratch_bytes, double fraction,
                             std::uint64_t page_bytes) noexcept {
  if (page_bytes == 0 || free_bytes <= weight_bytes + scratch_bytes)
    return 0;
  const double left = static_cast<double>(free_bytes - weight_bytes - scratch_bytes) * fraction;
  return static_cast<std::uint64_t>(left / static_cast<double>(page_bytes));
}

std::string unsupported_model(std::uint32_t hidden, std::uint32_t heads, const kv_layout& kv) {
  if (kv.head_dim != 64 && kv.head_dim != 128)
    return "head_dim " + std::to_string(kv.head_dim) + ": the attention kernels take 64 or 128";
  if (kv.num_kv_heads == 0 || heads == 0 || heads % kv.num_kv_heads != 0)
    return std::to_string(heads) + " attention heads do not split evenly over " + std::to_string(kv.num_kv_heads) +
           " KV heads";
  if (heads / kv.num_kv_heads > 64)
    return std::to_string(heads / kv.num_kv_heads) + " query heads per KV head: the attention kernels take 64 at most";
  if (kv.page_tokens == 0)
    return "pages of 0 tokens";
  if (lora_layout::make(kv, hidden, heads * kv.head_dim).rows_per_page == 0)
    return "a page of " + std::to_string(kv.page_tokens) + " tokens holds less than one adapter row of " +
           std::to_string(std::max({hidden, heads * kv.head_dim, kv.kv_dim()})) + " elements (raise page_tokens)";
  return {};
}

} // namespace troupe::gpu::cuda
