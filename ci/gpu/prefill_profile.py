"""The prefill cells of the benchmark grid, run a few times for `ncu` (the
sampled-rows kernel on the bench's own inputs). PROF_DTYPE (default float32),
PROF_CELL (a label substring, default "causal").

    ncu -k regex:sampled_rows -c 1 --section SourceCounters ... python ci/gpu/prefill_profile.py
"""

import os

import torch

import sparsetopk
from sparsetopk.bench import data, scenarios

dev = torch.device("cuda")
want = os.environ.get("PROF_CELL", "causal")
dtype = os.environ.get("PROF_DTYPE", "float32")
for cell in scenarios.full_grid():
    if cell.scenario != "prefill" or (cell.dtype, cell.dist) != (dtype, "normal") or want not in cell.label:
        continue
    v = data.build_inputs(cell, 1, dev).views[0]
    for _ in range(int(os.environ.get("PROF_REPEATS", "2"))):
        sparsetopk.topk(v["scores"], cell.k, lengths=v["lengths"], starts=v["starts"], order=cell.order,
                        backend="nvidia-sm100")
    torch.cuda.synchronize()
    print(cell.label, "ran", flush=True)
