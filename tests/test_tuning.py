"""Tuning tables (format v1): buckets, round trip, invalidation, and the registry's use of them."""

from __future__ import annotations

import json
import os

import pytest
import torch

from sparsetopk import registry, tuning
from sparsetopk.protocol import Backend, Capabilities
from sparsetopk.reference import ReferenceBackend
from sparsetopk.validation import make_topk_call


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSETOPK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SPARSETOPK_BACKEND", raising=False)
    monkeypatch.setattr(tuning, "shipped_tables", lambda: [])  # only what a test writes
    registry.reset()
    yield
    registry.reset()


# ---------------------------------------------------------------------------
# buckets


@pytest.mark.parametrize(
    "k,rows,width,expect",
    [
        (1, 1, 1, "k0|r0|w0"),
        (16, 64, 1344, "k4|r6|w11"),
        (17, 65, 2048, "k5|r7|w11"),
        (2048, 4, 40960, "k11|r2|w16"),
        (2048, 16, 1 << 20, "k11|r4|w20"),
        (16, 4096, 4097, "k4|r12|w13"),
    ],
)
def test_bucket_key_rounds_up_to_powers_of_two(k, rows, width, expect):
    assert tuning.bucket_key("topk", torch.float32, k, rows, width) == f"topk|float32|{expect}"


def test_bucket_key_dtype_forms_agree():
    assert tuning.bucket_key("topk", torch.bfloat16, 16, 64, 1344) == tuning.bucket_key("topk", "bfloat16", 16, 64, 1344)
    assert tuning.bucket_key("merge", torch.float32, 16, 8, 32).startswith("merge|float32|")


def test_nearby_shapes_share_a_bucket_and_far_ones_do_not():
    a = tuning.bucket_key("topk", "float32", 16, 3000, 1100)
    b = tuning.bucket_key("topk", "float32", 16, 4096, 2048)
    c = tuning.bucket_key("topk", "float32", 16, 4097, 2048)
    assert a == b != c


# ---------------------------------------------------------------------------
# files


def _table(device="cpu", entries=None):
    return tuning.TuningTable(device=device, entries=entries or {
        "topk|float32|k4|r6|w11": {"reference": {"us": 3.5, "version": "0.1.0"}}}, meta={"command": "test"})


