"""sparsetopk backend "triton-portable": exact top-k and merge kernels in Triton.

Runs on any GPU Triton supports (NVIDIA CUDA, AMD HIP) and, under
``TRITON_INTERPRET=1``, on CPU tensors through Triton's interpreter.

Importing this module is cheap: triton and the kernels are imported on first
use, and nothing here touches the GPU.
"""

from __future__ import annotations

import os
from typing import Optional

from sparsetopk.protocol import Availability, Backend, Capabilities

__version__ = "0.1.0"
__all__ = ["TritonPortableBackend", "make_backend", "warmup", "__version__"]

K_MAX = 4096


def _interpret_env() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


class TritonPortableBackend(Backend):
    name = "triton-portable"
    version = __version__
    priority = 50  # native backends 100, reference 0

    def __init__(self) -> None:
        self.interpreted = _interpret_env()
        devices = ("cuda", "cpu") if self.interpreted else ("cuda",)
        self.capabilities = Capabilities(
            vendor="any",
            archs=("any",),
            device_types=devices,
            k_max=K_MAX,
        )
        self._probe: Optional[Availability] = None

    # -- availability -------------------------------------------------------
    def probe(self) -> Availability:
        if self._probe is None:
            self._probe = self._do_probe()
        return self._probe

    def _do_probe(self) -> Availability:
        try:
            import triton  # noqa: F401
        except Exception as e:  # pragma: no cover - depends on the machine
            return Availability(False, f"triton is not importable: {e}")
        if self.interpreted:
            return Availability(True, "TRITON_INTERPRET=1: kernels run in Triton's CPU interpreter")
        import torch

        if torch.cuda.is_available():
            return Availability(True)
        return Availability(False, "no CUDA/HIP device (set TRITON_INTERPRET=1 to run on CPU)")

    # -- what it serves -----------------------------------------------------
    def supports(self, call) -> Optional[str]:
        reason = super().supports(call)
        if reason is not None:
            return reason
        return None

    # -- the work -----------------------------------------------------------
    def topk(self, call, indices, values) -> None:
        from . import launch

        launch.topk(call, indices, values)

    def merge(self, call, indices, values) -> None:
        from . import launch

        launch.merge(call, indices, values)


def warmup(topk_shapes=(), merge_shapes=(), dtypes=None, device=None) -> int:
    """Compile the kernel variants a serving config needs before CUDA-graph capture
    (see ``launch.warmup``): ``topk_shapes`` (rows, width, k), ``merge_shapes``
    (rows, R, k_in, k), score ``dtypes`` (default float32)."""
    import torch

    from . import launch

    return launch.warmup(topk_shapes, merge_shapes, dtypes or (torch.float32,), device)


_BACKEND: Optional[TritonPortableBackend] = None


def make_backend() -> TritonPortableBackend:
    """Entry point (group ``sparsetopk.backends``): the process-wide backend object."""
    global _BACKEND
    if _BACKEND is None or _BACKEND.interpreted != _interpret_env():
        _BACKEND = TritonPortableBackend()
    return _BACKEND
