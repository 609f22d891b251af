// The CUDA runtime pieces on a GPU: cuBLAS linear and gemv against a CPU product,
// a plan's upload, and coroutines resumed by stream and event completion.
// Skipped where no CUDA device is visible.
#include "gpu/cuda/check.hpp"
#include "gpu/cuda/device_buffer.hpp"
#include "gpu/cuda/gemm.hpp"
#include "gpu/cuda/kernels.hpp"
#include "gpu/cuda/plan_upload.hpp"
#include "gpu/cuda/stream_await.hpp"
#include "gpu/random.hpp"
#include "runtime/detached_task.hpp"

#include "tests/gpu/cuda/gpu_test_support.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

namespace troupe::gpu::cuda {
namespace {

std::vector<std::uint16_t> random_bits(dtype t, std::size_t n, std::uint64_t seed, float range) {
  std::vector<std::uint16_t> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double u = static_cast<double>(splitmix64(seed * 1000003 + i) >> 11) * 0x1.0p-53;
    v[i] = to_bits(t, static_cast<float>((2 * u - 1) * range));
  }
  return v;
}

// x . w over n elements of type-t bits, summed in double: the products'
// reference.
double dot(dtype t, const std::uint16_t* x, const std::uint16_t* w, std::uint32_t n) {
  double sum = 0;
  for (std::uint32_t k = 0; k < n; ++k)
    sum += double{from_bits(t, x[k])} * from_bits(t, w[k]);
  return sum;
}

// What rounding the output to t allows, relative to 1 + |want|.
float tolerance_of(dtype t) { return t == dtype::f16 ? 2e-3f : 1.6e-2f; }

class linear_test : public ::testing::TestWithParam<dtype> {};

TEST_P(linear_test, matches_a_cpu_product_over_token_counts_and_shapes) {
  TROUPE_REQUIRE_GPU();
  const dtype t = GetParam();
  cudaStream_t s = nullptr;
  TROUPE_CUDA_CHECK(cudaStreamCreate(&s));
  {
    blas b{s};
    struct shape {
      std::uint32_t rows, in, out;
    };
    for (const auto sh : {shape{1, 64, 96}, shape{7, 256, 128}, shape{300, 128, 512}}) {
      SCOPED_TRACE(testing::Message() << sh.rows << "x" << sh.in << "->" << sh.out);
      const auto x = random_bits(t, std::size_t{sh.rows} * sh.in, 1, 1.0f);
      const auto w = random_bits(t, std::size_t{sh.out} * sh.in, 2, 0.1f);
      device_buffer<std::uint16_t> dx(x.size()), dw(w.size()), dy(std::size_t{sh.rows} * sh.out);
      device_buffer<float> dy32(std::size_t{sh.rows} * sh.out);
      dx.upload(x);
      dw.upload(w);
      b.linear(t, dx.data(), dw.data(), dy.data(), sh.rows, sh.in, sh.out);
      b.linear(t, dx.data(), dw.data(), dy32.data(), sh.rows, sh.in, sh.out, false, true);
      TROUPE_CUDA_CHECK(cudaStreamSynchronize(s));
      std::vector<std::uint16_t> y(dy.size());
      std::vector<float> y32(dy32.size());
      dy.download(y);
      dy32.download(y32);
      const float tol = tolerance_of(t);
      for (std::uint32_t r = 0; r < sh.rows; ++r)
        for (std::uint32_t o = 0; o < sh.out; ++o) {
          const double want = dot(t, &x[r * sh.in], &w[o * sh.in], sh.in);
          const float got = from_bits(t, y[r * sh.out + o]);
          ASSERT_FALSE(std::isnan(got));
          ASSERT_NEAR(got, want, tol * (1 + std::abs(want))) << r << "," << o;
          ASSERT_NEAR(y32[r * sh.out + o], want, 1e-4 * (1 + std::abs(want))) << r << "," << o;
        }
    }
  }
  cudaStreamDestroy(s);
}

// linear_batched: each of `count` weights, stored one after another, times
// the same input into outputs one after another, as `count` linear calls
// give them (within accumulation order), and nothing written past them.
TEST_P(linear_test, batched_over_weights_one_after_another_is_each_ones_linear) {
  TROUPE_REQUIRE_GPU();
  const dtype t = GetParam();
  cudaStream_t s = nullptr;
  TROUPE_CUDA_CHECK(cudaStreamCreate(&s));
  {
    blas b{s};
    struct shape {
      std::uint32_t rows, in, out, count;
    };
    for (const auto sh : {shape{1, 256, 256, 3}, shape{5, 128, 64, 2}, shape{64, 512, 512, 3}}) {
      SCOPED_TRACE(testing::Message() << sh.count << " x " << sh.rows << "x" << sh.in << "->" << sh.out);
      const std::size_t w_elems = std::size_t{sh.out} * sh.in, y_elems = std::size_t{sh.rows} * sh.out;
      const auto x = random_bits(t, std::size_t{sh.rows} * sh.in, 3, 1.0f);
      const auto w = random_bits(t, w_elems * sh.count, 4, 0.1f);
      device_buffer<std::uint16_t> dx(x.size()), dw(w.size()), batched(y_elems * sh.count + 8),
        each(y_elems * sh.count);
      dx.upload(x);
      dw.upload(w);
      const std::vector<std::uint16_t> guard(batched.size(), 0x7e00);
      batched.upload(guard);
      b.linear_batched(t, dx.data(), dw.data(), w_elems, batched.data(), y_elems, sh.rows, sh.in,
                       sh.out, sh.count);
      for (std::uint32_t i = 0; i < sh.count; ++i)
        b.linear(t, dx.data(), dw.data() + i * w_elems, each.data() + i * y_elems, sh.rows, sh.in,
                 sh.out);
      TROUPE_CUDA_CHECK(cudaStreamSynchronize(s));
      std::vector<std::uint16_t> got(batched.size()), want(each.size());
      batched.download(got);
      each.download(want);
      const float tol = tolerance_of(t);
      for (std::size_t i = 0; i < want.size(); ++i) {
        const float g = from_bits(t, got[i]), e = from_bits(t, want[i]);
        ASSERT_FALSE(std::isnan(g)) << i;
        ASSERT_NEAR(g, e, tol * (1 + std::abs(e))) << i;
      }
      for (std::size_t i = want.size(); i < got.size(); ++i)
        EXPECT_EQ(got[i], 0x7e00) << "written past the last output at " << i;
    }
    b.linear_batched(t, nullptr, nullptr, 0, nullptr, 0, 0, 8, 8, 3); // no rows: nothing
    b.linear_batched(t, nullptr, nullptr, 0, nullptr, 0, 8, 8, 8, 0); // no weights: nothing
  }
  cudaStreamDestroy(s);
}

// gemv (decode's few rows): each projection's product as a CPU product in
// double gives it within the type's rounding, fp32 outputs within fp32 sums'
// error, nothing written between or past the outputs; shapes it does not
// take are refused with nothing enqueued.
TEST_P(linear_test, gemv_matches_a_cpu_product_and_refuses_what_it_does_not_take) {
  TROUPE_REQUIRE_GPU();
  const dtype t = GetParam();
  cudaStream_t s = nullptr;
  TROUPE_CUDA_CHECK(cudaStreamCreate(&s));
  struct shape {
    std::uint32_t rows, in, out, count;
    bool f32;
  };
  for (const auto sh : {shape{1, 4096, 4096, 3, false}, shape{2, 4096, 1000, 1, true},
                        shape{3, 11008, 257, 1, false}, shape{4, 64, 33, 2, false}, shape{1, 8, 1, 1, true}}) {
    SCOPED_TRACE(testing::Message() << sh.count << " x " << sh.rows << "x" << sh.in << "->" << sh.out
                                    << (sh.f32 ? " fp32" : ""));
    const std::uint64_t w_stride = std::uint64_t{sh.out} * sh.in + 8; // weights apart, not adjacent
    const std::uint64_t y_stride = std::uint64_t{sh.rows} * sh.out + 3;
    const auto x = random_bits(t, std::size_t{sh.rows} * sh.in, 5, 1.0f);
    const auto w = random_bits(t, w_stride * sh.count, 6, 0.05f);
    device_buffer<std::uint16_t> dx(x.size()), dw(w.size()), dy(y_stride * sh.count + 8);
    device_buffer<float> dy32(y_stride * sh.count + 8);
    dx.upload(x);
    dw.upload(w);
    const std::vector<std::uint16_t> nan16(dy.size(), 0x7e00);
    const std::vector<float> nan32(dy32.size(), std::nanf(""));
    dy.upload(nan16);
    dy32.upload(nan32);
    void* y = sh.f32 ? static_cast<void*>(dy32.data()) : static_cast<void*>(dy.data());
    ASSERT_TRUE(gemv(t, dx.data(), dw.data(), w_stride, y, y_stride, sh.rows, sh.in, sh.out, sh.count,
                     sh.f32, s));
    TROUPE_CUDA_CHECK(cudaStreamSynchronize(s));
    std::vector<std::uint16_t> got16(dy.size());
    std::vector<float> got32(dy32.size());
    dy.download(got16);
    dy32.download(got32);
    const float tol = sh.f32 ? 1e-4f : tolerance_of(t);
    for (std::uint32_t z = 0; z < sh.count; ++z) {
      for (std::uint32_t r = 0; r < sh.rows; ++r)
        for (std::uint32_t o = 0; o < sh.out; ++o) {
          const double want = dot(t, &x[std::size_t{r} * sh.in], &w[z * w_stride + std::uint64_t{o} * sh.in], sh.in);
          const std::uint64_t at = z * y_stride + std::uint64_t{r} * sh.out + o;
          const float g = sh.f32 ? got32[at] : from_bits(t, got16[at]);
          ASSERT_FALSE(std::isnan(g)) << z << "," << r << "," << o;
          ASSERT_NEAR(g, want, tol * (1 + std::abs(want))) << z << "," << r << "," << o;
        }
      for (std::uint64_t i = z * y_stride + std::uint64_t{sh.rows} * sh.out; i < (z + 1) * y_stride; ++i)
        ASSERT_TRUE(sh.f32 ? std::isnan(got32[i]) : got16[i] == 0x7e00) << "written between outputs at " << i;
    }
  }
  std::vector<std::uint16_t> host(64);
  device_buffer<std::uint16_t> d(64);
  d.upload(host);
  auto* p = d.data();
  EXPECT_FALSE(gemv(t, p, p, 0, p, 0, gemv_max_rows + 1, 8, 1, 1, false, s)); // too many rows
  EXPECT_FALSE(gemv(t, p, p, 0, p, 0, 0, 8, 1, 1, false, s));                 // none
  EXPECT_FALSE(gemv(t, p, p, 0, p, 0, 1, 12, 1, 1, false, s));                // in not a multiple of 8
  EXPECT_FALSE(gemv(t, p + 1, p, 0, p, 0, 1, 8, 1, 1, false, s));            // x off 16 bytes
  EXPECT_FALSE(gemv(t, p, p + 1, 0, p, 0, 1, 8, 1, 1, false, s));            // w off 16 bytes
  EXPECT_FALSE(gemv(t, p, p, 4, p, 0, 1, 8, 1, 2, false, s));                // stride off 16 bytes
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(s));
  cudaStreamDestroy(s);
}

