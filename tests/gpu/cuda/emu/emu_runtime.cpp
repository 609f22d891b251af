// The emulated device: fibers for a block's threads, one device thread that
// runs the streams' work (each stream in order, streams interleaved at
// random where events allow), and the CUDA runtime and cuBLAS calls that
// gpu/cuda makes, defined over host memory.
#include "emu.hpp"

#include "gpu/cuda/dtype.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

[[noreturn]] static void emu_die(const char* what) {
  std::fprintf(stderr, "emu: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

extern "C" void emu_switch(void** save, void* to);
asm(R"(
.text
.globl emu_switch
.type emu_switch,@function
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size emu_switch,.-emu_switch
)");

// ---------------------------------------------------------------- fibers
namespace emu {
namespace {
enum state { run, at_block, at_warp, done };
struct copy_op { void* dst; const void* src; bool valid; };
struct fiber {
  void* sp = nullptr;
  unsigned char* stack = nullptr;
  state st = run;
  dim3 tid;
  std::vector<copy_op> open;
  std::deque<std::vector<copy_op>> groups;
};
constexpr std::size_t stack_size = 512 << 10;
std::vector<fiber> fibers;
void* sched_sp = nullptr;
unsigned cur = 0;
dim3 cur_block;
const std::function<void()>* body = nullptr;
std::uint64_t slots[32][32];
std::vector<unsigned char> smem_buf;
std::mt19937 order_rng(12345);
#if EMU_ASAN
void* sched_fake = nullptr;
const void* sched_bottom = nullptr;
std::size_t sched_size = 0;
#endif

void to_sched() {
#if EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, sched_bottom, sched_size);
  emu_switch(&fibers[cur].sp, sched_sp);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  emu_switch(&fibers[cur].sp, sched_sp);
#endif
}
void to_fiber(unsigned t) {
  cur = t;
#if EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, fibers[t].stack, stack_size);
  emu_switch(&sched_sp, fibers[t].sp);
  __sanitizer_finish_switch_fiber(fake, &sched_bottom, &sched_size);
#else
  emu_switch(&sched_sp, fibers[t].sp);
#endif
}

[[noreturn]] void fiber_main() {
#if EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &sched_bottom, &sched_size);
#endif
  (*body)();
  fibers[cur].st = done;
#if EMU_ASAN
  __sanitizer_start_switch_fiber(nullptr, sched_bottom, sched_size);
#endif
  emu_switch(&fibers[cur].sp, sched_sp);
  std::abort();
}
void block_wait(state s) {
  fibers[cur].st = s;
  to_sched();
}
} // namespace

dim3 block_dim, grid_dim;
const dim3& thread_idx() { return fibers[cur].tid; }
const dim3& block_idx() { return cur_block; }
unsigned linear() { return cur; }
void sync_block() { block_wait(at_block); }
void sync_warp() { block_wait(at_warp); }
std::uint64_t exchange(std::uint64_t mine, unsigned src) {
  const unsigned w = cur / 32, l = cur % 32;
  slots[w][l] = mine;
  block_wait(at_warp);
  const std::uint64_t r = slots[w][src];
  block_wait(at_warp);
  return r;
}
void exchange_all(std::uint64_t mine, std::uint64_t* all) {
  const unsigned w = cur / 32, l = cur % 32;
  slots[w][l] = mine;
  block_wait(at_warp);
  std::memcpy(all, slots[w], sizeof slots[w]);
  block_wait(at_warp);
}
unsigned char* dynamic_smem() {
  auto p = reinterpret_cast<std::uintptr_t>(smem_buf.data());
  return reinterpret_cast<unsigned char*>((p + 127) / 128 * 128);
}
void launch_bound(unsigned max_threads, unsigned, unsigned) {
  if (block_dim.x * block_dim.y * block_dim.z > max_threads) {
    std::fprintf(stderr, "emu: a block of %u threads launched for a kernel of __launch_bounds__(%u)\n",
                 block_dim.x * block_dim.y * block_dim.z, max_threads);
    std::abort();
  }
}
void cp_async(void* dst, const void* src, bool valid) { fibers[cur].open.push_back({dst, src, valid}); }
void cp_async_commit() {
  fibers[cur].groups.push_back(std::move(fibers[cur].open));
  fibers[cur].open.clear();
}
void cp_async_wait(int n) {
  auto& g = fibers[cur].groups;
  while (static_cast<int>(g.size()) > n) {
    for (const auto& c : g.front()) {
      if (reinterpret_cast<std::uintptr_t>(c.dst) % 16 || (c.valid && reinterpret_cast<std::uintptr_t>(c.src) % 16))
        emu_die("cp.async of 16 bytes at an address not 16-byte aligned");
      if (c.valid) std::memcpy(c.dst, c.src, 16);
      else std::memset(c.dst, 0, 16);
    }
    g.pop_front();
  }
}

namespace {
void run_grid(dim3 grid, dim3 block, std::size_t smem, const std::function<void()>& b) {
  const unsigned n = block.x * block.y * block.z;
  block_dim = block;
  grid_dim = grid;
  body = &b;
  if (fibers.size() < n) fibers.resize(n);
  smem_buf.assign(smem + 128, 0);
  std::vector<unsigned> order(n);
  // Blocks one at a time, in a shuffled order: a kernel that relies on an
  // order among its blocks shows it.
  std::vector<dim3> blocks;
  blocks.reserve(std::size_t{grid.x} * grid.y * grid.z);
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx)
        blocks.emplace_back(bx, by, bz);
  std::shuffle(blocks.begin(), blocks.end(), order_rng);
  for (const dim3 blk : blocks) {
    cur_block = blk;
    std::memset(smem_buf.data(), 0xff, smem_buf.size()); // shared memory starts as NaNs
    for (unsigned t = 0; t < n; ++t) {
      auto& f = fibers[t];
      if (f.stack == nullptr) f.stack = static_cast<unsigned char*>(std::aligned_alloc(64, stack_size));
      auto top = reinterpret_cast<std::uintptr_t>(f.stack + stack_size) & ~std::uintptr_t{15};
      auto* sp = reinterpret_cast<void**>(top - 64);
      for (int i = 0; i < 8; ++i) sp[i] = nullptr;
      sp[6] = reinterpret_cast<void*>(&fiber_main);
      f.sp = sp;
      f.st = run;
      f.tid = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
      f.open.clear();
      f.groups.clear();
    }
    for (;;) {
      for (unsigned t = 0; t < n; ++t) order[t] = t;
      std::shuffle(order.begin(), order.end(), order_rng);
      bool any = true;
      while (any) {
        any = false;
        for (unsigned t : order)
          if (fibers[t].st == run) { to_fiber(t); any = true; }
      }
      unsigned live = 0;
      for (unsigned t = 0; t < n; ++t) live += fibers[t].st != done;
      if (live == 0) break;
      bool released = false;
      for (unsigned w = 0; w < (n + 31) / 32; ++w) {
        bool all = true, some = false;
        for (unsigned l = 0; l < 32 && w * 32 + l < n; ++l) {
          auto s = fibers[w * 32 + l].st;
          if (s == done) continue;
          some = true;
          if (s != at_warp) all = false;
        }
        if (some && all) {
          for (unsigned l = 0; l < 32 && w * 32 + l < n; ++l)
            if (fibers[w * 32 + l].st == at_warp) fibers[w * 32 + l].st = run;
          released = true;
        }
      }
      if (!released) {
        bool all = true;
        for (unsigned t = 0; t < n; ++t)
          if (fibers[t].st != done && fibers[t].st != at_block) all = false;
        if (all) {
          for (unsigned t = 0; t < n; ++t)
            if (fibers[t].st == at_block) fibers[t].st = run;
          released = true;
        }
      }
      if (!released) {
        std::fprintf(stderr, "emu: deadlock in block (%u %u %u)\n", blk.x, blk.y, blk.z);
        std::abort();
      }
    }
    for (unsigned t = 0; t < n; ++t)
      if (!fibers[t].open.empty() || !fibers[t].groups.empty()) emu_die("a thread ended with cp.async copies not waited for");
  }
}
} // namespace
} // namespace emu

void nvcuda::wmma::emu_check(const void* p, unsigned ldm, unsigned mult) {
  if (reinterpret_cast<std::uintptr_t>(p) % 32 != 0 || ldm % mult != 0) {
    std::fprintf(stderr, "emu: wmma pointer %p not 32-byte aligned or ldm %u not a multiple of %u\n", p, ldm, mult);
    std::abort();
  }
}

// ---------------------------------------------------------------- device
struct CUevent_st {
  std::uint64_t recorded = 0; // records queued
  std::uint64_t landed = 0;   // records run
  std::chrono::steady_clock::time_point at;
  bool timing = true;
};
struct op {
  std::uint64_t seq = 0;
  std::function<void()> run;
  std::shared_ptr<CUevent_st> wait_on; // runnable once wait_on->landed >= wait_for
  std::uint64_t wait_for = 0;
};
struct CUgraph_st { std::vector<op> ops; };
struct CUgraphExec_st { std::vector<op> ops; };
struct CUstream_st {
  std::deque<op> q;
  std::uint64_t queued = 0, ran = 0;
  bool blocking = true;
  CUgraph_st* capture = nullptr;
  bool invalidated = false; // a capture some call broke
};

namespace {
std::mutex mu;
std::condition_variable cv_work, cv_done;
std::map<cudaStream_t, std::unique_ptr<CUstream_st>> streams; // owns every stream, legacy included
std::map<cudaEvent_t, std::shared_ptr<CUevent_st>> events;
std::uint64_t next_seq = 1;
std::map<std::uintptr_t, std::size_t> device_allocs, pinned_allocs;
std::size_t device_bytes = 0;
thread_local cudaError_t last_error = cudaSuccess;
std::mt19937 pick_rng(777);
std::thread device_thread;
bool stopping = false;
std::map<const void*, int> max_dyn_smem;
thread_local bool in_device_op = false;
// The streams this thread is capturing: a call that is unsafe during a
// capture (one that allocates, frees or synchronizes, or work sent to the
// legacy stream) fails, and the capture is invalidated, as CUDA does.
thread_local std::vector<CUstream_st*> captures_here;

void api_call() {
  if (in_device_op) emu_die("a CUDA call from a stream callback or host function");
}
bool unsafe_in_capture() {
  if (captures_here.empty()) return false;
  std::lock_guard lk(mu);
  for (auto* c : captures_here) c->invalidated = true;
  return true;
}

// The emulated device's memory is the host's: 2 GiB unless
// TROUPE_EMU_DEVICE_MIB says otherwise.
std::size_t device_total() {
  static const std::size_t total = [] {
    const char* v = std::getenv("TROUPE_EMU_DEVICE_MIB");
    const std::size_t mib = v != nullptr && std::atoll(v) > 0 ? static_cast<std::size_t>(std::atoll(v)) : 2048;
    return mib << 20;
  }();
  return total;
}

CUstream_st* legacy() {
  auto& s = streams[cudaStreamLegacy];
  if (!s) s = std::make_unique<CUstream_st>();
  return s.get();
}
CUstream_st* stream_of(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return legacy();
  auto it = streams.find(s);
  if (it == streams.end()) emu_die("a call names a stream that was never created or was destroyed");
  return it->second.get();
}

bool runnable(CUstream_st* s) {
  const op& o = s->q.front();
  if (o.wait_on && o.wait_on->landed < o.wait_for) return false;
  CUstream_st* l = legacy();
  if (s == l) { // the legacy stream waits for all earlier work on blocking streams
    for (auto& [h, other] : streams)
      if (other.get() != l && other->blocking && !other->q.empty() && other->q.front().seq < o.seq) return false;
  } else if (s->blocking && !l->q.empty() && l->q.front().seq < o.seq) {
    return false; // and later work on them waits for it
  }
  return true;
}

void device_main() {
  std::unique_lock lk(mu);
  for (;;) {
    std::vector<CUstream_st*> ready;
    bool any = false;
    for (auto& [h, s] : streams) {
      if (s->q.empty()) continue;
      any = true;
      if (runnable(s.get())) ready.push_back(s.get());
    }
    if (ready.empty()) {
      if (stopping && !any) return;
      cv_work.wait(lk);
      continue;
    }
    CUstream_st* s = ready[pick_rng() % ready.size()];
    op o = std::move(s->q.front());
    s->q.pop_front();
    lk.unlock();
    in_device_op = true;
    if (o.run) o.run();
    in_device_op = false;
    lk.lock();
    ++s->ran;
    cv_done.notify_all();
  }
}

struct device_starter {
  device_starter() {
    device_thread = std::thread(device_main);
  }
  ~device_starter() {
    {
      std::lock_guard lk(mu);
      stopping = true;
    }
    cv_work.notify_all();
    device_thread.join();
  }
};
device_starter& starter() {
  static device_starter d;
  return d;
}

// Queues o on s (or into its capture); returns the stream's count after it.
std::uint64_t enqueue(cudaStream_t h, op o) {
  starter();
  std::lock_guard lk(mu);
  CUstream_st* s = stream_of(h);
  if (s == legacy() && !captures_here.empty()) {
    for (auto* c : captures_here) c->invalidated = true;
    return 0; // the caller reports cudaErrorStreamCaptureImplicit (capture_implicit)
  }
  if (s->capture) {
    s->capture->ops.push_back(std::move(o));
    return 0;
  }
  o.seq = next_seq++;
  s->q.push_back(std::move(o));
  cv_work.notify_all();
  return ++s->queued;
}
void wait_stream(CUstream_st* s, std::uint64_t upto) {
  std::unique_lock lk(mu);
  cv_done.wait(lk, [&] { return s->ran >= upto; });
}
// Work for the legacy stream while this thread captures another.
bool capture_implicit(cudaStream_t h) {
  if (captures_here.empty()) return false;
  std::lock_guard lk(mu);
  return stream_of(h) == legacy();
}
// cudaErrorStreamCaptureImplicit (the capture invalidated) for work sent
// to the legacy stream during a capture, else cudaSuccess.
cudaError_t stream_ok(cudaStream_t h) {
  if (!capture_implicit(h)) return cudaSuccess;
  unsafe_in_capture();
  return cudaErrorStreamCaptureImplicit;
}
bool capturing(cudaStream_t h) {
  std::lock_guard lk(mu);
  return stream_of(h)->capture != nullptr;
}

enum class mem { device, pinned, pageable };
mem kind_of(const void* p, std::size_t n) {
  std::lock_guard lk(mu);
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  for (auto* m : {&device_allocs, &pinned_allocs}) {
    auto it = m->upper_bound(a);
    if (it == m->begin()) continue;
    --it;
    if (a >= it->first && a < it->first + it->second) {
      if (a + n > it->first + it->second) emu_die("a copy runs past the end of its allocation");
      return m == &device_allocs ? mem::device : mem::pinned;
    }
  }
  return mem::pageable;
}

cudaError_t copy_async(void* d, const void* s, std::size_t n, cudaMemcpyKind kind, cudaStream_t st) {
  if (const auto e = stream_ok(st); e != cudaSuccess) return e;
  if (n == 0) return cudaSuccess;
  const mem dk = kind_of(d, n), sk = kind_of(s, n);
  const bool d_dev = dk == mem::device, s_dev = sk == mem::device;
  switch (kind) {
  case cudaMemcpyHostToDevice: if (!d_dev || s_dev) emu_die("cudaMemcpyHostToDevice between the wrong kinds of memory"); break;
  case cudaMemcpyDeviceToHost: if (d_dev || !s_dev) emu_die("cudaMemcpyDeviceToHost between the wrong kinds of memory"); break;
  case cudaMemcpyDeviceToDevice: if (!d_dev || !s_dev) emu_die("cudaMemcpyDeviceToDevice between the wrong kinds of memory"); break;
  case cudaMemcpyDefault: break;
  default: emu_die("unexpected cudaMemcpyKind");
  }
  if ((sk == mem::pageable || dk == mem::pageable) && capturing(st)) { // a graph cannot stage them
    std::lock_guard lk(mu);
    stream_of(st)->invalidated = true;
    return cudaErrorStreamCaptureUnsupported;
  }
  if (sk == mem::pageable) { // staged before the call returns
    auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(s),
                                                                static_cast<const unsigned char*>(s) + n);
    enqueue(st, {.run = [d, staged] { std::memcpy(d, staged->data(), staged->size()); }});
    return cudaSuccess;
  }
  const auto at = enqueue(st, {.run = [d, s, n] { std::memmove(d, s, n); }});
  if (dk == mem::pageable && at != 0) { // into pageable memory: returns once the copy is done
    CUstream_st* sp;
    {
      std::lock_guard lk(mu);
      sp = stream_of(st);
    }
    wait_stream(sp, at);
  }
  return cudaSuccess;
}
} // namespace

