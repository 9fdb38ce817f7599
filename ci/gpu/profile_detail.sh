#!/usr/bin/env bash
# Where the nvidia-sm100 kernels spend their issue slots and stalls (ncu), and the
# cluster kernel's phase times, for a few anchor shapes. Run after installing the
# package (ci/gpu/run_all.sh install). Output under ${OUT:-.gpu/out}/prof.
#   bash ci/gpu/profile_detail.sh
#   PROF_STAGES=split bash ci/gpu/profile_detail.sh     (the balanced split only)
# Stages (PROF_STAGES, default "stalls sass stamps"): stalls / sass of the warp and
# cluster kernels, the cluster kernel's stamps; split: stall reasons of the
# balanced split's three kernels at 16 x 1M and the per-SASS-line counters of
# each (ranked by ci/gpu/sass_top.py); prefill: the same for the sampled-rows
# kernel on the prefill causal cell (PROF_DTYPES, default fp32 and bf16); warp16:
# stall reasons and per-SASS-line counters of the warp kernel at 16384 x 8192
# k = 16 in PROF_DTYPES (the bf16 decode cell that is short of fp32's bytes/s);
# rows: the same for the one-block rows kernel at 4096 x 4096, k in PROF_KS
# (default 128 1024), order any.
set -u
cd "$(dirname "$0")/../.."
P=${OUT:-$PWD/.gpu/out}/prof; mkdir -p "$P"
PY=${PY:-python}
STALLS=$(for s in barrier long_scoreboard short_scoreboard mio_throttle lg_throttle wait math_pipe_throttle \
  not_selected selected no_instruction membar dispatch_stall branch_resolving drain sleeping imc_miss tex_throttle; do
  printf "smsp__average_warps_issue_stalled_%s_per_issue_active.ratio," $s; done)
M="${STALLS}smsp__inst_executed.sum,gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed"
stages=${PROF_STAGES:-stalls sass stamps}
has() { [[ " $stages " == *" $1 "* ]]; }
if has stalls; then  # stall reasons: the warp kernel (4096x4096) and the cluster kernel (64x1M, 16x1M)
  timeout ${PROF_T:-120} ncu --metrics "$M" -k regex:"topk_(warp|cluster)" -c 3 \
    $PY ci/gpu/profile_kernels.py 4096x4096 64x1048576 > "$P/stalls.txt" 2>&1
  echo "stalls rc=$?"
fi
if has sass; then  # executed instructions per SASS line of the warp kernel (4096x4096)
  timeout ${PROF_T:-120} ncu --section SourceCounters --import-source no --page source --print-source sass --csv \
    -k regex:topk_warp -c 1 $PY ci/gpu/profile_kernels.py 4096x4096 > "$P/warp_sass.csv" 2>&1
  echo "sass rc=$?"
fi
if has stamps; then
  for path in stamps stamps,bulk; do
    SPARSETOPK_NV_PATH=$path timeout 60 $PY ci/gpu/cluster_stamps.py > "$P/stamps-${path/,/_}.txt" 2>&1
    echo "== $path"; cat "$P/stamps-${path/,/_}.txt"
  done
fi
if has prefill; then  # stall reasons and per-SASS-line counters of the sampled-rows kernel (prefill causal)
  for dt in ${PROF_DTYPES:-float32 bfloat16}; do
    PROF_DTYPE=$dt timeout ${PROF_T:-120} ncu --metrics "$M,smsp__issue_active.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active" -k regex:sampled_rows -c 1 \
      $PY ci/gpu/prefill_profile.py > "$P/prefill_stalls_$dt.txt" 2>&1
    echo "prefill stalls $dt rc=$?"
    PROF_DTYPE=$dt timeout ${PROF_T:-120} ncu --section SourceCounters --import-source no --page source --print-source sass \
      --csv -k regex:sampled_rows -c 1 $PY ci/gpu/prefill_profile.py > "$P/prefill_sass_$dt.csv" 2>&1
    echo "prefill sass $dt rc=$?"
  done
fi
if has split; then
  timeout ${PROF_T:-120} ncu --metrics "$M" -k regex:"split_(sample|items|final)" -c 3 \
    $PY ci/gpu/profile_kernels.py 16x1048576 > "$P/split_stalls.txt" 2>&1
  echo "split stalls rc=$?"
  # sampling every 2^(5 + PROF_SI) cycles (ncu's auto gave ~150 samples for
  # these ~25K-cycle kernels: too few to rank lines)
  for kern in split_sample split_items split_final; do
    timeout ${PROF_T:-120} ncu --section SourceCounters --warp-sampling-interval ${PROF_SI:-0} --import-source no \
      --page source --print-source sass --csv -k regex:$kern -c 1 $PY ci/gpu/profile_kernels.py 16x1048576 \
      > "$P/${kern}_sass.csv" 2>&1
    echo "== $kern (rc=$?)"
    $PY ci/gpu/sass_top.py "$P/${kern}_sass.csv" 25
  done
fi
if has warp16; then
  for dt in ${PROF_DTYPES:-float32 bfloat16}; do
    PROF_DTYPE=$dt timeout ${PROF_T:-120} ncu --metrics "$M,smsp__issue_active.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active" \
      -k regex:topk_warp -c 1 $PY ci/gpu/profile_kernels.py 16384x8192 > "$P/warp16_stalls_$dt.txt" 2>&1
    echo "warp16 stalls $dt rc=$?"
    PROF_DTYPE=$dt timeout ${PROF_T:-120} ncu --section SourceCounters --import-source no --page source --print-source sass \
      --csv -k regex:topk_warp -c 1 $PY ci/gpu/profile_kernels.py 16384x8192 > "$P/warp16_sass_$dt.csv" 2>&1
    echo "== warp16 sass $dt (rc=$?)"
    $PY ci/gpu/sass_top.py "$P/warp16_sass_$dt.csv" 30
  done
fi
if has rows; then
  for k in ${PROF_KS:-128 1024}; do
    PROF_K=$k PROF_ORDER=any timeout ${PROF_T:-120} ncu --metrics "$M,smsp__issue_active.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__occupancy_limit_shared_mem,launch__registers_per_thread" \
      -k regex:topk_rows -c 1 $PY ci/gpu/profile_kernels.py 4096x4096 > "$P/rows_stalls_$k.txt" 2>&1
    echo "rows stalls k=$k rc=$?"
    PROF_K=$k PROF_ORDER=any timeout ${PROF_T:-120} ncu --section SourceCounters --import-source no --page source --print-source sass \
      --csv -k regex:topk_rows -c 1 $PY ci/gpu/profile_kernels.py 4096x4096 > "$P/rows_sass_$k.csv" 2>&1
    echo "== rows sass k=$k (rc=$?)"
    $PY ci/gpu/sass_top.py "$P/rows_sass_$k.csv" 25
  done
fi
