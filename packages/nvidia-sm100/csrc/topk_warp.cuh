// Warp-per-row kernels for small k (decode rows) and small merges.
//
// topk_warp_kernel (k <= 224): one warp ranks one row in one read.
//   Each lane keeps P running maxima, each over its own share of the lane's
//   columns (P = 1 for k <= 16, 2 for k <= 32, 4 for k <= 64, 8 for k <=
//   224: so that k is at most half of the 32 P values, or 5/8 of them at k
//   = 129-160, 3/4 at k = 161-192 and 7/8 at k = 193-224, the Wide
//   kernels). The k-th largest of the 32 P values, T,
//   is a lower bound of the row's k-th score (at least k distinct columns
//   are >= T), so columns below T can never be selected. (With one maximum a
//   lane, T at k = 32 was the least of the 32 and let ~3% of a row through:
//   4096 x 4096 took 74 us at k = 32 against 21.5 at k = 16 on the H200;
//   k > 32 kept each lane's two best values and canonicalised every column.)
//   A 1024-column chunk with nothing >= T is
//   skipped; otherwise T is raised and the chunk's columns >= T are appended
//   to a per-warp shared-memory buffer. T only rises, so later chunks append
//   little. At the end the buffer is filtered by the final T and the
//   survivors are ranked (by counting, or a register bitonic sort above 64;
//   at k > 32 first cut to at most 64 / 128 / 256 keys, warp_cut) on the 64-bit key
//   (ordered score << 32 | tie word of the row-local column j; j order is
//   the global index order because g = j * scale + offset with scale >= 1).
//   A chunk with no forced column runs these steps on the float32 values
//   (maxima as a tree, whose last levels give the P maxima; survivors by one
//   float compare against T's float; positions past the row load as NaN);
//   only survivors are canonicalised, read back by position from a per-warp
//   staging copy; T is counted on the lane values rounded down to 16 bits,
//   two values a packed compare (warp_kth16 / warp_kth16p: a bound at most
//   one 16-bit step lower). Chunks that meet forced columns canonicalise
//   every column.
//   (Measured on the H200: 4096 x 4096 k=16 32.6 -> 22.1 us, 16384 x 8192
//   200 -> 129 us, 512 x 1344 6.9 -> 5.4 us; the per-column conversion and
//   the predicated appends had made the kernel issue-bound.)
//   If the buffer overflows (rows built so one lane holds all the large
//   scores, or many exact ties at T), the warp falls back to an exact radix
//   select on the 64-bit key over the row (8 passes of 8 bits) and collects
//   exactly the k keys >= the k-th key. Never a wrong answer, only slower.
//
// merge_warp_kernel (R * k_in <= 256, k <= 256): one warp per row. Sort
//   (index, value) pairs, keep the highest value of each index, sort the keys,
//   write the first k.
//
// Every output slot is written, nothing past a row's valid length matters
// (columns at or past n_r are masked to "invalid" before any use), and the
// only shared state is per warp, so no atomics decide any order.
#pragma once

#include "topk_kernels.cuh"
#include "warp_math.h"

namespace stk_nv {

constexpr int kWarpCap = 256;    // survivor buffer per warp (64-bit keys), k <= 64
constexpr int kWarpCap8 = 512;   // ... and for k = 65-160 (8 maxima a lane)
constexpr int kWarpCap8w = 1024; // ... and for k = 161-224
constexpr int kWarpMaxK = 224;   // the largest k the warp kernel takes
constexpr int kWarpChunk = 1024; // columns per chunk per warp
constexpr int kWarpElems = 32;   // elements per lane per chunk
constexpr int kWarpMaxWpb = 4;   // warps per block, at most

__device__ __forceinline__ int warp_incl_scan(int x) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  return x;
}

// One warp's view of its row.
template <typename T>
struct WarpRow {
  using raw = typename Scalar<T>::raw;
  static constexpr int kEpv = 16 / sizeof(raw);            // elements per 16-byte vector
  static constexpr int kNv = kWarpElems / kEpv;             // vectors per lane per chunk
  const raw* base;  // column 0 of the row
  int64_t a0;       // first chunk starts here (<= 0; base + a0 is 16-byte aligned)
  int64_t n;        // valid columns
  int64_t jfb, jfe; // forced iff j < jfb or j >= jfe
  int64_t u0, u1;   // chunks u0 <= c < u1 have no forced column (unforced)
  int64_t f1;       // chunks fb <= c < f1 are whole and aligned (load's fast case)
  int fb;
  bool vec;

  __device__ void init(const raw* b, int64_t n_, const RowCtx& c) {
    base = b;
    n = n_;
    const uintptr_t a = reinterpret_cast<uintptr_t>(b) & 15u;
    vec = (a % sizeof(raw)) == 0;
    a0 = vec ? -int64_t(a / sizeof(raw)) : 0;
    // forced iff g < force_begin or g >= L - force_end, with g = j*scale + offset
    auto first_j_at_least = [&](int64_t gmin) -> int64_t {  // smallest j with g >= gmin
      const int64_t t = gmin - c.offset;
      const int64_t j = t <= 0 ? 0 : (t + c.scale - 1) / c.scale;
      return j < n ? j : n;
    };
    jfb = first_j_at_least(c.force_begin);
    jfe = c.length - c.force_end <= c.force_begin ? jfb : first_j_at_least(c.length - c.force_end);
    if (jfe < jfb) jfe = jfb;
    // the per-chunk tests below as chunk ranges, worked out once per row (the
    // 64-bit compares had cost ~35 instructions a chunk); n - a0 >= 0
    const int64_t span = n > 0 ? n - a0 : 0;
    fb = a0 < 0 ? 1 : 0;  // lo >= 0
    f1 = vec ? span / kWarpChunk : 0;  // lo + kWarpChunk <= n
    u0 = jfb > 0 ? (jfb - a0 + kWarpChunk - 1) / kWarpChunk : 0;  // max(lo, 0) >= jfb
    u1 = jfe < n ? (jfe - a0) / kWarpChunk : INT64_MAX;        // min(hi, n) <= jfe
  }
  __device__ __forceinline__ int64_t chunks() const { return (n - a0 + kWarpChunk - 1) / kWarpChunk; }
  __device__ __forceinline__ int64_t col(int64_t c, int v, int i) const {
    return a0 + c * kWarpChunk + int64_t(v) * (32 * kEpv) + int64_t(threadIdx.x & 31) * kEpv + i;
  }

