"""sparsetopk.distributed.topk on CPU with gloo, world sizes 2, 3 and 4.

Each test spawns its own process group (torch.multiprocessing, spawn start
method, TCP rendezvous on a free 127.0.0.1 port), bounded by a deadline.
Every rank builds the same global rows, takes its shard (strided or blocked)
and runs many scenarios; each result is compared, on every rank, with an
independent NumPy/Python oracle computed on the unsharded rows (SPEC §1 read
directly; no sparsetopk code is used for the expected values).
"""

from __future__ import annotations

import datetime
import math
import os
import socket
import time
import traceback

import numpy as np
import pytest
import torch

DEADLINE_S = 120.0  # per world size; a healthy run takes a few seconds


# ---------------------------------------------------------------------------
# independent oracle (SPEC §1 on the unsharded rows)
# ---------------------------------------------------------------------------


def oracle_topk(scores: np.ndarray, k: int, lengths, fb: int, fe: int, tie: str, order: str):
    rows, width = scores.shape
    out_i = np.full((rows, k), -1, dtype=np.int64)
    out_v = np.full((rows, k), -np.inf, dtype=np.float32)
    for r in range(rows):
        if lengths is None:
            L = width
        else:
            L = int(lengths if np.isscalar(lengths) else lengths[r])
        L = max(0, min(L, width))
        cols = []
        for g in range(L):
            x = float(scores[r, g])
            if g < fb or g >= L - fe:
                v = math.inf
            elif math.isnan(x):
                v = -math.inf
            elif x == 0.0:
                v = 0.0
            else:
                v = x
            cols.append((-v, g if tie == "low" else -g, g, v))
        cols.sort()
        chosen = [(g, v) for (_, _, g, v) in cols[:k]]
        if order == "index":
            chosen.sort()
        for s, (g, v) in enumerate(chosen):
            out_i[r, s] = g
            out_v[r, s] = v
    return out_i, out_v


def _same(got_i, got_v, exp_i, exp_v, order) -> bool:
    got_i = got_i.astype(np.int64)
    if order == "any":  # the same set, valid slots first
        n = (exp_i >= 0).sum(1)
        for r in range(exp_i.shape[0]):
            if (got_i[r, n[r]:] != -1).any():
                return False
            a = sorted(zip(got_i[r, : n[r]].tolist(), got_v[r, : n[r]].tolist(), strict=True))
            b = sorted(zip(exp_i[r, : n[r]].tolist(), exp_v[r, : n[r]].tolist(), strict=True))
            if a != b:
                return False
        return True
    if got_v is not None and not np.array_equal(got_v.view(np.int32), exp_v.astype(np.float32).view(np.int32)):
        return False
    return np.array_equal(got_i, exp_i)


# ---------------------------------------------------------------------------
# the scenarios every rank runs
# ---------------------------------------------------------------------------


