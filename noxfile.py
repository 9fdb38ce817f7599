"""nox sessions: one per vendor, the default test run, lint and the demo.

    nox -s tests            core tests + the conformance suite on every backend that runs here
    nox -s nvidia           core + only packages/nvidia-sm100, then the suite (likewise amd, triton)
    nox -s lint             ruff
    nox -s demo             install what fits this machine, select on a realistic batch, time it

Each session builds a fresh virtualenv. Torch comes from ``$SPARSETOPK_TORCH``
(default ``torch==2.13.0``, the CPU wheel on the project's CI machines; on a
GPU machine set it to the CUDA/ROCm build you use). Extra arguments after
``--`` go to pytest (or to the demo).
"""

from __future__ import annotations

import os
import shutil

import nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = False
nox.options.default_venv_backend = "venv"

ROOT = os.path.dirname(os.path.abspath(__file__))
TORCH = os.environ.get("SPARSETOPK_TORCH", "torch==2.13.0")
TRITON = os.environ.get("SPARSETOPK_TRITON", "triton==3.6.0")

VENDORS = {
    # session id: (package dir, extra pip requirements, environment for the suite)
    "nvidia": ("packages/nvidia-sm100", [], {}),
    # hip-python imports without ROCm and fails cleanly on first call: installed
    # so the tests see the probe and loader behave on a machine without ROCm.
    "amd": ("packages/amd-gfx950", ["hip-python"], {}),
    "triton": ("packages/triton-portable", [TRITON], {"TRITON_INTERPRET": "1"}),
}
BACKEND_NAMES = {"nvidia": "nvidia-sm100", "amd": "amd-gfx950", "triton": "triton-portable"}


def _core(session: nox.Session) -> None:
    session.install(TORCH)
    session.install("-e", "shared[test,bench]")


def _vendor_buildable(vendor: str) -> str | None:
    """Why a vendor package cannot be built on this machine (None: it can)."""
    if vendor == "nvidia" and shutil.which("nvcc") is None:
        return "nvcc not found"
    return None


def _install_vendor(session: nox.Session, vendor: str) -> None:
    path, extra, _ = VENDORS[vendor]
    if extra:
        session.install(*extra)
    # -v: native builds print their compiler lines, useful in CI logs.
    session.install("-v", f"./{path}")


@nox.session
def tests(session: nox.Session) -> None:
    """Core tests + the conformance suite on every backend that runs here."""
    _core(session)
    env = {"TRITON_INTERPRET": "1"} if not _has_gpu(session) else {}
    installed = []
    for vendor in VENDORS:
        why = _vendor_buildable(vendor)
        if why:
            session.warn(f"skipping {vendor}: {why}")
            continue
        _install_vendor(session, vendor)
        installed.append(vendor)
    session.run("sparsetopk", "info")
    # Package-local tests run on their own: they carry helper modules whose
    # names would clash with the suite's on one sys.path. The Triton package's
    # own tests (its split paths and the sample scheme, which the suite's small
    # cases never pick) take ~8 min under the interpreter.
    for vendor in installed:
        path = os.path.join(VENDORS[vendor][0], "tests")
        if os.path.isdir(os.path.join(ROOT, path)):
            session.run("python", "-m", "pytest", "-q", "-ra", path, env=env)
    # The core tests and the conformance suite last: their summary closes the log.
    session.run("python", "-m", "pytest", "-q", "-ra", "tests", *session.posargs, env=env)


def _vendor_suite(session: nox.Session, vendor: str) -> None:
    """Core + one vendor package only, then the one conformance suite on it."""
    _core(session)
    _install_vendor(session, vendor)
    env = dict(VENDORS[vendor][2])
    if _has_gpu(session):
        env.pop("TRITON_INTERPRET", None)
    session.run("sparsetopk", "info")
    session.run(
        "python", "-m", "pytest", "-q", "-ra", "tests/conformance", *_vendor_tests(vendor),
        "--backend", BACKEND_NAMES[vendor], *session.posargs, env=env,
    )


@nox.session
def nvidia(session: nox.Session) -> None:
    """Core + packages/nvidia-sm100 only; the suite (skips itself with no NVIDIA GPU)."""
    _vendor_suite(session, "nvidia")


@nox.session
def amd(session: nox.Session) -> None:
    """Core + packages/amd-gfx950 only; build checks here, the suite on a ROCm GPU."""
    _vendor_suite(session, "amd")


@nox.session
def triton(session: nox.Session) -> None:
    """Core + packages/triton-portable only; the suite (interpreter on CPU)."""
    _vendor_suite(session, "triton")


def _vendor_tests(vendor: str) -> list[str]:
    own = {"nvidia": "tests/test_nvidia_build.py", "amd": "tests/test_amd_build.py"}.get(vendor)
    return [own] if own and os.path.exists(os.path.join(ROOT, own)) else []


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", "shared", "packages", "tests", "ci", "noxfile.py", *session.posargs)


@nox.session
def demo(session: nox.Session) -> None:
    """The main job: install what fits this machine, select, benchmark vs torch.topk."""
    _core(session)
    gpu = _has_gpu(session)
    if gpu:
        for vendor in ("nvidia", "triton"):
            if not _vendor_buildable(vendor):
                _install_vendor(session, vendor)
    session.run("sparsetopk", "info")
    session.run("python", "ci/demo.py", *session.posargs)


def _has_gpu(session: nox.Session) -> bool:
    out = session.run(
        "python", "-c", "import torch; print(int(torch.cuda.is_available()))", silent=True, external=True
    )
    return bool(out) and out.strip().endswith("1")