namespace {
// emu::refuse_captures, or TROUPE_EMU_REFUSE_CAPTURES set (for a whole
// program: troupe-serve's log when step graphs switch off).
std::atomic<bool> captures_refused{std::getenv("TROUPE_EMU_REFUSE_CAPTURES") != nullptr};
}
void emu::refuse_captures(bool on) { captures_refused = on; }

void emu::enqueue_kernel(const launch_cfg& c, const void* kernel, std::function<void()> body) {
  const unsigned n = c.block.x * c.block.y * c.block.z;
  int limit = 48 * 1024;
  {
    std::lock_guard lk(mu);
    if (auto it = max_dyn_smem.find(kernel); it != max_dyn_smem.end()) limit = std::max(limit, it->second);
  }
  if (c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0 || c.grid.y > 65535 || c.grid.z > 65535 || n == 0 ||
      n > 1024 || c.block.z > 64 || c.smem > static_cast<std::size_t>(limit)) {
    std::fprintf(stderr, "emu: bad launch: grid (%u %u %u) block (%u %u %u) smem %zu (limit %d)\n", c.grid.x, c.grid.y,
                 c.grid.z, c.block.x, c.block.y, c.block.z, c.smem, limit);
    last_error = cudaErrorInvalidConfiguration;
    return;
  }
  if (capture_implicit(c.stream)) {
    unsafe_in_capture();
    last_error = cudaErrorStreamCaptureImplicit;
    return;
  }
  auto b = std::make_shared<std::function<void()>>(std::move(body));
  const launch_cfg cc = c;
  enqueue(c.stream, {.run = [cc, b] {
            run_grid(cc.grid, cc.block, cc.smem, *b);
          }});
}

