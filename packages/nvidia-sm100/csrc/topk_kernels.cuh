// Block-level building blocks of the nvidia-sm100 kernels: sources of 64-bit
// canonical keys (a global row, a shared-memory resident row, a shared-memory
// candidate list), histogram passes of an MSB radix select on the key, ordered
// (deterministic) compaction, bitonic sort. Every kernel of this package is
// assembled from these, so the selection logic exists once.
//
// The key is sparsetopk::make_key(ordered canonical score, global index, tie):
// distinct for distinct columns, larger = better. A radix select on it finds
// the exact k-th key Tk; the answer is {key >= Tk}, which is unique. Ties are
// therefore resolved by the low word (the tie-ordered global index) inside
// the same radix select, never by arrival order. Integer atomics are only
// used for histogram counts, whose sums do not depend on their order.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>

#include "sparsetopk/canonical.h"
#include "select_math.h"

namespace stk_nv {

namespace stk = sparsetopk;

constexpr int kItems = 8;        // contiguous elements per thread per tile
constexpr int kMaxBins = 2048;   // 11-bit digits
constexpr int kMaxWarps = 32;

// Profiling aid (SPARSETOPK_NV_PATH=stamps): %globaltimer at phase ends, by
// thread 0 of block 0 of row 0; read back with _C.cluster_stamps(). Slot 31
// counts the cluster kernel's select passes; slots 16.. hold SM clock cycles
// (STK_CLOCK: sub-microsecond phases of the one-block kernels, of block
// p.stamp_block: SPARSETOPK_NV_PATH=stampblock=N).
__device__ unsigned long long g_cluster_stamps[32];
#define STK_STAMP(i)                                                                   \
  do {                                                                                 \
    if (p.stamps && blockIdx.y == 0 && blockIdx.x == 0 && threadIdx.x == 0) {          \
      unsigned long long t_;                                                           \
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));                           \
      g_cluster_stamps[i] = t_;                                                        \
    }                                                                                  \
  } while (0)
#define STK_CLOCK(i)                                                                   \
  do {                                                                                 \
    if (p.stamps && blockIdx.y == 0 && blockIdx.x == p.stamp_block && threadIdx.x == 0) \
      g_cluster_stamps[16 + (i)] = clock64();                                          \
  } while (0)

// Programmatic dependent launch (sm_90+; the host sets the launch attribute,
// SPARSETOPK_NV_PATH=no-pdl clears it). pdl_wait returns once the grids
// before this one on the stream have finished and their writes are visible:
// every kernel calls it before its first global access, in every block (also
// one that returns early, so a grid never finishes before the grids it
// follows). pdl_trigger lets the next grid on the stream launch: its blocks
// become resident beside this grid's (or as they leave) and wait there.
// pdl_enter waits first, then triggers: one grid waits behind a running one.
// (Triggering first lets every later call of a graph queue up behind the
// running one; measured slower on the H200 for the warp kernel: 512 x 1344
// 6.6 vs 5.0 us. The cluster kernel, whose blocks fill an SM, triggers first
// and sets up its shared memory before the wait. The tile and warp kernels
// work out a row's geometry before it when that needs no global read:
// param_geometry in topk.cu.) Both are no-ops for a grid launched without
// the attribute.
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_enter() {
  pdl_wait();
  pdl_trigger();
}

// ----------------------------------------------------------------------------
// score loading: raw element -> float32 bits (exact widening)
template <typename T> struct Scalar;
template <> struct Scalar<float> {
  using raw = uint32_t;
  static __device__ __forceinline__ uint32_t f32(uint32_t r) { return r; }
};
struct bf16_tag {};
struct f16_tag {};
template <> struct Scalar<bf16_tag> {
  using raw = uint16_t;
  static __device__ __forceinline__ uint32_t f32(uint16_t r) { return uint32_t(r) << 16; }
};
template <> struct Scalar<f16_tag> {
  using raw = uint16_t;
  static __device__ __forceinline__ uint32_t f32(uint16_t r) {
    return __float_as_uint(__half2float(__ushort_as_half(r)));
  }
};

// 16-bit scores, two columns a packed instruction (the fast float tests of
// the cluster / sampled-rows gathers and of the warp kernel).
// th2: the smallest 16-bit value >= tf (tf above -inf) in both halves of a
// word: a 16-bit x has x >= tf iff x >= it.
template <typename T>
__device__ __forceinline__ uint32_t thr16x2(float tf) {
  uint16_t h;
  if constexpr (std::is_same_v<T, bf16_tag>) h = __bfloat16_as_ushort(__float2bfloat16_ru(tf));
  else h = __half_as_ushort(__float2half_ru(tf));
  return uint32_t(h) * 0x10001u;
}

// set.ge.u32.{b}f16x2: 0xffff in each half of w that is >= that half of th2,
// else 0 (NaN never passes; -0 >= +0).
template <typename T>
__device__ __forceinline__ uint32_t set_ge16x2(uint32_t w, uint32_t th2) {
  uint32_t m;
  if constexpr (std::is_same_v<T, bf16_tag>) asm("set.ge.u32.bf16x2 %0, %1, %2;" : "=r"(m) : "r"(w), "r"(th2));
  else asm("set.ge.u32.f16x2 %0, %1, %2;" : "=r"(m) : "r"(w), "r"(th2));
  return m;
}

// Bit i set iff column i of a 16-byte vector of 16-bit scores is >= both
// halves of th2: one packed compare per two columns, the per-half masks
// gathered into bytes by two byte permutes, then into bits by one multiply
// (the bytes hold disjoint bits, so their sum carries nothing).
template <typename T>
__device__ __forceinline__ uint32_t vec_ge16(const uint4& r, uint32_t th2) {
  uint32_t m[4];
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) m[q] = set_ge16x2<T>(w[q], th2);
  const uint32_t a = __byte_perm(m[0], m[1], 0x6420), b = __byte_perm(m[2], m[3], 0x6420);  // byte i: column i, i + 4
  return (((a & 0x08040201u) | (b & 0x80402010u)) * 0x01010101u) >> 24;
}

