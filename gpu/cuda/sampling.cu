// `sample` of kernels.hpp: one block per sequence draws what
// gpu::sample_token draws, without sorting the vocabulary.
//
// Tokens are ordered as the CPU sampler walks them: by descending logit
// (equal logits have equal probabilities), ties by lower id. A token's key
// is its logit's bits made monotone (-0 counts as +0, NaN is key 0, below
// -inf); its weight is exp(l / T - max / T) in double, the CPU's formula
// (left unnormalised: every comparison the sampler makes scales with it).
// "A(q)" is the count and mass of the tokens with key > q: a prefix of the
// order. A min-p cut keeps the tokens of weight >= min_p (the largest's
// weight is 1): those of key >= the least key whose weight is, a prefix
// found by bisecting keys and counted in one pass. Top-k, top-p and the
// draw each look for the first prefix that meets a criterion (k tokens;
// mass >= top_p * kept; mass > u * kept):
//   1. passes over the row narrow a key interval that holds the answer,
//      15 pivots a pass (8 spaced by value, 7 by key, so the bounding key
//      range shrinks at least 8-fold a pass), each thread accumulating the
//      count and mass above every pivot in a fixed order, then reduced in
//      a fixed tree: the result never depends on timing or on the batch;
//   2. once the interval holds at most leaf_cap tokens they are gathered
//      into shared memory, sorted by (key desc, id asc) and scanned; once it
//      holds a single key, the answer is the t-th of its ties by id.
// The last leaf is kept: top-p and the draw usually end in top-k's leaf.
// Masses are summed in another order than the CPU's (and exp may differ in
// its last bit), so a draw within ~1e-12 of a CDF boundary may land on the
// neighbour; everything else is the CPU's token.
#include "gpu/cuda/kernels.hpp"

#include "gpu/cuda/check.hpp"
#include "gpu/random.hpp"
#include "gpu/sampling.hpp"

#include <climits>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace troupe::gpu::cuda {

