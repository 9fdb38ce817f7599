"""How the sampled-rows kernel's time follows its waves: causal prefill rows
(the last `rows` positions of a 128K sequence, k = 2048, any, fp32 N(0,1)),
rows swept around multiples of the resident blocks (3 per SM). Time per row
flat in rows: no tail cost; time stepping with ceil(rows / slots): the last,
partial wave runs the GPU part-empty. Same timer as the bench (graph replay
over rotating buffers past L2, median per call).

    PW_ROWS=3960,3961,4096,4224,4356 python ci/gpu/prefill_waves.py
"""
import os

import torch

import sparsetopk
from sparsetopk.bench.timing import time_cuda

K1 = 1024
seq = int(os.environ.get("PW_SEQ", str(128 * K1)))
k = int(os.environ.get("PW_K", "2048"))
dev = torch.device("cuda")
sms = torch.cuda.get_device_properties(0).multi_processor_count
slots = 3 * sms
rows_list = [int(r) for r in os.environ.get("PW_ROWS", f"{10 * slots},{10 * slots + 1},4096,{11 * slots}").split(",")]
g = torch.Generator(device=dev).manual_seed(0)
print(f"| rows | waves ({slots} slots) | us | ns per row | floor us at 4.25 TB/s |")
print("|---|---|---|---|---|")
for rows in rows_list:
    views = 2
    x = torch.randn(views * rows, seq, generator=g, device=dev)
    lengths = torch.arange(seq - rows + 1, seq + 1, dtype=torch.int32, device=dev)
    out = (torch.empty(rows, k, dtype=torch.int32, device=dev), None)

    def fn(i, x=x, rows=rows, lengths=lengths, out=out):
        v = i % views
        return sparsetopk.topk(x[v * rows:(v + 1) * rows], k, lengths=lengths, order="any",
                               backend="nvidia-sm100", out=out)

    us = min(time_cuda(fn, views, 4, target_s=0.3, eager=False)["us"] for _ in range(2))
    floor = float(lengths.sum()) * 4 / 4.25e12 * 1e6
    print(f"| {rows} | {rows / slots:.2f} | {us:.1f} | {us * 1e3 / rows:.1f} | {floor:.0f} |", flush=True)
    x = None
    torch.cuda.empty_cache()
