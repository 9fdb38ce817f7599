"""Backend discovery and selection (SPEC §5).

Backends are found through the entry-point group ``sparsetopk.backends``
(installing a vendor package is enough; uninstalling removes it). Each is
probed once, cheaply, and the result cached. For a call the registry takes
the backends that are available and serve it, and orders them by measured
time from a tuning table for this device and shape bucket (see
:mod:`sparsetopk.tuning`), then by declared priority. A named backend
(argument or ``SPARSETOPK_BACKEND``) is used as is or refused with a
``ValueError``: never a silent fallback.

Selection never measures anything, so it is safe during CUDA-graph capture;
its result is cached per call shape, so the hot path is a dict lookup.
"""

from __future__ import annotations

import os
import threading
from importlib import metadata
from typing import Dict, List, Optional

import torch

from . import tuning
from .protocol import Availability, Backend, Call

GROUP = "sparsetopk.backends"
ENV_BACKEND = "SPARSETOPK_BACKEND"

_lock = threading.Lock()
_backends: Optional[Dict[str, Backend]] = None
_load_errors: Dict[str, str] = {}
_avail: Dict[str, Availability] = {}
_choice: Dict[tuple, Backend] = {}
_tables: Dict[str, list] = {}
_device_names: Dict[torch.device, str] = {}


def reset() -> None:
    """Forget every cache: discovery, probes, choices and tuning tables."""
    global _backends
    with _lock:
        _backends = None
        _load_errors.clear()
        _avail.clear()
        _choice.clear()
        _tables.clear()


def _discover() -> Dict[str, Backend]:
    found: Dict[str, Backend] = {}
    errors: Dict[str, str] = {}
    for ep in metadata.entry_points(group=GROUP):
        if ep.name in found:
            continue
        try:
            obj = ep.load()
            backend = obj() if isinstance(obj, type) or (callable(obj) and not isinstance(obj, Backend)) else obj
            found[getattr(backend, "name", ep.name)] = backend
        except Exception as exc:  # a broken package must not break the others
            errors[ep.name] = f"{type(exc).__name__}: {exc}"
    if "reference" not in found:  # running from a source tree without metadata
        from .reference import ReferenceBackend

        found["reference"] = ReferenceBackend()
    return dict(sorted(found.items())), errors


def backends() -> Dict[str, Backend]:
    """Every discovered backend, by name (loaded, not necessarily available)."""
    global _backends
    if _backends is None:
        with _lock:
            if _backends is None:
                found, errors = _discover()
                _load_errors.update(errors)
                _backends = found
    return _backends


def load_errors() -> Dict[str, str]:
    backends()
    return dict(_load_errors)


def register(backend: Backend) -> None:
    """Add a backend by hand (tests, or code that is not an installed package)."""
    backends()[backend.name] = backend
    _avail.pop(backend.name, None)
    _choice.clear()


def unregister(name: str) -> None:
    backends().pop(name, None)
    _avail.pop(name, None)
    _choice.clear()


def availability(name: str) -> Availability:
    if name not in _avail:
        b = backends().get(name)
        if b is None:
            return Availability(False, "not installed")
        try:
            res = b.probe()
            if not isinstance(res, Availability):
                res = Availability(bool(res), "" if res else "probe said no")
        except Exception as exc:
            res = Availability(False, f"probe failed: {type(exc).__name__}: {exc}")
        _avail[name] = res
    return _avail[name]


def device_name(device: torch.device) -> str:
    """Name that tuning tables are keyed by ('cpu' for the CPU)."""
    if device.type == "cpu":
        return "cpu"
    name = _device_names.get(device)
    if name is None:
        try:
            name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
        except Exception:
            name = device.type
        _device_names[device] = name
    return name


def _timings(call: Call) -> Dict[str, float]:
    dev = device_name(call.device)
    tables = _tables.get(dev)
    if tables is None:
        tables = _tables[dev] = tuning.tables_for_device(dev)
    if not tables:
        return {}
    versions = {n: getattr(b, "version", "") for n, b in backends().items()}
    base = (call.op, call.dtype, call.k, call.rows, call.width)
    for key in (tuning.bucket_key(*base, call.order), tuning.bucket_key(*base)):
        merged: Dict[str, float] = {}
        for t in tables:  # user cache first: its timings win
            for name, us in t.timings(key, versions).items():
                merged.setdefault(name, us)
        if merged:
            return merged
    return {}


def _serving(call: Call, include_interpreted: bool = False) -> List[Backend]:
    # An interpreted backend (Triton under TRITON_INTERPRET=1) is exact but
    # thousands of times slower: it serves only when named, never by default.
    out = []
    for name, b in backends().items():
        if getattr(b, "interpreted", False) and not include_interpreted:
            continue
        if availability(name) and b.supports(call) is None:
            out.append(b)
    return out


def candidates(call: Call, include_interpreted: bool = False) -> List[Backend]:
    """Available backends that serve ``call``, best first. Interpreted
    backends are left out unless asked for (they serve only when named)."""
    serving = _serving(call, include_interpreted)
    times = _timings(call)
    inf = float("inf")
    return sorted(serving, key=lambda b: (times.get(b.name, inf), -getattr(b, "priority", 0), b.name))


def _shape_key(call: Call) -> tuple:
    if call.op == "topk":
        extra = (
            call.starts is not None,
            type(call.lengths).__name__,
            call.index_scale,
            call.return_values,
        )
    else:
        extra = (call.indices.shape[1],)
    return (call.op, call.device, call.dtype, call.k, call.rows, call.width, call.order, call.tie_break) + extra


def select(call: Call, backend: Optional[str] = None) -> Backend:
    """The backend that runs ``call``. A named one is used or refused."""
    name = backend if backend is not None else os.environ.get(ENV_BACKEND) or None
    if name is not None:
        return _named(call, name, "backend" if backend is not None else ENV_BACKEND)
    key = _shape_key(call)
    chosen = _choice.get(key)
    if chosen is None:
        cands = candidates(call)
        if not cands:  # only when even the reference cannot run (a device it does not know)
            raise ValueError(f"no installed backend serves {call.op} on device {call.device} with dtype {call.dtype}, k={call.k}")
        chosen = _choice[key] = cands[0]
    return chosen


def _named(call: Call, name: str, source: str) -> Backend:
    if not isinstance(name, str):
        raise TypeError(f"{source} must be a backend name (str), got {type(name).__name__}")
    bs = backends()
    b = bs.get(name)
    if b is None:
        raise ValueError(f"{source}={name!r} is not an installed backend; installed: {', '.join(bs) or 'none'}")
    avail = availability(name)
    if not avail:
        raise ValueError(f"{source}={name!r} cannot run here: {avail.reason}")
    why = b.supports(call)
    if why is not None:
        raise ValueError(f"{source}={name!r} cannot serve this {call.op} call: {why}")
    return b
