// nvidia-sm100 kernels: exact top-k (one block per row, or a row split over
// several blocks for long rows) and merge. See notes/nvidia-sm100.md.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

#include "launch.h"
#include "topk_kernels.cuh"

namespace stk_nv {

// ----------------------------------------------------------------------------
// Row geometry from the call's lengths / starts.
__device__ __forceinline__ int64_t load_index(const void* p, int mode, int64_t stride, int64_t r) {
  return mode == 1 ? int64_t(static_cast<const int32_t*>(p)[r * stride])
                   : static_cast<const int64_t*>(p)[r * stride];
}

__device__ __forceinline__ stk::RowGeometry row_geom(const TopkParams& p, int64_t r) {
  const int64_t st = p.starts_mode == 0 ? 0 : load_index(p.starts, p.starts_mode, p.starts_stride, r);
  int64_t len;
  if (p.len_mode == 0)
    len = INT64_MAX / 4;  // clamped to W_r * scale
  else if (p.len_mode == 3)
    len = p.len_scalar;
  else
    len = load_index(p.lengths, p.len_mode, p.len_stride, r);
  return stk::row_geometry(p.width, st, len, p.scale, p.offset);
}

__device__ __forceinline__ RowCtx make_ctx(const TopkParams& p, const stk::RowGeometry& g) {
  RowCtx c;
  c.n = g.n_cols;
  c.length = g.length;
  c.scale = p.scale;
  c.offset = p.offset;
  c.force_begin = p.force_begin;
  c.force_end = p.force_end;
  c.tie = p.tie;
  return c;
}

// Column 0 of row r's valid range (the row's own start applied).
template <typename T>
__device__ __forceinline__ const typename Scalar<T>::raw* row_scores(const TopkParams& p, int64_t r,
                                                                     const stk::RowGeometry& g) {
  return static_cast<const typename Scalar<T>::raw*>(p.scores) + r * p.row_stride + g.start;
}

__device__ __forceinline__ OutRow make_out(const TopkParams& p, int64_t r) {
  OutRow o;
  o.idx = p.out_idx + r * p.out_idx_stride;
  o.val = p.out_val ? p.out_val + r * p.out_val_stride : nullptr;
  o.k = p.k;
  o.tie = p.tie;
  return o;
}

// Kernels of TopkParams read every parameter line once before the launch
// wait (which the previous kernel's tail hides), so their first uses after
// it do not miss the constant cache.
__device__ __forceinline__ void pdl_warm(const TopkParams& p) {
  asm volatile("" ::"l"(p.scores), "l"(p.width), "l"(p.lengths), "l"(p.starts), "l"(p.starts_stride),
               "l"(p.force_begin), "l"(p.out_idx), "l"(p.out_val_stride), "r"(p.k), "r"(p.cand_cap),
               "r"(p.bulk), "r"(p.stamp_block));
}
// Row geometry from the parameters alone (no lengths tensor, no starts):
// then a kernel may work it out before the launch wait.
__device__ __forceinline__ bool param_geometry(const TopkParams& p) {
  return p.starts_mode == 0 && (p.len_mode == 0 || p.len_mode == 3);
}
__device__ __forceinline__ void pdl_begin(const TopkParams& p) {
  pdl_warm(p);
  pdl_enter();
}

}  // namespace stk_nv
#include "topk_warp.cuh"
namespace stk_nv {

struct SmemLayout {
  uint32_t* hist;
  uint64_t* cand;
  uint64_t* outbuf;
  uint32_t* res;
  int* rankbuf;
};

__device__ __forceinline__ SmemLayout carve(unsigned char* sm, const TopkParams& p) {
  SmemLayout L;
  size_t off = 0;
  L.hist = reinterpret_cast<uint32_t*>(sm + off);
  off += kMaxBins * 4;
  L.rankbuf = reinterpret_cast<int*>(sm + off);
  off += 1024 * 4;
  L.outbuf = reinterpret_cast<uint64_t*>(sm + off);
  off += size_t(p.out_cap) * 8;
  // cand and res are adjacent (every size above is a multiple of 16 bytes:
  // out_cap and cand_cap are even), so a streamed row, which needs no
  // resident copy, uses cand + res as one buffer of cand_cap + res_cap / 2
  // keys for its online gather (online_cap).
  L.cand = reinterpret_cast<uint64_t*>(sm + off);
  off += size_t(p.cand_cap) * 8;
  L.res = reinterpret_cast<uint32_t*>(sm + off);
  return L;
}

// What a one-block kernel (rows, sampled rows) knows of its row r: the
// geometry, the output row, its shared-memory layout and the global source.
template <typename T>
struct BlockRow {
  RowCtx c;
  OutRow out;
  SmemLayout L;
  GlobalSrc<T> gsrc;
  __device__ __forceinline__ BlockRow(const TopkParams& p, unsigned char* smem, int64_t r) {
    const stk::RowGeometry g = row_geom(p, r);
    c = make_ctx(p, g);
    out = make_out(p, r);
    L = carve(smem, p);
    gsrc.init(row_scores<T>(p, r, g), 0, c.n, c);
  }
};

// Selects from a source (global row or resident row) with the candidate
// gather, and writes the row's output.
template <class Src>
__device__ void select_and_finish(const Src& src, int64_t n, const TopkParams& p, const OutRow& out,
                                  SmemLayout& L, BlockScratch& s, SelState st, bool hist_ready = false) {
  const int k = p.k;
  uint64_t T = 0;
  int ncand = 0;
  const int r = select_passes(src, k, st, L.hist, s, L.cand, p.cand_cap, &ncand, &T, hist_ready);
  if (r == kDone) {
    finish(src, T, k, p.order, out, L.outbuf, s);
    return;
  }
  CandSrc cs{L.cand, ncand};
  if (ncand <= int(blockDim.x)) {
    finish_small(L.cand, ncand, k, p.order, out, L.rankbuf);
    return;
  }
  select_passes(cs, k, st, L.hist, s, nullptr, 0, nullptr, &T);
  finish(cs, T, k, p.order, out, L.outbuf, s);
}

// A streamed row (n > k) read once: online_pass gathers the keys of the
// top-digit bins >= the running threshold bin while it builds the histogram;
// the select then finishes on those candidates in shared memory. If the
// buffer overflowed, the exact multi-pass select over the row takes over,
// resuming after its first pass (the histogram is complete), so the
// fallback costs no extra read over the old path.
template <class Src>
__device__ void stream_select(const Src& gsrc, int64_t n, const TopkParams& p, const OutRow& out,
                              SmemLayout& L, BlockScratch& s, int online_cap) {
  const int k = p.k;
  int nb = 0;
  const bool ok = online_pass(gsrc, k, L.hist, s, L.cand, online_cap, &nb);
  const int b = s.bin, above = s.above, E = s.count;
  __syncthreads();  // scratch reused below
  SelState st{uint64_t(b) << 53, 11, k - above};
  if (ok) {
    // keep the keys of bins >= b* (in place, index order kept): exactly the
    // above + E keys at or above the threshold bin
    const int n2 = compact_pass(CandSrc{L.cand, nb}, st.prefix, s,
                                [&](int pos, uint64_t key) { L.cand[pos] = key; });
    __syncthreads();
    if (n2 == above + E) {  // always, by construction; anything else -> exact fallback
      CandSrc cs{L.cand, n2};
      if (E == st.kk) {  // the whole bin is taken: the answer is these n2 == k keys
        finish(cs, st.prefix, k, p.order, out, L.outbuf, s);
        return;
      }
      if (n2 <= int(blockDim.x)) {
        finish_small(L.cand, n2, k, p.order, out, L.rankbuf);
        return;
      }
      uint64_t Tk = 0;
      select_passes(cs, k, st, L.hist, s, nullptr, 0, nullptr, &Tk);
      finish(cs, Tk, k, p.order, out, L.outbuf, s);
      return;
    }
  }
  select_and_finish(gsrc, n, p, out, L, s, SelState{0ull, 0, k}, /*hist_ready=*/true);
}

__device__ __forceinline__ int online_cap(const TopkParams& p) { return p.cand_cap + int(p.res_cap / 2); }

// A row of one tile (at most blockDim x 8 columns) and k <= kBoundMaxK: a
// bound before any radix pass. Each thread holds its 8 columns in registers;
// a bound T on the threads' maxima with k of them at or above it
// (block_bound) is a lower bound of the row's k-th score (k distinct columns
// reach it), so the columns >= T hold the whole top k. When they fit one per
// thread they are ranked by counting (finish_small): two barriers in all
// instead of the 2048-bin histogram passes (k = 16 decode rows of 1344
// columns: ~30-40 survivors). Heavy ties at T (more survivors than threads)
// take the radix select over the resident copy, which is always written.
constexpr int kBoundMaxK = 64;

// SurvivorLoop: the append visits only a thread's survivors (tile kernel:
// 64 x 1344 2.94 -> 2.81 us on the H200); the rows kernel keeps eight
// predicated key builds, as the loop spills there (sm_90a, 64 registers).
template <bool SurvivorLoop, class Src, class Ties>
__device__ void resident_bounded(const Src& gsrc, int64_t n, const TopkParams& p, const OutRow& out,
                                 SmemLayout& L, BlockScratch& s, Ties&& ties) {
  STK_CLOCK(1);
  if (threadIdx.x == 0) s.flag = 0;  // survivor count (block_bound's barrier orders this first)
  const int64_t gs = gsrc.first() + int64_t(threadIdx.x) * kItems;
  uint32_t u[kItems] = {0, 0, 0, 0, 0, 0, 0, 0};  // 0: no column (below every score)
  uint32_t m = 0, tmax = 0;
  if (gs < gsrc.end()) m = gsrc.load_ord(gs, u);
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    if ((m >> i) & 1u) L.res[gs + i] = u[i];
    tmax = max(tmax, u[i]);
  }
  asm volatile("" ::"r"(tmax));  // the loads are consumed before STK_CLOCK(2) (profiling; measured with it)
  STK_CLOCK(2);
  // 0 when no bound was found: then every column is kept. Threads hold
  // columns up to the tile's end: full warps from the geometry alone.
  const int nf = int(min((gsrc.end() - gsrc.first()) / (32 * kItems), int64_t(blockDim.x >> 5)));
  const uint32_t T = block_bound(tmax, p.k, nf, L.hist);
  STK_CLOCK(3);
  // survivors appended in arrival order (finish_small's output does not
  // depend on it): one barrier instead of an ordered block scan
  uint32_t sel = 0;
#pragma unroll
  for (int i = 0; i < kItems; ++i)
    if (((m >> i) & 1u) && u[i] >= T) sel |= 1u << i;
  const RowCtx& c = gsrc.c;
  if (sel) {
    int pos = atomicAdd(&s.flag, __popc(sel));
    if (SurvivorLoop) {
      // a thread has one or two survivors, typically: visit only those (their
      // scores read back from this thread's own resident copy, as registers
      // cannot be indexed), not eight predicated key builds
      do {
        const int i = __ffs(sel) - 1;
        sel &= sel - 1;
        if (pos < int(blockDim.x)) L.cand[pos] = c.key_of_ord(L.res[gs + i], gs + i);
        ++pos;
      } while (sel);
    } else {
#pragma unroll
      for (int i = 0; i < kItems; ++i)
        if ((sel >> i) & 1u) {
          if (pos < int(blockDim.x)) L.cand[pos] = c.key_of_ord(u[i], gs + i);
          ++pos;
        }
    }
  }
  __syncthreads();
  const int total = s.flag;
  STK_CLOCK(4);
  if (p.stamps && blockIdx.x == p.stamp_block && threadIdx.x == 0) g_cluster_stamps[30] = total;
  if (total <= int(blockDim.x)) {
    STK_CLOCK(5);
    finish_small(L.cand, total, p.k, p.order, out, L.rankbuf);
    STK_CLOCK(6);
    return;
  }
  ties();  // the radix select over the resident copy
  STK_CLOCK(7);
}