// ---------------------------------------------------------------- runtime
extern "C" {
cudaError_t cudaGetDeviceCount(int* n) { api_call(); *n = 1; return cudaSuccess; }
cudaError_t cudaSetDevice(int d) { api_call(); return d == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaGetDevice(int* d) { api_call(); *d = 0; return cudaSuccess; }
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) { api_call();
  if (a == cudaDevAttrMultiProcessorCount) { *v = 132; return cudaSuccess; }
  emu_die("cudaDeviceGetAttribute: attribute not emulated");
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) { api_call();
  std::memset(p, 0, sizeof *p);
  std::strcpy(p->name, "emulated H100");
  p->multiProcessorCount = 132;
  p->totalGlobalMem = device_total();
  p->major = 9;
  p->minor = 0;
  p->sharedMemPerBlockOptin = 232448;
  p->memoryBusWidth = 5120;
  p->l2CacheSize = 50 << 20;
  p->warpSize = 32;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free, size_t* total) { api_call();
  std::lock_guard lk(mu);
  *total = device_total();
  *free = *total - device_bytes;
  return cudaSuccess;
}
cudaError_t cudaMalloc(void** p, size_t n) { api_call();
  if (unsafe_in_capture()) return cudaErrorStreamCaptureUnsupported;
  const std::size_t r = (std::max<std::size_t>(n, 1) + 255) / 256 * 256;
  {
    std::lock_guard lk(mu);
    if (r > device_total() - device_bytes) {
      *p = nullptr;
      return cudaErrorMemoryAllocation;
    }
  }
  *p = std::aligned_alloc(256, r);
  if (*p == nullptr) return cudaErrorMemoryAllocation;
  std::memset(*p, 0xff, r); // fresh device memory reads as NaN
  std::lock_guard lk(mu);
  device_allocs[reinterpret_cast<std::uintptr_t>(*p)] = n;
  device_bytes += r;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) { api_call();
  if (unsafe_in_capture()) return cudaErrorStreamCaptureUnsupported;
  if (p == nullptr) return cudaSuccess;
  cudaDeviceSynchronize(); // cudaFree synchronizes
  std::lock_guard lk(mu);
  auto it = device_allocs.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == device_allocs.end()) emu_die("cudaFree of a pointer cudaMalloc did not return");
  device_bytes -= (std::max<std::size_t>(it->second, 1) + 255) / 256 * 256;
  device_allocs.erase(it);
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t n) { api_call();
  if (unsafe_in_capture()) return cudaErrorStreamCaptureUnsupported;
  *p = std::aligned_alloc(256, (std::max<std::size_t>(n, 1) + 255) / 256 * 256);
  std::lock_guard lk(mu);
  pinned_allocs[reinterpret_cast<std::uintptr_t>(*p)] = n;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) { api_call();
  if (unsafe_in_capture()) return cudaErrorStreamCaptureUnsupported;
  if (p == nullptr) return cudaSuccess;
  cudaDeviceSynchronize();
  std::lock_guard lk(mu);
  if (pinned_allocs.erase(reinterpret_cast<std::uintptr_t>(p)) == 0) emu_die("cudaFreeHost of a pointer cudaMallocHost did not return");
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t st) { api_call();
  return copy_async(d, s, n, k, st);
}
cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind k) { api_call();
  if (unsafe_in_capture()) return cudaErrorStreamCaptureUnsupported;
  const auto e = copy_async(d, s, n, k, nullptr);
  if (e == cudaSuccess) cudaStreamSynchronize(nullptr);
  return e;
}
cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t st) { api_call();
  if (const auto err = stream_ok(st); err != cudaSuccess) return err;
  if (kind_of(d, n) != mem::device) emu_die("cudaMemsetAsync of memory that is not the device's");
  enqueue(st, {.run = [d, v, n] { std::memset(d, v, n); }});
  return cudaSuccess;
}
cudaError_t cudaMemset(void* d, int v, size_t n) { api_call();
  if (unsafe_in_capture()) return cudaErrorStreamCaptureUnsupported;
  cudaMemsetAsync(d, v, n, nullptr);
  return cudaStreamSynchronize(nullptr);
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) { api_call();
  starter();
  auto st = std::make_unique<CUstream_st>();
  st->blocking = (flags & cudaStreamNonBlocking) == 0;
  *s = st.get();
  std::lock_guard lk(mu);
  streams[*s] = std::move(st);
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* s) { api_call(); return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamSynchronize(cudaStream_t h) { api_call();
  CUstream_st* s;
  std::uint64_t upto;
  {
    std::lock_guard lk(mu);
    s = stream_of(h);
    if (s->capture) return cudaErrorStreamCaptureUnsupported;
    upto = s->queued;
  }
  wait_stream(s, upto); // (the legacy stream's work waits for the blocking streams' earlier work)
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() { api_call();
  if (unsafe_in_capture()) return cudaErrorStreamCaptureUnsupported;
  std::unique_lock lk(mu);
  std::vector<std::pair<CUstream_st*, std::uint64_t>> marks;
  for (auto& [h, s] : streams) marks.push_back({s.get(), s->queued});
  cv_done.wait(lk, [&] {
    for (auto& [s, q] : marks) if (s->ran < q) return false;
    return true;
  });
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t h) { api_call();
  cudaStreamSynchronize(h); // (CUDA lets the work finish; so does this)
  std::lock_guard lk(mu);
  if (streams.erase(h) == 0) emu_die("cudaStreamDestroy of an unknown stream");
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) { api_call();
  auto ev = std::make_shared<CUevent_st>();
  ev->timing = (flags & cudaEventDisableTiming) == 0;
  *e = ev.get();
  std::lock_guard lk(mu);
  events[*e] = ev;
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { api_call(); return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e) { api_call();
  std::lock_guard lk(mu);
  if (events.erase(e) == 0) emu_die("cudaEventDestroy of an unknown event");
  return cudaSuccess; // queued work holds its own reference
}
static std::shared_ptr<CUevent_st> event_of(cudaEvent_t e) {
  std::lock_guard lk(mu);
  auto it = events.find(e);
  if (it == events.end()) emu_die("a call names an event that was never created or was destroyed");
  return it->second;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { api_call();
  if (const auto err = stream_ok(s); err != cudaSuccess) return err;
  auto ev = event_of(e);
  if (capturing(s)) emu_die("cudaEventRecord in a stream capture is not emulated");
  std::uint64_t gen;
  {
    std::lock_guard lk(mu);
    gen = ++ev->recorded;
  }
  enqueue(s, {.run = [ev, gen] {
                std::lock_guard lk(mu);
                ev->landed = std::max(ev->landed, gen);
                ev->at = std::chrono::steady_clock::now();
              }});
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) { api_call();
  if (unsafe_in_capture()) return cudaErrorStreamCaptureUnsupported;
  auto ev = event_of(e);
  std::unique_lock lk(mu);
  const auto upto = ev->recorded;
  cv_done.wait(lk, [&] { return ev->landed >= upto; });
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) { api_call();
  auto ev = event_of(e);
  std::lock_guard lk(mu);
  return ev->landed >= ev->recorded ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) { api_call();
  auto ea = event_of(a), eb = event_of(b);
  std::lock_guard lk(mu);
  if (!ea->timing || !eb->timing) return cudaErrorInvalidResourceHandle;
  if (ea->recorded == 0 || eb->recorded == 0 || ea->landed < ea->recorded || eb->landed < eb->recorded)
    return cudaErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(eb->at - ea->at).count();
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) { api_call();
  if (const auto err = stream_ok(s); err != cudaSuccess) return err;
  auto ev = event_of(e);
  if (capturing(s)) emu_die("cudaStreamWaitEvent in a stream capture is not emulated");
  std::uint64_t gen;
  {
    std::lock_guard lk(mu);
    gen = ev->recorded;
  }
  if (gen == 0) return cudaSuccess;
  enqueue(s, {.wait_on = ev, .wait_for = gen});
  return cudaSuccess;
}
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void* user) { api_call();
  if (const auto err = stream_ok(s); err != cudaSuccess) return err;
  if (capturing(s)) emu_die("host functions in a stream capture are not emulated");
  enqueue(s, {.run = [fn, user] { fn(user); }});
  return cudaSuccess;
}
cudaError_t cudaStreamAddCallback(cudaStream_t s, cudaStreamCallback_t cb, void* user, unsigned flags) { api_call();
  if (const auto err = stream_ok(s); err != cudaSuccess) return err;
  if (flags != 0) return cudaErrorInvalidValue;
  if (capturing(s)) return cudaErrorStreamCaptureUnsupported;
  enqueue(s, {.run = [s, cb, user] { cb(s, cudaSuccess, user); }});
  return cudaSuccess;
}
cudaError_t cudaGetLastError() { auto e = last_error; last_error = cudaSuccess; return e; }
cudaError_t cudaPeekAtLastError() { return last_error; }
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "cudaSuccess";
  case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
  case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
  case cudaErrorNotReady: return "cudaErrorNotReady";
  case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
  case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
  case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
  case cudaErrorIllegalState: return "cudaErrorIllegalState";
  case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
  case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
  case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
  default: return "cudaError(other)";
  }
}
const char* cudaGetErrorString(cudaError_t e) { return cudaGetErrorName(e); }
cudaError_t cudaFuncSetAttribute(const void* f, cudaFuncAttribute a, int v) { api_call();
  if (a != cudaFuncAttributeMaxDynamicSharedMemorySize) emu_die("cudaFuncSetAttribute: attribute not emulated");
  if (v > 232448 - 1024) return cudaErrorInvalidValue; // H100: 227 KiB per block
  std::lock_guard lk(mu);
  max_dyn_smem[f] = v;
  return cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t h, cudaStreamCaptureMode mode) { api_call();
  std::lock_guard lk(mu);
  CUstream_st* s = stream_of(h);
  if (s == legacy() || captures_refused) return cudaErrorStreamCaptureUnsupported;
  if (s->capture) return cudaErrorIllegalState;
  s->capture = new CUgraph_st;
  s->invalidated = false;
  if (mode != cudaStreamCaptureModeRelaxed) captures_here.push_back(s);
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t h, cudaStreamCaptureStatus* status) { api_call();
  std::lock_guard lk(mu);
  CUstream_st* s = stream_of(h);
  *status = s->capture == nullptr    ? cudaStreamCaptureStatusNone
            : s->invalidated         ? cudaStreamCaptureStatusInvalidated
                                     : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t h, cudaGraph_t* g) { api_call();
  std::lock_guard lk(mu);
  CUstream_st* s = stream_of(h);
  if (!s->capture) return cudaErrorIllegalState;
  std::erase(captures_here, s);
  std::unique_ptr<CUgraph_st> graph{s->capture};
  s->capture = nullptr;
  if (s->invalidated) {
    *g = nullptr;
    return cudaErrorStreamCaptureInvalidated;
  }
  *g = graph.release();
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* x, cudaGraph_t g, unsigned long long) { api_call();
  *x = new CUgraphExec_st{g->ops};
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s) { api_call();
  for (const auto& o : x->ops) enqueue(s, op{.run = o.run, .wait_on = o.wait_on, .wait_for = o.wait_for});
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) { api_call(); delete g; return cudaSuccess; }
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x) { api_call(); delete x; return cudaSuccess; }
} // extern "C"

