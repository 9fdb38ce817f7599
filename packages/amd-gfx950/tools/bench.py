"""Time the amd-gfx950 backend beside the reference backend and torch.topk
(CUDA events, median of repeats). On NVIDIA this times the portability build
(wave32, written for AMD): a sanity check of the design, not AMD numbers.

    SPARSETOPK_AMD_PORTABILITY=cuda python packages/amd-gfx950/tools/bench.py
"""

from __future__ import annotations

import statistics
import sys

import torch

import sparsetopk

CASES = [  # (name, rows, width, k, dtype)
    ("decode", 128, 65536, 64, torch.bfloat16),
    ("decode-narrow", 128, 65536, 64, torch.float32),
    ("decode-short", 1024, 4096, 16, torch.float32),
    ("decode-k1", 128, 131072, 1, torch.float32),
    ("decode-batch", 2048, 16384, 64, torch.bfloat16),
    ("dsa-prefill", 512, 32768, 2048, torch.bfloat16),
    ("dsa-prefill-narrow", 512, 32768, 2048, torch.float32),
    ("largek-4096", 64, 131072, 4096, torch.float32),
]


def timeit(fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1000.0)
    return statistics.median(ts)


def graph_time(fn, reps=20):
    """Kernel time without the Python launch path: replay a captured graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return timeit(g.replay, reps)


def main() -> int:
    torch.manual_seed(0)
    print(f"device: {torch.cuda.get_device_name()}")
    print(
        f"{'case':18s} {'rows':>5s} {'width':>7s} {'k':>5s} {'dtype':>9s} {'amd-gfx950 us':>14s} {'in graph us':>12s} {'tie=high us':>12s} {'reference us':>13s} {'torch.topk us':>14s}"
    )
    for name, rows, width, k, dt in CASES:
        if name.endswith("narrow"):
            s = (0.5 + torch.randint(0, 200, (rows, width), device="cuda").float() * 2.0**-20).to(dt)
        else:
            s = torch.randn(rows, width, device="cuda").to(dt)
        t_amd = timeit(lambda s=s, k=k: sparsetopk.topk(s, k, backend="amd-gfx950"))
        t_graph = graph_time(lambda s=s, k=k: sparsetopk.topk(s, k, backend="amd-gfx950"))
        t_high = timeit(lambda s=s, k=k: sparsetopk.topk(s, k, backend="amd-gfx950", tie_break="high"))
        t_ref = timeit(lambda s=s, k=k: sparsetopk.topk(s, k, backend="reference"), reps=5)
        t_torch = timeit(lambda s=s, k=k: torch.topk(s, k, dim=1))
        print(
            f"{name:18s} {rows:5d} {width:7d} {k:5d} {str(dt)[6:]:>9s} {t_amd:14.1f} {t_graph:12.1f} {t_high:12.1f} {t_ref:13.1f} {t_torch:14.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
