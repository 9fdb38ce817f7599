// nvidia-sm100: the split path for long rows (a row cut into pieces over
// several blocks and kernels; sampled or histogram variant). Included by
// topk.cu after topk_rows.cuh (its final kernel falls back to the streamed
// one-block select).
#pragma once

namespace stk_nv {

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
  int hsh;   // mode 4: 0, or 1 + the candidate histogram's bin shift (split_cand_bin)
  int how;   // mode 4: est from 0: none (every key a candidate), 1: sample_est_binned, 2: sample_prefix22 (tests read it)
};

// The final kernel's candidate bins (SplitWs::chist): bin of a candidate
// whose top 32 key bits are o >= lo (lo: est's top 32 bits), in kMaxBins
// bins of 2^sh scores each from lo, the last one open above. The sample
// kernel picks sh so that the bins span twice the distance from lo to its
// largest sample, which lies far above the row's k-th key when the sample
// holds a few keys above it (n / S <~ k / 3); a k-th key in the open bin, or
// in a bin of more than kBinListCap keys (ties), sends the final kernel to
// its radix select (exact either way).
__device__ __forceinline__ uint32_t split_cand_bin(uint32_t o, uint32_t lo, int sh) {
  return min((o - lo) >> sh, uint32_t(kMaxBins - 1));
}

constexpr int kBinListCap = 1024;  // keys of the k-th key's bin cand_kth_binned ranks, at most

constexpr int kSplitWarps = 8;       // warps per block of split_items_kernel (topk_split_items.cuh)
constexpr int kSplitMaxRows = 512;   // rows the balanced split takes (its per-block row table)
constexpr int kSplitMaxChunks = 512; // chunks per row of the balanced split (ws.items; the final kernel's offset table)
constexpr int kGrainUnit = 64;       // columns: the balanced split's chunk size is a multiple of it
static_assert((kSplitMaxChunks & (kSplitMaxChunks - 1)) == 0 && kSplitMaxChunks <= 1024,
              "the final kernel's binary lifting and its one-thread-per-segment scan");

// Chunks of a row of n columns in the balanced split: one per `grain`
// columns (the call's chunk size, worked out by split_items_kernel), at most
// ws.items; none for a row of <= k columns (the final kernel takes it).
__device__ __forceinline__ int split_row_chunks(int64_t n, int k, int64_t grain, const SplitWs& ws) {
  if (n <= k) return 0;
  const int64_t c = (n + grain - 1) / grain;
  return int(c < ws.items ? c : int64_t(ws.items));
}

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
    const int C = (p.k - kk) + E;
    rs->mode = (E == kk) ? 1 : (C <= p.cand_cap ? 2 : 3);
  }
}

