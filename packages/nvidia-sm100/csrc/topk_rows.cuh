// nvidia-sm100: one block per row. The rows kernel (a row resident in shared
// memory or streamed; radix select on the 64-bit key) and the tile kernel
// (decode rows of one tile, k <= 64: the bounded path alone). Included by
// topk.cu after topk_warp.cuh.
#pragma once

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
// gather, and writes the row's output. ks: the row's shared key bits (used
// where Skip: select_passes).
template <bool Skip, class Src>
__device__ void select_and_finish(const Src& src, int64_t n, const TopkParams& p, const OutRow& out,
                                  SmemLayout& L, BlockScratch& s, SelState st,
                                  const KeySkip& ks = KeySkip{0, 0, 0u}, bool hist_ready = false) {
  const int k = p.k;
  uint64_t T = 0;
  int ncand = 0;
  const int r = select_passes<64, Skip>(src, k, st, L.hist, s, L.cand, p.cand_cap, &ncand, &T, hist_ready, ks);
  if (r == kDone) {
    finish(src, T, k, p.order, out, L.outbuf, s);
    return;
  }
  CandSrc cs{L.cand, ncand};
  if (ncand <= int(blockDim.x)) {
    finish_small(L.cand, ncand, k, p.order, out, L.rankbuf);
    return;
  }
  select_passes<64, Skip>(cs, k, st, L.hist, s, nullptr, 0, nullptr, &T, false, ks);
  finish(cs, T, k, p.order, out, L.outbuf, s);
}

// A streamed row (n > k) read once: online_pass gathers the keys of the
// top-digit bins >= the running threshold bin while it builds the histogram;
// the select then finishes on those candidates in shared memory. If the
// buffer overflowed, the exact multi-pass select over the row takes over,
// resuming after its first pass (the histogram is complete), so the
// fallback costs no extra read over the old path.
template <bool Skip, class Src>
__device__ void stream_select(const Src& gsrc, int64_t n, const TopkParams& p, const OutRow& out,
                              SmemLayout& L, BlockScratch& s, int online_cap, const KeySkip& ks) {
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
      select_passes<64, Skip>(cs, k, st, L.hist, s, nullptr, 0, nullptr, &Tk, false, ks);
      finish(cs, Tk, k, p.order, out, L.outbuf, s);
      return;
    }
  }
  select_and_finish<Skip>(gsrc, n, p, out, L, s, SelState{0ull, 0, k}, ks, /*hist_ready=*/true);
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
        select_and_finish<kRowSkip<T>>(rs, n, p, out, L, s, SelState{0ull, 0, p.k}, key_skip<T>(c));
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
    select_and_finish<kRowSkip<T>>(rs, n, p, out, L, s, st, key_skip<T>(c));
    STK_CLOCK(7);
  } else if (p.online) {
    stream_select<kRowSkip<T>>(gsrc, n, p, out, L, s, online_cap(p), key_skip<T>(c));
  } else {
    select_and_finish<kRowSkip<T>>(gsrc, n, p, out, L, s, st, key_skip<T>(c));
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
  select_and_finish<kRowSkip<T>>(rs, c.n, p, out, L, s, SelState{0ull, 0, p.k}, key_skip<T>(c));
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

}  // namespace stk_nv
