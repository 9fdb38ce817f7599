"""Shared pytest plumbing: backend selection for the conformance suite.

    pytest tests/conformance                      # every backend that can run here
    pytest tests/conformance --backend reference  # one backend (repeatable, or a comma list)

A test that takes the ``bk`` fixture runs once per selected backend, on the
device that backend runs on here: "cuda" when torch sees a GPU and the backend
declares "cuda", else "cpu" when it declares "cpu", else the test is skipped
with the reason.
"""

from __future__ import annotations

import dataclasses
import os
import sys

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
for _p in (_HERE, os.path.join(_HERE, "conformance")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

try:  # hypothesis is a test dependency; keep the oracle tests usable without it
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        "sparsetopk-ci",
        derandomize=True,  # stable CI: the same examples every run
        deadline=None,
        print_blob=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )
    settings.load_profile(os.environ.get("SPARSETOPK_HYPOTHESIS_PROFILE", "sparsetopk-ci"))
except ImportError:  # pragma: no cover
    pass


def pytest_addoption(parser):
    group = parser.getgroup("sparsetopk")
    group.addoption(
        "--backend",
        action="append",
        default=[],
        metavar="NAME",
        help="run the conformance suite against this backend (repeatable, or a comma list); "
        "default: every backend that can run on this machine",
    )


@dataclasses.dataclass(frozen=True)
class BackendUnderTest:
    name: str
    device: str  # "cpu" / "cuda"; "" when it cannot run here
    backend: object
    skip_reason: str = ""

    @property
    def interpreted(self) -> bool:
        return bool(getattr(self.backend, "interpreted", False))

    @property
    def capabilities(self):
        return self.backend.capabilities

    @property
    def is_cuda(self) -> bool:
        return self.device == "cuda"

    def __str__(self) -> str:
        return f"{self.name}-{self.device or 'none'}"


def _device_for(backend):
    """(device, reason) for a backend on this machine."""
    import torch

    types = tuple(getattr(backend.capabilities, "device_types", ()))
    if torch.cuda.is_available() and "cuda" in types:
        return "cuda", ""
    if "cpu" in types:
        return "cpu", ""
    have = "cuda and cpu" if torch.cuda.is_available() else "cpu only"
    return "", f"backend runs on {', '.join(types) or 'no device'}; this machine has {have}"


def _requested(config):
    names = []
    for item in config.getoption("--backend") or []:
        names.extend(n.strip() for n in item.split(",") if n.strip())
    env = os.environ.get("SPARSETOPK_TEST_BACKENDS", "")
    if not names and env:
        names = [n.strip() for n in env.split(",") if n.strip()]
    return names


def _collect_backends(config):
    cached = getattr(config, "_sparsetopk_but", None)
    if cached is not None:
        return cached
    from sparsetopk import registry

    found = registry.backends()
    requested = _requested(config)
    selected, excluded = [], []
    if requested:
        unknown = [n for n in requested if n not in found]
        if unknown:
            raise pytest.UsageError(
                f"--backend: unknown backend(s) {', '.join(unknown)}; found: {', '.join(sorted(found)) or 'none'}"
            )
        names = list(dict.fromkeys(requested))
    else:
        names = sorted(found)
    for name in names:
        be = found[name]
        av = registry.availability(name)
        if not av.ok:
            reason = f"backend {name!r} cannot run here: {av.reason or 'probe said no'}"
            (selected if requested else excluded).append(BackendUnderTest(name, "", be, reason))
            continue
        device, why = _device_for(be)
        if not device:
            reason = f"backend {name!r}: {why}"
            (selected if requested else excluded).append(BackendUnderTest(name, "", be, reason))
            continue
        selected.append(BackendUnderTest(name, device, be))
    config._sparsetopk_but = (selected, excluded)
    return selected, excluded


def pytest_report_header(config):
    try:
        selected, excluded = _collect_backends(config)
    except Exception as exc:  # noqa: BLE001 - header only
        return [f"sparsetopk backends: unavailable ({exc!r})"]
    lines = []
    for b in selected:
        tag = f"on {b.device}" if b.device else f"SKIPPED ({b.skip_reason})"
        extra = " [interpreted: shrunk sizes]" if b.interpreted else ""
        lines.append(f"sparsetopk backend under test: {b.name} {tag}{extra}")
    for b in excluded:
        lines.append(f"sparsetopk backend not tested: {b.name}: {b.skip_reason}")
    return lines


def pytest_generate_tests(metafunc):
    if "bk" not in metafunc.fixturenames:
        return
    selected, _ = _collect_backends(metafunc.config)
    if not selected:
        metafunc.parametrize(
            "bk",
            [pytest.param(None, marks=pytest.mark.skip(reason="no sparsetopk backend can run here"))],
            ids=["no-backend"],
        )
        return
    params = []
    for b in selected:
        marks = [pytest.mark.skip(reason=b.skip_reason)] if b.skip_reason else []
        params.append(pytest.param(b, marks=marks, id=str(b)))
    metafunc.parametrize("bk", params)
