# Installs (or stages on PYTHONPATH) the core and triton-portable on a GPU
# machine without network; sourced by ci/gpu/triton_suite.sh and
# packages/triton-portable/bench/gpu_run.sh from the repository root, with $L
# the install log. "python -m pip": a bare "pip" may belong to another interpreter.
python -c "import sparsetopk" 2>/dev/null || python -m pip install --no-build-isolation --no-deps -e shared >> "$L" 2>&1
python -c "import sparsetopk" 2>/dev/null || export PYTHONPATH="$PWD/shared/src${PYTHONPATH:+:$PYTHONPATH}"
python -m pip install --no-build-isolation --no-deps -e packages/triton-portable >> "$L" 2>&1 || { echo "pip install of triton-portable failed (staging instead):"; tail -3 "$L"; }
if ! python -c "import sparsetopk_triton" 2>/dev/null; then
  # stage the pure-Python package with its entry point on PYTHONPATH
  STAGE=/tmp/stk-triton-stage; D="$STAGE/sparsetopk_triton_portable-0.1.0.dist-info"; mkdir -p "$D"
  printf 'Metadata-Version: 2.1\nName: sparsetopk-triton-portable\nVersion: 0.1.0\n' > "$D/METADATA"
  printf '[sparsetopk.backends]\ntriton-portable = sparsetopk_triton:make_backend\n' > "$D/entry_points.txt"
  export PYTHONPATH="$PWD/packages/triton-portable/src:$STAGE${PYTHONPATH:+:$PYTHONPATH}"
  echo "staged on PYTHONPATH"
fi
python -c "import triton, torch, sparsetopk, sparsetopk_triton; print('triton', triton.__version__, 'torch', torch.__version__, 'module', sparsetopk_triton.__file__, 'backends', sorted(sparsetopk.registry.backends()))" 2>&1 | tail -3