// Packed maximum of two words of 16-bit scores (max.{b}f16x2: a NaN half
// yields the other operand's half, as fmaxf).
template <typename T>
__device__ __forceinline__ uint32_t max16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  if constexpr (std::is_same_v<T, bf16_tag>) asm("max.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  else asm("max.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// Per-row context shared by the sources.
struct RowCtx {
  int64_t n;        // valid buffer columns 0..n-1
  int64_t length;   // L_r
  int64_t scale, offset, force_begin, force_end;
  int tie;
  __device__ __forceinline__ uint64_t key_of_bits(uint32_t f32bits, int64_t j) const {
    const int64_t g = j * scale + offset;
    const bool forced = g < force_begin || g >= length - force_end;
    const uint32_t c = forced ? stk::kPosInfBits : stk::canonical_bits(f32bits);
    return stk::make_key(stk::ordered_u32(c), uint32_t(g), tie);
  }
  __device__ __forceinline__ uint64_t key_of_ord(uint32_t ord, int64_t j) const {
    return stk::make_key(ord, uint32_t(j * scale + offset), tie);
  }
  // No column of positions [j, j + cnt) is forced (g increases with j: scale >= 1).
  __device__ __forceinline__ bool unforced(int64_t j, int cnt) const {
    return j * scale + offset >= force_begin && (j + cnt - 1) * scale + offset < length - force_end;
  }
};

// ----------------------------------------------------------------------------
// Sources. Each exposes first()/end() (tile range in element positions, the
// first possibly negative for alignment) and load(gs, keys, mask) for the 8
// positions gs..gs+7 (bit i of mask set iff position gs+i is a valid element).

template <typename T>
struct GlobalSrc {
  using raw = typename Scalar<T>::raw;
  const raw* base;  // element 0 of the row (after start)
  int64_t j0, j1;   // positions [j0, j1) of this source (a row or a chunk)
  int64_t first_;
  bool vec;
  RowCtx c;
  __device__ void init(const raw* b, int64_t lo, int64_t hi, const RowCtx& ctx) {
    base = b;
    j0 = lo;
    j1 = hi;
    c = ctx;
    const uintptr_t a = reinterpret_cast<uintptr_t>(b) & 15u;
    vec = (a % sizeof(raw)) == 0;
    const int64_t e = int64_t(((16u - a) & 15u) / sizeof(raw));  // base+e is 16B aligned
    int64_t m = (j0 - e) % kItems;
    if (m < 0) m += kItems;
    first_ = j0 - m;
  }
  __device__ __forceinline__ int64_t first() const { return first_; }
  __device__ __forceinline__ int64_t end() const { return j1; }
  __device__ __forceinline__ uint32_t load(int64_t gs, uint64_t (&key)[kItems]) const {
    uint32_t bits[kItems];
    const uint32_t mask = load_bits(gs, bits);
    to_keys(gs, bits, key);
    return mask;
  }
  // The two halves of load(), so a caller can issue the next tile's loads
  // before it works on the current one: raw float32 bits (0 where invalid)...
  __device__ __forceinline__ uint32_t load_bits(int64_t gs, uint32_t (&bits)[kItems]) const {
    uint32_t mask;
    if (vec && gs >= j0 && gs + kItems <= j1) {
      mask = 0xffu;
      if (sizeof(raw) == 4) {
        const uint4* p = reinterpret_cast<const uint4*>(base + gs);
        const uint4 a = __ldg(p), b = __ldg(p + 1);
        bits[0] = a.x; bits[1] = a.y; bits[2] = a.z; bits[3] = a.w;
        bits[4] = b.x; bits[5] = b.y; bits[6] = b.z; bits[7] = b.w;
#pragma unroll
        for (int i = 0; i < kItems; ++i) bits[i] = Scalar<T>::f32(raw(bits[i]));
      } else {
        const uint4 a = __ldg(reinterpret_cast<const uint4*>(base + gs));
        const uint32_t w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          bits[2 * i] = Scalar<T>::f32(raw(w[i] & 0xffffu));
          bits[2 * i + 1] = Scalar<T>::f32(raw(w[i] >> 16));
        }
      }
    } else {
      mask = 0;
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        const int64_t j = gs + i;
        bits[i] = 0;
        if (j >= j0 && j < j1) {
          mask |= 1u << i;
          bits[i] = Scalar<T>::f32(base[j]);
        }
      }
    }
    return mask;
  }
  // One 16-byte vector of raw elements: the kVec columns c0.. (c0 16-byte
  // aligned when vec), 0 outside [j0, j1); bit i of the mask set iff c0 + i
  // is valid. Warp lanes on consecutive vectors make fully coalesced loads.
  // vec_f32 widens element i.
  static constexpr int kVec = 16 / int(sizeof(raw));
  __device__ __forceinline__ uint32_t load_vec(int64_t c0, uint4& r) const {
    if (vec && c0 >= j0 && c0 + kVec <= j1) {
      r = __ldg(reinterpret_cast<const uint4*>(base + c0));
      return (1u << kVec) - 1u;
    }
    uint32_t mask = 0, w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const int64_t j = c0 + i;
      if (j >= j0 && j < j1) {
        mask |= 1u << i;
        w[i * sizeof(raw) / 4] |= uint32_t(base[j]) << (8 * ((i * sizeof(raw)) & 3));
      }
    }
    r = make_uint4(w[0], w[1], w[2], w[3]);
    return mask;
  }
  // (int arithmetic: with size_t the word index was a 64-bit compare chain
  // in every candidate's sink, ~10 SASS instructions)
  static __device__ __forceinline__ uint32_t vec_f32(const uint4& r, int i) {
    const int q = i * int(sizeof(raw)) / 4;
    const uint32_t lo = (q & 1) ? r.y : r.x, hi = (q & 1) ? r.w : r.z;
    const uint32_t w = (q & 2) ? hi : lo;
    return Scalar<T>::f32(raw(sizeof(raw) == 4 ? w : (w >> (16 * (i & 1))) & 0xffffu));
  }
  // The ordered canonical scores of positions gs..gs+7 (forcing applied; 0
  // where the mask bit is clear). A whole tile with no forced column, the
  // common case, skips key_of_bits' per-column index arithmetic.
  __device__ __forceinline__ uint32_t load_ord(int64_t gs, uint32_t (&u)[kItems]) const {
    uint32_t bits[kItems];
    const uint32_t mask = load_bits(gs, bits);
    if (mask == 0xffu && c.unforced(gs, kItems)) {
#pragma unroll
      for (int i = 0; i < kItems; ++i) u[i] = stk::ordered_canonical_u32(bits[i]);
    } else {
#pragma unroll
      for (int i = 0; i < kItems; ++i)
        u[i] = ((mask >> i) & 1u) ? uint32_t(c.key_of_bits(bits[i], gs + i) >> 32) : 0u;
    }
    return mask;
  }
  __device__ __forceinline__ uint64_t key1(int64_t j, uint32_t bits) const { return c.key_of_bits(bits, j); }
  // ...and their keys (garbage where the mask bit is clear).
  __device__ __forceinline__ void to_keys(int64_t gs, const uint32_t (&bits)[kItems],
                                          uint64_t (&key)[kItems]) const {
#pragma unroll
    for (int i = 0; i < kItems; ++i) key[i] = c.key_of_bits(bits[i], gs + i);
  }
};

