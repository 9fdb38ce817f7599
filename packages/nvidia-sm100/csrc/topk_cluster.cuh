// Few long rows in one kernel: a row is spread over a thread-block cluster
// (C = 1..16 blocks; block q owns the q-th chunk of the row's own valid
// length). The radix select on the 64-bit key runs on all chunks at once:
// every block histograms its part (8-bit digits), copies the histogram into
// every block's shared memory (cluster_find: st.async stores counted on the
// receiver's mbarrier), sums the copies and finds the bin that holds the k-th
// key, and passes go on until the k-th key Tk is pinned, or (resident rows)
// until its bin is small enough for one exchange of its keys (cluster_finish).
// Blocks then write their keys >= Tk at offsets from the lower ranks' counts
// (index / any: index order), or gather them into block 0, which sorts them
// (rank).
//
// Per row (uniform over its cluster):
//  - resident: the row fits the cluster's shared memory. It is read once into
//    shared memory as ordered canonical scores (the first histogram on the
//    way), and every pass runs there.
//  - streamed: each block takes a strided sample of its chunk; a cluster
//    select on the samples gives est, about the (2.5 k)-th largest key of the
//    row; ONE read of the chunk gathers its keys >= est into shared memory
//    (gather_warps: every warp its own span, no block barrier per step; a
//    skewed row whose keys crowd one warp's region re-runs the block-
//    synchronous gather_fast), and the select finishes on them (the sample
//    select stops early: est only needs to be near). If some block's candidates overflow or
//    the cluster holds fewer than k of them (then est > Tk), the select runs
//    on the chunks in global memory instead: exact, several reads.
//
// 512 threads per block (the 1024-thread register bound spills), one block
// per SM (the whole shared memory: resident capacity C x ~50K columns).
//
// Included from topk.cu (needs row_geom, make_ctx, make_out from it,
// chunk_range from topk_split.cuh, warp_incl_scan from topk_warp.cuh).
#pragma once

#include <cooperative_groups.h>

#include <type_traits>

#include "bulk_copy.cuh"

