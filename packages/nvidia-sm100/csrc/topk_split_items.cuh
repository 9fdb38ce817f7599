// nvidia-sm100: the balanced gather of the sampled split (split_items_kernel).
// Included by topk.cu after topk_cluster.cuh, whose per-warp span gather
// (warp_span_gather, also the cluster and sampled-rows kernels' loop) it
// uses.
//
// The chunked gather (split_gather_kernel) cuts every row into the same
// number of chunks, so in a ragged call (DSA decode: contexts of 40K to 1M
// columns in one batch) the longest row's chunks set the time while the
// short rows' blocks sit idle. Here row r is cut into about n_r / grain
// chunks of about `grain` columns each (at most ws.items; see
// split_row_chunks; grain from the call's total valid columns, so there are
// about two chunks per warp of the grid), and a persistent grid takes the
// chunks of all rows in turn: chunk q of the flattened list goes to block
// q mod grid (warp (q / grid) mod 8 there), so every SM streams about the
// same number of bytes whatever the lengths, and consecutive blocks read
// consecutive chunks of one row at the same time (DRAM pages).
//
// A chunk is one warp's work: the warp streams it with the next step's loads
// in flight and no block barrier, appends its keys >= est in index order to
// the chunk's segment of the row's workspace region (ws.region keys, split
// evenly over the row's chunks), then stores the segment's count (-1 if it
// would overflow: the final kernel then selects that row from the row
// itself, exact). Chunks of ~32 KB keep the per-chunk start (its first
// load's latency) small beside the streaming; a chunk of a whole block
// (8 warps x ~4 KB) measured no faster than the chunked gather (64 x 1M:
// 140 us).
#pragma once