// Sampled split, step 1 (one block per row): est = a lower bound of the
// m-th largest key of a strided sample of S = min(n, 8 x blockDim) keys,
// m ~ 2.5 k S / n (at least 16), so about 2.5 k keys of the row are >= est.
// Only the speed depends on how good est is: exactness is checked by the
// final kernel (count >= k). Sample: blockDim runs of 8 consecutive columns
// (one 32-byte sector of fp32), in groups of adjacent runs spread evenly
// over the row, or the whole row if n < S. est is the lower edge of a bin
// that holds the m-th largest sample (so <= it), from the samples' top 32
// key bits in registers: one pass of bins below the largest sample
// (sample_est_binned), or, where that declines (fewer than m samples in
// its bins' range, or the m-th's bin too coarse), two 11-bit radix passes
// (sample_prefix22).
template <typename T>
__global__ void __launch_bounds__(1024) split_sample_kernel(TopkParams p, SplitWs ws) {
  pdl_begin(p);
  STK_CLOCK(0);
  __shared__ __align__(16) uint32_t hist[kMaxBins];  // (16-byte loads: find_bin2048_warp0)
  __shared__ BlockScratch s;
  __shared__ uint32_t smax;  // the largest sample's top 32 key bits (`sample22`)
  __shared__ uint32_t wred[64];  // sample_est_binned's per-warp maxima and minima
  const int64_t r = blockIdx.x;
  const stk::RowGeometry g = row_geom(p, r);
  const RowCtx c = make_ctx(p, g);
  SplitRowState* rs = reinterpret_cast<SplitRowState*>(ws.state) + r;
  const int64_t n = c.n;
  if (n <= p.k) {
    if (threadIdx.x == 0) rs->mode = 0;
    return;
  }
  if (threadIdx.x == 0) smax = 0;  // (ordered by the select's barriers)
  using raw = typename Scalar<T>::raw;
  const raw* base = row_scores<T>(p, r, g);
  const int64_t runs = blockDim.x;
  const int64_t full = runs * kItems;
  const int S = int(min(n, full));
  // runs come in groups of G adjacent ones (p.cluster_span: 8, 256 bytes
  // at fp32; `no-cspan`: 1): scattered 32-byte runs open about as many DRAM
  // pages as a read of the whole row (the cluster kernel's sample measured
  // the same)
  const int G = p.cluster_span, t = int(threadIdx.x), grp = t / G;
  const int64_t ngrp = (runs + G - 1) / G;
  // n >= full: group g covers [g n / ngrp, + 8 G), disjoint since n / ngrp >= 8 G
  // (the 64-bit division once per thread: per column it was ~30% of the
  // kernel's instructions, ncu)
  const int64_t j0 = n >= full ? (int64_t(grp) * n) / ngrp + int64_t(t - grp * G) * kItems : int64_t(t) * kItems;
  // the run moved down onto the row's 16-byte grid, so that it loads as
  // vectors (GlobalSrc::load: the loads first, then the keys; columns outside
  // [0, n) masked). A column per guarded load issued the 8 loads one after
  // the other, each used at once (ncu source counters, 64 x 1M). Runs of one
  // group move together; two groups may share up to 7 columns (the sample
  // then counts them twice, which moves est a little, never exactness: the
  // final kernel checks the count).
  GlobalSrc<T> src;
  src.init(base, 0, n, c);
  const int64_t gs = j0 - (((j0 - src.first()) % kItems) + kItems) % kItems;
  uint64_t key[kItems] = {};
  const uint32_t m = gs < n ? src.load(gs, key) : 0u;
  if (p.stamps) asm volatile("" ::"l"(key[0]), "l"(key[kItems - 1]));  // loads done before STK_CLOCK(2)
  STK_CLOCK(2);
  int64_t mt = (5 * int64_t(p.k) * S + 2 * n - 1) / (2 * n);
  mt = max(mt, int64_t(16));
  uint64_t est = 0;  // 0: every key is a candidate
  int hsh = 0;       // SplitRowState::hsh
  int how = 0;       // SplitRowState::how
  if (mt < S) {
    // est: the lower edge of the bin holding the mt-th sample's score (the
    // radix passes: its top 22 bits, 13 mantissa bits pinned, ~1e-4 of a
    // bin more than the mt-th key; a third pass cost ~1/3 of the select)
    uint32_t o[kItems], tmx = 0;
#pragma unroll
    for (int q = 0; q < kItems; ++q) {
      o[q] = uint32_t(key[q] >> 32);
      if ((m >> q) & 1u) tmx = max(tmx, o[q]);
    }
    const auto visit = [o, m](auto f) {
#pragma unroll
      for (int q = 0; q < kItems; ++q)
        if ((m >> q) & 1u) f(o[q]);
    };
    // one pass over bins below the largest sample (mx), else (declined, or
    // `sample22`) the two 22-bit passes
    uint32_t pre = 0, mx = 0;
    how = p.sample_bins && sample_est_binned(visit, tmx, m != 0u, int(mt), score_zero_bits<T>(), hist, wred, s, &pre, &mx) ? 1 : 2;
    if (how == 2) {
      pre = sample_prefix22(visit, int(mt), hist, s, [&](int pass) { STK_CLOCK(9 + pass); });  // 9, 10: after each pass (profiling)
      if (ws.chist && !p.sample_bins) {
        const uint32_t wmx = __reduce_max_sync(0xffffffffu, tmx);
        if ((threadIdx.x & 31) == 0) atomicMax(&smax, wmx);
        __syncthreads();
        mx = smax;
      }
    } else {
      STK_CLOCK(9);
    }
    est = uint64_t(pre) << 32;
    // the final kernel's candidate bins: their span from the largest sample
    if (ws.chist) {
      hsh = 1 + cand_bin_shift(mx, pre);
    }
  }
  STK_CLOCK(1);
  if (threadIdx.x == 0) {
    rs->prefix = est;
    rs->mode = 4;
    rs->hsh = hsh;
    rs->how = how;
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

// A thread's fold of candidate key v: its top 32 bits into [lo, hi] and,
// bins (shared, cleared) not null, a count in its bin (split_cand_bin by
// blo, bsh). cand_range_merge then folds the threads' [lo, hi] into
// range[0] / range[1] (shared, preset to ~0 / 0).
__device__ __forceinline__ void cand_fold(uint64_t v, uint32_t& lo, uint32_t& hi, uint32_t* bins, uint32_t blo,
                                          int bsh) {
  const uint32_t o = uint32_t(v >> 32);
  lo = min(lo, o);
  hi = max(hi, o);
  if (bins) atomicAdd(bins + split_cand_bin(o, blo, bsh), 1u);
}

__device__ __forceinline__ void cand_range_merge(uint32_t lo, uint32_t hi, uint32_t* range) {
  lo = __reduce_min_sync(0xffffffffu, lo);
  hi = __reduce_max_sync(0xffffffffu, hi);
  if ((threadIdx.x & 31) == 0) {
    atomicMin(range, lo);
    atomicMax(range + 1, hi);
  }
}

// The candidates' score range and (bins not null) bin counts, as
// split_copy_segments gives them, for candidates already in shared memory
// (consecutive keys on consecutive lanes: conflict-free loads).
__device__ __forceinline__ void cand_range_bins(const uint64_t* cand, int n, uint32_t* range, uint32_t* bins,
                                                uint32_t blo, int bsh) {
  uint32_t lo = ~0u, hi = 0;
  for (int i = int(threadIdx.x); i < n; i += int(blockDim.x)) cand_fold(cand[i], lo, hi, bins, blo, bsh);
  cand_range_merge(lo, hi, range);
}

// Copies a row's segments, in order, to dst (shared memory) and folds the
// keys' top 32 bits into range[0] / range[1] (shared, preset to ~0 / 0).
// off: the segments' offsets, kSplitMaxChunks of them, those past the last
// segment 0x7fffffff; candidate e comes from the last segment j with off[j]
// <= e, found by 9 fixed steps of binary lifting, U candidates per thread at
// a time so that their searches and loads overlap. (ncu, 64 x 1M: an out-of-
// line copy with a search loop per candidate, its shared loads through
// generic addresses, held a third of the final kernel's stall samples.)
// bins (shared, cleared; null: none): each candidate also counts in its bin
// (split_cand_bin by lo, sh).
__device__ __forceinline__ void split_copy_segments(const int* off, const uint64_t* seg0, int cap, int ncand,
                                                    uint64_t* dst, uint32_t* range, uint32_t* bins, uint32_t blo,
                                                    int bsh) {
  constexpr int U = 4;
  const int nt = int(blockDim.x);
  uint32_t lo = ~0u, hi = 0;
  for (int e0 = int(threadIdx.x); e0 < ncand; e0 += U * nt) {
    int j[U], oj[U];
#pragma unroll
    for (int u = 0; u < U; ++u) j[u] = oj[u] = 0;
#pragma unroll
    for (int step = kSplitMaxChunks / 2; step > 0; step >>= 1) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int o = off[j[u] + step];
        const bool in = o <= e0 + u * nt;
        j[u] = in ? j[u] + step : j[u];
        oj[u] = in ? o : oj[u];
      }
    }
    uint64_t v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int e = e0 + u * nt;
      if (e < ncand) v[u] = seg0[int64_t(j[u]) * cap + (e - oj[u])];
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (e0 + u * nt < ncand) {
        dst[e0 + u * nt] = v[u];
        cand_fold(v[u], lo, hi, bins, blo, bsh);
      }
    }
  }
  cand_range_merge(lo, hi, range);
}

