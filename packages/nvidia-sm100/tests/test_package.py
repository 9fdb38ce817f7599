"""CPU-side checks of the nvidia-sm100 package: entry point, probe, capabilities.
(The kernels themselves are checked on a GPU by ci/gpu/nvidia_dev.sh and the
conformance suite.)"""
import importlib.metadata as md

import pytest

pytest.importorskip("sparsetopk_nvidia_sm100")


def _ep():
    eps = [e for e in md.entry_points(group="sparsetopk.backends") if e.name == "nvidia-sm100"]
    assert eps, "nvidia-sm100 entry point not registered"
    return eps[0]


def test_entry_point_loads_repeatedly():
    # a submodule named like the entry-point function would shadow it after the
    # first load (registry.reset() re-loads entry points)
    a = _ep().load()()
    import sparsetopk_nvidia_sm100._backend  # noqa: F401

    b = _ep().load()()
    assert a is b
    assert a.name == "nvidia-sm100"
    assert a.capabilities.k_max == 4096
    assert "sm_90a" in a.capabilities.archs and "sm_100a" in a.capabilities.archs


def test_probe_gives_a_reason():
    import torch

    b = _ep().load()()
    av = b.probe()
    if not torch.cuda.is_available():
        assert not av.ok and av.reason
    assert isinstance(av.reason, str)


def test_registry_finds_it():
    import sparsetopk.registry as r

    r.reset()
    assert "nvidia-sm100" in r.backends()
    r.reset()
    assert r.backends()["nvidia-sm100"].name == "nvidia-sm100"
