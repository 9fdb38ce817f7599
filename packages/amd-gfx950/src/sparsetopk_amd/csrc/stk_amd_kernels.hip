// sparsetopk amd-gfx950 kernels: exact top-k over SPEC §1 canonical keys.
//
// One source for three builds (see sparsetopk/port/wave.h):
//   clang -x hip --offload-arch=gfx950/gfx942   wave64, the shipped code objects
//   nvcc (or clang -x cuda)                      wave32, the NVIDIA portability build
//   host C++ -DSTK_PORT_EMU -DSTK_WAVE=32|64     the CPU emulator build (tests)
//
// Kernels (extern "C", one parameter struct by value each):
//   stk_decode_topk_{f32,bf16,f16}  k <= 64: one workgroup of four waves per row
//   stk_radix_topk_{f32,bf16,f16}   k <= 4096: radix select + ordered scan
//   stk_merge_{lds,global}          merge of R candidate lists
// Every kernel loops over rows (row = block, block + grid, ...), writes every
// output slot of its rows, reads only the valid columns of a row, and never
// lets the order of atomic operations reach a result (atomics only count).
#include "sparsetopk/port/wave.h"
#include "sparsetopk/canonical.h"

namespace sk = sparsetopk;

// ------------------------------------------------------------------ params
// Mirrored by ctypes structures in sparsetopk_amd/kernels.py: keep in sync.
struct TopKParams {
  const void* scores;   // element [0, 0] of the [rows, width] view
  const void* lengths;  // nullable: int32 / int64 [rows]
  const void* starts;   // nullable: int32 / int64 [rows]
  int32_t* out_idx;     // [rows, k], row stride out_idx_stride
  float* out_val;       // nullable
  int64_t row_stride;   // elements
  int64_t width;
  int64_t rows;
  int64_t length_const;  // row length when lengths == null (huge = full rows)
  int64_t lengths_stride;
  int64_t starts_stride;
  int64_t out_idx_stride;
  int64_t out_val_stride;
  int64_t scale;
  int64_t offset;
  int64_t force_begin;
  int64_t force_end;
  int32_t k;
  int32_t tie;    // sk::kTieLow / kTieHigh
  int32_t order;  // sk::kOrderRank / kOrderIndex / kOrderAny (any == index here)
  int32_t lengths_i64;
  int32_t starts_i64;
  int32_t grid;  // number of workgroups launched (row loop step)
};

struct MergeParams {
  const int32_t* in_idx;  // [rows, M] contiguous (M = R * k_in)
  const float* in_val;    // [rows, M] contiguous
  int32_t* out_idx;
  float* out_val;       // nullable
  uint64_t* workspace;  // [rows or grid, mp] for stk_merge_global; null for lds
  int64_t rows;
  int64_t m;  // candidates per row
  int64_t out_idx_stride;
  int64_t out_val_stride;
  int32_t k;
  int32_t tie;
  int32_t order;
  int32_t grid;
  int32_t mp;  // power of two >= max(m, 1)
  int32_t pad_;
};

