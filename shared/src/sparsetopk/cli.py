"""``sparsetopk`` command line: ``info``, ``bench``, ``tune``."""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

import torch

# Shapes people ask about: decode small-k, MiniMax block top-16, DSA top-2048.
TYPICAL = (
    ("decode k=16", 64, 1344, 16, "rank"),
    ("decode k=16, big batch", 4096, 4096, 16, "rank"),
    ("DSA decode k=2048", 4, 40960, 2048, "any"),
    ("DSA long k=2048", 16, 1 << 20, 2048, "any"),
    ("merge of 8 shards", 64, 8 * 16, 16, "rank"),
)


def _device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def info(argv: Optional[List[str]] = None) -> int:
    from . import __version__, registry
    from .protocol import MergeCall, TopKCall

    p = argparse.ArgumentParser(prog="sparsetopk info", description="List backends and what the registry picks.")
    p.add_argument("--device", default=None, help="device to evaluate picks on (default: cuda if present, else cpu)")
    args = p.parse_args(argv)
    dev = torch.device(args.device) if args.device else _device()
    print(f"sparsetopk {__version__}  torch {torch.__version__}  device {dev} ({registry.device_name(dev)})")
    print()
    print("backends:")
    for name, b in registry.backends().items():
        av = registry.availability(name)
        state = "available" if av else f"unavailable: {av.reason}"
        if av and getattr(b, "interpreted", False):
            state += " (interpreted: serves only when named)"
        print(f"  {name:18s} {getattr(b, 'version', '?'):10s} {state}")
        caps = getattr(b, "capabilities", None)
        if caps is not None:
            print(f"  {'':18s} serves: {caps.describe()}")
    for name, err in registry.load_errors().items():
        print(f"  {name:18s} {'?':10s} failed to load: {err}")
    print()
    print(f"picks on {dev}:")
    for label, rows, width, k, order in TYPICAL:
        if label.startswith("merge"):
            r = 8
            call = MergeCall(
                indices=torch.empty((rows, r, width // r), dtype=torch.int32, device="meta"),
                values=torch.empty((rows, r, width // r), dtype=torch.float32, device="meta"),
                k=k, tie_break="low", order=order,
            )
        else:
            call = TopKCall(
                scores=torch.empty((rows, width), dtype=torch.float32, device="meta"),
                k=k, lengths=None, starts=None, index_scale=1, index_offset=0, force_begin=0,
                force_end=0, tie_break="low", order=order, return_values=False,
            )
        # Ask with the real device: a meta tensor stands in for the data, so
        # nothing is allocated on the GPU just to answer.
        call = _on_device(call, dev)
        try:
            cands = [b.name for b in registry.candidates(call)]
            pick = cands[0] if cands else "none"
            rest = f" (then {', '.join(cands[1:])})" if len(cands) > 1 else ""
        except Exception as exc:  # pragma: no cover - informative only
            pick, rest = f"error: {exc}", ""
        print(f"  {label:24s} {rows}x{width} k={k} {order:5s} -> {pick}{rest}")
    return 0


class _DeviceView:
    """A call whose ``device`` reports ``dev`` while its tensors stay meta."""

    def __init__(self, call, dev):
        self._call, self.device = call, dev

    def __getattr__(self, name):
        return getattr(self._call, name)


def _on_device(call, dev):
    return _DeviceView(call, dev)


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmds = {"info": info}
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: sparsetopk {info,bench,tune} [options]\n")
        print("  info   list installed backends, whether they run here, and the registry's picks")
        print("  bench  time every backend beside torch.topk over serving-shaped scenarios")
        print("  tune   measure backends on this device and write the tuning cache")
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd in cmds:
        return cmds[cmd](rest)
    if cmd in ("bench", "tune"):
        from . import bench

        return (bench.bench_main if cmd == "bench" else bench.tune_main)(rest) or 0
    print(f"sparsetopk: unknown command {cmd!r} (expected info, bench or tune)", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