// One block per row.
template <typename T>
__global__ void __launch_bounds__(1024) topk_rows_kernel(TopkParams p) {
  pdl_begin(p);
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ BlockScratch s;
  STK_CLOCK(0);
  const BlockRow<T> row(p, smem, blockIdx.x);  // copied out: values, as the callees expect
  const RowCtx c = row.c;
  const OutRow out = row.out;
  SmemLayout L = row.L;
  const GlobalSrc<T> gsrc = row.gsrc;
  const int64_t n = c.n;
  if (n <= p.k) {
    finish(gsrc, 1ull, int(n), p.order, out, L.outbuf, s);
    return;
  }
  SelState st{0ull, 0, p.k};
  if (n <= p.res_cap) {
    const int64_t step = int64_t(blockDim.x) * kItems;
    if (p.k <= kBoundMaxK && gsrc.end() - gsrc.first() <= step) {
      resident_bounded<false>(gsrc, n, p, out, L, s, [&] {
        ResSrc rs{L.res, n, c, 0};
        select_and_finish(rs, n, p, out, L, s, SelState{0ull, 0, p.k});
      });
      return;
    }
#pragma unroll 2
    for (int64_t gs = gsrc.first() + int64_t(threadIdx.x) * kItems; gs < gsrc.end(); gs += step) {
      uint64_t key[kItems];
      const uint32_t m = gsrc.load(gs, key);
#pragma unroll
      for (int i = 0; i < kItems; ++i)
        if ((m >> i) & 1u) L.res[gs + i] = uint32_t(key[i] >> 32);
    }
    __syncthreads();
    ResSrc rs{L.res, n, c, 0};
    select_and_finish(rs, n, p, out, L, s, st);
    STK_CLOCK(7);
  } else if (p.online) {
    stream_select(gsrc, n, p, out, L, s, online_cap(p));
  } else {
    select_and_finish(gsrc, n, p, out, L, s, st);
  }
}

// The tile kernel's heavy-ties path (more survivors of the bound than
// threads: the radix select over the resident copy), out of line so the
// kernel's hot path is laid out together: inside the rows kernel (~390 KB of
// code) the bounded path jumps across it (no-instruction stalls under ncu at
// 64 x 1344).
template <typename T>
__device__ __noinline__ void tile_ties(TopkParams p, RowCtx c, OutRow out, SmemLayout L, BlockScratch& s) {
  ResSrc rs{L.res, c.n, c, 0};
  select_and_finish(rs, c.n, p, out, L, s, SelState{0ull, 0, p.k});
}

// Rows of one tile each and k <= kBoundMaxK (decode rows up to 8K columns
// on fewer rows than SMs): resident_bounded alone, which also serves rows of
// at most k columns (fewer than k thread maxima: no bound, every column is
// ranked), so the row's loads are the first thing after the launch wait.
// Geometry that needs no global read (no lengths tensor, no starts) is
// worked out before the wait, under the previous kernel's tail.
// Measured on the H200 (bench views, same call): 64 x 1344 k=16 3.13 us vs
// 3.54 in the rows kernel.
template <typename T>
__global__ void __launch_bounds__(1024) topk_tile_kernel(TopkParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ BlockScratch s;
  pdl_warm(p);
  if (!param_geometry(p)) pdl_wait();
  const BlockRow<T> row(p, smem, blockIdx.x);
  const RowCtx c = row.c;
  const OutRow out = row.out;
  SmemLayout L = row.L;
  const GlobalSrc<T> gsrc = row.gsrc;
  pdl_enter();
  STK_CLOCK(0);
  resident_bounded<true>(gsrc, c.n, p, out, L, s, [&] { tile_ties<T>(p, c, out, L, s); });
}

// ----------------------------------------------------------------------------
// Split path for long rows: a row is cut into `chunks` pieces (per-row chunk
// size from its own valid length). Pass 1 histograms the top digit over all
// pieces (integer atomics into a per-row global histogram), a per-row kernel
// finds the threshold bin, the pieces gather their keys >= that bin into
// per-piece segments in index order, and a per-row kernel finishes the select
// on the gathered candidates (or, if any segment overflowed, on the full row).
//
// Sampled variant (the default; `Plan::sampled`): split_sample_kernel picks,
// per row, a key estimate `est` from a strided sample (about 2.5 k
// candidates expected), split_gather_kernel gathers the keys >= est of every
// piece in ONE read (no histogram pass, no memset), and split_final_kernel
// selects the exact top k among the candidates when they number >= k (then
// the k-th key is >= est, so every top-k key was gathered) and fit; else the
// row is selected by the one-block streamed path (exact).
struct SplitRowState {
  unsigned long long prefix;  // modes 1-3: threshold bin prefix; mode 4: est
  int mode;  // 0: n <= k (take all); 1: threshold known; 2: gather; 3: full fallback; 4: sampled gather
  int kk;
  int depth;
  int pad;
};