INSTANTIATE_TEST_SUITE_P(dtypes, linear_test, ::testing::Values(dtype::f16, dtype::bf16),
                         [](const auto& i) { return std::string{to_string(i.param)}; });

TEST(plan_upload, device_arrays_equal_the_plan) {
  TROUPE_REQUIRE_GPU();
  cudaStream_t s = nullptr;
  TROUPE_CUDA_CHECK(cudaStreamCreate(&s));
  {
    plan_upload up;
    for (std::uint32_t n : {3u, 40u, 5u}) { // grows, then reuses
      std::vector<step_entry> batch(n);
      for (std::uint32_t i = 0; i < n; ++i) {
        batch[i].request_id = i;
        batch[i].new_tokens = 1 + i % 3;
        batch[i].context_tokens = i;
        batch[i].tokens.assign(batch[i].new_tokens, static_cast<std::int32_t>(i % 10));
        for (std::uint32_t p = 0; p < (i + batch[i].new_tokens + 3) / 4; ++p)
          batch[i].pages.push_back(i * 8 + p);
      }
      plan_inputs in;
      in.kv = {.num_layers = 1, .num_kv_heads = 1, .head_dim = 8, .page_tokens = 4};
      in.vocab_size = 10;
      in.pool_pages = 1000;
      in.split = {.q_tile = 2, .kv_chunk = 4};
      const auto plan = plan_batch(batch, in);
      const auto d = up.upload(plan, s);
      TROUPE_CUDA_CHECK(cudaStreamSynchronize(s));
      ASSERT_EQ(d.rows, plan.rows());
      ASSERT_EQ(d.num_items, plan.items.size());
      std::vector<std::uint32_t> pages(plan.kv_pages.size());
      TROUPE_CUDA_CHECK(cudaMemcpy(pages.data(), d.kv_pages, pages.size() * 4, cudaMemcpyDeviceToHost));
      EXPECT_EQ(pages, plan.kv_pages);
      std::vector<std::int32_t> pos(plan.positions.size());
      TROUPE_CUDA_CHECK(cudaMemcpy(pos.data(), d.positions, pos.size() * 4, cudaMemcpyDeviceToHost));
      EXPECT_EQ(pos, plan.positions);
      std::vector<attention_item> items(plan.items.size());
      TROUPE_CUDA_CHECK(cudaMemcpy(items.data(), d.items, items.size() * sizeof(attention_item),
                                   cudaMemcpyDeviceToHost));
      for (std::size_t i = 0; i < items.size(); ++i)
        EXPECT_EQ(items[i].kv_end, plan.items[i].kv_end);
    }
  }
  cudaStreamDestroy(s);
}

