"""Survey and compile-time the kernel variants a workload triggers.

1. Record the variants (no GPU needed; the suite runs against reference results)::

    SPARSETOPK_TRITON_VARIANT_LOG=/tmp/v.jsonl SPARSETOPK_TRITON_DRYRUN=1 \\
    SPARSETOPK_TRITON_FAKE_SMS=132 TRITON_INTERPRET=1 \\
    SPARSETOPK_INTERP_MAX_WIDTH=1000000000 SPARSETOPK_INTERP_MAX_K=100000 \\
    SPARSETOPK_INTERP_MAX_CELLS=1000000000000 SPARSETOPK_INTERP_SAMPLE=1 \\
        python -m pytest tests/conformance --backend triton-portable -q

2. Compile each distinct variant for sm_90 (ptxas from the Triton wheel) and time it::

    python tools/variants.py /tmp/v.jsonl [--target cuda:90] [--jobs 2] [--summary-only]

Compile-only numbers: they depend on the host CPU and its load.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor


def load(path):
    seen = collections.OrderedDict()
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rec = json.loads(line)
                key = json.dumps(rec, sort_keys=True)
                seen[key] = seen.get(key, 0) + 1
    return [(json.loads(k), n) for k, n in seen.items()]


def compile_rec(rec, spec="cuda:90"):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend

    from sparsetopk_triton import kernels as K

    be_name, arch = spec.split(":")
    target = GPUTarget(be_name, int(arch) if be_name == "cuda" else arch, 32 if be_name == "cuda" else 64)
    backend = make_backend(target)
    fn = getattr(K, rec["kernel"])
    names = fn.arg_names
    attrs = {(names.index(n),): backend.parse_attr(a) for n, a in rec["attrs"].items()}
    src = ASTSource(fn=fn, signature=rec["sig"], constexprs=rec["consts"], attrs=attrs)
    t = time.time()
    k = triton.compile(src, target=target, options={"num_warps": rec["num_warps"]})
    dt = time.time() - t
    return dt, getattr(k.metadata, "shared", 0)


def describe(rec):
    c = {n: v for n, v in rec["consts"].items() if n.isupper()}
    spec = {n: v for n, v in rec["consts"].items() if not n.isupper()}
    types = sorted({v for n, v in rec["sig"].items() if v.startswith("*")})
    return f"{rec['kernel']} {c} w={rec['num_warps']} ints={spec} attrs={sorted(rec['attrs'])} ptrs={types}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--target", default="cuda:90")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2)))
    ap.add_argument("--summary-only", action="store_true")
    ap.add_argument("--per-bucket", action="store_true",
                    help="compile one representative per (kernel, constexprs, warps) bucket; the total is "
                         "estimated as sum(time x variants in the bucket)")
    ap.add_argument("--json", help="write per-variant compile times here")
    a = ap.parse_args()
    # Triton's own on-disk cache would hide the compile time.
    os.environ.setdefault("TRITON_CACHE_DIR", f"/tmp/stk-variants-cache-{os.getpid()}")
    recs = load(a.log)
    by_kernel = collections.Counter(r["kernel"] for r, _ in recs)
    print(f"{len(recs)} distinct variants:", dict(by_kernel), flush=True)
    by_shape = collections.Counter(
        (r["kernel"], json.dumps({n: v for n, v in r["consts"].items() if n.isupper()}), r["num_warps"])
        for r, _ in recs)
    print(f"{len(by_shape)} distinct (kernel, constexprs, warps) buckets", flush=True)
    for (kn, c, w), n in sorted(by_shape.items()):
        print(f"  {n:3d}x {kn} {c} w={w}")
    if a.summary_only:
        return
    mult = {}
    if a.per_bucket:
        reps = collections.OrderedDict()
        for r, n in recs:
            b = (r["kernel"], json.dumps({n_: v for n_, v in r["consts"].items() if n_.isupper()}), r["num_warps"])
            if b not in reps:
                reps[b] = (r, n)
        recs = list(reps.values())
        mult = {id(r): by_shape[b] for b, (r, _) in reps.items()}
    out = []
    t0 = time.time()
    with ProcessPoolExecutor(a.jobs) as ex:
        futs = [(r, n, ex.submit(compile_rec, r, a.target)) for r, n in recs]
        for r, n, f in futs:
            try:
                dt, shared = f.result()
                err = ""
            except Exception as e:  # pragma: no cover - reported, not fatal
                dt, shared, err = float("nan"), 0, repr(e)[:200]
            m = mult.get(id(r), 1)
            out.append(dict(rec=r, launches=n, variants=m, compile_s=dt, shared=shared, error=err))
            print(f"{dt:7.1f}s  x{m:<3d} {describe(r)} {err}", flush=True)
    tot = sum(o["compile_s"] * o["variants"] for o in out if o["compile_s"] == o["compile_s"])
    if a.per_bucket:
        print(f"estimated total compile {tot:.0f}s for {sum(o['variants'] for o in out)} variants "
              f"({len(out)} compiled, wall {time.time() - t0:.0f}s)")
        tot = sum(o["compile_s"] for o in out if o["compile_s"] == o["compile_s"])
    print(f"total compile {tot:.0f}s over {len(out)} variants (wall {time.time() - t0:.0f}s with {a.jobs} jobs)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
