"""The main job in miniature: select on a realistic batch, check it, time it.

Runs on whatever device is present (CPU included): a decode batch of MiniMax
block top-16 rows and DSA top-2048 rows with per-row lengths and dirty tails,
checks the registry's pick against the reference backend, and prints a small
table beside torch.topk. `sparsetopk bench` is the full benchmark.
"""

from __future__ import annotations

import statistics
import time

import torch

import sparsetopk
from sparsetopk import registry
from sparsetopk.validation import make_topk_call


def _time_us(fn, device, reps):
    for _ in range(3):
        fn()
    samples = []
    for _ in range(reps):
        if device.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            samples.append(a.elapsed_time(b) * 1e3)
        else:
            t = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t) * 1e6)
    return statistics.median(samples)


def main() -> None:
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gpu = dev.type == "cuda"
    reps = 50 if gpu else 5
    cases = [
        ("block top-16 decode", 64, 1344, 16, "rank"),
        ("block top-16 batch", 512 if gpu else 128, 4096, 16, "rank"),
        ("DSA top-2048 decode", 4, 40960 if gpu else 16384, 2048, "any"),
    ]
    print(f"device: {dev} ({registry.device_name(dev)}), torch {torch.__version__}")
    print(f"{'case':22s} {'shape':>12s} {'k':>5s} {'backend':>16s} {'us':>10s} {'torch.topk us':>14s} {'speedup':>8s}  exact")
    g = torch.Generator(device="cpu").manual_seed(0)
    for label, rows, width, k, order in cases:
        scores = torch.randn(rows, width, generator=g).to(dev)
        lengths = torch.randint(width // 2, width + 1, (rows,), generator=g).to(dev, torch.int32)
        # Dirty tails: whatever sits past a row's length must never be picked.
        cols = torch.arange(width, device=dev)
        scores[cols.unsqueeze(0) >= lengths.unsqueeze(1)] = float("nan")
        pick = registry.select(make_topk_call(scores, k, lengths=lengths, order=order))
        ours = sparsetopk.topk(scores, k, lengths=lengths, order=order, return_values=True)
        ref = sparsetopk.topk(scores, k, lengths=lengths, order=order, return_values=True, backend="reference")
        if order == "any":
            exact = torch.equal(ours.indices.sort(1).values, ref.indices.sort(1).values)
        else:
            exact = torch.equal(ours.indices, ref.indices) and torch.equal(ours.values, ref.values)
        t_ours = _time_us(lambda s=scores, n=lengths, k=k, o=order: sparsetopk.topk(s, k, lengths=n, order=o), dev, reps)
        masked = torch.where(cols.unsqueeze(0) < lengths.unsqueeze(1), scores, float("-inf"))
        t_torch = _time_us(lambda m=masked, k=k: torch.topk(m, k, dim=1), dev, reps)
        print(
            f"{label:22s} {rows:>5d}x{width:<6d} {k:>5d} {pick.name:>16s} {t_ours:10.1f} {t_torch:14.1f} "
            f"{t_torch / t_ours:7.2f}x  {'yes' if exact else 'NO'}"
        )
        if not exact:
            raise SystemExit(f"{label}: {pick.name} disagrees with the reference backend")
    print("\n(eager timings, median; `sparsetopk bench` measures with CUDA-graph replay over rotating buffers)")


if __name__ == "__main__":
    main()