namespace {

constexpr int W = stk::kWave;

// --------------------------------------------------------------- dtypes
struct F32 {
  typedef uint32_t raw;
  static STK_DEVICE uint32_t bits(raw r) { return r; }
};
struct BF16 {
  typedef uint16_t raw;
  static STK_DEVICE uint32_t bits(raw r) { return sk::bf16_to_f32_bits(r); }
};
struct F16 {
  typedef uint16_t raw;
  static STK_DEVICE uint32_t bits(raw r) { return sk::f16_to_f32_bits(r); }
};

// ------------------------------------------------------------ row setup
struct RowView {
  int64_t start;
  int64_t n;       // valid buffer columns 0..n-1
  int64_t length;  // clamped global length L_r
};

STK_DEVICE RowView row_view(const TopKParams& p, int64_t r) {
  int64_t s_raw = 0;
  if (p.starts) {
    s_raw = p.starts_i64 ? static_cast<const int64_t*>(p.starts)[r * p.starts_stride]
                         : (int64_t) static_cast<const int32_t*>(p.starts)[r * p.starts_stride];
  }
  int64_t l_raw = p.length_const;
  if (p.lengths) {
    l_raw = p.lengths_i64 ? static_cast<const int64_t*>(p.lengths)[r * p.lengths_stride]
                          : (int64_t) static_cast<const int32_t*>(p.lengths)[r * p.lengths_stride];
  }
  const sk::RowGeometry g = sk::row_geometry(p.width, s_raw, l_raw, p.scale, p.offset);
  RowView v;
  v.start = g.start;
  v.n = g.n_cols;
  v.length = g.length;
  return v;
}

// Ordered canonical score word of buffer column j (forcing applied).
STK_DEVICE uint32_t ordered_score(uint32_t raw_bits, int64_t g, const RowView& rv, const TopKParams& p) {
  const bool forced = sk::is_forced(g, rv.length, p.force_begin, p.force_end);
  return sk::ordered_u32(forced ? sk::kPosInfBits : sk::canonical_bits(raw_bits));
}

STK_DEVICE void write_slot(const TopKParams& p, int64_t r, int64_t s, int32_t idx, uint32_t val_bits) {
  p.out_idx[r * p.out_idx_stride + s] = idx;
  if (p.out_val) {
    union {
      uint32_t u;
      float f;
    } c;
    c.u = val_bits;
    p.out_val[r * p.out_val_stride + s] = c.f;
  }
}

// ------------------------------------------------ shared wave / block tools
// Given 256 bin counts (bin 255 ranks first) and needed in [1, sum], the bin
// holding the needed-th element from the top, the count strictly above it
// and its own count. Every lane of the wave calls it; all get the answer.
STK_DEVICE void wave_find_bin(const uint32_t* hist, uint32_t needed, uint32_t& bin, uint32_t& above,
                              uint32_t& count) {
  constexpr uint32_t kBpl = 256 / W;  // bins per lane, from the top
  const uint32_t lane = stk::lane_id();
  const uint32_t top = 255u - lane * kBpl;
  uint32_t sum = 0;
#pragma unroll
  for (uint32_t t = 0; t < kBpl; ++t) sum += hist[top - t];
  const uint32_t incl = stk::wave_inclusive_sum(sum);
  const uint32_t excl = incl - sum;
  const bool mine = excl < needed && needed <= incl;
  uint32_t b = 0, a = 0, c = 0;
  if (mine) {
    uint32_t acc = excl;
    for (uint32_t t = 0; t < kBpl; ++t) {
      const uint32_t h = hist[top - t];
      if (acc + h >= needed) {
        b = top - t;
        a = acc;
        c = h;
        break;
      }
      acc += h;
    }
  }
  const uint32_t src = stk::ffs_lane(stk::wave_ballot(mine));
  bin = stk::shfl(b, src);
  above = stk::shfl(a, src);
  count = stk::shfl(c, src);
}

// Counts hist[d] += 1 for every active lane. The lanes that share the first
// active lane's digit are added with one atomic: in narrow score bands whole
// waves share their top digits, and same-address LDS atomics serialise. Only
// counts change, so the order of the adds never reaches a result. Every lane
// of the wave calls it.
STK_DEVICE void wave_hist_add(uint32_t* hist, uint32_t d, bool active) {
  const stk::wave_mask_t act = stk::wave_ballot(active);
  if (act == 0) return;  // wave-uniform
  const uint32_t leader = stk::ffs_lane(act);
  const uint32_t dl = stk::shfl(d, leader);
  const stk::wave_mask_t same = stk::wave_ballot(active && d == dl);
  if (stk::lane_id() == leader) {
    stk::atomic_add_u32_local(&hist[dl], stk::popc(same));
  } else if (active && d != dl) {
    stk::atomic_add_u32_local(&hist[d], 1u);
  }
}

// Bitonic sort of buf[0..n) (n a power of two) by one workgroup of `block`
// work-items; descending or ascending. Ends with a block barrier.
template <int kBlockThreads>
STK_DEVICE void block_bitonic(uint64_t* buf, uint32_t n, bool descending) {
  const uint32_t tid = stk::thread_idx();
  for (uint32_t size = 2; size <= n; size <<= 1) {
    for (uint32_t stride = size >> 1; stride > 0; stride >>= 1) {
      for (uint32_t t = tid; t < n / 2; t += kBlockThreads) {
        const uint32_t i = 2 * t - (t & (stride - 1));
        const uint32_t j = i + stride;
        const uint64_t a = buf[i], b = buf[j];
        const bool desc = ((i & size) == 0) ? descending : !descending;
        if (desc ? a < b : a > b) {
          buf[i] = b;
          buf[j] = a;
        }
      }
      stk::block_sync();
    }
  }
}

STK_DEVICE uint32_t next_pow2(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// ====================================================================
// 1. Decode, k <= 64: one workgroup of four waves per row.
//
// Wave w streams windows w, w+4, w+8, ... of kWin columns (kItems per lane,
// lane-interleaved so loads coalesce), the next window's loads in flight
// while the current one is keyed. A column becomes a candidate only if its
// 64-bit key beats the wave's bound `thr` (the k-th best key the wave has
// kept so far; every lane holds the same bound). Candidates are appended,
// in order, to the wave's LDS buffer. When the buffer could overflow on the
// next window, the wave compacts it exactly: a wave-level radix select over
// the 64-bit keys (8-bit digits, counts only, stops as soon as a whole bin
// is taken) keeps exactly the k best and raises the bound. The cost of one
// compaction is a few passes over <= kCap keys, so a row whose every column
// beats the bound (ascending scores, narrow bands) costs a constant factor,
// never a quadratic one. At the end the four lists (<= k each) are ranked
// exactly: rank = number of keys greater, keys are distinct, so slot = rank.
// ====================================================================
namespace decode {
constexpr int kWaves = 4;
constexpr int kBlock = kWaves * W;
constexpr int kItems = 16;
constexpr int kWin = W * kItems;  // 1024 columns for wave64
constexpr int kCap = kWin + 256;
constexpr int kMaxK = 64;

struct Smem {
  uint64_t buf[kWaves][kCap];
  uint32_t hist[kWaves][256];
  uint64_t sel[kMaxK];
  uint32_t cnt[kWaves];
};

// Keeps exactly the `keep` largest keys of buf[0..n) (n > keep) at the front,
// in their original order; returns the smallest kept key.
STK_DEVICE uint64_t wave_compact(uint64_t* buf, uint32_t n, uint32_t keep, uint32_t* hist) {
  const uint32_t lane = stk::lane_id();
  uint64_t prefix = 0, mask = 0;
  uint32_t needed = keep;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (uint32_t b = lane; b < 256; b += W) hist[b] = 0;
    stk::wave_sync();
    for (uint32_t base = 0; base < n; base += W) {
      const uint32_t i = base + lane;
      const uint64_t key = i < n ? buf[i] : 0;
      wave_hist_add(hist, (uint32_t)(key >> shift) & 255u, i < n && (key & mask) == prefix);
    }
    stk::wave_sync();
    uint32_t bin, above, cb;
    wave_find_bin(hist, needed, bin, above, cb);
    needed -= above;
    prefix |= (uint64_t)bin << shift;
    mask |= (uint64_t)0xff << shift;
    stk::wave_sync();  // every lane has read hist before it is cleared again
    if (cb == needed) break;  // the whole bin is in: done
  }
  // Kept: keys above the resolved prefix, and the whole final bin.
  uint32_t out = 0;
  uint64_t mn = ~(uint64_t)0;
  for (uint32_t base = 0; base < n; base += W) {
    const uint32_t i = base + lane;
    const bool v = i < n;
    const uint64_t key = v ? buf[i] : 0;
    const bool k_it = v && (key & mask) >= prefix;
    const stk::wave_mask_t m = stk::wave_ballot(k_it);
    if (k_it) {
      buf[out + stk::popc(m & stk::lanemask_lt())] = key;
      mn = key < mn ? key : mn;
    }
    out += stk::popc(m);
    stk::wave_sync();
  }
  return stk::wave_min_u64(mn);
}

template <class D>
STK_DEVICE void row(const TopKParams& p, int64_t r, Smem& sm) {
  typedef typename D::raw raw;
  const uint32_t tid = stk::thread_idx();
  const uint32_t lane = stk::lane_id();
  const uint32_t wave = tid / W;
  const RowView rv = row_view(p, r);
  const int64_t n = rv.n;
  const uint32_t k = (uint32_t)p.k;
  const raw* src = static_cast<const raw*>(p.scores) + r * p.row_stride + rv.start;
  uint64_t* buf = sm.buf[wave];
  uint32_t* hist = sm.hist[wave];
  uint32_t cnt = 0;
  uint64_t thr = sk::kInvalidKey;  // every valid key is above it
  const int64_t nwin = (n + kWin - 1) / kWin;

  raw cur[kItems], nxt[kItems];
  int64_t win = wave;
  if (win < nwin) {
#pragma unroll
    for (int it = 0; it < kItems; ++it) {
      const int64_t j = win * kWin + it * W + lane;
      cur[it] = j < n ? src[j] : (raw)0;
    }
  }
  for (; win < nwin; win += kWaves) {
    const int64_t nw = win + kWaves;
    if (nw < nwin) {  // next window's loads in flight while this one is keyed
#pragma unroll
      for (int it = 0; it < kItems; ++it) {
        const int64_t j = nw * kWin + it * W + lane;
        nxt[it] = j < n ? src[j] : (raw)0;
      }
    }
    uint64_t keys[kItems];
    bool any = false;
#pragma unroll
    for (int it = 0; it < kItems; ++it) {
      const int64_t j = win * kWin + it * W + lane;
      uint64_t key = sk::kInvalidKey;
      if (j < n) {
        const int64_t g = j * p.scale + p.offset;
        key = sk::make_key(ordered_score(D::bits(cur[it]), g, rv, p), (uint32_t)g, p.tie);
      }
      keys[it] = key;
      any |= key > thr;
    }
    if (stk::wave_ballot(any)) {
#pragma unroll
      for (int it = 0; it < kItems; ++it) {
        const bool pass = keys[it] > thr;
        const stk::wave_mask_t m = stk::wave_ballot(pass);
        if (pass) buf[cnt + stk::popc(m & stk::lanemask_lt())] = keys[it];
        cnt += stk::popc(m);
      }
      if (cnt > (uint32_t)(kCap - kWin)) {  // the next window might not fit
        stk::wave_sync();
        thr = wave_compact(buf, cnt, k, hist);
        cnt = k;
        stk::wave_sync();
      }
    }
#pragma unroll
    for (int it = 0; it < kItems; ++it) cur[it] = nxt[it];
  }
  stk::wave_sync();
  if (cnt > k) {
    wave_compact(buf, cnt, k, hist);
    cnt = k;
  }
  if (lane == 0) sm.cnt[wave] = cnt;
  stk::block_sync();

  // Exact rank over the (<= 4k) surviving keys of the four waves.
  uint32_t c[kWaves], total = 0;
#pragma unroll
  for (int w = 0; w < kWaves; ++w) {
    c[w] = sm.cnt[w];
    total += c[w];
  }
  for (uint32_t t = tid; t < total; t += kBlock) {
    uint32_t w = 0, i = t;
    while (i >= c[w]) {
      i -= c[w];
      ++w;
    }
    const uint64_t key = sm.buf[w][i];
    uint32_t rank = 0;
    for (int w2 = 0; w2 < kWaves; ++w2)
      for (uint32_t i2 = 0; i2 < c[w2]; ++i2) rank += sm.buf[w2][i2] > key ? 1u : 0u;
    if (rank < k) sm.sel[rank] = key;
  }
  stk::block_sync();
  const uint32_t nsel = total < k ? total : k;
  for (uint32_t s = tid; s < k; s += kBlock) {
    if (s >= nsel) {
      write_slot(p, r, s, -1, sk::kNegInfBits);
      continue;
    }
    const uint64_t key = sm.sel[s];
    const uint32_t idx = sk::key_index(key, p.tie);
    uint32_t pos = s;
    if (p.order != sk::kOrderRank) {  // ascending global index
      pos = 0;
      for (uint32_t s2 = 0; s2 < nsel; ++s2) pos += sk::key_index(sm.sel[s2], p.tie) < idx ? 1u : 0u;
    }
    write_slot(p, r, pos, (int32_t)idx, sk::key_value_bits(key));
  }
  stk::block_sync();  // the next row reuses the LDS
}

template <class D>
STK_DEVICE void kernel(const TopKParams& p, Smem& sm) {
  for (int64_t r = stk::block_idx(); r < p.rows; r += p.grid) row<D>(p, r, sm);
}
}  // namespace decode

// ====================================================================
// 2. Large k (<= 4096): radix select on the 32-bit ordered canonical score,
//    then one ordered prefix scan that resolves ties by global index.
//
// Four 8-bit passes (or fewer: a pass whose target bin is taken whole ends
// the search) find the score prefix V of the k-th column and how many of the
// columns matching V are needed (m of c_eq). One forward scan in column
// order then gives every column its ordinal among the V-columns; "low" takes
// the first m, "high" the last m — the same scan, so "high" costs what
// "low" does. The same scan yields each selected column's output position
// in ascending index order ("index"/"any" write directly); "rank" sorts the
// <= 4096 selected 64-bit keys with a bitonic sort in LDS. Histogram counts
// are the only atomics; their order cannot change a count.
// ====================================================================
namespace radix {
constexpr int kBlock = 512;
constexpr int kWaves = kBlock / W;
constexpr int kMaxK = 4096;
constexpr int kHistItems = 4;  // loads in flight per work-item per histogram step
constexpr int kScanItems = 8;  // consecutive columns per work-item per scan step

struct Smem {
  uint64_t buf[kMaxK];
  uint32_t hist[256];
  uint32_t wsum[2][2][kWaves];
  uint32_t info[3];
};

template <class D>
STK_DEVICE uint32_t score_at(const typename D::raw* src, int64_t j, const RowView& rv, const TopKParams& p) {
  return ordered_score(D::bits(src[j]), j * p.scale + p.offset, rv, p);
}

template <class D>
STK_DEVICE void row(const TopKParams& p, int64_t r, Smem& sm) {
  typedef typename D::raw raw;
  const uint32_t tid = stk::thread_idx();
  const uint32_t lane = stk::lane_id();
  const uint32_t wave = tid / W;
  const RowView rv = row_view(p, r);
  const int64_t n = rv.n;
  const uint32_t k = (uint32_t)p.k;
  const raw* src = static_cast<const raw*>(p.scores) + r * p.row_stride + rv.start;

  uint32_t prefix = 0, mask = 0, needed, c_eq;
  if (n <= (int64_t)k) {  // take every valid column: mask 0 makes all "equal"
    needed = (uint32_t)n;
    c_eq = (uint32_t)n;
  } else {
    needed = k;
    c_eq = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (uint32_t b = tid; b < 256; b += kBlock) sm.hist[b] = 0;
      stk::block_sync();
      for (int64_t base = 0; base < n; base += kBlock * kHistItems) {
        uint32_t sv[kHistItems];
#pragma unroll
        for (int it = 0; it < kHistItems; ++it) {  // all loads in flight first
          const int64_t j = base + it * kBlock + tid;
          sv[it] = j < n ? score_at<D>(src, j, rv, p) : 0u;
        }
#pragma unroll
        for (int it = 0; it < kHistItems; ++it) {
          const int64_t j = base + it * kBlock + tid;
          wave_hist_add(sm.hist, (sv[it] >> shift) & 255u, j < n && (sv[it] & mask) == prefix);
        }
      }
      stk::block_sync();
      if (wave == 0) {
        uint32_t bin, above, cb;
        wave_find_bin(sm.hist, needed, bin, above, cb);
        if (lane == 0) {
          sm.info[0] = bin;
          sm.info[1] = above;
          sm.info[2] = cb;
        }
      }
      stk::block_sync();
      const uint32_t bin = sm.info[0], above = sm.info[1], cb = sm.info[2];
      needed -= above;
      prefix |= bin << shift;
      mask |= 0xffu << shift;
      c_eq = cb;
      stk::block_sync();  // info is rewritten next pass
      if (cb == needed) break;
    }
  }