  // Raw 16-byte vectors of chunk c (positions outside [0, n) are not read:
  // they hold NaN, which no float compare passes and fmaxf skips).
  static constexpr raw kRawNaN = raw(sizeof(raw) == 4 ? 0x7fffffffu : 0x7fffu);
  __device__ __forceinline__ void load(int64_t c, uint4 (&r)[kNv]) const {
    const int64_t lo = a0 + c * kWarpChunk;
    if (c >= fb && c < f1) {  // whole chunk valid: plain vector loads
      const uint4* q = reinterpret_cast<const uint4*>(base + lo) + (threadIdx.x & 31);
#pragma unroll
      for (int v = 0; v < kNv; ++v) r[v] = __ldg(q + v * 32);
      return;
    }
#pragma unroll
    for (int v = 0; v < kNv; ++v) {
      const int64_t q = col(c, v, 0);
      if (vec && q >= 0 && q + kEpv <= n) {
        r[v] = __ldg(reinterpret_cast<const uint4*>(base + q));
      } else {
        union {
          uint4 q4;
          raw t[kEpv];
        } w;
#pragma unroll
        for (int i = 0; i < kEpv; ++i) w.t[i] = (q + i >= 0 && q + i < n) ? base[q + i] : kRawNaN;
        r[v] = w.q4;
      }
    }
  }

  // Calls f(u, key) for every position of every chunk, the whole warp in
  // step (u == 0: invalid position, key then meaningless). Fallback passes.
  template <class F>
  __device__ __forceinline__ void for_each_key(int tie, F f) const {
    const int64_t nch = chunks();
    for (int64_t c = 0; c < nch; ++c) {
      uint4 r[kNv];
      uint32_t u[kWarpElems];
      load(c, r);
      convert(c, r, u);
#pragma unroll
      for (int v = 0; v < kNv; ++v)
#pragma unroll
        for (int i = 0; i < kEpv; ++i) {
          const uint32_t uu = u[v * kEpv + i];
          f(uu, uu ? stk::make_key(uu, uint32_t(col(c, v, i)), tie) : 0ull);
        }
    }
  }

  // True iff no valid column of chunk c is forced.
  __device__ __forceinline__ bool unforced(int64_t c) const { return c >= u0 && c < u1; }
  // True iff chunk c has positions outside [0, n).
  __device__ __forceinline__ bool edge(int64_t c) const {
    const int64_t lo = a0 + c * kWarpChunk;
    return lo < 0 || lo + kWarpChunk > n;
  }

  // The chunk's scores widened to float32 (no canonicalisation).
  __device__ __forceinline__ void widen(const uint4 (&r)[kNv], float (&x)[kWarpElems]) const {
#pragma unroll
    for (int v = 0; v < kNv; ++v) {
      const uint32_t w[4] = {r[v].x, r[v].y, r[v].z, r[v].w};
#pragma unroll
      for (int i = 0; i < kEpv; ++i)
        x[v * kEpv + i] = __uint_as_float(
            sizeof(raw) == 4 ? w[i] : Scalar<T>::f32(raw((w[i / 2] >> (16 * (i & 1))) & 0xffffu)));
    }
  }

  // Ordered canonical scores of chunk c (0 = invalid, forcing applied).
  __device__ __forceinline__ void convert(int64_t c, const uint4 (&r)[kNv], uint32_t (&u)[kWarpElems]) const {
#pragma unroll
    for (int v = 0; v < kNv; ++v) {
      const uint32_t w[4] = {r[v].x, r[v].y, r[v].z, r[v].w};
#pragma unroll
      for (int i = 0; i < kEpv; ++i) {
        uint32_t bits;
        if (sizeof(raw) == 4)
          bits = w[i];
        else
          bits = Scalar<T>::f32(raw((w[i / 2] >> (16 * (i & 1))) & 0xffffu));
        u[v * kEpv + i] = stk::ordered_canonical_u32(bits);
      }
    }
    const int64_t lo = a0 + c * kWarpChunk, hi = lo + kWarpChunk;
    if (lo < 0 || hi > n) {  // edge chunk: mask positions outside [0, n)
#pragma unroll
      for (int v = 0; v < kNv; ++v)
#pragma unroll
        for (int i = 0; i < kEpv; ++i) {
          const int64_t j = col(c, v, i);
          if (j < 0 || j >= n) u[v * kEpv + i] = 0u;
        }
    }
    if (lo < jfb || hi > jfe) {  // chunk meets a forced range
#pragma unroll
      for (int v = 0; v < kNv; ++v)
#pragma unroll
        for (int i = 0; i < kEpv; ++i) {
          const int64_t j = col(c, v, i);
          if (j >= 0 && j < n && (j < jfb || j >= jfe)) u[v * kEpv + i] = stk::kOrderedPosInf;
        }
    }
  }
};

// Maximum of 32 floats as a tree (short dependency chain), NaN skipped.
__device__ __forceinline__ float tree_fmax(const float (&x)[kWarpElems]) {
  static_assert(kWarpElems == 32, "tree below is for 32 values");
  float a[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) a[i] = fmaxf(fmaxf(x[i], x[i + 8]), fmaxf(x[i + 16], x[i + 24]));
#pragma unroll
  for (int i = 0; i < 4; ++i) a[i] = fmaxf(a[i], a[i + 4]);
  return fmaxf(fmaxf(a[0], a[2]), fmaxf(a[1], a[3]));
}

// The same for a chunk of 32 16-bit scores kept packed (4 vectors): a tree
// of 15 max.{b}f16x2 (NaN skipped, as fmaxf), then the larger half. Returns
// the maximum's float32 bits.
template <typename T>
__device__ __forceinline__ uint32_t tree_max16(const uint4 (&r)[4]) {
  uint32_t w[4];
#pragma unroll
  for (int v = 0; v < 4; ++v) w[v] = max16x2<T>(max16x2<T>(r[v].x, r[v].y), max16x2<T>(r[v].z, r[v].w));
  uint32_t m = max16x2<T>(max16x2<T>(w[0], w[1]), max16x2<T>(w[2], w[3]));
  m = max16x2<T>(m, __byte_perm(m, 0, 0x1032));  // both halves: the larger
  return Scalar<T>::f32(typename Scalar<T>::raw(m & 0xffffu));
}

// The maxima of P disjoint shares of the 32 floats (the tree's last levels;
// share q: elements e = q mod P), NaN skipped.
template <int P>
__device__ __forceinline__ void tree_fmax_p(const float (&x)[kWarpElems], float (&pmx)[P]) {
  static_assert(P == 2 || P == 4 || P == 8, "two, four or eight shares");
  float a[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) a[i] = fmaxf(fmaxf(x[i], x[i + 8]), fmaxf(x[i + 16], x[i + 24]));
  if constexpr (P == 8) {
#pragma unroll
    for (int q = 0; q < 8; ++q) pmx[q] = a[q];
    return;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) a[i] = fmaxf(a[i], a[i + 4]);
#pragma unroll
  for (int q = 0; q < P; ++q) pmx[q] = P == 4 ? a[q] : fmaxf(a[q], a[q + 2]);
}

