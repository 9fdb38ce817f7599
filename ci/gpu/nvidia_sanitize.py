"""A small, representative nvidia-sm100 workload for compute-sanitizer:
one-block rows (resident, bounded and streamed), small candidate finish, the split path
(gather and the overflow fallback), rank sort, merge. Checks results too.
Forced paths (SPARSETOPK_NV_PATH): streamed rows with the one-read online
gather and its overflow fallback, the sampled split path and its fallbacks,
the legacy split path, the sampled-rows kernel and its fallbacks; the bucket merge, its skew fallback and the legacy
merge (SPARSETOPK_NV_PATH=legacy-merge), the cluster kernel (resident and
streamed rows, and its fallback).

    compute-sanitizer --tool memcheck python ci/gpu/nvidia_sanitize.py
    compute-sanitizer --tool racecheck python ci/gpu/nvidia_sanitize.py --no-cluster

    compute-sanitizer --tool racecheck python ci/gpu/nvidia_sanitize.py --cluster-only

--no-cluster keeps every call off the cluster kernel (racecheck: its one
attempt with the cluster cases, on the H200, produced no report within
150 s); --cluster-only runs just three small cluster-kernel cases (2 blocks
per row: one resident row set, one streamed with its per-warp gather, one
sorted, whose per-warp regions overflow into the block-synchronous gather),
so racecheck of that kernel stays short."""
import os
import sys

import torch

import sparsetopk

NO_CLUSTER = "--no-cluster" in sys.argv[1:]
CLUSTER_ONLY = "--cluster-only" in sys.argv[1:]


def path(v=None):
    """Force SPARSETOPK_NV_PATH=v (None: automatic), keeping --no-cluster."""
    toks = ([v] if v else []) + (["no-cluster"] if NO_CLUSTER else [])
    if toks:
        os.environ["SPARSETOPK_NV_PATH"] = ",".join(toks)
    else:
        os.environ.pop("SPARSETOPK_NV_PATH", None)


path()
dev = torch.device("cuda")
g = torch.Generator(device="cpu").manual_seed(0)
bad = 0


def chk(x, k, **kw):
    global bad
    a = sparsetopk.topk(x, k, backend="nvidia-sm100", return_values=True, **kw)
    b = sparsetopk.topk(x, k, backend="reference", return_values=True, **kw)
    if kw.get("order", "rank") == "any":
        ok = torch.equal(torch.sort(a.indices, 1)[0], torch.sort(b.indices, 1)[0])
    else:
        ok = torch.equal(a.indices, b.indices) and torch.equal(a.values, b.values)
    if not ok:
        bad += 1
        print("MISMATCH", tuple(x.shape), k, {n: v for n, v in kw.items() if not torch.is_tensor(v)})


if CLUSTER_ONLY:
    os.environ["SPARSETOPK_NV_PATH"] = "cluster=2"
    small = torch.randn(2, 1 << 17, generator=g).to(dev)
    chk(small, 256, lengths=torch.tensor([9000, 3000], dtype=torch.int32, device=dev), order="rank")  # resident
    chk(small, 2048, lengths=torch.tensor([1 << 17, 100000], dtype=torch.int32, device=dev), order="any")  # streamed
    # sorted rows: every candidate in the last warp's span -> its region overflows -> block-synchronous gather
    chk(torch.sort(small, dim=1)[0], 2048, order="index")
    # rank order spread over the cluster (C >= 5): runs of ~128 keys counted (C = 16), ~341 keys in
    # sub-runs merged by binary lifting (C = 6), and a pile-up putting 2048 keys in one block (C = 5:
    # that run takes the shared-memory bitonic sort); every run copied to every block, ranked against the others
    pile = small.clone()
    pile[1, 1000:6000] = 100.0
    for cl in ("cluster=16", "cluster=6", "cluster=5"):
        os.environ["SPARSETOPK_NV_PATH"] = cl
        chk(pile, 2048, lengths=torch.tensor([1 << 17, 100000], dtype=torch.int32, device=dev), order="rank")
    torch.cuda.synchronize()
    print("sanitize workload mismatches:", bad)
    sys.exit(1 if bad else 0)

