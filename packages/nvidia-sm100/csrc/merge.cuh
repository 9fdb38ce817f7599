// nvidia-sm100: merge of R candidate lists per row, block kernels (the
// bitonic-sort merge and the bucket merge; the warp merge is in
// topk_warp.cuh). Included by topk.cu after topk_rows.cuh.
#pragma once

namespace stk_nv {

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
