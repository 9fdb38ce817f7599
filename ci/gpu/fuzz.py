"""Stress fuzz on a GPU: >= 10^6 rows per dtype per backend, 0 mismatches.

Each batch draws a shape, options and a score distribution built to hit the
hard paths (narrow bands where thousands of values sit within a few ulps of
the threshold, plateaus of equal values across slot k, NaN/±inf/±0, dirty
tails past each row's length, lengths from negative to past the buffer,
ragged starts, shard views, forced columns). Every row is compared with the
``reference`` backend on the same device (a sort over 64-bit keys, sharing
no code with the kernels), and a sample of rows with the NumPy oracle of
the conformance suite (tests/oracle.py), which shares no code with either.

    python ci/gpu/fuzz.py --backend nvidia-sm100 [--rows 1000000] [--seconds 60]

Exit status 1 on any mismatch. Prints rows checked per dtype.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch

import sparsetopk

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests"))
import oracle  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def draw_scores(g: torch.Generator, rows: int, width: int, dtype, dist: str, dev) -> torch.Tensor:
    if dist == "normal":
        x = torch.randn(rows, width, generator=g, device=dev)
    elif dist == "band":  # thousands within a few ulps of one value
        n = torch.randint(0, 6, (rows, width), generator=g, device=dev).to(torch.float32)
        x = 1.0 + n * torch.finfo(torch.float32).eps
    elif dist == "plateau":  # few distinct values: massive exact ties
        x = torch.randint(-2, 3, (rows, width), generator=g, device=dev).to(torch.float32) * 0.5
    else:  # "maxpool": max over blocks, like real indexer scores
        x = torch.randn(rows, width, 8, generator=g, device=dev).amax(-1)
    x = x.to(dtype)
    # specials sprinkled in
    m = torch.rand(rows, width, generator=g, device=dev)
    x = torch.where(m < 0.002, torch.tensor(float("nan"), dtype=dtype, device=dev), x)
    x = torch.where((m >= 0.002) & (m < 0.003), torch.tensor(float("inf"), dtype=dtype, device=dev), x)
    x = torch.where((m >= 0.003) & (m < 0.004), torch.tensor(float("-inf"), dtype=dtype, device=dev), x)
    x = torch.where((m >= 0.004) & (m < 0.006), torch.tensor(-0.0, dtype=dtype, device=dev), x)
    return x


def one_batch(backend: str, dtype, g, dev, rng: np.random.Generator, max_rows: int):
    width = int(rng.choice([17, 300, 1344, 2049, 4096, 9000, 40000, 150000]))
    rows = max(1, min(max_rows, (1 << 24) // max(width, 1)))
    if dev.type == "cpu":
        rows = max(1, rows // 256)
    pad = int(rng.choice([0, 0, 7, 64]))
    # 24 / 33 / 65-224: the warp kernel's 2 / 4 / 8 shares
    k = int(rng.choice([1, 5, 16, 24, 33, 64, 65, 100, 128, 144, 160, 176, 192, 224, 300, 2048, 4096]))
    k = min(k, 4096)
    dist = str(rng.choice(["normal", "band", "plateau", "maxpool"]))
    buf = draw_scores(g, rows, width + pad, dtype, dist, dev)
    scores = buf[:, :width]
    kw = dict(
        tie_break=str(rng.choice(["low", "high"])),
        order=str(rng.choice(["rank", "index", "any"])),
        return_values=True,
    )
    scale = int(rng.choice([1, 1, 1, 2, 3, 8]))
    if scale > 1:
        kw["index_scale"] = scale
        kw["index_offset"] = int(rng.integers(0, scale))
    gw = width * scale
    if rng.random() < 0.8:
        lo, hi = -5, gw + 50
        kw["lengths"] = torch.randint(lo, hi, (rows,), generator=g, device=dev).to(
            torch.int32 if rng.random() < 0.5 else torch.int64
        )
    if rng.random() < 0.3:
        kw["starts"] = torch.randint(-3, width + 3, (rows,), generator=g, device=dev).to(torch.int32)
    if rng.random() < 0.3:
        kw["force_begin"] = int(rng.integers(0, 5))
        kw["force_end"] = int(rng.integers(0, 70))
    meta = dict(width=width, rows=rows, k=k, dist=dist, dtype=str(dtype), **{a: b for a, b in kw.items() if not isinstance(b, torch.Tensor)})
    return scores, k, kw, meta


def compare(got, exp, order) -> torch.Tensor:
    """Per-row bool: rows that differ."""
    gi, gv, ei, ev = got.indices, got.values, exp.indices, exp.values
    if order == "any":
        gi, perm = torch.sort(gi.to(torch.int64).masked_fill(gi < 0, 1 << 40), dim=1)
        gv = torch.gather(gv, 1, perm)
        ei, perm = torch.sort(ei.to(torch.int64).masked_fill(ei < 0, 1 << 40), dim=1)
        ev = torch.gather(ev, 1, perm)
    bad = (gi != ei).any(1) | (gv.view(torch.int32) != ev.view(torch.int32)).any(1)
    if order == "any":  # layout rule: valid slots first
        nvalid = (got.indices >= 0).sum(1, keepdim=True)
        slot = torch.arange(got.indices.shape[1], device=gi.device).unsqueeze(0)
        bad |= ((got.indices >= 0) != (slot < nvalid)).any(1)
    return bad


def oracle_rows(scores, k, kw, rows_idx):
    """Check a few rows with the NumPy oracle of the conformance suite."""
    x = scores.detach().to(torch.float32).cpu().numpy()
    out = []
    for r in rows_idx:
        okw = {}
        for a in ("index_scale", "index_offset", "force_begin", "force_end", "tie_break", "order"):
            if a in kw:
                okw[a] = kw[a]
        if "lengths" in kw:
            okw["lengths"] = kw["lengths"][r : r + 1].cpu().numpy().astype(np.int64)
        if "starts" in kw:
            okw["starts"] = kw["starts"][r : r + 1].cpu().numpy().astype(np.int64)
        out.append(oracle.topk(x[r : r + 1], k, **okw))
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--backend", required=True)
    p.add_argument("--rows", type=int, default=1_000_000, help="rows per dtype")
    p.add_argument("--seconds", type=float, default=90.0, help="time cap per dtype")
    p.add_argument("--dtypes", default="float32,bfloat16,float16")
    p.add_argument("--json", default=None)
    a = p.parse_args()
    p_dev = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: harness self-check only
    dev = torch.device(p_dev)
    rng = np.random.default_rng(1234)
    g = torch.Generator(device=dev).manual_seed(1234)
    report = {"backend": a.backend, "device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu", "dtypes": {}}
    failed = 0
    for name in a.dtypes.split(","):
        dtype = DTYPES[name]
        done = bad_rows = batches = oracle_checked = 0
        rows_by_k: dict[int, int] = {}  # which kernels the rows reached (k picks them)
        t0 = time.time()
        while done < a.rows and time.time() - t0 < a.seconds:
            scores, k, kw, meta = one_batch(a.backend, dtype, g, dev, rng, 65536)
            got = sparsetopk.topk(scores, k, backend=a.backend, **kw)
            exp = sparsetopk.topk(scores, k, backend="reference", **kw)
            bad = compare(got, exp, kw["order"])
            nbad = int(bad.sum())
            if batches % 8 == 0:  # independent oracle on a few rows
                rows_idx = [0, scores.shape[0] - 1]
                for r, (oi, ov) in zip(rows_idx, oracle_rows(scores, k, kw, rows_idx)):
                    ref_i = exp.indices[r].cpu().numpy()
                    if kw["order"] == "any":
                        same = sorted(ref_i.tolist()) == sorted(np.asarray(oi).reshape(-1).tolist())
                    else:
                        same = np.array_equal(ref_i, np.asarray(oi).reshape(-1))
                    oracle_checked += 1
                    if not same:
                        print(f"ORACLE MISMATCH (reference vs numpy) {meta} row {r}", flush=True)
                        nbad += 1
            if nbad:
                r = int(bad.nonzero()[0, 0]) if bool(bad.any()) else 0
                print(f"MISMATCH {name} {meta}: {nbad} rows; first row {r}", flush=True)
                print("  got", got.indices[r, :8].tolist(), " exp", exp.indices[r, :8].tolist(), flush=True)
            bad_rows += nbad
            done += scores.shape[0]
            rows_by_k[k] = rows_by_k.get(k, 0) + scores.shape[0]
            batches += 1
        if dev.type == "cuda":
            torch.cuda.synchronize()
        secs = time.time() - t0
        print(f"FUZZ {a.backend} {name}: {done} rows in {batches} batches, {bad_rows} mismatches, "
              f"{oracle_checked} rows also checked by the NumPy oracle, {secs:.0f}s", flush=True)
        print(f"FUZZ {a.backend} {name} rows by k: {dict(sorted(rows_by_k.items()))}", flush=True)
        report["dtypes"][name] = dict(rows=done, batches=batches, mismatches=bad_rows, oracle_rows=oracle_checked, seconds=secs,
                                      rows_by_k={str(kk): n for kk, n in sorted(rows_by_k.items())})
        failed += bad_rows
        if done < a.rows:
            print(f"FUZZ {a.backend} {name}: time cap reached before {a.rows} rows", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