// Row resident in shared memory as ordered canonical scores (forcing applied).
struct ResSrc {
  const uint32_t* res;
  int64_t n;
  RowCtx c;
  int64_t lo;  // row position of res[0] (a cluster block's slice; 0 for a whole row)
  __device__ __forceinline__ int64_t first() const { return 0; }
  __device__ __forceinline__ int64_t end() const { return n; }
  __device__ __forceinline__ uint32_t load(int64_t gs, uint64_t (&key)[kItems]) const {
    uint32_t o[kItems];
    uint32_t mask;
    if (gs + kItems <= n) {
      const uint4 a = *reinterpret_cast<const uint4*>(res + gs);
      const uint4 b = *reinterpret_cast<const uint4*>(res + gs + 4);
      o[0] = a.x; o[1] = a.y; o[2] = a.z; o[3] = a.w;
      o[4] = b.x; o[5] = b.y; o[6] = b.z; o[7] = b.w;
      mask = 0xffu;
    } else {
      mask = 0;
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        o[i] = 0;
        if (gs + i < n) {
          mask |= 1u << i;
          o[i] = res[gs + i];
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kItems; ++i) key[i] = c.key_of_ord(o[i], lo + gs + i);
    return mask;
  }
};

// Keys in shared memory (gathered candidates, or merge inputs). Key 0 is an
// empty slot: it is below every valid key and never selected.
struct CandSrc {
  const uint64_t* cand;
  int64_t n;
  __device__ __forceinline__ int64_t first() const { return 0; }
  __device__ __forceinline__ int64_t end() const { return n; }
  __device__ __forceinline__ uint32_t load(int64_t gs, uint64_t (&key)[kItems]) const {
    uint32_t mask = 0;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      key[i] = 0;
      if (gs + i < n) {
        key[i] = cand[gs + i];
        if (key[i] != stk::kInvalidKey) mask |= 1u << i;
      }
    }
    return mask;
  }
};

// ----------------------------------------------------------------------------
// Block primitives. All threads of the block must call them (they sync).

struct BlockScratch {
  int warp[kMaxWarps + 1];
  int bin, above, count;
  int flag;
};

// Exclusive prefix sum over threads in thread order; *total gets the sum.
__device__ __forceinline__ int block_excl_scan(int v, BlockScratch& s, int* total) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  int x = v;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, d);
    if (lane >= d) x += y;
  }
  if (lane == 31) s.warp[w] = x;
  __syncthreads();
  if (w == 0) {
    int t = lane < nw ? s.warp[lane] : 0;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, t, d);
      if (lane >= d) t += y;
    }
    if (lane < nw) s.warp[lane] = t;  // inclusive
  }
  __syncthreads();
  const int r = x - v + (w > 0 ? s.warp[w - 1] : 0);
  *total = s.warp[nw - 1];
  __syncthreads();
  return r;
}

__device__ __forceinline__ uint32_t warp_shfl_xor(uint32_t v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
__device__ __forceinline__ uint64_t warp_shfl_xor(uint64_t v, int m) {
  const uint32_t lo = __shfl_xor_sync(0xffffffffu, uint32_t(v), m);
  const uint32_t hi = __shfl_xor_sync(0xffffffffu, uint32_t(v >> 32), m);
  return (uint64_t(hi) << 32) | lo;
}

template <typename V>
__device__ __forceinline__ V vmax(V a, V b) { return a > b ? a : b; }
template <typename V>
__device__ __forceinline__ V vmin(V a, V b) { return a < b ? a : b; }

// One step (distance d) of stage s of the bitonic sort below, for d >= P
// (partners in another lane) and for d < P (partners in the same lane).
template <int P, bool DESC, typename V>
__device__ __forceinline__ void bitonic_step_across(V (&v)[P], int lane, int s, int d) {
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int e = lane * P + p;
    const V o = warp_shfl_xor(v[p], d / P);
    const bool up = ((e & s) == 0) == DESC;  // this block ends descending
    const bool keep_max = ((e & d) == 0) == up;
    v[p] = keep_max ? vmax(v[p], o) : vmin(v[p], o);
  }
}
template <int P, bool DESC, typename V>
__device__ __forceinline__ void bitonic_step_within(V (&v)[P], int lane, int s, int d) {
#pragma unroll
  for (int p = 0; p < P; ++p) {
    if ((p & d) == 0) {
      const int q = p | d;
      const int e = lane * P + p;
      const bool up = ((e & s) == 0) == DESC;
      const V hi = vmax(v[p], v[q]), lo = vmin(v[p], v[q]);
      v[p] = up ? hi : lo;
      v[q] = up ? lo : hi;
    }
  }
}

// Bitonic sort of 32*P values (32- or 64-bit) held P per lane (element
// e = lane*P + p). DESC: element 0 ends up the largest.
template <int P, bool DESC, typename V>
__device__ __forceinline__ void warp_bitonic(V (&v)[P]) {
  const int lane = threadIdx.x & 31;
  constexpr int N = 32 * P;
#pragma unroll
  for (int s = 2; s <= N; s <<= 1) {
#pragma unroll
    for (int d = s >> 1; d > 0; d >>= 1) {
      if (d >= P)
        bitonic_step_across<P, DESC>(v, lane, s, d);
      else
        bitonic_step_within<P, DESC>(v, lane, s, d);
    }
  }
}