buf = torch.randn(6, 5000, generator=g).to(dev)
x = buf[:, 3:4003]  # misaligned row view, dirty tail
chk(x, 16, lengths=torch.tensor([0, 5, 100, 3999, 4000, 10**6], device=dev))
chk(x, 300, order="index", tie_break="high")
chk(x.to(torch.bfloat16), 64, order="any")
band = (torch.randint(0, 3, (3, 70000), generator=g, dtype=torch.int32) + 0x3F800000).view(torch.float32).to(dev)
chk(band, 2048)  # streamed row, overflowing candidates
long = torch.randn(4, 1 << 17, generator=g).to(dev)
long[1, 1000:6000] = 100.0
chk(long, 2048, lengths=torch.tensor([40000, 1 << 17, 70000, 9], dtype=torch.int32, device=dev), order="rank")
chk(band[:, :65536].contiguous(), 4096, order="index")
# one-block bounded path (few short rows, k <= 64): survivors of the bound ranked by counting, and the
# radix fallback over the resident copy (all-equal rows: every column ties at the bound)
few = torch.randn(8, 1344, generator=g).to(dev)
chk(few, 16)
chk(few, 64, order="index", lengths=torch.tensor([0, 3, 16, 17, 300, 1000, 1344, 5000], device=dev))
chk(torch.zeros(2, 1344, device=dev), 16, order="index")
# 16-bit rows in the rows kernel (k > 64) and the tile kernel's radix fallback, with exact ties at the
# k-th score: the one-block select pins the shared key bits (select_math.h) instead of passing over them
chk(few.to(torch.bfloat16), 224, order="rank")
chk((few * 2).round().to(torch.float16), 100, order="index", tie_break="high", index_scale=3, index_offset=2)
chk((few * 2).round().to(torch.bfloat16), 48, order="any")
# warp-per-row small k: threshold filter, lane-skew overflow -> radix fallback; k=32 / 64 / 128 (two /
# four / eight share maxima per lane), a 16-bit row at k=48, k=96 / 128 sorting 256 keys
path("warp")
dec = torch.randn(64, 1344, generator=g).to(dev)
chk(dec, 16)
chk(dec, 32, order="rank")
chk(dec, 64, order="index", tie_break="high")
chk(torch.randn(32, 5000, generator=g).to(dev).to(torch.bfloat16), 48, order="any")
skew = torch.randn(4, 8192, generator=g)
skew[:, (torch.arange(8192) % 128) < 4] += 50.0
chk(skew.to(dev), 16)
chk(torch.zeros(3, 3000, device=dev), 33, order="index")
chk(dec, 96)
chk(dec, 128, order="index")
chk(torch.randn(32, 5000, generator=g).to(dev).to(torch.bfloat16), 100, order="any", tie_break="high")
chk(skew.to(dev), 128)  # 512 survivors overflow -> radix fallback
chk(torch.zeros(3, 3000, device=dev), 65, order="index")
# k = 129-160: 256-key sort, cuts of up to 512 survivors with sixteen keys a lane
chk(dec, 160)
chk(dec, 144, order="index", tie_break="high")
tied = torch.randn(8, 2000, generator=g) - 20.0
tied[:, :20] += 30.0
tied[:, 100:400] = 1.0  # 300 survivors tied at the 150th score: the tie words decide the cut
chk(tied.to(dev), 150, order="rank")
chk(skew.to(dev), 160, order="any")
# k = 161-224: 1024-key buffer, 3 warps a block, cuts of up to 1024 survivors
chk(dec, 192)
chk(dec, 176, order="index", tie_break="high")
tied2 = torch.randn(8, 4000, generator=g) - 20.0
tied2[:, :100] += 30.0
tied2[:, 200:900] = 1.0  # 800 survivors tied at the 180th score: the thirty-two-key cut, tie words
chk(tied2.to(dev), 180, order="rank")
chk(skew.to(dev), 192, order="any")
chk(dec, 224, order="index")
path()
ii = torch.stack([sparsetopk.topk(long[:, s::2].contiguous(), 64, index_scale=2, index_offset=s, return_values=True,
                                  backend="reference").indices for s in range(2)], 1)
vv = torch.stack([sparsetopk.topk(long[:, s::2].contiguous(), 64, index_scale=2, index_offset=s, return_values=True,
                                  backend="reference").values for s in range(2)], 1)
# paths forced through SPARSETOPK_NV_PATH (read by the extension on every call)
path("stream,online")  # every row streamed: one-read online gather
chk(long, 2048, lengths=torch.tensor([40000, 1 << 17, 70000, 9], device=dev), order="index")
chk(band, 2048, order="rank")  # online buffer overflows -> multi-pass fallback (resumes after pass 1)
chk(long.to(torch.float16), 16, order="any", tie_break="high")
path("split")  # sampled split: sample + balanced gather (warp chunks) + final
chk(long, 2048, lengths=torch.tensor([40000, 1 << 17, 70000, 9], dtype=torch.int32, device=dev), order="any")
chk(long[:2].to(torch.bfloat16), 4096, order="rank")  # (long[1] pile-up: segment overflow -> fallback)
chk(band[:, :65536].contiguous(), 2048, order="index")  # > cand_cap candidates -> fallback
chk(long, 2048, lengths=torch.tensor([40000, 1 << 17, 70000, 9], dtype=torch.int32, device=dev), force_begin=5,
    force_end=3, order="any")  # forced columns: the full-key gather kernel