// The same for 32 packed 16-bit scores: P float32 bits. The tree first takes
// each 32-bit component (two element positions) over the lane's 4 vectors, so
// every share holds columns of vector 0 and a short row (a lane's later
// vectors past its end) still offers P maxima a lane: share q of P = 8: one
// element position; of P = 4: components 0-1 / 2-3, halves; of P = 2: the
// even / odd columns (the halves). (Shares of whole vectors left rows under
// ~3/4 of a chunk with too few lane values for k > 64, and the fallback ran.)
template <typename T, int P>
__device__ __forceinline__ void tree_max16_p(const uint4 (&r)[4], uint32_t (&pmx)[P]) {
  static_assert(P == 2 || P == 4 || P == 8, "two, four or eight shares");
  const auto over_vectors = [&](auto get) {
    return max16x2<T>(max16x2<T>(get(r[0]), get(r[1])), max16x2<T>(get(r[2]), get(r[3])));
  };
  const uint32_t w[4] = {over_vectors([](const uint4& u) { return u.x; }),
                         over_vectors([](const uint4& u) { return u.y; }),
                         over_vectors([](const uint4& u) { return u.z; }),
                         over_vectors([](const uint4& u) { return u.w; })};
  using raw = typename Scalar<T>::raw;
  if constexpr (P == 8) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      pmx[2 * i] = Scalar<T>::f32(raw(w[i] & 0xffffu));
      pmx[2 * i + 1] = Scalar<T>::f32(raw(w[i] >> 16));
    }
    return;
  }
  const uint32_t lo = max16x2<T>(w[0], w[1]), hi = max16x2<T>(w[2], w[3]);
  if constexpr (P == 2) {
    const uint32_t m = max16x2<T>(lo, hi);
    pmx[0] = Scalar<T>::f32(raw(m & 0xffffu));
    pmx[1] = Scalar<T>::f32(raw(m >> 16));
  } else {
    pmx[0] = Scalar<T>::f32(raw(lo & 0xffffu));
    pmx[1] = Scalar<T>::f32(raw(lo >> 16));
    pmx[2] = Scalar<T>::f32(raw(hi & 0xffffu));
    pmx[3] = Scalar<T>::f32(raw(hi >> 16));
  }
}

__device__ __forceinline__ uint64_t warp_key(uint32_t u, int64_t j, int tie) {
  return stk::make_key(u, uint32_t(j), tie);
}

// Per-warp shared memory (Cap: survivor keys).
template <int Cap>
struct __align__(16) WarpSmemT {
  static constexpr int kCap = Cap;
  uint64_t cand[Cap];
  uint32_t hist[256];  // radix fallback; lane values for the threshold
  uint4 stage[kWarpChunk * 4 / 16];  // the chunk's raw vectors, for survivors by position
};
// k <= 64 keep 256 survivors; 8 maxima a lane (k = 65-160) admit about twice
// as many before the final filter (a model of N(0, 1) rows: ~580 appended at
// 16384 columns, k = 128, ~180 left; k = 160 ~490-670 appended at 4096-8192
// columns, ~250 left, ci/warp_bound_model.py), so 512; k = 161-224 (Wide =
// 2) ~470-1130 appended at 2048-16384 columns at k = 192, ~350 left (at most
// ~450 in 30 rows a width), ~660-1610 and ~520 (at most ~680) at k = 224, so
// 1024. Its 13 KB a warp allow 3 warps a block under the 48 KB of static
// shared memory.
__host__ __device__ constexpr int warp_cap(int P, int Wide = 0) {
  return P == 8 ? (Wide == 2 ? kWarpCap8w : kWarpCap8) : kWarpCap;
}
template <int P, int Wide = 0>
using WarpSmem = WarpSmemT<warp_cap(P, Wide)>;
__host__ __device__ constexpr int warp_max_wpb(int P, int Wide = 0) {
  return warp_cap(P, Wide) > 512 ? 3 : kWarpMaxWpb;
}

// warp_bitonic with its stage loops rolled, the in-register steps (d < P)
// still unrolled: the same steps in a fraction of the code. For the sorts of
// the 8-maxima kernel (see warp_finish): with ragged rows the streaming and
// the sorting code run side by side on an SM, and unrolled sort bodies then
// measured far slower than on full rows.
template <int P, bool DESC, typename V>
__device__ __forceinline__ void warp_bitonic_rolled(V (&v)[P]) {
  const int lane = threadIdx.x & 31;
  constexpr int N = 32 * P;
#pragma unroll 1
  for (int s = 2; s <= N; s <<= 1) {
#pragma unroll 1
    for (int d = s >> 1; d >= P; d >>= 1) bitonic_step_across<P, DESC>(v, lane, s, d);
#pragma unroll
    for (int d = P >> 1; d > 0; d >>= 1)
      if (d < s) bitonic_step_within<P, DESC>(v, lane, s, d);
  }
}

template <int P, bool DESC, bool Rolled, typename V>
__device__ __forceinline__ void warp_sort_keys(V (&v)[P]) {
  if constexpr (Rolled && P >= 4) warp_bitonic_rolled<P, DESC>(v);
  else warp_bitonic<P, DESC>(v);
}

// Writes the row's output from the sorted keys (descending, P per lane).
// Keys hold the row-local column j in their low word; 0 = empty.
// Rolled: the keys sort with warp_bitonic_rolled (the 8-maxima kernel only;
// the other kernels keep their measured code).
template <int P, bool Rolled = false>
__device__ __forceinline__ void warp_emit(uint64_t (&v)[P], int k, int order, int tie, const RowCtx& c,
                                          const OutRow& out) {
  const int lane = threadIdx.x & 31;
  if (order == stk::kOrderIndex) {
    // members are the first k sorted keys; re-sort them by ascending j
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int e = lane * P + p;
      const uint64_t x = v[p];
      const uint32_t j = stk::key_index(x, tie);
      v[p] = (e < k && x != 0) ? ((uint64_t(0xffffffffu - j) << 32) | uint32_t(x >> 32)) : 0ull;
    }
    warp_sort_keys<P, true, Rolled>(v);
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const uint64_t x = v[p];
      const uint32_t j = 0xffffffffu - uint32_t(x >> 32);
      v[p] = x ? stk::make_key(uint32_t(x), j, tie) : 0ull;
    }
  }
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int e = lane * P + p;
    if (e < k) {
      const uint64_t x = v[p];
      if (x != 0) {
        const int64_t j = stk::key_index(x, tie);
        out.idx[e] = int32_t(j * c.scale + c.offset);
        if (out.val) out.val[e] = __uint_as_float(stk::key_value_bits(x));
      } else {
        out.idx[e] = -1;
        if (out.val) out.val[e] = -__int_as_float(0x7f800000);
      }
    }
  }
}

// Sorts the first S keys of buf (S <= 32*P) and writes the output.
template <int P, bool Rolled>
__device__ __forceinline__ void warp_sort_emit(const uint64_t* buf, int S, int k, int order, int tie,
                                               const RowCtx& c, const OutRow& out) {
  const int lane = threadIdx.x & 31;
  uint64_t v[P];
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int e = lane * P + p;
    v[p] = e < S ? buf[e] : 0ull;
  }
  warp_sort_keys<P, true, Rolled>(v);
  warp_emit<P, Rolled>(v, k, order, tie, c, out);
}

