"""Registry: discovery, named backends, env override, priorities, tuning tables."""

import json

import pytest
import torch

import sparsetopk
from sparsetopk import registry, tuning
from sparsetopk.protocol import Availability, Backend, Capabilities
from sparsetopk.reference import ReferenceBackend
from sparsetopk.validation import make_topk_call


class Fake(Backend):
    """Delegates to the reference; distinguishable by name."""

    def __init__(self, name, priority=10, k_max=None, ok=True, version="1.0"):
        self.name, self.priority, self.version = name, priority, version
        self._ok = ok
        self.calls = 0
        self.capabilities = Capabilities(vendor="test", archs=("any",), device_types=("cpu",), k_max=k_max)

    def probe(self):
        return Availability(self._ok, "" if self._ok else "no such hardware")

    def topk(self, call, indices, values):
        self.calls += 1
        ReferenceBackend().topk(call, indices, values)


@pytest.fixture
def fakes(monkeypatch):
    registry.reset()
    monkeypatch.delenv("SPARSETOPK_BACKEND", raising=False)
    added = []

    def add(b):
        registry.register(b)
        added.append(b.name)
        return b

    yield add
    for n in added:
        registry.unregister(n)
    registry.reset()


def test_reference_always_found():
    assert "reference" in registry.backends()
    assert registry.availability("reference")


def test_entry_points_are_the_discovery_mechanism():
    from importlib import metadata

    names = {ep.name for ep in metadata.entry_points(group="sparsetopk.backends")}
    assert "reference" in names
    assert names <= set(registry.backends()) | set(registry.load_errors())


def test_priority_then_k_limit(fakes):
    fast = fakes(Fake("fast", priority=100, k_max=8))
    call = make_topk_call(torch.randn(2, 50), 4)
    assert registry.select(call) is fast
    call = make_topk_call(torch.randn(2, 50), 9)
    assert registry.select(call).name != "fast"
    assert registry.select(call) in registry.candidates(call)


def test_interpreted_backends_serve_only_when_named(fakes):
    slow = Fake("interp", priority=10_000)
    slow.interpreted = True
    fakes(slow)
    call = make_topk_call(torch.randn(2, 50), 4)
    assert registry.select(call).name != "interp"
    assert registry.select(call, "interp") is slow


def test_unavailable_is_never_picked(fakes):
    fakes(Fake("ghost", priority=1000, ok=False))
    call = make_topk_call(torch.randn(2, 50), 4)
    assert registry.select(call).name != "ghost"
    with pytest.raises(ValueError, match="no such hardware"):
        sparsetopk.topk(torch.randn(2, 50), 4, backend="ghost")


def test_named_backend_that_cannot_serve_is_an_error(fakes):
    fakes(Fake("small", k_max=8))
    with pytest.raises(ValueError, match="k <= 8"):
        sparsetopk.topk(torch.randn(2, 50), 9, backend="small")


def test_env_var_forces_backend(fakes, monkeypatch):
    f = fakes(Fake("envpick", priority=-5))
    monkeypatch.setenv("SPARSETOPK_BACKEND", "envpick")
    sparsetopk.topk(torch.randn(2, 50), 4)
    assert f.calls == 1
    monkeypatch.setenv("SPARSETOPK_BACKEND", "missing")
    with pytest.raises(ValueError, match="SPARSETOPK_BACKEND"):
        sparsetopk.topk(torch.randn(2, 50), 4)


def _table(device, key, times, versions):
    entries = {key: {n: {"us": us, "version": versions[n]} for n, us in times.items()}}
    return tuning.TuningTable(device=device, entries=entries, meta={"created": "test"})


def test_tuning_table_overrides_priority(fakes, tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSETOPK_CACHE_DIR", str(tmp_path))
    hi = fakes(Fake("hiprio", priority=100, version="2.0"))
    lo = fakes(Fake("loprio", priority=1, version="3.0"))
    call = make_topk_call(torch.randn(8, 300), 16)
    key = tuning.bucket_key("topk", torch.float32, 16, 8, 300)
    tuning.save_table(_table("cpu", key, {"hiprio": 9.0, "loprio": 2.0}, {"hiprio": "2.0", "loprio": "3.0"}))
    registry.reset()
    registry.register(hi), registry.register(lo)
    assert registry.select(call) is lo
    # stale version: a miss, so priority decides again
    tuning.save_table(_table("cpu", key, {"hiprio": 9.0, "loprio": 2.0}, {"hiprio": "2.0", "loprio": "old"}))
    registry.reset()
    registry.register(hi), registry.register(lo)
    assert registry.select(call) is hi


def test_corrupt_or_foreign_tables_are_misses(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSETOPK_CACHE_DIR", str(tmp_path))
    tuning.cache_path().parent.mkdir(parents=True, exist_ok=True)
    tuning.cache_path().write_text("{not json")
    assert tuning.load_table(tuning.cache_path()) is None
    tuning.cache_path().write_text(json.dumps({"format": "sparsetopk-tuning", "format_version": 99, "device": "cpu", "entries": {}}))
    assert tuning.load_table(tuning.cache_path()) is None
    registry.reset()
    sparsetopk.topk(torch.randn(2, 5), 2)  # selection still works


def test_bucket_key_groups_nearby_shapes():
    a = tuning.bucket_key("topk", torch.float32, 16, 64, 1344)
    assert a == tuning.bucket_key("topk", "float32", 15, 50, 2000)
    assert a != tuning.bucket_key("topk", torch.bfloat16, 16, 64, 1344)
    assert a != tuning.bucket_key("topk", torch.float32, 16, 64, 4096)


def test_info_lists_backends(capsys):
    from sparsetopk.cli import main

    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "reference" in out and "picks on" in out


def test_order_specific_bucket_wins(fakes, tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSETOPK_CACHE_DIR", str(tmp_path))
    a = fakes(Fake("sorter", priority=5, version="1"))
    b = fakes(Fake("setter", priority=5, version="1"))
    base = ("topk", torch.float32, 16, 8, 300)
    entries = {
        tuning.bucket_key(*base): {"sorter": {"us": 1.0, "version": "1"}, "setter": {"us": 2.0, "version": "1"}},
        tuning.bucket_key(*base, "any"): {"sorter": {"us": 3.0, "version": "1"}, "setter": {"us": 2.0, "version": "1"}},
    }
    tuning.save_table(tuning.TuningTable(device="cpu", entries=entries))
    registry.reset()
    registry.register(a), registry.register(b)
    assert registry.select(make_topk_call(torch.randn(8, 300), 16, order="any")) is b
    assert registry.select(make_topk_call(torch.randn(8, 300), 16, order="rank")) is a  # falls back to the order-free bucket
