"""Whether the package's long-row GPU tests can run here: a CUDA device and
the nvidia-sm100 backend available (its probe: driver, compute capability,
extension)."""

import torch


def usable() -> bool:
    if not torch.cuda.is_available():
        return False
    try:
        from sparsetopk import registry

        return bool(registry.availability("nvidia-sm100"))
    except Exception:  # noqa: BLE001
        return False