// Keeps the first cnt entries of buf for which keep(key) holds (order preserved).
template <class Pred>
__device__ __forceinline__ int warp_compact(uint64_t* buf, int cnt, Pred keep) {
  const int lane = threadIdx.x & 31;
  int out = 0;
  for (int b = 0; b < cnt; b += 32) {
    const int i = b + lane;
    const uint64_t x = i < cnt ? buf[i] : 0ull;
    const bool kept = i < cnt && keep(x);
    const uint32_t bal = __ballot_sync(0xffffffffu, kept);
    __syncwarp();
    if (kept) buf[out + __popc(bal & ((1u << lane) - 1u))] = x;
    out += __popc(bal);
    __syncwarp();
  }
  return out;
}

// Keeps the buffer entries whose ordered score is >= Tadm (order preserved).
__device__ __forceinline__ int warp_filter(uint64_t* buf, int cnt, uint32_t Tadm) {
  return warp_compact(buf, cnt, [Tadm](uint64_t x) { return uint32_t(x >> 32) >= Tadm; });
}

// Warp-wide reductions for cut_threshold (warp_math.h).
struct WarpReduce {
  __device__ __forceinline__ uint32_t max(uint32_t x) const { return __reduce_max_sync(0xffffffffu, x); }
  __device__ __forceinline__ uint32_t bor(uint32_t x) const { return __reduce_or_sync(0xffffffffu, x); }
  __device__ __forceinline__ uint32_t add(uint32_t x) const { return __reduce_add_sync(0xffffffffu, x); }
};

// Cuts the S keys of buf (keep < S <= 32 Q, distinct, k <= keep) to the
// k..keep keys >= cut_threshold's key, for a sort of keep keys or the
// counting rank: they hold the top k. Q keys a lane, each search step one
// warp-wide count. Returns the keys kept.
template <int Q>
__device__ __forceinline__ int warp_cut(uint64_t* buf, int S, int k, int keep) {
  const int lane = threadIdx.x & 31;
  uint32_t hw[Q], lw[Q];  // score and tie words; 0 past S (every score is >= 1)
#pragma unroll
  for (int i = 0; i < Q; ++i) {
    const int e = i * 32 + lane;
    const uint64_t x = e < S ? buf[e] : 0ull;
    hw[i] = uint32_t(x >> 32);
    lw[i] = uint32_t(x);
  }
  const uint64_t Lk = cut_threshold<Q>(hw, lw, S, k, keep, [&](int i) { return i * 32 + lane < S; }, WarpReduce{});
  return warp_compact(buf, S, [Lk](uint64_t x) { return x >= Lk; });
}

// Room in the buffer for this chunk's survivors (`mine` in this lane): the
// warp's inclusive scan of them (*incl) and their total (*inc). A full
// buffer is first compacted against Tadm. False: they still do not fit.
template <class Sm>
__device__ __forceinline__ bool warp_reserve(int mine, uint32_t Tadm, Sm& sm, int& cnt, int* incl, int* inc) {
  if (__all_sync(0xffffffffu, mine <= 1)) {
    // at most one survivor a lane (most chunks once T has risen): one ballot
    // instead of the five-step shuffle scan
    const uint32_t b = __ballot_sync(0xffffffffu, mine);
    *incl = __popc(b & (0xffffffffu >> (31 - (threadIdx.x & 31))));
    *inc = __popc(b);
  } else {
    *incl = warp_incl_scan(mine);
    *inc = __shfl_sync(0xffffffffu, *incl, 31);
  }
  if (cnt + *inc > Sm::kCap) cnt = warp_filter(sm.cand, cnt, Tadm);
  return cnt + *inc <= Sm::kCap;
}

// Exact fallback: radix select on the 64-bit key over the whole row, then the
// k keys >= Tk are collected into buf. Returns their count (== k).
template <typename T, class Sm>
__device__ int warp_radix_fallback(const WarpRow<T>& row, int k, int tie, Sm& sm) {
  const int lane = threadIdx.x & 31;
  uint64_t prefix = 0;
  int kk = k;
  int depth = 0;  // bits fixed so far
  for (; depth < 64; depth += 8) {
    for (int i = lane; i < 256; i += 32) sm.hist[i] = 0;
    __syncwarp();
    row.for_each_key(tie, [&](uint32_t uu, uint64_t key) {
      if (uu != 0 && (depth == 0 || (key >> (64 - depth)) == prefix))
        atomicAdd(&sm.hist[uint32_t(key >> (56 - depth)) & 255u], 1u);
    });
    __syncwarp();
    // lane L holds bins 255-8L .. 248-8L (descending)
    uint32_t h[8];
    uint32_t tot = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      h[i] = sm.hist[255 - (lane * 8 + i)];
      tot += h[i];
    }
    const int incl = warp_incl_scan(int(tot));
    const uint32_t bal = __ballot_sync(0xffffffffu, incl >= kk);
    const int L = __ffs(bal) - 1;  // exists: the row has > k valid columns
    int above = __shfl_sync(0xffffffffu, incl - int(tot), L);
    int digit = 0, cnt = 0;
    if (lane == L) {
      int acc = above;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        if (acc + int(h[i]) >= kk) {
          digit = 255 - (lane * 8 + i);
          cnt = int(h[i]);
          above = acc;
          break;
        }
        acc += int(h[i]);
      }
    }
    digit = __shfl_sync(0xffffffffu, digit, L);
    cnt = __shfl_sync(0xffffffffu, cnt, L);
    above = __shfl_sync(0xffffffffu, above, L);
    prefix = (prefix << 8) | uint64_t(digit);
    kk -= above;
    __syncwarp();
    if (cnt == kk) {  // the whole bin is taken: threshold at its bottom
      depth += 8;
      break;
    }
  }
  const uint64_t Tk = depth >= 64 ? prefix : (prefix << (64 - depth));
  // collect the keys >= Tk (exactly k of them)
  int cnt = 0;
  row.for_each_key(tie, [&](uint32_t uu, uint64_t key) {
    const bool take = uu != 0 && key >= Tk;
    const uint32_t bal = __ballot_sync(0xffffffffu, take);
    if (take) {
      const int pos = cnt + __popc(bal & ((1u << lane) - 1u));
      if (pos < Sm::kCap) sm.cand[pos] = key;
    }
    cnt += __popc(bal);
  });
  __syncwarp();
  return min(cnt, Sm::kCap);
}