def test_cache_path_follows_env(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSETOPK_CACHE_DIR", str(tmp_path / "x"))
    assert tuning.cache_path() == tmp_path / "x" / "tuning-v1.json"
    monkeypatch.delenv("SPARSETOPK_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tuning.cache_path() == tmp_path / "xdg" / "sparsetopk" / "tuning-v1.json"


def test_round_trip_is_atomic_and_exact(tmp_path):
    t = _table()
    p = tuning.save_table(t)
    assert p == tuning.cache_path()
    assert [f.name for f in p.parent.iterdir()] == ["tuning-v1.json"]  # no temp file left behind
    back = tuning.load_table(p)
    assert back.device == "cpu" and back.entries == t.entries and back.meta["command"] == "test"
    d = json.loads(p.read_text())
    assert d["format"] == "sparsetopk-tuning" and d["format_version"] == 1


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{not json",
        "[]",
        "null",
        json.dumps({"format": "sparsetopk-tuning", "format_version": 2, "device": "cpu", "entries": {}}),
        json.dumps({"format": "other", "format_version": 1, "device": "cpu", "entries": {}}),
        json.dumps({"format": "sparsetopk-tuning", "format_version": 1, "device": "cpu", "entries": []}),
        json.dumps({"format": "sparsetopk-tuning", "format_version": 1, "device": 7, "entries": {}}),
    ],
)
def test_invalid_files_are_misses_not_crashes(tmp_path, text):
    p = tmp_path / "t.json"
    p.write_text(text)
    assert tuning.load_table(p) is None


def test_missing_file_is_a_miss(tmp_path):
    assert tuning.load_table(tmp_path / "nope.json") is None
    assert tuning.tables_for_device("cpu") == []


def test_stale_and_malformed_entries_are_ignored():
    t = _table(entries={"b": {
        "fresh": {"us": 1.0, "version": "1"},
        "stale": {"us": 0.5, "version": "0.9"},
        "no-us": {"version": "1"},
        "bad-us": {"us": "fast", "version": "1"},
        "nan": {"us": float("nan"), "version": "1"},
        "uninstalled": {"us": 0.1, "version": "1"},
        "not-a-dict": 3,
    }})
    versions = {"fresh": "1", "stale": "1", "no-us": "1", "bad-us": "1", "nan": "1", "not-a-dict": "1"}
    assert t.timings("b", versions) == {"fresh": 1.0}
    assert t.timings("other-bucket", versions) == {}


def test_tables_for_device_user_cache_first_then_shipped(monkeypatch):
    tuning.save_table(_table("cpu"))
    shipped_same = _table("cpu", {"k": {}})
    shipped_other = _table("NVIDIA H200")
    monkeypatch.setattr(tuning, "shipped_tables", lambda: [shipped_other, shipped_same])
    got = tuning.tables_for_device("cpu")
    assert len(got) == 2 and got[0].source == str(tuning.cache_path()) and got[1] is shipped_same
    assert tuning.tables_for_device("NVIDIA H200") == [shipped_other]
    assert tuning.tables_for_device("AMD Instinct MI355X") == []


def test_device_slug():
    assert tuning.device_slug("NVIDIA H200") == "nvidia-h200"
    assert tuning.device_slug("AMD Instinct MI355X (gfx950)") == "amd-instinct-mi355x-gfx950"
    assert tuning.device_slug("cpu") == "cpu"


def test_shipped_tables_are_valid_and_name_their_device():
    # the real shipped folder (not the fixture's stub): every file must load and say where it was measured
    from importlib import resources

    folder = resources.files("sparsetopk") / "tuning"
    if not folder.is_dir():
        pytest.skip("no shipped tables yet")
    for entry in folder.iterdir():
        if entry.name.endswith(".json"):
            t = tuning.load_table(entry)
            assert t is not None, entry.name
            assert t.device and entry.name == tuning.device_slug(t.device) + ".json"


# ---------------------------------------------------------------------------
# the registry's use of tables


class FakeBackend(Backend):
    """Serves CPU topk by delegating to the reference; a stand-in for a vendor backend."""

    name = "fake-fast"
    version = "9.9"
    priority = 10  # without timings it would win on priority
    capabilities = Capabilities(vendor="any", archs=("any",), device_types=("cpu",), ops=("topk",))

    def topk(self, call, indices, values):
        ReferenceBackend().topk(call, indices, values)


def _only_reference_and_fake():
    """Forget caches (re-reading tables) and keep just the reference and the fake: hermetic
    whatever vendor packages are installed here."""
    registry.reset()
    for name in list(registry.backends()):
        if name != "reference":
            registry.unregister(name)
    b = FakeBackend()
    registry.register(b)
    return b


@pytest.fixture
def fake():
    yield _only_reference_and_fake()
    registry.reset()


def _call(rows=64, width=1344, k=16):
    return make_topk_call(torch.randn(rows, width), k)


def _write(entries, device="cpu"):
    tuning.save_table(tuning.TuningTable(device=device, entries=entries))
    _only_reference_and_fake()


KEY = tuning.bucket_key("topk", torch.float32, 16, 64, 1344)


def test_without_a_table_priority_decides(fake):
    assert registry.select(_call()).name == "fake-fast"


def test_table_making_the_reference_fastest_wins_over_priority(fake):
    _write({KEY: {"reference": {"us": 1.0, "version": ReferenceBackend.version},
                  "fake-fast": {"us": 2.0, "version": "9.9"}}})
    assert registry.select(_call()).name == "reference"
    assert [b.name for b in registry.candidates(_call())][:2] == ["reference", "fake-fast"]
    # another bucket is untouched: priority again
    assert registry.select(_call(rows=4096)).name == "fake-fast"


def test_table_making_the_fake_fastest(fake):
    _write({KEY: {"reference": {"us": 5.0, "version": ReferenceBackend.version},
                  "fake-fast": {"us": 2.0, "version": "9.9"}}})
    assert registry.select(_call()).name == "fake-fast"


def test_stale_version_is_a_miss(fake):
    _write({KEY: {"reference": {"us": 1.0, "version": "0.0.0-old"},
                  "fake-fast": {"us": 2.0, "version": "9.9"}}})
    # reference's timing is stale: only fake-fast has a fresh timing, so it leads
    assert registry.select(_call()).name == "fake-fast"
    _write({KEY: {"reference": {"us": 1.0, "version": ReferenceBackend.version},
                  "fake-fast": {"us": 0.5, "version": "9.8"}}})
    assert registry.select(_call()).name == "reference"


def test_table_for_another_device_is_ignored(fake):
    _write({KEY: {"reference": {"us": 1.0, "version": ReferenceBackend.version}}}, device="NVIDIA H200")
    assert registry.select(_call()).name == "fake-fast"


def test_corrupt_cache_falls_back_to_priority(fake):
    p = tuning.cache_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text('{"format": "sparsetopk-tuning", "format_version": 1, "device": "cpu", "entries": {')
    _only_reference_and_fake()
    assert registry.select(_call()).name == "fake-fast"


def test_user_cache_wins_over_shipped(fake, monkeypatch):
    shipped = tuning.TuningTable(device="cpu", entries={KEY: {
        "reference": {"us": 1.0, "version": ReferenceBackend.version},
        "fake-fast": {"us": 2.0, "version": "9.9"}}})
    monkeypatch.setattr(tuning, "shipped_tables", lambda: [shipped])
    _only_reference_and_fake()
    assert registry.select(_call()).name == "reference"  # shipped defaults alone
    _write({KEY: {"reference": {"us": 3.0, "version": ReferenceBackend.version}}})
    # user cache says reference 3.0; fake-fast's 2.0 still comes from the shipped table
    assert registry.select(_call()).name == "fake-fast"


def test_named_backend_ignores_the_table(fake):
    _write({KEY: {"reference": {"us": 1.0, "version": ReferenceBackend.version},
                  "fake-fast": {"us": 2.0, "version": "9.9"}}})
    assert registry.select(_call(), backend="fake-fast").name == "fake-fast"


def test_no_temp_files_after_many_saves():
    for i in range(5):
        tuning.save_table(_table(entries={f"b{i}": {}}))
    assert sorted(os.listdir(tuning.cache_path().parent)) == ["tuning-v1.json"]
