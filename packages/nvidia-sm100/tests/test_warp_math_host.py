"""The warp kernel's host-compilable integer helpers (csrc/warp_math.h) on the
CPU, against brute force: `half_counts`, which recovers how many 16-bit halves
passed a packed compare from the 32-bit sum of the compare's 0xffff / 0 masks
(the count behind `warp_kth16`'s threshold). Needs a host C++ compiler."""

import pathlib
import shutil
import subprocess

import pytest

PKG = pathlib.Path(__file__).resolve().parents[1]
INCLUDES = [PKG / "csrc", PKG.parents[1] / "shared" / "include"]

SRC = r"""
#include <cstdint>
#include <cstdio>
#include <random>
#include "warp_math.h"
using stk_nv::half_counts;
int main() {
  uint64_t bad = 0, n = 0;
  // every (L, H) below 1024, and random ones below 2^16
  auto one = [&](uint32_t L, uint32_t H) {
    const uint32_t s = L * 0xffffu + H * 0xffff0000u;  // mod 2^32
    bad += half_counts(s) != L + H;
    ++n;
  };
  for (uint32_t L = 0; L < 1024; ++L)
    for (uint32_t H = 0; H < 1024; ++H) one(L, H);
  std::mt19937 g(1);
  for (int i = 0; i < 1000000; ++i) one(g() & 0xffffu, g() & 0xffffu);
  // as the kernel uses it: 16 words of two halves, each compared with the
  // threshold in both halves (0xffff where the half is >= it), the masks summed
  for (int t = 0; t < 200000; ++t) {
    const uint32_t th = g() & 0xffffu, spread = 1u + (g() & 0xffu);
    uint32_t s = 0, want = 0;
    for (int w = 0; w < 16; ++w) {
      const uint32_t lo = (th + g() % (2 * spread)) - spread, hi = (th + g() % (2 * spread)) - spread;
      const uint32_t m = ((lo & 0xffffu) >= th ? 0xffffu : 0u) | ((hi & 0xffffu) >= th ? 0xffff0000u : 0u);
      want += ((lo & 0xffffu) >= th) + ((hi & 0xffffu) >= th);
      s += m;
    }
    bad += half_counts(s) != want;
    ++n;
  }
  std::printf("%llu %llu\n", (unsigned long long)bad, (unsigned long long)n);
  return bad != 0;
}
"""


def test_half_counts_recovers_both_halves(tmp_path):
    cxx = shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    (tmp_path / "t.cpp").write_text(SRC)
    exe = tmp_path / "t"
    subprocess.run([cxx, "-O2", "-std=c++17", *[f"-I{p}" for p in INCLUDES], str(tmp_path / "t.cpp"), "-o", str(exe)],
                   check=True)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    bad, n = r.stdout.split()
    assert r.returncode == 0 and bad == "0" and int(n) > 2_000_000, r.stdout + r.stderr