// k-th largest of the 32 lane values (a multiset): the largest value v with
// at least k values >= v. Counted against a shared-memory copy (cheaper than
// a shuffle network: broadcast loads, no dependent chain).
__device__ __forceinline__ uint32_t warp_kth(uint32_t m1, int k, uint32_t* lv) {
  const int lane = threadIdx.x & 31;
  lv[lane] = m1;
  __syncwarp();
  int g1 = 0;
  const uint4* q4 = reinterpret_cast<const uint4*>(lv);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint4 q = q4[i];
    g1 += (q.x >= m1) + (q.y >= m1) + (q.z >= m1) + (q.w >= m1);
  }
  const uint32_t t = g1 >= k ? m1 : 0u;
  __syncwarp();
  return __reduce_max_sync(0xffffffffu, t);
}

// Rank by counting, for S <= 64 distinct keys in buf: lane takes entries
// lane and lane + 32. Writes the output (every slot).
__device__ __forceinline__ void warp_count_emit(const uint64_t* buf, int S, int k, int order, int tie,
                                                const RowCtx& c, const OutRow& out) {
  const int lane = threadIdx.x & 31;
  const uint64_t x0 = lane < S ? buf[lane] : 0ull;
  const uint64_t x1 = lane + 32 < S ? buf[lane + 32] : 0ull;
  int r0 = 0, r1 = 0;
  // unrolled: the shared loads of several entries in flight at once
  // (measured on the H200: 4096 x 4096 21.72 -> 21.61 us, 512 x 1344 even)
#pragma unroll 8
  for (int q = 0; q < S; ++q) {
    const uint64_t y = buf[q];
    r0 += y > x0;
    r1 += y > x1;
  }
  const int kk = min(k, S);
  if (order == stk::kOrderIndex) {
    // members: rank < kk; position = members with a smaller column
    const uint32_t j0 = stk::key_index(x0, tie), j1 = stk::key_index(x1, tie);
    const bool in0 = lane < S && r0 < kk, in1 = lane + 32 < S && r1 < kk;
    int p0 = 0, p1 = 0;
    // the kk-th key: entry of rank kk-1
    uint64_t tk = (lane < S && r0 == kk - 1) ? x0 : ((lane + 32 < S && r1 == kk - 1) ? x1 : 0ull);
    tk = vmax(tk, warp_shfl_xor(tk, 1));
    tk = vmax(tk, warp_shfl_xor(tk, 2));
    tk = vmax(tk, warp_shfl_xor(tk, 4));
    tk = vmax(tk, warp_shfl_xor(tk, 8));
    tk = vmax(tk, warp_shfl_xor(tk, 16));
#pragma unroll 8
    for (int q = 0; q < S; ++q) {
      const uint64_t y = buf[q];
      const uint32_t jy = stk::key_index(y, tie);
      const bool m = y >= tk;
      p0 += m && jy < j0;
      p1 += m && jy < j1;
    }
    r0 = p0;
    r1 = p1;
    if (!in0) r0 = k;
    if (!in1) r1 = k;
  }
  auto put = [&](int pos, uint64_t x) {
    const int64_t j = stk::key_index(x, tie);
    out.idx[pos] = int32_t(j * c.scale + c.offset);
    if (out.val) out.val[pos] = __uint_as_float(stk::key_value_bits(x));
  };
  if (lane < S && r0 < kk) put(r0, x0);
  if (lane + 32 < S && r1 < kk) put(r1, x1);
  for (int pos = kk + lane; pos < k; pos += 32) {
    out.idx[pos] = -1;
    if (out.val) out.val[pos] = -__int_as_float(0x7f800000);
  }
}

// Ranks the S survivors of buf (S <= the kernel's buffer, distinct keys) and
// writes the output, every slot. At most 64 are ranked by counting. Above
// that, k = 33-64 (P = 4) cuts them to at most 64 first (warp_cut), so that
// kernel has no sort; k = 65-128 (P = 8) cuts 129-256 to at most 128 and
// sorts 128 keys whatever S (512 for rare rows); k = 129-224 (P = 8, Wide)
// cuts 257-512 to at most 256 (sixteen keys a lane; 513-1024, thirty-two a
// lane, only at k = 161-224) and sorts 256 keys whatever S. Both sort with
// their stage loops
// rolled: rows alternating between sorts of different sizes, or unrolled
// sort bodies, measured slower, most on ragged rows where the streaming and
// the sorting of the warps of an SM interleave (H200, fp32, 16384 x 8192,
// lengths in [4096, 8192], k = 96: 471 us with the unrolled 256-key sort,
// 276 rolled, 220 cut to 128 and rolled; likely instruction-cache misses);
// k <= 32 sorts 128 or 256 keys, unrolled.
template <int P, int Wide>
__device__ __forceinline__ void warp_finish(uint64_t* buf, int S, int k, int order, int tie, const RowCtx& c,
                                            const OutRow& out) {
  if constexpr (P == 4) {
    if (S > 64) S = warp_cut<8>(buf, S, k, 64);
  }
  if (P == 4 || S <= 64) {
    warp_count_emit(buf, S, k, order, tie, c, out);
  } else if constexpr (P == 8) {
    if constexpr (Wide) {
      if (Wide == 2 && S > 512) S = warp_cut<32>(buf, S, k, 256);  // only Wide = 2 holds > 512
      else if (S > 256) S = warp_cut<16>(buf, S, k, 256);
      warp_sort_emit<8, true>(buf, S, k, order, tie, c, out);
    } else if (S > 256) {
      warp_sort_emit<16, true>(buf, S, k, order, tie, c, out);
    } else {
      if (S > 128) S = warp_cut<8>(buf, S, k, 128);
      warp_sort_emit<4, true>(buf, S, k, order, tie, c, out);
    }
  } else {
    // k <= 32 < S, so need > 64; the two smaller sorts are never taken, but
    // without them the k <= 32 kernels' registers changed (their measured code
    // is kept)
    const int need = max(S, k);
    if (need <= 32)
      warp_sort_emit<1, false>(buf, S, k, order, tie, c, out);
    else if (need <= 64)
      warp_sort_emit<2, false>(buf, S, k, order, tie, c, out);
    else if (need <= 128)
      warp_sort_emit<4, false>(buf, S, k, order, tie, c, out);
    else
      warp_sort_emit<8, false>(buf, S, k, order, tie, c, out);
  }
}