// A lower bound T > 0 of the k-th largest of the block's per-thread values v
// (0 = none): at least k values are >= T; 0 when no bound is found. The
// threads holding a value are a prefix of the block; `nf` warps are full
// (all 32 lanes hold one). With q = ceil(k / nf), the smallest of the full
// warps' q-th largest values has nf q >= k values at or above it (no full
// warp: warp 0 alone, q = k). A warp's q-th largest is q rounds of a warp
// maximum (q <= 8) or a shuffle sort. Looser than the exact k-th largest (a
// counting search over sorted lists measured ~1500 cycles for 6 warps:
// dependent shared loads), but one barrier and a few warp reductions.
// One barrier. wb: 32 words of shared memory; the caller syncs before wb is
// reused.
__device__ __forceinline__ uint32_t block_bound(uint32_t v, int k, int nf, uint32_t* wb) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int ne = nf > 0 ? nf : 1;  // warps that bound
  const int q = (k + ne - 1) / ne;  // q > 32: no bound (still one barrier, callers rely on it)
  if (w < ne && q <= 32) {
    uint32_t t = 0;
    if (q <= 8) {
      // lane number in the low 5 bits: values distinct, so a round's maximum
      // leaves by one compare; the q-th largest packed value t' has q lanes
      // whose v >= t' & ~31 (a bound looser by under 32 ordered steps)
      uint32_t x = (v & ~31u) | uint32_t(lane);
      for (int i = 0; i < q; ++i) {
        t = __reduce_max_sync(0xffffffffu, x);
        if (x == t) x = 0;
      }
      t &= ~31u;
    } else {
      uint32_t s[1] = {v};
      warp_bitonic<1, true>(s);  // lane i: the (i+1)-th largest
      t = __shfl_sync(0xffffffffu, s[0], q - 1);
    }
    if (lane == 0) wb[w] = t;
  }
  __syncthreads();
  if (q > 32) return 0;
  return __reduce_min_sync(0xffffffffu, lane < ne ? wb[lane] : 0xffffffffu);
}

// Histogram of the digit below `depth` over the keys that match `prefix` in
// their top `depth` bits. Fenced: hist is cleared first, with a block barrier
// before and after the counting; unfenced, the counts are added into hist
// (which must be zero) and the caller orders them (the cluster select).
template <bool Fenced = true, class Src>
__device__ void hist_pass(const Src& src, uint32_t* hist, uint64_t prefix, int depth, int dbits) {
  const int nbins = 1 << dbits;
  const int shift = 64 - depth - dbits;
  if (Fenced) {
    for (int i = threadIdx.x; i < nbins; i += blockDim.x) hist[i] = 0;
    __syncthreads();
  }
  const int64_t step = int64_t(blockDim.x) * kItems;
#pragma unroll 2
  for (int64_t gs = src.first() + int64_t(threadIdx.x) * kItems; gs < src.end(); gs += step) {
    uint64_t key[kItems];
    const uint32_t m = src.load(gs, key);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const bool match = depth == 0 || ((key[i] ^ prefix) >> (64 - depth)) == 0;
      if (((m >> i) & 1u) && match) atomicAdd(&hist[uint32_t(key[i] >> shift) & (nbins - 1)], 1u);
    }
  }
  if (Fenced) __syncthreads();
}

// Find the bin holding the kk-th largest counted key. Returns via scratch:
// bin, above (count in higher bins), count (in that bin).
__device__ void find_bin(const uint32_t* hist, int dbits, int kk, BlockScratch& s) {
  const int nbins = 1 << dbits;
  const int per = (nbins + blockDim.x - 1) / blockDim.x;
  // thread t covers bins [hi - per, hi) with hi = nbins - t*per (top bins first)
  const int hi = nbins - int(threadIdx.x) * per;
  const int lo = max(hi - per, 0);
  int sum = 0;
  for (int b = lo; b < hi; ++b) sum += int(hist[b]);
  int total;
  const int above = block_excl_scan(hi > 0 ? sum : 0, s, &total);
  if (hi > 0 && above < kk && kk <= above + sum) {
    int acc = above;
    for (int b = hi - 1; b >= lo; --b) {
      const int h = int(hist[b]);
      if (acc + h >= kk) {
        s.bin = b;
        s.above = acc;
        s.count = h;
        break;
      }
      acc += h;
    }
  }
  __syncthreads();
}

// find_bin over 2048 bins by one warp: chunks of 128 bins from the top (one
// conflict-free 16-byte load a lane, one __reduce_add_sync), down to the
// chunk where the count reaches kk, then a lane scan inside it; the lane
// that finds the bin calls found(bin, above, count) (no lane does if the
// bins hold fewer than kk). hist: 16-byte aligned.
template <class Found>
__device__ __forceinline__ void find_bin2048_warp(const uint32_t* hist, int kk, Found found) {
  const int lane = int(threadIdx.x) & 31;
  int acc = 0;  // the counts above chunk i
  for (int i = 0; i < 16; ++i) {
    const int base = 2048 - 128 * i - 4 * (lane + 1);  // lane 0: the chunk's top 4 bins
    const uint4 v = *reinterpret_cast<const uint4*>(hist + base);
    const int sum = int(v.x + v.y + v.z + v.w);
    const int tot = int(__reduce_add_sync(0xffffffffu, uint32_t(sum)));
    if (acc + tot >= kk) {  // (uniform)
      int inc = sum;
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, inc, d);
        if (lane >= d) inc += y;
      }
      const uint32_t hit = __ballot_sync(0xffffffffu, acc + inc >= kk);
      if (lane == __ffs(hit) - 1) {
        int a = acc + inc - sum;
        const int h[4] = {int(v.w), int(v.z), int(v.y), int(v.x)};  // bins base + 3 .. base
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (a + h[j] >= kk) {
            found(base + 3 - j, a, h[j]);
            break;
          }
          a += h[j];
        }
      }
      break;
    }
    acc += tot;
  }
}

// find_bin2048_warp by warp 0 into s.bin / s.above / s.count, as find_bin
// sets them (s.bin untouched if the bins hold fewer than kk). One block
// barrier (the last), where find_bin's block scan takes three more: the
// sampled-rows kernel's estimate runs beside two other blocks' gathers,
// where every barrier waits on the slowest warp.
__device__ __forceinline__ void find_bin2048_warp0(const uint32_t* hist, int kk, BlockScratch& s) {
  if ((threadIdx.x >> 5) == 0)
    find_bin2048_warp(hist, kk, [&](int bin, int above, int count) {
      s.bin = bin;
      s.above = above;
      s.count = count;
    });
  __syncthreads();
}

