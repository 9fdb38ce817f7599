"""`sparsetopk bench` / `sparsetopk tune` on the CPU (tiny grid), and their building blocks."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from sparsetopk import registry, tuning
from sparsetopk.bench import bench_main, data, runner, scenarios, tune, tune_main
from sparsetopk.validation import make_topk_call

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARSETOPK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SPARSETOPK_BACKEND", raising=False)
    monkeypatch.setattr(tuning, "shipped_tables", lambda: [])
    registry.reset()
    yield
    registry.reset()


CPU = ["--device", "cpu", "--repeats", "2"]


# ---------------------------------------------------------------------------
# the commands


def test_bench_quick_writes_json_plots_and_markdown(tmp_path, capsys):
    js, plots, md = tmp_path / "out" / "bench.json", tmp_path / "out" / "plots", tmp_path / "out" / "BENCHMARKS.md"
    argv = ["--quick", *CPU, "--json", str(js), "--plots", str(plots), "--markdown", str(md), "--check"]
    assert bench_main(argv) == 0
    printed = capsys.readouterr().out
    assert "registry regret" in printed and "CPU-only run" in printed

    doc = json.loads(js.read_text())
    assert doc["format"] == "sparsetopk-bench" and doc["format_version"] == 1
    assert doc["device"]["type"] == "cpu" and doc["device"]["name"] == "cpu"
    assert doc["command"].startswith("sparsetopk bench --quick")
    assert doc["created"].endswith("Z")
    v = doc["versions"]
    assert v["torch"] == torch.__version__ and v["sparsetopk"] and "reference" in v["backends"]
    assert doc["method"]["timer"] == "wall" and doc["method"]["copy_bw_GBps"] > 0
    cells = doc["cells"]
    assert len(cells) == len(scenarios.quick_grid())
    assert {c["scenario"] for c in cells} == set(scenarios.SCENARIOS)
    assert {c["op"] for c in cells} == {"topk", "merge"}
    for c in cells:
        assert not c.get("error"), c
        ref = c["results"]["reference"]
        assert ref["kind"] == "backend" and ref["us"] > 0 and ref["check"] == "ok"
        base = c["results"]["torch.topk"]
        assert base["kind"] == "baseline" and base["us"] > 0
        assert ref["speedup_vs_torch"] == pytest.approx(base["us"] / ref["us"])
        assert c["floor_bytes"] > 0 and c["floor_us"] > 0 and 0 < ref["pct_bw"]
        # the pick may be a backend skipped here (e.g. Triton under TRITON_INTERPRET=1): then no regret
        assert c["pick"] in c["candidates"] and "reference" in c["candidates"]
        if c["pick"] in c["results"]:
            assert c["regret"] >= 1.0
        else:
            assert c["regret"] is None and c["pick"] in c["skipped"]
    s = doc["summary"]
    if s["regret_cells"]:
        assert s["regret_geomean"] >= 1.0 and s["regret_worst"] >= s["regret_geomean"]

    pytest.importorskip("matplotlib")
    pngs = sorted(p.name for p in plots.glob("*.png"))
    assert "bandwidth.png" in pngs and "speedup-anchor.png" in pngs
    for p in plots.glob("*.png"):
        assert p.read_bytes()[:8] == PNG_MAGIC
    text = md.read_text()
    assert "# sparsetopk benchmarks" in text and "do not edit by hand" in text
    assert "](plots/bandwidth.png)" in text and "](bench.json)" in text
    assert "| 64x1344 | topk | 16 | rank | float32 | normal |" in text
    assert doc["command"] in text

    # BENCHMARKS.md is regenerated from the JSON, not edited: rendering again gives the same text
    md2 = tmp_path / "out" / "again.md"
    assert bench_main(["--render", str(js), "--markdown", str(md2), "--plots", str(plots)]) == 0
    assert md2.read_text().replace("(bench.json)", "") == text.replace("(bench.json)", "")


def test_bench_filters_and_errors(tmp_path):
    js = tmp_path / "b.json"
    assert bench_main(["--quick", *CPU, "--scenario", "icp", "--op", "merge", "--no-baselines", "--json", str(js)]) == 0
    cells = json.loads(js.read_text())["cells"]
    assert [c["op"] for c in cells] == ["merge"] and "torch.topk" not in cells[0]["results"]
    assert bench_main(["--quick", *CPU, "--dtype", "bf16", "--backend", "reference", "--json", str(js)]) == 0
    cells = json.loads(js.read_text())["cells"]
    assert cells and all(c["dtype"] == "bfloat16" for c in cells if c["op"] == "topk")
    assert bench_main(["--quick", *CPU, "--backend", "no-such", "--no-baselines", "--scenario", "anchor",
                       "--json", str(js)]) == 0
    c = json.loads(js.read_text())["cells"][0]
    assert c["results"] == {} and "filtered out" in c["skipped"]["reference"] and c["regret"] is None
    with pytest.raises(SystemExit):
        bench_main(["--quick", *CPU, "--scenario", "nope"])
    assert bench_main(["--quick", *CPU, "--dist", "band", "--scenario", "anchor"]) == 2  # no cell matches


def test_bench_k_filter(tmp_path):
    js = tmp_path / "k.json"
    assert bench_main(["--quick", *CPU, "--no-baselines", "--k", "128", "--json", str(js)]) == 0
    cells = json.loads(js.read_text())["cells"]
    assert [c["k"] for c in cells] == [128]  # the quick grid's one k = 128 cell
    assert bench_main(["--quick", *CPU, "--k", "7"]) == 2  # no cell matches
    with pytest.raises(SystemExit):
        bench_main(["--quick", *CPU, "--k", "x"])
    full = scenarios.full_grid()
    dec64 = [c for c in full if c.scenario == "decode" and c.k == 64]
    assert {c.label for c in dec64} == {"512x1344", "4096x4096", "16384x8192"} and len(dec64) == 12


def test_bench_budget_skips_but_records(tmp_path):
    js = tmp_path / "b.json"
    assert bench_main(["--quick", *CPU, "--budget", "0", "--json", str(js)]) == 0
    cells = json.loads(js.read_text())["cells"]
    assert len(cells) == len(scenarios.quick_grid())
    assert all("time budget" in c.get("error", "") for c in cells[1:])


def test_tune_quick_writes_a_cache_the_registry_reads(tmp_path):
    js = tmp_path / "tune.json"
    assert tune_main(["--quick", *CPU, "--json", str(js), "--quiet"]) == 0
    t = tuning.load_table(tuning.cache_path())
    assert t is not None and t.device == "cpu" and t.meta["command"].startswith("sparsetopk tune --quick")
    assert t.meta["versions"]["backends"]["reference"]
    cells = json.loads(js.read_text())["cells"]
    assert set(t.entries) == {tune.bucket_of(c) for c in cells}
    for rec in t.entries.values():
        assert rec["reference"]["us"] > 0 and rec["reference"]["version"] == registry.backends()["reference"].version
    # the registry reads it: the timing of a quick cell's bucket is visible through candidates' ordering
    registry.reset()
    call = make_topk_call(torch.randn(64, 1344), 16)
    key = tuning.bucket_key("topk", torch.float32, 16, 64, 1344, "rank")
    assert key in t.entries
    assert registry._timings(call)["reference"] == pytest.approx(t.entries[key]["reference"]["us"])
    # a second tune on another scenario keeps the buckets it did not measure
    n = len(t.entries)
    assert tune_main(["--quick", *CPU, "--scenario", "anchor", "--quiet"]) == 0
    assert len(tuning.load_table(tuning.cache_path()).entries) == n
    # --output elsewhere (shipped defaults), --fresh
    out = tmp_path / "shipped" / f"{tuning.device_slug('cpu')}.json"
    assert tune_main(["--from-json", str(js), "--output", str(out), "--fresh"]) == 0
    shipped = tuning.load_table(out)
    assert shipped.device == "cpu" and set(shipped.entries) == set(t.entries)
    assert "source" in shipped.meta


def test_cli_dispatch_runs_bench_as_a_subprocess(tmp_path):
    js = tmp_path / "cli.json"
    env = dict(__import__("os").environ, SPARSETOPK_CACHE_DIR=str(tmp_path / "c"))
    r = subprocess.run([sys.executable, "-m", "sparsetopk", "bench", "--quick", *CPU, "--scenario", "anchor",
                        "--quiet", "--json", str(js)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(js.read_text())["cells"][0]["results"]["reference"]["us"] > 0


# ---------------------------------------------------------------------------
# building blocks


def test_grids_hold_the_issue_cells():
    names = {c.name for c in scenarios.full_grid()}
    for want in (
        "anchor:topk 64x1344 k=16 rank float32 normal",
        "anchor:topk 16384x8192 k=16 rank float32 normal",
        "anchor:topk 4x40K/1M k=2048 any float32 normal",
        "anchor:topk 64x1M/1M k=2048 index float32 normal",
        "anchor:topk 4x150K/1M k=2048 rank bfloat16 band",
    ):
        assert want in names
    cells = scenarios.full_grid()
    assert {c.scenario for c in cells} == set(scenarios.SCENARIOS)
    dec = [c for c in cells if c.scenario == "decode"]
    assert {c.rows for c in dec} == {64, 512, 4096, 16384} and min(c.width for c in dec) == 672
    assert max(c.width for c in dec) == 8192
    # priority order: the fp32 N(0,1) anchors come first
    ordered = scenarios.select_cells(cells)
    assert ordered[0].scenario == "anchor" and ordered[0].dtype == "float32" and ordered[0].dist == "normal"


def _cell(name):
    return next(c for c in scenarios.full_grid() if c.name == name)


def test_geometry_of_serving_cells():
    g = scenarios.geometry(_cell("anchor:topk 4x40K/1M k=2048 any float32 normal"))
    assert g.starts is None and list(g.lengths) == [40960] * 4 and g.extent == 40960
    dec = next(c for c in scenarios.full_grid() if c.scenario == "decode" and c.width == 1344)
    g = scenarios.geometry(dec)
    assert g.lengths.min() >= 672 and g.lengths.max() <= 1344
    assert np.array_equal(g.lengths, scenarios.geometry(dec).lengths)  # deterministic
    dsa = next(c for c in scenarios.full_grid() if c.label == "4req+mtp1")
    g = scenarios.geometry(dsa)
    assert dsa.rows == 8 and g.lengths.min() >= 40 * 1024 - 1 and g.lengths.max() <= 1 << 20
    assert all(g.lengths[2 * i + 1] == g.lengths[2 * i] + 1 for i in range(4))  # 1 + MTP rows per request
    pre = next(c for c in scenarios.full_grid() if c.scenario == "prefill" and "packed" in c.label)
    g = scenarios.geometry(pre)
    assert g.starts is not None and len(set(g.starts.tolist())) == 4 and g.extent <= pre.width
    assert np.all(g.starts + g.valid_cols <= pre.width)
    shard = next(c for c in scenarios.full_grid() if c.scenario == "icp" and c.op == "topk" and c.index_scale == 4)
    g = scenarios.geometry(shard)
    # global length L over R=4 shards, offset 3: ceil((L - 3) / 4) buffer columns
    assert np.array_equal(g.valid_cols, np.clip((g.lengths - 3 + 3) // 4, 0, shard.width))


@pytest.mark.parametrize("name", ["anchor:topk 4x40K/1M k=2048 any float32 normal",
                                  "decode:topk 64x1344 k=16 rank bfloat16 band"])
def test_rotating_views_have_disjoint_valid_regions(name):
    cell = _cell(name)
    if cell.op == "topk" and cell.width > 100_000:  # shrink the 1M buffer so the test stays small on CPU
        import dataclasses

        cell = dataclasses.replace(cell, width=1 << 17, lengths=("fixed", 10_000))
    n = 5
    inp = data.build_inputs(cell, n, torch.device("cpu"))
    geo = scenarios.geometry(cell)
    seen = set()
    base = inp.views[0]["scores"].untyped_storage().data_ptr()
    for v in inp.views:
        s = v["scores"]
        assert s.shape == (cell.rows, cell.width) and s.stride() == (cell.width, 1)
        off = s.storage_offset()
        for r in range(cell.rows):
            lo = off + r * cell.width
            cols = set(range(lo, lo + int(geo.valid_cols[r])))
            assert not (cols & seen)
            seen |= cols
        assert s.untyped_storage().data_ptr() == base
    assert inp.rotate_bytes == n * data.valid_score_bytes(cell)


def test_views_plan_exceeds_l2_on_cuda_only():
    cell = _cell("anchor:topk 64x1344 k=16 rank float32 normal")
    l2 = 60 << 20
    n = data.plan_views(cell, l2, 2.5, 4096, 8 << 30, torch.device("cuda"))
    assert n * data.valid_score_bytes(cell) >= 2.5 * l2
    assert data.plan_views(cell, l2, 2.5, 4096, 8 << 30, torch.device("cpu")) == 1
    big = _cell("anchor:topk 16384x8192 k=16 rank float32 normal")
    assert data.plan_views(big, l2, 2.5, 4096, 8 << 30, torch.device("cuda")) == 1
    # the memory cap wins over the L2 rule
    assert data.plan_views(cell, l2, 2.5, 4096, 4 << 20, torch.device("cuda")) * 344064 <= 4 << 20


def test_band_distribution_is_narrow():
    x = torch.empty(20000)
    data.fill_(x, "band", 1)
    y = torch.empty(20000)
    data.fill_(y, "normal", 1)
    assert 1.5 < x.mean() < 3.0 and x.std() < 0.6 * y.std()


def test_merge_inputs_are_valid_shard_lists():
    cell = next(c for c in scenarios.quick_grid() if c.op == "merge")
    v = data.build_inputs(cell, 2, torch.device("cpu")).views[1]
    idx, val = v["indices"], v["values"]
    assert idx.shape == (cell.rows, cell.shards, cell.k_in) and idx.dtype == torch.int32
    for s in range(cell.shards):
        ok = idx[:, s] >= 0
        assert torch.all(idx[:, s][ok] % cell.shards == s)
        assert torch.all(torch.isinf(val[:, s][~ok]))
    for r in range(cell.rows):
        flat = idx[r][idx[r] >= 0]
        assert flat.unique().numel() == flat.numel()


def test_derive_and_summary():
    rec = {"name": "c", "floor_us": 2.0, "pick": "b", "results": {
        "a": {"kind": "backend", "us": 4.0}, "b": {"kind": "backend", "us": 5.0},
        "c": {"kind": "backend", "error": "boom"}, "torch.topk": {"kind": "baseline", "us": 10.0}}}
    runner.derive(rec)
    assert rec["best"] == "a" and rec["regret"] == pytest.approx(1.25)
    assert rec["results"]["a"]["speedup_vs_torch"] == pytest.approx(2.5)
    assert rec["results"]["b"]["pct_bw"] == pytest.approx(40.0)
    rec2 = {"name": "d", "pick": "a", "results": {"a": {"kind": "backend", "us": 1.0}}}
    runner.derive(rec2)
    s = runner.summarize([rec, rec2, {"name": "e", "error": "skipped", "results": {}}])
    assert s["regret_geomean"] == pytest.approx(math.sqrt(1.25)) and s["regret_worst"] == pytest.approx(1.25)
    assert s["regret_worst_cell"] == "c" and s["skipped_cells"] == 1 and s["backend_errors"] == 1
    rec3 = {"name": "f", "pick": "zzz", "results": {"a": {"kind": "backend", "us": 1.0}}}
    runner.derive(rec3)
    assert rec3["regret"] is None  # the pick was not timed: no regret claimed


def test_tune_buckets_leave_out_partial_backends():
    def cell(rows, times):
        return {"op": "topk", "dtype": "float32", "k": 16, "rows": rows, "width": 1344, "results": {
            n: ({"kind": "backend", "us": t, "version": "1"} if t else {"kind": "backend", "error": "x"})
            for n, t in times.items()} | {"torch.topk": {"kind": "baseline", "us": 0.1}}}

    cells = [cell(40, {"a": 2.0, "b": 1.0}), cell(60, {"a": 8.0, "b": None}), cell(4000, {"a": 1.0, "b": 3.0})]
    e = tune.table_entries(cells)
    k1 = tuning.bucket_key("topk", "float32", 16, 64, 1344)
    assert set(e[k1]) == {"a"} and e[k1]["a"]["us"] == pytest.approx(4.0) and e[k1]["a"]["cells"] == 2
    k2 = tuning.bucket_key("topk", "float32", 16, 4096, 1344)
    assert e[k2]["b"]["us"] == 3.0 and "torch.topk" not in e[k2]


def test_timing_helpers_on_cpu():
    from sparsetopk.bench import timing

    calls = []
    r = timing.time_cpu(lambda i: calls.append(i), 3, repeats=4)
    assert r["us"] >= 0 and r["timer"] == "wall" and calls == [0, 0, 1, 2, 0]
    bw = timing.copy_bandwidth(torch.device("cpu"), nbytes=1 << 20, repeats=2)
    assert bw["bytes"] == 2 << 20 and bw["bytes_per_s"] > 0


class _FakeCuda:
    """Just enough of torch.cuda for the CUDA timer's Python logic to run on a CPU machine."""

    def __init__(self, fail_capture=False):
        self.clock = 0.0
        self.capturing = None
        self.fail_capture = fail_capture
        outer = self

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self, stream=None):
                self.t = outer.clock

            def synchronize(self):
                pass

            def elapsed_time(self, other):
                return other.t - self.t

        class Graph:
            def __init__(self):
                self.calls = []

            def replay(self):
                for f in self.calls:
                    f()

        class graph:
            def __init__(self, g):
                self.g = g

            def __enter__(self):
                outer.capturing = self.g

            def __exit__(self, *exc):
                outer.capturing = None
                if outer.fail_capture:
                    raise RuntimeError("operation not permitted when stream is capturing")

        class Stream:
            def wait_stream(self, other):
                pass

        self.Event, self.CUDAGraph, self.graph, self.Stream = Event, Graph, graph, Stream

    def call(self, us):
        def run():
            self.clock += us / 1e3  # ms

        if self.capturing is not None:
            self.capturing.calls.append(run)
        else:
            run()

    def install(self, monkeypatch):
        import contextlib

        monkeypatch.setattr(torch.cuda, "Event", self.Event)
        monkeypatch.setattr(torch.cuda, "CUDAGraph", self.CUDAGraph)
        monkeypatch.setattr(torch.cuda, "graph", self.graph)
        monkeypatch.setattr(torch.cuda, "Stream", lambda *a, **k: self.Stream())
        monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
        monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: self.Stream())
        monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)


