// The host launchers of the paged KV write and of paged attention
// (kernels.hpp), their dispatch over element type, head_dim and query heads
// per kv head, and the workspace they need. The kernels are in
// attention_common.cuh, attention_decode.cuh and attention_prefill.cuh.
//
// attention picks its kernels from the plan:
//   decode-only plan (one row per sequence): decode kernel, then the merge
//     kernel when some tile is split (after a prep kernel numbers the
//     partial slots);
//   otherwise: the prep kernel (query blocks of multi-row items, partial
//     slots), the prefill kernel over multi-row items, the decode kernel
//     over single-row items, and the merge kernel when some tile is split.
//
// The workspace (`partial`) starts with the prep kernel's uint32 arrays,
// qblock_indptr [num_items + 1] then item_slot [num_items], rounded up to 32
// floats; the partials follow: [slots, heads, head_dim + 2] fp32, one slot
// per row of every item of a split tile.
#include "gpu/cuda/attention_decode.cuh"
#include "gpu/cuda/attention_prefill.cuh"
#include "gpu/cuda/check.hpp"
#include "gpu/cuda/dispatch.cuh"
#include "gpu/cuda/kernels.hpp"
#include "gpu/cuda/reference_attention.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace troupe::gpu::cuda {

// The reference walks items in the kernels' tiles.
static_assert(attn::kv_tile == attention_kv_tile);

namespace {

template <int N>
using int_c = std::integral_constant<int, N>;

// head_dim: 64 or 128.
template <class F>
void dispatch_head_dim(std::uint32_t head_dim, F&& f) {
  switch (head_dim) {
    case 64: f(int_c<64>{}); return;
    case 128: f(int_c<128>{}); return;
    default:
      throw std::invalid_argument("attention: head_dim " + std::to_string(head_dim) +
                                  " is not supported (64 or 128)");
  }
}

// Query heads per decode block: the smallest of 1, 2, 4, 8 holding
// min(group, decode_heads).
template <class F>
void dispatch_decode_heads(std::uint32_t group, F&& f) {
  if (group <= 1)
    f(int_c<1>{});
  else if (group <= 2)
    f(int_c<2>{});
  else if (group <= 4)
    f(int_c<4>{});
  else
    f(int_c<attn::decode_heads>{});
}

// uint32 header of the workspace, in floats: qblock_indptr and item_slot.
constexpr std::uint64_t header_floats(std::uint64_t num_items) {
  return (2 * num_items + 1 + 31) / 32 * 32;
}

std::uint32_t sm_count() {
  int device = 0;
  int n = 0;
  TROUPE_CUDA_CHECK(cudaGetDevice(&device));
  TROUPE_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  return static_cast<std::uint32_t>(std::max(n, 1));
}

template <class T, int HD>
void launch_attention(const device_plan& plan, const kv_layout& kv, std::uint32_t layer,
                      std::uint32_t heads, float scale, const void* q, const void* pool,
                      float* partial, void* out, cudaStream_t stream) {
  const std::uint32_t group = heads / kv.num_kv_heads;
  const bool split = plan.num_items > plan.num_tiles;
  const bool decode_only = plan.max_new_tokens <= 1;

  attn::attention_params<T> p;
  p.positions = plan.positions;
  p.kv_indptr = plan.kv_indptr;
  p.kv_pages = plan.kv_pages;
  p.items = plan.items;
  p.tile_indptr = plan.tile_indptr;
  p.num_items = plan.num_items;
  p.num_tiles = plan.num_tiles;
  p.q = static_cast<const T*>(q);
  p.pool = static_cast<const T*>(pool);
  p.out = static_cast<T*>(out);
  p.page_elems = kv.page_elems();
  p.layer_offset = std::uint64_t{layer} * kv.layer_elems();
  p.v_offset = std::uint64_t{kv.page_tokens} * kv.kv_dim();
  p.page_tokens = kv.page_tokens;
  p.kv_dim = kv.kv_dim();
  p.heads = heads;
  p.group = group;
  p.rows_per_block = attn::block_m / group;
  p.scale_log2 = scale * 1.4426950408889634f;
  p.window = plan.sliding_window;

  if (split || !decode_only) {
    auto* header = reinterpret_cast<std::uint32_t*>(partial);
    std::uint32_t* qblock_indptr = decode_only ? nullptr : header;
    std::uint32_t* item_slot = split ? header + plan.num_items + 1 : nullptr;
    attn::attention_prep_kernel<<<1, attn::prep_threads, 0, stream>>>(
      plan.items, plan.num_items, plan.tile_indptr, plan.num_tiles, p.rows_per_block, item_slot,
      qblock_indptr);
    p.qblock_indptr = qblock_indptr;
    p.item_slot = item_slot;
    p.partial = partial + header_floats(plan.num_items);
  }

  const std::uint32_t head_blocks = (group + attn::decode_heads - 1) / attn::decode_heads;
  dispatch_decode_heads(group, [&](auto nh) {
    attn::decode_attention_kernel<T, HD, decltype(nh)::value>
      <<<dim3(plan.num_items, kv.num_kv_heads, head_blocks), attn::threads, 0, stream>>>(p);
  });

  if (!decode_only) {
    constexpr auto smem = static_cast<int>(attn::prefill_smem<HD>::bytes);
    auto* kernel = attn::prefill_attention_kernel<T, HD>;
    TROUPE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    // Blocks stride over the query blocks; at most a few waves of them.
    const std::uint64_t blocks_per_item =
      (std::uint64_t{plan.max_new_tokens} + p.rows_per_block - 1) / p.rows_per_block;
    const std::uint64_t cap = (8ull * sm_count() + kv.num_kv_heads - 1) / kv.num_kv_heads;
    const auto x = static_cast<std::uint32_t>(
      std::max<std::uint64_t>(1, std::min(std::uint64_t{plan.num_items} * blocks_per_item, cap)));
    kernel<<<dim3(x, kv.num_kv_heads), attn::threads, smem, stream>>>(p);
  }

  if (split)
    attn::merge_attention_kernel<T, HD><<<dim3(plan.num_tiles, heads), attn::threads, 0, stream>>>(p);
}

} // namespace