// The k-th largest of the n > 1 distinct candidates, whose top 32 bits lie
// in [hmin, hmax]: radix passes whose digits start below the top bits every
// candidate shares (those of hmin and hmax; all 32 if they are equal). A
// select from depth 0 spent its first pass on one or two bins (the
// candidates are the row's top band). Digits of 11 bits, the last one cut at
// bit 0.
__device__ uint64_t cand_select(const uint64_t* cand, int n, uint32_t hmin, uint32_t hmax, int k, uint32_t* hist,
                                BlockScratch& s) {
  int depth = hmin == hmax ? 32 : __clz(hmin ^ hmax);
  uint64_t prefix = depth == 0 ? 0ull : (uint64_t(hmax) << 32) >> (64 - depth) << (64 - depth);
  int kk = k;
  while (true) {
    const int dbits = min(11, 64 - depth), nbins = 1 << dbits, shift = 64 - depth - dbits;
    for (int i = threadIdx.x; i < nbins; i += blockDim.x) hist[i] = 0;
    __syncthreads();
    // consecutive candidates on consecutive lanes: conflict-free 8-byte
    // loads (hist_pass's 8 consecutive keys per thread conflict 16 ways)
#pragma unroll 4
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const uint64_t key = cand[i];
      if (depth == 0 || ((key ^ prefix) >> (64 - depth)) == 0) atomicAdd(&hist[uint32_t(key >> shift) & (nbins - 1)], 1u);
    }
    __syncthreads();
    find_bin(hist, dbits, kk, s);
    const int b = s.bin, above = s.above, E = s.count;
    __syncthreads();  // scratch reused by the next pass
    kk -= above;
    prefix |= uint64_t(b) << (64 - depth - dbits);
    depth += dbits;
    if (E == kk) return prefix;  // the k-th key is the lowest of its bin (always so at depth 64)
  }
}