def test_cuda_timer_logic_with_a_fake_device(monkeypatch):
    from sparsetopk.bench import timing

    fake = _FakeCuda()
    fake.install(monkeypatch)
    seen = []

    def fn(i):
        seen.append(i)
        fake.call(5.0 + (i % 4))  # 5..8 us per call, by view

    r = timing.time_cuda(fn, n_views=4, calls=16, target_s=0.001)
    assert r["timer"] == "cuda-graph" and r["calls_per_graph"] == 16
    assert r["us_graph"] == pytest.approx(6.5) and r["us_eager"] == pytest.approx(6.5) and r["us"] == r["us_graph"]
    assert set(seen) == set(range(16))  # call i uses view i % n_views (the caller maps it)
    # a slow call shrinks the graph, not the truth
    r = timing.time_cuda(lambda i: fake.call(50_000.0), n_views=64, calls=64, target_s=0.001)
    assert r["calls_per_graph"] == 4 and r["us"] == pytest.approx(50_000.0)
    # not capturable: recorded, eager time used
    bad = _FakeCuda(fail_capture=True)
    bad.install(monkeypatch)
    r = timing.time_cuda(lambda i: bad.call(3.0), n_views=2, calls=16, target_s=0.001)
    assert "graph_error" in r and r["timer"] == "cuda-eager" and r["us"] == pytest.approx(3.0)