namespace stk_nv {

// Forced: the call forces columns (force_begin / force_end), so every
// column is tested by its full key (a kernel of its own keeps that code out
// of the common one's registers).
//
// ws.early (the default; `no-iearly` clears it): the row tables (from the
// lengths / starts, inputs of the call) are built BEFORE the launch wait,
// beside the sample kernel (H200, same call: 16 x 1M 52.2 -> 51.0 us, DSA
// decode 32 rows 64.0 -> 62.6; the wait moved alone). That is safe only
// because this kernel always follows split_sample_kernel, which waits for
// every earlier grid before it lets this one launch (pdl_begin: wait, then
// trigger): so the call's inputs are final here. The sample's estimates and
// the workspace (which the previous call's final kernel may still read)
// are touched only after the wait.
template <typename T, bool Forced>
__global__ void __launch_bounds__(kSplitWarps * 32, 3) split_items_kernel(TopkParams p, SplitWs ws) {
  pdl_warm(p);
  if (!ws.early) pdl_wait();
  // every row's chunk count (as a prefix over rows), geometry and estimate,
  // read once per block so a chunk costs no dependent global load
  __shared__ int pre[kSplitMaxRows + 1];
  __shared__ int64_t rstart[kSplitMaxRows], rn[kSplitMaxRows], rlen[kSplitMaxRows];
  __shared__ uint64_t rest[kSplitMaxRows];
  __shared__ BlockScratch s;
  const int rows = int(p.rows);
  // the call's chunk size: its valid columns (in units of kGrainUnit) over
  // the chunk slots (ws.wchunks a warp of the grid, less one a split row:
  // each row's chunk count rounds up, and the rows' chunks together must
  // not pass the slots, or a few warps take one chunk more than the rest
  // and the call waits on them), at least ws.grain, so that short calls
  // still give every warp a chunk and long ones keep chunks long. One chunk
  // a warp (H200, same call, against two: DSA decode 32 / 64 rows 38.45 /
  // 47.06 -> 36.97 / 45.71 us, bf16 35.05 / 40.95 -> 34.20 / 39.22, 16 x 1M
  // 41.93 -> 41.13, 64 x 1M alike: fewer chunk starts and final-kernel
  // segments). (Units of 1024 columns left the count well below the slots:
  // at two a warp, 16 x 1M made 5472 chunks of 3072 columns for 6336
  // slots, so warps 6 and 7 of a block took one and the rest two.)
  int units = 0, split_rows = 0;
  for (int r0 = 0; r0 < rows; r0 += int(blockDim.x)) {
    const int r = r0 + int(threadIdx.x);
    int u = 0;
    if (r < rows) {
      const stk::RowGeometry g = row_geom(p, r);
      rstart[r] = g.start;
      rn[r] = g.n_cols;
      rlen[r] = g.length;
      // (capped so that 512 rows' sum fits an int: rows past 2^27 columns
      // take shorter chunks, up to their 512)
      u = g.n_cols > p.k ? int(min((g.n_cols + kGrainUnit - 1) / kGrainUnit, int64_t(1) << 21)) : 0;
    }
    int total;
    block_excl_scan(u, s, &total);
    units += total;
    split_rows += __syncthreads_count(u > 0);
  }
  const int target = ws.wchunks * kSplitWarps * int(gridDim.x);
  const int slots = max(target - split_rows, target / 2);
  const int64_t grain = max(ws.grain, int64_t((units + slots - 1) / slots) * kGrainUnit);
  int carry = 0;
  for (int r0 = 0; r0 < rows; r0 += int(blockDim.x)) {
    const int r = r0 + int(threadIdx.x);
    const int m = r < rows ? split_row_chunks(rn[r], p.k, grain, ws) : 0;
    int total;
    const int ex = block_excl_scan(m, s, &total);
    if (r < rows) pre[r] = carry + ex;
    carry += total;
  }
  if (threadIdx.x == 0) pre[rows] = carry;
  __syncthreads();
  // 2 vectors a lane per step at 3 blocks (24 warps) per SM, no spills: the
  // gather is latency-bound, so warps beat bytes per warp (H200, same call:
  // 16 x 1M 48.5 -> 47.1 us against V = 4 at 2 blocks; V = 4 at 3 blocks
  // spilled and lost; 4 blocks at V = 2 mixed, at V = 1 slower)
  constexpr int V = 2;
  constexpr int NV = GlobalSrc<T>::kVec;
  const int w = int(threadIdx.x) >> 5, B = int(gridDim.x);
  // ws.l2pf: while the sample kernel (one block a row, latency-bound) runs,
  // DRAM is idle; the warp asks L2 for the first l2pf KB of its first chunk
  // (lines of the row's valid columns only: the scores and the row tables
  // are the call's inputs, final here, see ws.early). A prefetch moves no
  // data into registers, so the result cannot depend on it. (H100, same
  // call, fp32, l2pf = 0 / 4 / 8 / 16 / 32 KB: 16 x 1M 47.9 / 46.9 / 46.5 /
  // 47.3 / 48.5 us, 64 x 1M 121.5 / 120.3 / 120.7 / 123.8 / 130.8, DSA
  // decode 32 requests 51.2 / 50.1 / 50.5 / 52.4 / 54.6: more than L2 keeps
  // until the gather reaches it, or than DRAM loads while the sample runs,
  // only queues. Letting the gather launch after the sample's own loads
  // were back measured no better.)
  if (ws.early && ws.l2pf > 0) {
    const int q = int(blockIdx.x) + B * w;
    if (q < carry) {
      int lo = 0, hi = rows - 1;
      while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (pre[mid] <= q) lo = mid;
        else hi = mid - 1;
      }
      int64_t jlo, jhi;
      chunk_range(rn[lo], pre[lo + 1] - pre[lo], q - pre[lo], &jlo, &jhi);
      using raw = typename Scalar<T>::raw;
      const raw* base = static_cast<const raw*>(p.scores) + int64_t(lo) * p.row_stride + rstart[lo];
      const uintptr_t a0 = reinterpret_cast<uintptr_t>(base + jlo) & ~uintptr_t(127);
      const uintptr_t a1 = reinterpret_cast<uintptr_t>(base + min(jhi, jlo + int64_t(ws.l2pf) * 1024 / int64_t(sizeof(raw))));
      for (uintptr_t a = a0 + uintptr_t(threadIdx.x & 31) * 128; a < a1; a += 32 * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
    }
  }
  if (ws.early) pdl_wait();
  pdl_trigger();
  if (blockIdx.x == 0 && threadIdx.x == 0) *ws.grain_out = grain;  // for the final kernel
  for (int r = int(threadIdx.x); r < rows; r += int(blockDim.x))
    rest[r] = pre[r + 1] > pre[r] ? reinterpret_cast<const SplitRowState*>(ws.state)[r].prefix : 0ull;  // est (mode 4)
  __syncthreads();
  // chunk q goes to warp (q / B) mod kSplitWarps of block q mod B: a call
  // with fewer chunks than warps still spreads them over every block (SM)
  for (int q = int(blockIdx.x) + B * w; q < carry; q += B * kSplitWarps) {
    int lo = 0, hi = rows - 1;  // the row r with pre[r] <= q < pre[r + 1]
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (pre[mid] <= q) lo = mid;
      else hi = mid - 1;
    }
    const int r = lo, i = q - pre[r], chunks = pre[r + 1] - pre[r];
    const stk::RowGeometry g{rstart[r], rn[r], rlen[r]};
    const RowCtx c = make_ctx(p, g);
    const uint64_t thr = rest[r];
    int64_t jlo, jhi;
    chunk_range(c.n, chunks, i, &jlo, &jhi);
    GlobalSrc<T> src;
    src.init(row_scores<T>(p, r, g), jlo, jhi, c);
    const int64_t nvec = jhi > jlo ? (src.end() - src.first() + NV - 1) / NV : 0;
    const int cap = ws.region / chunks;
    uint64_t* reg = ws.cand + int64_t(r) * ws.region + int64_t(i) * cap;
    int got;
    if (Forced)
      got = warp_span_gather<V, kKeyTest, 0, true>(src, 0, nvec, thr, reg, cap);
    else if (thr == 0)  // the sample took every key (short row)
      got = warp_span_gather<V, kTakeAll, 0, true>(src, 0, nvec, thr, reg, cap);
    else if (fast_test_ok(c, thr))  // (est is a score prefix above -inf: the float test)
      got = warp_span_gather<V, kFloatTest, 0, true>(src, 0, nvec, thr, reg, cap);
    else  // est among -inf / NaN scores (rows of mostly those): the final kernel's exact select
      got = -1;
    if ((threadIdx.x & 31) == 0) ws.counts[int64_t(r) * ws.items + i] = got;
  }
}

}  // namespace stk_nv