// warp_kth for the unforced float path, with the count two lanes a packed
// compare: each lane value is rounded down to 16 bits (C: bf16, or f16 for
// f16 rows, where it is exact), and the lanes whose rounded value is >= this
// lane's are counted by 16 set.ge over the 32 (a true half adds 0xffff to a
// 32-bit sum, decoded by half_counts) instead of 32 compares and selects.
// Returns the largest rounded value b with at least k rounded values >= b, as an ordered
// canonical score: each lane counted has m >= its rounded value >= b, so at
// least k distinct columns score >= it. A lower bound of the row's k-th like
// warp_kth's, at most one 16-bit step below it. A lane with no valid column
// (m == 0, NaN here) counts nowhere.
template <typename C>
__device__ __forceinline__ uint32_t warp_kth16(uint32_t m1, int k, uint32_t* lv) {
  const int lane = threadIdx.x & 31;
  const float f = __uint_as_float(stk::unordered_u32(m1));
  uint16_t b;
  if constexpr (std::is_same_v<C, f16_tag>) b = __half_as_ushort(__float2half_rd(f));
  else b = __bfloat16_as_ushort(__float2bfloat16_rd(f));
  reinterpret_cast<uint16_t*>(lv)[lane] = b;
  __syncwarp();
  const uint32_t b2 = uint32_t(b) * 0x10001u;
  const uint4* q4 = reinterpret_cast<const uint4*>(lv);
  uint32_t s0 = 0, s1 = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint4 q = q4[i];
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
    uint32_t m[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) m[j] = set_ge16x2<C>(w[j], b2);
    s0 += m[0] + m[1];
    s1 += m[2] + m[3];
  }
  __syncwarp();
  uint32_t t = 0u;
  if (int(half_counts(s0 + s1)) >= k) t = stk::ordered_nonnan_u32(Scalar<C>::f32(b));  // b is not NaN here
  return __reduce_max_sync(0xffffffffu, t);
}

// A lane value (ordered canonical score) rounded down to 16 bits (C: bf16,
// or f16 for f16 rows), in both halves of a word; NaN for 0 (none).
template <typename C>
__device__ __forceinline__ uint32_t round16x2(uint32_t u) {
  const float f = __uint_as_float(stk::unordered_u32(u));
  uint16_t b;
  if constexpr (std::is_same_v<C, f16_tag>) b = __half_as_ushort(__float2half_rd(f));
  else b = __bfloat16_as_ushort(__float2bfloat16_rd(f));
  return uint32_t(b) * 0x10001u;
}

// The R-th largest of eight values (R = 4 to 7): the two halves sorted (five
// compare-exchanges each), then max over i + j = R of min(a_i, b_j), the i-th
// and j-th largest of the halves (a_0 = b_0 = +inf; i, j <= 4). Where k picks
// R at run time (the sixth or the seventh), the halves are sorted once.
__device__ __forceinline__ void sort_halves_of_eight(const uint32_t (&v)[8], uint32_t (&a)[4], uint32_t (&b)[4]) {
  auto cx = [](uint32_t& x, uint32_t& y) {  // x >= y after
    const uint32_t h = max(x, y);
    y = min(x, y);
    x = h;
  };
#pragma unroll
  for (int i = 0; i < 4; ++i) a[i] = v[i], b[i] = v[4 + i];
  cx(a[0], a[1]), cx(a[2], a[3]), cx(a[0], a[2]), cx(a[1], a[3]), cx(a[1], a[2]);
  cx(b[0], b[1]), cx(b[2], b[3]), cx(b[0], b[2]), cx(b[1], b[3]), cx(b[1], b[2]);
}
template <int R>
__device__ __forceinline__ uint32_t rth_of_halves(const uint32_t (&a)[4], const uint32_t (&b)[4]) {
  static_assert(R >= 4 && R <= 7, "the fourth to the seventh");
  if constexpr (R == 7) return max(min(a[2], b[3]), min(a[3], b[2]));
  if constexpr (R == 6) return max(max(min(a[1], b[3]), min(a[2], b[2])), min(a[3], b[1]));
  if constexpr (R == 5) return max(max(min(a[0], b[3]), min(a[1], b[2])), max(min(a[2], b[1]), min(a[3], b[0])));
  return max(max(max(a[3], b[3]), min(a[0], b[2])), max(min(a[1], b[1]), min(a[2], b[0])));
}

// warp_kth16 for P values a lane (P = 2, 4 or 8: the lane's maxima of its
// own disjoint column shares): the lanes store their values rounded down to
// 16 bits as P / 2 words of two halves, and each lane counts the halves >= a
// value of its own over all 16 P words (16 P packed compares a value). The
// values counted: both (P = 2), or one a lane, the one where the k-th of the
// 32 P values tends to sit: the second largest (P = 4, k = 33-64: the k-th
// of 128 lies in the upper half; counting the second and third measured
// 10-14% slower on long rows at k = 48 / 64 and within 2% at 4096 x 4096,
// H200, and counting all four 23-30% slower), the fourth largest (P = 8, k
// = 65-128: in a model of N(0, 1) rows as good as the exact k-th of the 256
// for every k there, where the second largest leaves k = 128 with no bound),
// the fifth largest (Wide, k = 129-160, rth_of_halves<5>: with the
// fourth, some rows at k = 160 found no bound until late, overflowed the
// 512-key buffer and took the radix fallback, 5 of 4096 and 17 of 16384 on
// the H100, none with the fifth; 4096 x 4096 ragged 94.2 -> 67.2 us), the
// sixth (Wide = 2, k = 161-192: in the model within ~2% of the exact k-th's
// appends and survivors, where the fifth appends up to ~30% more) or the
// seventh (k = 193-224: the sixth appends up to ~45% more at k = 224).
// Returns the largest counted value with at least k of the 32 P values >= it
// (0 when none qualifies): at least k distinct columns score >= it, so it is
// a valid bound, at most one 16-bit step below the exact k-th for P = 2 and
// lower at times for P = 4 and 8.
template <typename C, int P, int Wide = 0>
__device__ __forceinline__ uint32_t warp_kth16p(const uint32_t (&pm)[P], int k, uint32_t* lv) {
  static_assert(P == 2 || P == 4 || P == 8, "two, four or eight values a lane");
  constexpr int NC = P == 2 ? 2 : 1;  // values counted a lane
  uint32_t cu[NC];
  if constexpr (P == 2) {
    cu[0] = pm[0];
    cu[1] = pm[1];
  } else if constexpr (P == 4) {
    // the lower of the pairs' maxima or the higher of their minima, whichever is larger
    const uint32_t a = max(pm[0], pm[1]), b = min(pm[0], pm[1]), c = max(pm[2], pm[3]), d = min(pm[2], pm[3]);
    const uint32_t lo_top = min(a, c), hi_bot = max(b, d);
    cu[0] = max(lo_top, hi_bot);  // the second largest of the four
  } else {
    uint32_t a[4], b[4];
    sort_halves_of_eight(pm, a, b);
    if constexpr (Wide == 2) cu[0] = k > 192 ? rth_of_halves<7>(a, b) : rth_of_halves<6>(a, b);
    else cu[0] = rth_of_halves<4 + Wide>(a, b);
  }
  const int lane = threadIdx.x & 31;
  uint32_t b2[P];
#pragma unroll
  for (int q = 0; q < P; ++q) b2[q] = round16x2<C>(pm[q]);
  // word w of lane l at lv[w * 32 + l] (conflict-free stores)
#pragma unroll
  for (int w = 0; w < P / 2; ++w) lv[w * 32 + lane] = (b2[2 * w] & 0xffffu) | (b2[2 * w + 1] << 16);
  uint32_t c2[NC];
#pragma unroll
  for (int q = 0; q < NC; ++q) c2[q] = P == 2 ? b2[q] : round16x2<C>(cu[q]);
  __syncwarp();
  const uint4* q4 = reinterpret_cast<const uint4*>(lv);
  uint32_t s[NC];
#pragma unroll
  for (int q = 0; q < NC; ++q) s[q] = 0;
#pragma unroll
  for (int i = 0; i < 4 * P; ++i) {
    const uint4 x = q4[i];
    const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int q = 0; q < NC; ++q)
      s[q] += (set_ge16x2<C>(w[0], c2[q]) + set_ge16x2<C>(w[1], c2[q])) +
              (set_ge16x2<C>(w[2], c2[q]) + set_ge16x2<C>(w[3], c2[q]));
  }
  __syncwarp();
  uint32_t t = 0u;  // a NaN value (0 = none) counts no half, so it is never taken