namespace {

constexpr int sampler_threads = 512;
constexpr int sampler_warps = sampler_threads / 32;
constexpr int pivots = 15;
constexpr int value_pivots = 8;
constexpr int leaf_cap = 2048; // tokens a gathered leaf holds
constexpr int leaf_per_thread = leaf_cap / sampler_threads;
constexpr int max_passes = 64; // never reached: each pass shrinks the key range 8-fold

constexpr std::uint32_t key_nan = 0;
constexpr std::uint32_t key_neg_inf = 0x007fffffu;
constexpr std::uint32_t key_pos_inf = 0xff800000u;
constexpr std::uint32_t no_key = 0xffffffffu; // "no such key" for minima

// -- keys, weights, the draw -------------------------------------------------------

__device__ __forceinline__ std::uint32_t key_of(float l) {
  if (isnan(l))
    return key_nan;
  std::uint32_t b = __float_as_uint(l);
  if (b == 0x80000000u)
    b = 0; // -0 orders as +0, as it compares
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float value_of(std::uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

__device__ __forceinline__ bool finite_key(std::uint32_t key) {
  return key > key_neg_inf && key < key_pos_inf;
}

/// gpu/sampling.cpp's uniform01: a double in [0, 1) from (seed, output_index).
__device__ double uniform01(std::uint64_t seed, std::uint32_t output_index) {
  const std::uint64_t r = splitmix64(splitmix64(seed) ^ splitmix64(0x5eed0000ULL + output_index));
  return static_cast<double>(r >> 11) * 0x1.0p-53;
}

/// One sequence's row and temperature.
struct row_view {
  const float* row; // [vocab]
  std::uint32_t vocab;
  double inv_t;
  double mx; // max logit * inv_t
  /// exp(l * inv_t - mx), the CPU's weight (unfused, as the CPU rounds).
  __device__ double weight(std::uint32_t key) const {
    if (key == key_nan)
      return 0.0;
    return exp(__dsub_rn(__dmul_rn(static_cast<double>(value_of(key)), inv_t), mx));
  }
  __device__ std::uint32_t key(std::uint32_t i) const { return key_of(__ldg(row + i)); }
};

// -- prefixes, criteria, positions ---------------------------------------------------

struct prefix {
  std::uint32_t count = 0;
  double mass = 0.0;
};

__device__ __forceinline__ prefix extend(prefix a, std::uint32_t count, double mass) {
  return {a.count + count, __dadd_rn(a.mass, mass)};
}

enum class crit_kind : std::uint8_t { count, mass_ge, mass_gt };

/// What the first prefix must meet. A `lazy` target is factor times the
/// whole row's mass, settled by the first look at the whole row.
struct criterion {
  crit_kind kind = crit_kind::count;
  std::uint32_t k = 0;
  double target = 0.0;
  bool lazy = false;
  double factor = 0.0;

  __device__ bool holds(prefix a) const {
    switch (kind) {
      case crit_kind::count:
        return a.count >= k;
      case crit_kind::mass_ge:
        return a.count >= 1 && a.mass >= target;
      case crit_kind::mass_gt:
        return a.mass > target;
    }
    return false;
  }
  __device__ void settle(prefix whole) {
    if (lazy) {
      target = __dmul_rn(factor, whole.mass);
      lazy = false;
    }
  }
};

/// A token in the order: its rank (1-based), the mass up to and including it.
struct position {
  bool found = false;
  std::uint32_t key = 0;
  std::uint32_t rank = 0;
  double cum = 0.0;
  std::int32_t id = -1;
};

/// A key interval (lo, hi] known to hold the answer, A(hi), and what is
/// known of its keys: their count and bounds (bmin_f: the least finite one).
struct key_span {
  std::int64_t lo = -1;
  std::uint32_t hi = 0;
  prefix a_hi;
  bool count_known = false;
  std::uint32_t count = 0;
  std::uint32_t bmin = 0, bmax = 0, bmin_f = no_key;
};

enum class leaf_kind : std::uint8_t { none, gathered, ties };

/// The interval last resolved: gathered into shared memory (n tokens) or a
/// single key (n ties of weight e).
struct leaf_state {
  leaf_kind kind = leaf_kind::none;
  std::int64_t lo = -1;
  std::uint32_t hi = 0;
  prefix a_hi;
  std::uint32_t n = 0;
  double e = 0.0;
};

struct sampler_shared {
  std::uint32_t keys[leaf_cap];
  std::uint32_t ids[leaf_cap];
  double cum[leaf_cap];
  double wmass[sampler_warps][pivots + 1];
  std::uint32_t wcount[sampler_warps][pivots + 1];
  std::uint32_t wmin[sampler_warps], wmax[sampler_warps], wmin_f[sampler_warps];
  unsigned long long wbest[sampler_warps];
  double wscan[sampler_warps];
  double mass[pivots + 1];
  std::uint32_t count[pivots + 1];
  std::uint32_t kmin, kmax, kmin_f;
  unsigned long long best;
  std::uint32_t piv[pivots];
  std::uint32_t n;
  int found;
  std::int32_t id;
};

// -- warp and block helpers ------------------------------------------------------------

__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ unsigned long long warp_max(unsigned long long v) {
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return v;
}

__device__ __forceinline__ unsigned lane_id() { return threadIdx.x % 32; }
__device__ __forceinline__ unsigned warp_id() { return threadIdx.x / 32; }

// -- pass 0: argmax and key bounds ---------------------------------------------------------

struct row_summary {
  std::uint32_t kmax; // the largest key (the argmax's)
  std::int32_t argmax;
  std::uint32_t kmin;   // the least key, NaN included
  std::uint32_t kmin_f; // the least finite key, no_key when none
};

/// gpu/sampling.cpp's argmax (lowest id among the largest, NaN never wins
/// unless all are NaN, then 0) as the largest (key, -id), and key bounds.
__device__ row_summary summarize(const row_view& rv, sampler_shared& sm) {
  unsigned long long best = 0;
  std::uint32_t kmin = no_key, kmin_f = no_key;
  for (std::uint32_t i = threadIdx.x; i < rv.vocab; i += sampler_threads) {
    const std::uint32_t key = rv.key(i);
    const unsigned long long packed = (static_cast<unsigned long long>(key) << 32) | (~i);
    best = packed > best ? packed : best;
    kmin = min(kmin, key);
    if (finite_key(key))
      kmin_f = min(kmin_f, key);
  }
  best = warp_max(best);
  kmin = __reduce_min_sync(0xffffffffu, kmin);
  kmin_f = __reduce_min_sync(0xffffffffu, kmin_f);
  if (lane_id() == 0) {
    sm.wbest[warp_id()] = best;
    sm.wmin[warp_id()] = kmin;
    sm.wmin_f[warp_id()] = kmin_f;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < sampler_warps; ++w) {
      best = sm.wbest[w] > best ? sm.wbest[w] : best;
      kmin = min(kmin, sm.wmin[w]);
      kmin_f = min(kmin_f, sm.wmin_f[w]);
    }
    sm.best = best;
    sm.kmin = kmin;
    sm.kmin_f = kmin_f;
  }
  __syncthreads();
  row_summary s;
  s.kmax = static_cast<std::uint32_t>(sm.best >> 32);
  s.argmax = static_cast<std::int32_t>(~static_cast<std::uint32_t>(sm.best));
  s.kmin = sm.kmin;
  s.kmin_f = sm.kmin_f;
  __syncthreads();
  return s;
}

// -- a narrowing pass ------------------------------------------------------------------------

/// Pivots for `sp` into sm.piv, ascending (thread 0). Value-spaced ones need
/// finite bounds; the key-spaced ones split the bounding key range.
__device__ void make_pivots(const key_span& sp, sampler_shared& sm) {
  if (threadIdx.x != 0)
    return;
  std::uint32_t cand[pivots];
  int n = 0;
  const std::int64_t lo_eff = max(sp.lo, static_cast<std::int64_t>(sp.bmin) - 1);
  const std::int64_t hi_eff = min(static_cast<std::int64_t>(sp.hi), static_cast<std::int64_t>(sp.bmax));
  const bool by_value = finite_key(sp.bmin_f) && finite_key(sp.bmax) && sp.bmin_f < sp.bmax;
  if (by_value) {
    const double vl = value_of(sp.bmin_f);
    const double vh = value_of(sp.bmax);
    for (int j = 0; j < value_pivots; ++j)
      cand[n++] = key_of(static_cast<float>(vl + (vh - vl) * (j + 1) / (value_pivots + 1)));
  }
  const int by_key = pivots - n;
  const std::int64_t range = hi_eff > lo_eff ? hi_eff - lo_eff : 0;
  for (int j = 0; j < by_key; ++j) {
    const std::int64_t q = lo_eff + range * (j + 1) / (by_key + 1);
    cand[n++] = static_cast<std::uint32_t>(q < 0 ? 0 : q);
  }
  for (int i = 1; i < pivots; ++i) // insertion sort, 15 entries
    for (int j = i; j > 0 && cand[j - 1] > cand[j]; --j) {
      const std::uint32_t t = cand[j];
      cand[j] = cand[j - 1];
      cand[j - 1] = t;
    }
  for (int j = 0; j < pivots; ++j)
    sm.piv[j] = cand[j];
}

struct pass_stats {
  prefix in;                 // the tokens in (lo, hi]
  prefix above[pivots];      // of those, the ones with key > piv[j]
  std::uint32_t piv[pivots];
  std::uint32_t kmin, kmax, kmin_f;
};

/// One pass over the row: count and mass of the tokens in (lo, hi] and of
/// those above each pivot, and their key bounds. Each thread adds its
/// tokens in index order; warps and the block reduce in a fixed tree.
__device__ pass_stats narrow_pass(const row_view& rv, const key_span& sp, sampler_shared& sm) {
  make_pivots(sp, sm);
  __syncthreads();
  std::uint32_t piv[pivots];
#pragma unroll
  for (int j = 0; j < pivots; ++j)
    piv[j] = sm.piv[j];

  std::uint32_t cnt[pivots + 1];
  double mass[pivots + 1];
#pragma unroll
  for (int j = 0; j <= pivots; ++j) {
    cnt[j] = 0;
    mass[j] = 0.0;
  }
  std::uint32_t kmin = no_key, kmax = 0, kmin_f = no_key;
  for (std::uint32_t i = threadIdx.x; i < rv.vocab; i += sampler_threads) {
    const std::uint32_t key = rv.key(i);
    if (static_cast<std::int64_t>(key) <= sp.lo || key > sp.hi)
      continue;
    const double e = rv.weight(key);
    cnt[pivots] += 1;
    mass[pivots] += e;
    kmin = min(kmin, key);
    kmax = max(kmax, key);
    if (finite_key(key))
      kmin_f = min(kmin_f, key);
#pragma unroll
    for (int j = 0; j < pivots; ++j)
      if (key > piv[j]) {
        cnt[j] += 1;
        mass[j] += e;
      }
  }
#pragma unroll
  for (int j = 0; j <= pivots; ++j) {
    cnt[j] = __reduce_add_sync(0xffffffffu, cnt[j]);
    mass[j] = warp_sum(mass[j]);
  }
  kmin = __reduce_min_sync(0xffffffffu, kmin);
  kmax = __reduce_max_sync(0xffffffffu, kmax);
  kmin_f = __reduce_min_sync(0xffffffffu, kmin_f);
  if (lane_id() == 0) {
#pragma unroll
    for (int j = 0; j <= pivots; ++j) {
      sm.wcount[warp_id()][j] = cnt[j];
      sm.wmass[warp_id()][j] = mass[j];
    }
    sm.wmin[warp_id()] = kmin;
    sm.wmax[warp_id()] = kmax;
    sm.wmin_f[warp_id()] = kmin_f;
  }
  __syncthreads();
  if (threadIdx.x <= pivots) {
    const unsigned j = threadIdx.x;
    std::uint32_t c = 0;
    double m = 0.0;
    for (int w = 0; w < sampler_warps; ++w) {
      c += sm.wcount[w][j];
      m = __dadd_rn(m, sm.wmass[w][j]);
    }
    sm.count[j] = c;
    sm.mass[j] = m;
  } else if (threadIdx.x == pivots + 1) {
    std::uint32_t a = no_key, b = 0, f = no_key;
    for (int w = 0; w < sampler_warps; ++w) {
      a = min(a, sm.wmin[w]);
      b = max(b, sm.wmax[w]);
      f = min(f, sm.wmin_f[w]);
    }
    sm.kmin = a;
    sm.kmax = b;
    sm.kmin_f = f;
  }
  __syncthreads();
  pass_stats s;
  s.in = {sm.count[pivots], sm.mass[pivots]};
#pragma unroll
  for (int j = 0; j < pivots; ++j) {
    s.above[j] = {sm.count[j], sm.mass[j]};
    s.piv[j] = piv[j];
  }
  s.kmin = sm.kmin;
  s.kmax = sm.kmax;
  s.kmin_f = sm.kmin_f;
  __syncthreads();
  return s;
}

// -- leaves ----------------------------------------------------------------------------------

__device__ __forceinline__ bool before(std::uint32_t ka, std::uint32_t ia, std::uint32_t kb,
                                       std::uint32_t ib) {
  return ka > kb || (ka == kb && ia < ib);
}

/// Gathers the `n` (<= leaf_cap) tokens of (lo, hi] into shared memory,
/// sorts them by (key desc, id asc) and stores A(hi) + their running mass.
__device__ leaf_state gather_leaf(const row_view& rv, std::int64_t lo, std::uint32_t hi,
                                  prefix a_hi, sampler_shared& sm) {
  if (threadIdx.x == 0)
    sm.n = 0;
  __syncthreads();
  for (std::uint32_t i = threadIdx.x; i < rv.vocab; i += sampler_threads) {
    const std::uint32_t key = rv.key(i);
    if (static_cast<std::int64_t>(key) <= lo || key > hi)
      continue;
    const std::uint32_t slot = atomicAdd(&sm.n, 1u);
    if (slot < leaf_cap) { // always: the caller counted them
      sm.keys[slot] = key;
      sm.ids[slot] = i;
    }
  }
  __syncthreads();
  const std::uint32_t n = min(sm.n, static_cast<std::uint32_t>(leaf_cap));
  std::uint32_t width = 1;
  while (width < n)
    width <<= 1;
  for (std::uint32_t j = n + threadIdx.x; j < width; j += sampler_threads) {
    sm.keys[j] = key_nan; // after every token: NaN tokens have lower ids
    sm.ids[j] = 0xffffffffu;
  }
  __syncthreads();
  // Bitonic sort into "before" order; the order is total, so the result
  // does not depend on the order the gather wrote.
  for (std::uint32_t size = 2; size <= width; size <<= 1)
    for (std::uint32_t stride = size >> 1; stride > 0; stride >>= 1) {
      for (std::uint32_t i = threadIdx.x; i < width; i += sampler_threads) {
        const std::uint32_t j = i ^ stride;
        if (j <= i)
          continue;
        const bool ascending = (i & size) == 0;
        const bool swap = ascending ? before(sm.keys[j], sm.ids[j], sm.keys[i], sm.ids[i])
                                    : before(sm.keys[i], sm.ids[i], sm.keys[j], sm.ids[j]);
        if (swap) {
          const std::uint32_t k = sm.keys[i], d = sm.ids[i];
          sm.keys[i] = sm.keys[j];
          sm.ids[i] = sm.ids[j];
          sm.keys[j] = k;
          sm.ids[j] = d;
        }
      }
      __syncthreads();
    }
  // Running mass: each thread its leaf_per_thread consecutive entries, then
  // an exclusive scan of the thread totals (shuffles, then the warps).
  double local[leaf_per_thread];
  double run = 0.0;
#pragma unroll
  for (int m = 0; m < leaf_per_thread; ++m) {
    const std::uint32_t j = threadIdx.x * leaf_per_thread + m;
    run = __dadd_rn(run, j < n ? rv.weight(sm.keys[j]) : 0.0);
    local[m] = run;
  }
  double incl = run;
  for (int o = 1; o < 32; o <<= 1) {
    const double up = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane_id() >= static_cast<unsigned>(o))
      incl = __dadd_rn(up, incl);
  }
  if (lane_id() == 31)
    sm.wscan[warp_id()] = incl;
  __syncthreads();
  double warp_before = 0.0;
  for (unsigned w = 0; w < warp_id(); ++w)
    warp_before = __dadd_rn(warp_before, sm.wscan[w]);
  double lanes_before = __shfl_up_sync(0xffffffffu, incl, 1);
  if (lane_id() == 0)
    lanes_before = 0.0;
  const double excl = __dadd_rn(warp_before, lanes_before);
#pragma unroll
  for (int m = 0; m < leaf_per_thread; ++m) {
    const std::uint32_t j = threadIdx.x * leaf_per_thread + m;
    if (j < n)
      sm.cum[j] = __dadd_rn(a_hi.mass, __dadd_rn(excl, local[m]));
  }
  __syncthreads();
  leaf_state leaf;
  leaf.kind = leaf_kind::gathered;
  leaf.lo = lo;
  leaf.hi = hi;
  leaf.a_hi = a_hi;
  leaf.n = n;
  return leaf;
}

/// A(lo) of a leaf: its tokens added to A(hi).
__device__ prefix leaf_a_lo(const leaf_state& leaf, const sampler_shared& sm) {
  if (leaf.kind == leaf_kind::gathered)
    return {leaf.a_hi.count + leaf.n, leaf.n > 0 ? sm.cum[leaf.n - 1] : leaf.a_hi.mass};
  return {leaf.a_hi.count + leaf.n,
          __dadd_rn(leaf.a_hi.mass, __dmul_rn(static_cast<double>(leaf.n), leaf.e))};
}

/// The first entry of a gathered leaf whose prefix meets `c` (not found
/// when none does).
__device__ position resolve_gathered(const criterion& c, const leaf_state& leaf,
                                     sampler_shared& sm) {
  if (threadIdx.x == 0)
    sm.found = INT_MAX;
  __syncthreads();
#pragma unroll
  for (int m = 0; m < leaf_per_thread; ++m) {
    const std::uint32_t j = threadIdx.x * leaf_per_thread + m;
    if (j < leaf.n && c.holds({leaf.a_hi.count + j + 1, sm.cum[j]})) {
      atomicMin(&sm.found, static_cast<int>(j));
      break;
    }
  }
  __syncthreads();
  position p;
  const int j = sm.found;
  if (j != INT_MAX) {
    p.found = true;
    p.key = sm.keys[j];
    p.rank = leaf.a_hi.count + static_cast<std::uint32_t>(j) + 1;
    p.cum = sm.cum[j];
    p.id = static_cast<std::int32_t>(sm.ids[j]);
  }
  __syncthreads();
  return p;
}

/// The t-th lowest id (1-based) among the tokens of key `key`: tiles of the
/// row, counted by ballots.
__device__ std::int32_t nth_id_of_key(const row_view& rv, std::uint32_t key, std::uint32_t t,
                                      sampler_shared& sm) {
  if (threadIdx.x == 0)
    sm.id = -1;
  std::uint32_t seen = 0;
  for (std::uint32_t start = 0; start < rv.vocab && seen < t; start += sampler_threads) {
    const std::uint32_t i = start + threadIdx.x;
    const bool match = i < rv.vocab && rv.key(i) == key;
    const unsigned ballot = __ballot_sync(0xffffffffu, match);
    if (lane_id() == 0)
      sm.wcount[warp_id()][0] = __popc(ballot);
    __syncthreads();
    std::uint32_t below = 0, total = 0;
    for (int w = 0; w < sampler_warps; ++w) {
      below += static_cast<unsigned>(w) < warp_id() ? sm.wcount[w][0] : 0;
      total += sm.wcount[w][0];
    }
    const std::uint32_t mine = seen + below + __popc(ballot & ((1u << lane_id()) - 1u)) + 1;
    if (match && mine == t)
      sm.id = static_cast<std::int32_t>(i);
    seen += total;
    __syncthreads();
  }
  const std::int32_t id = sm.id;
  __syncthreads();
  return id;
}

/// The first of a key's n ties (each of weight e, after A(key)) whose
/// prefix meets `c`; not found when none does.
__device__ position resolve_ties(const row_view& rv, const criterion& c, const leaf_state& leaf,
                                 sampler_shared& sm) {
  const prefix a = leaf.a_hi;
  const double n = leaf.n;
  auto at = [&](double t) {
    return prefix{a.count + static_cast<std::uint32_t>(t),
                  __dadd_rn(a.mass, __dmul_rn(t, leaf.e))};
  };
  double t = n + 1; // none
  switch (c.kind) {
    case crit_kind::count:
      t = c.k > a.count ? static_cast<double>(c.k - a.count) : 1.0;
      break;
    case crit_kind::mass_ge:
      if (leaf.e > 0.0)
        t = ceil((c.target - a.mass) / leaf.e);
      break;
    case crit_kind::mass_gt:
      if (leaf.e > 0.0)
        t = floor((c.target - a.mass) / leaf.e) + 1.0;
      break;
  }
  t = fmin(fmax(t, 1.0), n + 1);
  // The estimate is within a step or two of the first t that holds.
  for (int step = 0; step < 4 && t > 1.0 && c.holds(at(t - 1.0)); ++step)
    t -= 1.0;
  for (int step = 0; step < 4 && t <= n && !c.holds(at(t)); ++step)
    t += 1.0;
  position p;
  if (t > n || !c.holds(at(t)))
    return p;
  const std::uint32_t key = static_cast<std::uint32_t>(leaf.hi);
  p.found = true;
  p.key = key;
  p.rank = at(t).count;
  p.cum = at(t).mass;
  p.id = nth_id_of_key(rv, key, static_cast<std::uint32_t>(t), sm);
  return p;
}

__device__ position resolve_leaf(const row_view& rv, const criterion& c, const leaf_state& leaf,
                                 sampler_shared& sm) {
  return leaf.kind == leaf_kind::gathered ? resolve_gathered(c, leaf, sm)
                                          : resolve_ties(rv, c, leaf, sm);
}

// -- the search -------------------------------------------------------------------------------

/// The first position (in the order) whose prefix meets `c`, searched in
/// `sp`; not found when even A(sp.lo) does not meet it. `leaf` is the last
/// resolved interval; it is used when it holds the answer and replaced by
/// the interval this search ends in.
__device__ position search(const row_view& rv, criterion c, key_span sp, leaf_state& leaf,
                           sampler_shared& sm) {
  if (leaf.kind != leaf_kind::none && !c.lazy) {
    const prefix lo_side = leaf_a_lo(leaf, sm);
    const bool above = c.holds(leaf.a_hi);
    if (!above && c.holds(lo_side))
      return resolve_leaf(rv, c, leaf, sm);
    if (above) {
      if (static_cast<std::int64_t>(leaf.hi) > sp.lo && leaf.hi < sp.hi) {
        sp.lo = leaf.hi; // (leaf.hi, sp.hi]: its tokens are A(leaf.hi) - A(sp.hi)
        sp.count_known = true;
        sp.count = leaf.a_hi.count - sp.a_hi.count;
        sp.bmin = max(sp.bmin, leaf.hi + 1);
        sp.bmin_f = max(sp.bmin_f, leaf.hi + 1);
      }
    } else {
      if (leaf.lo <= sp.lo)
        return position{}; // beyond the span
      if (leaf.lo < static_cast<std::int64_t>(sp.hi)) {
        sp.hi = static_cast<std::uint32_t>(leaf.lo);
        sp.a_hi = lo_side;
        sp.count_known = false;
        sp.bmax = min(sp.bmax, sp.hi);
      }
    }
  }
  for (int pass = 0; pass < max_passes; ++pass) {
    if (sp.count_known && sp.count <= static_cast<std::uint32_t>(leaf_cap)) {
      leaf = gather_leaf(rv, sp.lo, sp.hi, sp.a_hi, sm);
      c.settle(leaf_a_lo(leaf, sm));
      return resolve_gathered(c, leaf, sm);
    }
    if (sp.count_known && sp.bmin == sp.bmax) {
      leaf.kind = leaf_kind::ties;
      leaf.lo = static_cast<std::int64_t>(sp.bmin) - 1;
      leaf.hi = sp.bmin;
      leaf.a_hi = sp.a_hi;
      leaf.n = sp.count;
      leaf.e = rv.weight(sp.bmin);
      c.settle(leaf_a_lo(leaf, sm));
      return resolve_ties(rv, c, leaf, sm);
    }
    const pass_stats st = narrow_pass(rv, sp, sm);
    const prefix a_lo = extend(sp.a_hi, st.in.count, st.in.mass);
    c.settle(a_lo);
    if (!c.holds(a_lo) || st.in.count == 0)
      return position{};
    // The answer's key is above every pivot whose prefix meets c and at or
    // below the first that does not.
    std::int64_t new_lo = sp.lo;
    std::uint32_t new_hi = sp.hi;
    prefix a_new_lo = a_lo, a_new_hi = sp.a_hi;
    bool hi_set = false;
    for (int j = 0; j < pivots; ++j) {
      const prefix a_j = extend(sp.a_hi, st.above[j].count, st.above[j].mass);
      if (c.holds(a_j)) {
        if (static_cast<std::int64_t>(st.piv[j]) > new_lo) {
          new_lo = st.piv[j];
          a_new_lo = a_j;
        }
      } else if (!hi_set) {
        hi_set = true;
        if (st.piv[j] < new_hi) {
          new_hi = st.piv[j];
          a_new_hi = a_j;
        }
      }
    }
    sp.lo = new_lo;
    sp.hi = new_hi;
    sp.a_hi = a_new_hi;
    sp.count_known = true;
    sp.count = a_new_lo.count - a_new_hi.count;
    sp.bmin = static_cast<std::uint32_t>(max(static_cast<std::int64_t>(st.kmin), new_lo + 1));
    sp.bmax = min(st.kmax, new_hi);
    sp.bmin_f = st.kmin_f == no_key
                  ? no_key
                  : static_cast<std::uint32_t>(max(static_cast<std::int64_t>(st.kmin_f), new_lo + 1));
  }
  return position{};
}

// -- min-p ----------------------------------------------------------------------------------

/// The least key in [lo, hi] whose weight is >= floor (weights grow with
/// keys; hi's is 1 >= floor). Every thread computes the same.
__device__ std::uint32_t min_p_key(const row_view& rv, double floor, std::uint32_t lo, std::uint32_t hi) {
  while (lo < hi) {
    const std::uint32_t mid = lo + (hi - lo) / 2;
    if (rv.weight(mid) >= floor)
      hi = mid;
    else
      lo = mid + 1;
  }
  return hi;
}

/// How many tokens have key >= `key`, summed in a fixed tree.
__device__ std::uint32_t count_from(const row_view& rv, std::uint32_t key, sampler_shared& sm) {
  std::uint32_t c = 0;
  for (std::uint32_t i = threadIdx.x; i < rv.vocab; i += sampler_threads)
    c += rv.key(i) >= key;
  c = __reduce_add_sync(0xffffffffu, c);
  if (lane_id() == 0)
    sm.wcount[warp_id()][0] = c;
  __syncthreads();
  if (threadIdx.x == 0) {
    std::uint32_t total = 0;
    for (int w = 0; w < sampler_warps; ++w)
      total += sm.wcount[w][0];
    sm.n = total;
  }
  __syncthreads();
  const std::uint32_t total = sm.n;
  __syncthreads();
  return total;
}

// -- the kernel -------------------------------------------------------------------------------

/// The tokens of key >= `key`, below A(top) = nothing.
__device__ key_span span_from(std::uint32_t key, const row_summary& s) {
  key_span sp;
  sp.lo = static_cast<std::int64_t>(key) - 1;
  sp.hi = s.kmax;
  sp.bmin = max(key, s.kmin);
  sp.bmax = s.kmax;
  sp.bmin_f = s.kmin_f == no_key ? no_key : max(key, s.kmin_f);
  return sp;
}

__global__ void __launch_bounds__(sampler_threads)
  sample_kernel(const float* __restrict__ logits,          // [seqs, vocab]
                std::uint32_t vocab,
                const sample_params* __restrict__ params, // [seqs]
                std::int32_t* __restrict__ tokens) {      // [seqs]
  __shared__ sampler_shared sm;
  const std::uint32_t seq = blockIdx.x;
  const sample_params sp = params[seq];
  row_view rv{logits + static_cast<std::size_t>(seq) * vocab, vocab, 0.0, 0.0};

  const row_summary s = summarize(rv, sm);
  const bool greedy = !(sp.temperature > 0.0f);
  // A finite max is needed for weights; else the CPU falls back to argmax.
  if (greedy || !finite_key(s.kmax)) {
    if (threadIdx.x == 0)
      tokens[seq] = s.argmax;
    return;
  }
  rv.inv_t = 1.0 / static_cast<double>(sp.temperature);
  rv.mx = __dmul_rn(static_cast<double>(value_of(s.kmax)), rv.inv_t);

  key_span whole;
  whole.lo = -1;
  whole.hi = s.kmax;
  whole.count_known = true;
  whole.count = vocab;
  whole.bmin = s.kmin;
  whole.bmax = s.kmax;
  whole.bmin_f = s.kmin_f;

  leaf_state leaf;
  position limit; // the last kept token, once a cut has been made
  // The last token of the whole order, the CPU's fallback when no cut was
  // made and rounding carries a target past the end.
  auto last_token = [&]() {
    criterion all;
    all.kind = crit_kind::count;
    all.k = vocab;
    return search(rv, all, whole, leaf, sm);
  };

  // min-p and top-k each keep a prefix of the order: the shorter is cut.
  std::uint32_t kept = vocab;
  if (sp.min_p > 0.0f) {
    const double floor = fmin(static_cast<double>(sp.min_p), 1.0);
    kept = count_from(rv, min_p_key(rv, floor, s.kmin, s.kmax), sm);
  }
  if (sp.top_k > 0 && static_cast<std::uint32_t>(sp.top_k) < kept)
    kept = static_cast<std::uint32_t>(sp.top_k);
  if (kept < vocab) {
    criterion c;
    c.kind = crit_kind::count;
    c.k = kept;
    limit = search(rv, c, whole, leaf, sm);
  }
  if (sp.top_p < 1.0f) {
    criterion c;
    c.kind = crit_kind::mass_ge;
    c.factor = static_cast<double>(fmaxf(sp.top_p, 0.0f));
    if (limit.found)
      c.target = __dmul_rn(c.factor, limit.cum);
    else
      c.lazy = true;
    position p = search(rv, c, limit.found ? span_from(limit.key, s) : whole, leaf, sm);
    if (!p.found || (limit.found && p.rank > limit.rank))
      p = limit.found ? limit : last_token();
    limit = p;
  }
  criterion draw;
  draw.kind = crit_kind::mass_gt;
  draw.factor = uniform01(sp.seed, sp.output_index);
  if (limit.found)
    draw.target = __dmul_rn(draw.factor, limit.cum);
  else
    draw.lazy = true;
  position d = search(rv, draw, limit.found ? span_from(limit.key, s) : whole, leaf, sm);
  if (!d.found || (limit.found && d.rank > limit.rank))
    d = limit.found ? limit : last_token();
  if (threadIdx.x == 0)
    tokens[seq] = d.id;
}

constexpr unsigned adjust_threads = 256;

__global__ void __launch_bounds__(adjust_threads)
  adjust_logits_kernel(const float* __restrict__ logits,       // [seqs, vocab]
                       std::uint32_t vocab,
                       const std::uint32_t* __restrict__ indptr, // [seqs + 1]
                       const std::int32_t* __restrict__ tokens,
                       const float* __restrict__ deltas,
                       const std::uint8_t* __restrict__ repeated,
                       const sample_params* __restrict__ params, // [seqs]
                       float* __restrict__ out) {               // [seqs, vocab]
  const std::size_t base = static_cast<std::size_t>(blockIdx.x) * vocab;
  for (std::uint32_t i = threadIdx.x; i < vocab; i += blockDim.x)
    out[base + i] = logits[base + i];
  __syncthreads();
  // The repetition penalty, from the model's logit: a token named twice
  // stores the same value twice.
  const float penalty = params != nullptr ? params[blockIdx.x].repetition_penalty : 1.0f;
  if (penalty != 1.0f && repeated != nullptr) {
    for (std::uint32_t k = indptr[blockIdx.x] + threadIdx.x; k < indptr[blockIdx.x + 1]; k += blockDim.x) {
      const std::int32_t t = tokens[k];
      if (repeated[k] != 0 && t >= 0 && static_cast<std::uint32_t>(t) < vocab)
        out[base + static_cast<std::uint32_t>(t)] = penalize_repeated(logits[base + static_cast<std::uint32_t>(t)], penalty);
    }
    __syncthreads();
  }
  for (std::uint32_t k = indptr[blockIdx.x] + threadIdx.x; k < indptr[blockIdx.x + 1]; k += blockDim.x) {
    const std::int32_t t = tokens[k];
    if (t >= 0 && static_cast<std::uint32_t>(t) < vocab)
      atomicAdd(out + base + static_cast<std::uint32_t>(t), deltas[k]); // a token named twice adds both
  }
}

} // namespace

