// pybind11 module: Python passes data pointers, sizes, strides and the raw
// CUDA stream handle as integers, so the binary has no torch C++ ABI.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <vector>

#include <stdexcept>

#include "launch.h"

namespace py = pybind11;
using namespace stk_nv;

static TopkParams make_params(uintptr_t scores, int64_t row_stride, int64_t rows, int64_t width, int k,
                              int len_mode, uintptr_t lengths, int64_t len_stride, int64_t len_scalar,
                              int starts_mode, uintptr_t starts, int64_t starts_stride, int64_t scale,
                              int64_t offset, int64_t force_begin, int64_t force_end, int tie, int order,
                              uintptr_t out_idx, int64_t out_idx_stride, uintptr_t out_val,
                              int64_t out_val_stride) {
  TopkParams p{};
  p.scores = reinterpret_cast<const void*>(scores);
  p.row_stride = row_stride;
  p.rows = rows;
  p.width = width;
  p.k = k;
  p.len_mode = len_mode;
  p.lengths = reinterpret_cast<const void*>(lengths);
  p.len_stride = len_stride;
  p.len_scalar = len_scalar;
  p.starts_mode = starts_mode;
  p.starts = reinterpret_cast<const void*>(starts);
  p.starts_stride = starts_stride;
  p.scale = scale;
  p.offset = offset;
  p.force_begin = force_begin;
  p.force_end = force_end;
  p.tie = tie;
  p.order = order;
  p.out_idx = reinterpret_cast<int32_t*>(out_idx);
  p.out_idx_stride = out_idx_stride;
  p.out_val = reinterpret_cast<float*>(out_val);
  p.out_val_stride = out_val_stride;
  return p;
}

// The parameters of a call of this shape (no data): what the plan and the
// workspace layout depend on, for the host-only queries below.
static TopkParams shape_params(int64_t rows, int64_t width, int k, int dtype) {
  TopkParams p{};
  p.rows = rows;
  p.width = width;
  p.k = k;
  p.dtype = dtype;
  return p;
}

