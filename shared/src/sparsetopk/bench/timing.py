"""Timers: CUDA-graph replay, eager (CUDA events), CPU wall clock, copy bandwidth.

``fn(i)`` runs call number ``i`` (the caller maps it to input view
``i % n_views``). On CUDA:

- graph: ``calls`` back-to-back calls are captured in one CUDA graph; the
  graph is replayed ``reps`` times, each replay timed with events; the
  result is the median replay time / ``calls`` (per-call device time with
  no launch overhead, as a serving engine running graphs sees it);
- eager: the same ``calls`` calls launched from Python, timed with events
  around the loop; median over repeats / ``calls`` (includes host overhead
  whenever the host is slower than the device).

On the CPU: each call timed with ``time.perf_counter``; median of a few.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, Dict, Optional

import torch


def _median(xs):
    return float(statistics.median(xs)) if xs else float("nan")


def time_cpu(fn: Callable[[int], object], n_views: int, repeats: int = 5, warmup: int = 1) -> Dict:
    for i in range(warmup):
        fn(i % n_views)
    ts = []
    for i in range(repeats):
        t0 = time.perf_counter()
        fn(i % n_views)
        ts.append(time.perf_counter() - t0)
    us = _median(ts) * 1e6
    return {"us": us, "us_wall": us, "repeats": repeats, "timer": "wall"}


def _events_time(run: Callable[[], None]) -> float:
    """Milliseconds of device time for run(), bracketed by events on the current stream."""
    a = torch.cuda.Event(enable_timing=True)
    b = torch.cuda.Event(enable_timing=True)
    a.record()
    run()
    b.record()
    b.synchronize()
    return a.elapsed_time(b)


def time_cuda(fn: Callable[[int], object], n_views: int, calls: int, target_s: float = 0.2,
              min_reps: int = 3, max_reps: int = 50, graph: bool = True, eager: bool = True,
              max_graph_ms: float = 100.0) -> Dict:
    """Graph-replay and eager per-call microseconds (see module doc)."""
    res: Dict = {"timer": "cuda-graph"}
    # warm-up (JIT compilation, autotuning, lazy init), then one call timed alone
    for i in range(min(max(n_views, 1), 3)):
        fn(i)
    torch.cuda.synchronize()
    one_ms = _events_time(lambda: fn(0))
    if calls * one_ms > max_graph_ms and calls > 4:
        # a slow call: rotating past L2 cannot matter at this cost; keep a replay short
        calls = max(4, int(max_graph_ms / max(one_ms, 1e-3)))
    res["calls_per_graph"] = calls

    def loop():
        for i in range(calls):
            fn(i)

    if eager:  # secondary number: a third of the time budget
        first = _events_time(loop)  # one more warm pass, also sizes the repeat count
        reps = int(min(max_reps, max(min_reps, target_s * 1e3 / 3 / max(first, 1e-3))))
        ts = [_events_time(loop) for _ in range(reps)]
        res["us_eager"] = _median(ts) * 1e3 / calls
        res["eager_reps"] = reps
    if graph:
        g = None
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                fn(0)
            torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                loop()
            g.replay()
            torch.cuda.synchronize()
            first = _events_time(g.replay)
            reps = int(min(max_reps, max(min_reps, target_s * 1e3 / max(first, 1e-3))))
            ts = [_events_time(g.replay) for _ in range(reps)]
            res["us_graph"] = _median(ts) * 1e3 / calls
            res["graph_reps"] = reps
        except Exception as exc:  # not capturable: recorded, not fatal
            res["graph_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
            try:
                torch.cuda.synchronize()
            except Exception:
                pass
        finally:
            del g
    us = res.get("us_graph")
    if us is None:
        us = res.get("us_eager")
        res["timer"] = "cuda-eager"
    res["us"] = us
    return res


def copy_bandwidth(device: torch.device, nbytes: Optional[int] = None, repeats: int = 10) -> Dict:
    """Device-to-device copy bandwidth, counting bytes read + bytes written."""
    if device.type == "cuda":
        if nbytes is None:
            free, _ = torch.cuda.mem_get_info(device)
            nbytes = int(min(1 << 30, free // 8))
        n = max(1, nbytes // 4)
        src = torch.empty(n, dtype=torch.float32, device=device).uniform_()
        dst = torch.empty_like(src)
        for _ in range(3):
            dst.copy_(src)
        torch.cuda.synchronize()
        ts = [_events_time(lambda: dst.copy_(src)) for _ in range(repeats)]
        sec = _median(ts) / 1e3
        del src, dst
    else:
        nbytes = nbytes or (64 << 20)
        n = max(1, nbytes // 4)
        src = torch.rand(n)
        dst = torch.empty_like(src)
        dst.copy_(src)
        ts = []
        for _ in range(min(repeats, 5)):
            t0 = time.perf_counter()
            dst.copy_(src)
            ts.append(time.perf_counter() - t0)
        sec = _median(ts)
    moved = 2 * n * 4
    return {"bytes": moved, "seconds": sec, "bytes_per_s": moved / sec if sec > 0 else float("nan")}
