"""Phase times, in SM clock cycles, of the nvidia-sm100 sampled-rows kernel on the
prefill cells (STK_CLOCK slots of _C.cluster_stamps()): where one row's time goes.
STAMP_BLOCKS (default 0) lists the blocks (= rows) stamped: block 0 runs in the
first wave, beside the others; a late block (e.g. 3000) in the steady state.

    STAMP_BLOCKS=0,3000 python ci/gpu/sampled_stamps.py   (sets SPARSETOPK_NV_PATH=sampled-rows,stamps)
"""

import os

os.environ["SPARSETOPK_NV_PATH"] = os.environ.get("SPARSETOPK_NV_PATH", "sampled-rows,stamps")

import torch  # noqa: E402

import sparsetopk  # noqa: E402
from sparsetopk.bench import data, scenarios  # noqa: E402
from sparsetopk_nvidia_sm100._backend import _ext  # noqa: E402

C = _ext()
BASE = os.environ["SPARSETOPK_NV_PATH"]
NAMES = ["sample load", "sample select", "gather", "select", "finish"]
dev = torch.device("cuda")
for cell in scenarios.full_grid():
    if cell.scenario != "prefill" or (cell.dtype, cell.dist) != ("float32", "normal"):
        continue
    inp = data.build_inputs(cell, 1, dev)
    v = inp.views[0]
    for b in [int(x) for x in os.environ.get("STAMP_BLOCKS", "0").split(",")]:
        os.environ["SPARSETOPK_NV_PATH"] = f"{BASE},stampblock={b}"
        for _ in range(3):
            sparsetopk.topk(v["scores"], cell.k, lengths=v["lengths"], starts=v["starts"], order=cell.order,
                            backend="nvidia-sm100")
        torch.cuda.synchronize()
        t = [int(x) for x in C.cluster_stamps()]
        c = t[16:22]
        parts = ", ".join(f"{NAMES[i]} {c[i + 1] - c[i]}" for i in range(5) if c[i + 1] >= c[i] > 0)
        print(f"{cell.label} ({os.environ['SPARSETOPK_NV_PATH']}): row {b} n={t[29]}, {c[5] - c[0]} cycles "
              f"| {parts} | candidates {t[30]} | est from {['all', 'binned', 'radix'][t[28]]}", flush=True)
    inp = v = None
    torch.cuda.empty_cache()