// The 22-bit prefix of the m-th largest of a block's 32-bit ordered sample
// scores (1 <= m <= their count): two 11-bit passes (one when the m-th is
// the lowest of its first bin), the bins' lower edge, as select_passes<22>
// gives on the samples' 64-bit keys (whose index bits play no part in the
// top 22), in 32-bit arithmetic: the samples' passes spent their
// instructions on 64-bit key shifts and compares (ncu, split sample kernel:
// 17% of its stalls the math pipe). visit(f) calls f(o) on each of the
// calling thread's samples; after(pass) runs after each pass (stamps).
template <class Visit, class After>
__device__ uint32_t sample_prefix22(Visit visit, int m, uint32_t* hist, BlockScratch& s, After after) {
  uint32_t prefix = 0;
  int kk = m;
  for (int pass = 0; pass < 2; ++pass) {
    const int shift = pass == 0 ? 21 : 10;
    for (int i = int(threadIdx.x); i < 2048; i += int(blockDim.x)) hist[i] = 0;
    __syncthreads();
    const uint32_t top = prefix >> 21;
    visit([&](uint32_t o) {
      if (pass == 0 || (o >> 21) == top) atomicAdd(&hist[(o >> shift) & 2047u], 1u);
    });
    __syncthreads();
    find_bin(hist, 11, kk, s);
    const int b = s.bin, above = s.above, E = s.count;
    __syncthreads();  // scratch reused by the next pass
    kk -= above;
    prefix |= uint32_t(b) << shift;
    after(pass);
    if (E == kk) break;  // the m-th is the lowest of its bin
  }
  return prefix;
}

// sample_est_binned's arithmetic, shared with sampled_est_kernel (which
// computes the same est with one warp a row).
// G: groups of G adjacent threads (of nt), the least of the groups' largest
// samples bounding the bins from below; the largest power of two <= 32 with
// nt / G >= m, or 0 (no groups) where m > nt.
__device__ __forceinline__ int sample_groups(int m, int nt) {
  int G = 0;
  if (m <= nt)
    for (G = 1; G < 32 && nt / (2 * G) >= m;) G *= 2;
  return G;
}
// the bins' lowest score: 2048 bins of 2^17 (2^15 without groups) below
// hi, no lower than glo (the least group maximum; ~0u: none)
__device__ __forceinline__ uint32_t sample_bins_lo(uint32_t hi, uint32_t glo, int G) {
  uint32_t lo = hi - min(hi, (2048u << (G > 0 ? 17 : 15)) - 1u);
  if (glo != ~0u) lo = max(lo, glo);
  return lo;
}
// the bins' shift: (hi - lo) >> sh < 2048
__device__ __forceinline__ int sample_bins_shift(uint32_t hi, uint32_t lo) {
  return max(0, (32 - __clz(hi - lo)) - 11);
}
// est from the m-th sample's bin b (E samples in it; b < 0: fewer than m in
// the bins), or false where that bin is too crowded for a coarse bin (zb:
// score_zero_bits, bins no finer than the scores)
__device__ __forceinline__ bool sample_bin_est(uint32_t hi, uint32_t lo, int sh, int b, int E, int m, int zb,
                                               uint32_t* est) {
  if (b < 0 || (E > max(4, m >> 3) && sh > zb)) return false;
  // the bin's lowest score: hi - (2048 - b) 2^sh + 1, at least lo
  const int64_t edge = int64_t(hi) - (int64_t(2048 - b) << sh) + 1;
  *est = uint32_t(max(edge, int64_t(lo)));
  return true;
}
// the candidates' bin shift: bins spanning twice the distance from est to
// the largest sample mx (split_cand_bin; SplitRowState::hsh is 1 + this)
__device__ __forceinline__ int cand_bin_shift(uint32_t mx, uint32_t est) {
  return max(0, (64 - __clzll(2 * uint64_t(mx - est) + 1)) - 11);
}
// the samples whose m-th largest score is the estimate: 8 k / 5 of the
// row's n scaled to the S sampled (mu = k S / n), at least 16 (n > 0), but
// no more than mu + 5 sqrt(mu) + 2: where the sample is a larger share of
// the row (mu > ~72: rows under ~58K columns with one run) its count above
// the k-th score spreads less, and 1.6 mu kept a margin of 7-10 standard
// deviations (binomial odds < 1e-10 of a fallback at 32K columns, ~3e-6 at
// 64K); 5 keeps those odds ~1e-6 for i.i.d. rows, with fewer candidates
// (32K columns: ~1.43 k instead of 1.6 k; 16K: ~1.32 k)
__device__ __forceinline__ int64_t sample_m(int k, int S, int64_t n) {
  const float mu = float(k) * float(S) / float(n);
  const int64_t tight = int64_t(mu + 5.f * sqrtf(mu)) + 2;
  return max(int64_t(16), min(tight, (8 * int64_t(k) * S + 5 * n - 1) / (5 * n)));
}

// est <= the m-th largest of a block's 32-bit ordered sample scores from
// ONE histogram pass (sample_prefix22 takes two): 2048 bins of 2^sh scores
// down from mx, the largest sample, to lo, counting only the samples >= lo
// (sample_prefix22's first pass counts every sample, and a normal row's
// crowd a few of its bins, whose atomics serialize). lo: the least of the
// maxima of groups of G adjacent threads, nt / G >= m of them (so at least m
// samples are >= lo, the m-th among them), but no lower than 2048 bins of
// 2^17 ordered scores (32 octaves) below mx (2^15, 8 octaves, if m > nt:
// no groups), so that a bin is at most 1/64 of its scores' magnitude
// (1/256 without groups) wide. Exact whatever lo is: if at
// least m samples are counted, the m-th largest is among them and its bin's
// lower edge is <= it. *est: that edge (at least lo); *mx: mx (decided or
// not). Returns false, est unset, when fewer than m samples are counted
// (the top samples span more octaves than the bins) or the m-th's bin holds
// more than max(4, m / 8) samples (too coarse) -- unless a bin holds one
// score value (sh <= zb, the low bits every score of the type has zero: 16
// for bf16, 13 for fp16), whose ties do not make est any lower (bf16 rows
// tie ~1.5 samples a value at the m-th of 8K, and 64 rows of them declined
// often enough to cost ~1 us a call); the caller then runs the radix
// passes. tmax: the calling thread's largest sample (has: it holds one);
// visit as sample_prefix22's; hist: 16-byte aligned; wred: 64 words of shared scratch. Its
// constants were chosen on ci/estimate_model.py, a numpy model of this
// pass. Ends with a block barrier.
template <class Visit>
__device__ bool sample_est_binned(Visit visit, uint32_t tmax, bool has, int m, int zb, uint32_t* hist,
                                  uint32_t* wred, BlockScratch& s, uint32_t* est, uint32_t* mx) {
  const int nt = int(blockDim.x), lane = int(threadIdx.x) & 31, w = int(threadIdx.x) >> 5, nw = (nt + 31) >> 5;
  const int G = sample_groups(m, nt);  // (uniform)
  uint32_t gmx = has ? tmax : 0u, ghas = has ? 1u : 0u;
  for (int d = 1; d < G; d <<= 1) {
    gmx = max(gmx, __shfl_xor_sync(0xffffffffu, gmx, d));
    ghas |= __shfl_xor_sync(0xffffffffu, ghas, d);
  }
  for (int i = int(threadIdx.x); i < 2048; i += nt) hist[i] = 0;
  const uint32_t wmx = __reduce_max_sync(0xffffffffu, has ? tmax : 0u);
  const uint32_t wlo = __reduce_min_sync(0xffffffffu, G > 0 && ghas ? gmx : ~0u);
  if (lane == 0) {
    wred[w] = wmx;
    wred[32 + w] = wlo;
  }
  if (threadIdx.x == 0) s.bin = -1;  // (left so if fewer than m are counted)
  __syncthreads();
  const uint32_t hi = __reduce_max_sync(0xffffffffu, lane < nw ? wred[lane] : 0u);
  const uint32_t glo = __reduce_min_sync(0xffffffffu, lane < nw ? wred[32 + lane] : ~0u);
  *mx = hi;
  const uint32_t lo = sample_bins_lo(hi, glo, G);
  const int sh = sample_bins_shift(hi, lo);
  visit([&](uint32_t o) {
    if (o >= lo) atomicAdd(&hist[2047u - ((hi - o) >> sh)], 1u);
  });
  __syncthreads();
  find_bin2048_warp0(hist, m, s);
  return sample_bin_est(hi, lo, sh, s.bin, s.count, m, zb, est);
}