__device__ __forceinline__ void chunk_range(int64_t n, int chunks, int c, int64_t* lo, int64_t* hi) {
  int64_t cs = (n + chunks - 1) / chunks;
  cs = (cs + kItems - 1) / kItems * kItems;
  *lo = min(n, int64_t(c) * cs);
  *hi = min(n, *lo + cs);
}

template <typename T>
__global__ void __launch_bounds__(1024) split_hist_kernel(TopkParams p, SplitWs ws) {
  pdl_begin(p);
  __shared__ uint32_t hist[kMaxBins];
  const int64_t r = blockIdx.y;
  const stk::RowGeometry g = row_geom(p, r);
  const RowCtx c = make_ctx(p, g);
  if (c.n <= p.k) return;
  int64_t lo, hi;
  chunk_range(c.n, ws.chunks, blockIdx.x, &lo, &hi);
  if (lo >= hi) return;
  using raw = typename Scalar<T>::raw;
  const raw* base = row_scores<T>(p, r, g);
  GlobalSrc<T> src;
  src.init(base, lo, hi, c);
  hist_pass(src, hist, 0ull, 0, 11);
  uint32_t* gh = ws.hist + r * kMaxBins;
  for (int i = threadIdx.x; i < kMaxBins; i += blockDim.x)
    if (hist[i]) atomicAdd(gh + i, hist[i]);
}

__global__ void __launch_bounds__(1024) split_find_kernel(TopkParams p, SplitWs ws) {
  pdl_begin(p);
  __shared__ uint32_t hist[kMaxBins];
  __shared__ BlockScratch s;
  const int64_t r = blockIdx.x;
  const stk::RowGeometry g = row_geom(p, r);
  SplitRowState* rs = reinterpret_cast<SplitRowState*>(ws.state) + r;
  if (g.n_cols <= p.k) {
    if (threadIdx.x == 0) rs->mode = 0;
    return;
  }
  const uint32_t* gh = ws.hist + r * kMaxBins;
  for (int i = threadIdx.x; i < kMaxBins; i += blockDim.x) hist[i] = gh[i];
  __syncthreads();
  find_bin(hist, 11, p.k, s);
  if (threadIdx.x == 0) {
    const int kk = p.k - s.above;
    const int E = s.count;
    rs->prefix = uint64_t(s.bin) << 53;
    rs->kk = kk;
    rs->depth = 11;
    const int C = (p.k - kk) + E;
    rs->mode = (E == kk) ? 1 : (C <= p.cand_cap ? 2 : 3);
  }
}

// Sampled split, step 1 (one block per row): est = a lower bound of the
// m-th largest key of a strided sample of S = min(n, 8 x blockDim) keys,
// m ~ 2.5 k S / n (at least 16), so about 2.5 k keys of the row are >= est.
// Only the speed depends on how good est is: exactness is checked by the
// final kernel (count >= k). Sample: blockDim runs of 8 consecutive columns
// (one 32-byte sector of fp32) spread evenly over the row, or the whole row
// if n < S. The m-th largest is found by a radix select on the sample keys in
// registers, stopped as soon as its bin is pinned (est = that bin's lower
// edge, <= the m-th sample key).
template <typename T>
__global__ void __launch_bounds__(1024) split_sample_kernel(TopkParams p, SplitWs ws) {
  pdl_begin(p);
  __shared__ uint32_t hist[kMaxBins];
  __shared__ BlockScratch s;
  const int64_t r = blockIdx.x;
  const stk::RowGeometry g = row_geom(p, r);
  const RowCtx c = make_ctx(p, g);
  SplitRowState* rs = reinterpret_cast<SplitRowState*>(ws.state) + r;
  const int64_t n = c.n;
  if (n <= p.k) {
    if (threadIdx.x == 0) rs->mode = 0;
    return;
  }
  using raw = typename Scalar<T>::raw;
  const raw* base = row_scores<T>(p, r, g);
  const int64_t runs = blockDim.x;
  const int64_t full = runs * kItems;
  const int S = int(min(n, full));
  uint64_t key[kItems];
  uint32_t m = 0;
#pragma unroll
  for (int q = 0; q < kItems; ++q) {
    key[q] = 0;
    const int i = int(threadIdx.x) * kItems + q;
    if (i < S) {
      // n >= full: run t covers [t n / runs, + 8), disjoint since n / runs >= 8
      const int64_t j = n >= full ? (int64_t(threadIdx.x) * n) / runs + q : int64_t(i);
      key[q] = c.key_of_bits(Scalar<T>::f32(base[j]), j);
      m |= 1u << q;
    }
  }
  int64_t mt = (5 * int64_t(p.k) * S + 2 * n - 1) / (2 * n);
  mt = max(mt, int64_t(16));
  uint64_t est = 0;  // 0: every key is a candidate
  if (mt < S) {
    uint64_t prefix = 0;
    int depth = 0;
    int kk = int(mt);
    while (depth < 64) {
      const int dbits = digit_bits(depth);
      const int nbins = 1 << dbits;
      const int shift = 64 - depth - dbits;
      for (int i = threadIdx.x; i < nbins; i += blockDim.x) hist[i] = 0;
      __syncthreads();
#pragma unroll
      for (int q = 0; q < kItems; ++q) {
        const bool match = depth == 0 || ((key[q] ^ prefix) >> (64 - depth)) == 0;
        if (((m >> q) & 1u) && match) atomicAdd(&hist[uint32_t(key[q] >> shift) & (nbins - 1)], 1u);
      }
      __syncthreads();
      find_bin(hist, dbits, kk, s);
      const int b = s.bin, above = s.above, E = s.count;
      __syncthreads();
      kk -= above;
      prefix |= uint64_t(b) << shift;
      depth += dbits;
      if (E == kk) break;  // the m-th sample key is the lowest of its bin
    }
    est = prefix;
  }
  if (threadIdx.x == 0) {
    rs->prefix = est;
    rs->kk = p.k;
    rs->depth = 0;
    rs->mode = 4;
  }
}

// (defined in topk_cluster.cuh, included below)
template <int V, typename T, class Sink>
__device__ int gather_wide(const GlobalSrc<T>& src, uint64_t thr, BlockScratch& s, Sink sink);

template <typename T>
__global__ void __launch_bounds__(512) split_gather_kernel(TopkParams p, SplitWs ws) {
  pdl_begin(p);
  __shared__ BlockScratch s;
  const int64_t r = blockIdx.y;
  const SplitRowState* rs = reinterpret_cast<const SplitRowState*>(ws.state) + r;
  const stk::RowGeometry g = row_geom(p, r);
  const RowCtx c = make_ctx(p, g);
  if (c.n <= p.k) return;
  const int mode = rs->mode;
  if (mode != 2 && mode != 4) return;  // uniform per block
  int64_t lo, hi;
  chunk_range(c.n, ws.chunks, blockIdx.x, &lo, &hi);
  int* cnt = ws.counts + r * ws.chunks + blockIdx.x;
  if (lo >= hi) {
    if (threadIdx.x == 0) *cnt = 0;
    return;
  }
  using raw = typename Scalar<T>::raw;
  const raw* base = row_scores<T>(p, r, g);
  GlobalSrc<T> src;
  src.init(base, lo, hi, c);
  uint64_t* seg = ws.cand + (r * ws.chunks + blockIdx.x) * int64_t(ws.seg);
  const int cap = ws.seg;
  auto keep = [&](int pos, uint64_t key) {
    if (pos < cap) seg[pos] = key;
  };
  // the float-test gather of the cluster kernel (one compare per column);
  // SPARSETOPK_NV_PATH=legacy-gather: the key-per-column compaction
  const int total = p.legacy_gather ? compact_pass(src, rs->prefix, s, keep) : gather_wide<4>(src, rs->prefix, s, keep);
  if (threadIdx.x == 0) *cnt = total;
}

