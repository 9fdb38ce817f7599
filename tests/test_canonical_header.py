"""The shared native header shared/include/sparsetopk/canonical.h on the host:
its branch-free `ordered_canonical_u32` (the kernels' hot loops) equals
`ordered_u32(canonical_bits(x))` for all 2^32 bit patterns (and
`ordered_nonnan_u32` for every pattern that is not NaN), and the order it
gives agrees with an independent NumPy statement of the SPEC's canonical order
(NaN last, -0 == +0, float order otherwise). Needs a host C++ compiler."""

import pathlib
import shutil
import subprocess

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
INCLUDE = ROOT / "shared" / "include"

SRC = r"""
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include "sparsetopk/canonical.h"
using namespace sparsetopk;
int main(int argc, char** argv) {
  if (argc > 1 && argv[1][0] == 'a') {  // all 2^32 patterns
    uint64_t bad = 0;
    for (uint64_t b = 0; b <= 0xffffffffull; ++b) {
      const uint32_t x = uint32_t(b);
      bad += ordered_canonical_u32(x) != ordered_u32(canonical_bits(x));
      const bool nan = (x & kAbsMask) > kPosInfBits;
      bad += !nan && ordered_nonnan_u32(x) != ordered_u32(canonical_bits(x));
    }
    std::printf("%llu\n", (unsigned long long)bad);
    return bad != 0;
  }
  uint32_t x;  // map: bits on stdin -> ordered canonical bits on stdout
  while (std::fread(&x, 4, 1, stdin) == 1) {
    const uint32_t y = ordered_canonical_u32(x);
    std::fwrite(&y, 4, 1, stdout);
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def exe(tmp_path_factory):
    cxx = shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    d = tmp_path_factory.mktemp("canon")
    (d / "t.cpp").write_text(SRC)
    out = d / "t"
    subprocess.run([cxx, "-O2", "-std=c++17", f"-I{INCLUDE}", str(d / "t.cpp"), "-o", str(out)], check=True)
    return out


def test_branch_free_form_equals_the_reference_form_for_every_pattern(exe):
    r = subprocess.run([str(exe), "all"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "0", r.stdout + r.stderr


def test_order_matches_an_independent_statement_of_the_spec(exe):
    rng = np.random.default_rng(0)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 3.4e38, -3.4e38, 1.0, -1.0],
                       dtype=np.float32)
    bits = np.concatenate([
        special.view(np.uint32),
        np.array([0x7F800001, 0x7FC00000, 0xFFFFFFFF, 0xFF800001], dtype=np.uint32),  # NaN payloads
        rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32),  # any pattern
        rng.standard_normal(20000).astype(np.float32).view(np.uint32),
    ])
    r = subprocess.run([str(exe)], input=bits.tobytes(), capture_output=True, check=True)
    got = np.frombuffer(r.stdout, dtype=np.uint32)
    with np.errstate(invalid="ignore"):  # signalling NaN payloads
        f = bits.view(np.float32).astype(np.float64)
    canon = np.where(np.isnan(f), -np.inf, f)  # NaN ranks with -inf (last); -0 == +0 in float compare
    i, j = rng.integers(0, len(bits), (2, 200000))
    assert np.array_equal(got[i] < got[j], canon[i] < canon[j])
    assert np.array_equal(got[i] == got[j], canon[i] == canon[j])
