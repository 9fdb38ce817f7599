// nvidia-sm100: the balanced gather of the sampled split (split_items_kernel).
// Included by topk.cu after topk_cluster.cuh, whose per-vector float test
// (vec_select), ballot prefix (warp_excl_small) and set-bit append (sink_vec)
// it uses.
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

// How a span's columns are tested against thr.
enum SpanTest { kFloatTest, kTakeAll, kKeyTest };

// (The streaming loop below is gather_warps' per-warp loop with a choice of
// test. Sharing one loop (counts and overflow flag as out-parameters) is
// exact by construction but changes the sm_90a SASS of the cluster and
// sampled-rows kernels (same instruction counts, compares and schedule
// reordered), so the fold waits for an H200 run of those kernels.)
//
// One warp's span [v0, v1) of 16-byte vectors (counted from src.first()):
// appends the keys >= thr, in index order, to reg[0, cap). Returns the
// count, or -1 if it would pass cap. kFloatTest: one float compare per
// column (no forced column, threshold score above -inf: fast_test_ok);
// kTakeAll: thr = 0, every valid column; kKeyTest: full keys.
template <int V, SpanTest Test, typename T>
__device__ __forceinline__ int warp_span_gather(const GlobalSrc<T>& src, int64_t v0, int64_t v1, uint64_t thr,
                                                uint64_t* reg, int cap) {
  constexpr int NV = GlobalSrc<T>::kVec;
  const int lane = int(threadIdx.x) & 31;
  const float tf = __uint_as_float(stk::unordered_u32(uint32_t(thr >> 32)));
  const int64_t f = src.first();
  // steps wholly inside the span and the chunk load without per-vector checks
  const int64_t wlo = (src.j0 - f + NV - 1) / NV, whi = min(v1, (src.j1 - f) / NV);
  const uint4* const vbase = reinterpret_cast<const uint4*>(src.base + f) + lane;
  uint4 nxt[V];
  uint32_t nm[V];
  auto load_step = [&](int64_t vb) {
    if (src.vec && vb >= wlo && vb + 32 * V <= whi) {
#pragma unroll
      for (int v = 0; v < V; ++v) {
        nxt[v] = __ldg(vbase + vb + v * 32);
        nm[v] = (1u << NV) - 1u;
      }
      return;
    }
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int64_t vi = vb + v * 32 + lane;
      nm[v] = vi < v1 ? src.load_vec(f + vi * NV, nxt[v]) : 0u;  // past the span: another warp's
    }
  };
  auto put = [&](int pos, uint64_t key) { reg[pos] = key; };
  int cnt = 0;
  if (v0 < v1) load_step(v0);
  for (int64_t vb = v0; vb < v1; vb += 32 * V) {
    uint4 cur[V];
    uint32_t sel[V];
#pragma unroll
    for (int v = 0; v < V; ++v) {
      sel[v] = nm[v];
      cur[v] = nxt[v];
    }
    if (vb + 32 * V < v1) load_step(vb + 32 * V);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int64_t c0 = f + (vb + v * 32 + lane) * NV;
      uint32_t m = sel[v];
      if (m && Test != kTakeAll) {
        if (Test == kFloatTest) {
          m = vec_select<T>(cur[v], m, tf, thr, src.c, c0);
        } else {
          uint32_t ge = 0;
#pragma unroll
          for (int i = 0; i < NV; ++i)
            if (((m >> i) & 1u) && src.key1(c0 + i, GlobalSrc<T>::vec_f32(cur[v], i)) >= thr) ge |= 1u << i;
          m = ge;
        }
      }
      int tot;
      const int ex = warp_excl_small<NV == 4 ? 3 : 4>(__popc(m), &tot);
      if (cnt + tot > cap) return -1;  // warp-uniform
      sink_vec(src, cur[v], m, c0, cnt + ex, put);
      cnt += tot;
    }
  }
  return cnt;
}

// Forced: the call forces columns (force_begin / force_end), so every
// column is tested by its full key (a kernel of its own keeps that code out
// of the common one's registers).
template <typename T, bool Forced>
__global__ void __launch_bounds__(kSplitWarps * 32, 2) split_items_kernel(TopkParams p, SplitWs ws) {
  pdl_begin(p);
  // every row's chunk count (as a prefix over rows), geometry and estimate,
  // read once per block so a chunk costs no dependent global load
  __shared__ int pre[kSplitMaxRows + 1];
  __shared__ int64_t rstart[kSplitMaxRows], rn[kSplitMaxRows], rlen[kSplitMaxRows];
  __shared__ uint64_t rest[kSplitMaxRows];
  __shared__ BlockScratch s;
  const int rows = int(p.rows);
  // the call's chunk size: its valid columns (in units of 1024) over twice
  // the grid's warps, at least ws.grain, so that short calls still give
  // every warp a chunk and long ones keep chunks long
  int units = 0;
  for (int r0 = 0; r0 < rows; r0 += int(blockDim.x)) {
    const int r = r0 + int(threadIdx.x);
    int u = 0;
    if (r < rows) {
      const stk::RowGeometry g = row_geom(p, r);
      rstart[r] = g.start;
      rn[r] = g.n_cols;
      rlen[r] = g.length;
      u = g.n_cols > p.k ? int((g.n_cols + 1023) >> 10) : 0;
    }
    int total;
    block_excl_scan(u, s, &total);
    units += total;
  }
  const int target = 2 * kSplitWarps * int(gridDim.x);
  const int64_t grain = max(ws.grain, int64_t((units + target - 1) / target) << 10);
  if (blockIdx.x == 0 && threadIdx.x == 0) *ws.grain_out = grain;  // for the final kernel
  int carry = 0;
  for (int r0 = 0; r0 < rows; r0 += int(blockDim.x)) {
    const int r = r0 + int(threadIdx.x);
    int m = 0;
    if (r < rows) {
      m = split_row_chunks(rn[r], p.k, grain, ws);
      rest[r] = m ? reinterpret_cast<const SplitRowState*>(ws.state)[r].prefix : 0ull;  // est (mode 4)
    }
    int total;
    const int ex = block_excl_scan(m, s, &total);
    if (r < rows) pre[r] = carry + ex;
    carry += total;
  }
  if (threadIdx.x == 0) pre[rows] = carry;
  __syncthreads();
  constexpr int V = 4;
  constexpr int NV = GlobalSrc<T>::kVec;
  const int w = int(threadIdx.x) >> 5, B = int(gridDim.x);
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
      got = warp_span_gather<V, kKeyTest>(src, 0, nvec, thr, reg, cap);
    else if (thr == 0)  // the sample took every key (short row)
      got = warp_span_gather<V, kTakeAll>(src, 0, nvec, thr, reg, cap);
    else if (uint32_t(thr >> 32) > stk::kOrderedNegInf)
      got = warp_span_gather<V, kFloatTest>(src, 0, nvec, thr, reg, cap);
    else  // est among -inf / NaN scores (rows of mostly those): the final kernel's exact select
      got = -1;
    if ((threadIdx.x & 31) == 0) ws.counts[int64_t(r) * ws.items + i] = got;
  }
}

}  // namespace stk_nv
