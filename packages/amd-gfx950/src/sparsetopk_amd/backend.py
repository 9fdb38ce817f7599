"""The ``amd-gfx950`` backend object registered under ``sparsetopk.backends``.

Which build of the kernels it drives is chosen once, when the backend is
constructed, from ``SPARSETOPK_AMD_PORTABILITY``:

    unset / "hip"   AMD code objects (gfx950, gfx942) through hip-python on
                    ROCm torch — the product.
    "cuda"          the same kernel source built by nvcc (wave32) and launched
                    with cuda.bindings on NVIDIA devices — to run the logic on
                    real hardware where no AMD GPU is available.
    "emu" / "emu32" the same source on the CPU fiber emulator, wave64 / wave32
                    (slow; for tests on machines without a GPU).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from typing import Optional

import torch

from sparsetopk.protocol import Availability, Backend, Capabilities, MergeCall, TopKCall, capability_mismatch

from . import __version__, build, kernels
from .drivers import CudaDriver, EmuDriver, HipDriver

ENV_MODE = "SPARSETOPK_AMD_PORTABILITY"
MODES = ("hip", "cuda", "emu", "emu32")


def _mode() -> str:
    m = os.environ.get(ENV_MODE, "").strip().lower() or "hip"
    return m if m in MODES else "invalid:" + m


class AmdGfx950Backend(Backend):
    name = "amd-gfx950"
    version = __version__
    priority = 20
    interpreted = False

    def __init__(self) -> None:
        self.mode = _mode()
        if self.mode == "cuda":
            self.driver = CudaDriver()
            vendor, archs = "nvidia", ("portability-build",)
        elif self.mode in ("emu", "emu32"):
            self.driver = EmuDriver(64 if self.mode == "emu" else 32)
            vendor, archs = "any", ("emulator",)
            self.interpreted = True  # slow: suites shrink their sizes
        else:
            self.driver = HipDriver()
            vendor, archs = "amd", build.ARCHS
        self.capabilities = Capabilities(
            vendor=vendor,
            archs=tuple(archs),
            device_types=(self.driver.device_type,),
            ops=("topk", "merge"),
            k_max=kernels.LARGE_K_MAX,
        )
        self._device_ok: dict = {}

    # ------------------------------------------------------------ probe
    def probe(self) -> Availability:
        if self.mode.startswith("invalid:"):
            return Availability(False, f"{ENV_MODE}={self.mode[8:]!r} is not one of {', '.join(MODES)}")
        if self.mode == "cuda":
            if torch.version.cuda is None or not torch.cuda.is_available():
                return Availability(False, "portability mode 'cuda' needs a CUDA build of torch and an NVIDIA GPU")
            if importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.bindings") is None:
                return Availability(False, "portability mode 'cuda' needs cuda.bindings (pip install cuda-python)")
            if build.find_include_dir() is None:
                return Availability(False, "shared headers sparsetopk/canonical.h not found")
            if not (shutil.which("nvcc") or os.environ.get("SPARSETOPK_AMD_NVCC") or os.path.isfile("/usr/local/cuda/bin/nvcc")):
                return Availability(False, "portability mode 'cuda' needs nvcc to build the kernels")
            return Availability(True, "NVIDIA portability build (wave32) of the amd-gfx950 kernels")
        if self.mode in ("emu", "emu32"):
            if build.find_include_dir() is None:
                return Availability(False, "shared headers sparsetopk/canonical.h not found")
            if build.find_tool(("g++", "clang++", "c++")) is None and not os.environ.get("CXX"):
                return Availability(False, "the emulator build needs a host C++ compiler")
            return Availability(True, f"CPU emulator build (wave{self.driver.wave}) of the amd-gfx950 kernels")
        # The product: HIP on ROCm.
        missing = build.code_objects_missing()
        if missing:
            return Availability(False, missing)
        if getattr(torch.version, "hip", None) is None:
            return Availability(False, "torch is not a ROCm build (torch.version.hip is None); no HIP device to run on")
        if importlib.util.find_spec("hip") is None:
            return Availability(False, "hip-python is not installed (pip install hip-python)")
        if not torch.cuda.is_available():
            return Availability(False, "ROCm torch sees no HIP device")
        return Availability(True, "HIP code objects for " + ", ".join(build.ARCHS))

    # ------------------------------------------------------------ serves
    def supports(self, call) -> Optional[str]:
        why = capability_mismatch(self.capabilities, call)
        if why:
            return why
        dev = call.device
        if dev.type == "cuda":
            idx = dev.index if dev.index is not None else torch.cuda.current_device()
            if idx not in self._device_ok:
                try:
                    self._device_ok[idx] = self.driver.supports_device(idx)
                except Exception as e:  # a runtime that cannot answer cannot serve
                    self._device_ok[idx] = f"cannot query device {idx}: {e}"
            return self._device_ok[idx]
        return None

    # ------------------------------------------------------------ work
    def topk(self, call: TopKCall, indices: torch.Tensor, values: Optional[torch.Tensor]) -> None:
        kernels.launch_topk(self.driver, call, indices, values)

    def merge(self, call: MergeCall, indices: torch.Tensor, values: Optional[torch.Tensor]) -> None:
        kernels.launch_merge(self.driver, call, indices, values)


_BACKEND: Optional[AmdGfx950Backend] = None


def make_backend() -> AmdGfx950Backend:
    """Entry point: a zero-argument callable returning the backend."""
    global _BACKEND
    if _BACKEND is None or _BACKEND.mode != _mode():
        _BACKEND = AmdGfx950Backend()
    return _BACKEND