template <typename T>
__global__ void __launch_bounds__(1024) split_final_kernel(TopkParams p, SplitWs ws) {
  pdl_begin(p);
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ BlockScratch s;
  const int64_t r = blockIdx.x;
  const stk::RowGeometry g = row_geom(p, r);
  const RowCtx c = make_ctx(p, g);
  const OutRow out = make_out(p, r);
  SmemLayout L = carve(smem, p);
  using raw = typename Scalar<T>::raw;
  const raw* base = row_scores<T>(p, r, g);
  GlobalSrc<T> gsrc;
  gsrc.init(base, 0, c.n, c);
  const SplitRowState* rsp = reinterpret_cast<const SplitRowState*>(ws.state) + r;
  if (c.n <= p.k) {
    finish(gsrc, 1ull, int(c.n), p.order, out, L.outbuf, s);
    return;
  }
  const int mode = rsp->mode;
  SelState st{rsp->prefix, rsp->depth, rsp->kk};
  if (mode == 1) {
    finish(gsrc, st.prefix, p.k, p.order, out, L.outbuf, s);
    return;
  }
  bool ok = mode == 2 || mode == 4;
  const int* cnt = ws.counts + r * ws.chunks;
  if (ok) {
    if (threadIdx.x == 0) {
      int64_t tot = 0;
      bool fit = true;
      for (int i = 0; i < ws.chunks; ++i) {
        fit = fit && cnt[i] <= ws.seg;
        tot += cnt[i];
      }
      // mode 4: the candidates are the keys >= est; the top k are among them
      // iff there are at least k of them
      s.flag = fit && tot <= p.cand_cap && (mode != 4 || tot >= p.k);
      s.count = int(min(tot, int64_t(INT32_MAX)));
    }
    __syncthreads();
    ok = s.flag != 0;
  }
  if (!ok) {
    // exact fallback: the whole row, one block, streamed, from scratch (the
    // two-read multi-pass select: the online one-read gather here spills
    // registers in this kernel; this is the rare, adversarial-data case)
    select_and_finish(gsrc, c.n, p, out, L, s, SelState{0ull, 0, p.k});
    return;
  }
  if (mode == 4) st = SelState{0ull, 0, p.k};  // select from scratch among the candidates
  const int ncand = s.count;
  __syncthreads();
  // copy segments in chunk order (index order): one warp per chunk
  {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int ch = w; ch < ws.chunks; ch += nw) {
      int off = 0;
      for (int i = 0; i < ch; ++i) off += cnt[i];
      const uint64_t* seg = ws.cand + (r * ws.chunks + ch) * int64_t(ws.seg);
      for (int i = lane; i < cnt[ch]; i += 32) L.cand[off + i] = seg[i];
    }
  }
  __syncthreads();
  CandSrc cs{L.cand, ncand};
  if (ncand <= int(blockDim.x)) {
    finish_small(L.cand, ncand, p.k, p.order, out, L.rankbuf);
    return;
  }
  uint64_t Tk = 0;
  select_passes(cs, p.k, st, L.hist, s, nullptr, 0, nullptr, &Tk);
  finish(cs, Tk, p.k, p.order, out, L.outbuf, s);
}

// Shared tail of the block merges: a[0..P) holds the deduplicated keys in
// index order (0 = empty), `local` this thread's count of valid ones. Selects
// the top k and writes the row.
__device__ void merge_select(const MergeParams& p, int64_t r, const uint64_t* a, int P, int local,
                             uint32_t* hist, uint64_t* outbuf, BlockScratch& s) {
  int nvalid;
  block_excl_scan(local, s, &nvalid);  // syncs: the key array is complete after it
  OutRow out;
  out.idx = p.out_idx + r * p.out_idx_stride;
  out.val = p.out_val + r * p.out_val_stride;
  out.k = p.k;
  out.tie = p.tie;
  CandSrc cs{a, P};
  if (nvalid <= p.k) {
    finish(cs, 1ull, nvalid, p.order, out, outbuf, s);
    return;
  }
  SelState st{0ull, 0, p.k};
  uint64_t T = 0;
  select_passes(cs, p.k, st, hist, s, nullptr, 0, nullptr, &T);
  finish(cs, T, p.k, p.order, out, outbuf, s);
}

// ----------------------------------------------------------------------------
// Merge: R candidate lists per row. Sort (index, value) pairs, keep the
// highest value of each index, then select the top k keys.
__global__ void __launch_bounds__(1024) merge_kernel(MergeParams p) {
  pdl_enter();
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ BlockScratch s;
  const int64_t r = blockIdx.x;
  uint32_t* hist = reinterpret_cast<uint32_t*>(smem);
  uint64_t* outbuf = reinterpret_cast<uint64_t*>(smem + kMaxBins * 4);
  uint64_t* a = outbuf + p.out_cap;
  const int N = p.R * p.k_in;
  const int P = p.n_pad;
  const int32_t* in_i = p.in_idx + r * p.in_idx_stride;
  const float* in_v = p.in_val + r * p.in_val_stride;
  for (int i = threadIdx.x; i < P; i += blockDim.x) {
    uint64_t x = ~0ull;
    if (i < N) {
      const int32_t idx = in_i[i];
      if (idx >= 0) {
        const uint32_t ord = stk::ordered_u32(stk::canonical_bits(__float_as_uint(in_v[i])));
        x = (uint64_t(uint32_t(idx)) << 32) | ord;
      }
    }
    a[i] = x;
  }
  __syncthreads();
  bitonic_sort(a, P, false);
  // keep the last entry of each index (its highest value); rewrite as keys
  int local = 0;
  uint64_t nk[16];
  // process in thread-strided chunks; P <= 16 * blockDim is guaranteed by the host
  {
    int t = 0;
    for (int i = threadIdx.x; i < P; i += blockDim.x, ++t) {
      const uint64_t x = a[i];
      uint64_t key = stk::kInvalidKey;
      if (x != ~0ull) {
        const uint32_t idx = uint32_t(x >> 32);
        const bool last = (i + 1 == P) || uint32_t(a[i + 1] >> 32) != idx;
        if (last) {
          key = stk::make_key(uint32_t(x), idx, p.tie);
          ++local;
        }
      }
      nk[t] = key;
    }
  }
  __syncthreads();
  {
    int t = 0;
    for (int i = threadIdx.x; i < P; i += blockDim.x, ++t) a[i] = nk[t];
  }
  merge_select(p, r, a, P, local, hist, outbuf, s);
}

// ----------------------------------------------------------------------------
// Merge, bucket path (the default for R * k_in > 256; see notes). One block
// of 1024 threads per row, O(N) expected work, no full sort:
//   1. load the indices (kept in registers), block min / max of the valid ones;
//   2. bucket b(idx) = floor((idx - min) * NB / (max - min + 1)) in float
//      (monotone in idx, so bucket order is index order), counts by integer
//      atomics; each thread owns NB / 1024 consecutive buckets, i.e. one
//      contiguous segment of the bucketed array, placed by a block scan;
//   3. scatter the (index << 32 | ordered value) pairs into their buckets
//      (slot inside a bucket by atomics: arrival order, not yet deterministic);
//   4. every thread insertion-sorts its own segment (adaptive: segment length
//      plus inversions, which only occur inside a bucket), so the array is
//      sorted by (index, value) and therefore independent of arrival order;
//      the last entry of each index run (its highest value) becomes the key,
//      the others key 0 (runs never cross a segment: equal indices share a
//      bucket).
// The array is then exactly what the legacy kernel has after its bitonic sort
// and dedupe: keys in ascending index order, so "index" and "any" come
// straight from ordered compaction and "rank" from finish()'s sort. If the
// buckets are skewed (clustered indices: some thread's sort would cost more
// than kMergeMaxCost), the block falls back to the legacy bitonic sort of all
// pairs (exact, as slow as before).
constexpr int kMergeItems = 16;      // N <= 16 x 1024 pairs per row
constexpr int kMergeBlock = 1024;
constexpr uint32_t kMergeMaxCost = 256;  // per-thread segment length + sum c^2 / 2