  // Ordered scan: positions in ascending column order.
  const bool rank_order = p.order == sk::kOrderRank;
  const bool low = p.tie == sk::kTieLow;
  const uint32_t skip = c_eq - needed;  // "high" skips the first c_eq - m
  uint32_t carry_gt = 0, carry_eq = 0;
  int par = 0;
  // Each work-item owns kScanItems consecutive columns of a chunk, so the
  // block-wide prefix is over per-item counts: one barrier per chunk.
  for (int64_t base = 0; base < n; base += (int64_t)kBlock * kScanItems) {
    const int64_t j0 = base + (int64_t)tid * kScanItems;
    uint32_t sv[kScanItems];
    uint32_t cgt = 0, ceq = 0;
#pragma unroll
    for (int it = 0; it < kScanItems; ++it) {
      const int64_t j = j0 + it;
      sv[it] = j < n ? score_at<D>(src, j, rv, p) : 0u;
    }
#pragma unroll
    for (int it = 0; it < kScanItems; ++it) {
      const bool valid = j0 + it < n;
      cgt += (valid && (sv[it] & mask) > prefix) ? 1u : 0u;
      ceq += (valid && (sv[it] & mask) == prefix) ? 1u : 0u;
    }
    const uint32_t igt = stk::wave_inclusive_sum(cgt);
    const uint32_t ieq = stk::wave_inclusive_sum(ceq);
    if (lane == W - 1) {
      sm.wsum[par][0][wave] = igt;
      sm.wsum[par][1][wave] = ieq;
    }
    stk::block_sync();
    uint32_t off_gt = 0, off_eq = 0, tot_gt = 0, tot_eq = 0;
    for (int w = 0; w < kWaves; ++w) {
      const uint32_t a = sm.wsum[par][0][w], b = sm.wsum[par][1][w];
      if ((uint32_t)w < wave) {
        off_gt += a;
        off_eq += b;
      }
      tot_gt += a;
      tot_eq += b;
    }
    uint32_t gcount = carry_gt + off_gt + igt - cgt;  // columns above, before this one
    uint32_t e = carry_eq + off_eq + ieq - ceq;       // ordinal among the equal ones
    if (cgt + ceq) {
#pragma unroll
      for (int it = 0; it < kScanItems; ++it) {
        const int64_t j = j0 + it;
        const bool valid = j < n;
        const bool gt = valid && (sv[it] & mask) > prefix;
        const bool eq = valid && (sv[it] & mask) == prefix;
        const bool take = gt || (eq && (low ? e < needed : e >= skip));
        if (take) {
          const uint32_t eq_before = low ? (e < needed ? e : needed) : (e > skip ? e - skip : 0u);
          const uint32_t pos = gcount + eq_before;
          const uint32_t g = (uint32_t)(j * p.scale + p.offset);
          if (rank_order) {
            sm.buf[pos] = sk::make_key(sv[it], g, p.tie);
          } else {
            write_slot(p, r, pos, (int32_t)g, sk::unordered_u32(sv[it]));
          }
        }
        gcount += gt ? 1u : 0u;
        e += eq ? 1u : 0u;
      }
    }
    carry_gt += tot_gt;
    carry_eq += tot_eq;
    par ^= 1;
  }
  const uint32_t nsel = n < (int64_t)k ? (uint32_t)n : k;
  if (rank_order && nsel > 0) {
    const uint32_t np = next_pow2(nsel);
    for (uint32_t t = nsel + tid; t < np; t += kBlock) sm.buf[t] = sk::kInvalidKey;
    stk::block_sync();
    block_bitonic<kBlock>(sm.buf, np, true);
    for (uint32_t s = tid; s < nsel; s += kBlock) {
      const uint64_t key = sm.buf[s];
      write_slot(p, r, s, (int32_t)sk::key_index(key, p.tie), sk::key_value_bits(key));
    }
  }
  for (uint32_t s = nsel + tid; s < k; s += kBlock) write_slot(p, r, s, -1, sk::kNegInfBits);
  stk::block_sync();  // the next row reuses the LDS
}

template <class D>
STK_DEVICE void kernel(const TopKParams& p, Smem& sm) {
  for (int64_t r = stk::block_idx(); r < p.rows; r += p.grid) row<D>(p, r, sm);
}
}  // namespace radix