void adjust_logits(const device_plan& plan, const float* logits, std::uint32_t vocab, float* out,
                   cudaStream_t stream) {
  if (plan.seqs == 0 || vocab == 0 || plan.adjust_indptr == nullptr)
    return;
  adjust_logits_kernel<<<plan.seqs, adjust_threads, 0, stream>>>(
    logits, vocab, plan.adjust_indptr, plan.adjust_tokens, plan.adjust_deltas, plan.adjust_repeated, plan.sampling, out);
}

void sample(const device_plan& plan, const float* logits, std::uint32_t vocab,
            std::int32_t* tokens, cudaStream_t stream) {
  if (plan.seqs == 0)
    return;
  if (vocab == 0) { // the CPU sampler's -1 for empty logits: all bytes 0xff
    TROUPE_CUDA_CHECK(
      cudaMemsetAsync(tokens, 0xff, std::size_t{plan.seqs} * sizeof(std::int32_t), stream));
    return;
  }
  if (vocab > 0x7fffffffu)
    throw std::invalid_argument("sample: a vocabulary of " + std::to_string(vocab) +
                                " does not fit token ids");
  sample_kernel<<<plan.seqs, sampler_threads, 0, stream>>>(logits, vocab, plan.sampling, tokens);
}

} // namespace troupe::gpu::cuda