// In-place dedupe of the ascending (index << 32 | ordered value) pairs in
// a[lo, hi) (~0ull = empty); nxt is the pair at hi (~0ull if none or if no
// run crosses hi). Writes keys (0 for dropped / empty); returns the survivors.
__device__ __forceinline__ int merge_dedupe_segment(uint64_t* a, int lo, int hi, uint64_t nxt, int tie) {
  int local = 0;
  if (lo >= hi) return 0;
  uint64_t cur = a[lo];
  for (int i = lo; i < hi; ++i) {
    const uint64_t nx = i + 1 < hi ? a[i + 1] : nxt;
    uint64_t key = stk::kInvalidKey;
    if (cur != ~0ull && uint32_t(nx >> 32) != uint32_t(cur >> 32)) {
      key = stk::make_key(uint32_t(cur), uint32_t(cur >> 32), tie);
      ++local;
    }
    a[i] = key;
    cur = nx;
  }
  return local;
}

__global__ void __launch_bounds__(kMergeBlock) merge_bucket_kernel(MergeParams p) {
  pdl_enter();
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ BlockScratch s;
  __shared__ uint32_t s_min, s_max, s_skew;
  const int64_t r = blockIdx.x;
  const int tid = threadIdx.x, nt = blockDim.x;
  const int N = p.R * p.k_in;
  const int P = p.n_pad;            // power of two >= N
  const int NB = max(P, nt);        // buckets (power of two, multiple of nt)
  uint64_t* a = reinterpret_cast<uint64_t*>(smem);
  unsigned char* u = smem + size_t(P) * 8;  // union: bucket counters | select hist + outbuf
  uint32_t* cnt = reinterpret_cast<uint32_t*>(u);
  uint32_t* hist = reinterpret_cast<uint32_t*>(u);
  uint64_t* outbuf = reinterpret_cast<uint64_t*>(u + kMaxBins * 4);
  const int32_t* in_i = p.in_idx + r * p.in_idx_stride;
  const float* in_v = p.in_val + r * p.in_val_stride;
  if (tid == 0) {
    s_min = 0xffffffffu;
    s_max = 0;
    s_skew = 0;
  }
  for (int i = tid; i < NB; i += nt) cnt[i] = 0;
  // 1. indices (0xffffffff: empty; valid ones are <= 0x7fffffff)
  uint32_t id[kMergeItems];
  uint32_t lmin = 0xffffffffu, lmax = 0;
#pragma unroll
  for (int q = 0; q < kMergeItems; ++q) {
    const int i = q * nt + tid;
    id[q] = 0xffffffffu;
    if (i < N) {
      const int32_t x = __ldg(in_i + i);
      if (x >= 0) {
        id[q] = uint32_t(x);
        lmin = min(lmin, uint32_t(x));
        lmax = max(lmax, uint32_t(x));
      }
    }
  }
  lmin = __reduce_min_sync(0xffffffffu, lmin);
  lmax = __reduce_max_sync(0xffffffffu, lmax);
  __syncthreads();  // s_* initialised, cnt zeroed
  if ((tid & 31) == 0) {
    atomicMin(&s_min, lmin);
    atomicMax(&s_max, lmax);
  }
  __syncthreads();
  const uint32_t mn = s_min, mx = s_max;
  const float scale = mn <= mx ? __fdiv_rn(float(NB), __fadd_rn(__uint2float_rn(mx - mn), 1.0f)) : 0.0f;
  // monotone non-decreasing in x (every step rounds monotonically); clamped
  auto bucket = [&](uint32_t x) -> int {
    return min(NB - 1, __float2int_rz(__fmul_rn(__uint2float_rn(x - mn), scale)));
  };
  // 2. bucket counts, per-thread segments
#pragma unroll
  for (int q = 0; q < kMergeItems; ++q)
    if (id[q] != 0xffffffffu) atomicAdd(&cnt[bucket(id[q])], 1u);
  __syncthreads();
  const int per = NB / nt;
  const int b0 = tid * per;
  uint32_t seg = 0, cost = 0;
  for (int j = 0; j < per; ++j) {
    const uint32_t c = cnt[b0 + j];
    seg += c;
    cost += c * (c - (c > 0)) / 2;  // inversions inside a bucket: at most c (c - 1) / 2
  }
  cost += seg;
  if (cost > kMergeMaxCost) atomicOr(&s_skew, 1u);
  int nin;  // valid pairs
  const int lo = block_excl_scan(int(seg), s, &nin);  // syncs: s_skew visible after it
  const int hi = lo + int(seg);
  const bool skew = s_skew != 0;
  int local;
  if (!skew) {
    {
      uint32_t run = uint32_t(lo);
      for (int j = 0; j < per; ++j) {
        const uint32_t c = cnt[b0 + j];
        cnt[b0 + j] = run;  // cursor: start of the bucket
        run += c;
      }
    }
    for (int i = nin + tid; i < P; i += nt) a[i] = stk::kInvalidKey;
    __syncthreads();
    // 3. scatter
#pragma unroll
    for (int q = 0; q < kMergeItems; ++q) {
      if (id[q] != 0xffffffffu) {
        const int i = q * nt + tid;
        const uint32_t ord = stk::ordered_u32(stk::canonical_bits(__float_as_uint(__ldg(in_v + i))));
        const uint32_t pos = atomicAdd(&cnt[bucket(id[q])], 1u);
        a[pos] = (uint64_t(id[q]) << 32) | ord;
      }
    }
    __syncthreads();
    // 4. sort own segment (insertion sort; buckets are already in order), dedupe
    for (int i = lo + 1; i < hi; ++i) {
      const uint64_t x = a[i];
      int j = i - 1;
      uint64_t y = a[j];
      while (y > x) {
        a[j + 1] = y;
        if (--j < lo) break;
        y = a[j];
      }
      a[j + 1] = x;
    }
    local = merge_dedupe_segment(a, lo, hi, ~0ull, p.tie);
  } else {
    // skewed buckets: bitonic sort of all P pairs (the legacy algorithm)
    for (int i = tid; i < P; i += nt) {
      uint64_t x = ~0ull;
      if (i < N) {
        const int32_t idx = __ldg(in_i + i);
        if (idx >= 0)
          x = (uint64_t(uint32_t(idx)) << 32) |
              stk::ordered_u32(stk::canonical_bits(__float_as_uint(__ldg(in_v + i))));
      }
      a[i] = x;
    }
    __syncthreads();
    bitonic_sort(a, P, false);
    const int slo = int((int64_t(tid) * P) / nt), shi = int((int64_t(tid + 1) * P) / nt);
    const uint64_t nxt = shi < P ? a[shi] : ~0ull;
    __syncthreads();  // every thread read its successor before anyone rewrites
    local = merge_dedupe_segment(a, slo, shi, nxt, p.tie);
  }
  merge_select(p, r, a, P, local, hist, outbuf, s);
}

static_assert(kMergeItems * kMergeBlock == 16384, "merge_max_candidates");

}  // namespace stk_nv
#include "topk_cluster.cuh"
#include "topk_sampled_rows.cuh"
namespace stk_nv {


// ----------------------------------------------------------------------------
// Host side.

struct DevInfo {
  int sms = 0;
  int smem_optin = 0;
  int max_cluster = 8;  // largest cluster size with active[] > 0
  int active[17] = {};  // active[C]: clusters of C blocks resident at once (full smem), C = 1..16
  bool pdl = false;     // programmatic dependent launch (compute capability 9.0+)
  bool init = false;
};

static DevInfo g_dev[64];
static std::mutex g_mu;

static void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("sparsetopk_nvidia_sm100: ") + what + ": " +
                                                 cudaGetErrorString(e));
}

template <typename K>
static void allow_smem(K kernel, int bytes) {
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
        "cudaFuncSetAttribute");
}

template <typename K>
static void allow_cluster(K kernel, int bytes) {
  allow_smem(kernel, bytes);
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1),
        "cudaFuncSetAttribute");
}

static cudaLaunchAttribute cluster_attr(int C) {
  cudaLaunchAttribute a{};
  a.id = cudaLaunchAttributeClusterDimension;
  a.val.clusterDim.x = unsigned(C);
  a.val.clusterDim.y = 1;
  a.val.clusterDim.z = 1;
  return a;
}

// How many C-block clusters of 512 threads and `smem` bytes fit at once (0:
// that cluster size cannot be launched on this device).
template <typename K>
static int max_active_clusters(K kernel, int C, int smem) {
  cudaLaunchAttribute a = cluster_attr(C);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(C), 1, 1);
  cfg.blockDim = dim3(512, 1, 1);
  cfg.dynamicSmemBytes = size_t(smem);
  cfg.attrs = &a;
  cfg.numAttrs = 1;
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
    (void)cudaGetLastError();  // clear: the answer is "not launchable"
    return 0;
  }
  return n;
}

