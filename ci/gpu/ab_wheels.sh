#!/usr/bin/env bash
# A/B of nvidia-sm100 builds in one device call: each wheel directory is
# installed in turn (pip --force-reinstall --no-deps) and timed by
# ci/gpu/ab_long.py on the same cells, the order repeated (A B A B ...) so
# that drift hits every build alike. H200s lent on different days differ by a
# few percent, so builds are compared only inside one call.
#
#   AB_WHEELS="base=.gpu/wheels/base new=.gpu/wheels/new" bash ci/gpu/ab_wheels.sh
#
# Wheels are built on the CPU machine and carried (notes/nvidia-sm100.md,
# "Build"). The core package must be installed first (run_all.sh install).
# Knobs: AB_ROUNDS (default 2), AB_SETS (default "long dsa prefill": long =
# ab_long.py's AB_CELLS, default 16 x 1M and 64 x 1M; dsa = the bench's DSA
# decode cells with MTP; prefill = its prefill cells; decode / anchor = its
# k = 16 decode grid / anchor cells, in AB_DTYPE; warp = the warp kernel's
# bf16 decode cells and fp32 k = 16 anchors; smallk = full rows at k in AB_KS,
# default 16 32 64, fp32 and bf16; sweep = ci/gpu/k_sweep.py with its
# SWEEP_* knobs), AB_PATHS
# (SPARSETOPK_NV_PATH values timed side by side, default auto).
set -u
cd "$(dirname "$0")/../.."
PY=${PY:-python}
rounds=${AB_ROUNDS:-2}
sets=${AB_SETS:-long dsa prefill}
paths=${AB_PATHS:-auto}
for ((i = 1; i <= rounds; i++)); do
  for spec in ${AB_WHEELS:?set AB_WHEELS=\"name=dir ...\"}; do
    name=${spec%%=*}
    dir=${spec#*=}
    if ! $PY -m pip install -q --no-deps --force-reinstall "$dir"/*.whl > /dev/null 2>&1; then
      echo "$name: install of $dir failed"
      continue
    fi
    [ "$i" = 1 ] && $PY -c "import hashlib, sparsetopk_nvidia_sm100._C as c; print('$name: _C sha256', hashlib.sha256(open(c.__file__, 'rb').read()).hexdigest()[:16])"
    for set in $sets; do
      case $set in
        long) AB_LABEL=$name AB_REPEATS=1 AB_CELLS=${AB_CELLS:-16x1048576,64x1048576} timeout 200 $PY ci/gpu/ab_long.py $paths ;;
        dsa) AB_LABEL=$name AB_REPEATS=1 AB_BENCH=dsa-decode:req+mtp1 timeout 200 $PY ci/gpu/ab_long.py $paths ;;
        prefill) AB_LABEL=$name AB_REPEATS=1 AB_BENCH=prefill timeout 300 $PY ci/gpu/ab_long.py $paths ;;
        decode) AB_LABEL=$name AB_REPEATS=1 AB_BENCH=decode timeout 200 $PY ci/gpu/ab_long.py $paths ;;
        anchor) AB_LABEL=$name AB_REPEATS=1 AB_BENCH=anchor timeout 200 $PY ci/gpu/ab_long.py $paths ;;
        warp)  # the warp kernel's cells: bf16 decode, then the fp32 anchors it serves
          AB_LABEL=$name AB_REPEATS=1 AB_DTYPE=bfloat16 AB_BENCH="decode:16384|4096x|512x1344" timeout 100 $PY ci/gpu/ab_long.py $paths
          AB_LABEL=$name AB_REPEATS=1 AB_DTYPE=float32 AB_BENCH="anchor:512x1344|4096x4096|16384x8192" timeout 60 $PY ci/gpu/ab_long.py $paths ;;
        smallk)  # the warp kernel above k = 16: full rows, fp32 and bf16, k in AB_KS
          for K in ${AB_KS:-16 32 64}; do
            for dt in float32 bfloat16; do
              AB_LABEL=$name AB_REPEATS=1 AB_FULL=1 AB_K=$K AB_DTYPE=$dt \
                AB_CELLS=${AB_SK_CELLS:-512x1344,4096x4096,16384x8192} timeout 100 $PY ci/gpu/ab_long.py $paths
            done
          done ;;
        sweep)  # ci/gpu/k_sweep.py's table (its SWEEP_* knobs; torch.topk off unless SWEEP_TORCH=1)
          SWEEP_TORCH=${SWEEP_TORCH:-0} timeout 200 $PY ci/gpu/k_sweep.py | sed "s/^| /| $name | /" ;;
        *) echo "unknown set $set (long, dsa, prefill, decode, anchor, warp, smallk, sweep)" ;;
      esac 2>&1 | grep "^|"
    done
  done
done
