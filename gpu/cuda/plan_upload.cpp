// plan_upload: lays the plan's arrays out at 16-byte aligned offsets of one
// staging buffer, copies it, and points the device view into the copy.
#include "gpu/cuda/plan_upload.hpp"

#include <cstring>
#include <vector>

namespace troupe::gpu::cuda {

namespace {

constexpr std::size_t align16(std::size_t n) { return (n + 15) & ~std::size_t{15}; }

// One array to pack: where it comes from and which view field points at it.
struct part {
  const void* data;
  std::size_t bytes;
  const void** field;
};

template <class T>
part make_part(const std::vector<T>& v, const T** field) {
  return {v.data(), v.size() * sizeof(T), reinterpret_cast<const void**>(field)};
}

} // namespace

plan_upload::~plan_upload() {
  if (copied_ != nullptr) {
    cudaEventSynchronize(copied_);
    cudaEventDestroy(copied_);
  }
}

device_plan plan_upload::upload(const batch_plan& plan, cudaStream_t stream) {
  if (copied_ == nullptr)
    TROUPE_CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
  else
    TROUPE_CUDA_CHECK(cudaEventSynchronize(copied_)); // staging_ is free again
  device_plan d;
  d.seqs = plan.seqs();
  d.rows = plan.rows();
  d.num_segments = static_cast<std::uint32_t>(plan.segments.size());
  d.max_rank = plan.max_rank;
  d.num_items = static_cast<std::uint32_t>(plan.items.size());
  d.num_tiles = plan.tile_indptr.empty() ? 0 : static_cast<std::uint32_t>(plan.tile_indptr.size() - 1);
  d.max_new_tokens = plan.max_new_tokens;
  d.max_kv_len = plan.max_kv_len;
  d.sliding_window = plan.sliding_window;

  // The arrays whose length changes while a decode batch stays the same
  // (its caches' pages, its adapters' pages) go last, so the others keep
  // their addresses step after step and the step's launches repeat
  // (model_config::step_graphs).
  const part parts[] = {
    make_part(plan.token_ids, &d.token_ids),   make_part(plan.positions, &d.positions),
    make_part(plan.row_seq, &d.row_seq),       make_part(plan.qo_indptr, &d.qo_indptr),
    make_part(plan.last_row, &d.last_row),     make_part(plan.kv_indptr, &d.kv_indptr),
    make_part(plan.kv_len, &d.kv_len),         make_part(plan.row_page, &d.row_page),
    make_part(plan.row_slot, &d.row_slot),     make_part(plan.slots, &d.slots),
    make_part(plan.row_lora, &d.row_lora),     make_part(plan.segments, &d.segments),
    make_part(plan.items, &d.items),           make_part(plan.tile_indptr, &d.tile_indptr),
    make_part(plan.sampling, &d.sampling),     make_part(plan.lora_pages, &d.lora_pages),
    make_part(plan.kv_pages, &d.kv_pages),     make_part(plan.adjust_indptr, &d.adjust_indptr),
    make_part(plan.adjust_tokens, &d.adjust_tokens), make_part(plan.adjust_deltas, &d.adjust_deltas),
    make_part(plan.adjust_repeated, &d.adjust_repeated),
  };
  std::size_t total = 0;
  for (const auto& p : parts)
    total += align16(p.bytes);
  if (total > staging_.size()) {
    // Earlier steps' kernels may still read the old device buffer.
    TROUPE_CUDA_CHECK(cudaStreamSynchronize(stream));
    staging_ = pinned_buffer<std::byte>(total * 2);
    device_ = device_buffer<std::byte>(total * 2);
  }
  std::size_t at = 0;
  for (const auto& p : parts) {
    if (p.bytes > 0) {
      std::memcpy(staging_.data() + at, p.data, p.bytes);
      *p.field = device_.data() + at;
    } else {
      *p.field = nullptr;
    }
    at += align16(p.bytes);
  }
  if (total > 0)
    TROUPE_CUDA_CHECK(cudaMemcpyAsync(device_.data(), staging_.data(), total,
                                      cudaMemcpyHostToDevice, stream));
  TROUPE_CUDA_CHECK(cudaEventRecord(copied_, stream));
  return d;
}

} // namespace troupe::gpu::cuda