#pragma unroll
  for (int q = 0; q < NC; ++q)
    if (int(half_counts(s[q])) >= k) t = max(t, stk::ordered_nonnan_u32(Scalar<C>::f32(c2[q] & 0xffffu)));
  return __reduce_max_sync(0xffffffffu, t);
}

// Appends this lane's survivors of a staged chunk (the bits of mask) to cand
// from pos, read back by position. kNoNaN: they passed x >= t above -inf, so
// none is NaN and the shorter ordered map serves (a chunk at T = -inf admits
// NaN columns).
template <typename T, bool kNoNaN>
__device__ __forceinline__ void warp_append(const WarpRow<T>& row, int64_t ch, uint32_t mask, int pos, int tie,
                                            const typename Scalar<T>::raw* st, uint64_t* cand) {
  constexpr unsigned kEpv = WarpRow<T>::kEpv;
  const unsigned lane = threadIdx.x & 31;
  do {
    const unsigned e = __ffs(mask) - 1;  // unsigned: e / kEpv and e % kEpv are a shift and a mask
    mask &= mask - 1;
    const unsigned v = e / kEpv, i = e % kEpv;
    const uint32_t bits = Scalar<T>::f32(st[(v * 32 + lane) * kEpv + i]);
    const uint32_t uu = kNoNaN ? stk::ordered_nonnan_u32(bits) : stk::ordered_canonical_u32(bits);
    cand[pos++] = warp_key(uu, row.col(ch, int(v), int(i)), tie);
  } while (mask);
}

template <typename T, int P, int Wide, class Ready>
__device__ void warp_topk_row(const TopkParams& p, int64_t r, WarpSmem<P, Wide>& sm, Ready ready) {
  const stk::RowGeometry g = row_geom(p, r);
  const RowCtx c = make_ctx(p, g);
  const OutRow out = make_out(p, r);
  using raw = typename Scalar<T>::raw;
  constexpr int kNv = WarpRow<T>::kNv, kEpv = WarpRow<T>::kEpv;
  WarpRow<T> row;
  row.init(row_scores<T>(p, r, g), c.n, c);
  ready();  // the launch wait, if the geometry above did not need it
  const int k = p.k;
  const int lane = threadIdx.x & 31;
  const int64_t nch = c.n > 0 ? row.chunks() : 0;
  // this lane's P maxima, each over its own share of its columns (of the
  // chunks that could matter); 0: none yet
  uint32_t pm[P];
#pragma unroll
  for (int q = 0; q < P; ++q) pm[q] = 0;
  int cnt = 0;
  bool overflow = false;
  uint32_t Tadm = 1;  // admit u >= Tadm; 0 is "invalid", so Tadm >= 1
  // two chunks in registers: the one being ranked and the next in flight
  // (a third stage, or L2 prefetch further ahead, measured slower on the H200)
  uint4 cur[kNv], nxt[kNv];
  if (nch > 0) row.load(0, cur);
  for (int64_t ch = 0; ch < nch; ++ch) {
    if (ch + 1 < nch) row.load(ch + 1, nxt);
    if (row.unforced(ch)) {
      // Unforced chunk, one value per lane: the steps below on float32
      // values, which need no per-column canonicalisation. fmaxf skips NaN
      // (canonical -inf), so the canonical form of the float maximum is the
      // maximum canonical score. Positions outside [0, n) were loaded as NaN:
      // a lane with none valid then offers -inf, which cannot matter (T at
      // -inf keeps every valid column anyway). With T above -inf, canonical(x) >= T iff x >= t
      // (t = T's float: NaN fails, -0 passes t = +0 like its canonical +0),
      // so survivors come from float compares and only they are
      // canonicalised, read back by position from the warp's staging copy
      // (registers cannot be indexed at run time).
      // 16-bit scores stay packed: a max tree of 15 max.{b}f16x2 and 16
      // packed compares (vec_ge16) instead of 32 widenings, 31 fmaxf and 32
      // float compares a chunk
      constexpr bool kPacked = sizeof(raw) == 2;
      float x[kWarpElems];
      uint32_t cq[P];  // the chunk's share maxima
      if constexpr (P == 1) {
        if constexpr (kPacked) {
          cq[0] = stk::ordered_canonical_u32(tree_max16<T>(cur));
        } else {
          row.widen(cur, x);
          cq[0] = stk::ordered_canonical_u32(__float_as_uint(tree_fmax(x)));
        }
      } else if constexpr (kPacked) {
        uint32_t b[P];
        tree_max16_p<T, P>(cur, b);
#pragma unroll
        for (int q = 0; q < P; ++q) cq[q] = stk::ordered_canonical_u32(b[q]);
      } else {
        row.widen(cur, x);
        float f[P];
        tree_fmax_p<P>(x, f);
#pragma unroll
        for (int q = 0; q < P; ++q) cq[q] = stk::ordered_canonical_u32(__float_as_uint(f[q]));
      }
      uint32_t cm = cq[0];
#pragma unroll
      for (int q = 1; q < P; ++q) cm = max(cm, cq[q]);
      if (__any_sync(0xffffffffu, cm >= Tadm)) {
        using KC = std::conditional_t<std::is_same_v<T, f16_tag>, f16_tag, bf16_tag>;
#pragma unroll
        for (int q = 0; q < P; ++q) pm[q] = max(pm[q], cq[q]);
        if constexpr (P == 1) Tadm = max(Tadm, warp_kth16<KC>(pm[0], k, sm.hist));
        else Tadm = max(Tadm, warp_kth16p<KC, P, Wide>(pm, k, sm.hist));
        uint32_t mask = 0;
        if (Tadm > stk::kOrderedNegInf) {
          const float t = __uint_as_float(stk::unordered_u32(Tadm));
          if constexpr (kPacked) {
            const uint32_t th2 = thr16x2<T>(t);
#pragma unroll
            for (int v = 0; v < kNv; ++v) mask |= vec_ge16<T>(cur[v], th2) << (v * kEpv);
          } else {
#pragma unroll
            for (int e = 0; e < kWarpElems; ++e) mask |= uint32_t(x[e] >= t) << e;
          }
        } else {  // T at -inf (rare): every valid column, NaN included
          if constexpr (kPacked) row.widen(cur, x);
#pragma unroll
          for (int e = 0; e < kWarpElems; ++e)
            mask |= uint32_t(stk::ordered_canonical_u32(__float_as_uint(x[e])) >= Tadm) << e;
          if (row.edge(ch)) {
#pragma unroll
            for (int v = 0; v < kNv; ++v)
#pragma unroll
              for (int i = 0; i < kEpv; ++i) {
                const int64_t j = row.col(ch, v, i);
                if (j < 0 || j >= row.n) mask &= ~(1u << (v * kEpv + i));
              }
          }
        }
        const int mine = __popc(mask);
        int incl, inc;
        if (!warp_reserve(mine, Tadm, sm, cnt, &incl, &inc)) {
          overflow = true;
          break;
        }
        if (mask) {
          // each lane reads back only what it wrote: no warp sync needed
#pragma unroll
          for (int v = 0; v < kNv; ++v) sm.stage[v * 32 + lane] = cur[v];
          const raw* st = reinterpret_cast<const raw*>(sm.stage);
          const int pos = cnt + incl - mine;
          if (Tadm > stk::kOrderedNegInf)
            warp_append<T, true>(row, ch, mask, pos, p.tie, st, sm.cand);
          else
            warp_append<T, false>(row, ch, mask, pos, p.tie, st, sm.cand);
        }
        cnt += inc;
        __syncwarp();
      }
#pragma unroll
      for (int v = 0; v < kNv; ++v) cur[v] = nxt[v];
      continue;
    }
    uint32_t u[kWarpElems];
    row.convert(ch, cur, u);
    uint32_t cm = 0;
#pragma unroll
    for (int e = 0; e < kWarpElems; ++e) cm = max(cm, u[e]);
    // A chunk with nothing >= Tadm cannot raise T (the k lane values >= T
    // stay) and has no survivors, so it is skipped, lane values included:
    // lane values of a subset of the elements still give a valid bound.
    if (__any_sync(0xffffffffu, cm >= Tadm)) {
#pragma unroll
      for (int e = 0; e < kWarpElems; ++e) pm[e % P] = max(pm[e % P], u[e]);
      if constexpr (P == 1) {
        Tadm = max(warp_kth(pm[0], k, sm.hist), 1u);
      } else {
        // the 16-bit count (forced columns are +inf, which stays +inf)
        using KC = std::conditional_t<std::is_same_v<T, f16_tag>, f16_tag, bf16_tag>;
        Tadm = max(Tadm, max(warp_kth16p<KC, P, Wide>(pm, k, sm.hist), 1u));
      }
      int mine = 0;
#pragma unroll
      for (int e = 0; e < kWarpElems; ++e) mine += u[e] >= Tadm;
      int incl, inc;
      if (!warp_reserve(mine, Tadm, sm, cnt, &incl, &inc)) {
        overflow = true;
        break;
      }
      if (mine) {
        int pos = cnt + incl - mine;
#pragma unroll
        for (int v = 0; v < kNv; ++v)
#pragma unroll
          for (int i = 0; i < kEpv; ++i) {
            const uint32_t uu = u[v * kEpv + i];
            if (uu >= Tadm) sm.cand[pos++] = warp_key(uu, row.col(ch, v, i), p.tie);
          }
      }
      cnt += inc;
      __syncwarp();
    }
#pragma unroll
    for (int v = 0; v < kNv; ++v) cur[v] = nxt[v];
  }
  int S;
  if (overflow)
    S = warp_radix_fallback(row, k, p.tie, sm);
  else
    S = warp_filter(sm.cand, cnt, Tadm);
  warp_finish<P, Wide>(sm.cand, S, k, p.order, p.tie, c, out);
}

