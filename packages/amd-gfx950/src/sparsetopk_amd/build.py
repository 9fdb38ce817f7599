"""Toolchain glue: build the kernels for AMD (clang -> code objects), NVIDIA
(nvcc -> cubin, the portability build) and the CPU emulator (g++ -> .so),
and read the AMD code objects' metadata.

Standalone on purpose: ``setup.py`` loads this file by path while building
the wheel (no torch, no sparsetopk needed), so it imports only the stdlib.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

PKG_DIR = Path(__file__).resolve().parent
SOURCE = PKG_DIR / "csrc" / "stk_amd_kernels.hip"
CODEOBJ_DIR = PKG_DIR / "codeobj"
BUNDLED_INCLUDE = PKG_DIR / "include"
ARCHS = ("gfx950", "gfx942")
HEADERS = ("sparsetopk/canonical.h", "sparsetopk/port/wave.h", "sparsetopk/port/emu.h")

KERNELS = (
    "stk_decode_topk_f32",
    "stk_decode_topk_bf16",
    "stk_decode_topk_f16",
    "stk_radix_topk_f32",
    "stk_radix_topk_bf16",
    "stk_radix_topk_f16",
    "stk_merge_lds",
    "stk_merge_global",
)
# The kernels whose inner loops must not touch scratch memory.
HOT_KERNELS = KERNELS

CLANG_CANDIDATES = ("clang++-22", "clang++", "amdclang++", "hipcc")
READELF_CANDIDATES = ("llvm-readelf-22", "llvm-readelf")


def code_object_path(arch: str, root: Path = CODEOBJ_DIR) -> Path:
    return root / f"stk_amd_{arch}.hsaco"


def _log(msg: str) -> None:
    print(f"[sparsetopk-amd build] {msg}", file=sys.stderr)


# ------------------------------------------------------------------ headers
def include_dirs() -> List[Path]:
    """Where the shared native headers are: the core's tree, else the copy
    bundled into this package at build time."""
    out: List[Path] = []
    env = os.environ.get("SPARSETOPK_INCLUDE_DIR")
    if env:
        out.append(Path(env))
    # repo checkout: packages/amd-gfx950/src/sparsetopk_amd -> shared/include
    if len(PKG_DIR.parents) > 3:
        out.append(PKG_DIR.parents[3] / "shared" / "include")
    try:  # the core installed editable from its tree: shared/src/sparsetopk -> shared/include
        import importlib.util

        spec = importlib.util.find_spec("sparsetopk")
        if spec is not None and spec.origin:
            out.append(Path(spec.origin).resolve().parents[2] / "include")
    except Exception:  # pragma: no cover - best effort
        pass
    out.append(BUNDLED_INCLUDE)
    return [p for p in out if (p / "sparsetopk" / "canonical.h").is_file()]


def find_include_dir() -> Optional[Path]:
    dirs = include_dirs()
    return dirs[0] if dirs else None


def bundle_headers(src_include: Path, dest: Path = BUNDLED_INCLUDE) -> None:
    """Copy the shared headers into the package (build output, not source)."""
    if src_include.resolve() == dest.resolve():
        return
    for h in HEADERS:
        s = src_include / h
        if s.is_file():
            d = dest / h
            d.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(s, d)


def source_digest(inc: Path, extra: str = "") -> str:
    h = hashlib.sha256()
    h.update(SOURCE.read_bytes())
    for name in HEADERS:
        p = inc / name
        if p.is_file():
            h.update(p.read_bytes())
    h.update(extra.encode())
    return h.hexdigest()[:16]


# ---------------------------------------------------------- AMD (clang/HIP)
def find_tool(candidates: Sequence[str]) -> Optional[str]:
    for c in candidates:
        p = shutil.which(c)
        if p:
            return p
    return None


def clang_command(clang: str, inc: Path, archs: Sequence[str] = ARCHS) -> List[str]:
    cmd = [clang, "-x", "hip"]
    cmd += [f"--offload-arch={a}" for a in archs]
    cmd += [
        "-nogpuinc",
        "-nogpulib",
        "--cuda-device-only",
        "--no-gpu-bundle-output",
        "-O3",
        "-std=c++17",
        f"-I{inc}",
        "-c",
        str(SOURCE),
    ]
    return cmd


def build_code_objects(dest: Path = CODEOBJ_DIR, clang: Optional[str] = None) -> Dict:
    """Compile the HIP source for gfx950 and gfx942 into ``dest``. Never
    raises: the outcome (and why it failed) goes into ``dest/BUILD.json``."""
    dest.mkdir(parents=True, exist_ok=True)
    status: Dict = {"ok": False, "archs": list(ARCHS), "reason": ""}
    inc = find_include_dir()
    clang = clang or os.environ.get("SPARSETOPK_AMD_CLANG") or find_tool(CLANG_CANDIDATES)
    if inc is None:
        status["reason"] = "shared headers sparsetopk/canonical.h not found (set SPARSETOPK_INCLUDE_DIR)"
    elif clang is None:
        status["reason"] = "no HIP-capable clang found (install clang-22 and lld-22: ci/build_amd.sh)"
    else:
        if inc != BUNDLED_INCLUDE:
            bundle_headers(inc)
        tmp = dest / "_tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        cmd = clang_command(clang, inc)
        status["command"] = " ".join(cmd)
        proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
        if proc.returncode != 0:
            status["reason"] = f"clang failed ({proc.returncode}): {proc.stderr[-2000:]}"
        else:
            missing = []
            for a in ARCHS:
                outs = list(tmp.glob(f"*-{a}.out")) + list(tmp.glob(f"*-{a}*.o"))
                if not outs:
                    missing.append(a)
                    continue
                shutil.move(str(outs[0]), code_object_path(a, dest))
            if missing:
                status["reason"] = f"clang produced no code object for {', '.join(missing)}"
            else:
                status["ok"] = True
                status["digest"] = source_digest(inc)
                status["clang"] = subprocess.run([clang, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
        shutil.rmtree(tmp, ignore_errors=True)
    (dest / "BUILD.json").write_text(json.dumps(status, indent=2))
    _log("code objects built" if status["ok"] else f"code objects NOT built: {status['reason']}")
    return status


def build_status(root: Path = CODEOBJ_DIR) -> Dict:
    try:
        return json.loads((root / "BUILD.json").read_text())
    except Exception:
        return {"ok": False, "reason": "package was built without its code objects (no BUILD.json)"}


def code_objects_missing(root: Path = CODEOBJ_DIR) -> Optional[str]:
    """None if every shipped code object is present, else why not."""
    missing = [a for a in ARCHS if not code_object_path(a, root).is_file()]
    if not missing:
        return None
    st = build_status(root)
    why = st.get("reason") or "unknown"
    return f"code objects missing for {', '.join(missing)}: {why}"


# ----------------------------------------------------- code object metadata
def kernel_metadata(path: Path, readelf: Optional[str] = None) -> Dict[str, Dict]:
    """Per-kernel resource use from the AMDGPU metadata note (llvm-readelf)."""
    readelf = readelf or find_tool(READELF_CANDIDATES)
    if readelf is None:
        raise RuntimeError("llvm-readelf not found (apt-get install llvm-22)")
    text = subprocess.run([readelf, "--notes", str(path)], capture_output=True, text=True, check=True).stdout
    kernels: Dict[str, Dict] = {}
    cur: Dict = {}
    fields = (
        "name",
        "vgpr_count",
        "sgpr_count",
        "agpr_count",
        "group_segment_fixed_size",
        "private_segment_fixed_size",
        "wavefront_size",
        "vgpr_spill_count",
        "sgpr_spill_count",
        "max_flat_workgroup_size",
    )
    for line in text.splitlines():
        m = re.match(r"\s*-?\s*\.([a-z_]+):\s+(\S+)", line)
        if not m:
            continue
        key, val = m.group(1), m.group(2)
        if key == "agpr_count" and line.lstrip().startswith("-"):
            cur = {}
        if key in fields:
            cur[key] = val if key == "name" else int(val) if val.isdigit() else val
            if key == "name" and val.startswith("stk_"):
                kernels[val] = cur
    return kernels


# ----------------------------------------------- NVIDIA portability (nvcc)
def cache_dir() -> Path:
    base = os.environ.get("SPARSETOPK_AMD_CACHE")
    if base:
        p = Path(base)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        p = Path(xdg) / "sparsetopk" / "amd-gfx950"
    p.mkdir(parents=True, exist_ok=True)
    return p


def build_cubin(sm: str, nvcc: Optional[str] = None) -> Path:
    """Compile the same source with nvcc (wave32) for ``sm`` (e.g. "sm_90");
    cached by source digest. Raises RuntimeError with the compiler's output."""
    inc = find_include_dir()
    if inc is None:
        raise RuntimeError("shared headers sparsetopk/canonical.h not found")
    nvcc = nvcc or os.environ.get("SPARSETOPK_AMD_NVCC") or find_tool(("nvcc",))
    if nvcc is None and Path("/usr/local/cuda/bin/nvcc").is_file():
        nvcc = "/usr/local/cuda/bin/nvcc"
    if nvcc is None:
        raise RuntimeError("nvcc not found (needed for the CUDA portability build)")
    out = cache_dir() / f"stk_amd_port_{sm}_{source_digest(inc, sm)}.cubin"
    if out.is_file():
        return out
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    cmd = [nvcc, "-x", "cu", "-std=c++17", "-O3", f"-arch={sm}", "-cubin", f"-I{inc}", str(SOURCE), "-o", str(tmp)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"nvcc failed: {' '.join(cmd)}\n{proc.stderr[-4000:]}")
    os.replace(tmp, out)
    return out


