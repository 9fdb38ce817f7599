"""sparsetopk backend ``nvidia-sm100``: exact top-k CUDA kernels (sm_90a, sm_100a)."""

from __future__ import annotations

__version__ = "0.1.0"

_BACKEND = None


def backend():
    """Entry point of group ``sparsetopk.backends``: the backend object.

    Cheap: imports neither the extension nor cuda-python; touches no GPU.
    (The implementation module is ``_backend``: a submodule named ``backend``
    would replace this function as a package attribute once imported.)
    """
    global _BACKEND
    if _BACKEND is None:
        from ._backend import NvidiaSm100Backend

        _BACKEND = NvidiaSm100Backend()
    return _BACKEND


__all__ = ["backend", "__version__"]