template <typename T, int P, int Wide = 0>
__global__ void __launch_bounds__(128, P == 1 ? 0 : (P == 8 ? 3 : 4)) topk_warp_kernel(TopkParams p) {
  pdl_warm(p);
  __shared__ WarpSmem<P, Wide> sm[warp_max_wpb(P, Wide)];
  const int w = threadIdx.x >> 5;
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x >> 5) + w;
  // geometry that needs no global read (no lengths tensor, no starts; its
  // 64-bit divisions included) is worked out before the launch wait
  const bool early = param_geometry(p);
  if (!early || r >= p.rows) pdl_enter();
  if (r >= p.rows) return;  // whole warp leaves together
  warp_topk_row<T, P, Wide>(p, r, sm[w], [&] {
    if (early) pdl_enter();
  });
}

// ----------------------------------------------------------------------------
// Merge of R lists, R * k_in <= 256 and k <= 256, one warp per row.
template <int P>
__device__ void warp_merge_row(const MergeParams& p, int64_t r) {
  const int lane = threadIdx.x & 31;
  const int N = p.R * p.k_in;
  const int32_t* in_i = p.in_idx + r * p.in_idx_stride;
  const float* in_v = p.in_val + r * p.in_val_stride;
  uint64_t v[P];
#pragma unroll
  for (int q = 0; q < P; ++q) {
    const int e = lane * P + q;
    uint64_t x = ~0ull;  // empty: sorts last
    if (e < N) {
      const int32_t idx = in_i[e];
      if (idx >= 0) {
        const uint32_t ord = stk::ordered_u32(stk::canonical_bits(__float_as_uint(in_v[e])));
        x = (uint64_t(uint32_t(idx)) << 32) | ord;
      }
    }
    v[q] = x;
  }
  warp_bitonic<P, false>(v);  // ascending (index, value)
  // the last entry of each index run carries its highest value
  const uint64_t next_lane_first = __shfl_down_sync(0xffffffffu, v[0], 1);
#pragma unroll
  for (int q = 0; q < P; ++q) {
    const uint64_t x = v[q];
    uint64_t nx;
    if (q + 1 < P)
      nx = v[q + 1];
    else
      nx = lane == 31 ? ~0ull : next_lane_first;
    const bool last = x != ~0ull && (nx == ~0ull || uint32_t(nx >> 32) != uint32_t(x >> 32));
    v[q] = last ? stk::make_key(uint32_t(x), uint32_t(x >> 32), p.tie) : 0ull;
  }
  warp_bitonic<P, true>(v);
  RowCtx c{};
  c.scale = 1;
  c.offset = 0;
  OutRow out;
  out.idx = p.out_idx + r * p.out_idx_stride;
  out.val = p.out_val + r * p.out_val_stride;
  out.k = p.k;
  out.tie = p.tie;
  warp_emit<P>(v, p.k, p.order, p.tie, c, out);
}

template <int P>
__global__ void __launch_bounds__(128) merge_warp_kernel(MergeParams p) {
  pdl_enter();
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (r >= p.rows) return;
  warp_merge_row<P>(p, r);
}

}  // namespace stk_nv
