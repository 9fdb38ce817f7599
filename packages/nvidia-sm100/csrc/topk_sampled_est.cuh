// nvidia-sm100: the sampled-rows estimate kernel (Plan::est_kernel): the
// estimates of topk_sampled_rows_kernel, one warp a row, ahead of it.
// Included by topk.cu after topk_sampled_rows.cuh (sample_tiles, sample_col's
// layout).
#pragma once

namespace stk_nv {

// Inside the sampled-rows kernel each row's sample is a chain of its own:
// loads, then a histogram and a bin search behind block barriers, while the
// SM's other two blocks gather. Here every row's sample is read by one warp
// ahead of that kernel, with the same arithmetic as sample_est_binned: est
// and the candidates' bin shift land in a word per row that the sampled-rows
// kernel reads instead of sampling. A row this kernel does not decide (word
// 0: short row, m >= S, the binned pass declined, or a sample of more than
// one run) samples in the sampled-rows kernel as before.
// Measured on the H200 (4096 rows, k = 2048, same call; kernel times without
// PDL): causal 128K rows (two runs, 16 KB a row) the estimate kernel 58 us
// and the sampled-rows kernel 758 -> 706 us, end to end 749 -> 760 us;
// packed 64K + 32K + 16K + 16K rows (one run) 431.7 -> 413.5 us, bf16 388 ->
// 362. The samples' groups of 256 bytes spread over the rows are a random
// access pattern that DRAM serves far below its streaming rate (a version
// that copied the whole sample into shared memory by cp.async, every load in
// flight, 8 warps an SM: 76 us for causal), so two-run rows stay in the
// sampled-rows kernel, where their reads overlap the other blocks' gathers.
// Any kernel between calls costs the sampled-rows kernel ~9 us on causal
// 128K rows (766 vs 757 us, kernel time; the same with an empty kernel in
// this one's place and with the shared-memory carveout pinned), so the plan
// runs this kernel only where rows are likely one run (Plan::est_kernel).
constexpr int kEstWarps = 8;
constexpr int kEstBlock = 32 * kEstWarps;
constexpr int kEstBatch = 8;  // sample tiles a lane has in flight (a run: 256 tiles a warp)
// the word: est's 32 bits << 32 | kEstSet | (bin shift + 1)
constexpr uint64_t kEstSet = 0x100;

template <typename T>
__global__ void __launch_bounds__(kEstBlock, 2) sampled_est_kernel(TopkParams p) {
  pdl_begin(p);
  extern __shared__ __align__(16) uint32_t est_hist[];  // kEstWarps x 2048 bins
  using raw = typename Scalar<T>::raw;
  constexpr int kV = kItems * int(sizeof(raw)) / 16;  // 16-byte vectors a tile
  const int lane = int(threadIdx.x) & 31, w = int(threadIdx.x) >> 5;
  const int64_t r = int64_t(blockIdx.x) * kEstWarps + w;
  if (r >= p.rows) return;
  uint32_t* hist = est_hist + w * kMaxBins;
  const stk::RowGeometry g = row_geom(p, r);
  const RowCtx c = make_ctx(p, g);
  GlobalSrc<T> gsrc;
  gsrc.init(row_scores<T>(p, r, g), 0, c.n, c);
  const int64_t n = c.n;
  const int k = p.k;
  uint64_t word = 0;
  // the sampled-rows kernel's sample of this row
  const int runs = sample_tiles(p, n, kSampledRowsBlock);
  const int64_t f = gsrc.first();
  const int64_t tiles = (gsrc.end() - f + kItems - 1) / kItems;
  const int used = int(min(tiles, int64_t(runs)));
  const int S = used * kItems;
  const int64_t m = n > 0 ? sample_m(k, S, n) : 0;
  if (n > k && n > p.cand_cap && p.sample_bins && m < S && runs <= kSampledRowsBlock) {
    // Tile t (of the kernel's thread t % 256) is lane t % 32's, turn t / 32;
    // tm[j]: the largest sample of that thread, j = (t / 32) % 8, so that
    // lo (the least of the maxima of groups of G adjacent threads) is
    // sample_est_binned's.
    const int turns = (used + 31) >> 5;
    // sample_col without its 64-bit division a tile: grp * tiles / d =
    // grp * tq + grp * tr / d (grp < 128, d = runs / kSampleSpan <= 128)
    const int d = runs / kSampleSpan;
    const bool spread = tiles > runs;
    const int64_t tq = tiles / d;
    const int tr = int(tiles - tq * d);
    const bool dpow = (d & (d - 1)) == 0;
    const int dsh = __ffs(d) - 1;
    auto col = [&](int t) -> int64_t {
      const int grp = t / kSampleSpan;
      const int x = grp * tr;
      return f + kItems * (spread ? int64_t(grp) * tq + (dpow ? x >> dsh : x / d) + (t - grp * kSampleSpan)
                                  : int64_t(t));
    };
    // no forced column anywhere in the row: whole tiles take the fast path
    const bool clean = gsrc.vec && c.unforced(0, 1) && c.unforced(n - 1, 1);
    uint32_t tm[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    uint32_t hasm = 0;  // bit j: tm[j] holds a sample
    uint32_t hi = 0, lo = 0;
    int sh = 0;
    // pass 0: the threads' maxima; pass 1: the samples again (from L2),
    // counted into bins of 2^sh below hi. A batch of kEstBatch tiles a lane,
    // every load issued first; a batch with a tile that is not whole or may
    // hold a forced column (rare) goes tile by tile through load_ord.
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 1) {
        const int G = sample_groups(int(m), kSampledRowsBlock);  // (uniform)
        uint32_t glo = ~0u;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const bool h = (hasm >> j) & 1u;
          uint32_t gmx = h ? tm[j] : 0u, ghas = h ? 1u : 0u;
          for (int e = 1; e < G; e <<= 1) {
            gmx = max(gmx, __shfl_xor_sync(0xffffffffu, gmx, e));
            ghas |= __shfl_xor_sync(0xffffffffu, ghas, e);
          }
          hi = max(hi, h ? tm[j] : 0u);
          if (G > 0 && ghas) glo = min(glo, gmx);
        }
        hi = __reduce_max_sync(0xffffffffu, hi);
        glo = __reduce_min_sync(0xffffffffu, glo);
        lo = sample_bins_lo(hi, glo, G);
        sh = sample_bins_shift(hi, lo);
        uint4* h4 = reinterpret_cast<uint4*>(hist);
        for (int i = lane; i < kMaxBins / 4; i += 32) h4[i] = make_uint4(0, 0, 0, 0);
        __syncwarp();
      }
      // one tile's ordered scores u (mask: the valid ones), turn tt
      auto take = [&](int tt, const uint32_t(&u)[kItems], uint32_t mask) {
        if (pass == 0) {
          uint32_t mx = 0;
#pragma unroll
          for (int i = 0; i < kItems; ++i)
            if ((mask >> i) & 1u) mx = max(mx, u[i]);
          const int j = tt & 7;
#pragma unroll
          for (int jj = 0; jj < 8; ++jj)
            if (jj == j) tm[jj] = max(tm[jj], mx);  // (register indices stay static)
          if (mask) hasm |= 1u << j;
        } else {
#pragma unroll
          for (int i = 0; i < kItems; ++i)
            if (((mask >> i) & 1u) && u[i] >= lo) atomicAdd(&hist[2047u - ((hi - u[i]) >> sh)], 1u);
        }
      };
      for (int b = 0; b < turns; b += kEstBatch) {
        uint4 v[kEstBatch][kV];
        bool fast = clean;
#pragma unroll
        for (int q = 0; q < kEstBatch; ++q) {
          const int t = (b + q) * 32 + lane;
          if (t < used) {
            const int64_t gs = col(t);
            const bool whole = gs >= 0 && gs + kItems <= n;
            fast &= whole;
            if (clean && whole) {
              const uint4* a = reinterpret_cast<const uint4*>(gsrc.base + gs);
#pragma unroll
              for (int e = 0; e < kV; ++e) v[q][e] = __ldg(a + e);
            }
          }
        }
        if (__all_sync(0xffffffffu, fast)) {
#pragma unroll
          for (int q = 0; q < kEstBatch; ++q) {
            if ((b + q) * 32 + lane < used) {
              uint32_t u[kItems];
#pragma unroll
              for (int i = 0; i < kItems; ++i)
                u[i] = stk::ordered_canonical_u32(
                    GlobalSrc<T>::vec_f32(v[q][i / GlobalSrc<T>::kVec], i % GlobalSrc<T>::kVec));
              take(b + q, u, 0xffu);
            }
          }
        } else {
#pragma unroll 1
          for (int q = 0; q < kEstBatch; ++q) {
            const int t = (b + q) * 32 + lane;
            if (t < used) {
              uint32_t u[kItems];
              const uint32_t mask = gsrc.load_ord(col(t), u);
              take(b + q, u, mask);
            }
          }
        }
      }
    }
    __syncwarp();
    int bin = -1, E = 0;
    find_bin2048_warp(hist, int(m), [&](int b_, int, int e_) {
      bin = b_;
      E = e_;
    });
    // the lane that found it tells the others
    const uint32_t who = __ballot_sync(0xffffffffu, bin >= 0);
    if (who) {
      const int src = __ffs(who) - 1;
      bin = __shfl_sync(0xffffffffu, bin, src);
      E = __shfl_sync(0xffffffffu, E, src);
      uint32_t e32 = 0;
      if (sample_bin_est(hi, lo, sh, bin, E, int(m), score_zero_bits<T>(), &e32))
        word = (uint64_t(e32) << 32) | kEstSet | uint64_t(cand_bin_shift(hi, e32) + 1);
    }
  }
  if (lane == 0) p.rows_est[r] = word;
}

}  // namespace stk_nv