static const DevInfo& dev_info(int dev) {
  std::lock_guard<std::mutex> lk(g_mu);
  DevInfo& d = g_dev[dev & 63];
  if (!d.init) {
    check(cudaSetDevice(dev), "cudaSetDevice");
    check(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev), "device attribute");
    check(cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
          "device attribute");
    int major = 0;
    check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "device attribute");
    d.pdl = major >= 9;
    // raise every kernel's dynamic shared memory limit once, before any
    // graph capture can be in progress on a later call
    const int lim = d.smem_optin - 4096;
    allow_smem(topk_rows_kernel<float>, lim);
    allow_smem(topk_rows_kernel<bf16_tag>, lim);
    allow_smem(topk_rows_kernel<f16_tag>, lim);
    allow_smem(topk_tile_kernel<float>, lim);
    allow_smem(topk_tile_kernel<bf16_tag>, lim);
    allow_smem(topk_tile_kernel<f16_tag>, lim);
    allow_smem(split_final_kernel<float>, lim);
    allow_smem(split_final_kernel<bf16_tag>, lim);
    allow_smem(split_final_kernel<f16_tag>, lim);
    allow_smem(topk_sampled_rows_kernel<float>, lim);
    allow_smem(topk_sampled_rows_kernel<bf16_tag>, lim);
    allow_smem(topk_sampled_rows_kernel<f16_tag>, lim);
    // (split_sample_kernel uses static shared memory only)
    allow_smem(merge_kernel, lim);
    allow_smem(merge_bucket_kernel, lim);
    allow_cluster(topk_cluster_kernel<float>, lim);
    allow_cluster(topk_cluster_kernel<bf16_tag>, lim);
    allow_cluster(topk_cluster_kernel<f16_tag>, lim);
    d.max_cluster = 1;  // the largest launchable size (above 8 is non-portable)
    for (int c = 1; c <= 16; ++c) {
      d.active[c] = max_active_clusters(topk_cluster_kernel<float>, c, lim);
      if (d.active[c] > 0) d.max_cluster = c;
    }
    d.init = true;
  }
  return d;
}

static int pow2_at_least(int x) {
  int p = 1;
  while (p < x) p <<= 1;
  return p;
}

static size_t fixed_smem(const TopkParams& p) {
  return size_t(kMaxBins) * 4 + 1024 * 4 + size_t(p.cand_cap) * 8 + size_t(p.out_cap) * 8;
}

