"""Fuzz the amd-gfx950 backend against the reference backend, bit for bit.

    SPARSETOPK_AMD_PORTABILITY=cuda python packages/amd-gfx950/tools/fuzz.py --rows 1000000

Scores sit in narrow bands (a per-row base plus a few hundred distinct steps
of 2**-20 or one bf16/f16 ulp: most columns share their top bits and exact
ties abound — the case where lane bounds overflow and radix digits collide),
with NaN, -0/+0 and +-inf sprinkled in and ascending rows mixed in. Each chunk
draws its own width, k (small-k and large-k kernels), tie rule, order,
lengths (int32 or int64, some out of range), starts, shard view and forced
columns. Prints one summary line per dtype; exits 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

import sparsetopk

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
WIDTHS = (300, 1100, 2100, 4096, 9000, 33000)
KS = (1, 8, 16, 33, 64, 100, 512, 2048, 4096)


def make_chunk(gen, cg, rows, width, dtype, device):
    base = torch.randint(-4, 4, (rows, 1), generator=gen, device=device).float() * 0.25 + 0.5
    nsteps = int(torch.randint(1, 400, (1,), generator=cg).item())
    step = 2.0**-20 if dtype == torch.float32 else 2.0**-7
    s = base + torch.randint(0, nsteps, (rows, width), generator=gen, device=device).float() * step
    r = torch.rand((rows, width), generator=gen, device=device)
    s = torch.where(r < 0.002, torch.full_like(s, float("nan")), s)
    s = torch.where((r >= 0.002) & (r < 0.004), torch.full_like(s, -0.0), s)
    s = torch.where((r >= 0.004) & (r < 0.005), torch.zeros_like(s), s)
    s = torch.where((r >= 0.005) & (r < 0.0055), torch.full_like(s, float("inf")), s)
    s = torch.where((r >= 0.0055) & (r < 0.006), torch.full_like(s, float("-inf")), s)
    asc = rows // 16
    if asc:  # ascending rows: every column beats the running bound
        s[:asc] = torch.arange(width, device=device, dtype=torch.float32) * step + base[:asc]
    return s.to(dtype)


def options(gen, cg, rows, width, device):
    def pick(seq):
        return seq[int(torch.randint(0, len(seq), (1,), generator=cg).item())]

    opts = dict(tie_break=pick(("low", "high")), order=pick(("rank", "index", "any")))
    scale = pick((1, 1, 1, 2, 3, 8))
    if scale > 1:
        opts["index_scale"] = scale
        opts["index_offset"] = int(torch.randint(0, scale, (1,), generator=cg).item())
    lkind = pick(("none", "int", "i32", "i64"))
    if lkind == "int":
        opts["lengths"] = int(torch.randint(0, width * scale + 1, (1,), generator=cg).item())
    elif lkind != "none":
        dt = torch.int32 if lkind == "i32" else torch.int64
        opts["lengths"] = torch.randint(-3, width * scale + 10, (rows,), generator=gen, device=device).to(dt)
    if pick((False, False, True)):
        opts["starts"] = torch.randint(-2, width // 2, (rows,), generator=gen, device=device).to(pick((torch.int32, torch.int64)))
    if pick((False, True)):
        opts["force_begin"] = int(torch.randint(0, 5, (1,), generator=cg).item())
        opts["force_end"] = int(torch.randint(0, 65, (1,), generator=cg).item())
    return opts


def same(order, a, b):
    if order == "any":
        return (a.indices.sort(1).values == b.indices.sort(1).values).all(1)
    return (a.indices == b.indices).all(1) & (a.values.view(torch.int32) == b.values.view(torch.int32)).all(1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows per dtype")
    ap.add_argument("--backend", default="amd-gfx950")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget-s", type=float, default=0, help="stop starting chunks after this many seconds (0: none)")
    ap.add_argument("--cells-elems", type=int, default=200_000_000, help="elements per chunk")
    args = ap.parse_args(argv)
    gen = torch.Generator(device=args.device).manual_seed(args.seed)
    cg = torch.Generator().manual_seed(args.seed)
    t_start = time.time()
    bad_total = 0
    for dname, dtype in DTYPES.items():
        done = bad = chunks = merged = 0
        while done < args.rows:
            if args.budget_s and time.time() - t_start > args.budget_s:
                print(f"budget reached: {dname} stopped at {done} rows")
                break
            width = WIDTHS[chunks % len(WIDTHS)]
            k = KS[(chunks * 7 + 3) % len(KS)]
            rows = min(args.rows - done, max(1, args.cells_elems // width), 65536 * 4)
            s = make_chunk(gen, cg, rows, width, dtype, args.device)
            opts = options(gen, cg, rows, width, args.device)
            ref = sparsetopk.topk(s, k, backend="reference", return_values=True, **opts)
            got = sparsetopk.topk(s, k, backend=args.backend, return_values=True, **opts)
            ok = same(opts["order"], ref, got)
            nbad = int((~ok).sum().item())
            if nbad:
                r = int((~ok).nonzero()[0].item())
                print(
                    f"MISMATCH {dname} width={width} k={k} opts={ {a: (b if not torch.is_tensor(b) else 'tensor') for a, b in opts.items()} } rows bad={nbad} first={r}"
                )
                print("  ref", ref.indices[r, :16].tolist(), "\n  got", got.indices[r, :16].tolist())
            bad += nbad
            if chunks % 3 == 0 and k <= 2048:  # composition law: merge(topk(shards)) == topk(global)
                R = (2, 3, 4, 8)[chunks % 4]
                rows_m = min(rows, 4096)
                g = s[:rows_m]
                ln = int(torch.randint(0, width + 1, (1,), generator=cg).item())
                mo = dict(tie_break=opts["tie_break"], order=opts["order"])
                shards = [
                    sparsetopk.topk(
                        g[:, o::R].contiguous(), k, index_scale=R, index_offset=o, lengths=ln,
                        backend=args.backend, return_values=True, tie_break=mo["tie_break"],
                    )
                    for o in range(R)
                    if o < width
                ]  # fmt: skip
                mi = torch.stack([x.indices for x in shards], 1)
                mv = torch.stack([x.values for x in shards], 1)
                got_m = sparsetopk.merge(mi, mv, k, backend=args.backend, **mo)
                ref_m = sparsetopk.topk(g, k, lengths=ln, backend="reference", return_values=True, **mo)
                okm = same(mo["order"], ref_m, got_m)
                nbm = int((~okm).sum().item())
                if nbm:
                    print(f"MERGE MISMATCH {dname} width={width} k={k} R={R} len={ln} {mo}: {nbm} rows")
                bad += nbm
                merged += rows_m
            done += rows
            chunks += 1
        print(f"fuzz {args.backend} {dname}: {done} topk rows in {chunks} chunks + {merged} merge rows, {bad} mismatching rows")
        bad_total += bad
    print(f"fuzz total mismatching rows: {bad_total} ({time.time() - t_start:.1f}s)")
    return 1 if bad_total else 0


if __name__ == "__main__":
    sys.exit(main())