// The k-th largest of the n distinct candidates from their bins' counts
// (split_copy_segments): bin b holds the k-th key, A keys lie above it and E
// in it; the kk = k - A th largest of bin b's keys is found by ranking them
// (collected in blist, shared, room for lcap keys). One find_bin and
// a pass over the keys instead of cand_select's two or three radix passes
// (each a clear, a count and a find_bin). Returns false (nothing decided)
// if the k-th key lies in the open top bin or among more than lcap.
// each(f): calls f(key) on the calling thread's share of the candidates
// (each candidate once over the block), whatever their layout.
template <class Each>
__device__ __forceinline__ bool cand_kth_binned_each(Each each, const uint32_t* bins, uint32_t lo, int sh, int k,
                                                     uint64_t* blist, int lcap, int* nb, BlockScratch& s,
                                                     uint64_t* kth) {
  if (threadIdx.x == 0) {
    s.bin = -1;
    *nb = 0;
  }
  __syncthreads();
  find_bin(bins, 11, k, s);
  const int b = s.bin, kk = k - s.above, E = s.count;
  if (b < 0 || b >= kMaxBins - 1 || E > lcap) return false;
  each([&](uint64_t key) {
    if (int(split_cand_bin(uint32_t(key >> 32), lo, sh)) == b) {
      const int q = atomicAdd(nb, 1);
      if (q < E) blist[q] = key;
    }
  });
  __syncthreads();
  for (int i = int(threadIdx.x); i < E; i += int(blockDim.x)) {  // keys are distinct: one has rank kk - 1
    const uint64_t x = blist[i];
    int rk = 0;
    for (int q = 0; q < E; ++q) rk += blist[q] > x;
    if (rk == kk - 1) *kth = x;
  }
  __syncthreads();
  return true;
}
// ... of cand[0, n)
__device__ bool cand_kth_binned(const uint64_t* cand, int n, const uint32_t* bins, uint32_t lo, int sh, int k,
                                uint64_t* blist, int lcap, int* nb, BlockScratch& s, uint64_t* kth) {
  return cand_kth_binned_each(
      [&](auto f) {
        for (int i = int(threadIdx.x); i < n; i += int(blockDim.x)) f(cand[i]);
      },
      bins, lo, sh, k, blist, lcap, nb, s, kth);
}