// Every launch goes through here: the caller's stream, an optional cluster
// shape and, where the plan allows it, programmatic dependent launch (what the
// kernels do with it: pdl_enter in topk_kernels.cuh).
struct Launch {
  cudaStream_t stream;
  bool pdl;
  template <typename... KArgs, typename... Args>
  void operator()(void (*kernel)(KArgs...), dim3 grid, int block, size_t smem, int cluster,
                  Args... args) const {
    cudaLaunchAttribute a[2];
    unsigned n = 0;
    if (cluster > 0) a[n++] = cluster_attr(cluster);
    if (pdl) {
      a[n] = cudaLaunchAttribute{};
      a[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      a[n].val.programmaticStreamSerializationAllowed = 1;
      ++n;
    }
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(unsigned(block), 1, 1);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = n ? a : nullptr;
    cfg.numAttrs = n;
    check(cudaLaunchKernelEx(&cfg, kernel, args...), "kernel launch");
  }
};

template <typename T>
static void launch_topk_t(TopkParams p, const Plan& plan, cudaStream_t stream) {
  const Launch go{stream, plan.pdl};
  const dim3 per_row(unsigned(p.rows));
  if (plan.cluster > 0) {
    go(topk_cluster_kernel<T>, dim3(unsigned(plan.cluster), unsigned(p.rows)), plan.block,
       size_t(plan.smem), plan.cluster, p);
  } else if (plan.warp_wpb > 0) {
    const dim3 blocks(unsigned((p.rows + plan.warp_wpb - 1) / plan.warp_wpb));
    if (plan.warp_m == 1)
      go(topk_warp_kernel<T, 1>, blocks, 32 * plan.warp_wpb, 0, 0, p);
    else
      go(topk_warp_kernel<T, 2>, blocks, 32 * plan.warp_wpb, 0, 0, p);
  } else if (plan.sampled_rows) {
    go(topk_sampled_rows_kernel<T>, per_row, plan.block, size_t(plan.smem), 0, p);
  } else if (plan.split && plan.sampled) {
    const SplitWs ws = plan.ws;
    const dim3 g2(ws.chunks, unsigned(p.rows));
    go(split_sample_kernel<T>, per_row, 1024, 0, 0, p, ws);
    go(split_gather_kernel<T>, g2, 512, 0, 0, p, ws);
    go(split_final_kernel<T>, per_row, 1024, size_t(plan.smem), 0, p, ws);
  } else if (plan.split) {
    const SplitWs ws = plan.ws;
    check(cudaMemsetAsync(ws.hist, 0, size_t(p.rows) * kMaxBins * 4, stream), "memset");
    const dim3 g2(ws.chunks, unsigned(p.rows));
    go(split_hist_kernel<T>, g2, 512, 0, 0, p, ws);
    go(split_find_kernel, per_row, 512, 0, 0, p, ws);
    go(split_gather_kernel<T>, g2, 512, 0, 0, p, ws);
    go(split_final_kernel<T>, per_row, 1024, size_t(plan.smem), 0, p, ws);
  } else if (plan.tile) {
    go(topk_tile_kernel<T>, per_row, plan.block, size_t(plan.smem), 0, p);
  } else {
    go(topk_rows_kernel<T>, per_row, plan.block, size_t(plan.smem), 0, p);
  }
}

// Path overrides for tests and A/B timing: SPARSETOPK_NV_PATH, a comma list of
//   rows          never split (one block per row)
//   split         always split (sampled split unless legacy-split)
//   legacy-split  the split path as histogram + find + gather + final
//   stream        one-block rows never keep the row resident (all streamed)
//   online        streamed rows use the one-read online gather (off by default)
//   no-online     streamed rows use the two-read multi-pass select (default)
//   warp          k <= 64 always takes the warp-per-row kernel
//   block         no warp-per-row kernels (topk and merge use the block ones)
//   legacy-merge  block merges use the bitonic-sort merge_kernel (not the
//                 bucket merge); the warp merge is unaffected
//   cluster       every row goes to the cluster kernel where it fits
//   cluster=N     ... with N blocks per cluster (1..16)
//   no-cluster    split rows take the multi-kernel split path
//   stamps        the cluster kernel records phase times (_C.cluster_stamps())
//   bulk          the cluster kernel's streamed gather uses TMA bulk copies
//                 (exact on the H200, no faster: off by default)
//   legacy-gather the sampled split path gathers with the key-per-column
//                 compaction instead of the float-test gather
//   block-gather  the cluster kernel's streamed gather runs block-synchronous
//                 steps (default: each warp its own span, packed at the end)
//   no-finish     the cluster select runs its passes until the k-th key is
//                 pinned (default: one exchange of the bin's keys once the
//                 bin holds <= 256, cluster_finish)
//   find-barrier  the cluster select's histogram exchange waits on a cluster
//                 barrier per pass (default: st.async + mbarrier)
//   sampled-rows  rows that are not split take the sampled-rows kernel
//                 (sample -> estimate -> one-read gather, 256 threads)
//   no-sampled-rows  ... never (the one-block rows kernel instead)
//   sruns=N       sampled rows: N sample runs of 8 columns per thread (1..4)
//   no-cspan      the cluster kernel's sample takes its runs of 8 columns one
//                 apart (default: in groups of 8 adjacent runs)
//   stampblock=N  the one-block kernels' clock stamps (STK_CLOCK, slots 16..,
//                 29, 30) record block N (default 0; the cluster kernel's stay
//                 block 0)
//   no-tile       rows of one tile (k <= 64) take the rows kernel, not the
//                 tile kernel
//   no-pdl        launch without programmatic dependent launch (default on
//                 sm_90+: each call's blocks become resident while the
//                 previous kernel on the stream finishes)
//   rank-block0   the cluster kernel's rank order: block 0 sorts every key
//                 (default from C = 5 and 129 keys: every block sorts its own
//                 and ranks them against the others' runs)
// Read on every plan (host only), so workspace_bytes and topk agree.
struct PathOpts {
  int split = -1;  // -1 auto, 0 never, 1 always
  bool legacy_split = false;
  bool stream_all = false;
  bool online = false;  // measured on the H200: 3036 us vs 2439 us two-read (causal 128K prefill)
  int warp = -1;  // -1 auto, 0 never, 1 always (k <= 64)
  bool legacy_merge = false;
  int cluster = -1;  // -1 auto (split rows that fit), 0 never, 1 always where it fits
  int cluster_n = 0;  // forced cluster size (0: chosen)
  bool stamps = false;
  bool bulk = false;
  bool legacy_gather = false;
  bool warp_gather = true;
  bool cluster_finish = true;
  bool cluster_mbar = true;
  bool rank_spread = true;
  int sampled_rows = -1;  // -1 auto, 0 never, 1 always (rows not split)
  int sample_runs = 2;    // sampled rows: sample runs of 8 columns per thread
  bool cluster_span = true;
  int stamp_block = 0;
  bool pdl = true;
  bool tile = true;
};

// N of a "name=N" token (N decimal, at most 7 digits, 0..max), else -1.
static int int_token(const std::string& t, const char* name, int max) {
  const std::string pre = std::string(name) + "=";
  if (t.rfind(pre, 0) != 0 || t.size() == pre.size() || t.size() > pre.size() + 7 ||
      t.find_first_not_of("0123456789", pre.size()) != std::string::npos)
    return -1;
  const int n = std::atoi(t.c_str() + pre.size());
  return n <= max ? n : -1;
}

static PathOpts path_opts() {
  PathOpts o;
  const char* e = std::getenv("SPARSETOPK_NV_PATH");
  if (!e) return o;
  std::string v(e);
  size_t i = 0;
  while (i <= v.size()) {
    size_t j = v.find(',', i);
    if (j == std::string::npos) j = v.size();
    const std::string t = v.substr(i, j - i);
    if (t == "rows") o.split = 0;
    else if (t == "split") o.split = 1;
    else if (t == "legacy-split") o.legacy_split = true;
    else if (t == "stream") o.stream_all = true;
    else if (t == "no-online") o.online = false;
    else if (t == "online") o.online = true;
    else if (t == "warp") o.warp = 1;
    else if (t == "block") o.warp = 0;
    else if (t == "legacy-merge") o.legacy_merge = true;
    else if (t == "cluster") o.cluster = 1;
    else if (t == "no-cluster") o.cluster = 0;
    else if (t == "stamps") o.stamps = true;
    else if (t == "bulk") o.bulk = true;
    else if (t == "block-gather") o.warp_gather = false;
    else if (t == "legacy-gather") o.legacy_gather = true;
    else if (t == "no-finish") o.cluster_finish = false;
    else if (t == "find-barrier") o.cluster_mbar = false;
    else if (t == "rank-block0") o.rank_spread = false;
    else if (t == "sampled-rows") o.sampled_rows = 1;
    else if (const int n = int_token(t, "sruns", 4); n > 0) o.sample_runs = n;
    else if (t == "no-sampled-rows") o.sampled_rows = 0;
    else if (t == "no-cspan") o.cluster_span = false;
    else if (t == "no-pdl") o.pdl = false;
    else if (t == "no-tile") o.tile = false;
    else if (const int n = int_token(t, "stampblock", 1 << 30); n >= 0) o.stamp_block = n;
    else if (const int n = int_token(t, "cluster", 16); n > 0) {
      o.cluster = 1;
      o.cluster_n = n;
    }
    else if (!t.empty() && t != "auto")
      throw std::invalid_argument("SPARSETOPK_NV_PATH: unknown token '" + t +
                                  "' (accepted: auto, rows, split, legacy-split, stream, online, no-online, warp, block, legacy-merge, legacy-gather, block-gather, no-finish, find-barrier, rank-block0, cluster, cluster=N, sampled-rows, sruns=N, no-cspan, stampblock=N, no-pdl, no-tile, no-sampled-rows, no-cluster, stamps, bulk)");
    i = j + 1;
  }
  return o;
}

Plan plan_topk(TopkParams& p, int dev) {
  const DevInfo& d = dev_info(dev);
  const PathOpts opt = path_opts();
  Plan plan;
  plan.pdl = d.pdl && opt.pdl;
  const int k = p.k;
  p.out_cap = pow2_at_least(std::max(k, 2));  // even: keeps the resident row 16B aligned
  const int64_t W = p.width;
  // split long rows over several blocks when there are too few rows to fill the GPU
  const int64_t max_n = W;
  bool split = p.rows <= 2 * d.sms && max_n >= 32768 && p.rows * ((max_n + 32767) / 32768) >= 8;
  if (opt.split >= 0) split = opt.split == 1 && W > 0 && p.rows <= 65535;  // grid.y
  p.online = opt.online ? 1 : 0;
  p.stamps = opt.stamps ? 1 : 0;
  p.stamp_block = opt.stamp_block;
  p.cluster_span = opt.cluster_span ? 8 : 1;
  p.bulk = opt.bulk ? 1 : 0;
  p.legacy_gather = opt.legacy_gather ? 1 : 0;
  p.warp_gather = opt.warp_gather ? 1 : 0;
  p.cluster_finish = opt.cluster_finish ? 1 : 0;
  p.cluster_mbar = opt.cluster_mbar ? 1 : 0;
  p.rank_spread = opt.rank_spread ? 1 : 0;
  const int64_t budget = d.smem_optin - 4096;  // minus static shared memory
  // k <= 64: one warp per row (one read, no block syncs) unless a few very
  // long rows need more than one warp's bandwidth each
  // (measured on the H200: below ~SMs rows the one-block kernel is faster,
  // 4.98 vs 6.35 us at 64 x 1344; from 512 rows on the warp kernel wins)
  const bool warp = k <= 64 && opt.warp != 0 &&
                    (opt.warp == 1 || (opt.cluster != 1 && !split && p.rows >= d.sms && (W <= 16384 || p.rows >= 8 * d.sms)));
  if (warp) {
    p.cand_cap = kWarpCap;
    p.res_cap = 0;
    plan.warp_m = k <= 32 ? 1 : 2;
    plan.warp_wpb = p.rows >= 8 * int64_t(d.sms) ? 4 : (p.rows >= 2 * int64_t(d.sms) ? 2 : 1);
    plan.block = 32 * plan.warp_wpb;
    return plan;
  }
  // few long rows: one cluster per row, one kernel (topk_cluster.cuh). Rows
  // that fit the cluster's shared memory are read once and stay resident;
  // longer ones are sampled, then gathered in one read.
  // ("split" / "legacy-split" force the multi-kernel split path instead)
  if (((split && opt.cluster != 0 && opt.split != 1 && !opt.legacy_split) || opt.cluster == 1) && p.rows <= 65535) {
    // the largest cluster whose rows all fit on the GPU at once (GPC
    // boundaries: e.g. 16 rows x 8 blocks may not, and then run in two
    // waves; sizes need not be powers of two)
    int C = 1;
    for (int c = 2; c <= d.max_cluster; ++c)
      if (p.rows <= d.active[c]) C = c;
    // Automatic choice: wherever a cluster of 2+ blocks per row fits all rows
    // at once (or rows < 8). Measured on the H200 (graph replay, fp32 N(0,1),
    // k = 2048, any; cluster vs the sampled split, seventh session):
    // 4 x 40K 12.3 vs 29.0 us, 8 x 64K 16.1 vs 46.5, 8 x 1M 45.7 vs 53.1
    // (C = 9), 16 x 1M 55.5 vs 70.7 (C = 6), 32 x 1M 87.6 vs 112 (C = 3),
    // 48 x 1M 115 vs 128, 64 x 1M 117 vs 175 (C = 2). (Before the per-warp
    // gather's unchecked interior loads and sizes other than powers of two,
    // 16 x 1M lost at C = 4: 96 vs 72 us.) C = 1 (rows > ~66) keeps the split.
    const bool pick = opt.cluster == 1 || p.rows < 8 || C >= 2;
    if (opt.cluster_n > 0) C = opt.cluster_n;
    const int64_t region = (budget - int64_t(cluster_fixed_smem(p.out_cap, C))) / 16 * 16;
    if (pick && C <= d.max_cluster && region >= 8 * 8 * 1024) {
      // (below 2^16 each: cluster_find moves a block's bin counts as 16 bits)
      p.res_cap = std::min<int64_t>(region / 4 / 8 * 8, 65528);  // resident columns per block
      p.cand_cap = int(std::min<int64_t>(region / 8, 65535));    // candidates per block
      plan.cluster = C;
      plan.block = 512;
      plan.smem = int(cluster_fixed_smem(p.out_cap, C) + region);
      return plan;
    }
  }
  if (split) {
    p.cand_cap = 16384;
    p.res_cap = 0;
    plan.split = true;
    // sampled (3 kernels, one read) wins from 16 rows on (72 vs 91 us at 16 x 1M,
    // 194 vs 293 us at 64 x 1M); for a few rows its extra launch and sample
    // cost more than the second read saves (33 vs 25 us at 4 x 40K)
    plan.sampled = !opt.legacy_split && (opt.split == 1 || p.rows >= 8);
    int chunks = int((4 * d.sms + p.rows - 1) / p.rows);
    chunks = std::max(1, std::min<int>(chunks, 64));
    chunks = int(std::min<int64_t>(chunks, (max_n + 4095) / 4096));
    plan.ws.chunks = chunks;
    plan.ws.seg = 1024;
    while (int64_t(plan.ws.seg) * chunks < 2 * p.cand_cap && plan.ws.seg < p.cand_cap) plan.ws.seg *= 2;
    plan.smem = int(fixed_smem(p));
    plan.block = 1024;
  } else if (W > k && p.rows <= INT32_MAX &&
             (opt.sampled_rows == 1 ||
              (opt.sampled_rows < 0 && opt.split != 0 && k >= 1024 && W >= 65536 && W <= 262144))) {
    // many long rows (e.g. ragged prefill): topk_sampled_rows_kernel. ~1.6 k
    // candidates expected, room for 2.75 k (and the sample), three blocks per
    // SM at k = 2048. Measured on the H200 (graph replay, k = 2048, any; vs
    // the one-block rows kernel): prefill 4096 x 128K causal 1081 vs 2264 us,
    // packed 64K+32K+16K+16K 640 vs 885, 512 x 64K 148 vs 160; resident
    // rows keep the rows kernel below 64K columns (1024 x 32K: 208 vs 174).
    // Automatic only where that was measured and the estimate fits the
    // buffer: the sample's floor of 16 keys expects 16 n / S candidates
    // (S = 4096), which outgrows 2.75 k for small k or rows past 256K.
    p.res_cap = 0;
    p.cand_cap = int(std::max<int64_t>(1024, (11 * int64_t(k) / 4 + 7) / 8 * 8));
    plan.sampled_rows = true;
    p.sample_runs = opt.sample_runs;
    plan.block = 256;
    plan.smem = int(fixed_smem(p));
  } else {
    p.cand_cap = int(std::min<int64_t>(16384, std::max<int64_t>(1024, 4 * int64_t(k))));
    const int64_t fixed = int64_t(fixed_smem(p));
    // capacity in whole 8-element tiles, rounded up so a row of any width
    // that fits stays resident (rounding down sent odd widths to streaming)
    int64_t res = std::min<int64_t>((W + 7) / 8 * 8, (budget - fixed) / 4 / 8 * 8);
    res = std::max<int64_t>(0, res);
    if (opt.stream_all) res = 0;
    // keep occupancy for short rows; a row of 64K+ columns streams
    p.res_cap = res;
    plan.smem = int(fixed + res * 4);
    plan.block = W <= 4096 ? 256 : (W <= 32768 ? 512 : 1024);
    // k <= kBoundMaxK: one tile per row (resident_bounded), so as many whole
    // warps as the row has 8-column tiles, plus one for the alignment head
    const int64_t tiles = (W + kItems - 1) / kItems + 1;
    if (k <= kBoundMaxK && tiles <= 1024) {
      plan.block = int(std::max<int64_t>(128, (tiles + 31) / 32 * 32));
      // every row is one tile and resident: the tile kernel
      plan.tile = opt.tile && res >= (W + 7) / 8 * 8;
    }
  }
  return plan;
}

size_t split_workspace_bytes(const TopkParams& p, const Plan& plan) {
  const size_t rows = size_t(p.rows);
  return rows * kMaxBins * 4 + rows * sizeof(SplitRowState) + rows * plan.ws.chunks * 4 +
         rows * plan.ws.chunks * size_t(plan.ws.seg) * 8 + 256;
}

void bind_workspace(const TopkParams& p, Plan& plan, void* ws) {
  unsigned char* b = static_cast<unsigned char*>(ws);
  const size_t rows = size_t(p.rows);
  size_t off = 0;
  plan.ws.cand = reinterpret_cast<uint64_t*>(b + off);
  off += rows * plan.ws.chunks * size_t(plan.ws.seg) * 8;
  plan.ws.hist = reinterpret_cast<uint32_t*>(b + off);
  off += rows * kMaxBins * 4;
  plan.ws.state = b + off;
  off += rows * sizeof(SplitRowState);
  plan.ws.counts = reinterpret_cast<int*>(b + off);
}

void launch_topk(TopkParams p, const Plan& plan, int dtype, int dev, uintptr_t stream) {
  check(cudaSetDevice(dev), "cudaSetDevice");
  if (p.rows == 0) return;
  cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  switch (dtype) {
    case 0: launch_topk_t<float>(p, plan, s); break;
    case 1: launch_topk_t<bf16_tag>(p, plan, s); break;
    case 2: launch_topk_t<f16_tag>(p, plan, s); break;
    default: throw std::invalid_argument("bad dtype code");
  }
}

int merge_max_candidates() { return 16384; }

void cluster_stamps(unsigned long long* out32) {
  check(cudaMemcpyFromSymbol(out32, g_cluster_stamps, 32 * sizeof(unsigned long long)), "cluster_stamps");
}

void launch_merge(MergeParams p, int dev, uintptr_t stream) {
  check(cudaSetDevice(dev), "cudaSetDevice");
  const DevInfo& d = dev_info(dev);
  if (p.rows == 0) return;
  const int N = p.R * p.k_in;
  const PathOpts opt = path_opts();
  const Launch go{reinterpret_cast<cudaStream_t>(stream), d.pdl && opt.pdl};
  if (std::max(N, p.k) <= 256 && opt.warp != 0) {
    // one warp per row
    const int need = std::max(N, p.k);
    const dim3 blocks(unsigned((p.rows + 3) / 4));
    if (need <= 32)
      go(merge_warp_kernel<1>, blocks, 128, 0, 0, p);
    else if (need <= 64)
      go(merge_warp_kernel<2>, blocks, 128, 0, 0, p);
    else if (need <= 128)
      go(merge_warp_kernel<4>, blocks, 128, 0, 0, p);
    else
      go(merge_warp_kernel<8>, blocks, 128, 0, 0, p);
    return;
  }
  p.n_pad = pow2_at_least(std::max(N, 2));
  p.out_cap = pow2_at_least(std::max(p.k, 1));
  const int block = 1024;
  if (p.n_pad > 16 * block) throw std::invalid_argument("merge: too many candidates per row");
  const dim3 per_row(unsigned(p.rows));
  if (!opt.legacy_merge) {
    // pairs | union(bucket counters, select histogram + rank buffer)
    const size_t nb = size_t(std::max(p.n_pad, kMergeBlock));
    const size_t uni = std::max(nb * 4, size_t(kMaxBins) * 4 + size_t(p.out_cap) * 8);
    const size_t smem = size_t(p.n_pad) * 8 + uni;
    go(merge_bucket_kernel, per_row, kMergeBlock, smem, 0, p);
    return;
  }
  const size_t smem = size_t(kMaxBins) * 4 + size_t(p.out_cap) * 8 + size_t(p.n_pad) * 8;
  go(merge_kernel, per_row, block, smem, 0, p);
}

}  // namespace stk_nv
