// The adapter packer and page accessors: checks an adapter against the
// layout, converts each A row and B column to the element type and writes it
// at its row of lora_layout; reads rows back through the adapter's page list.
#include "gpu/cuda/lora_pack.hpp"

#include <cmath>
#include <stdexcept>

namespace troupe::gpu::cuda {

namespace {

// PEFT's module names (gpu::to_string lives in troupe_gpu, which the
// stand-alone CUDA build does not have).
constexpr const char* module_name(lora_target t) noexcept {
  switch (t) {
    case lora_target::q: return "q_proj";
    case lora_target::k: return "k_proj";
    case lora_target::v: return "v_proj";
    case lora_target::o: return "o_proj";
    case lora_target::gate: return "gate_proj";
    case lora_target::up: return "up_proj";
    case lora_target::down: return "down_proj";
  }
  return "?";
}

// lora_target and lora_proj share q, k, v, o's order.
static_assert(static_cast<int>(lora_target::q) == static_cast<int>(lora_proj::q) &&
              static_cast<int>(lora_target::k) == static_cast<int>(lora_proj::k) &&
              static_cast<int>(lora_target::v) == static_cast<int>(lora_proj::v) &&
              static_cast<int>(lora_target::o) == static_cast<int>(lora_proj::o));

std::string where(std::uint32_t layer, lora_target t) {
  return "layer " + std::to_string(layer) + " " + module_name(t);
}

} // namespace

std::variant<std::vector<std::uint16_t>, std::string>
pack_lora_adapter(const lora_adapter& a, const lora_layout& l, dtype t) {
  for (auto x : {lora_target::gate, lora_target::up, lora_target::down})
    if (a.targets[static_cast<std::size_t>(x)])
      return std::string("adapter targets ") + module_name(x) +
             ": the cuda backend adapts q_proj, k_proj, v_proj and o_proj only";
  if (a.rank == 0)
    return std::string("adapter has rank 0");
  const std::uint64_t page_elems = l.page_elems;
  if (l.rows_per_page == 0)
    return "pool pages of " + std::to_string(page_elems) + " elements hold no LoRA row of " +
           std::to_string(l.row_width);
  if (a.layers.size() != l.num_layers)
    return "adapter has " + std::to_string(a.layers.size()) + " layers, the model " +
           std::to_string(l.num_layers);
  const std::uint32_t r = a.rank;
  for (std::uint32_t p = 0; p < lora_proj_count; ++p) {
    const auto proj = static_cast<lora_proj>(p);
    if (l.in_dim(proj) > l.row_width || l.out_dim(proj) > l.row_width)
      return "the LoRA layout's rows (" + std::to_string(l.row_width) + ") are narrower than " +
             module_name(static_cast<lora_target>(p)) + "'s dimensions";
  }

  std::vector<std::uint16_t> out(l.pages(r) * page_elems, 0);
  auto row_at = [&](std::uint64_t row) {
    return out.data() + (row / l.rows_per_page) * page_elems +
           (row % l.rows_per_page) * std::uint64_t{l.row_width};
  };
  // Converts `f`, or says why it cannot be stored.
  auto put = [&](std::uint16_t* dst, float f, std::uint32_t layer, lora_target target,
                 char matrix) -> std::string {
    const std::uint16_t bits = to_bits(t, f);
    if (!std::isfinite(from_bits(t, bits)))
      return where(layer, target) + " lora_" + matrix + " holds " + std::to_string(f) +
             ", not finite in " + std::string(to_string(t));
    *dst = bits;
    return {};
  };

  for (std::uint32_t layer = 0; layer < l.num_layers; ++layer) {
    for (std::uint32_t p = 0; p < lora_proj_count; ++p) {
      const auto target = static_cast<lora_target>(p);
      if (!a.targets[p])
        continue; // zero rows
      const auto proj = static_cast<lora_proj>(p);
      const std::uint32_t in = l.in_dim(proj);
      const std::uint32_t outd = l.out_dim(proj);
      const lora_matrix& m = a.layers[layer][p];
      if (m.a.size() != std::uint64_t{r} * in)
        return where(layer, target) + " lora_A has " + std::to_string(m.a.size()) +
               " elements, rank " + std::to_string(r) + " x " + std::to_string(in) + " expected";
      if (m.b.size() != std::uint64_t{outd} * r)
        return where(layer, target) + " lora_B has " + std::to_string(m.b.size()) +
               " elements, " + std::to_string(outd) + " x rank " + std::to_string(r) +
               " expected";
      for (std::uint32_t j = 0; j < r; ++j) {
        std::uint16_t* arow = row_at(l.row_index(layer, proj, 0, j, r));
        for (std::uint32_t k = 0; k < in; ++k)
          if (auto why = put(arow + k, m.a[std::uint64_t{j} * in + k], layer, target, 'A');
              !why.empty())
            return why;
        std::uint16_t* brow = row_at(l.row_index(layer, proj, 1, j, r));
        for (std::uint32_t o = 0; o < outd; ++o)
          if (auto why = put(brow + o, m.b[std::uint64_t{o} * r + j], layer, target, 'B');
              !why.empty())
            return why;
      }
    }
  }
  return out;
}

std::uint64_t lora_row_offset(const lora_layout& l, std::uint64_t page_elems,
                              std::span<const std::uint32_t> pages, std::uint32_t rank,
                              std::uint32_t layer, lora_proj p, std::uint32_t side,
                              std::uint32_t j) {
  if (l.rows_per_page == 0)
    throw std::out_of_range("lora_row_offset: the layout holds no row in a page");
  const std::uint64_t row = l.row_index(layer, p, side, j, rank);
  const std::uint64_t page = row / l.rows_per_page;
  if (page >= pages.size())
    throw std::out_of_range("lora_row_offset: row " + std::to_string(row) + " is in page " +
                            std::to_string(page) + " of an adapter with " +
                            std::to_string(pages.size()) + " pages");
  return std::uint64_t{pages[page]} * page_elems + (row % l.rows_per_page) * l.row_width;
}

std::uint16_t lora_element(std::span<const std::uint16_t> pool, const lora_layout& l,
                           std::span<const std::uint32_t> pages, std::uint32_t rank,
                           std::uint32_t layer, lora_proj p, std::uint32_t side, std::uint32_t j,
                           std::uint32_t k) {
  if (k >= l.row_width)
    throw std::out_of_range("lora_element: element " + std::to_string(k) + " of a row of " +
                            std::to_string(l.row_width));
  const std::uint64_t at =
    lora_row_offset(l, l.page_elems, pages, rank, layer, p, side, j) + k;
  if (at >= pool.size())
    throw std::out_of_range("lora_element: element " + std::to_string(at) +
                            " outside a pool of " + std::to_string(pool.size()));
  return pool[at];
}

} // namespace troupe::gpu::cuda