# -------------------------------------------------- CPU emulator (g++)
def build_emulator(wave: int, cxx: Optional[str] = None) -> Path:
    """The kernels as a host shared library on the fiber emulator."""
    inc = find_include_dir()
    if inc is None:
        raise RuntimeError("shared headers sparsetopk/canonical.h not found")
    cxx = cxx or os.environ.get("CXX") or find_tool(("g++", "clang++", "c++"))
    if cxx is None:
        raise RuntimeError("no host C++ compiler for the emulator build")
    out = cache_dir() / f"stk_amd_emu_w{wave}_{source_digest(inc, f'emu{wave}')}.so"
    if out.is_file():
        return out
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    cmd = [
        cxx, "-x", "c++", "-std=c++17", "-O2", "-shared", "-fPIC",
        "-fvisibility=hidden", "-fvisibility-inlines-hidden",
        *(["-fno-gnu-unique"] if "g++" in os.path.basename(cxx) else []),
        "-DSTK_PORT_EMU", f"-DSTK_WAVE={wave}", f"-I{inc}", str(SOURCE), "-o", str(tmp),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"emulator build failed: {' '.join(cmd)}\n{proc.stderr[-4000:]}")
    os.replace(tmp, out)
    return out


OBJDUMP_CANDIDATES = ("llvm-objdump-22", "llvm-objdump")


