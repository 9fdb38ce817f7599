"""Run metadata (device, versions, date, command) and the results JSON."""

from __future__ import annotations

import datetime as _dt
import json
import platform
import shlex
import sys
from importlib import metadata
from pathlib import Path
from typing import List, Optional

import torch

from .. import tuning
from . import baselines as bl

FORMAT = "sparsetopk-bench"
FORMAT_VERSION = 1


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def command_line(prog: str, argv: List[str]) -> str:
    return " ".join([prog] + [shlex.quote(a) for a in argv])


def _dist_version(name: str) -> Optional[str]:
    try:
        return metadata.version(name)
    except Exception:
        return None


def device_info(device: torch.device) -> dict:
    from .. import registry

    d = {"type": device.type, "name": registry.device_name(device)}
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        d.update({
            "capability": f"{p.major}.{p.minor}",
            "sms": p.multi_processor_count,
            "memory_bytes": int(p.total_memory),
            "l2_bytes": l2_bytes(device),
        })
        if torch.version.hip:
            d["arch"] = getattr(p, "gcnArchName", None)
    else:
        d["cpu"] = platform.processor() or platform.machine()
        d["threads"] = torch.get_num_threads()
    return d


L2_UNKNOWN = 128 << 20  # assumed when torch does not report the L2 size (larger than any GPU's today)


def l2_bytes(device: torch.device) -> int:
    """The device's L2 size in bytes (torch.cuda.get_device_properties), 0 on the CPU."""
    if device.type != "cuda":
        return 0
    p = torch.cuda.get_device_properties(device)
    return int(getattr(p, "L2_cache_size", 0) or getattr(p, "l2_cache_size", 0) or 0) or L2_UNKNOWN


def versions() -> dict:
    from .. import __version__, registry

    v = {
        "sparsetopk": __version__,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": torch.version.hip,
        "triton": _dist_version("triton") or _dist_version("pytorch-triton-rocm"),
        "python": platform.python_version(),
        "numpy": _dist_version("numpy"),
    }
    v.update({k: x for k, x in bl.versions().items() if x})
    v["backends"] = {n: str(getattr(b, "version", "")) for n, b in registry.backends().items()}
    v["availability"] = {n: (registry.availability(n).ok, registry.availability(n).reason)
                         for n in registry.backends()}
    errs = registry.load_errors()
    if errs:
        v["backend_load_errors"] = errs
    return v


def host_info() -> dict:
    return {"platform": platform.platform(), "python": sys.version.split()[0]}


def write_json(doc: dict, path) -> Path:
    return tuning.write_json_atomic(doc, path, sort_keys=False, default=_default)


def _default(o):
    if isinstance(o, float):
        return None
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)


def load_json(path) -> dict:
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if doc.get("format") != FORMAT:
        raise ValueError(f"{path}: not a sparsetopk bench file (format={doc.get('format')!r})")
    return doc


def sanitize(x):
    """NaN/inf are not JSON: turn them into None."""
    if isinstance(x, float):
        return x if x == x and x not in (float("inf"), float("-inf")) else None
    if isinstance(x, dict):
        return {k: sanitize(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [sanitize(v) for v in x]
    return x
