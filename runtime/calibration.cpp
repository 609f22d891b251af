#include "runtime/calibration.hpp"

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

namespace troupe {

namespace {

double median(std::vector<double> v) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<std::uint32_t> page_range(std::uint32_t first, std::uint64_t n) {
  std::vector<std::uint32_t> pages(n);
  std::iota(pages.begin(), pages.end(), first);
  return pages;
}

std::uint64_t pages_for(std::uint64_t tokens, std::uint32_t per_page) {
  return (tokens + per_page - 1) / per_page;
}

/// `n` valid token ids of ordinary text.
std::vector<std::int32_t> text_tokens(const gpu::tokenizer& vocab, std::uint32_t n) {
  const auto unit = vocab.encode("The quick brown fox jumps over the lazy dog while the band plays on. ");
  std::vector<std::int32_t> out;
  while (out.size() < n && !unit.empty())
    for (auto t : unit)
      if (out.size() < n)
        out.push_back(t);
  return out;
}

/// Seconds of one step, or a negative number if it failed.
double time_step(gpu::executor_backend& b, const gpu::step_entry& e) {
  const auto r = b.run_step(std::span{&e, 1});
  if (r.tokens.size() != 1 || r.tokens[0] < 0)
    return -1;
  return r.device_seconds;
}

/// A prefill of `tokens` into `pages`, as a new request.
gpu::step_entry prefill_entry(const std::vector<std::int32_t>& tokens, std::vector<std::uint32_t> pages,
                              bool hidden) {
  gpu::step_entry e;
  e.request_id = 1;
  e.new_tokens = static_cast<std::uint32_t>(tokens.size());
  e.tokens = tokens;
  e.pages = std::move(pages);
  e.hidden = hidden;
  e.temperature = 0;
  return e;
}

/// Median time of a decode step over `seqs` sequences of `context` tokens
/// each (prefilled first), on consecutive pages from `first_page`; < 0 on a
/// failure.
double decode_seconds(gpu::executor_backend& b, const std::vector<std::int32_t>& context, std::uint32_t seqs,
                      std::uint64_t pages_each, std::uint32_t first_page, bool hidden, int repeats) {
  std::vector<gpu::step_entry> batch;
  for (std::uint32_t i = 0; i < seqs; ++i) {
    auto e = prefill_entry(context, page_range(first_page + static_cast<std::uint32_t>(i * pages_each), pages_each),
                           hidden);
    e.request_id = i + 1;
    if (time_step(b, e) < 0)
      return -1;
    // The decode: the same position each time (it overwrites one slot).
    e.new_tokens = 1;
    e.context_tokens = static_cast<std::uint32_t>(context.size());
    e.output_index = 1;
    e.tokens.assign(1, context.back());
    batch.push_back(std::move(e));
  }
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const auto r = b.run_step(batch);
    if (r.tokens.size() != batch.size() || std::any_of(r.tokens.begin(), r.tokens.end(), [](auto t) { return t < 0; }))
      return -1;
    times.push_back(r.device_seconds);
  }
  return median(times);
}

} // namespace

policies::cost_calibration calibrate_backend(gpu::executor_backend& b, const calibration_setup& s) {
  policies::cost_calibration out;
  if (s.pool_pages == 0 || s.page_tokens == 0)
    return out;
  const int repeats = std::max(1, s.repeats);
  const auto text = text_tokens(b.vocab(), std::max<std::uint32_t>(s.max_tokens, 1));
  if (text.empty())
    return out;

  // Prefill times at doubling lengths.
  for (std::uint32_t n = 32; n <= s.max_tokens; n *= 2) {
    const auto pages = pages_for(n, s.page_tokens);
    if (pages > s.pool_pages)
      break;
    const std::vector<std::int32_t> prompt(text.begin(), text.begin() + n);
    std::vector<double> times;
    for (int i = 0; i < repeats; ++i) {
      const double t = time_step(b, prefill_entry(prompt, page_range(0, pages), false));
      if (t < 0)
        break;
      times.push_back(t);
    }
    if (static_cast<int>(times.size()) != repeats)
      continue;
    out.prefill_points.emplace_back(n, median(times));
    if (out.prefill_points.back().second > s.max_prefill_seconds)
      break;
  }

  // Swap bandwidths: a block of pages out to host pages and back.
  if (s.page_bytes > 0 && s.host_pages > 0) {
    const auto n = std::min<std::uint64_t>({s.pool_pages, s.host_pages, 64});
    const auto device = page_range(0, n);
    const auto host = page_range(0, n);
    const double bytes = static_cast<double>(n * s.page_bytes);
    std::vector<double> outs, ins;
    for (int i = 0; i < repeats; ++i) {
      const auto o = b.swap_pages(gpu::swap_direction::out, device, host, n * s.page_bytes);
      const auto in = b.swap_pages(gpu::swap_direction::in, device, host, n * s.page_bytes);
      if (!o.error.empty() || !in.error.empty())
        break;
      outs.push_back(o.seconds);
      ins.push_back(in.seconds);
    }
    if (static_cast<int>(outs.size()) == repeats && median(outs) > 0 && median(ins) > 0) {
      out.d2h_bytes_per_s = bytes / median(outs);
      out.h2d_bytes_per_s = bytes / median(ins);
    }
  }

  // ρ: a decode step over hidden caches against one over K and V, with as
  // long a context and as many sequences (up to 8) as the pool holds: at
  // small sizes a memory-bound step hides the recompute entirely.
  if (s.hidden_page_tokens > s.page_tokens) {
    for (std::uint32_t context = std::min<std::uint32_t>(s.max_tokens, 512); context >= 16; context /= 2) {
      const auto kv_pages = pages_for(context + 1, s.page_tokens);
      const auto hidden_pages = pages_for(context + 1, s.hidden_page_tokens);
      const auto seqs = std::min<std::uint64_t>(8, s.pool_pages / (kv_pages + hidden_pages));
      if (seqs == 0)
        continue;
      const std::vector<std::int32_t> prompt(text.begin(), text.begin() + context);
      const auto n = static_cast<std::uint32_t>(seqs);
      const double kv = decode_seconds(b, prompt, n, kv_pages, 0, false, repeats);
      const double hidden = decode_seconds(b, prompt, n, hidden_pages, static_cast<std::uint32_t>(seqs * kv_pages),
                                           true, repeats);
      if (kv >= 0 && hidden >= 0)
        out.hidden_page_seconds = std::max(0.0, hidden - kv) / static_cast<double>(seqs * hidden_pages);
      break;
    }
  }
  return out;
}

} // namespace troupe
