"""Small "drivers" that load the kernels and launch them, so that one Python
launch path (kernels.py) runs on every build of the one kernel source:

* ``HipDriver``  — the product: AMD code objects through hip-python
  (hipModuleLoadData / hipModuleGetFunction / hipModuleLaunchKernel) on
  torch's current HIP stream, after checking the device's gcnArchName.
* ``CudaDriver`` — the portability build: the same source through nvcc
  (wave32), loaded with cuda.bindings (cuModuleLoadData / cuLaunchKernel)
  on torch's current CUDA stream. Opt-in: SPARSETOPK_AMD_PORTABILITY=cuda.
* ``EmuDriver``  — the same source on the CPU fiber emulator (wave64 or
  wave32), for tests where no GPU exists: SPARSETOPK_AMD_PORTABILITY=emu.

A driver exposes ``kind``, ``wave``, ``device_type`` and
``launch(device, name, grid, block, params)``, where params is the ctypes
parameter structure passed by value as the kernel's single argument.
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path
from typing import Dict, Optional, Tuple

from . import build


def _current_stream(device) -> int:
    import torch

    return int(torch.cuda.current_stream(device).cuda_stream)


def _device_index(device) -> int:
    import torch

    if device is None or device.index is None:
        return torch.cuda.current_device()
    return int(device.index)


def _handle_value(h) -> int:
    """The address inside a cuda.bindings / hip-python handle object."""
    try:
        return int(h)
    except TypeError:
        return int(h.getPtr())


# ---------------------------------------------------------------- HIP
class HipDriver:
    kind = "hip"
    wave = 64
    device_type = "cuda"  # ROCm torch calls HIP devices "cuda"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._funcs: Dict[Tuple[int, str], object] = {}
        self._modules: Dict[int, object] = {}
        self._arch: Dict[int, str] = {}

    @staticmethod
    def _hip():
        from hip import hip  # hip-python; imports without ROCm, fails on first call

        return hip

    def _check(self, res, what: str):
        hip = self._hip()
        if isinstance(res, tuple):
            err, rest = res[0], res[1:]
        else:
            err, rest = res, ()
        if err != hip.hipError_t.hipSuccess:
            raise RuntimeError(f"{what} failed: {err}")
        return rest[0] if len(rest) == 1 else rest

    def arch(self, dev: int) -> str:
        a = self._arch.get(dev)
        if a is None:
            import torch

            name = getattr(torch.cuda.get_device_properties(dev), "gcnArchName", "") or ""
            if not name:
                props = self._check(self._hip().hipGetDeviceProperties(dev), "hipGetDeviceProperties")
                name = props.gcnArchName
                name = name.decode() if isinstance(name, bytes) else str(name)
            a = name.split(":")[0]
            self._arch[dev] = a
        return a

    def supports_device(self, dev: int) -> Optional[str]:
        a = self.arch(dev)
        if a not in build.ARCHS:
            return f"device {dev} is {a}; code objects are built for {', '.join(build.ARCHS)}"
        if build.code_objects_missing() and not build.code_object_path(a).is_file():
            return build.code_objects_missing()
        return None

    def _function(self, dev: int, name: str):
        key = (dev, name)
        f = self._funcs.get(key)
        if f is not None:
            return f
        with self._lock:
            hip = self._hip()
            mod = self._modules.get(dev)
            if mod is None:
                a = self.arch(dev)
                path = build.code_object_path(a)
                if not path.is_file():
                    raise RuntimeError(build.code_objects_missing() or f"missing {path}")
                self._check(hip.hipSetDevice(dev), "hipSetDevice")
                mod = self._check(hip.hipModuleLoadData(path.read_bytes()), "hipModuleLoadData")
                self._modules[dev] = mod
            f = self._check(hip.hipModuleGetFunction(mod, name.encode()), f"hipModuleGetFunction({name})")
            self._funcs[key] = f
            return f

    def launch(self, device, name: str, grid: int, block: int, params: ctypes.Structure) -> None:
        dev = _device_index(device)
        f = self._function(dev, name)
        hip = self._hip()
        stream = _current_stream(device)
        argv = [ctypes.addressof(params)]  # void*[1] -> the parameter struct
        self._check(
            hip.hipModuleLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, stream, argv, None),
            f"hipModuleLaunchKernel({name})",
        )


# ---------------------------------------------------------------- CUDA
class CudaDriver:
    kind = "cuda"
    wave = 32
    device_type = "cuda"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._funcs: Dict[Tuple[int, str], object] = {}
        self._modules: Dict[int, object] = {}

    @staticmethod
    def _cu():
        from cuda.bindings import driver as cu

        return cu

    def _check(self, res, what: str):
        cu = self._cu()
        err, rest = (res[0], res[1:]) if isinstance(res, tuple) else (res, ())
        if err != cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"{what} failed: {err}")
        return rest[0] if len(rest) == 1 else rest

    def supports_device(self, dev: int) -> Optional[str]:
        import torch

        major, _ = torch.cuda.get_device_capability(dev)
        if major < 7:
            return f"device {dev} is sm_{major}x; the portability build needs sm_70+"
        return None

    def _function(self, dev: int, name: str):
        key = (dev, name)
        f = self._funcs.get(key)
        if f is not None:
            return f
        with self._lock:
            import torch

            cu = self._cu()
            mod = self._modules.get(dev)
            if mod is None:
                major, minor = torch.cuda.get_device_capability(dev)
                cubin = build.build_cubin(f"sm_{major}{minor}")
                with torch.cuda.device(dev):
                    torch.cuda.current_stream(dev)  # torch makes its primary context current
                    self._check(cu.cuInit(0), "cuInit")
                    ctx = self._check(cu.cuCtxGetCurrent(), "cuCtxGetCurrent")
                    if not _handle_value(ctx):
                        cudev = self._check(cu.cuDeviceGet(dev), "cuDeviceGet")
                        ctx = self._check(cu.cuDevicePrimaryCtxRetain(cudev), "cuDevicePrimaryCtxRetain")
                        self._check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
                    data = Path(cubin).read_bytes()
                    image = ctypes.create_string_buffer(data, len(data))  # alive for the call
                    mod = self._check(cu.cuModuleLoadData(ctypes.addressof(image)), "cuModuleLoadData")
                self._modules[dev] = mod
            f = self._check(cu.cuModuleGetFunction(mod, name.encode()), f"cuModuleGetFunction({name})")
            self._funcs[key] = f
            return f

    def launch(self, device, name: str, grid: int, block: int, params: ctypes.Structure) -> None:
        dev = _device_index(device)
        f = self._function(dev, name)
        cu = self._cu()
        stream = cu.CUstream(_current_stream(device))
        argv = (ctypes.c_void_p * 1)(ctypes.addressof(params))
        self._check(
            cu.cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, stream, ctypes.addressof(argv), 0),
            f"cuLaunchKernel({name})",
        )


# ---------------------------------------------------------------- CPU emulator
class EmuDriver:
    kind = "emu"
    device_type = "cpu"

    def __init__(self, wave: int = 64) -> None:
        self.wave = wave
        self._lib = None
        self._lock = threading.Lock()

    def supports_device(self, dev) -> Optional[str]:
        return None

    def lib(self):
        if self._lib is None:
            with self._lock:
                if self._lib is None:
                    lib = ctypes.CDLL(str(build.build_emulator(self.wave)))
                    lib.stk_emu_launch.restype = ctypes.c_int
                    lib.stk_emu_launch.argtypes = [
                        ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint32,
                        ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                    ]  # fmt: skip
                    assert lib.stk_emu_wave_size() == self.wave
                    self._lib = lib
        return self._lib

    def launch(self, device, name: str, grid: int, block: int, params: ctypes.Structure) -> None:
        lib = self.lib()
        err = ctypes.create_string_buffer(256)
        with self._lock:  # the emulator's scheduler is a process-wide singleton
            rc = lib.stk_emu_launch(name.encode(), grid, block, ctypes.addressof(params), err, 256)
        if rc != 0:
            raise RuntimeError(f"emulated launch of {name} failed: {err.value.decode()}")
