// nvidia-sm100: the extension's one translation unit. The row geometry every
// kernel starts from and the launch wait, then the kernel families (one
// header each), then the host side: device facts, the plan for a call,
// launches. See notes/nvidia-sm100.md.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
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
// The kernel families, one per header, in the order they build on each other.
#include "topk_warp.cuh"
#include "topk_rows.cuh"
#include "topk_split.cuh"
#include "merge.cuh"
#include "topk_cluster.cuh"
#include "topk_split_items.cuh"
#include "topk_sampled_rows.cuh"
#include "topk_sampled_est.cuh"
namespace stk_nv {

// ----------------------------------------------------------------------------
// Host side.

struct DevInfo {
  int sms = 0;
  int smem_optin = 0;
  int max_cluster = 8;  // largest cluster size with active[] > 0
  int active[17] = {};  // active[C]: clusters of C blocks resident at once (full smem), C = 1..16
  bool pdl = false;     // programmatic dependent launch (compute capability 9.0+)
  int items_bps = 1;    // split_items_kernel blocks resident per SM
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
    allow_smem(sampled_est_kernel<float>, lim);
    allow_smem(sampled_est_kernel<bf16_tag>, lim);
    allow_smem(sampled_est_kernel<f16_tag>, lim);
    // (split_sample_kernel uses static shared memory only)
    allow_smem(merge_kernel, lim);
    allow_smem(merge_bucket_kernel, lim);
    allow_cluster(topk_cluster_kernel<float>, lim);
    allow_cluster(topk_cluster_kernel<bf16_tag>, lim);
    allow_cluster(topk_cluster_kernel<f16_tag>, lim);
    {
      int b = 0;
      check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, split_items_kernel<bf16_tag, false>, kSplitWarps * 32, 0),
            "occupancy");
      d.items_bps = b > 0 ? b : 1;
    }
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
    else if (plan.warp_m == 2)
      go(topk_warp_kernel<T, 2>, blocks, 32 * plan.warp_wpb, 0, 0, p);
    else if (plan.warp_m == 4)
      go(topk_warp_kernel<T, 4>, blocks, 32 * plan.warp_wpb, 0, 0, p);
    else if (plan.warp_wide == 0)
      go(topk_warp_kernel<T, 8>, blocks, 32 * plan.warp_wpb, 0, 0, p);
    else if (plan.warp_wide == 1)
      go(topk_warp_kernel<T, 8, 1>, blocks, 32 * plan.warp_wpb, 0, 0, p);
    else
      go(topk_warp_kernel<T, 8, 2>, blocks, 32 * plan.warp_wpb, 0, 0, p);
  } else if (plan.sampled_rows) {
    if (plan.est_kernel)
      go(sampled_est_kernel<T>, dim3(unsigned((p.rows + kEstWarps - 1) / kEstWarps)), kEstBlock,
         size_t(kEstWarps) * kMaxBins * 4, 0, p);
    go(topk_sampled_rows_kernel<T>, per_row, plan.block, size_t(plan.smem), 0, p);
  } else if (plan.split && plan.sampled) {
    const SplitWs ws = plan.ws;
    const dim3 g2(ws.chunks, unsigned(p.rows));
    go(split_sample_kernel<T>, per_row, 1024, 0, 0, p, ws);
    if (ws.balanced)
      go(p.force_begin > 0 || p.force_end > 0 ? split_items_kernel<T, true> : split_items_kernel<T, false>,
         dim3(unsigned(ws.blocks)), kSplitWarps * 32, 0, 0, p, ws);
    else
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
//   warp          k <= 160 always takes the warp-per-row kernel
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
//   sruns=N       sampled rows: at most N sample runs of 8 columns per
//                 thread (1..4, default 2; one per started 64K columns)
//   sruns-fixed   sampled rows: every row takes N runs
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
//   balanced      the sampled split with the balanced gather, forced
//   no-balanced   the sampled split gathers in equal chunks per row
//                 (split_gather_kernel), and the plan keeps the cluster kernel
//   no-iearly     the balanced gather builds its row tables after its launch
//                 wait (default: before it, beside the sample kernel)
//   wchunks=N     the balanced gather cuts the call into about N chunks a
//                 warp (1..8, default 1)
//   l2pf=N        the balanced gather's warps prefetch the first N KB of
//                 their first chunk into L2 before the launch wait, while the
//                 sample kernel runs (0..256, default 4; 0: none)
//   no-chist      the sampled split's final kernel finds the k-th candidate
//                 by radix passes over the candidates (default: from counts
//                 of their bins taken while it copies them, cand_kth_binned)
//   sample22      the sampled split's and the sampled-rows kernel's samples
//                 find est by 11-bit radix passes (default: one pass of bins
//                 below the largest sample, sample_est_binned, the radix
//                 passes where it declines)
//   no-rbin       the sampled-rows kernel selects the k-th candidate by
//                 radix passes and writes by finish (default: from counts
//                 of the candidates' bins, cand_kth_binned, and finish_cand)
//   no-wreg       ... and packs the warps' candidate regions first (default:
//                 reads them in place, WarpRegions, finish_regions)
//   estk, no-estk sampled_est_kernel before the sampled-rows kernel always /
//                 never: rows of a one-run sample take their estimate from
//                 it (default: where the buffer is <= 64K wide or rows have
//                 starts; other rows sample in the sampled-rows kernel)
// Read on every plan (host only), so workspace_bytes and topk agree.
struct PathOpts {
  int split = -1;  // -1 auto, 0 never, 1 always
  bool legacy_split = false;
  bool stream_all = false;
  bool online = false;  // measured on the H200: 3036 us vs 2439 us two-read (causal 128K prefill)
  int warp = -1;  // -1 auto, 0 never, 1 always (k <= 160)
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
  int sample_runs = 2;    // sampled rows: sample runs of 8 columns per thread, at most
  bool sample_fixed = false;  // sampled rows: every row takes sample_runs runs
  bool cluster_span = true;
  int stamp_block = 0;
  bool pdl = true;
  bool tile = true;
  int balanced = -1;  // -1 auto, 0 never (chunked gather), 1 always (sampled split only)
  bool items_early = true;  // balanced gather: row tables before the launch wait
  int wchunks = 1;  // balanced gather: chunks a warp (the chunk size's target)
  int l2pf = 4;  // balanced gather: KB of a warp's first chunk prefetched into L2 before the launch wait
  bool chist = true;  // sampled split: the final kernel's k-th key from candidate bins
  bool sample_bins = true;  // sampled split / sampled rows: the sample's est by one binned pass first
  bool rows_bin = true;  // sampled rows: the k-th candidate from candidate bins, finish_cand
  bool rows_regions = true;  // sampled rows: the candidates read in place in the warps' regions (rows_bin)
  int est_kernel = -1;  // sampled rows: one-run rows' estimates by sampled_est_kernel first (-1 auto, 0 never, 1 always)
  int rows_block = 0;  // rows kernel: threads a block (0: chosen; tuning)
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
    else if (t == "sruns-fixed") o.sample_fixed = true;
    else if (t == "no-sampled-rows") o.sampled_rows = 0;
    else if (t == "no-cspan") o.cluster_span = false;
    else if (t == "no-pdl") o.pdl = false;
    else if (t == "no-tile") o.tile = false;
    else if (t == "balanced") o.balanced = o.split = 1;  // the balanced split, forced
    else if (t == "no-balanced") o.balanced = 0;
    else if (t == "no-iearly") o.items_early = false;
    else if (t == "no-chist") o.chist = false;
    else if (t == "sample22") o.sample_bins = false;
    else if (t == "no-rbin") o.rows_bin = false;
    else if (t == "no-wreg") o.rows_regions = false;
    else if (t == "estk") o.est_kernel = 1;
    else if (t == "no-estk") o.est_kernel = 0;
    else if (const int n = int_token(t, "stampblock", 1 << 30); n >= 0) o.stamp_block = n;
    else if (const int n = int_token(t, "wchunks", 8); n > 0) o.wchunks = n;
    else if (const int n = int_token(t, "l2pf", 256); n >= 0) o.l2pf = n;
    else if (const int n = int_token(t, "rblock", 1024); n >= 32 && n % 32 == 0) o.rows_block = n;
    else if (const int n = int_token(t, "cluster", 16); n > 0) {
      o.cluster = 1;
      o.cluster_n = n;
    }
    else if (!t.empty() && t != "auto")
      throw std::invalid_argument("SPARSETOPK_NV_PATH: unknown token '" + t +
                                  "' (accepted: auto, rows, split, legacy-split, stream, online, no-online, warp, block, legacy-merge, legacy-gather, block-gather, no-finish, find-barrier, rank-block0, cluster, cluster=N, sampled-rows, sruns=N, sruns-fixed, no-cspan, stampblock=N, no-pdl, no-tile, balanced, no-balanced, no-iearly, wchunks=N, l2pf=N, rblock=N, no-chist, sample22, no-rbin, no-wreg, estk, no-estk, no-sampled-rows, no-cluster, stamps, bulk)");
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
  p.sample_fixed = opt.sample_fixed ? 1 : 0;
  p.sample_bins = opt.sample_bins ? 1 : 0;
  p.rows_bin = opt.rows_bin ? 1 : 0;
  p.rows_regions = opt.rows_regions ? 1 : 0;
  p.cluster_span = opt.cluster_span ? 8 : 1;
  p.bulk = opt.bulk ? 1 : 0;
  p.legacy_gather = opt.legacy_gather ? 1 : 0;
  p.warp_gather = opt.warp_gather ? 1 : 0;
  p.cluster_finish = opt.cluster_finish ? 1 : 0;
  p.cluster_mbar = opt.cluster_mbar ? 1 : 0;
  p.rank_spread = opt.rank_spread ? 1 : 0;
  const int64_t budget = d.smem_optin - 4096;  // minus static shared memory
  // k <= 224: one warp per row (one read, no block syncs) unless a few very
  // long rows need more than one warp's bandwidth each
  // (measured on the H200: below ~SMs rows the one-block kernel is faster,
  // 4.98 vs 6.35 us at 64 x 1344; from 512 rows on the warp kernel wins).
  // k = 129-224 take the rows kernel only at 1025-2047 columns on few rows,
  // where it is faster on N(0,1) rows (not on band rows: 512 x 1344 k = 160
  // 18.0 vs 14.2 us): below 3 x SMs rows, at k <= 160 below 4 x SMs, at k =
  // 161-207 below 1536 columns and 6 x SMs rows. H100, ragged, rows vs warp
  // kernel, fp32, k = 129 / 160 / 176 / 193 / 208 / 224: 256 x 1344 9.2 /
  // 9.5 / 9.5 / 9.6 / 11.3 vs 12.5 / 14.2 / 14.7 / 15.1 / 15.4; 512 x 1344
  // 12.2 / 13.4 / 13.4 / 13.9 / 15.6 / 17.6 vs 12.4 / 14.3 / 15.1 / 15.5 /
  // 15.8 / 16.8; 512 x 1536 12.5 / 13.8 / 15.5 / 16.4 / 16.9 / 17.7 vs 12.9
  // / 14.8 / 15.2 / 15.6 / 16.0 / 17.0; 768 x 1344 18.0 / 18.9 / 19.2 / 20.0
  // / 22.1 vs 15.6 / 17.0 / 21.3 / 21.7 / 22.1; 1024 x 1344 21.2 / 22.7 /
  // 23.4 / 24.4 / 26.1 / 30.0 vs 19.1 / 20.2 / 21.6 / 22.1 / 22.4 / 23.0;
  // bf16 alike. Elsewhere the warp kernel wins: 512 x 672 / 1024 11.1-14.5
  // vs 11.7-17.0, 4096 x 1344 47.5-62.0 vs 70.4-96.2, 4096 x 4096 1.6x,
  // 16384 x 8192 2.2x
  const int64_t sms = d.sms;
  const bool mid = k > 128 && W > 1024 && W < 2048 &&
                   (p.rows < 3 * sms || (k <= 160 && p.rows < 4 * sms) ||
                    (k > 160 && k < 208 && W < 1536 && p.rows < 6 * sms));
  const bool warp = k <= kWarpMaxK && opt.warp != 0 &&
                    (opt.warp == 1 || (opt.cluster != 1 && !split && p.rows >= sms && !mid &&
                                       (W <= 16384 || p.rows >= 8 * sms)));
  if (warp) {
    p.res_cap = 0;
    // k at most half of the 32 warp_m lane maxima (5/8 at k = 129-160, 3/4
    // at k = 161-192, 7/8 at k = 193-224)
    plan.warp_m = k <= 16 ? 1 : (k <= 32 ? 2 : (k <= 64 ? 4 : 8));
    plan.warp_wide = k <= 128 ? 0 : (k <= 160 ? 1 : 2);
    p.cand_cap = warp_cap(plan.warp_m, plan.warp_wide);
    plan.warp_wpb = p.rows >= 8 * int64_t(d.sms) ? 4 : (p.rows >= 2 * int64_t(d.sms) ? 2 : 1);
    plan.warp_wpb = std::min(plan.warp_wpb, warp_max_wpb(plan.warp_m, plan.warp_wide));
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
    // Where only C <= 3 blocks per row fit (rows >= ~27 on an H200), the
    // balanced split (sample, warp chunks over the whole GPU, final) takes
    // over: measured (H200, graph replay, k = 2048, any; split vs cluster):
    // DSA decode, ragged 40K-1M contexts, 32 rows 63.6 vs 83.9 us, 64 rows
    // 74.4 vs 101.6; uniform 32 x 1M 85.2 vs 88.3, but 64 x 1M 136.4 vs
    // 122.9 (its rows give the cluster no idle blocks) and 16 x 1M (C = 6)
    // 62.1 vs 58.1. Serving batches are ragged; `no-balanced` keeps the
    // cluster kernel there. Since the final kernel's copy and select were
    // cut (seventeenth session: final ~23 -> ~14 us), the split also wins
    // on 8+ rows of 768K+ columns whatever C: 8 x 1M 40.1 vs 45.9 us (C =
    // 9), 16 x 1M 52.7 vs 58.8 (C = 6), DSA 4 requests + MTP (8 rows) 39.9
    // vs 42.4, 64 x 1M 123.1 vs 121.8; its ~30 us of fixed cost against the
    // cluster's ~11 put the crossover at ~780K columns for 8 and 16 uniform
    // rows (fit to those cells), and 2 rows stay far apart (DSA 1 request +
    // MTP 30.8 vs 22.3). 16-bit scores: only where C <= 3 (the cluster
    // kernel skips their shared low bits, so the long-row rule does not
    // hold for them). Since the gather's lean candidate path (twentieth
    // session; H200, same call, bf16, split vs cluster): DSA decode 32 rows
    // 44.3 vs 60.2 us (C = 3), 64 rows 53.7 vs 72.2 (C = 2), 8 rows 34.9 vs
    // 35.8 (C = 9, kept on the cluster); uniform 64 x 1M 90.9 vs 88.9 and
    // 16 x 1M 45.0 vs 43.2 (C = 6). Before it the split gained nothing on
    // ragged bf16 rows (32 rows 70.7 vs 70.0). Rechecked after the packed
    // 16-bit test (twenty-second session, bf16, split vs cluster): 8 x 1M
    // 35.3 vs 34.1 (C = 9), 16 x 1M 40.2 vs 38.7 (C = 6), 16 x 768K 38.6
    // vs 34.8, DSA 8 rows 32.8 vs 32.9: the rule stands.
    const bool balanced = opt.balanced != 0 && opt.cluster != 1 &&
                          (p.dtype == 0 ? (C <= 3 || max_n >= 786432) : C <= 3) && p.rows >= 8 &&
                          p.rows <= kSplitMaxRows;
    const bool pick = opt.cluster == 1 || p.rows < 8 || (C >= 2 && !balanced);
    if (opt.cluster_n > 0) C = opt.cluster_n;
    const int64_t region = (budget - int64_t(cluster_fixed_smem(p.out_cap, C))) / 16 * 16;
    if (pick && C <= d.max_cluster && region >= 8 * 8 * 1024) {
      // (below 2^16 each: cluster_find moves a block's bin counts as 16 bits)
      p.res_cap = std::min<int64_t>(region / 4 / 8 * 8, 65528);  // resident columns per block
      p.cand_cap = int(std::min<int64_t>(region / 8, 65535));    // candidates per block
      plan.cluster = C;
      plan.block = kClusterThreads;
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
    // balanced gather (topk_split_items.cuh): chunks of at least 2048
    // columns, as many per row as its own length needs (at most 512), over a
    // grid of the blocks that are resident at once; a row's region holds
    // 2 cand_cap keys (~6x the expected ~2.5 k candidates, spread evenly over
    // its chunks: at 512 chunks 64 each, ~10 expected)
    plan.ws.chist = plan.sampled && opt.chist;
    plan.ws.balanced = plan.sampled && opt.balanced != 0 && p.rows <= kSplitMaxRows;
    if (plan.ws.balanced) {
      plan.ws.items = kSplitMaxChunks;
      plan.ws.grain = 2048;
      plan.ws.region = 2 * p.cand_cap;
      plan.ws.blocks = int(std::min<int64_t>(int64_t(d.items_bps) * d.sms, p.rows * int64_t(plan.ws.items)));
      plan.ws.early = opt.items_early;
      plan.ws.wchunks = opt.wchunks;
      plan.ws.l2pf = opt.l2pf;
    }
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
    // (S = 2048 columns a started 64K, 4096 at most), which outgrows 2.75 k
    // for small k or rows past 256K.
    p.res_cap = 0;
    p.cand_cap = int(std::max<int64_t>(1024, (11 * int64_t(k) / 4 + 7) / 8 * 8));
    plan.sampled_rows = true;
    // sampled_est_kernel where rows are likely one-run samples (<= 64K
    // columns): the buffer is that narrow, or rows have starts (packed
    // sequences side by side). Measured on the H200 (4096 rows, k = 2048,
    // fp32): packed 64K+32K+16K+16K 432 -> 416 us, bf16 388 -> 363; but
    // causal 128K rows (none decided) 750 -> 762, and an empty kernel in its
    // place costs the same, so rows of unknown length over a wide buffer
    // sample in the sampled-rows kernel.
    plan.est_kernel = opt.est_kernel > 0 || (opt.est_kernel < 0 && (W <= 65536 || p.starts_mode != 0));
    p.sample_runs = opt.sample_runs;
    plan.block = kSampledRowsBlock;
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
    // enough threads that the rank sort of next_pow2(k) keys stays in
    // registers (write_ranked: 4 keys a thread), not the shared-memory
    // bitonic sort. Measured on the H200 (graph replay, fp32 N(0,1), k =
    // 2048, 256 vs 512 threads): 4096 x 4096 rank 609 vs 393 us, any 178 vs
    // 158; 512 x 4096 rank 83 vs 56, any 29 vs 26. (At k <= 1024, 256
    // threads stay faster: 4096 x 4096 any k = 1024 131 vs 150.)
    if (p.out_cap > 4 * plan.block) plan.block = int(std::min<int64_t>(1024, p.out_cap / 4));
    // k <= kBoundMaxK: one tile per row (resident_bounded), so as many whole
    // warps as the row has 8-column tiles, plus one for the alignment head
    const int64_t tiles = (W + kItems - 1) / kItems + 1;
    if (k <= kBoundMaxK && tiles <= 1024) {
      plan.block = int(std::max<int64_t>(128, (tiles + 31) / 32 * 32));
      // every row is one tile and resident: the tile kernel
      plan.tile = opt.tile && res >= (W + 7) / 8 * 8;
    }
    if (opt.rows_block > 0 && !plan.tile) plan.block = opt.rows_block;
  }
  return plan;
}

// keys and counts per row of the split workspace
static size_t split_cand_keys(const Plan& plan) {
  return plan.ws.balanced ? size_t(plan.ws.region) : size_t(plan.ws.chunks) * size_t(plan.ws.seg);
}
static size_t split_counts(const Plan& plan) {
  return plan.ws.balanced ? size_t(plan.ws.items) : size_t(plan.ws.chunks);
}

size_t split_workspace_bytes(const TopkParams& p, const Plan& plan) {
  const size_t rows = size_t(p.rows);
  return rows * kMaxBins * 4 + rows * sizeof(SplitRowState) + rows * split_counts(plan) * 4 +
         rows * split_cand_keys(plan) * 8 + 256;
}

SplitWsOffsets split_ws_offsets(const TopkParams& p, const Plan& plan) {
  const size_t rows = size_t(p.rows);
  SplitWsOffsets o{};
  size_t off = 0;
  o.cand = off;
  off += rows * split_cand_keys(plan) * 8;
  o.hist = off;
  off += rows * kMaxBins * 4;
  o.state = off;
  off += rows * sizeof(SplitRowState);
  o.grain = (off + 7) / 8 * 8;  // in the trailing 256 bytes
  o.counts = o.grain + 8;
  return o;
}

void bind_workspace(const TopkParams& p, Plan& plan, void* ws) {
  unsigned char* b = static_cast<unsigned char*>(ws);
  const SplitWsOffsets o = split_ws_offsets(p, plan);
  plan.ws.cand = reinterpret_cast<uint64_t*>(b + o.cand);
  plan.ws.hist = reinterpret_cast<uint32_t*>(b + o.hist);
  plan.ws.state = b + o.state;
  plan.ws.grain_out = reinterpret_cast<int64_t*>(b + o.grain);
  plan.ws.counts = reinterpret_cast<int*>(b + o.counts);
}

size_t workspace_bytes(const TopkParams& p, const Plan& plan) {
  if (plan.split) return split_workspace_bytes(p, plan);
  // (sampled rows: the estimate words whether or not est_kernel runs, since
  // the plan's choice also depends on starts, which the size query lacks)
  return plan.sampled_rows ? size_t(p.rows) * 8 : 0;
}

void bind_call_workspace(TopkParams& p, Plan& plan, void* ws) {
  if (plan.split) bind_workspace(p, plan, ws);
  if (plan.est_kernel) p.rows_est = static_cast<uint64_t*>(ws);
}

void split_row_state_layout(size_t* bytes, size_t* prefix, size_t* mode, size_t* hsh, size_t* how) {
  *bytes = sizeof(SplitRowState);
  *prefix = offsetof(SplitRowState, prefix);
  *mode = offsetof(SplitRowState, mode);
  *hsh = offsetof(SplitRowState, hsh);
  *how = offsetof(SplitRowState, how);
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