namespace stk_nv {

namespace cg = cooperative_groups;

// Dynamic shared memory: this block's histogram, the C histograms of the
// cluster twice (cluster_find), block 0's rank buffer, then one region that holds the
// resident slice (uint32 scores) or the sample / the candidates (uint64 keys).
struct ClusterLayout {
  uint32_t* h;
  uint32_t* recv;
  uint64_t* outbuf;
  unsigned char* region;
};

// The cluster select's digits are 8 bits (8 passes at most): every pass
// copies every block's histogram into every block (C KB per block at 8 bits,
// 8 C KB at 11).
constexpr int kCBits = 8;
constexpr int kCBins = 1 << kCBits;
// The cluster kernel's threads a block (the plan launches it with no other).
constexpr int kClusterThreads = 512;
// keys of outbuf past out_cap: the rank-order runs' gaps (<= C + 1, cluster_write)
constexpr int kRunSlack = 32;

__host__ __device__ __forceinline__ size_t cluster_fixed_smem(int out_cap, int C) {
  return size_t(1 + 2 * C) * kCBins * 4 + size_t(out_cap + kRunSlack) * 8;
}

__device__ __forceinline__ ClusterLayout carve_cluster(unsigned char* sm, const TopkParams& p, int C) {
  ClusterLayout L;
  L.h = reinterpret_cast<uint32_t*>(sm);
  L.recv = L.h + kCBins;
  L.outbuf = reinterpret_cast<uint64_t*>(L.recv + 2 * C * kCBins);
  L.region = reinterpret_cast<unsigned char*>(L.outbuf + p.out_cap + kRunSlack);
  return L;
}

// Clock stamps of the cluster passes (block 0 of row 0; `on` iff stamps were asked).
__device__ __forceinline__ void cluster_clock(bool on, int i) {
  if (on && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) g_cluster_stamps[16 + i] = clock64();
}

// Whether every block's count in one bin fits 16 bits: true for the shared-
// memory sources (the plan keeps res_cap and cand_cap below 2^16), false for
// a chunk in global memory (the fallback select).
template <class Src> struct NarrowCounts { static constexpr bool value = true; };
template <typename T> struct NarrowCounts<GlobalSrc<T>> { static constexpr bool value = false; };

// find_bin over the cluster: the bin of the summed histogram (every block's
// h, bins [0, 2^dbits)) that holds the kk-th largest counted key, into s.bin
// / s.above / s.count in every block (s.flag: the bin's count over the
// lower-ranked blocks). Every block stores its h (16 bytes per store; 16-bit
// counts when Narrow) into row q of every other block's recv[par]; once the
// C - 1 rows are in, one thread per bin sums its C counts (its own from h)
// and a block scan finds the bin. DSMEM is only written: a remote load is a
// dependent round trip (~1000-1500 cycles on the H200).
//  - Default (x.mbar): st.async stores counted on the receiver's mbarrier
//    bars[par]; each block waits for its own rows only, no cluster barrier
//    (H200, graph replay: 4 x 40K 12.6 vs 13.1 us, 8 x 1M 47.3 vs 49.0,
//    64 x 1M 122.8 vs 123.1).
//  - SPARSETOPK_NV_PATH=find-barrier: plain DSMEM stores and one cluster
//    barrier per pass.
// recv[par] and bars[par] are reused two passes later: a block sends pass
// p + 2 only after it has every block's pass p + 1 rows, which each block
// sends after its pass-p sums are done (and, for the mbarrier, after its
// pass-p phase completed). Callers with a cluster barrier between them may
// restart par at 0 (x.phases carries the mbarrier phases on).
// h is zero again on return (for the next unfenced hist_pass; the caller's
// barrier orders it).
// The histogram exchange's buffers: recv (2 x C x kCBins words), and for the
// mbarrier-signalled exchange one barrier per parity and the parity of the
// phase each is in (bit i for bars[i], uniform in the block).
struct HistXchg {
  uint32_t* recv;
  uint64_t* bars;
  uint32_t phases;
  bool mbar;
};

template <bool Narrow>
__device__ void cluster_find(const cg::cluster_group& cl, uint32_t* h, int dbits, int kk, HistXchg& x, int par,
                             BlockScratch& s, bool stamps) {
  const int C = int(cl.num_blocks());
  const int q = int(cl.block_rank());
  const int nb = 1 << dbits;
  cluster_clock(stamps, 0);
  __syncthreads();  // this block's h is complete
  // row r of recv[par]: C x nb counts, 16 or 32 bits each (row q stays
  // unwritten: the sums read this block's own counts from h)
  uint16_t* const rows16 = reinterpret_cast<uint16_t*>(x.recv) + par * C * nb;
  uint32_t* const rows32 = x.recv + par * C * nb;
  const int per_vec = Narrow ? 8 : 4;  // counts per 16-byte store
  const int nv = nb / per_vec;
  if (x.mbar && threadIdx.x == 0) mbar_expect(&x.bars[par], uint32_t((C - 1) * nb * (Narrow ? 2 : 4)));
  for (int j = threadIdx.x; j < nv * C; j += blockDim.x) {
    const int d = j / nv, i = (j - d * nv) * per_vec;
    if (d == q) continue;
    const uint4 a = *reinterpret_cast<const uint4*>(h + i);
    uint4 v = a;
    void* dst = rows32 + q * nb + i;
    if (Narrow) {
      const uint4 b = *reinterpret_cast<const uint4*>(h + i + 4);
      v = make_uint4(a.x | a.y << 16, a.z | a.w << 16, b.x | b.y << 16, b.z | b.w << 16);
      dst = rows16 + q * nb + i;
    }
    if (x.mbar)
      st_async16(cluster_addr(dst, d), v, cluster_addr(&x.bars[par], d));
    else
      *reinterpret_cast<uint4*>(cl.map_shared_rank(dst, d)) = v;
  }
  cluster_clock(stamps, 1);
  if (x.mbar) {  // every other block's histogram is in recv[par]
    // one warp waits, the block barrier releases the rest (and orders every
    // thread's sends before h is cleared)
    if (threadIdx.x < 32) mbar_wait<true>(&x.bars[par], (x.phases >> par) & 1u);
    x.phases ^= 1u << par;
    __syncthreads();
  } else {
    cl.sync();
  }
  cluster_clock(stamps, 2);
  // thread t sums bin nb - 1 - t over the C rows (top bins first; its own
  // from h), and a block scan in that order finds the bin where the count
  // from the top reaches kk. (nb <= blockDim: 256 bins, 512 threads.) h is
  // cleared after the scan's barrier, when every thread's sends have read it.

  const int t = int(threadIdx.x);
  const int bin = nb - 1 - t;
  int a = 0, below = 0;  // below: the lower ranks' counts (cluster_finish's layout)
  if (t < nb) {
#pragma unroll
    for (int r = 0; r < 16; ++r)
      if (r < C) {
        const int v = r == q ? int(h[bin]) : Narrow ? int(rows16[r * nb + bin]) : int(rows32[r * nb + bin]);
        a += v;
        below += r < q ? v : 0;
      }
  }
  const int inc = warp_incl_scan(a);
  if ((t & 31) == 31) s.warp[t >> 5] = inc;
  __syncthreads();
  cluster_clock(stamps, 3);
  if (t < nb) {
    h[bin] = 0;
    int acc = inc - a;  // keys in higher bins
    for (int w = 0; w < (t >> 5); ++w) acc += s.warp[w];
    if (acc < kk && kk <= acc + a) {  // exactly one thread
      s.bin = bin;
      s.above = acc;
      s.count = a;
      s.flag = below;
    }
  }
  __syncthreads();
  cluster_clock(stamps, 4);
}

// Where a cluster select stopped: the k-th key lies in the bin `prefix`
// (its top `depth` bits), which holds E keys, kk of them to be taken; below:
// the bin's keys in lower-ranked blocks; fin_half: the half of recv (C x
// kCBins words) that no block reads any more (cluster_finish's buffer).
struct ClusterSel {
  uint64_t prefix;
  int depth, kk, E, below, fin_half;
};

// The kk-th largest key over every block's src (their union must hold at
// least kk valid keys). hist0_ready: the first pass's histogram (depth 0) is
// already in h; otherwise h must be zero (it is zero again on return). recv:
// cluster_find's 2 x C x kCBins words. Stops once the k-th key is pinned
// (E == kk: prefix is Tk), or the bin holds at most slack keys (prefix, the
// bin's lower edge, is a key <= the kk-th with at most kk - 1 + slack keys
// above it: for estimates), or at most fin_cap keys (cluster_finish takes it
// from there with one exchange instead of more passes). T and c: the row's
// dtype and context, for the bits no pass needs to look at (KeySkip).
template <typename T, class Src>
__device__ ClusterSel cluster_select(const cg::cluster_group& cl, const Src& src, int kk, uint32_t* h, HistXchg& x,
                                     BlockScratch& s, bool hist0_ready, const RowCtx& c, int slack = 0, int fin_cap = 0,
                                     unsigned long long* passes = nullptr) {
  const KeySkip ks = key_skip<T>(c);
  SelState st{0ull, 0, kk};
  for (int pass = 0;; ++pass) {
    const int dbits = kCBits;
    skip_shared_bits<kCBits>(ks, st);
    if (st.depth >= 64) return ClusterSel{st.prefix, 64, st.kk, st.kk, 0, 0};  // (unreachable: E == kk first)
    if (!hist0_ready) hist_pass<false>(src, h, st.prefix, st.depth, dbits);  // no barrier: cluster_find has them
    hist0_ready = false;
    // (recv parity by pass, not depth: skipped bits must not give two
    // consecutive passes the same buffer)
    cluster_find<NarrowCounts<Src>::value>(cl, h, dbits, st.kk, x, pass & 1, s, passes != nullptr);  // identical in every block
    const int b = s.bin, above = s.above, E = s.count, below = s.flag;
    __syncthreads();  // s is rewritten by block scans after a return; h's clearing is complete
    st.kk -= above;
    st.prefix |= uint64_t(b) << (64 - st.depth - dbits);
    st.depth += dbits;
    if (passes && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *passes += 1;
    // (16-bit counts put both parities in recv's first half: the second is free)
    const int free_half = NarrowCounts<Src>::value ? 1 : (pass & 1) ^ 1;
    if (E == st.kk || st.depth >= 64 || E <= slack || E <= fin_cap)
      return ClusterSel{st.prefix, st.depth, st.kk, E, below, free_half};
  }
}

// Exchange of one int per block: v (uniform in the block) is stored into
// slots[q] of every block, then each block reads them locally: s.flag = the
// sum over lower ranks, s.count = the sum over all, or -1 if any value is
// negative. slots: 16 __shared__ ints used for this exchange only.
__device__ __forceinline__ void cluster_exchange(const cg::cluster_group& cl, int v, int* slots, BlockScratch& s) {
  const int C = int(cl.num_blocks());
  if (int(threadIdx.x) < C) *cl.map_shared_rank(slots + cl.block_rank(), int(threadIdx.x)) = v;
  cl.sync();
  if (threadIdx.x < 32) {
    const int q = int(threadIdx.x);
    const int x = q < C ? slots[q] : 0;
    const bool bad = __any_sync(0xffffffffu, x < 0);
    const int below = __reduce_add_sync(0xffffffffu, q < int(cl.block_rank()) ? x : 0);
    const int all = __reduce_add_sync(0xffffffffu, x);
    if (q == 0) {
      s.flag = below;
      s.count = bad ? -1 : all;
    }
  }
  __syncthreads();
}

// Sum of v over the block, in every thread. One barrier; s.warp is reused
// only after a later barrier.
__device__ __forceinline__ int block_sum(int v, BlockScratch& s) {
  const int x = __reduce_add_sync(0xffffffffu, v);
  if ((threadIdx.x & 31) == 0) s.warp[threadIdx.x >> 5] = x;
  __syncthreads();
  int t = 0;
  for (int w = 0; w < int(blockDim.x >> 5); ++w) t += s.warp[w];
  return t;
}

// Rank order spread over the cluster: every block sorts its own keys >= Tk
// (its run, ~keff / C keys), copies the run to every block, and writes each
// of its keys at its index in its run plus, for every other run, how many of
// that run's keys are above it. Runs sit in outbuf at even starts (16-byte
// copies): run d at start_d = (off_d + d + 1) & ~1. Then start_d + n_d <=
// start_{d+1}, and when n_d is odd the slot start_d + n_d (the odd half of
// the run's last pair) is below start_{d+1}: no block's keys.
// Measured on the H200 (graph replay, fp32 N(0,1), rank, k = 2048; against
// block 0 sorting every key, same call): 4 x 40K 17.6 vs 24.2 us, 4 x 150K
// 23.7 vs 30.0, 8 x 1M (C = 9) 55.2 vs 60.2, 16 x 1M (C = 6) 72.0 vs 74.4,
// 20 x 1M (C = 5) 76.6 vs 80.5; k = 4096 4 x 150K 27.7 vs 38.1. At C = 4
// (89.4 vs 88.7 us at 24 x 1M) and C = 3 (104.3 vs 103.3 at 32 x 1M) block
// 0's sort stays (rank_spread).

// Threads sharing one of n keys: the largest power of two <= 16 whose
// tpk * n keys fit one round of the block.
__device__ __forceinline__ int threads_per_key(int n) {
  int tpk = 1;
  while (tpk < 16 && 2 * tpk * n <= int(blockDim.x)) tpk *= 2;
  return tpk;
}

// How many keys of R descending runs are greater than x: run m is
// buf[at[m] + 1, at[m] + len[m]]; binary lifting from h = top down (lengths
// below 2 top), the same trip count in every thread, the runs side by side.
template <int R>
__device__ __forceinline__ int count_greater(const uint64_t* buf, const int (&at)[R], const int (&len)[R], int top,
                                             uint64_t x) {
  int lo[R];
#pragma unroll
  for (int m = 0; m < R; ++m) lo[m] = 0;
  for (int h = top; h > 0; h >>= 1) {
#pragma unroll
    for (int m = 0; m < R; ++m)
      if (lo[m] + h <= len[m] && buf[at[m] + lo[m] + h] > x) lo[m] += h;
  }
  int r = 0;
#pragma unroll
  for (int m = 0; m < R; ++m) r += lo[m];
  return r;
}

// Sorts run[0, nb) descending in place (distinct keys; run[nb] is this
// block's padding when nb is odd). Up to blockDim keys: each key ranked by
// counting with tpk threads (16-byte loads, conflict-free), past 256 keys
// within its sub-run of 128, then merged by adding its count of greater keys
// in each other sub-run (binary lifting; counting all nb keys costs nb^2
// compares). More keys (skewed rows: most of the row's keys in one block):
// the shared-memory bitonic sort through scratch (this block's region, free
// once src is read; next_pow2(nb) <= out_cap keys). (Through write_ranked's
// register sort instead, the refactor that shared it kept every kernel's
// output row on the stack: LDL per output key, prefill 9% slower.)
__device__ __noinline__ void sort_run(uint64_t* run, int nb, uint64_t* scratch) {
  if (nb > int(blockDim.x)) {
    const int P = next_pow2(nb);
    for (int i = threadIdx.x; i < P; i += blockDim.x) scratch[i] = i < nb ? run[i] : stk::kInvalidKey;
    __syncthreads();
    bitonic_sort(scratch, P, true);
    for (int i = threadIdx.x; i < nb; i += blockDim.x) run[i] = scratch[i];
    return;
  }
  const int L = nb > 256 ? 128 : 256;  // (up to 256 keys: one sub-run, no merge stage)
  const int tpk = threads_per_key(nb);
  if (threadIdx.x == 0 && (nb & 1)) run[nb] = stk::kInvalidKey;  // the last pair's odd slot: below every key
  __syncthreads();
  const int t = int(threadIdx.x), i = t / tpk, sl = t % tpk, s0 = i & -L;  // (i < blockDim)
  const ulonglong2* pr = reinterpret_cast<const ulonglong2*>(run);
  uint64_t x = 0;
  int r = 0;
  if (i < nb) {
    x = run[i];
    const int pe = (min(nb, s0 + L) + 1) >> 1;
#pragma unroll 4
    for (int j = (s0 >> 1) + sl; j < pe; j += tpk) {
      const ulonglong2 v = pr[j];
      r += int(v.x > x) + int(v.y > x);
    }
  }
  for (int o = 1; o < tpk; o <<= 1) r += __shfl_xor_sync(0xffffffffu, r, o);  // a key's threads: one aligned group
  __syncthreads();  // every key read
  if (i < nb && sl == 0) run[s0 + r] = x;
  if (nb <= L) return;
  __syncthreads();  // sub-runs of 128 sorted; at most 4 (nb <= 512)
  constexpr int R = 3;
  int at[R], len[R];
  if (i < nb) x = run[i];
#pragma unroll
  for (int m = 0; m < R; ++m) {
    int d = sl + m * tpk;
    d += d >= (s0 / L);  // the other sub-runs
    at[m] = d * L - 1;
    len[m] = i < nb ? max(0, min(L, nb - d * L)) : 0;
  }
  r = (sl == 0 ? i - s0 : 0) + count_greater<R>(run, at, len, 128, x);  // (the lanes' searches are disjoint)
  for (int o = 1; o < tpk; o <<= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
  __syncthreads();  // every key read
  if (i < nb && sl == 0) run[r] = x;
}

// Writes this block's run (sorted, run q of runs) in rank order: a key's
// rank is its index in the run plus its count of greater keys in each other
// run (binary lifting, the same trip count in every thread). tpk threads (a
// power of two <= 16, as many as fit one round) share a key, each searching
// up to R of the C - 1 other runs side by side.
template <int R>
__device__ __noinline__ void rank_runs(const uint64_t* outbuf, const int2* runs, int C, int q, int tpk, int top,
                                       OutRow out) {
  const int nb = runs[q].y;
  for (int b = 0; b < nb * tpk; b += blockDim.x) {  // the same trip count in every thread
    const int j = b + int(threadIdx.x), i = j / tpk, sl = j % tpk;
    const uint64_t x = i < nb ? outbuf[runs[q].x + i] : ~0ull;  // (~0: counts nothing)
    int at[R], len[R];
#pragma unroll
    for (int m = 0; m < R; ++m) {
      int d = sl + m * tpk;
      d += d >= q;  // the other runs
      const bool on = d < C;
      at[m] = on ? runs[d].x - 1 : 0;
      len[m] = on ? runs[d].y : 0;
    }
    int r = count_greater<R>(outbuf, at, len, top, x);
    for (int o = 1; o < tpk; o <<= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
    if (i < nb && sl == 0) out.put(i + r, x);
  }
}

__device__ __forceinline__ void rank_runs(const uint64_t* outbuf, const int2* runs, int C, int q, const OutRow& out) {
  const int nb = runs[q].y;
  int longest = 0;
  for (int d = 0; d < C; ++d) longest = max(longest, d == q ? 0 : runs[d].y);
  const int top = longest > 0 ? 1 << (31 - __clz(longest)) : 0;  // lifts from top down cover lengths < 2 top
  const int tpk = threads_per_key(nb);
  if (C - 1 <= 4 * tpk)
    rank_runs<4>(outbuf, runs, C, q, tpk, top, out);
  else if (C - 1 <= 8 * tpk)
    rank_runs<8>(outbuf, runs, C, q, tpk, top, out);
  else
    rank_runs<16>(outbuf, runs, C, q, tpk, top, out);
}

// Whether rank order is spread over the cluster (above; measured no faster
// at C <= 4, and a block-0 sort of <= 128 keys is short).
__device__ __forceinline__ bool rank_spread(const TopkParams& p, int C, int keff) {
  return p.order == stk::kOrderRank && p.rank_spread && C >= 5 && keff > 128;
}

// Writes the keys >= Tk of this block's src at off, off + 1, ... (index
// order), and block 0 pads from keff. Rank order: spread over the cluster
// (above) where rank_spread, else the blocks write their keys into block
// 0's outbuf and block 0 sorts them (write_ranked). Ends with a cluster
// barrier after its last DSMEM access.
template <class Src>
__device__ void cluster_write(const cg::cluster_group& cl, const Src& src, uint64_t Tk, int off, int keff,
                              const TopkParams& p, const OutRow& out, uint64_t* outbuf, uint64_t* scratch,
                              BlockScratch& s) {
  const int C = int(cl.num_blocks()), q = int(cl.block_rank());
  if (rank_spread(p, C, keff)) {
    __shared__ int2 runs[16];  // every block's (start, n)
    __shared__ int nb_s;
    const int start = (off + q + 1) & ~1;
    uint64_t* const run = outbuf + start;
    if (threadIdx.x == 0) nb_s = 0;
    __syncthreads();
    // (arrival order: the run is sorted next)
    // (kept during cluster_finish's scan instead, the keys above its bin
    // cost that scan as much as this one: 4 x 40K k=2048 scan 1685 -> 2784
    // cycles, this 1896 -> 873; not kept)
    const int64_t step = int64_t(blockDim.x) * kItems;
    for (int64_t gs = src.first() + int64_t(threadIdx.x) * kItems; gs < src.end(); gs += step) {
      uint64_t key[kItems];
      const uint32_t m = src.load(gs, key);
#pragma unroll
      for (int i = 0; i < kItems; ++i)
        if (((m >> i) & 1u) && key[i] >= Tk) run[atomicAdd(&nb_s, 1)] = key[i];
    }
    __syncthreads();
    const int nb = nb_s;
    cluster_clock(p.stamps != 0, 9);
    sort_run(run, nb, scratch);
    __syncthreads();
    cluster_clock(p.stamps != 0, 10);
    const int np = (nb + 1) >> 1;  // 16-byte pairs (the last one's odd slot is padding)
    const ulonglong2* pr = reinterpret_cast<const ulonglong2*>(run);
    for (int j = threadIdx.x; j < np * (C - 1); j += blockDim.x) {
      const int dd = j / np, i = j - dd * np;
      *cl.map_shared_rank(const_cast<ulonglong2*>(pr) + i, dd + (dd >= q)) = pr[i];
    }
    if (int(threadIdx.x) < C) *cl.map_shared_rank(runs + q, int(threadIdx.x)) = make_int2(start, nb);
    cl.sync();  // every run in every block; no DSMEM access after this
    cluster_clock(p.stamps != 0, 11);
    rank_runs(outbuf, runs, C, q, out);
    cluster_clock(p.stamps != 0, 12);
  } else if (p.order == stk::kOrderRank) {
    uint64_t* ob0 = cl.map_shared_rank(outbuf, 0);
    compact_pass(src, Tk, s, [&](int pos, uint64_t key) { ob0[off + pos] = key; });
    cl.sync();  // block 0's list complete; no DSMEM access after this
    if (q == 0) write_ranked<8>(outbuf, keff, out);
  } else {
    // no DSMEM access after the caller's exchange: no block waits for another
    compact_pass(src, Tk, s, [&](int pos, uint64_t key) { out.put(off + pos, key); });
  }
  if (q == 0) out.pad(keff);
}

// Writes the keys >= Tk of every block's src (keff = min(n, k) of them), then
// the padding: counts them, one exchange for the offsets, cluster_write.
template <class Src>
__device__ void cluster_output(const cg::cluster_group& cl, const Src& src, uint64_t Tk, const TopkParams& p,
                               const OutRow& out, uint64_t* outbuf, uint64_t* scratch, BlockScratch& s, int* slots) {
  int mine = 0;
  const int64_t step = int64_t(blockDim.x) * kItems;
  for (int64_t gs = src.first() + int64_t(threadIdx.x) * kItems; gs < src.end(); gs += step) {
    uint64_t key[kItems];
    const uint32_t m = src.load(gs, key);
#pragma unroll
    for (int i = 0; i < kItems; ++i) mine += ((m >> i) & 1u) && key[i] >= Tk;
  }
  cluster_exchange(cl, block_sum(mine, s), slots, s);
  cluster_write(cl, src, Tk, s.flag, s.count, p, out, outbuf, scratch, s);
}

// Bin keys cluster_finish can take: its buffer is half of recv (C x kCBins
// words), and each thread ranks one key by counting.
__host__ __device__ __forceinline__ int cluster_fin_cap(int C) { return min(256, C * kCBins / 2); }
static_assert(2 * 256 <= kClusterThreads, "cluster_finish ranks each of its <= 256 bin keys with two threads");

// Ends a select that stopped with the k-th key's bin small (sel.E <=
// cluster_fin_cap): one exchange instead of the remaining passes plus
// cluster_output's count exchange. Every block puts its keys in the bin into
// its own fin at sel.below + arrival slot (ranks in rank order; the order
// within a rank does not matter, keys are distinct), copies them to the same
// place in every other block, and its count of keys above the bin into
// slots. Once its copies are in, each block ranks the E keys locally (Tk:
// kk - 1 of them above it) and takes its output offset from the lower ranks'
// counts and their bin keys >= Tk. fin: sel.fin_half of recv (no block reads
// it any more). fin_n: zero. fbar: an mbarrier in its first phase (st.async,
// each block waits for its own copies only; index / any then need no cluster
// barrier at all), or null (DSMEM stores and a cluster barrier).
// Measured on the H200 (resident rows, cluster-barrier finds): 4 x 40K
// 12.3 vs 13.2 us without it, 4 x 150K 18.9 vs 20.8.
template <class Src>
__device__ void cluster_finish(const cg::cluster_group& cl, const Src& src, const ClusterSel& sel, const TopkParams& p,
                               const OutRow& out, uint64_t* fin, int* fin_n, uint64_t* tk, uint64_t* fbar,
                               uint64_t* outbuf, uint64_t* scratch, BlockScratch& s, int* slots) {
  const int C = int(cl.num_blocks()), q = int(cl.block_rank());
  const int sh = 64 - sel.depth;  // depth >= kCBits
  const uint64_t top = sel.prefix >> sh;
  uint64_t* const mine = fin + sel.below;  // this block's bin keys, in every block
  int above = 0;
  const int64_t step = int64_t(blockDim.x) * kItems;
  for (int64_t gs = src.first() + int64_t(threadIdx.x) * kItems; gs < src.end(); gs += step) {
    uint64_t key[kItems];
    const uint32_t m = src.load(gs, key);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const uint64_t kt = key[i] >> sh;
      const bool v = (m >> i) & 1u;
      above += v && kt > top;
      if (v && kt == top) mine[atomicAdd(fin_n, 1)] = key[i];  // local first
    }
  }
  const bool stamps = p.stamps != 0;
  cluster_clock(stamps, 5);
  const int a = block_sum(above, s);  // a barrier: mine and *fin_n are complete
  // then one remote store per thread and destination
  const int nm = *fin_n;
  if (fbar) {
    // st.async on fbar: this block waits for exactly what it is sent, and
    // no block waits for the others to have received theirs
    if (threadIdx.x == 0) {
      mbar_expect(fbar, uint32_t(sel.E - nm) * 8u + uint32_t(C - 1) * 4u);
      slots[q] = a;
    }
    for (int j = threadIdx.x; j < nm * C; j += blockDim.x) {
      const int d = j / nm, i = j - d * nm;
      if (d != q) st_async8(cluster_addr(mine + i, d), mine[i], cluster_addr(fbar, d));
    }
    if (int(threadIdx.x) < C && int(threadIdx.x) != q)
      st_async4(cluster_addr(slots + q, int(threadIdx.x)), uint32_t(a), cluster_addr(fbar, int(threadIdx.x)));
    if (threadIdx.x < 32) mbar_wait<true>(fbar, 0u);  // (one use per kernel: phase 0)
    __syncthreads();
  } else {
    for (int j = threadIdx.x; j < nm * C; j += blockDim.x) {
      const int d = j / nm, i = j - d * nm;
      if (d != q) *cl.map_shared_rank(mine + i, d) = mine[i];
    }
    if (int(threadIdx.x) < C) *cl.map_shared_rank(slots + q, int(threadIdx.x)) = a;
    cl.sync();  // every block's bin keys and count are in every block
  }
  cluster_clock(stamps, 6);
  // Two threads a key (adjacent lanes, each counting half of the E keys):
  // the count is a serial loop over E <= 256 keys, and the kernel runs
  // kClusterThreads >= 2 x 256. (A warp a key, its lanes counting strided
  // slices, measured slower than one thread a key: 6479 vs 3012 cycles at
  // 4 x 150K.)
  const int t = int(threadIdx.x);
  const int ki = t >> 1, h = t & 1;
  int r = 0;  // ki's key's rank among the bin's keys (h == 0), or a part of it
  const uint64_t x = ki < sel.E ? fin[ki] : 0ull;
  if (ki < sel.E) {
#pragma unroll 8
    for (int j = h; j < sel.E; j += 2) r += fin[j] > x;
  }
  r += __shfl_xor_sync(0xffffffffu, r, 1);
  const bool own = ki < sel.E && h == 0;
  if (own && r == sel.kk - 1) *tk = x;
  int off = block_sum(own && ki < sel.below && r < sel.kk, s);  // the lower ranks' bin keys >= Tk (a barrier: *tk is set)
  const uint64_t Tk = *tk;
  int keff = sel.kk;
  for (int i = 0; i < C; ++i) {
    keff += slots[i];
    off += i < q ? slots[i] : 0;
  }
  __syncthreads();  // block_sum's s.warp is rewritten by the compaction's scans
  cluster_clock(stamps, 7);
  cluster_write(cl, src, Tk, off, keff, p, out, outbuf, scratch, s);
  cluster_clock(stamps, 8);
}

// The fast test's threshold, prepared once per gather from thr, a score
// prefix (low word 0: a sampled estimate or a bin edge; fast_test_ok), so a
// column's key is >= thr iff its score is >= tf, thr's score as a float
// (above -inf): no key of score tf can fall below thr, and no tie needs its
// key. 16-bit scores: th2 holds th, the smallest 16-bit value >= tf, in both
// halves of a word (a 16-bit x has x >= tf iff x >= th), so two columns take
// one packed compare.
template <typename T>
struct VecThr {
  float tf;
  uint32_t th2;
  __device__ __forceinline__ explicit VecThr(uint64_t thr) {
    tf = __uint_as_float(stk::unordered_u32(uint32_t(thr >> 32)));
    th2 = 0;
    if constexpr (sizeof(typename Scalar<T>::raw) == 2) th2 = thr16x2<T>(tf);
  }
};

// The fast test on one 16-byte vector of raw elements: the bits of mask
// whose key is >= thr (VecThr: a score prefix), no column forced: x >= tf
// decides, one compare per column (16-bit: per two).
template <typename T>
__device__ __forceinline__ uint32_t vec_select(const uint4& r, uint32_t mask, const VecThr<T>& t) {
  constexpr int NV = GlobalSrc<T>::kVec;
  uint32_t ge = 0;
  if constexpr (NV == 4) {
#pragma unroll
    for (int i = 0; i < NV; ++i) ge |= uint32_t(__uint_as_float(GlobalSrc<T>::vec_f32(r, i)) >= t.tf) << i;
  } else {
    ge = vec_ge16<T>(r, t.th2);
  }
  return ge & mask;
}

// Exclusive prefix over the warp's lanes of a small count (0 <= cnt < 2^B),
// and the warp's total: B independent ballots instead of a shuffle chain.
template <int B>
__device__ __forceinline__ int warp_excl_small(int cnt, int* total) {
  const uint32_t lt = (1u << (threadIdx.x & 31)) - 1u;
  int ex = 0, tot = 0;
#pragma unroll
  for (int b = 0; b < B; ++b) {
    const uint32_t bb = __ballot_sync(0xffffffffu, (cnt >> b) & 1);
    ex += __popc(bb & lt) << b;
    tot += __popc(bb) << b;
  }
  *total = tot;
  return ex;
}

// Appends the selected columns of one vector at pos, pos + 1, ... (index
// order): a loop over the set bits, so lanes with none (most) do no work.
template <typename T, class Sink>
__device__ __forceinline__ void sink_vec(const GlobalSrc<T>& src, const uint4& r, uint32_t sel, int64_t c0, int pos,
                                         Sink& sink) {
  while (sel) {
    const int i = __ffs(sel) - 1;
    sel &= sel - 1;
    sink(pos++, src.key1(c0 + i, GlobalSrc<T>::vec_f32(r, i)));
  }
}

// sink_vec for a column that passed the float test (kFloatTest: no forced
// column, score >= tf > -inf, so never NaN): its canonical score is its own
// but for -0 (+0), and the key's low word needs only the low 32 bits of the
// global index, so 32-bit arithmetic gives it. (The general key costs a
// 64-bit index, the forced test and the NaN map per column: ~50
// instructions a key in split_items_kernel, where ~half the warp vectors
// hold a candidate, ncu source counters at 16 x 1M.)
template <typename T>
__device__ __forceinline__ void sink_vec_float(const GlobalSrc<T>& src, const uint4& r, uint32_t sel, uint32_t c0,
                                               uint64_t* dst) {
  const uint32_t sc = uint32_t(src.c.scale), g0 = c0 * sc + uint32_t(src.c.offset);
  while (sel) {
    const int i = __ffs(sel) - 1;
    sel &= sel - 1;
    const uint32_t u = stk::ordered_nonnan_u32(GlobalSrc<T>::vec_f32(r, i));
    *dst++ = stk::make_key(u, g0 + uint32_t(i) * sc, src.c.tie);
  }
}

// Ordered compaction of the keys >= thr of a chunk in global memory (sink(pos,
// key), pos in index order; returns the count). One block per SM, so the
// loop must be cheap per column and keep loads in flight:
//  - Fast test: with no forced columns and a threshold score above -inf, a
//    column's key is > thr iff its float32 value x > t (t = the threshold's
//    score: NaN and -0 compare as their canonical -inf and +0 would), and a
//    column with x == t is settled by its full key. Else (forcing, or t =
//    -inf: rare) the plain ordered compaction (compact_pass) runs instead.
//  - Coalesced: lane l of warp w loads vector v of the warp's span at
//    w * WS + v * 32 kVec + l kVec (16 bytes; a warp load is 512 contiguous
//    bytes). Index order is rebuilt with a warp scan per vector (vectors in
//    order, lanes in order) and a block scan of the warp totals (warps in
//    order). (Thread-contiguous spans measured ~15 GB/s per SM: with the
//    shared memory this kernel takes, L1 cannot hold the partly used lines.)
//  - The next step's loads are issued before this step's columns are tested.
//    (A bulk L2 prefetch of each warp's span 1-4 steps ahead measured slower
//    on the H200: 64 x 1M 142 vs 133 us, 16 x 1M 71-73 vs 70.)
template <int V, typename T, class Sink>  // V: vectors per lane per step
__device__ int gather_fast(const GlobalSrc<T>& src, uint64_t thr, BlockScratch& s, Sink sink) {
  constexpr int NV = GlobalSrc<T>::kVec;  // columns per vector
  const int lane = int(threadIdx.x) & 31, w = int(threadIdx.x) >> 5;
  const int64_t WS = int64_t(V) * 32 * NV;  // a warp's columns per step
  const int64_t step = WS * (blockDim.x >> 5);
  const VecThr<T> vt(thr);
  int base = 0;
  uint4 nxt[V];
  uint32_t nm[V];
  auto load_step = [&](int64_t tb) {
#pragma unroll
    for (int v = 0; v < V; ++v) nm[v] = src.load_vec(tb + w * WS + (v * 32 + lane) * NV, nxt[v]);
  };
  load_step(src.first());
  for (int64_t tb = src.first(); tb < src.end(); tb += step) {
    uint4 cur[V];
    uint32_t sel[V];
#pragma unroll
    for (int v = 0; v < V; ++v) {
      sel[v] = nm[v];
      cur[v] = nxt[v];
    }
    if (tb + step < src.end()) load_step(tb + step);
    int run = 0;        // selected columns of this warp in earlier vectors
    int excl[V];        // ... of lanes below this one in vector v
#pragma unroll
    for (int v = 0; v < V; ++v) {
      sel[v] = vec_select<T>(cur[v], sel[v], vt);
      int tot;
      excl[v] = run + warp_excl_small<NV == 4 ? 3 : 4>(__popc(sel[v]), &tot);
      run += tot;
    }
    int total;
    const int wb = block_excl_scan(lane == 0 ? run : 0, s, &total);  // earlier warps' totals
    const int wbase = base + __shfl_sync(0xffffffffu, wb, 0);
#pragma unroll
    for (int v = 0; v < V; ++v) sink_vec(src, cur[v], sel[v], tb + w * WS + (v * 32 + lane) * NV, wbase + excl[v], sink);
    base += total;
  }
  return base;
}

// How a span's columns are tested against thr (warp_span_gather).
enum SpanTest { kFloatTest, kTakeAll, kKeyTest };

// One warp's span [v0, v1) of 16-byte vectors (counted from src.first()):
// appends the keys >= thr, in index order, to reg[0, cap), with the next
// step's loads in flight and no block barrier. Returns the count, or -1 if
// it would pass cap (the warp stops there). kFloatTest: one float compare
// per column (no forced column, threshold score above -inf: fast_test_ok);
// kTakeAll: thr = 0, every valid column; kKeyTest: full keys. Steps wholly
// inside the chunk and the span (all but the first and last, warp-uniform)
// load without per-vector checks (one uniform branch per step instead of a
// checked, divergent path per vector: gather phase 98.7 -> 83.3 us at 64 x
// 1M on the H200; a pure read of the same pattern takes 74,
// ci/gpu/stream_probe.cu). PF > 0: each such step also prefetches, into L2,
// the warp's vectors PF steps ahead (more bytes in flight than the
// registers hold). Vote: sparse candidates, one vote a vector skips an
// empty one; without it (dense candidates, kFloatTest) a step's vectors are
// sunk together (body_dense). Used by gather_warps (the cluster and
// sampled-rows kernels) and by the balanced split's split_items_kernel.
template <int V, SpanTest Test, int PF, bool Vote, typename T>
__device__ __forceinline__ int warp_span_gather(const GlobalSrc<T>& src, int64_t v0, int64_t v1, uint64_t thr,
                                                uint64_t* reg, int cap) {
  constexpr int NV = GlobalSrc<T>::kVec;
  constexpr int SV = 32 * V;  // vectors per warp step
  const int lane = int(threadIdx.x) & 31;
  if (v0 >= v1) return 0;
  const VecThr<T> vt(thr);
  const int64_t f = src.first();
  const int64_t wlo = (src.j0 - f + NV - 1) / NV, whi = min(v1, (src.j1 - f) / NV);
  // Steps are counted in 32 bits (s: vectors v0 + s SV ..): steps [s_lo,
  // s_hi) lie wholly inside the valid columns and load unchecked; those
  // below s_pf also prefetch PF steps ahead. (The 64-bit bounds compares and
  // the cur = nxt register copies were ~1/6 of the loop's instructions at the
  // prefill cell, ncu source counters.)
  const int nsteps = int((v1 - v0 + SV - 1) / SV);
  auto steps_below = [&](int64_t lim) { return lim - v0 >= SV ? int((lim - v0 - SV) / SV) + 1 : 0; };
  const int s_lo = src.vec ? (wlo > v0 ? int((wlo - v0 + SV - 1) / SV) : 0) : nsteps;
  const int s_hi = src.vec ? steps_below(whi) : 0;
  const int s_pf = PF > 0 ? steps_below(whi - int64_t(PF) * SV) : 0;
  const uint4* const vp = reinterpret_cast<const uint4*>(src.base + f) + v0 + lane;
  const uint32_t cb = uint32_t(f + (v0 + lane) * NV);  // low word of the lane's first column
  const uint32_t s_span = uint32_t(max(s_hi - s_lo, 0));
  // q: the lane's first vector of step s (a pointer the loop advances, not
  // rebuilt from s: that and the checked path's 64-bit column, which the
  // compiler computed ahead of the fast path's branch, were ~15 instructions
  // a step, SASS).
  auto load_step = [&](int s, const uint4* q, uint4 (&r)[V], uint32_t (&nm)[V]) {
    if (uint32_t(s - s_lo) < s_span) {
#pragma unroll
      for (int v = 0; v < V; ++v) {
        r[v] = __ldg(q + v * 32);
        nm[v] = (1u << NV) - 1u;
      }
      if (PF > 0 && s < s_pf)
#pragma unroll
        for (int v = 0; v < V; ++v) asm volatile("prefetch.global.L2 [%0];" ::"l"(q + PF * SV + v * 32));
      return;
    }
    int so;  // s, opaque: else its 64-bit column math is hoisted above the fast path's branch
    asm volatile("mov.b32 %0, %1;" : "=r"(so) : "r"(s));
    const int64_t vq = v0 + lane + int64_t(so) * SV;  // the lane's vector index of step s
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int64_t vi = vq + v * 32;
      nm[v] = vi < v1 ? src.load_vec(f + vi * NV, r[v]) : 0u;  // past the span: another warp's
    }
  };
  auto put = [&](int pos, uint64_t key) { reg[pos] = key; };
  int cnt = 0;
  // the step's vectors: false if the keys would pass cap (warp-uniform)
  auto body = [&](int s, const uint4 (&cur)[V], const uint32_t (&sel)[V]) -> bool {
#pragma unroll
    for (int v = 0; v < V; ++v) {
      uint32_t m = sel[v];
      int tot, ex;
      if (Test == kFloatTest) {
        // (no branch on m: vec_select masks, and a vector past the span has m = 0)
        m = vec_select<T>(cur[v], m, vt);
        // Vote: sparse candidates (the split's ~2.5 k = ~5K in 1M columns at
        // k = 2048 leave about half the warp vectors empty, ncu at 16 x 1M):
        // one vote skips the prefix and sink of an empty vector. Dense
        // candidates (sampled rows: ~1 in 40 columns; this vote cost prefill
        // 1068 -> 1095 us on the H200) take body_dense instead (step).
        // At most one candidate a lane (nearly always, when candidates are
        // sparse): one ballot gives the prefix, not one per count bit.
        const uint32_t b = __ballot_sync(0xffffffffu, m != 0);
        if (Vote && !b) continue;
        if (!__any_sync(0xffffffffu, (m & (m - 1)) != 0)) {
          ex = __popc(b & ((1u << lane) - 1u));
          tot = __popc(b);
        } else {
          ex = warp_excl_small<NV == 4 ? 3 : 4>(__popc(m), &tot);
        }
        if (cnt + tot > cap) return false;
        sink_vec_float(src, cur[v], m, cb + uint32_t(s) * uint32_t(SV * NV) + uint32_t(v * 32 * NV), reg + cnt + ex);
      } else {
        const int64_t c0 = f + (v0 + int64_t(s) * SV + v * 32 + lane) * NV;
        if (m && Test != kTakeAll) {
          uint32_t ge = 0;
#pragma unroll
          for (int i = 0; i < NV; ++i)
            if (((m >> i) & 1u) && src.key1(c0 + i, GlobalSrc<T>::vec_f32(cur[v], i)) >= thr) ge |= 1u << i;
          m = ge;
        }
        if (Vote && Test != kTakeAll && !__any_sync(0xffffffffu, m != 0)) continue;
        ex = warp_excl_small<NV == 4 ? 3 : 4>(__popc(m), &tot);
        if (cnt + tot > cap) return false;
        sink_vec(src, cur[v], m, c0, cnt + ex, put);
      }
      cnt += tot;
    }
    return true;
  };
  // Dense candidates (!Vote, kFloatTest: the sampled-rows kernel, ~3 a warp
  // vector): the step's V vectors share one vote ("at most one candidate a
  // lane in each vector"), one cap check and one sink loop over the lane's
  // candidates of all V vectors. The warp then runs, per step, the most
  // candidates any lane holds in the step, not that per vector summed (V = 2
  // at fp32 prefill: ~1.5 loop rounds a step instead of ~2.1, each round ~33
  // SASS instructions instead of ~21). Same slots as body: vector by vector,
  // lane by lane, element by element. (H200, prefill, same call: fp32 causal
  // 724 -> 707 us, packed 374 -> 371; bf16 547 -> 538, 322 -> 306.)
  auto body_dense = [&](int s, const uint4 (&cur)[V], const uint32_t (&sel)[V]) -> bool {
    static_assert(V * NV <= 32, "one mask word for the step");
    uint32_t m[V];
    bool multi = false;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      m[v] = vec_select<T>(cur[v], sel[v], vt);
      multi = multi || (m[v] & (m[v] - 1u)) != 0;
    }
    int ex[V], run = 0;  // ex[v]: the warp's candidates before this lane's in vector v
    if (!__any_sync(0xffffffffu, multi)) {
      const uint32_t lt = (1u << lane) - 1u;
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const uint32_t b = __ballot_sync(0xffffffffu, m[v] != 0);
        ex[v] = run + __popc(b & lt);
        run += __popc(b);
      }
    } else {
#pragma unroll
      for (int v = 0; v < V; ++v) {
        int tot;
        ex[v] = run + warp_excl_small<NV == 4 ? 3 : 4>(__popc(m[v]), &tot);
        run += tot;
      }
    }
    if (cnt + run > cap) return false;
    // the lane's j-th candidate of the step, in vector v, goes to off[v] + j
    uint32_t bits = 0;
    int off[V], mine = 0;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      bits |= m[v] << (v * NV);
      off[v] = cnt + ex[v] - mine;
      mine += __popc(m[v]);
    }
    const uint32_t sc = uint32_t(src.c.scale);
    // global index (low word) of the lane's first column of the step
    const uint32_t g0 = (cb + uint32_t(s) * uint32_t(SV * NV)) * sc + uint32_t(src.c.offset);
    for (int j = 0; bits; ++j) {
      const uint32_t i = uint32_t(__ffs(int(bits))) - 1u;
      bits &= bits - 1u;
      const uint32_t v = i / NV, e = i % NV;
      uint4 r = cur[0];
      int o = off[0];
#pragma unroll
      for (int u = 1; u < V; ++u)
        if (v == uint32_t(u)) {
          r = cur[u];
          o = off[u];
        }
      const uint32_t u32 = stk::ordered_nonnan_u32(GlobalSrc<T>::vec_f32(r, int(e)));
      reg[o + j] = stk::make_key(u32, g0 + (v * (32 * NV) + e) * sc, src.c.tie);
    }
    cnt += run;
    return true;
  };
  auto step = [&](int s, const uint4 (&cur)[V], const uint32_t (&sel)[V]) -> bool {
    if constexpr (Test == kFloatTest && !Vote) return body_dense(s, cur, sel);
    else return body(s, cur, sel);
  };
  // two register sets in turn (no copies): the next step's loads are issued
  // before this step's vectors are tested
  uint4 ra[V], rb[V];
  uint32_t ma[V], mb[V];
  const uint4* q = vp;  // step s's vectors
  load_step(0, q, ra, ma);
  for (int s = 0; s < nsteps; s += 2, q += 2 * SV) {
    if (s + 1 < nsteps) load_step(s + 1, q + SV, rb, mb);
    if (!step(s, ra, ma)) return -1;
    if (s + 1 >= nsteps) break;
    if (s + 2 < nsteps) load_step(s + 2, q + 2 * SV, ra, ma);
    if (!step(s + 1, rb, mb)) return -1;
  }
  return cnt;
}