path("split,no-balanced")  # sampled split with the chunked block gather
chk(long, 2048, lengths=torch.tensor([40000, 1 << 17, 70000, 9], dtype=torch.int32, device=dev), order="any")
path("split,legacy-split")
chk(long, 2048, lengths=torch.tensor([40000, 1 << 17, 70000, 9], dtype=torch.int32, device=dev), order="rank")
path("rows,sampled-rows")  # sampled rows: sample + warp-span gather + select; overflow -> fallbacks
chk(long, 2048, lengths=torch.tensor([40000, 1 << 17, 70000, 9], dtype=torch.int32, device=dev), order="any")
chk(long.to(torch.bfloat16), 2048, order="rank")  # (long[1] pile-up: a warp span overflows -> block gather)
chk(band[:, :65536].contiguous(), 2048, order="index")  # > cand_cap candidates -> exact streamed select
chk(long, 16, order="any")  # small k: the k-th key's bin list is short -> regions packed, radix select
chk(long, 1, lengths=torch.tensor([40000, 1 << 17, 70000, 9], dtype=torch.int32, device=dev), order="index")
path("rows,sampled-rows,estk")  # rows of a one-run sample (40000 here) estimated by sampled_est_kernel first
chk(long, 2048, lengths=torch.tensor([40000, 1 << 17, 70000, 9], dtype=torch.int32, device=dev), order="any")
chk(long, 2048, lengths=torch.tensor([40000, 1 << 17, 70000, 9], dtype=torch.int32, device=dev), force_begin=5,
    force_end=3, order="any")  # forced columns: the estimate kernel's tiles through load_ord
# cluster kernel: resident rows (C = 16), streamed rows (C = 2: 131072 > 2 x ~46K columns) with the
# sampled one-read gather, and its exact fallback (band: candidates overflow)
if not NO_CLUSTER:
    os.environ["SPARSETOPK_NV_PATH"] = "cluster=16"
    chk(long, 4096, lengths=torch.tensor([40000, 1 << 17, 70000, 9], dtype=torch.int32, device=dev), order="rank")
    os.environ["SPARSETOPK_NV_PATH"] = "cluster=2"
    chk(long, 2048, lengths=torch.tensor([40000, 1 << 17, 120000, 9], dtype=torch.int32, device=dev), order="any")
    chk(band, 2048, order="index")
    chk(long.to(torch.bfloat16), 16, order="rank", tie_break="high")
    os.environ["SPARSETOPK_NV_PATH"] = "cluster=6"  # rank spread: sub-runs merged; long[1]'s pile-up in one block
    chk(long, 2048, lengths=torch.tensor([40000, 1 << 17, 70000, 9], dtype=torch.int32, device=dev), order="rank")
path()
m = sparsetopk.merge(ii, vv, 64, backend="nvidia-sm100")
r = sparsetopk.merge(ii, vv, 64, backend="reference")
bad += not torch.equal(m.indices, r.indices)


def chk_merge(ii, vv, k, **kw):
    global bad
    a = sparsetopk.merge(ii, vv, k, backend="nvidia-sm100", **kw)
    b = sparsetopk.merge(ii, vv, k, backend="reference", **kw)
    if kw.get("order", "rank") == "any":
        ok = torch.equal(torch.sort(a.indices, 1)[0], torch.sort(b.indices, 1)[0])
    else:
        ok = torch.equal(a.indices, b.indices) and torch.equal(a.values, b.values)
    a2 = sparsetopk.merge(ii, vv, k, backend="nvidia-sm100", **kw)
    ok = ok and torch.equal(a.indices, a2.indices) and torch.equal(a.values, a2.values)
    if not ok:
        bad += 1
        print("MISMATCH merge", tuple(ii.shape), k, kw)


# block merge (bucket merge): sharded lists with padding, cross-list duplicates,
# specials; R*k_in = 16384 at k = 4096; skewed indices (in-kernel bitonic
# fallback); the legacy bitonic kernel
R, kin = 4, 2048
mi = (torch.cumsum(torch.randint(1, 8, (3, R, kin), generator=g), 2) * R + torch.arange(R).view(1, R, 1)).to(torch.int32)
mv = torch.randn(3, R, kin, generator=g)
mi[1, R - 1, kin // 2:] = -1
mv[1, R - 1, kin // 2:] = float("-inf")
mi[2, 1, :300] = mi[2, 0, :300]
mv[2, 1, :300] = mv[2, 0, :300]
mv[0, 0, :50] = float("nan")
mv[0, 1, :50] = -0.0
mi, mv = mi.to(dev), mv.to(dev)
chk_merge(mi, mv, 2048, order="any")
chk_merge(mi, mv, 2048, order="rank", tie_break="high")
# k > unique candidates: padding (3 lists of 1024 with duplicates; k <= 4096)
chk_merge(mi[:, :3, :1024].contiguous(), mv[:, :3, :1024].contiguous(), 4096, order="index")
big_i = torch.randint(0, 1 << 20, (2, 8, 2048), generator=g, dtype=torch.int32).to(dev)
chk_merge(big_i, torch.randn(2, 8, 2048, generator=g).to(dev), 4096, order="index")
skew_i = torch.randint(0, 3000, (2, 2, 2048), generator=g, dtype=torch.int32)
skew_i[:, 0, 0] = 2**31 - 2
chk_merge(skew_i.to(dev), torch.randn(2, 2, 2048, generator=g).to(dev), 2048, order="any")
path("legacy-merge")
chk_merge(mi, mv, 2048, order="index")
path()
torch.cuda.synchronize()
print("sanitize workload mismatches:", bad)
sys.exit(1 if bad else 0)
