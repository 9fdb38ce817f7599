// nvidia-sm100: the sampled-rows kernel (many long rows, one block each).
// Included by topk.cu after topk_cluster.cuh (its gathers).
#pragma once

namespace stk_nv {

// Sampled rows (many long rows, e.g. ragged prefill; Plan::sampled_rows):
// one block of 256 threads per row and a small shared-memory footprint, so
// several rows share an SM and one row's select overlaps another's loads.
// est = the m-th largest ordered score of a strided sample (runs of 8
// columns, held as 32-bit ordered scores in the candidate buffer), m ~
// 1.6 k S / n, so ~1.6 k keys of the row are expected >= est; ONE read of the
// row gathers those (index order) into the candidate buffer. If they fit and
// number >= k, the k-th key is >= est and the exact top k are among them;
// else (bad estimate, skewed or tied rows) the exact streamed select runs on
// the row. Only the speed depends on the estimate.
// Three blocks per SM (80 registers). The warp gather keeps V vectors per
// lane in flight and prefetches PF steps ahead into L2: V = 2, PF = 2 for
// every dtype. Measured on the H200: fp32 causal 128K prefill 3 blocks 1202
// us, 2 blocks 1315 (with 8192 sample columns); bf16 prefill causal / packed
// 1131 / 806 us at 2 blocks (V = 4, no prefetch), 1007 / 669 at 3 blocks
// (V = 1, PF = 4: V = 2 spilled then), 825 / 617 -> 794 / 612 from V = 1,
// PF = 4 to V = 2, PF = 2 once the packed 16-bit test made room.
// The sample's tiles come in groups of kSampleSpan adjacent ones (64 columns
// at fp32: 256 bytes), 64 groups per run spread over the row: fewer DRAM
// pages opened than one 32-byte tile every ~1 KB. Measured on the H200
// (same call, fp32 prefill causal / packed): 1082 / 626 us one tile apart,
// 1061 / 608 in groups of 8, 1058 / 606 in groups of 32.
constexpr int kSampleSpan = 8;
constexpr int kMaxSampleRuns = 4;

// The first column of sample tile t of `runs` (a multiple of kSampleSpan),
// spread over a row of `tiles` aligned tiles from f.
__device__ __forceinline__ int64_t sample_col(int64_t f, int64_t tiles, int runs, int t) {
  const int grp = t / kSampleSpan;
  return f + kItems * (tiles > runs ? (int64_t(grp) * tiles) / (runs / kSampleSpan) + (t - grp * kSampleSpan)
                                    : int64_t(t));
}

constexpr int kSampledRowsBlock = 256;  // topk_sampled_rows_kernel's threads (Plan::block)

// The candidates as the in-place gather_warps leaves them: warp w's cnt
// keys at buf + w wcap, in index order, and the regions in warp order are
// index order. Read in place they need no packing pass (on the H200, ncu of
// the fp32 packed prefill cell: that pass over the whole buffer, its six
// rounds of loads, block scans and stores, was ~8% of the kernel's
// instructions). cnt: the calling warp's count (warp-uniform).
struct WarpRegions {
  uint64_t* buf;
  int wcap, cnt;
  __device__ __forceinline__ uint64_t* mine() const { return buf + (int(threadIdx.x) >> 5) * wcap; }
  // f(key) on the calling lane's share of its warp's keys
  template <class F>
  __device__ __forceinline__ void each(F f) const {
    const uint64_t* r = mine();
    for (int i = int(threadIdx.x) & 31; i < cnt; i += 32) f(r[i]);
  }
};

// Packs the regions into buf[0, total) in order: their unused tails cleared
// to empty keys (0), one in-place ordered compaction of every valid key
// (>= 1), for the consumers of a packed buffer (finish_small, cand_select).
// The caller synced after its last read of the regions; the packed buffer is
// complete on return (compact_smem_inplace ends on its stores, not a barrier).
__device__ __forceinline__ void pack_regions(const WarpRegions& g, BlockScratch& s) {
  uint64_t* r = g.mine();
  for (int i = g.cnt + (int(threadIdx.x) & 31); i < g.wcap; i += 32) r[i] = stk::kInvalidKey;
  __syncthreads();
  compact_smem_inplace<4>(g.buf, (int(blockDim.x) >> 5) * g.wcap, 1ull, s);
  __syncthreads();
}

// finish_cand on the regions: each warp counts its keys >= T, one block
// barrier, and writes them in index order at the earlier warps' total
// (wcnt: shared, a count a warp); ranked: into outbuf, then write_ranked.
// No rounds of block scans over the candidates.
__device__ void finish_regions(const WarpRegions& g, uint64_t T, int keff, int order, const OutRow& out,
                               uint64_t* outbuf, int* wcnt) {
  const int lane = int(threadIdx.x) & 31, w = int(threadIdx.x) >> 5;
  const bool ranked = order == stk::kOrderRank && keff > 1;
  const uint64_t* r = g.mine();
  int mine = 0;
  for (int i0 = 0; i0 < g.cnt; i0 += 32) mine += __popc(__ballot_sync(0xffffffffu, i0 + lane < g.cnt && r[i0 + lane] >= T));
  if (lane == 0) wcnt[w] = mine;
  __syncthreads();
  int pos = 0;
  for (int v = 0; v < w; ++v) pos += wcnt[v];
  const uint32_t below = (1u << lane) - 1u;
  for (int i0 = 0; i0 < g.cnt; i0 += 32) {
    const int i = i0 + lane;
    const uint64_t key = i < g.cnt ? r[i] : 0ull;
    const uint32_t b = __ballot_sync(0xffffffffu, i < g.cnt && key >= T);
    if ((b >> lane) & 1u) {
      const int q = pos + __popc(b & below);
      if (ranked) outbuf[q] = key;
      else out.put(q, key);
    }
    pos += __popc(b);
  }
  if (ranked) {
    __syncthreads();
    write_ranked(outbuf, keff, out);
  }
  out.pad(keff);
}

// Sample tiles of a row of n columns: one run (a tile per thread) per
// started 64K columns, p.sample_runs at most (p.sample_fixed: always
// p.sample_runs). A run at 64K columns puts m ~ 100 sample scores above
// est, like two at 128K: an estimate as tight (fallback odds ~3e-6 for
// i.i.d. rows, binomial tails) at half the sample's loads and select (H200,
// fp32 prefill packed 64K+32K+16K+16K: 540 -> 520 us; causal 128K rows keep
// two runs).
// nt: the sampled-rows kernel's threads (a tile each per run).
__device__ __forceinline__ int sample_tiles(const TopkParams& p, int64_t n, int nt) {
  int r = min(kMaxSampleRuns, p.sample_runs);
  if (!p.sample_fixed) r = min(r, int(max(int64_t(1), (n + 65535) >> 16)));
  return nt * min(r, p.cand_cap / (4 * nt));
}

template <typename T>
__global__ void __launch_bounds__(kSampledRowsBlock, 3) topk_sampled_rows_kernel(TopkParams p) {
  pdl_begin(p);
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ BlockScratch s;
  using raw = typename Scalar<T>::raw;
  STK_CLOCK(0);
  const BlockRow<T> row(p, smem, blockIdx.x);  // copied out: values, as the callees expect
  const RowCtx c = row.c;
  const OutRow out = row.out;
  SmemLayout L = row.L;
  const GlobalSrc<T> gsrc = row.gsrc;
  const int64_t n = c.n;
  const int k = p.k;
  if (n <= k) {
    finish(gsrc, 1ull, int(n), p.order, out, L.outbuf, s);
    return;
  }
  if (p.stamps && blockIdx.x == p.stamp_block && threadIdx.x == 0) g_cluster_stamps[29] = uint64_t(n);
  const int cap = p.cand_cap;
  uint64_t est = 0;  // 0: every key is a candidate (rows that fit the buffer)
  int bsh = -1;      // >= 0: the candidates' bin shift (split_cand_bin from est; p.rows_bin)
  // sampled_est_kernel's word for this row (est_kernel), else 0: sample here.
  // Read only for rows that kernel may decide (a one-run sample): the load
  // sits in front of the block's work.
  const uint64_t eword = p.rows_est != nullptr && n > cap && sample_tiles(p, n, int(blockDim.x)) <= int(blockDim.x)
                             ? p.rows_est[blockIdx.x]
                             : 0ull;
  if (eword != 0) {
    est = eword & 0xffffffff00000000ull;
    bsh = int(eword & 0xffu) - 1;
    if (p.stamps && blockIdx.x == p.stamp_block && threadIdx.x == 0) g_cluster_stamps[28] = 3;
  } else if (n > cap) {
    // sample: sample_tiles() tiles of 8 columns (1 or 2 per thread by
    // default), spread evenly over the row's aligned tile grid, all loads
    // issued before any is used (measured on the H200, causal 128K prefill:
    // 4 runs 1202 us, 2 runs 1075, 1 run 1032; 2 at 128K keeps the
    // estimate's spread small: binomial tails put ~4e-6 of i.i.d. rows on
    // the fallback, 6e-4 with one run)
    uint32_t* smp = reinterpret_cast<uint32_t*>(L.cand);  // 2 cap scores fit
    const int runs = sample_tiles(p, n, int(blockDim.x));
    const int64_t f = gsrc.first();
    const int64_t tiles = (gsrc.end() - f + kItems - 1) / kItems;
    const int used = int(min(tiles, int64_t(runs)));
    const int S = used * kItems;
    uint32_t tmx = 0;  // the thread's largest sample (sample_est_binned)
    bool has = false;  // ... it holds one
    {
      uint32_t bits[kMaxSampleRuns][kItems], mask[kMaxSampleRuns];
      int64_t gs[kMaxSampleRuns];
#pragma unroll
      for (int q = 0; q < kMaxSampleRuns; ++q) {
        const int t = q * int(blockDim.x) + int(threadIdx.x);
        gs[q] = sample_col(f, tiles, runs, t);
        mask[q] = t < used ? gsrc.load_bits(gs[q], bits[q]) : 0u;
      }
#pragma unroll
      for (int q = 0; q < kMaxSampleRuns; ++q) {
        const int t = q * int(blockDim.x) + int(threadIdx.x);
#pragma unroll
        for (int i = 0; i < kItems; ++i) {
          const bool ok = t < used && ((mask[q] >> i) & 1u);
          const uint32_t o = ok ? uint32_t(gsrc.key1(gs[q] + i, bits[q][i]) >> 32) : 0u;
          if (t < used) smp[t * kItems + i] = o;
          if (ok) tmx = max(tmx, o);
          has |= ok;
        }
      }
    }
    const int64_t m = sample_m(k, S, n);
    // one pass of bins below the largest sample, else (declined, or
    // `sample22`) the radix passes
    bool binned = false;
    if (p.sample_bins && m < S) {
      uint32_t e32 = 0, mx = 0;
      const int nq = runs / int(blockDim.x);
      binned = sample_est_binned(
          [&](auto f) {
            for (int q = 0; q < nq; ++q) {
              const int t = q * int(blockDim.x) + int(threadIdx.x);
              if (t < used)
#pragma unroll
                for (int i = 0; i < kItems; ++i) f(smp[t * kItems + i]);  // (invalid: 0, below lo but on all-NaN rows; est steers only speed)
            }
          },
          tmx, has, int(m), score_zero_bits<T>(), L.hist, reinterpret_cast<uint32_t*>(L.rankbuf), s, &e32, &mx);
      if (binned) {
        est = uint64_t(e32) << 32;
        // bins spanning twice the distance from est to the largest sample
        // (as the sampled split's final kernel: SplitRowState::hsh)
        bsh = cand_bin_shift(mx, e32);
      }
    }
    if (p.stamps && blockIdx.x == p.stamp_block && threadIdx.x == 0) g_cluster_stamps[28] = m < S ? 2 - binned : 0;
    STK_CLOCK(1);
    // binned: sample_est_binned's last barrier came after every read of
    // the sample (and of hist): the buffer takes the candidates
    if (!binned) __syncthreads();
    if (m < S && !binned) {
      SelState st{0ull, 0, int(m)};
      uint64_t Tm = 0;
      // 22 bits of the m-th sample score are enough for an estimate (its
      // bin is 2^-13 of the score wide): two passes, and 16-bit rows' ties
      // at the m-th score no longer run the passes on down the index bits
      // (H200, bf16 prefill causal / packed: 1212 / 910 -> 1147 / 818 us;
      // fp32 unchanged). Not sample_prefix22 (the split sample's 32-bit
      // form): here it measured slower, packed fp32 561 -> 565 us.
      select_passes<22>(ResSrc{smp, S, c, 0}, int(m), st, L.hist, s, nullptr, 0, nullptr, &Tm);
      est = Tm & 0xffffffff00000000ull;  // every column scoring >= the m-th sample score
    }
    if (!binned) __syncthreads();  // the sample is read: the buffer takes the candidates
  }
  STK_CLOCK(2);
  // each warp streams its own span (no block barriers), else (a warp's
  // region overflowed, forcing, threshold at -inf, block-gather) the
  // block-synchronous gather
  constexpr int V = 2;
  int got = cap + 1;
  // regions: the candidates stay in the warps' regions (rows_bin and
  // rows_regions; WarpRegions), else they are packed in L.cand[0, got)
  bool regions = false;
  int wc = 0;  // the warp's count in its region (set with regions)
  if (p.warp_gather && fast_test_ok(c, est)) {
    // (H200, fp32 prefill causal / packed, sample groups and 22-bit select
    // on: 1152 / 648 us without the prefetch, 1109 / 629 at PF = 2, 1 to 4
    // alike, 8 and 16 slower; 2 KB ahead per warp)
    got = gather_warps<V, true, 2, false>(gsrc, est, s, L.cand, cap, &wc);
    regions = got <= cap;
  }
  // (built after the gather: nothing of it is live across the gather loop)
  const WarpRegions g{L.cand, cap / (int(blockDim.x) >> 5), wc};
  if (regions && !(p.rows_bin && p.rows_regions)) {  // (one gather loop in the kernel, not two)
    pack_regions(g, s);
    regions = false;
  }
  if (got > cap)
    got = gather_wide<V>(gsrc, est, s, [&](int pos, uint64_t key) {
      if (pos < cap) L.cand[pos] = key;
    });
  __syncthreads();
  STK_CLOCK(3);
  if (p.stamps && blockIdx.x == p.stamp_block && threadIdx.x == 0) g_cluster_stamps[30] = got;
  if (got > cap || got < k) {  // exact fallback (rare on real data)
    select_and_finish<false>(gsrc, n, p, out, L, s, SelState{0ull, 0, k});
    return;
  }
  if (got <= int(blockDim.x)) {
    if (regions) pack_regions(g, s);
    finish_small(L.cand, got, k, p.order, out, L.rankbuf);
    return;
  }
  if (p.rows_bin) {
    // one conflict-free pass over the candidates (consecutive keys on
    // consecutive lanes) counts their bins and their score range; the k-th
    // key from the bins (cand_kth_binned), else by radix passes below the
    // bits every candidate shares (cand_select); finish_cand writes.
    // Replaces select_passes on CandSrc (8 consecutive keys a thread: 16-way
    // bank conflicts, a select from depth 0) and finish.
    __shared__ uint32_t range[2];
    __shared__ int nbin;
    __shared__ uint64_t kth;
    const uint32_t blo = uint32_t(est >> 32);
    if (bsh >= 0)
      for (int i = int(threadIdx.x); i < kMaxBins; i += int(blockDim.x)) L.hist[i] = 0;
    if (threadIdx.x == 0) {
      range[0] = ~0u;
      range[1] = 0;
    }
    __syncthreads();
    uint32_t* const bins = bsh >= 0 ? L.hist : nullptr;
    if (regions) {
      uint32_t lo = ~0u, hi = 0;
      g.each([&](uint64_t v) { cand_fold(v, lo, hi, bins, blo, bsh); });
      cand_range_merge(lo, hi, range);
    } else {
      cand_range_bins(L.cand, got, range, bins, blo, bsh);
    }
    __syncthreads();
    const int lcap = min(kBinListCap, p.out_cap);
    bool have = false;
    if (bsh >= 0)
      have = regions ? cand_kth_binned_each([&](auto f) { g.each(f); }, L.hist, blo, bsh, k, L.outbuf, lcap, &nbin, s,
                                            &kth)
                     : cand_kth_binned(L.cand, got, L.hist, blo, bsh, k, L.outbuf, lcap, &nbin, s, &kth);
    uint64_t Tk;
    if (have) {
      Tk = kth;
    } else {
      if (regions) pack_regions(g, s);  // (cand_kth_binned's barriers follow the last read)
      regions = false;
      Tk = cand_select(L.cand, got, range[0], range[1], k, L.hist, s);
    }
    STK_CLOCK(4);
    if (regions)
      finish_regions(g, Tk, k, p.order, out, L.outbuf, L.rankbuf);
    else
      finish_cand(L.cand, got, Tk, k, p.order, out, L.outbuf, L.rankbuf);
    STK_CLOCK(5);
    return;
  }
  const CandSrc cs{L.cand, got};
  SelState st{0ull, 0, k};
  uint64_t Tk = 0;
  select_passes(cs, k, st, L.hist, s, nullptr, 0, nullptr, &Tk);
  STK_CLOCK(4);
  finish(cs, Tk, k, p.order, out, L.outbuf, s);
  STK_CLOCK(5);
}

}  // namespace stk_nv
