// Host interface between the pybind11 module and the CUDA kernels. Plain
// integers and pointers only: no torch C++ ABI.
#pragma once
#include <stddef.h>
#include <stdint.h>

namespace stk_nv {

struct TopkParams {
  const void* scores;
  int64_t row_stride;  // elements
  int64_t width;
  int64_t rows;
  const void* lengths;
  int64_t len_stride;
  int64_t len_scalar;
  const void* starts;
  int64_t starts_stride;
  int64_t scale, offset, force_begin, force_end;
  int32_t* out_idx;
  float* out_val;  // may be null
  int64_t out_idx_stride, out_val_stride;
  int len_mode;     // 0 none, 1 int32 tensor, 2 int64 tensor, 3 Python int
  int starts_mode;  // 0 none, 1 int32, 2 int64
  int k, tie, order;
  int dtype;  // 0 fp32, 1 bf16, 2 fp16 (the plan's choices may differ by input type)
  // filled by plan_topk
  int res_cap, cand_cap, out_cap;
  int online;  // streamed rows: one-read online gather (else two-read multi-pass)
  int stamps;  // cluster kernel: record phase times (SPARSETOPK_NV_PATH=stamps; profiling only)
  int bulk;    // cluster kernel: streamed gather through TMA bulk copies (SPARSETOPK_NV_PATH=bulk)
  int legacy_gather;  // split gather: key-per-column compaction (SPARSETOPK_NV_PATH=legacy-gather)
  int warp_gather;    // cluster kernel: per-warp streamed gather (off: SPARSETOPK_NV_PATH=block-gather)
  int cluster_finish;  // cluster kernel: cluster_finish once the bin is small (off: SPARSETOPK_NV_PATH=no-finish)
  int cluster_mbar;    // cluster kernel: histogram exchange by st.async + mbarrier (off: SPARSETOPK_NV_PATH=find-barrier)
  int rank_spread;     // cluster kernel: rank order sorted by every block (off: SPARSETOPK_NV_PATH=rank-block0)
  int sample_runs;     // sampled-rows kernel: sample runs of 8 columns per thread, at most (1..4)
  int cluster_span;    // cluster kernel: sample runs in groups of this many adjacent ones (1: all apart)
  int stamp_block;     // stamps: the block whose phases are recorded (default 0)
  int sample_fixed;    // sampled-rows kernel: every row takes sample_runs runs (else one per started 64K columns, at most sample_runs)
  int sample_bins;     // sampled split / sampled rows: est by one binned pass first (sample_est_binned; off: SPARSETOPK_NV_PATH=sample22)
  int rows_bin;        // sampled rows: the k-th candidate from bins counted over the candidates (off: SPARSETOPK_NV_PATH=no-rbin)
  int rows_regions;    // sampled rows (rows_bin): the candidates read in the warps' regions, not packed (off: SPARSETOPK_NV_PATH=no-wreg)
  uint64_t* rows_est;  // sampled rows with Plan::est_kernel: a word per row from sampled_est_kernel (the workspace)
};

struct SplitWs {
  uint64_t* cand;   // [rows][chunks][seg]; balanced: [rows][region]
  uint32_t* hist;   // [rows][2048]
  void* state;      // [rows] SplitRowState
  int* counts;      // [rows][chunks]; balanced: [rows][items]
  int chunks;
  int seg;
  // balanced gather (split_items_kernel): row r is cut into
  // min(items, ceil(n_r / G)) chunks, taken in turn by `blocks` blocks; G
  // (>= grain) is worked out on the device from the call's lengths
  bool balanced;
  int items;
  int region;  // keys per row, split evenly over its chunks
  int blocks;
  int64_t grain;
  int64_t* grain_out;  // G, from the gather kernel to the final kernel
  bool early;  // row tables before the launch wait (split_items_kernel)
  int wchunks;  // balanced gather: chunks a warp, the chunk size's target (SPARSETOPK_NV_PATH=wchunks=N; default 1)
  bool chist;  // sampled split: the final kernel bins its candidates (SplitRowState::hsh)
  int l2pf;  // balanced gather: KB of its first chunk a warp prefetches into L2 before the launch wait (early only; SPARSETOPK_NV_PATH=l2pf=N, default 4)
};

struct Plan {
  bool split = false;
  int warp_wpb = 0;  // > 0: warp-per-row kernel (k <= 224), this many warps per block
  int warp_m = 1;    // running maxima per lane, over disjoint column shares (1: k <= 16, 2: k <= 32, 4: k <= 64, 8: k <= 224)
  int warp_wide = 0; // warp_m 8: 0 for k <= 128, the Wide kernels 1 for k = 129-160 and 2 for k = 161-224
  bool sampled = false;  // split: sample + gather + final (else hist + find + gather + final)
  bool sampled_rows = false;  // topk_sampled_rows_kernel (one 256-thread block per row)
  bool est_kernel = false;    // sampled rows: their estimates first, by sampled_est_kernel (workspace: 8 bytes a row)
  int cluster = 0;       // > 0: one cluster of this many blocks per row (topk_cluster_kernel)
  bool tile = false;     // topk_tile_kernel (rows of one tile, k <= 64) instead of topk_rows_kernel
  bool pdl = false;      // launch with programmatic dependent launch (SPARSETOPK_NV_PATH=no-pdl: off)
  int block = 256;
  int smem = 0;
  SplitWs ws{};
};

struct MergeParams {
  const int32_t* in_idx;
  const float* in_val;
  int64_t in_idx_stride, in_val_stride;  // per row (lists are contiguous within a row)
  int32_t* out_idx;
  float* out_val;
  int64_t out_idx_stride, out_val_stride;
  int64_t rows;
  int R, k_in, k, tie, order;
  int n_pad, out_cap;
};

Plan plan_topk(TopkParams& p, int dev);
size_t split_workspace_bytes(const TopkParams& p, const Plan& plan);
// the workspace a call of this plan needs (0: none) and binding it
size_t workspace_bytes(const TopkParams& p, const Plan& plan);
void bind_call_workspace(TopkParams& p, Plan& plan, void* ws);
// byte offsets of the split workspace's parts (bind_workspace's layout)
struct SplitWsOffsets {
  size_t cand, hist, state, grain, counts;
};
SplitWsOffsets split_ws_offsets(const TopkParams& p, const Plan& plan);
void bind_workspace(const TopkParams& p, Plan& plan, void* ws);
// SplitRowState's size and its fields' byte offsets (est / threshold prefix,
// mode, candidate-histogram shift, est's source), for tests that read a split call's
// workspace back
void split_row_state_layout(size_t* bytes, size_t* prefix, size_t* mode, size_t* hsh, size_t* how);
void launch_topk(TopkParams p, const Plan& plan, int dtype, int dev, uintptr_t stream);
void launch_merge(MergeParams p, int dev, uintptr_t stream);
int merge_max_candidates();
void cluster_stamps(unsigned long long* out32);

}  // namespace stk_nv