def _global_rows(seed: int, rows: int, gwidth: int, kind: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if kind == "ties":  # few distinct values: exact ties inside and across ranks
        x = torch.randint(0, 3, (rows, gwidth), generator=g).to(torch.float32)
        x[:, ::7] = -0.0
        x[:, 3::11] = 0.0
    else:
        x = torch.randn(rows, gwidth, generator=g)
        x[0, 1::5] = float("nan")
        x[1, 2::6] = float("inf")
        x[2, ::4] = float("-inf")
    return x


def _shard(x: torch.Tensor, layout: str, rank: int, world: int) -> torch.Tensor:
    w = x.shape[1] // world
    if layout == "strided":
        return x[:, rank::world].contiguous()
    return x[:, rank * w:(rank + 1) * w]  # a row view with a wider row stride


def _lengths_cases(rows: int, gwidth: int, w: int):
    # Tensor lengths leave whole ranks empty (blocked: every rank past L;
    # strided: rows shorter than world), plus negative / past-the-end values.
    base = [0, 1, 2, w - 1, w + 1, gwidth - 1, gwidth + 5, -3, 2 * w, gwidth // 2, 3, gwidth]
    t = torch.tensor((base * ((rows + len(base) - 1) // len(base)))[:rows], dtype=torch.int32)
    return [None, t, t.to(torch.int64), w + 2, 1]


def _run_scenarios(rank: int, world: int, group, tag: str, kinds=("ties", "random")):
    import sparsetopk.distributed as sd

    failures = []
    n_calls = 0
    spin = 0
    rows, w = 12, 7
    gwidth = w * world
    for kind in kinds:
        x = _global_rows(1234 + world, rows, gwidth, kind)
        xn = x.numpy()
        for layout in ("strided", "blocked"):
            local = _shard(x, layout, rank, world)
            for li, lengths in enumerate(_lengths_cases(rows, gwidth, w)):
                for fb, fe in ((0, 0), (2, 3), (w + 1, 1), (0, gwidth + 4)):
                    for tie in ("low", "high"):
                        # (k, order) rotates over the grid: every pair meets every
                        # layout and lengths case, at a quarter of the calls.
                        spin += 1
                        k, order = ((1, "rank"), (5, "index"), (gwidth + 3, "rank"), (4, "any"))[(spin + li) % 4]
                        if True:
                            lens_np = lengths.numpy() if isinstance(lengths, torch.Tensor) else lengths
                            exp_i, exp_v = oracle_topk(xn, k, lens_np, fb, fe, tie, order)
                            res = sd.topk(local, k, group=group, lengths=lengths, force_begin=fb, force_end=fe,
                                          tie_break=tie, order=order, return_values=True, layout=layout)
                            n_calls += 1
                            if not _same(res.indices.numpy(), res.values.numpy(), exp_i, exp_v, order):
                                failures.append(
                                    f"[{tag} rank {rank}] {kind} {layout} lengths#{li} fb={fb} fe={fe} tie={tie} k={k} "
                                    f"order={order}\n got {res.indices.tolist()}\n exp {exp_i.tolist()}"
                                )
        # owner routing: one rank for all rows, and a per-row assignment
        for layout in ("strided", "blocked"):
            local = _shard(x, layout, rank, world)
            lengths = _lengths_cases(rows, gwidth, w)[1]
            exp_i, exp_v = oracle_topk(xn, 6, lengths.numpy(), 1, 2, "low", "rank")
            per_row = [(r * 5 + 1) % world for r in range(rows)]
            for owner in (world - 1, per_row, torch.tensor(per_row)):
                res = sd.topk(local, 6, group=group, lengths=lengths, force_begin=1, force_end=2,
                              return_values=True, layout=layout, owner=owner)
                n_calls += 1
                owners = [owner] * rows if isinstance(owner, int) else list(map(int, owner))
                mine = [r for r in range(rows) if owners[r] == rank]
                if not _same(res.indices.numpy(), res.values.numpy(), exp_i[mine], exp_v[mine], "rank"):
                    failures.append(f"[{tag} rank {rank}] owner={owner!r} {layout}: got {res.indices.tolist()} "
                                    f"exp {exp_i[mine].tolist()}")
        # async_op: two exchanges in flight at once, waited in reverse order
        for layout in ("strided", "blocked"):
            local = _shard(x, layout, rank, world)
            lengths = _lengths_cases(rows, gwidth, w)[1]
            e1 = oracle_topk(xn, 4, lengths.numpy(), 0, 2, "high", "index")
            e2 = oracle_topk(xn, 3, None, 1, 0, "low", "rank")
            p1 = sd.topk(local, 4, group=group, lengths=lengths, force_end=2, tie_break="high", order="index",
                         return_values=True, layout=layout, async_op=True)
            p2 = sd.topk(local, 3, group=group, force_begin=1, return_values=True, layout=layout, async_op=True)
            r2, r1 = p2.wait(), p1.wait()
            n_calls += 2
            if not (_same(r1.indices.numpy(), r1.values.numpy(), *e1, "index") and p1.wait() is r1
                    and _same(r2.indices.numpy(), r2.values.numpy(), *e2, "rank")):
                failures.append(f"[{tag} rank {rank}] async {layout}: got {r1.indices.tolist()} / {r2.indices.tolist()}")
        # bf16 scores and return_values=False with a caller-given out=
        xb = x.to(torch.bfloat16)
        exp_i, _ = oracle_topk(xb.float().numpy(), 3, None, 0, 1, "low", "index")
        for layout in ("strided", "blocked"):
            out = torch.empty(rows, 3, dtype=torch.int32)
            res = sd.topk(_shard(xb, layout, rank, world), 3, group=group, force_end=1, order="index",
                          layout=layout, out=out)
            n_calls += 1
            if res.values is not None or res.indices.data_ptr() != out.data_ptr() or \
                    not np.array_equal(out.numpy().astype(np.int64), exp_i):
                failures.append(f"[{tag} rank {rank}] bf16/out {layout}: got {out.tolist()} exp {exp_i.tolist()}")
    return failures, n_calls


def _worker(rank: int, world: int, port: int, result_dir: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    lines = []
    try:
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
            timeout=datetime.timedelta(seconds=60),
        )
        failures, n = _run_scenarios(rank, world, None, f"world{world}")
        lines += failures
        if world == 4:
            # a sub-group whose members are not ranks 0..2: group ranks, not global ones
            sub = dist.new_group([1, 2, 3])
            if rank in (1, 2, 3):
                failures, n2 = _run_scenarios(dist.get_rank(sub), 3, sub, "subgroup[1,2,3]", kinds=("ties",))
                lines += failures
                n += n2
        # wrong usage is a host-side error, raised before any collective
        import sparsetopk.distributed as sd

        for bad in (dict(layout="diagonal"), dict(owner=world), dict(k=0), dict(lengths=torch.zeros(5, dtype=torch.int32))):
            kw = dict(k=2)
            kw.update(bad)
            try:
                sd.topk(torch.zeros(3, 4), **kw)
                lines.append(f"[rank {rank}] no error for {bad}")
            except (ValueError, TypeError):
                pass
        dist.barrier()
        lines.append(f"OK calls={n}")
    except Exception:  # noqa: BLE001 - reported to the parent
        lines.append("EXCEPTION " + traceback.format_exc())
    finally:
        with open(os.path.join(result_dir, f"rank{rank}.txt"), "w") as f:
            f.write("\n".join(lines))
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_method() -> str:
    """forkserver when the platform has it: the server imports torch once and
    every rank of every world size forks from it (a fresh ``spawn`` re-imports
    torch per rank, which costs seconds on a small CI machine); else spawn."""
    import multiprocessing

    if "forkserver" in multiprocessing.get_all_start_methods():
        multiprocessing.set_forkserver_preload(["torch", "numpy", "sparsetopk.distributed", __name__])
        return "forkserver"
    return "spawn"


@pytest.mark.parametrize("world", [2, 3, 4])
def test_distributed_topk_matches_unsharded_oracle(world, tmp_path):
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    ctx = mp.start_processes(_worker, args=(world, _free_port(), str(tmp_path)), nprocs=world,
                             join=False, start_method=_start_method())
    deadline = time.monotonic() + DEADLINE_S
    try:
        while not ctx.join(timeout=max(0.1, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                pytest.fail(f"world {world}: ranks did not finish within {DEADLINE_S} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.terminate()
                p.join(5)
    problems = []
    for rank in range(world):
        path = tmp_path / f"rank{rank}.txt"
        text = path.read_text() if path.exists() else "no result file"
        lines = text.splitlines()
        if len(lines) != 1 or not lines[0].startswith("OK calls="):
            problems.append(f"rank {rank}:\n{text[:4000]}")
    assert not problems, "\n".join(problems)
