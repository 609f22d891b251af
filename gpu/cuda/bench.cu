// troupe-gpu-bench: issue 4's measurements on one GPU, all in one run so
// every ratio compares figures taken side by side:
//  - HBM bandwidth (device-to-device copy) and dense fp16 cuBLAS GEMM rate;
//  - decode at batch 1 against weight bytes / bandwidth;
//  - decode at batch 64 with 64 distinct rank-16 adapters on q, k, v, o
//    against the same batch without adapters, at 128 and 512 tokens of
//    context;
//  - prefill of 8 prompts of 1,024 tokens against the GEMM rate;
//  - the same steps' linear layers alone (what the other kernels add);
//  - that step with adapters timed on the host as the executor runs it
//    (planning to tokens on the host), for the ratio against PEFT;
//  - decode at batch 1 with q, k and v as three cuBLAS calls instead of
//    one, and with every linear layer on cuBLAS instead of gemv, and decode
//    steps replayed as CUDA graphs (what launch gaps cost), captured here
//    and as the model's step graphs (backend.step_graphs) replay them;
//  - where a decode step's time goes, part by part (norms, q/k/v, LoRA,
//    rotary + KV write, attention, o, gate/up, SwiGLU, down, head, sampling);
//  - a CUDA-event timeline of an adapter load on a copy stream while a
//    decode step computes.
// A Llama-2-7B-shaped model with random fp16 weights (untrained weights run
// at the same speed). Writes JSON to the path given by --json (stdout
// otherwise). Needs only CUDA and cuBLAS. --smoke runs every step over a
// tiny model, small batches and small copies, in seconds anywhere (the
// emulated device's check of this code); its figures mean nothing.
#include "gpu/cuda/check.hpp"
#include "gpu/cuda/device_buffer.hpp"
#include "gpu/cuda/gemm.hpp"
#include "gpu/cuda/model.hpp"
#include "gpu/cuda/plan.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace troupe::gpu::cuda {
namespace {

struct options {
  std::string json;
  std::uint32_t layers = 32; // fewer for a quick look
  int reps = 20;
  bool smoke = false;
};

// What the benchmark's steps are made of: issue 4's sizes, or --smoke's.
struct sizes {
  std::size_t copy_bytes;   // the bandwidth copy
  std::uint32_t gemm_n;     // the dense GEMM's m = n = k
  std::uint64_t pool_pages; // the batches' caches and the adapters
  std::uint32_t context;    // decode's context (batch 1 and 64)
  std::uint32_t long_context;
  std::uint32_t prompt;     // prefill: 8 prompts of this many tokens
  std::size_t h2d_bytes;    // the pinned host-to-device copy
};
constexpr sizes issue_sizes{std::size_t{2} << 30, 8192, 2600, 128, 512, 1024, std::size_t{256} << 20};
constexpr sizes smoke_sizes{std::size_t{8} << 20, 256, 900, 32, 64, 48, std::size_t{8} << 20};

// Median milliseconds of `reps` runs of f on `s`, timed with events.
template <class F>
double time_ms(cudaStream_t s, int reps, F&& f) {
  cudaEvent_t a = nullptr, b = nullptr;
  TROUPE_CUDA_CHECK(cudaEventCreate(&a));
  TROUPE_CUDA_CHECK(cudaEventCreate(&b));
  f(); // warm-up
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<float> ms(static_cast<std::size_t>(reps));
  for (auto& m : ms) {
    TROUPE_CUDA_CHECK(cudaEventRecord(a, s));
    f();
    TROUPE_CUDA_CHECK(cudaEventRecord(b, s));
    TROUPE_CUDA_CHECK(cudaEventSynchronize(b));
    TROUPE_CUDA_CHECK(cudaEventElapsedTime(&m, a, b));
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

model_config llama2_7b(std::uint32_t layers, bool smoke) {
  model_config c;
  c.hidden = smoke ? 256 : 4096;
  c.intermediate = smoke ? 512 : 11008;
  c.layers = layers;
  c.heads = smoke ? 2 : 32;
  c.kv_heads = c.heads;
  c.head_dim = 128;
  c.vocab = smoke ? 512 : 32000;
  c.type = dtype::f16;
  for (std::uint32_t i = 0; i < c.head_dim / 2; ++i)
    c.inv_freq.push_back(static_cast<float>(1.0 / std::pow(10000.0, 2.0 * i / c.head_dim)));
  return c;
}

// Page allocation for the benchmark's batches: pages handed out in order.
struct pages {
  std::uint32_t next = 0;
  std::uint64_t limit = 0;
  std::vector<std::uint32_t> take(std::uint64_t n) {
    if (next + n > limit)
      throw cuda_error("benchmark pool too small");
    std::vector<std::uint32_t> v(n);
    for (auto& p : v)
      p = next++;
    return v;
  }
};

std::vector<step_entry> batch(pages& pool, std::uint32_t n, std::uint32_t context,
                              std::uint32_t new_tokens, std::uint32_t page_tokens,
                              bool adapters, std::uint32_t rank) {
  std::vector<step_entry> b(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    auto& e = b[i];
    e.request_id = i + 1;
    e.context_tokens = context;
    e.new_tokens = new_tokens;
    e.temperature = 0;
    e.tokens.assign(new_tokens, static_cast<std::int32_t>(1 + i));
    e.pages = pool.take((context + new_tokens + page_tokens - 1) / page_tokens);
    if (adapters) {
      e.adapter_id = i + 1;
      e.adapter_rank = rank;
    }
  }
  return b;
}

int run(const options& o) {
  if (!device_visible()) {
    std::cerr << "troupe-gpu-bench: no CUDA device visible\n";
    return 2;
  }
  cudaDeviceProp prop{};
  TROUPE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t s = nullptr, copy = nullptr;
  TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
  std::ostringstream js;
  js.precision(6);
  js << "{\n  \"gpu\": \"" << prop.name << "\",\n";
  const sizes& z = o.smoke ? smoke_sizes : issue_sizes;
  if (o.smoke)
    js << "  \"smoke\": true,\n";

  // Bandwidth: a 2 GiB device-to-device copy reads and writes each byte.
  double bandwidth = 0;
  {
    const std::size_t bytes = z.copy_bytes;
    device_buffer<std::byte> a(bytes), b(bytes);
    TROUPE_CUDA_CHECK(cudaMemsetAsync(a.data(), 1, bytes, s));
    const double ms = time_ms(s, o.reps, [&] {
      TROUPE_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, s));
    });
    bandwidth = 2.0 * bytes / (ms * 1e-3);
    js << "  \"hbm_bytes_per_s\": " << bandwidth << ",\n";
  }
  // Dense GEMM ceiling, fp16 in and out, fp32 accumulation.
  double gemm_flops = 0;
  {
    const std::uint32_t n = z.gemm_n;
    device_buffer<std::uint16_t> a(std::size_t{n} * n), b(std::size_t{n} * n), c(std::size_t{n} * n);
    // Random operands: constant ones run faster on tensor cores.
    fill_uniform(dtype::f16, a.data(), a.size(), 1, 1.0f, s);
    fill_uniform(dtype::f16, b.data(), b.size(), 2, 1.0f, s);
    blas bl{s};
    const double ms = time_ms(s, o.reps, [&] { bl.dense(dtype::f16, a.data(), b.data(), c.data(), n, n, n); });
    gemm_flops = 2.0 * n * n * n / (ms * 1e-3);
    js << "  \"dense_gemm_flops\": " << gemm_flops << ",\n";
  }

  // The model, a pool, and 64 rank-16 adapters in it.
  const auto cfg = llama2_7b(o.layers, o.smoke);
  const kv_layout kv{.num_layers = cfg.layers, .num_kv_heads = cfg.kv_heads, .head_dim = cfg.head_dim,
                     .page_tokens = 16};
  // Enough for 64 sequences of 512 tokens (2,112 pages at 16 tokens) beside
  // the 64 adapters: 21 GB at 32 layers.
  const std::uint64_t pool_pages = z.pool_pages;
  cuda_model m{cfg, kv, pool_pages, s};
  m.randomize(7, 0.02f);
  TROUPE_CUDA_CHECK(cudaMemsetAsync(m.pool(), 0, pool_pages * m.page_bytes(), s));
  pages alloc{0, pool_pages};
  const std::uint32_t rank = 16, n_adapters = 64;
  std::map<std::uint32_t, resident_adapter> resident;
  const auto& lora = m.lora();
  pinned_buffer<std::uint16_t> adapter_host(lora.pages(rank) * kv.page_elems());
  for (std::size_t i = 0; i < adapter_host.size(); ++i) // small values, any pattern
    adapter_host.data()[i] = to_bits(dtype::f16, static_cast<float>(static_cast<int>(i % 17) - 8) * 1e-3f);
  for (std::uint32_t a = 1; a <= n_adapters; ++a) {
    resident_adapter r{rank, 2.0f, alloc.take(lora.pages(rank))};
    m.write_pages(r.pages, adapter_host.data(), s);
    resident.emplace(a, std::move(r));
  }
  // Where the timeline's adapter load lands: pages no batch uses.
  const auto load_target = alloc.take(lora.pages(rank));
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(s));
  plan_inputs in;
  in.kv = kv;
  in.vocab_size = cfg.vocab;
  in.pool_pages = pool_pages;
  in.adapter = [&](std::uint32_t id) -> const resident_adapter* {
    auto it = resident.find(id);
    return it == resident.end() ? nullptr : &it->second;
  };
  const std::uint32_t pt = kv.page_tokens;
  // Each step's attention cut as the server cuts it (split_for).
  const auto plan_of = [&](const std::vector<step_entry>& b) {
    in.split = split_for(b, kv.num_kv_heads, static_cast<std::uint32_t>(prop.multiProcessorCount));
    return plan_batch(b, in);
  };