def check_code_objects(root: Path = CODEOBJ_DIR) -> List[str]:
    """CI check of the shipped code objects; returns the problems (empty: ok)
    and prints each kernel's resource use. Every kernel must be present for
    every arch (symbol table, llvm-objdump; metadata note, llvm-readelf),
    wave64, and the hot kernels must use no scratch (private segment 0)."""
    problems: List[str] = []
    objdump = find_tool(OBJDUMP_CANDIDATES)
    if find_tool(READELF_CANDIDATES) is None or objdump is None:
        return ["llvm-readelf / llvm-objdump not found (apt-get install llvm-22)"]
    for arch in ARCHS:
        path = code_object_path(arch, root)
        if not path.is_file():
            problems.append(f"{arch}: no code object at {path}")
            continue
        syms = subprocess.run([objdump, "-t", str(path)], capture_output=True, text=True, check=True).stdout
        head = subprocess.run([objdump, "-f", str(path)], capture_output=True, text=True).stdout
        if arch not in head and arch not in syms:
            flags = subprocess.run([find_tool(READELF_CANDIDATES), "-h", str(path)], capture_output=True, text=True).stdout
            if arch not in flags.lower():
                problems.append(f"{arch}: the code object does not say it is {arch}")
        meta = kernel_metadata(path)
        print(f"{arch}: {path.name}")
        print(
            f"  {'kernel':24s} {'VGPR':>5s} {'AGPR':>5s} {'SGPR':>5s} {'LDS B':>7s} {'scratch B':>9s} {'wave':>4s} {'spills v/s':>10s}"
        )
        for k in KERNELS:
            if k not in syms or f"{k}.kd" not in syms:
                problems.append(f"{arch}: kernel {k} (or its descriptor {k}.kd) missing from the symbol table")
            m = meta.get(k)
            if m is None:
                problems.append(f"{arch}: kernel {k} missing from the metadata note")
                continue
            print(
                f"  {k:24s} {m.get('vgpr_count', '?'):>5} {m.get('agpr_count', '?'):>5} {m.get('sgpr_count', '?'):>5} "
                f"{m.get('group_segment_fixed_size', '?'):>7} {m.get('private_segment_fixed_size', '?'):>9} "
                f"{m.get('wavefront_size', '?'):>4} {m.get('vgpr_spill_count', 0)}/{m.get('sgpr_spill_count', 0):>4}"
            )
            if m.get("wavefront_size") != 64:
                problems.append(f"{arch}: {k} wavefront size {m.get('wavefront_size')} != 64")
            if k in HOT_KERNELS and m.get("private_segment_fixed_size") != 0:
                problems.append(f"{arch}: {k} uses scratch ({m.get('private_segment_fixed_size')} B)")
            if k in HOT_KERNELS and m.get("vgpr_spill_count", 0):
                problems.append(f"{arch}: {k} spills {m.get('vgpr_spill_count')} VGPRs")
    return problems


if __name__ == "__main__":  # python build.py [--check] [dest]
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    dest = Path(args[0]) if args else CODEOBJ_DIR
    if "--check" in sys.argv:
        probs = check_code_objects(dest)
        for pr in probs:
            print("PROBLEM:", pr)
        print("code objects OK" if not probs else f"{len(probs)} problem(s)")
        sys.exit(1 if probs else 0)
    st = build_code_objects(dest)
    sys.exit(0 if st["ok"] else 1)
