"""``sparsetopk bench`` and ``sparsetopk tune`` (the core CLI dispatches here).

Files, by what they hold:

- :mod:`.scenarios`  the cells (serving-shaped calls) and the grids
- :mod:`.data`       input buffers: distributions, rotating views past L2, byte floors
- :mod:`.timing`     CUDA-graph / eager / CPU timers and the copy-bandwidth probe
- :mod:`.baselines`  torch.topk, FlashInfer and vLLM kernels timed beside the backends
- :mod:`.runner`     runs cells: every serving backend, the pick, speedups, regret
- :mod:`.report`     run metadata and the results JSON
- :mod:`.tables`     terminal lines and the Markdown of BENCHMARKS.md
- :mod:`.plots`      PNG plots (matplotlib, optional)
- :mod:`.tune`       timed cells -> tuning table (format v1)
- :mod:`.cli`        argument parsing and the two commands

Nothing here is imported by ``import sparsetopk``.
"""

from __future__ import annotations

from typing import List, Optional


def bench_main(argv: Optional[List[str]] = None) -> int:
    from .cli import bench_main as _main

    return _main(argv)


def tune_main(argv: Optional[List[str]] = None) -> int:
    from .cli import tune_main as _main

    return _main(argv)


__all__ = ["bench_main", "tune_main"]
