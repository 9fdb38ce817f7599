"""Compile every kernel variant for a GPU target without a GPU (ptxas / AMD linker).

    python tools/compile_check.py [cuda:90 | hip:gfx942] [--quick] [--jobs N]

Runs the launch layer in dry-run mode (no kernel runs; see tools/variants.py)
over shapes that cover every (width, k) bucket, both row-split modes, the
one-program and chunked merges and all three score dtypes, then compiles each
distinct variant and prints its compile time. Catches Triton front-end or
back-end failures before a device run. Compile-only numbers.
"""
import os
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
log = os.path.join(tempfile.mkdtemp(prefix="stk-cc-"), "variants.jsonl")
os.environ.update(SPARSETOPK_TRITON_VARIANT_LOG=log, SPARSETOPK_TRITON_DRYRUN="1", SPARSETOPK_TRITON_FAKE_SMS="132")
os.environ.pop("TRITON_INTERPRET", None)
sys.path.insert(0, here)

import torch  # noqa: E402

from sparsetopk_triton import launch  # noqa: E402


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    spec = args[0] if args else "cuda:90"
    quick = "--quick" in sys.argv
    jobs = next((int(a.split("=")[1]) for a in sys.argv if a.startswith("--jobs=")), os.cpu_count() or 2)
    dtypes = (torch.float32,) if quick else (torch.float32, torch.bfloat16, torch.float16)
    topk = [(512, w, k) for w in (300, 1344, 40000) for k in (16, 64, 128)]  # single program per row
    topk += [(2, 40000, k) for k in (16, 64, 128)]  # row split + final merge
    topk += [(16, 1 << 18, 2048)]  # sample scheme (+ its radix fallback) + chunked select/rank sort
    topk += [(4, 40000, 2048)]  # plain radix (rows < sample_min_rows)
    merges = [(4, 4, 64, 16), (4, 8, 64, 64), (4, 8, 128, 128), (2, 8, 2048, 2048)]
    launch.warmup(topk, merges if not quick else merges[-1:], dtypes, device="cpu")
    import variants

    sys.argv = [sys.argv[0], log, "--target", spec, f"--jobs={jobs}"]
    variants.main()


if __name__ == "__main__":
    main()