void write_kv(dtype, const device_plan& plan, const kv_layout& kv, std::uint32_t layer,
              const void* k, const void* v, void* pool, cudaStream_t stream) {
  if (layer >= kv.num_layers)
    throw std::invalid_argument("write_kv: layer " + std::to_string(layer) + " of " +
                                std::to_string(kv.num_layers));
  if (kv.kv_dim() == 0 || kv.page_tokens == 0)
    throw std::invalid_argument("write_kv: kv_layout with a zero dimension");
  if (plan.rows == 0)
    return;
  const std::uint32_t kv_dim = kv.kv_dim();
  const bool vec = kv_dim % 8 == 0 && aligned16(k) && aligned16(v) && aligned16(pool);
  const std::uint32_t width = vec ? 8 : 1;
  const std::uint64_t work = std::uint64_t{plan.rows} * 2 * (kv_dim / width);
  constexpr std::uint32_t block = 256;
  const auto blocks = static_cast<std::uint32_t>((work + block - 1) / block);
  const auto* ks = static_cast<const std::uint16_t*>(k);
  const auto* vs = static_cast<const std::uint16_t*>(v);
  auto* dst = static_cast<std::uint16_t*>(pool);
  const std::uint64_t layer_offset = std::uint64_t{layer} * kv.layer_elems();
  const std::uint64_t v_offset = std::uint64_t{kv.page_tokens} * kv_dim;
  if (vec)
    attn::write_kv_kernel<8><<<blocks, block, 0, stream>>>(plan.row_page, plan.row_slot, plan.rows,
                                                          kv_dim, kv.page_elems(), layer_offset,
                                                          v_offset, ks, vs, dst);
  else
    attn::write_kv_kernel<1><<<blocks, block, 0, stream>>>(plan.row_page, plan.row_slot, plan.rows,
                                                          kv_dim, kv.page_elems(), layer_offset,
                                                          v_offset, ks, vs, dst);
  TROUPE_CUDA_CHECK(cudaPeekAtLastError());
}

void attention(dtype t, const device_plan& plan, const kv_layout& kv, std::uint32_t layer,
               std::uint32_t heads, float scale, const void* q, const void* pool, float* partial,
               void* out, cudaStream_t stream) {
  if (kv.num_kv_heads == 0 || heads == 0 || heads % kv.num_kv_heads != 0)
    throw std::invalid_argument("attention: " + std::to_string(heads) + " heads over " +
                                std::to_string(kv.num_kv_heads) + " kv heads");
  if (heads / kv.num_kv_heads > static_cast<std::uint32_t>(attn::block_m))
    throw std::invalid_argument("attention: more than " + std::to_string(attn::block_m) +
                                " query heads per kv head are not supported");
  if (layer >= kv.num_layers || kv.page_tokens == 0)
    throw std::invalid_argument("attention: layer " + std::to_string(layer) + " of " +
                                std::to_string(kv.num_layers) + ", pages of " +
                                std::to_string(kv.page_tokens) + " tokens");
  dispatch_head_dim(kv.head_dim, [](auto) {}); // refuses other head dims even for empty plans
  if (plan.num_items == 0 || plan.rows == 0)
    return;
  // The kernels copy q and the pool 16 bytes at a time (cp.async): a
  // misaligned base would fault on the device and poison the context.
  if (!aligned16(q) || !aligned16(pool))
    throw std::invalid_argument("attention: q and pool must be 16-byte aligned");
  const bool split = plan.num_items > plan.num_tiles;
  if ((split || plan.max_new_tokens > 1) && partial == nullptr)
    throw std::invalid_argument("attention: this plan needs attention_workspace_floats() floats "
                                "of workspace, partial is null");
  dispatch_dtype(t, "attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_head_dim(kv.head_dim, [&](auto hd) {
      launch_attention<T, decltype(hd)::value>(plan, kv, layer, heads, scale, q, pool, partial, out,
                                               stream);
    });
  });
  TROUPE_CUDA_CHECK(cudaPeekAtLastError());
}

std::uint64_t attention_workspace_floats(const batch_plan& plan, std::uint32_t heads,
                                         std::uint32_t head_dim) noexcept {
  const std::uint64_t items = plan.items.size();
  if (items == 0 || plan.tile_indptr.size() < 2)
    return 0;
  const std::uint64_t tiles = plan.tile_indptr.size() - 1;
  if (plan.decode_only() && items <= tiles)
    return 0;
  std::uint64_t slots = 0;
  for (std::uint64_t t = 0; t < tiles; ++t) {
    const std::uint32_t a = plan.tile_indptr[t];
    const std::uint32_t b = plan.tile_indptr[t + 1];
    if (b - a > 1)
      slots += std::uint64_t{b - a} * (plan.items[a].q_end - plan.items[a].q_begin);
  }
  return header_floats(items) + slots * heads * (head_dim + 2);
}

} // namespace troupe::gpu::cuda
