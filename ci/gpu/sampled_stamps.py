"""Phase times, in SM clock cycles, of the nvidia-sm100 sampled-rows kernel on the
prefill cells (block 0 = row 0, which runs in the first wave beside the others;
STK_CLOCK slots of _C.cluster_stamps()): where one row's time goes.

    python ci/gpu/sampled_stamps.py          (sets SPARSETOPK_NV_PATH=sampled-rows=3,stamps)
"""

import os

os.environ["SPARSETOPK_NV_PATH"] = os.environ.get("SPARSETOPK_NV_PATH", "sampled-rows=3,stamps")

import torch  # noqa: E402

import sparsetopk  # noqa: E402
from sparsetopk.bench import data, scenarios  # noqa: E402
from sparsetopk_nvidia_sm100._backend import _ext  # noqa: E402

C = _ext()
NAMES = ["sample load", "sample select", "gather", "select", "finish"]
dev = torch.device("cuda")
for cell in scenarios.full_grid():
    if cell.scenario != "prefill" or (cell.dtype, cell.dist) != ("float32", "normal"):
        continue
    inp = data.build_inputs(cell, 1, dev)
    v = inp.views[0]
    for _ in range(3):
        sparsetopk.topk(v["scores"], cell.k, lengths=v["lengths"], starts=v["starts"], order=cell.order,
                        backend="nvidia-sm100")
    torch.cuda.synchronize()
    t = [int(x) for x in C.cluster_stamps()]
    c = t[16:22]
    parts = ", ".join(f"{NAMES[i]} {c[i + 1] - c[i]}" for i in range(5) if c[i + 1] >= c[i] > 0)
    print(f"{cell.label} (env {os.environ['SPARSETOPK_NV_PATH']}): row 0 n={t[29]}, {c[5] - c[0]} cycles | {parts} "
          f"| candidates {t[30]}", flush=True)
    inp = v = None
    torch.cuda.empty_cache()