// The same gather without block barriers: warp w streams its own contiguous
// span (vectors [w, w+1) x nvec / warps of the chunk's aligned grid) by
// warp_span_gather, appending its keys >= thr in index order to its own
// region of buf's upper half; one block scan of the warp counts then packs
// the regions, in warp order (= index order), into buf[0, total). Warps drift
// apart instead of waiting for the slowest load of every step. Returns the
// count, or cap + 1 when a warp's region (or the lower half) would overflow:
// the caller then runs the block-synchronous gather (skewed rows).
// (Measured, not kept, at 64 x 1M: a cp.async ring of 8 or 16 one-vector
// stages per warp instead of the registers, 145 / 148 vs 130 us; each warp
// starting at a different step of its span, which lifts the pure read from
// 3.6 to 4.0 TB/s, 133 vs 130 us.)
// V: vectors per lane per step. kInPlace: the warp regions tile the whole
// buffer (cap / warps keys each, twice the room per warp) and are not
// packed: *wcnt gets the calling warp's count, its keys stay at buf + w
// (cap / warps), and the caller reads the regions (WarpRegions) or packs
// them (pack_regions; the sampled-rows kernel, whose buffer has no spare
// half). PF: warp_span_gather's L2 prefetch distance; Vote: its
// empty-vector skip.
template <int V, bool kInPlace, int PF, bool Vote, typename T>
__device__ int gather_warps(const GlobalSrc<T>& src, uint64_t thr, BlockScratch& s, uint64_t* buf, int cap,
                            int* wcnt = nullptr) {
  constexpr int NV = GlobalSrc<T>::kVec;
  const int lane = int(threadIdx.x) & 31, w = int(threadIdx.x) >> 5, nw = int(blockDim.x) >> 5;
  const int half = kInPlace ? 0 : cap / 2, wcap = (cap - half) / nw;
  uint64_t* reg = buf + half + int64_t(w) * wcap;
  const int64_t nvec = (src.end() - src.first() + NV - 1) / NV;
  const int cnt = warp_span_gather<V, kFloatTest, PF, Vote>(src, nvec * w / nw, nvec * (w + 1) / nw, thr, reg, wcap);
  if (lane == 0) s.warp[w] = cnt;  // -1: the warp's region would overflow
  __syncthreads();
  if (threadIdx.x == 0) {
    int acc = 0;
    bool bad = false;
    for (int i = 0; i < nw; ++i) {
      const int c = s.warp[i];
      bad = bad || c < 0;
      s.warp[i] = acc;
      acc += c < 0 ? 0 : c;
    }
    s.count = bad || (!kInPlace && acc > half) ? -1 : acc;
  }
  __syncthreads();
  const int total = s.count;
  if constexpr (kInPlace) {
    if (total < 0) return cap + 1;  // (uniform; s is next written after a barrier)
    *wcnt = cnt;
    return total;
  }
  if (total >= 0) {
    const int off = s.warp[w];
    for (int i = lane; i < cnt; i += 32) buf[off + i] = reg[i];  // upper half -> lower half: disjoint
  }
  __syncthreads();
  return total >= 0 ? total : cap + 1;
}

