"""Build and run a C++ program against the package's host-compilable headers
(csrc/warp_math.h, csrc/select_math.h and shared/include) on the CPU: the
host tests of the kernels' integer helpers. Skips without a host compiler."""

import pathlib
import shutil
import subprocess

import pytest

PKG = pathlib.Path(__file__).resolve().parents[1]
INCLUDES = [PKG / "csrc", PKG.parents[1] / "shared" / "include"]


def compile_and_run(tmp_path, src: str, timeout: float = 300) -> subprocess.CompletedProcess:
    cxx = shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    (tmp_path / "t.cpp").write_text(src)
    exe = tmp_path / "t"
    subprocess.run([cxx, "-O2", "-std=c++17", *[f"-I{p}" for p in INCLUDES], str(tmp_path / "t.cpp"), "-o", str(exe)],
                   check=True)
    return subprocess.run([str(exe)], capture_output=True, text=True, timeout=timeout)