// ====================================================================
// 3. Merge of R candidate lists (SPEC §2).
//
// Per row: sort the M = R * k_in candidates by (index ascending, value
// descending) — a bitonic sort of 64-bit words in LDS (M <= 4096) or in a
// per-row global workspace — so copies of one index sit together with the
// best first; keep the first of each run (dedupe by index, highest value),
// re-key by the canonical 64-bit key, sort descending, emit the top k
// (re-sorted by index for "index"/"any"). Deterministic: only sorts of
// distinct-or-identical words, no atomics.
// ====================================================================
namespace merge {
constexpr int kBlock = 512;
constexpr int kLdsCap = 4096;
constexpr uint64_t kEmpty = ~(uint64_t)0;

struct Smem {  // control words; the sort buffer is separate (LDS or global)
  uint64_t carry;
  uint32_t nvalid;
};

STK_DEVICE void row(const MergeParams& p, int64_t r, uint64_t* buf, Smem& sm) {
  const uint32_t tid = stk::thread_idx();
  const uint32_t mp = (uint32_t)p.mp;
  const int64_t m = p.m;
  const uint32_t k = (uint32_t)p.k;
  const int32_t* ii = p.in_idx + r * m;
  const float* vv = p.in_val + r * m;
  for (uint32_t t = tid; t < mp; t += kBlock) {
    uint64_t w = kEmpty;
    if ((int64_t)t < m) {
      const int32_t idx = ii[t];
      if (idx >= 0) {
        union {
          float f;
          uint32_t u;
        } c;
        c.f = vv[t];
        const uint32_t ov = sk::ordered_u32(sk::canonical_bits(c.u));
        w = ((uint64_t)(uint32_t)idx << 32) | (uint64_t)(~ov);
      }
    }
    buf[t] = w;
  }
  if (tid == 0) sm.nvalid = 0;
  stk::block_sync();
  block_bitonic<kBlock>(buf, mp, false);
  // Dedupe: first of each index run survives, re-keyed canonically.
  for (uint32_t base = 0; base < mp; base += kBlock) {
    const uint32_t t = base + tid;
    const uint64_t cur = t < mp ? buf[t] : kEmpty;
    uint64_t prev = kEmpty;
    if (t > 0 && t < mp) prev = tid == 0 ? sm.carry : buf[t - 1];
    stk::block_sync();  // all reads of this chunk before any write
    if (t < mp) {
      const bool valid = cur != kEmpty && (t == 0 || (prev >> 32) != (cur >> 32));
      buf[t] = valid ? sk::make_key(~(uint32_t)cur, (uint32_t)(cur >> 32), p.tie) : sk::kInvalidKey;
    }
    if (tid == kBlock - 1) sm.carry = cur;
    stk::block_sync();
  }
  block_bitonic<kBlock>(buf, mp, true);
  const uint32_t lim = mp < k ? mp : k;
  for (uint32_t t = tid; t < lim; t += kBlock)
    if (buf[t] != sk::kInvalidKey) stk::atomic_add_u32_local(&sm.nvalid, 1u);
  stk::block_sync();
  const uint32_t nsel = sm.nvalid;
  if (p.order != sk::kOrderRank && nsel > 1) {
    const uint32_t np = next_pow2(nsel);
    for (uint32_t t = tid; t < np; t += kBlock) {
      const uint64_t key = buf[t];
      buf[t] = t < nsel ? (((uint64_t)sk::key_index(key, p.tie) << 32) | (key >> 32)) : kEmpty;
    }
    stk::block_sync();
    block_bitonic<kBlock>(buf, np, false);
    for (uint32_t s = tid; s < nsel; s += kBlock) {
      const uint64_t w = buf[s];
      const uint32_t ov = (uint32_t)w;
      union {
        uint32_t u;
        float f;
      } c;
      c.u = sk::unordered_u32(ov);
      p.out_idx[r * p.out_idx_stride + s] = (int32_t)(w >> 32);
      if (p.out_val) p.out_val[r * p.out_val_stride + s] = c.f;
    }
  } else {
    for (uint32_t s = tid; s < nsel; s += kBlock) {
      const uint64_t key = buf[s];
      union {
        uint32_t u;
        float f;
      } c;
      c.u = sk::key_value_bits(key);
      p.out_idx[r * p.out_idx_stride + s] = (int32_t)sk::key_index(key, p.tie);
      if (p.out_val) p.out_val[r * p.out_val_stride + s] = c.f;
    }
  }
  for (uint32_t s = nsel + tid; s < k; s += kBlock) {
    union {
      uint32_t u;
      float f;
    } c;
    c.u = sk::kNegInfBits;
    p.out_idx[r * p.out_idx_stride + s] = -1;
    if (p.out_val) p.out_val[r * p.out_val_stride + s] = c.f;
  }
  stk::block_sync();  // the next row reuses buf / sm
}
}  // namespace merge

}  // namespace