// Writes the keys >= T among cand[0, n) (keff of them) as finish() does: in
// index order (any, index: the candidates are in index order) or ranked.
// Thread t takes candidates r0 + u nt + t of a round (consecutive candidates
// on consecutive lanes: conflict-free 8-byte loads, where CandSrc's 8
// consecutive keys a thread conflict 16 ways) and places them by its warp's
// ballot and one scan of the round's (u, warp) counts in wcnt (shared, at
// least U * 32 + 1 ints).
__device__ void finish_cand(const uint64_t* cand, int n, uint64_t T, int keff, int order, const OutRow& out,
                            uint64_t* outbuf, int* wcnt) {
  constexpr int U = 4;
  const int nt = int(blockDim.x), t = int(threadIdx.x), lane = t & 31, w = t >> 5, nw = nt >> 5;
  const bool ranked = order == stk::kOrderRank && keff > 1;
  const uint32_t below = (1u << lane) - 1u;
  int base = 0;
  for (int r0 = 0; r0 < n; r0 += U * nt) {
    uint64_t key[U];
    uint32_t bal[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int e = r0 + u * nt + t;
      key[u] = e < n ? cand[e] : 0ull;
      bal[u] = __ballot_sync(0xffffffffu, e < n && key[u] >= T);
    }
    if (lane == 0) {
#pragma unroll
      for (int u = 0; u < U; ++u) wcnt[u * nw + w] = __popc(bal[u]);
    }
    __syncthreads();
    if (w == 0) {  // exclusive scan of the U nw counts in (u, warp) order; lane l takes [l q, l q + q)
      const int m = U * nw, q = (m + 31) / 32, i0 = min(m, lane * q), i1 = min(m, i0 + q);
      int loc = 0;
      for (int i = i0; i < i1; ++i) loc += wcnt[i];
      int inc = loc;
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, inc, d);
        if (lane >= d) inc += y;
      }
      int run = inc - loc;
      for (int i = i0; i < i1; ++i) {
        const int c = wcnt[i];
        wcnt[i] = run;
        run += c;
      }
      if (lane == 31) wcnt[m] = inc;  // the round's count
    }
    __syncthreads();
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if ((bal[u] >> lane) & 1u) {
        const int pos = base + wcnt[u * nw + w] + __popc(bal[u] & below);
        if (ranked) outbuf[pos] = key[u];
        else out.put(pos, key[u]);
      }
    }
    base += wcnt[U * nw];
    __syncthreads();  // wcnt is rewritten by the next round; outbuf complete for the sort
  }
  if (ranked) write_ranked(outbuf, keff, out);
  out.pad(keff);
}