PYBIND11_MODULE(_C, m) {
  m.doc() = "sparsetopk nvidia-sm100 CUDA kernels";
  m.def("cluster_stamps", []() {
    unsigned long long t[32];
    cluster_stamps(t);
    return std::vector<unsigned long long>(t, t + 32);
  }, "profiling: the cluster kernel's phase times (SPARSETOPK_NV_PATH=stamps), in ns; [31] = select passes");
  m.def(
      "workspace_bytes",
      [](int64_t rows, int64_t width, int k, int dev, int dtype) -> size_t {
        TopkParams p = shape_params(rows, width, k, dtype);
        Plan plan = plan_topk(p, dev);
        return workspace_bytes(p, plan);
      },
      py::arg("rows"), py::arg("width"), py::arg("k"), py::arg("device"), py::arg("dtype") = 0);
  m.def(
      "split_layout",
      [](int64_t rows, int64_t width, int k, int dev, int dtype) -> py::object {
        // Where a split call of this shape keeps each row's state, the chunk
        // size and the per-chunk candidate counts in its workspace (byte
        // offsets), so a test can read the estimate's outcome back. None off
        // the split. Host only: split_ws_offsets is bind_workspace's layout.
        TopkParams p = shape_params(rows, width, k, dtype);
        Plan plan = plan_topk(p, dev);
        if (!plan.split) return py::none();
        const SplitWsOffsets o = split_ws_offsets(p, plan);
        size_t sb = 0, so_prefix = 0, so_mode = 0, so_hsh = 0, so_how = 0;
        split_row_state_layout(&sb, &so_prefix, &so_mode, &so_hsh, &so_how);
        py::dict d;
        d["bytes"] = split_workspace_bytes(p, plan);
        d["cand"] = o.cand;
        d["state"] = o.state;
        d["state_bytes"] = sb;
        d["state_prefix"] = so_prefix;
        d["state_mode"] = so_mode;
        d["state_hsh"] = so_hsh;
        d["state_how"] = so_how;
        d["chist"] = plan.ws.chist;
        d["sbins"] = p.sample_bins != 0;
        d["counts"] = o.counts;
        d["grain"] = o.grain;
        d["balanced"] = plan.ws.balanced;
        d["sampled"] = plan.sampled;
        d["items"] = plan.ws.items;
        d["region"] = plan.ws.region;
        d["chunks"] = plan.ws.chunks;
        d["seg"] = plan.ws.seg;
        return d;
      },
      py::arg("rows"), py::arg("width"), py::arg("k"), py::arg("device"), py::arg("dtype") = 0);
  m.def(
      "plan",
      [](int64_t rows, int64_t width, int k, int dev, int dtype, bool starts) -> py::dict {
        TopkParams p = shape_params(rows, width, k, dtype);
        p.starts_mode = starts ? 1 : 0;
        Plan plan = plan_topk(p, dev);
        py::dict d;
        d["split"] = plan.split;
        d["warp_wpb"] = plan.warp_wpb;
        d["warp_m"] = plan.warp_m;
        d["warp_wide"] = plan.warp_wide;
        d["sampled"] = plan.sampled;
        d["sampled_rows"] = plan.sampled_rows;
        d["est_kernel"] = plan.est_kernel;
        d["cluster"] = plan.cluster;
        d["pdl"] = plan.pdl;
        d["tile"] = plan.tile;
        d["online"] = p.online != 0;
        d["block"] = plan.block;
        d["smem"] = plan.smem;
        d["chunks"] = plan.ws.chunks;
        d["seg"] = plan.ws.seg;
        d["balanced"] = plan.ws.balanced;
        d["items"] = plan.ws.items;
        d["grain"] = plan.ws.grain;
        d["gather_blocks"] = plan.ws.blocks;
        d["res_cap"] = p.res_cap;
        d["cand_cap"] = p.cand_cap;
        return d;
      },
      py::arg("rows"), py::arg("width"), py::arg("k"), py::arg("device"), py::arg("dtype") = 0,
      py::arg("starts") = false);
  m.def(
      "topk",
      [](uintptr_t scores, int dtype, int64_t row_stride, int64_t rows, int64_t width, int k, int len_mode,
         uintptr_t lengths, int64_t len_stride, int64_t len_scalar, int starts_mode, uintptr_t starts,
         int64_t starts_stride, int64_t scale, int64_t offset, int64_t force_begin, int64_t force_end,
         int tie, int order, uintptr_t out_idx, int64_t out_idx_stride, uintptr_t out_val,
         int64_t out_val_stride, uintptr_t workspace, size_t workspace_bytes, int dev, uintptr_t stream) {
        TopkParams p = make_params(scores, row_stride, rows, width, k, len_mode, lengths, len_stride, len_scalar,
                                   starts_mode, starts, starts_stride, scale, offset, force_begin, force_end,
                                   tie, order, out_idx, out_idx_stride, out_val, out_val_stride);
        if (k < 1 || k > 4096) throw std::invalid_argument("k must be in [1, 4096]");
        p.dtype = dtype;
        Plan plan = plan_topk(p, dev);
        const size_t need = stk_nv::workspace_bytes(p, plan);
        if (need > 0) {
          if (workspace == 0 || workspace_bytes < need) throw std::invalid_argument("workspace too small");
          bind_call_workspace(p, plan, reinterpret_cast<void*>(workspace));
        }
        launch_topk(p, plan, dtype, dev, stream);
      },
      py::arg("scores"), py::arg("dtype"), py::arg("row_stride"), py::arg("rows"), py::arg("width"),
      py::arg("k"), py::arg("len_mode"), py::arg("lengths"), py::arg("len_stride"), py::arg("len_scalar"),
      py::arg("starts_mode"), py::arg("starts"), py::arg("starts_stride"), py::arg("scale"),
      py::arg("offset"), py::arg("force_begin"), py::arg("force_end"), py::arg("tie"), py::arg("order"),
      py::arg("out_idx"), py::arg("out_idx_stride"), py::arg("out_val"), py::arg("out_val_stride"),
      py::arg("workspace"), py::arg("workspace_bytes"), py::arg("device"), py::arg("stream"));
  m.def(
      "merge",
      [](uintptr_t in_idx, int64_t in_idx_stride, uintptr_t in_val, int64_t in_val_stride, int64_t rows, int R,
         int k_in, int k, int tie, int order, uintptr_t out_idx, int64_t out_idx_stride, uintptr_t out_val,
         int64_t out_val_stride, int dev, uintptr_t stream) {
        MergeParams p{};
        p.in_idx = reinterpret_cast<const int32_t*>(in_idx);
        p.in_idx_stride = in_idx_stride;
        p.in_val = reinterpret_cast<const float*>(in_val);
        p.in_val_stride = in_val_stride;
        p.rows = rows;
        p.R = R;
        p.k_in = k_in;
        p.k = k;
        p.tie = tie;
        p.order = order;
        p.out_idx = reinterpret_cast<int32_t*>(out_idx);
        p.out_idx_stride = out_idx_stride;
        p.out_val = reinterpret_cast<float*>(out_val);
        p.out_val_stride = out_val_stride;
        if (k < 1 || k > 4096) throw std::invalid_argument("k must be in [1, 4096]");
        launch_merge(p, dev, stream);
      },
      py::arg("in_idx"), py::arg("in_idx_stride"), py::arg("in_val"), py::arg("in_val_stride"), py::arg("rows"),
      py::arg("R"), py::arg("k_in"), py::arg("k"), py::arg("tie"), py::arg("order"), py::arg("out_idx"),
      py::arg("out_idx_stride"), py::arg("out_val"), py::arg("out_val_stride"), py::arg("device"),
      py::arg("stream"));
  m.attr("MAX_K") = 4096;
  m.attr("MERGE_MAX_CANDIDATES") = merge_max_candidates();
}
