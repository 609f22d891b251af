// The LoRA references: one row at a time, the adapter's A rows and B^T rows
// found through the plan's slots and page list exactly as the kernels find
// them (lora_row_offset), fp32 sums in index order.
#include "gpu/cuda/reference_lora.hpp"

#include "gpu/cuda/lora_pack.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace troupe::gpu::cuda {

namespace {

void require(bool ok, const char* what, std::uint64_t have, std::uint64_t need) {
  if (!ok)
    throw std::invalid_argument(std::string(what) + " holds " + std::to_string(have) +
                                " elements, " + std::to_string(need) + " needed");
}

// The page size, checked.
std::uint64_t page_elems_of(const lora_layout& lora) {
  const std::uint64_t pe = lora.page_elems;
  if (lora.rows_per_page == 0)
    throw std::invalid_argument("pool pages of " + std::to_string(pe) +
                                " elements hold no LoRA row of " + std::to_string(lora.row_width));
  return pe;
}

// The adapter slot of row r, or nullptr for the base model.
const lora_slot* slot_of(const batch_plan& plan, std::uint32_t r) {
  const std::int32_t s = plan.row_lora.at(r);
  if (s < 0)
    return nullptr;
  return &plan.slots.at(static_cast<std::uint32_t>(s));
}

std::span<const std::uint32_t> pages_of(const batch_plan& plan, const lora_slot& s,
                                        const lora_layout& lora) {
  const std::uint64_t n = lora.pages(s.rank);
  if (std::uint64_t{s.page_offset} + n > plan.lora_pages.size())
    throw std::out_of_range("slot's pages end past the plan's lora_pages");
  return std::span<const std::uint32_t>(plan.lora_pages).subspan(s.page_offset, n);
}

// Row j of (layer, proj, side) of slot `s`, `len` elements, checked against the pool.
const std::uint16_t* row_ptr(std::span<const std::uint16_t> pool, const batch_plan& plan,
                             const lora_layout& lora, std::uint64_t page_elems,
                             const lora_slot& s, std::uint32_t layer, lora_proj proj,
                             std::uint32_t side, std::uint32_t j, std::uint32_t len) {
  const std::uint64_t at =
    lora_row_offset(lora, page_elems, pages_of(plan, s, lora), s.rank, layer, proj, side, j);
  if (at + len > pool.size())
    throw std::out_of_range("adapter row at " + std::to_string(at) + " outside a pool of " +
                            std::to_string(pool.size()));
  return pool.data() + at;
}

} // namespace

void lora_shrink_reference(dtype t, const batch_plan& plan, const lora_layout& lora,
                           std::uint32_t layer, lora_proj proj, std::span<const std::uint16_t> x,
                           std::span<const std::uint16_t> pool, std::span<float> tmp) {
  const std::uint64_t page_elems = page_elems_of(lora);
  const std::uint32_t rows = plan.rows();
  const std::uint32_t in = lora.in_dim(proj);
  require(x.size() >= std::uint64_t{rows} * in, "x", x.size(), std::uint64_t{rows} * in);
  require(tmp.size() >= std::uint64_t{rows} * plan.max_rank, "tmp", tmp.size(),
          std::uint64_t{rows} * plan.max_rank);
  std::vector<float> xf(in);
  for (std::uint32_t r = 0; r < rows; ++r) {
    const lora_slot* s = slot_of(plan, r);
    if (s == nullptr)
      continue;
    for (std::uint32_t k = 0; k < in; ++k)
      xf[k] = from_bits(t, x[std::uint64_t{r} * in + k]);
    for (std::uint32_t j = 0; j < s->rank; ++j) {
      const std::uint16_t* a = row_ptr(pool, plan, lora, page_elems, *s, layer, proj, 0, j, in);
      float acc = 0.0f;
      for (std::uint32_t k = 0; k < in; ++k)
        acc += xf[k] * from_bits(t, a[k]);
      tmp[std::uint64_t{r} * plan.max_rank + j] = acc;
    }
  }
}

void lora_expand_reference(dtype t, const batch_plan& plan, const lora_layout& lora,
                           std::uint32_t layer, lora_proj proj, std::span<const float> tmp,
                           std::span<const std::uint16_t> pool, std::span<std::uint16_t> y) {
  const std::uint64_t page_elems = page_elems_of(lora);
  const std::uint32_t rows = plan.rows();
  const std::uint32_t out = lora.out_dim(proj);
  require(y.size() >= std::uint64_t{rows} * out, "y", y.size(), std::uint64_t{rows} * out);
  require(tmp.size() >= std::uint64_t{rows} * plan.max_rank, "tmp", tmp.size(),
          std::uint64_t{rows} * plan.max_rank);
  std::vector<const std::uint16_t*> b;
  std::vector<float> acc(out);
  for (std::uint32_t r = 0; r < rows; ++r) {
    const lora_slot* s = slot_of(plan, r);
    if (s == nullptr)
      continue;
    b.resize(s->rank);
    for (std::uint32_t j = 0; j < s->rank; ++j)
      b[j] = row_ptr(pool, plan, lora, page_elems, *s, layer, proj, 1, j, out);
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (std::uint32_t j = 0; j < s->rank; ++j) {
      const float tj = tmp[std::uint64_t{r} * plan.max_rank + j];
      for (std::uint32_t o = 0; o < out; ++o)
        acc[o] += tj * from_bits(t, b[j][o]);
    }
    for (std::uint32_t o = 0; o < out; ++o) {
      std::uint16_t& yo = y[std::uint64_t{r} * out + o];
      yo = to_bits(t, from_bits(t, yo) + s->scale * acc[o]);
    }
  }
}

} // namespace troupe::gpu::cuda