template <typename T>
__global__ void __launch_bounds__(1024) split_final_kernel(TopkParams p, SplitWs ws) {
  pdl_begin(p);
  STK_CLOCK(3);
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ BlockScratch s;
  __shared__ uint32_t range[2];  // the least and largest score bits of the candidates
  __shared__ int nbin;           // cand_kth_binned: keys of the k-th key's bin collected
  __shared__ uint64_t kth;       // ... the k-th key
  const int64_t r = blockIdx.x;
  const int t = int(threadIdx.x);
  // loads that do not depend on the row's length, issued beside it (one
  // round trip instead of three): the row's mode, the chunk size, segment
  // t's count (read for t < items, used for t < nseg)
  const SplitRowState* rsp = reinterpret_cast<const SplitRowState*>(ws.state) + r;
  const int mode = rsp->mode;
  const int hsh = rsp->hsh;
  const int64_t grain = ws.balanced ? *ws.grain_out : 0;
  const int items = ws.balanced ? ws.items : ws.chunks;
  const int ct_t = t < items ? ws.counts[r * int64_t(items) + t] : 0;
  const stk::RowGeometry g = row_geom(p, r);
  const RowCtx c = make_ctx(p, g);
  const OutRow out = make_out(p, r);
  SmemLayout L = carve(smem, p);
  using raw = typename Scalar<T>::raw;
  const raw* base = row_scores<T>(p, r, g);
  GlobalSrc<T> gsrc;
  gsrc.init(base, 0, c.n, c);
  if (c.n <= p.k) {
    finish(gsrc, 1ull, int(c.n), p.order, out, L.outbuf, s);
    return;
  }
  if (mode == 1) {
    finish(gsrc, rsp->prefix, p.k, p.order, out, L.outbuf, s);
    return;
  }
  bool ok = mode == 2 || mode == 4;
  // the row's segments (one per chunk), in index order
  const int nseg = ws.balanced ? split_row_chunks(c.n, p.k, grain, ws) : ws.chunks;
  const int cap = ws.balanced ? ws.region / max(nseg, 1) : ws.seg;
  // segment j starts at seg0 + j * cap (the chunked layout: cap = ws.seg)
  const uint64_t* const seg0 = ws.cand + r * (ws.balanced ? int64_t(ws.region) : int64_t(ws.chunks) * ws.seg);
  // segment offsets: one thread per segment (nseg <= kSplitMaxChunks <= blockDim), one block scan
  int* off = L.rankbuf;  // (finish_small / finish_cand reuse it after the copy)
  // the candidates' bins (SplitRowState::hsh; L.hist, cleared here, counted
  // by the copy, read by cand_kth_binned)
  const bool binned = ws.chist && mode == 4 && hsh > 0;
  const uint32_t blo = uint32_t(rsp->prefix >> 32);
  if (binned)
    for (int i = t; i < kMaxBins; i += int(blockDim.x)) L.hist[i] = 0;
  int ncand = 0;
  STK_CLOCK(4);
  if (ok) {
    if (t == 0) {
      range[0] = ~0u;
      range[1] = 0;
    }
    const int ct = t < nseg ? ct_t : 0;
    const bool bad = ct < 0 || ct > cap;
    int total;
    const int ex = block_excl_scan(bad ? 0 : ct, s, &total);
    if (t < kSplitMaxChunks) off[t] = t < nseg ? ex : 0x7fffffff;
    // mode 4: the candidates are the keys >= est; the top k are among them
    // iff there are at least k of them
    ok = !__syncthreads_or(bad) && total <= p.cand_cap && (mode != 4 || total >= p.k);
    ncand = total;
  }
  if (!ok) {
    // exact fallback: the whole row, one block, streamed, from scratch (the
    // two-read multi-pass select: the online one-read gather here spills
    // registers in this kernel; this is the rare, adversarial-data case)
    select_and_finish<false>(gsrc, c.n, p, out, L, s, SelState{0ull, 0, p.k});
    return;
  }
  STK_CLOCK(5);
  split_copy_segments(off, seg0, cap, ncand, L.cand, range, binned ? L.hist : nullptr, blo, hsh - 1);
  __syncthreads();
  STK_CLOCK(6);
  if (ncand <= int(blockDim.x)) {
    finish_small(L.cand, ncand, p.k, p.order, out, L.rankbuf);
    return;
  }
  // from the bins' counts, else from scratch among the candidates (mode 4:
  // the keys >= est; mode 2: those >= the threshold bin's lower edge, at
  // least k of them); blist: outbuf, free until finish_cand
  uint64_t Tk;
  if (!(binned && cand_kth_binned(L.cand, ncand, L.hist, blo, hsh - 1, p.k, L.outbuf, min(kBinListCap, p.out_cap),
                                  &nbin, s, &kth)))
    Tk = cand_select(L.cand, ncand, range[0], range[1], p.k, L.hist, s);
  else
    Tk = kth;
  STK_CLOCK(7);
  finish_cand(L.cand, ncand, Tk, p.k, p.order, out, L.outbuf, L.rankbuf);
  STK_CLOCK(8);
}

}  // namespace stk_nv