// ---------------------------------------------------------------- cuBLAS
struct cublasContext {
  cudaStream_t stream = nullptr;
};
namespace {
float load_elem(const void* p, cudaDataType_t t, std::size_t i) {
  using namespace troupe::gpu::cuda;
  switch (t) {
  case CUDA_R_32F: return static_cast<const float*>(p)[i];
  case CUDA_R_16F: return f16_bits_to_f32(static_cast<const std::uint16_t*>(p)[i]);
  case CUDA_R_16BF: return bf16_bits_to_f32(static_cast<const std::uint16_t*>(p)[i]);
  default: emu_die("cuBLAS: data type not emulated");
  }
}
void store_elem(void* p, cudaDataType_t t, std::size_t i, float v) {
  using namespace troupe::gpu::cuda;
  switch (t) {
  case CUDA_R_32F: static_cast<float*>(p)[i] = v; break;
  case CUDA_R_16F: static_cast<std::uint16_t*>(p)[i] = f32_to_f16_bits(v); break;
  case CUDA_R_16BF: static_cast<std::uint16_t*>(p)[i] = f32_to_bf16_bits(v); break;
  default: emu_die("cuBLAS: data type not emulated");
  }
}
std::size_t elem_size(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

// Column-major C[m,n] = alpha op(A)[m,k] op(B)[k,n] + beta C, count times.
cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    const void* alpha, const void* A, cudaDataType_t at, int lda, long long sa, const void* B,
                    cudaDataType_t bt, int ldb, long long sb, const void* beta, void* C, cudaDataType_t ct, int ldc,
                    long long sc, int count, cublasComputeType_t comp) {
  if (m < 0 || n < 0 || k < 0 || count < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (lda < std::max(1, ta == CUBLAS_OP_N ? m : k) || ldb < std::max(1, tb == CUBLAS_OP_N ? k : n) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (comp != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (at != bt || (ct != at && ct != CUDA_R_32F)) return CUBLAS_STATUS_NOT_SUPPORTED;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  // The matrices' extents, for the bounds check.
  const std::size_t a_cols = ta == CUBLAS_OP_N ? k : m, b_cols = tb == CUBLAS_OP_N ? n : k;
  const std::size_t a_rows = ta == CUBLAS_OP_N ? m : k, b_rows = tb == CUBLAS_OP_N ? k : n;
  for (int bi = 0; bi < count; ++bi) {
    const auto a_off = static_cast<std::size_t>(sa * bi), b_off = static_cast<std::size_t>(sb * bi);
    const auto c_off = static_cast<std::size_t>(sc * bi);
    if (m && k) kind_of(static_cast<const char*>(A) + a_off * elem_size(at), ((a_cols - 1) * lda + a_rows) * elem_size(at));
    if (n && k) kind_of(static_cast<const char*>(B) + b_off * elem_size(bt), ((b_cols - 1) * ldb + b_rows) * elem_size(bt));
    if (m && n) kind_of(static_cast<const char*>(C) + c_off * elem_size(ct), ((static_cast<std::size_t>(n) - 1) * ldc + m) * elem_size(ct));
  }
  enqueue(h->stream, {.run = [=] {
            std::vector<float> a(static_cast<std::size_t>(m) * k), b(static_cast<std::size_t>(k) * n);
            for (int bi = 0; bi < count; ++bi) {
              for (int i = 0; i < m; ++i)
                for (int kk = 0; kk < k; ++kk)
                  a[static_cast<std::size_t>(i) * k + kk] =
                      load_elem(A, at, sa * bi + (ta == CUBLAS_OP_N ? i + static_cast<long long>(kk) * lda : kk + static_cast<long long>(i) * lda));
              for (int j = 0; j < n; ++j)
                for (int kk = 0; kk < k; ++kk)
                  b[static_cast<std::size_t>(j) * k + kk] =
                      load_elem(B, bt, sb * bi + (tb == CUBLAS_OP_N ? kk + static_cast<long long>(j) * ldb : j + static_cast<long long>(kk) * ldb));
              for (int j = 0; j < n; ++j)
                for (int i = 0; i < m; ++i) {
                  const float* ar = &a[static_cast<std::size_t>(i) * k];
                  const float* br = &b[static_cast<std::size_t>(j) * k];
                  float s = 0;
                  for (int kk = 0; kk < k; ++kk) s += ar[kk] * br[kk];
                  const std::size_t ci = sc * bi + i + static_cast<std::size_t>(j) * ldc;
                  const float old = be != 0.0f ? load_elem(C, ct, ci) : 0.0f;
                  store_elem(C, ct, ci, al * s + be * old);
                }
            }
          }});
  return CUBLAS_STATUS_SUCCESS;
}
} // namespace

extern "C" {
cublasStatus_t cublasCreate_v2(cublasHandle_t* h) { *h = new cublasContext; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) { h->stream = s; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t, void* w, size_t n) {
  if (kind_of(w, n) != mem::device) return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
const char* cublasGetStatusString(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS ? "success" : "emulated cuBLAS error"; }
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType_t at, int lda, const void* B,
                            cudaDataType_t bt, int ldb, const void* beta, void* C, cudaDataType_t ct, int ldc,
                            cublasComputeType_t comp, cublasGemmAlgo_t) {
  return gemm(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1, comp);
}
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void* alpha, const void* A, cudaDataType_t at, int lda,
                                          long long sa, const void* B, cudaDataType_t bt, int ldb, long long sb,
                                          const void* beta, void* C, cudaDataType_t ct, int ldc, long long sc,
                                          int count, cublasComputeType_t comp, cublasGemmAlgo_t) {
  return gemm(h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc, count, comp);
}
} // extern "C"