// A single-threaded owner: posted coroutines wait in a queue until run().
struct owner {
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::coroutine_handle<>> ready;
  resume_poster poster() {
    return [this](std::coroutine_handle<> h) {
      {
        std::lock_guard lock{m};
        ready.push_back(h);
      }
      cv.notify_one();
    };
  }
  void run_one() {
    std::unique_lock lock{m};
    cv.wait(lock, [&] { return !ready.empty(); });
    auto h = ready.front();
    ready.pop_front();
    lock.unlock();
    h.resume();
  }
};

detached_task copy_then_check(cudaStream_t s, owner& o, const device_buffer<float>& src,
                     pinned_buffer<float>& dst, int& stage) {
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.bytes(), cudaMemcpyDeviceToHost, s));
  stage = 1;
  stream_done done{s, o.poster()};
  const auto err = co_await done;
  EXPECT_EQ(err, cudaSuccess);
  stage = 2;
}

detached_task wait_event(cudaEvent_t e, cudaStream_t notify, owner& o, int& stage) {
  event_done done{e, notify, o.poster()};
  const auto err = co_await done;
  EXPECT_EQ(err, cudaSuccess);
  stage = 2;
}

TEST(stream_await, a_coroutine_resumes_on_its_owner_after_the_copy_lands) {
  TROUPE_REQUIRE_GPU();
  cudaStream_t s = nullptr;
  TROUPE_CUDA_CHECK(cudaStreamCreate(&s));
  {
    std::vector<float> host(1 << 20);
    for (std::size_t i = 0; i < host.size(); ++i)
      host[i] = static_cast<float>(i);
    device_buffer<float> src(host.size());
    src.upload(host);
    pinned_buffer<float> dst(host.size());
    owner o;
    int stage = 0;
    copy_then_check(s, o, src, dst, stage);
    EXPECT_EQ(stage, 1) << "suspended until the owner resumes it";
    o.run_one();
    EXPECT_EQ(stage, 2);
    EXPECT_EQ(dst.data()[host.size() - 1], host.back());
  }
  cudaStreamDestroy(s);
}

TEST(stream_await, an_event_on_a_copy_stream_resumes_without_holding_that_stream) {
  TROUPE_REQUIRE_GPU();
  cudaStream_t copy = nullptr, notify = nullptr;
  cudaEvent_t e = nullptr;
  TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
  TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&notify, cudaStreamNonBlocking));
  TROUPE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  {
    device_buffer<float> a(1 << 22), b(1 << 22);
    TROUPE_CUDA_CHECK(cudaMemsetAsync(a.data(), 0, a.bytes(), copy));
    TROUPE_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), a.bytes(), cudaMemcpyDeviceToDevice, copy));
    TROUPE_CUDA_CHECK(cudaEventRecord(e, copy));
    owner o;
    int stage = 1;
    wait_event(e, notify, o, stage);
    if (stage != 2) // not complete at the first look: resumed by the host function
      o.run_one();
    EXPECT_EQ(stage, 2);
    EXPECT_EQ(cudaEventQuery(e), cudaSuccess);
  }
  cudaEventDestroy(e);
  cudaStreamDestroy(copy);
  cudaStreamDestroy(notify);
}

} // namespace
} // namespace troupe::gpu::cuda
