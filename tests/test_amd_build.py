"""The amd-gfx950 package: its build, registration, probe and kernel logic.

On a machine without an AMD GPU (CI, developers) this checks what can be
checked and skips the rest, saying why:
  * the package is registered under ``sparsetopk.backends``;
  * its probe fails cleanly and cheaply without ROCm;
  * the code objects were built for gfx950 and gfx942 (when a HIP clang is
    installed: ci/build_amd.sh), with wave64, no scratch, and the resource
    use printed (VGPR/SGPR/LDS from the code objects' metadata);
  * the kernel logic, run on the CPU fiber emulator at wave64 and wave32,
    agrees with the reference backend bit for bit;
  * the same source builds with nvcc (the NVIDIA portability build).
The device runs live in tests/conformance (``--backend amd-gfx950``, with
SPARSETOPK_AMD_PORTABILITY=cuda on NVIDIA) and ci/gpu/amd_portability.sh.
"""

from __future__ import annotations

import importlib.metadata
import os
import time

import pytest
import torch

sparsetopk_amd = pytest.importorskip("sparsetopk_amd", reason="sparsetopk-amd-gfx950 is not installed")

import sparsetopk  # noqa: E402
from sparsetopk import validation  # noqa: E402
from sparsetopk.reference import ReferenceBackend  # noqa: E402
from sparsetopk_amd import build, kernels  # noqa: E402
from sparsetopk_amd.backend import AmdGfx950Backend  # noqa: E402
from sparsetopk_amd.drivers import EmuDriver  # noqa: E402


def _no_clang_reason() -> str:
    return (
        "no HIP-capable clang here, so the package was built without code objects "
        f"({build.build_status().get('reason', '?')}); run ci/build_amd.sh"
    )


# ------------------------------------------------------------- packaging
def test_entry_point_registered():
    eps = importlib.metadata.entry_points(group="sparsetopk.backends")
    names = {ep.name: ep for ep in eps}
    assert "amd-gfx950" in names
    be = names["amd-gfx950"].load()()
    assert be.name == "amd-gfx950"
    assert be.capabilities.k_max == 4096
    assert set(be.capabilities.ops) == {"topk", "merge"}


def test_kernel_source_ships_with_package():
    assert build.SOURCE.is_file()
    assert build.find_include_dir() is not None, "shared headers not found"


def test_probe_fails_cleanly_without_rocm(monkeypatch):
    monkeypatch.delenv("SPARSETOPK_AMD_PORTABILITY", raising=False)
    be = AmdGfx950Backend()
    t0 = time.perf_counter()
    av = be.probe()
    dt = time.perf_counter() - t0
    if av.ok:
        pytest.skip("a ROCm device is present: the probe rightly says available")
    assert av.reason, "a failing probe must say why"
    assert dt < 1.0, f"probe took {dt:.2f}s"
    if getattr(torch.version, "hip", None) is None:
        assert "code objects missing" in av.reason or "ROCm" in av.reason


def test_probe_rejects_unknown_mode(monkeypatch):
    monkeypatch.setenv("SPARSETOPK_AMD_PORTABILITY", "bogus")
    av = AmdGfx950Backend().probe()
    assert not av.ok and "bogus" in av.reason


def test_hip_python_fails_cleanly_without_rocm():
    try:
        from hip import hip
    except ImportError:
        pytest.skip("hip-python is not installed (optional extra: sparsetopk-amd-gfx950[rocm])")
    if getattr(torch.version, "hip", None) is not None:
        pytest.skip("ROCm present")
    with pytest.raises(RuntimeError):  # "failed to dlopen libamdhip64.so"
        hip.hipGetDeviceCount()


# ------------------------------------------------------------- code objects
def test_code_objects_present():
    if build.code_objects_missing():
        if build.find_tool(build.CLANG_CANDIDATES) is None:
            pytest.skip(_no_clang_reason())
        pytest.fail(build.code_objects_missing())
    for arch in build.ARCHS:
        data = build.code_object_path(arch).read_bytes()
        assert data[:4] == b"\x7fELF", arch


def test_build_without_clang_records_why(tmp_path, monkeypatch):
    """No HIP clang: the build step does not fail, and the probe can say why."""
    monkeypatch.delenv("SPARSETOPK_AMD_CLANG", raising=False)
    monkeypatch.setattr(build, "find_tool", lambda candidates: None)
    st = build.build_code_objects(tmp_path)
    assert not st["ok"] and "clang" in st["reason"]
    why = build.code_objects_missing(tmp_path)
    assert why and "gfx950" in why and "clang" in why


@pytest.mark.parametrize("arch", build.ARCHS)
def test_code_object_metadata(arch, capsys):
    if build.code_objects_missing():
        pytest.skip(_no_clang_reason())
    if build.find_tool(build.READELF_CANDIDATES) is None:
        pytest.skip("llvm-readelf not installed (apt-get install llvm-22)")
    meta = build.kernel_metadata(build.code_object_path(arch))
    missing = [k for k in build.KERNELS if k not in meta]
    assert not missing, f"{arch}: kernels missing from the code object: {missing}"
    lines = []
    for name in build.KERNELS:
        m = meta[name]
        assert m["wavefront_size"] == 64, (arch, name, m)
        if name in build.HOT_KERNELS:
            assert m["private_segment_fixed_size"] == 0, f"{arch} {name} uses scratch: {m}"
            assert m.get("vgpr_spill_count", 0) == 0, f"{arch} {name} spills VGPRs: {m}"
        lines.append(
            f"{arch} {name}: VGPR {m['vgpr_count']} SGPR {m['sgpr_count']} "
            f"LDS {m['group_segment_fixed_size']} B scratch {m['private_segment_fixed_size']} B"
        )
    with capsys.disabled():
        print("\n" + "\n".join(lines))