// ------------------------------------------------------------ entry points
#define STK_TOPK_ENTRY(NAME, NS, DT)                 \
  STK_KERNEL(NS::kBlock) NAME(TopKParams p) {        \
    __shared__ NS::Smem sm;                          \
    NS::kernel<DT>(p, sm);                           \
  }

STK_TOPK_ENTRY(stk_decode_topk_f32, decode, F32)
STK_TOPK_ENTRY(stk_decode_topk_bf16, decode, BF16)
STK_TOPK_ENTRY(stk_decode_topk_f16, decode, F16)
STK_TOPK_ENTRY(stk_radix_topk_f32, radix, F32)
STK_TOPK_ENTRY(stk_radix_topk_bf16, radix, BF16)
STK_TOPK_ENTRY(stk_radix_topk_f16, radix, F16)

STK_KERNEL(merge::kBlock) stk_merge_lds(MergeParams p) {
  __shared__ uint64_t buf[merge::kLdsCap];
  __shared__ merge::Smem sm;
  for (int64_t r = stk::block_idx(); r < p.rows; r += p.grid) merge::row(p, r, buf, sm);
}

STK_KERNEL(merge::kBlock) stk_merge_global(MergeParams p) {
  __shared__ merge::Smem sm;
  // The workspace has one slice per launched workgroup, reused across its rows.
  uint64_t* buf = p.workspace + (int64_t)stk::block_idx() * p.mp;
  for (int64_t r = stk::block_idx(); r < p.rows; r += p.grid) merge::row(p, r, buf, sm);
}

#if defined(STK_PORT_EMU)
STK_EMU_REGISTER(stk_decode_topk_f32, TopKParams)
STK_EMU_REGISTER(stk_decode_topk_bf16, TopKParams)
STK_EMU_REGISTER(stk_decode_topk_f16, TopKParams)
STK_EMU_REGISTER(stk_radix_topk_f32, TopKParams)
STK_EMU_REGISTER(stk_radix_topk_bf16, TopKParams)
STK_EMU_REGISTER(stk_radix_topk_f16, TopKParams)
STK_EMU_REGISTER(stk_merge_lds, MergeParams)
STK_EMU_REGISTER(stk_merge_global, MergeParams)
STK_EMU_DEFINE_LAUNCHER()
#endif