  // Every timed step, described for troupe-cost-fit (which rebuilds the
  // batch and fits the sim cost model's constants to these times).
  std::ostringstream steps;
  const auto step_ms = [&](const std::vector<step_entry>& b) {
    const auto plan = plan_of(b);
    if (!plan.rejected.empty())
      throw cuda_error("benchmark entry rejected: " + plan.rejected.front().second);
    const double ms = time_ms(s, o.reps, [&] { m.enqueue_forward(plan); });
    // The benchmark's batches are uniform: one shape for every sequence,
    // each with its own adapter where it has one.
    const auto& e = b.front();
    steps << (steps.tellp() > 0 ? ",\n" : "") << "    {\"sequences\": " << b.size()
          << ", \"context_tokens\": " << e.context_tokens << ", \"new_tokens\": " << e.new_tokens
          << ", \"adapter_rank\": " << e.adapter_rank << ", \"ms\": " << ms << "}";
    return ms;
  };
  // The fewest bytes a decode step must read: every weight but the
  // embedding table (one row of it per sequence), each sequence's cache,
  // and each distinct adapter's A and B on q, k, v and o.
  const auto tb = static_cast<double>(dtype_bytes(cfg.type));
  const auto step_bytes = [&](const std::vector<step_entry>& b) {
    double bytes = static_cast<double>(cfg.weight_bytes());
    if (!cfg.tied_embeddings)
      bytes -= tb * cfg.vocab * cfg.hidden;
    std::map<std::uint32_t, std::uint32_t> adapters;
    for (const auto& e : b) {
      bytes += tb * cfg.hidden + 2.0 * tb * cfg.layers * cfg.kv_dim() * (e.context_tokens + e.new_tokens);
      if (e.adapter_id != 0)
        adapters[e.adapter_id] = e.adapter_rank;
    }
    const double h = cfg.hidden, qd = cfg.q_dim(), kvd = cfg.kv_dim();
    const double in_plus_out = (h + qd) + 2 * (h + kvd) + (qd + h); // q, k, v, o
    for (const auto& [id, r] : adapters)
      bytes += tb * cfg.layers * r * in_plus_out;
    return bytes;
  };
  // The step of `b` captured once as a CUDA graph and replayed: beside
  // step_ms, what the gaps between launches cost. Writes "<key>_ms", or
  // "<key>_error" where the capture fails.
  const auto graph_ms = [&](const std::vector<step_entry>& b, const std::string& key) {
    const auto plan = plan_of(b);
    const auto d = m.upload_plan(plan);
    TROUPE_CUDA_CHECK(cudaStreamSynchronize(s));
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    std::string error;
    TROUPE_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    try {
      m.enqueue_step(d);
    } catch (const std::exception& e) {
      error = e.what();
    }
    const cudaError_t ended = cudaStreamEndCapture(s, &g);
    if (error.empty() && ended != cudaSuccess)
      error = cudaGetErrorString(ended);
    if (error.empty()) {
      const cudaError_t made = cudaGraphInstantiate(&exec, g, 0);
      if (made != cudaSuccess)
        error = cudaGetErrorString(made);
    }
    if (g != nullptr)
      cudaGraphDestroy(g);
    if (!error.empty()) {
      cudaGetLastError(); // a failed capture's error is not sticky
      js << "  \"" << key << "_error\": \"" << error << "\",\n";
      return;
    }
    const double ms = time_ms(s, o.reps, [&] { TROUPE_CUDA_CHECK(cudaGraphLaunch(exec, s)); });
    cudaGraphExecDestroy(exec);
    js << "  \"" << key << "_ms\": " << ms << ",\n";
  };
  // Where a step's time goes: an event recorded before each part's
  // launches (cuda_model::set_probe), each part's time summed over the
  // layers, the median of `reps` steps. The events add a little time of
  // their own between the parts; "all" is the probed step's whole time.
  std::vector<cudaEvent_t> events;
  const auto parts_ms = [&](const std::vector<step_entry>& b, const std::string& key) {
    const auto plan = plan_of(b);
    std::vector<std::pair<step_part, cudaEvent_t>> marks;
    m.set_probe([&](step_part p) {
      if (marks.size() == events.size()) {
        events.emplace_back();
        TROUPE_CUDA_CHECK(cudaEventCreate(&events.back()));
      }
      const cudaEvent_t e = events[marks.size()];
      TROUPE_CUDA_CHECK(cudaEventRecord(e, s));
      marks.emplace_back(p, e);
    });
    constexpr int n_parts = static_cast<int>(step_part::end) + 1;
    std::vector<std::vector<double>> per_part(n_parts);
    std::vector<double> all;
    for (int r = 0; r <= o.reps; ++r) { // the first is a warm-up
      marks.clear();
      m.enqueue_forward(plan);
      TROUPE_CUDA_CHECK(cudaStreamSynchronize(s));
      if (r == 0)
        continue;
      std::vector<double> sum(n_parts, 0.0);
      for (std::size_t i = 0; i + 1 < marks.size(); ++i) {
        float ms = 0;
        TROUPE_CUDA_CHECK(cudaEventElapsedTime(&ms, marks[i].second, marks[i + 1].second));
        sum[static_cast<int>(marks[i].first)] += ms;
      }
      float whole = 0;
      TROUPE_CUDA_CHECK(cudaEventElapsedTime(&whole, marks.front().second, marks.back().second));
      all.push_back(whole);
      for (int p = 0; p < n_parts; ++p)
        per_part[p].push_back(sum[p]);
    }
    m.set_probe({});
    const auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    js << "  \"" << key << "\": {";
    for (int p = 0; p + 1 < n_parts; ++p)
      js << "\"" << to_string(static_cast<step_part>(p)) << "\": " << median(per_part[p]) << ", ";
    js << "\"all\": " << median(all) << "},\n";
  };
  const std::uint32_t mark = alloc.next;
  const auto b1 = batch(alloc, 1, z.context, 1, pt, false, 0);
  const double decode1 = step_ms(b1);
  // The same step in other forms, planned once as step_ms plans it (the
  // planning is host time, not the step's).
  {
    const auto plan = plan_of(b1);
    const auto form_ms = [&] { return time_ms(s, o.reps, [&] { m.enqueue_forward(plan); }); };
    m.set_batched_qkv(false);
    js << "  \"decode_b1_separate_qkv_ms\": " << form_ms() << ",\n";
    m.set_batched_qkv(true);
    m.set_gemv_rows(0);
    js << "  \"decode_b1_cublas_ms\": " << form_ms() << ",\n";
    m.set_gemv_rows(gemv_max_rows);
  }
  // The same step as the server runs it with backend.step_graphs: the plan
  // uploaded each time, the step replayed from the model's graph (captured
  // on the second of the repeated steps; the median is of replays).
  // Writes "<key>_ms", or "<key>_error" where CUDA refused the capture
  // (the steps then launched directly); returns the time, 0 on an error.
  const auto step_graphs_ms = [&](const std::vector<step_entry>& b, const std::string& key) {
    const auto plan = plan_of(b);
    m.set_step_graphs(4);
    const double ms = time_ms(s, std::max(o.reps, 3), [&] { m.enqueue_forward(plan); });
    const std::string error = m.step_graphs_error();
    m.set_step_graphs(0);
    if (!error.empty()) {
      js << "  \"" << key << "_error\": \"" << error << "\",\n";
      return 0.0;
    }
    js << "  \"" << key << "_ms\": " << ms << ",\n";
    return ms;
  };
  const double decode1_graphs = step_graphs_ms(b1, "decode_b1_step_graphs");
  graph_ms(b1, "decode_b1_graph");
  parts_ms(b1, "decode_b1_parts_ms");
  const double bound_ms = step_bytes(b1) / bandwidth * 1e3;
  const double weight_bound_ms = static_cast<double>(cfg.weight_bytes()) / bandwidth * 1e3;
  js << "  \"weight_bytes\": " << cfg.weight_bytes() << ",\n"
     << "  \"decode_b1_ms\": " << decode1 << ",\n"
     << "  \"decode_b1_bound_ms\": " << bound_ms << ",\n"
     << "  \"decode_b1_over_bound\": " << decode1 / bound_ms << ",\n"
     << (decode1_graphs > 0 ? "  \"decode_b1_step_graphs_over_bound\": " + std::to_string(decode1_graphs / bound_ms) + ",\n"
                            : std::string{})
     << "  \"decode_b1_weight_bound_ms\": " << weight_bound_ms << ",\n"
     << "  \"decode_b1_over_weight_bound\": " << decode1 / weight_bound_ms << ",\n";
  // Decode at batch 64 without adapters and with 64 distinct ones, at
  // `context` tokens, under keys starting with `key`; beside the ratio the
  // bytes alone allow (adapters add reads a step cannot skip). Returns the
  // batch with adapters.
  const auto adapters_cost = [&](std::uint32_t context, const std::string& key) {
    alloc.next = mark;
    const auto base = batch(alloc, 64, context, 1, pt, false, 0);
    const double base_ms = step_ms(base);
    alloc.next = mark;
    auto with = batch(alloc, 64, context, 1, pt, true, rank);
    const double with_ms = step_ms(with);
    js << "  \"" << key << "_ms\": " << base_ms << ",\n"
       << "  \"" << key << "_bound_ms\": " << step_bytes(base) / bandwidth * 1e3 << ",\n"
       << "  \"" << key << "_lora_r16_ms\": " << with_ms << ",\n"
       << "  \"" << key << "_lora_bound_ms\": " << step_bytes(with) / bandwidth * 1e3 << ",\n"
       << "  \"" << key << "_lora_over_base\": " << with_ms / base_ms << ",\n"
       << "  \"" << key << "_lora_bytes_over_base\": " << step_bytes(with) / step_bytes(base) << ",\n";
    return with;
  };
  const auto lora_batch = adapters_cost(z.context, "decode_b64");
  // The same step as the server's executor runs it, timed on the host:
  // planning, the plan's upload, the launches and the sampled tokens back
  // on the host. The PEFT baseline's step times are host times too, so the
  // throughput ratio against it takes this one.
  {
    std::vector<std::int32_t> tokens(lora_batch.size());
    const auto once = [&] { m.forward(plan_of(lora_batch), tokens); };
    once();
    std::vector<double> ms(static_cast<std::size_t>(o.reps));
    for (auto& x : ms) {
      const auto t0 = std::chrono::steady_clock::now();
      once();
      x = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    std::sort(ms.begin(), ms.end());
    js << "  \"decode_b64_lora_r16_wall_ms\": " << ms[ms.size() / 2] << ",\n";
  }
  step_graphs_ms(lora_batch, "decode_b64_lora_r16_step_graphs");
  graph_ms(lora_batch, "decode_b64_lora_r16_graph");
  parts_ms(lora_batch, "decode_b64_lora_r16_parts_ms");
  // Again at 512 tokens, the upper end of S-LoRA's synthetic workloads
  // (prompts and outputs of 8 to 512 tokens): the cache grows and the
  // adapters' share of the bytes shrinks.
  adapters_cost(z.long_context, "decode_b64_c512");
  alloc.next = mark;
  const double prefill = step_ms(batch(alloc, 8, 0, z.prompt, pt, false, 0));
  const double tokens = 8.0 * z.prompt;
  const double linear_params = static_cast<double>(cfg.weight_bytes()) / 2 -
                               2.0 * cfg.vocab * cfg.hidden; // the LM head sees 8 rows only
  const double attn_flops = 8.0 * cfg.layers * 2.0 * 2.0 * cfg.heads * cfg.head_dim * (z.prompt * (z.prompt + 1.0) / 2);
  const double prefill_flops = 2.0 * linear_params * tokens + attn_flops;
  js << "  \"prefill_8x1024_ms\": " << prefill << ",\n"
     << "  \"prefill_flops_per_s\": " << prefill_flops / (prefill * 1e-3) << ",\n"
     << "  \"prefill_over_dense_gemm\": " << prefill_flops / (prefill * 1e-3) / gemm_flops << ",\n";

  // The same steps' linear layers alone, on cuBLAS over a second set of
  // weights in the model's shapes (each layer its own, so none sits in L2
  // for the next): beside the step times above, what the attention, norms,
  // rotary, cache writes, LoRA and sampling add, and where to look first.
  {
    const std::uint64_t h = cfg.hidden, qd = cfg.q_dim(), kvd = cfg.kv_dim(), f = cfg.intermediate;
    // As the model calls them: q, k and v in one batched call (the 7B
    // shape's heads all have their own K and V), then o, gate and up, down.
    struct shape { std::uint64_t in, out, count; };
    const shape shapes[] = {{h, qd, 3}, {qd, h, 1}, {h, 2 * f, 1}, {f, h, 1}};
    if (qd != kvd)
      throw cuda_error("the benchmark's linear layers assume q_dim == kv_dim");
    std::uint64_t per_layer = 0;
    for (const auto& sh : shapes)
      per_layer += sh.in * sh.out * sh.count;
    device_buffer<std::uint16_t> w(per_layer * cfg.layers + std::uint64_t{cfg.vocab} * h);
    fill_uniform(cfg.type, w.data(), w.size(), 3, 0.02f, s);
    const std::uint64_t widest = std::max<std::uint64_t>(2 * f, std::max(qd, h));
    const std::uint32_t most_rows = 8 * z.prompt;
    device_buffer<std::uint16_t> x(most_rows * widest), y(most_rows * widest);
    fill_uniform(cfg.type, x.data(), x.size(), 4, 1.0f, s);
    blas bl{s};
    // As the model runs them: on gemv up to `gemv_rows` rows, else cuBLAS.
    const auto linear_ms = [&](std::uint32_t rows, std::uint32_t seqs, std::uint32_t gemv_rows) {
      return time_ms(s, o.reps, [&] {
        const std::uint16_t* wp = w.data();
        for (std::uint32_t l = 0; l < cfg.layers; ++l)
          for (const auto& sh : shapes) {
            linear_on(bl, cfg.type, x.data(), wp, sh.in * sh.out, y.data(), std::uint64_t{rows} * sh.out, rows,
                      static_cast<std::uint32_t>(sh.in), static_cast<std::uint32_t>(sh.out),
                      static_cast<std::uint32_t>(sh.count), false, gemv_rows);
            wp += sh.in * sh.out * sh.count;
          }
        linear_on(bl, cfg.type, x.data(), wp, 0, y.data(), 0, seqs, cfg.hidden, cfg.vocab, 1, false, gemv_rows);
      });
    };
    js << "  \"decode_b1_linear_ms\": " << linear_ms(1, 1, gemv_max_rows) << ",\n"
       << "  \"decode_b1_linear_cublas_ms\": " << linear_ms(1, 1, 0) << ",\n"
       << "  \"decode_b64_linear_ms\": " << linear_ms(64, 64, gemv_max_rows) << ",\n"
       << "  \"prefill_8x1024_linear_ms\": " << linear_ms(most_rows, 8, gemv_max_rows) << ",\n";
  }

  // Overlap: one adapter's pages copied on the copy stream while a decode
  // step with adapters runs on the compute stream; every event's time from
  // a common origin.
  {
    const auto plan = plan_of(lora_batch);
    const auto& target = load_target;
    cudaEvent_t origin, c0, c1, k0, k1;
    for (auto* e : {&origin, &c0, &c1, &k0, &k1})
      TROUPE_CUDA_CHECK(cudaEventCreate(e));
    TROUPE_CUDA_CHECK(cudaEventRecord(origin, s));
    TROUPE_CUDA_CHECK(cudaStreamWaitEvent(copy, origin, 0));
    TROUPE_CUDA_CHECK(cudaEventRecord(k0, s));
    m.enqueue_forward(plan);
    TROUPE_CUDA_CHECK(cudaEventRecord(k1, s));
    TROUPE_CUDA_CHECK(cudaEventRecord(c0, copy));
    m.write_pages(target, adapter_host.data(), copy);
    TROUPE_CUDA_CHECK(cudaEventRecord(c1, copy));
    TROUPE_CUDA_CHECK(cudaDeviceSynchronize());
    float t[4];
    TROUPE_CUDA_CHECK(cudaEventElapsedTime(&t[0], origin, k0));
    TROUPE_CUDA_CHECK(cudaEventElapsedTime(&t[1], origin, k1));
    TROUPE_CUDA_CHECK(cudaEventElapsedTime(&t[2], origin, c0));
    TROUPE_CUDA_CHECK(cudaEventElapsedTime(&t[3], origin, c1));
    const double overlap = std::max(0.0, std::min<double>(t[1], t[3]) - std::max<double>(t[0], t[2]));
    js << "  \"timeline_ms\": {\"decode_start\": " << t[0] << ", \"decode_end\": " << t[1]
       << ", \"adapter_copy_start\": " << t[2] << ", \"adapter_copy_end\": " << t[3]
       << ", \"adapter_bytes\": " << target.size() * m.page_bytes() << ", \"overlap\": " << overlap
       << "},\n";
    for (auto e : {origin, c0, c1, k0, k1})
      cudaEventDestroy(e);
  }
  // Host-to-device rate of a large copy from pinned memory (adapter loads
  // and swap-ins): the sim's pcie_bytes_per_s.
  {
    const std::size_t bytes = z.h2d_bytes;
    pinned_buffer<std::byte> host(bytes);
    std::memset(host.data(), 1, bytes);
    device_buffer<std::byte> dev(bytes);
    const double ms = time_ms(s, o.reps, [&] {
      TROUPE_CUDA_CHECK(cudaMemcpyAsync(dev.data(), host.data(), bytes, cudaMemcpyHostToDevice, s));
    });
    js << "  \"h2d_pinned_bytes_per_s\": " << bytes / (ms * 1e-3) << ",\n";
  }
  for (auto e : events)
    cudaEventDestroy(e);
  js << "  \"steps\": [\n" << steps.str() << "\n  ],\n";
  js << "  \"layers\": " << cfg.layers << ",\n  \"reps\": " << o.reps << "\n}\n";
  if (o.json.empty()) {
    std::cout << js.str();
  } else {
    std::ofstream(o.json) << js.str();
    std::cout << js.str();
  }
  cudaStreamDestroy(s);
  cudaStreamDestroy(copy);
  return 0;
}

} // namespace
} // namespace troupe::gpu::cuda

int main(int argc, char** argv) {
  troupe::gpu::cuda::options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "troupe-gpu-bench: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    const auto number = [&]() -> int {
      const std::string v = value();
      std::size_t used = 0;
      int n = 0;
      try {
        n = std::stoi(v, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != v.size()) {
        std::cerr << "troupe-gpu-bench: " << a << " needs a number, not \"" << v << "\"\n";
        std::exit(2);
      }
      return n;
    };
    if (a == "--json")
      o.json = value();
    else if (a == "--layers")
      o.layers = static_cast<std::uint32_t>(std::max(0, number()));
    else if (a == "--reps")
      o.reps = number();
    else if (a == "--smoke")
      o.smoke = true;
    else {
      std::cerr << "usage: troupe-gpu-bench [--json FILE] [--layers N] [--reps N] [--smoke]\n"
                << "unknown argument " << a << "\n";
      return 2;
    }
  }
  if (o.reps < 1 || o.layers < 1) {
    std::cerr << "troupe-gpu-bench: --reps and --layers need at least 1\n";
    return 2;
  }
  try {
    return troupe::gpu::cuda::run(o);
  } catch (const std::exception& e) {
    std::cerr << "troupe-gpu-bench: " << e.what() << "\n";
    return 1;
  }
}