def test_amd_device_run():
    be = AmdGfx950Backend()
    av = be.probe() if be.mode == "hip" else None
    if av is None or not av.ok:
        pytest.skip(
            "needs a gfx950/gfx942 GPU with ROCm torch and hip-python "
            f"({av.reason if av is not None else 'portability mode set'}); "
            "the conformance suite runs the device path: pytest tests/conformance --backend amd-gfx950"
        )
    s = torch.randn(4, 5000, device="cuda")
    out = sparsetopk.topk(s, 64, backend="amd-gfx950")
    ref = sparsetopk.topk(s, 64, backend="reference")
    assert torch.equal(out.indices, ref.indices)


# ------------------------------------------------------------- logic on the CPU emulator
def _emu_or_skip(wave: int) -> EmuDriver:
    if build.find_tool(("g++", "clang++", "c++")) is None:
        pytest.skip("no host C++ compiler for the emulator build")
    return EmuDriver(wave)


def _run_topk(driver, scores, k, **kw):
    call = validation.make_topk_call(scores, k, return_values=True, **kw)
    idx = torch.full((call.rows, k), 12345, dtype=torch.int32)
    val = torch.full((call.rows, k), 7.0)
    kernels.launch_topk(driver, call, idx, val)
    ridx = torch.empty_like(idx)
    rval = torch.empty_like(val)
    ReferenceBackend().topk(call, ridx, rval)
    return idx, val, ridx, rval


def _same(order, idx, val, ridx, rval):
    if order == "any":  # same set, valid slots first
        return torch.equal(idx.sort(1).values, ridx.sort(1).values)
    return torch.equal(idx, ridx) and torch.equal(val.view(torch.int32), rval.view(torch.int32))


@pytest.mark.parametrize("wave", [64, 32])
@pytest.mark.parametrize("k", [1, 7, 64, 65, 700])
def test_emulated_topk_matches_reference(wave, k):
    drv = _emu_or_skip(wave)
    g = torch.Generator().manual_seed(wave * 1000 + k)
    rows, width = 5, 2600
    # narrow band with many exact ties, plus the specials
    s = 0.5 + torch.randint(0, 40, (rows, width), generator=g).float() * 2.0**-20
    s[0, 5] = float("nan")
    s[1, :50] = -0.0
    s[1, 50:60] = 0.0
    s[2, 7] = float("inf")
    s[2, 8] = float("-inf")
    s[3] = torch.arange(width).float()  # ascending: every column beats the bound
    lengths = torch.tensor([width, 1500, k, 0, 3000], dtype=torch.int64)
    starts = torch.tensor([0, 3, 100, 0, 2590], dtype=torch.int32)
    for j, dt in enumerate((torch.float32, torch.bfloat16, torch.float16)):
        tie = ("low", "high")[j % 2]
        order = ("rank", "index", "any")[j]
        for opts in (
            dict(),
            dict(lengths=lengths, starts=starts, force_begin=2, force_end=5),
            dict(lengths=3 * width - 4, index_scale=3, index_offset=1),
        ):
            out = _run_topk(drv, s.to(dt), k, tie_break=tie, order=order, **opts)
            assert _same(order, *out), (dt, tie, order, opts)


@pytest.mark.parametrize("wave", [64, 32])
def test_emulated_merge_matches_reference(wave):
    drv = _emu_or_skip(wave)
    g = torch.Generator().manual_seed(wave)
    for R, k_in, k in ((1, 40, 40), (3, 64, 100), (4, 1500, 700)):  # the last sorts in a global workspace
        idx = torch.randint(-1, 3000, (3, R, k_in), generator=g, dtype=torch.int32)
        val = torch.where(idx >= 0, (idx % 13).float(), torch.full(idx.shape, float("-inf")))
        for tie, order in (("low", "rank"), ("high", "index")):
            call = validation.make_merge_call(idx, val, k, tie_break=tie, order=order)
            oi = torch.full((3, k), 99, dtype=torch.int32)
            ov = torch.full((3, k), 9.0)
            kernels.launch_merge(drv, call, oi, ov)
            ri, rv = torch.empty_like(oi), torch.empty_like(ov)
            ReferenceBackend().merge(call, ri, rv)
            assert torch.equal(oi, ri) and torch.equal(ov, rv), (R, k_in, k, tie, order)


# ------------------------------------------------------------- the NVIDIA portability build
def test_cuda_portability_build_compiles():
    if build.find_tool(("nvcc",)) is None and not os.path.isfile("/usr/local/cuda/bin/nvcc"):
        pytest.skip("nvcc not installed: the NVIDIA portability build is checked on the GPU machine")
    cubin = build.build_cubin("sm_90")
    assert cubin.stat().st_size > 0