// The low bits of a 32-bit ordered score that are zero for every score of T
// (16-bit types widened to fp32).
template <typename T>
constexpr int score_zero_bits() {
  return std::is_same_v<T, bf16_tag> ? 16 : (std::is_same_v<T, f16_tag> ? 13 : 0);
}

// Ordered compaction: calls sink(pos, key) for every valid key >= T, pos
// counting them in source order. Returns the count.
template <class Src, class Sink>
__device__ int compact_pass(const Src& src, uint64_t T, BlockScratch& s, Sink sink) {
  const int64_t step = int64_t(blockDim.x) * kItems;
  int base = 0;
  for (int64_t tb = src.first(); tb < src.end(); tb += step) {
    const int64_t gs = tb + int64_t(threadIdx.x) * kItems;
    uint64_t key[kItems];
    uint32_t m = 0;
    if (gs < src.end()) m = src.load(gs, key);
    uint32_t sel = 0;
#pragma unroll
    for (int i = 0; i < kItems; ++i)
      if (((m >> i) & 1u) && key[i] >= T) sel |= 1u << i;
    int total;
    int pos = base + block_excl_scan(__popc(sel), s, &total);
#pragma unroll
    for (int i = 0; i < kItems; ++i)
      if ((sel >> i) & 1u) sink(pos++, key[i]);
    base += total;
  }
  return base;
}

// Sort P (power of two) keys in shared memory, descending if desc.
__device__ void bitonic_sort(uint64_t* a, int P, bool desc) {
  for (int size = 2; size <= P; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = threadIdx.x; i < (P >> 1); i += blockDim.x) {
        const int pos = 2 * i - (i & (stride - 1));
        const int q = pos + stride;
        const bool up = ((pos & size) == 0) != desc;  // ascending segment?
        const uint64_t x = a[pos], y = a[q];
        if ((x > y) == up) {
          a[pos] = y;
          a[q] = x;
        }
      }
      __syncthreads();
    }
  }
}

// The same sort (P keys, P >= 64 E, power of two), with each thread holding
// E consecutive keys in registers: pairs less than E apart are ordered in
// registers, less than 32 E apart through warp shuffles, and only farther
// ones through shared memory (10 of 66 stages for 2048 keys on 512 threads
// at E = 4; the shared-memory sort pays a barrier on every stage). Logical
// key e = t E + i (thread t, register i) lives in shared memory at i Q + t
// (Q = P / E threads): a stage's partner thread t ^ (stride / E) is then a
// whole block of consecutive lanes, so each 64-bit access is conflict-free
// (at t E + i, lanes 8 E bytes apart met 8-way bank conflicts for E = 4).
// The first load may take any placement (a full sort). Ends by calling
// sink(e, key) for every logical position e, from registers; a is then free.
// Measured on the H200 (4 x 40K k=2048 rank, the cluster kernel's write
// phase): 35250 cycles before these changes, 32340 with the layout, 24770
// with one compare and select per key per stage.
template <int E, class Sink>
__device__ void bitonic_sort_regs(uint64_t* a, int P, bool desc, Sink sink) {
  const int t = int(threadIdx.x);
  const int Q = P / E;
  const bool act = t < Q;  // whole warps: Q is a multiple of 32
  uint64_t v[E];
  if (act)
#pragma unroll
    for (int i = 0; i < E; ++i) v[i] = a[i * Q + t];
  for (int size = 2; size <= P; size <<= 1) {
    for (int stride = size >> 1; stride >= E; stride >>= 1) {
      if (stride >= 32 * E) {
        __syncthreads();  // every read of the previous exchange is done
        if (act)
#pragma unroll
          for (int i = 0; i < E; ++i) a[i * Q + t] = v[i];
        __syncthreads();
      }
      if (act) {
        // size > stride >= E > i: the direction is the same for all of t's keys
        const bool keep_min = (((t * E) & stride) == 0) == ((((t * E) & size) == 0) != desc);
#pragma unroll
        for (int i = 0; i < E; ++i) {
          uint64_t o;
          if (stride >= 32 * E) {
            o = a[i * Q + (t ^ (stride / E))];
          } else {
            const int d = stride / E;  // partner lane offset
            const uint32_t lo = __shfl_xor_sync(0xffffffffu, uint32_t(v[i]), d);
            const uint32_t hi = __shfl_xor_sync(0xffffffffu, uint32_t(v[i] >> 32), d);
            o = (uint64_t(hi) << 32) | lo;
          }
          if ((v[i] > o) == keep_min) v[i] = o;  // one 64-bit compare, one select
        }
      }
    }
    if (act)
#pragma unroll
      for (int st = E / 2; st > 0; st >>= 1) {
        if (st < size) {
#pragma unroll
          for (int i = 0; i < E; ++i) {
            if (i & st) continue;
            const int j = i | st;
            const bool up = ((((size >= E ? t * E : t * E + i)) & size) == 0) != desc;
            if ((v[i] > v[j]) == up) {
              const uint64_t x = v[i];
              v[i] = v[j];
              v[j] = x;
            }
          }
        }
      }
  }
  if (act)
#pragma unroll
    for (int i = 0; i < E; ++i) sink(t * E + i, v[i]);
  __syncthreads();
}