// The same gather with TMA bulk copies (SPARSETOPK_NV_PATH=bulk, off by
// default). The chunk's 16-byte aligned interior streams through a ring of
// kRing stages of kStage bytes in shared memory, so the copy engine, not
// registers, holds ~96 KB in flight; the head and tail (under 16 bytes each)
// go through compact_pass. Same contract as gather_fast (caller checks the
// fast-test conditions and src.vec). Exact on the H200 but no faster than the
// register gather (64 x 1M: 171 vs 170 us): the per-round block scan, not
// the bytes in flight, set the pace; gather_warps removed that instead.
constexpr int kRing = 6;
constexpr int kStage = 16384;
constexpr int kStageVec = 2;  // 16-byte vectors per thread per round: kStage / 16 / 512 threads

template <typename T, class Sink>
__device__ int gather_bulk(const GlobalSrc<T>& src, uint64_t thr, BlockScratch& s, unsigned char* ring,
                           uint64_t* bars, Sink sink) {
  using raw = typename Scalar<T>::raw;
  constexpr int NV = GlobalSrc<T>::kVec;
  const int64_t lo = src.j0, hi = src.j1;
  // aligned interior [A, B): column j sits at a 16-byte boundary iff j = e (mod NV)
  const uintptr_t b0 = reinterpret_cast<uintptr_t>(src.base);
  const int64_t e = int64_t(((16u - (b0 & 15u)) & 15u) / sizeof(raw));
  const int64_t A = lo + (((e - lo) % NV) + NV) % NV;
  const int64_t B = hi - (((hi - e) % NV) + NV) % NV;
  if (B <= A) return compact_pass(src, thr, s, sink);
  GlobalSrc<T> part;
  part.init(src.base, lo, A, src.c);
  int base = compact_pass(part, thr, s, sink);
  const VecThr<T> vt(thr);
  const int64_t bytes = (B - A) * int64_t(sizeof(raw));
  const int ntiles = int((bytes + kStage - 1) / kStage);
  const unsigned char* g = reinterpret_cast<const unsigned char*>(src.base + A);
  auto tile_bytes = [&](int t) { return uint32_t(min(int64_t(kStage), bytes - int64_t(t) * kStage)); };
  if (threadIdx.x == 0)
    for (int i = 0; i < kRing; ++i) mbar_init(&bars[i]);
  __syncthreads();
  if (threadIdx.x == 0)
    for (int t = 0; t < min(kRing, ntiles); ++t) bulk_load(ring + t * kStage, g + int64_t(t) * kStage, tile_bytes(t), &bars[t]);
  for (int t = 0; t < ntiles; ++t) {
    const int st = t % kRing;
    mbar_wait(&bars[st], uint32_t(t / kRing) & 1u);
    const int nvec = int(tile_bytes(t) / 16);
    const uint4* tv = reinterpret_cast<const uint4*>(ring + st * kStage);
    const int64_t c0 = A + int64_t(t) * (kStage / int(sizeof(raw)));  // first column of the tile
    for (int v0 = 0; v0 < nvec; v0 += int(blockDim.x) * kStageVec) {  // one round at 512 threads
      uint4 cur[kStageVec];
      uint32_t sel[kStageVec];
      int cnt = 0;
#pragma unroll
      for (int q = 0; q < kStageVec; ++q) {
        const int vi = v0 + int(threadIdx.x) * kStageVec + q;
        sel[q] = 0;
        cur[q] = make_uint4(0, 0, 0, 0);
        if (vi < nvec) {
          cur[q] = tv[vi];
          sel[q] = vec_select<T>(cur[q], (1u << NV) - 1u, vt);
        }
        cnt += __popc(sel[q]);
      }
      int total;
      int pos = base + block_excl_scan(cnt, s, &total);  // its barriers end every read of this round
#pragma unroll
      for (int q = 0; q < kStageVec; ++q) {
        sink_vec(src, cur[q], sel[q], c0 + int64_t(v0 + int(threadIdx.x) * kStageVec + q) * NV, pos, sink);
        pos += __popc(sel[q]);
      }
      base += total;
    }
    // every thread is past its reads of stage st (the scan's barriers): refill it
    if (threadIdx.x == 0 && t + kRing < ntiles) {
      fence_proxy_async();
      bulk_load(ring + st * kStage, g + int64_t(t + kRing) * kStage, tile_bytes(t + kRing), &bars[st]);
    }
  }
  part.init(src.base, B, hi, src.c);
  return base + compact_pass(part, thr, s, [&](int pos, uint64_t key) { sink(base + pos, key); });
}