class _Broken:
    """A registered backend that serves CPU topk and always raises: must be recorded, never fatal."""

    name = "broken"
    version = "0.0.1"
    priority = 100  # the registry picks it when no table says otherwise
    interpreted = False

    def __init__(self):
        from sparsetopk.protocol import Capabilities

        self.capabilities = Capabilities(vendor="any", archs=("any",), device_types=("cpu",), ops=("topk",))

    def probe(self):
        from sparsetopk.protocol import Availability

        return Availability(True)

    def supports(self, call):
        from sparsetopk.protocol import capability_mismatch

        return capability_mismatch(self.capabilities, call)

    def topk(self, call, indices, values):
        raise RuntimeError("kernel exploded")


def test_a_failing_backend_is_recorded_and_left_out_of_the_table(tmp_path, monkeypatch):
    for name in list(registry.backends()):  # hermetic: the reference and the broken one only
        if name != "reference":
            registry.unregister(name)
    registry.register(_Broken())
    monkeypatch.setattr(runner, "plan_views", lambda *a, **k: 3)  # exercise rotation through several views
    js = tmp_path / "b.json"
    assert bench_main(["--quick", *CPU, "--scenario", "anchor,icp", "--json", str(js), "--quiet"]) == 0
    doc = json.loads(js.read_text())
    topk_cells = [c for c in doc["cells"] if c["op"] == "topk"]
    assert topk_cells and all(c["n_views"] == 3 for c in doc["cells"])
    for c in topk_cells:
        assert "kernel exploded" in c["results"]["broken"]["error"]
        assert c["results"]["reference"]["us"] > 0 and c["pick"] == "broken" and c.get("pick_failed")
        assert c["regret"] is None
    assert doc["summary"]["pick_failed_cells"] == len(topk_cells)
    merge = next(c for c in doc["cells"] if c["op"] == "merge")
    assert "broken" not in merge["results"] and merge["regret"] == pytest.approx(1.0)
    # the table from these timings never lists the failing backend
    out = tmp_path / "t.json"
    assert tune_main(["--from-json", str(js), "--output", str(out)]) == 0
    t = tuning.load_table(out)
    assert all("broken" not in rec for rec in t.entries.values())
    assert all("reference" in rec for rec in t.entries.values())
    registry.unregister("broken")