__device__ __forceinline__ int next_pow2(int x) {
  int p = 1;
  while (p < x) p <<= 1;
  return p;
}

// ----------------------------------------------------------------------------
// Radix select state and the pass loop.
// The row's KeySkip (select_math.h): its dtype's zero score bits and the
// span of its global indices, g(0) .. g(n - 1). kRowSkip<T>: whether the
// one-block select of a T row uses it (select_passes' Skip).
template <typename T>
constexpr bool kRowSkip = score_zero_bits<T>() > 0;

template <typename T>
__device__ __forceinline__ KeySkip key_skip(const RowCtx& c) {
  KeySkip ks{0, 0, 0u};
  ks.score_lo = score_zero_bits<T>();
  // (built inside each select from the row's context: held across the
  // gather, it spilled the 16-bit kernels)
  if (c.n >= 1) key_skip_span(ks, c.offset, (c.n - 1) * c.scale + c.offset, c.tie);
  return ks;
}

enum PassResult { kDone = 0, kGathered = 1 };

// Runs histogram passes over src until the k-th key is pinned (returns kDone,
// *T = threshold) or, when cand != nullptr, until the keys >= prefix fit in
// cand (gathers them in source order, returns kGathered, *ncand).
// hist_ready: hist already holds the histogram of the first pass (depth
// st.depth, prefix st.prefix) over src, so that pass is not run again.
// MaxDepth < 64: stop once that many top bits are pinned (kDone, *T = the
// prefix: at least k keys are >= it; an estimate, not the k-th key).
// Skip: pin the bits every key of src shares (ks: key_skip of src's row)
// after each pass instead of passing over them (with MaxDepth = 64 only).
// Only the 16-bit rows and tile kernels take it: the fp32 ones measured 3-5%
// slower with it at 4096 x 4096 (H100, k = 160-2048: the compiler no longer
// specialises the first pass), and fp32 scores tie only on adversarial rows.
template <int MaxDepth = 64, bool Skip = false, class Src>
__device__ int select_passes(const Src& src, int k, SelState& st, uint32_t* hist, BlockScratch& s,
                             uint64_t* cand, int cand_cap, int* ncand, uint64_t* T,
                             bool hist_ready = false, const KeySkip& ks = KeySkip{0, 0, 0u}) {
  static_assert(!Skip || MaxDepth == 64, "a skip pins bits below an estimate's depth");
  while (true) {
    const int dbits = Skip ? pass_bits(st.depth) : digit_bits(st.depth);
    if (Skip && !hist_ready && st.depth == 0)
      hist_pass(src, hist, 0ull, 0, 11);  // (the first pass's own copy, as the compiler makes without Skip)
    else if (!hist_ready)
      hist_pass(src, hist, st.prefix, st.depth, dbits);
    hist_ready = false;
    find_bin(hist, dbits, st.kk, s);
    const int b = s.bin, above = s.above, E = s.count;
    __syncthreads();  // scratch reused below
    st.kk -= above;
    st.prefix |= uint64_t(b) << (64 - st.depth - dbits);
    st.depth += dbits;
    if (E == st.kk || st.depth >= MaxDepth) {
      *T = st.prefix;
      return kDone;
    }
    const int C = (k - st.kk) + E;
    if (cand != nullptr && C <= cand_cap) {
      const uint64_t P = st.prefix;
      *ncand = compact_pass(src, P, s, [&](int pos, uint64_t key) { cand[pos] = key; });
      __syncthreads();
      return kGathered;
    }
    // (after the pass, not before the next: the first pass keeps its code.
    // depth stays < 64: E >= 2 distinct keys share the prefix, so some bit
    // below it differs)
    if (Skip) skip_shared_bits<1>(ks, st);
  }
}

// In-place ordered compaction of n keys in shared memory: keeps the keys >=
// T, in order; returns how many. IT keys per thread per step (few registers:
// it runs inside loops that hold other state). Safe in place: a step reads
// positions [tb, tb + step) before its scan's barriers and writes positions
// below tb + step after them; the next step reads from tb + step on.
template <int IT>
__device__ int compact_smem_inplace(uint64_t* buf, int n, uint64_t T, BlockScratch& s) {
  const int step = int(blockDim.x) * IT;
  int base = 0;
  for (int tb = 0; tb < n; tb += step) {
    const int gs = tb + int(threadIdx.x) * IT;
    uint64_t key[IT];
    uint32_t sel = 0;
#pragma unroll
    for (int i = 0; i < IT; ++i) {
      key[i] = 0;
      if (gs + i < n) {
        key[i] = buf[gs + i];
        if (key[i] >= T) sel |= 1u << i;
      }
    }
    int total;
    int pos = base + block_excl_scan(__popc(sel), s, &total);
#pragma unroll
    for (int i = 0; i < IT; ++i)
      if ((sel >> i) & 1u) buf[pos++] = key[i];
    base += total;
  }
  return base;
}