// The fast test applies: no forced columns, threshold score above -inf, and
// thr a score prefix (low word 0: every estimate and bin edge the gathers
// take), so that a score compare alone decides (VecThr).
__device__ __forceinline__ bool fast_test_ok(const RowCtx& c, uint64_t thr) {
  return c.force_begin <= 0 && c.force_end <= 0 && uint32_t(thr >> 32) > stk::kOrderedNegInf && uint32_t(thr) == 0u;
}

template <int V, typename T, class Sink>
__device__ int gather_wide(const GlobalSrc<T>& src, uint64_t thr, BlockScratch& s, Sink sink) {
  return fast_test_ok(src.c, thr) ? gather_fast<V>(src, thr, s, sink) : compact_pass(src, thr, s, sink);
}

template <typename T>
__global__ void __launch_bounds__(kClusterThreads) topk_cluster_kernel(TopkParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ BlockScratch s;
  __shared__ int xslot[2][16];  // cluster_exchange slots: output counts, gather counts
  __shared__ uint64_t bars[kRing];  // gather_bulk's copy barriers
  __shared__ int fin_n;  // cluster_finish's arrival count
  __shared__ uint64_t fin_tk;
  __shared__ uint64_t hbars[2];  // cluster_find's mbarriers, one per recv parity
  __shared__ uint64_t fbar;      // cluster_finish's
  cg::cluster_group cl = cg::this_cluster();
  const int C = int(cl.num_blocks());
  const int rank = int(cl.block_rank());
  const int64_t r = blockIdx.y;
  ClusterLayout L = carve_cluster(smem, p, C);
  // shared-memory setup needs no global data: before the launch wait
  pdl_trigger();
  for (int i = threadIdx.x; i < kCBins; i += blockDim.x) L.h[i] = 0;
  if (threadIdx.x == 0) {
    fin_n = 0;
    mbar_init(&hbars[0]);  // (visible to the cluster after the start barrier below)
    mbar_init(&hbars[1]);
    mbar_init(&fbar);
  }
  __syncthreads();
  pdl_warm(p);
  pdl_wait();
  const stk::RowGeometry g = row_geom(p, r);
  const RowCtx c = make_ctx(p, g);
  const OutRow out = make_out(p, r);
  uint64_t* const scratch = reinterpret_cast<uint64_t*>(L.region);  // (rank order, once src is read)
  using raw = typename Scalar<T>::raw;
  const raw* base = row_scores<T>(p, r, g);
  const int64_t n = c.n;
  int64_t lo, hi;
  chunk_range(n, C, rank, &lo, &hi);
  STK_STAMP(0);
  unsigned long long* const npass = p.stamps ? &g_cluster_stamps[31] : nullptr;
  if (npass && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *npass = 0;
  HistXchg xch{L.recv, hbars, 0u, p.cluster_mbar != 0};
  // the final select and the output: cluster_finish once the bin holds <=
  // fin_cap keys, else passes down to Tk and cluster_output. Resident rows
  // only: on the candidates of streamed rows it measured slower on the H200
  // (16 x 1M 62.5 vs 58.3 us, 8 x 1M 48.4 vs 46.7; 64 x 1M even; the finish
  // phases took ~2x the cycles they take on resident slices, not understood;
  // again with the st.async exchanges: 64.6 vs 59.8, 50.2 vs 47.5).
  auto select_write = [&](const auto& src, bool hist0_ready, int fin_cap) {
    const ClusterSel sel = cluster_select<T>(cl, src, p.k, L.h, xch, s, hist0_ready, c, 0, fin_cap, npass);
    STK_STAMP(5);
    if (sel.E <= fin_cap) {
      uint64_t* const fin = reinterpret_cast<uint64_t*>(L.recv + sel.fin_half * C * kCBins);
      cluster_finish(cl, src, sel, p, out, fin, &fin_n, &fin_tk, xch.mbar ? &fbar : nullptr, L.outbuf, scratch, s,
                     xslot[0]);
    } else {
      cluster_output(cl, src, sel.prefix, p, out, L.outbuf, scratch, s, xslot[0]);
    }
  };
  // DSMEM may be accessed only once every block of the cluster runs: arrive
  // now, wait just before the first remote store (after the load / the sample)
  cl.barrier_arrive();
  GlobalSrc<T> gsrc;
  gsrc.init(base, lo, hi, c);

  if (n <= int64_t(C) * p.res_cap) {
    // resident: read the chunk once, ordered scores + the first histogram
    // (one atomic per distinct bin of the warp via __match_any_sync measured
    // slower on the H200: load phase 2.7 vs 1.9 us at 4 x 40K, 5.4 vs 3.4 at
    // 4 x 150K)
    uint32_t* res = reinterpret_cast<uint32_t*>(L.region);
    constexpr int NV = GlobalSrc<T>::kVec;
    const int64_t step = int64_t(blockDim.x) * NV;  // coalesced: lane l on vector l
    if (lo < hi) {
#pragma unroll 4
      for (int64_t gs = gsrc.first() + int64_t(threadIdx.x) * NV; gs < gsrc.end(); gs += step) {
        uint4 rv;
        const uint32_t m = gsrc.load_vec(gs, rv);
#pragma unroll
        for (int i = 0; i < NV; ++i)
          if ((m >> i) & 1u) {
            const uint32_t ord = uint32_t(gsrc.key1(gs + i, GlobalSrc<T>::vec_f32(rv, i)) >> 32);
            res[gs + i - lo] = ord;
            atomicAdd(&L.h[ord >> (32 - kCBits)], 1u);
          }
      }
    }
    __syncthreads();
    cl.barrier_wait();
    STK_STAMP(1);
    const ResSrc rs{res, hi - lo, c, lo};
    if (n > p.k)
      select_write(rs, true, p.cluster_finish ? cluster_fin_cap(C) : 0);
    else  // (uniform) every valid key, Tk = 1
      cluster_output(cl, rs, 1ull, p, out, L.outbuf, scratch, s, xslot[0]);
    STK_STAMP(6);
    return;
  }

  // streamed (n > C * res_cap > k): sample -> est -> one-read gather
  uint64_t* cand = reinterpret_cast<uint64_t*>(L.region);
  const int R = max(32, min(int(blockDim.x), 1024 / C));  // sample runs of 8 columns per block
  int64_t S = 0;                    // sample size over the cluster
  for (int q = 0; q < C; ++q) {
    int64_t a, b;
    chunk_range(n, C, q, &a, &b);
    S += min(b - a, int64_t(R) * kItems);
  }
  const int64_t len = hi - lo;
  if (int(threadIdx.x) < R) {
    // disjoint runs spread over the chunk (in groups of G adjacent runs
    // when the chunk is long enough), or the whole chunk if it is short
    const int G = p.cluster_span, t = int(threadIdx.x), ng = (R + G - 1) / G;
    const int64_t start = len >= 2 * int64_t(ng) * G * kItems ? (int64_t(t / G) * len) / ng + (t % G) * kItems
                                                              : (int64_t(t) * len) / R;
#pragma unroll
    for (int q = 0; q < kItems; ++q) {
      const int64_t i = int64_t(threadIdx.x) * kItems + q;
      const int64_t j = len >= int64_t(R) * kItems ? lo + start + q : lo + i;
      cand[i] = j < hi ? gsrc.key1(j, Scalar<T>::f32(base[j])) : stk::kInvalidKey;
    }
  }
  __syncthreads();
  cl.barrier_wait();
  STK_STAMP(1);
  int64_t m = (5 * int64_t(p.k) * S + 2 * n - 1) / (2 * n);
  m = max(m, int64_t(16));
  // (stopped once the bin holds <= m / 2 sample keys: at most ~1.5 m sample
  // keys, so ~3.75 k row keys, are expected >= est)
  const uint64_t est = m < S ? cluster_select<T>(cl, CandSrc{cand, int64_t(R) * kItems}, int(m), L.h, xch, s,
                                                 false, c, int(m / 2), 0, npass).prefix
                             : 0ull;
  STK_STAMP(2);
  // (bulk: the last kRing stages of the region become the copy ring)
  const int ring_keys = kRing * kStage / 8;
  const bool bulk = p.bulk && fast_test_ok(c, est) && gsrc.vec && p.cand_cap - ring_keys >= 8192;
  const int cap = bulk ? p.cand_cap - ring_keys : p.cand_cap;
  auto keep = [&](int pos, uint64_t key) {
    if (pos < cap) cand[pos] = key;
  };
  int got;
  if (bulk) {
    got = gather_bulk(gsrc, est, s, L.region + size_t(cap) * 8, bars, keep);
  } else if (p.warp_gather && fast_test_ok(c, est)) {
    got = gather_warps<4, false, 0, true>(gsrc, est, s, cand, cap);
    if (got > cap) got = gather_wide<4>(gsrc, est, s, keep);  // a warp's share overflowed (skewed row)
  } else {
    got = gather_wide<4>(gsrc, est, s, keep);
  }
  STK_STAMP(3);
  cluster_exchange(cl, got <= cap ? got : -1, xslot[1], s);
  STK_STAMP(4);
  // the top k are among the candidates iff none was dropped and >= k exist
  const bool ok = s.count >= p.k;
  __syncthreads();
  if (ok)
    select_write(CandSrc{cand, got}, false, 0);
  else
    select_write(gsrc, false, 0);
  STK_STAMP(6);
}

}  // namespace stk_nv