// ----------------------------------------------------------------------------
// Online first pass over a streamed row: ONE read of the row builds the full
// top-digit (11-bit) histogram and gathers, into buf (shared memory, index
// order), a superset of the keys whose top digit is >= the final threshold
// bin b*.
//
// After each tile the running bin rb is the bin where the count from the top
// of the histogram so far reaches k (0 while fewer than k keys were seen).
// Counts only grow, so rb only rises and every rb <= b*. A tile's keys with
// digit >= rb (rb computed with that tile counted) are appended; when the
// buffer has no room for a whole tile, it is compacted in place against the
// current rb. A key with digit >= b* is therefore never skipped or dropped:
// if nothing overflowed, buf holds every key with digit >= b* (plus some
// below it). Returns false if a tile did not fit even after compaction; buf
// is then unusable, but the histogram is still complete.
//
// On return (all threads): s.bin = b*, s.above = keys in higher bins,
// s.count = keys in bin b* (the find_bin of the complete histogram), and hist
// is the complete top-digit histogram of src. Needs src to hold >= k keys.
template <class Src>
__device__ bool online_pass(const Src& src, int k, uint32_t* hist, BlockScratch& s, uint64_t* buf,
                            int cap, int* nbuf) {
  for (int i = threadIdx.x; i < kMaxBins; i += blockDim.x) hist[i] = 0;
  if (threadIdx.x == 0) {
    s.bin = 0;
    s.above = 0;
    s.count = 0;
  }
  __syncthreads();
  const int64_t step = int64_t(blockDim.x) * kItems;
  const int64_t end = src.end();
  const int ntiles = int((end - src.first() + step - 1) / step);
  int base = 0;  // keys in buf (uniform)
  bool ok = true;
  int rb = 0;
  int64_t gs = src.first() + int64_t(threadIdx.x) * kItems;
  // (No software pipelining of the loads: holding the next tile's data
  // across the tile's work and compaction spills at 64 registers. Other
  // blocks' loads, and the one read instead of two, are what this pass buys.)
  for (int t = 0; t < ntiles; ++t) {
    if (ok && base > cap - int(step)) {
      // no room for a whole tile: drop the keys below the running bin (in
      // place; order kept). The barrier orders the previous tile's appends
      // before the compaction reads them.
      __syncthreads();
      base = compact_smem_inplace<4>(buf, base, uint64_t(rb) << 53, s);
      __syncthreads();
    }
    uint32_t cur[kItems];
    uint32_t m = 0;
    if (gs < end) m = src.load_bits(gs, cur);
#pragma unroll
    for (int i = 0; i < kItems; ++i)
      if ((m >> i) & 1u) atomicAdd(&hist[uint32_t(src.key1(gs + i, cur[i]) >> 53)], 1u);
    __syncthreads();
    find_bin(hist, 11, k, s);  // updates s.bin only once >= k keys were counted
    rb = s.bin;
    if (ok) {
      uint32_t sel = 0;
#pragma unroll
      for (int i = 0; i < kItems; ++i)
        if (((m >> i) & 1u) && int(src.key1(gs + i, cur[i]) >> 53) >= rb) sel |= 1u << i;
      int total;
      int pos = base + block_excl_scan(__popc(sel), s, &total);
      if (base + total <= cap) {
#pragma unroll
        for (int i = 0; i < kItems; ++i)
          if ((sel >> i) & 1u) buf[pos++] = src.key1(gs + i, cur[i]);
        base += total;
      } else {
        ok = false;
      }
    }
    gs += step;
  }
  __syncthreads();
  *nbuf = base;
  return ok;
}

// Output writer. sel: the keys >= T of src (exactly keff of them).
struct OutRow {
  int32_t* idx;
  float* val;  // may be null
  int k;
  int tie;
  __device__ __forceinline__ void put(int pos, uint64_t key) const {
    idx[pos] = int32_t(stk::key_index(key, tie));
    if (val) val[pos] = __uint_as_float(stk::key_value_bits(key));
  }
  __device__ void pad(int from) const {
    for (int i = from + threadIdx.x; i < k; i += blockDim.x) {
      idx[i] = -1;
      if (val) val[i] = __uint_as_float(stk::kNegInfBits);
    }
  }
};

// Writes the keff distinct keys of outbuf (shared memory, capacity
// next_pow2(keff), complete: the caller synced) in rank order.
// (Tried, measured slower on the H200: warp-sorted runs of 256 keys merged
// level by level with a binary search per key, 28.2 vs 23.6 us at 4 x 40K
// k=2048 rank, 232 vs 209 at 1024 x 16K.) MaxE: keys per thread the
// caller's register budget allows (8 spills under the 1024-thread kernels'
// 64 registers).
template <int MaxE = 4>
__device__ __noinline__ void write_ranked(uint64_t* outbuf, int keff, const OutRow& out) {
  if (keff <= 64) {
    // rank by counting: keys are distinct
    for (int i = threadIdx.x; i < keff; i += blockDim.x) {
      const uint64_t x = outbuf[i];
      int r = 0;
      for (int j = 0; j < keff; ++j) r += outbuf[j] > x;
      out.put(r, x);
    }
  } else {
    const int P = next_pow2(keff);  // >= 128
    for (int i = keff + threadIdx.x; i < P; i += blockDim.x) outbuf[i] = stk::kInvalidKey;
    __syncthreads();
    const auto put = [&](int e, uint64_t key) {
      if (e < keff) out.put(e, key);
    };
    // 8 keys per thread where allowed, from 512 keys on (P = 4096 on 512
    // threads had taken the shared-memory sort: 4 x 150K k=4096 rank 55.1 ->
    // 37.4 us), else 4 (P >= 128: whole warps)
    if (MaxE >= 8 && P >= 512 && P <= 8 * int(blockDim.x)) {
      bitonic_sort_regs<8>(outbuf, P, true, put);
    } else if (P <= 4 * int(blockDim.x)) {
      bitonic_sort_regs<4>(outbuf, P, true, put);
    } else {  // (more than MaxE keys per thread)
      bitonic_sort(outbuf, P, true);
      for (int i = threadIdx.x; i < keff; i += blockDim.x) out.put(i, outbuf[i]);
    }
  }
}

// Writes the keys >= T of src (keff of them) in the requested order, then the
// padding. order: stk::kOrderRank sorts in shared memory (outbuf, capacity
// next_pow2(k)); index/any emit in source order, which is index order for
// every source this package builds.
template <class Src>
__device__ void finish(const Src& src, uint64_t T, int keff, int order, const OutRow& out,
                       uint64_t* outbuf, BlockScratch& s) {
  if (order == stk::kOrderRank && keff > 1) {
    compact_pass(src, T, s, [&](int pos, uint64_t key) { outbuf[pos] = key; });
    __syncthreads();
    write_ranked(outbuf, keff, out);
  } else {
    compact_pass(src, T, s, [&](int pos, uint64_t key) { out.put(pos, key); });
  }
  out.pad(keff);
}

// Small candidate lists (n <= blockDim): rank every candidate by counting.
// cand holds n distinct keys in any order (the output does not depend on
// it); writes the top k. "any" is written in rank order; "index" counts, for
// each selected key, the selected keys of lower global index.
__device__ void finish_small(const uint64_t* cand, int n, int k, int order, const OutRow& out,
                             int* rankbuf) {
  const int keff = min(k, n);
  const int t = int(threadIdx.x);
  uint64_t x = 0;
  int r = 0x7fffffff;
  if (t < n) {
    x = cand[t];
    r = 0;
#pragma unroll 8
    for (int j = 0; j < n; ++j) r += cand[j] > x;
  }
  if (order != stk::kOrderIndex) {
    if (r < keff) out.put(r, x);
  } else {
    rankbuf[t] = r;
    __syncthreads();
    if (r < keff) {
      const uint32_t g = stk::key_index(x, out.tie);
      int pos = 0;
#pragma unroll 4
      for (int j = 0; j < n; ++j) pos += rankbuf[j] < keff && stk::key_index(cand[j], out.tie) < g;
      out.put(pos, x);
    }
  }
  out.pad(keff);
}

}  // namespace stk_nv
