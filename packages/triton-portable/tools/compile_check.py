"""Compile every kernel variant for a GPU target without a GPU (ptxas / AMD linker).

    python tools/compile_check.py [cuda:90 | hip:gfx942] [--quick]

Prints registers / spills / shared memory per variant. Catches Triton
front-end or back-end failures (e.g. 64-bit ops, tl.sort/tl.topk on int64,
tl.histogram with a mask) before a device run.
"""
import sys
import time

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from sparsetopk_triton import kernels as K


def sig_of(fn, types, consts):
    sig = {}
    for name in fn.arg_names:
        sig[name] = "constexpr" if name in consts else types.get(name, "i32")
    return sig


GEOM = dict(scores_ptr="*fp32", s_sr="i64", starts_ptr="*i64", lens_ptr="*i64", len_int="i64",
            width="i32", scale="i32", off="i32", fb="i64", fe="i64")


def compile_one(fn, types, consts, target, num_warps):
    src = ASTSource(fn=fn, signature=sig_of(fn, types, consts), constexprs=consts)
    t = time.time()
    k = triton.compile(src, target=target, options={"num_warps": num_warps})
    md = k.metadata
    n_regs = getattr(k, "n_regs", None)
    try:
        k._init_handles()
    except Exception:
        pass
    print(f"  {fn.__name__:24s} warps={num_warps:2d} {consts} shared={md.shared} "
          f"regs={getattr(k, 'n_regs', '?')} spills={getattr(k, 'n_spills', '?')} ({time.time() - t:.1f}s)",
          flush=True)


def main():
    spec = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "cuda:90"
    be, arch = spec.split(":")
    target = GPUTarget(be, int(arch) if be == "cuda" else arch, 32 if be == "cuda" else 64)
    for KP, BLOCK, nw in [(16, 2048, 8), (16, 4096, 16), (64, 4096, 16), (128, 4096, 16), (2, 256, 4)]:
        for order in (0,):
            for split in (False, True):
                compile_one(K._stream_kernel, dict(GEOM, idx_ptr="*i32", s_oi="i32", val_ptr="*fp32",
                                                   s_ov="i32", part_ptr="*i64", k="i32"),
                            dict(SPLIT=split, KP=KP, BLOCK=BLOCK), target, nw)
        compile_one(K._stream_final_kernel, dict(part_ptr="*i64", nsplit="i32", idx_ptr="*i32", s_oi="i32",
                                                 val_ptr="*fp32", s_ov="i32", k="i32"),
                    dict(KP=KP), target, 4)
    for P in range(4):
        compile_one(K._radix_hist_kernel, dict(GEOM, hist_ptr="*i32", k="i32"),
                    dict(BLOCK=2048), target, 8)
        break
    compile_one(K._radix_count_kernel, dict(GEOM, hist_ptr="*i32", cnt_ptr="*i32", k="i32", ntiles="i32"),
                dict(BLOCK=2048), target, 8)
    compile_one(K._radix_write_kernel, dict(GEOM, hist_ptr="*i32", cnt_ptr="*i32", idx_ptr="*i32", s_oi="i32",
                                            val_ptr="*fp32", s_ov="i32", k="i32", ntiles="i32"),
                dict(BLOCK=2048, SBLOCK=512, PBLOCK=1024), target, 8)
    for KP in (128, 2048, 4096):
        compile_one(K._rank_sort_kernel, dict(idx_ptr="*i32", s_oi="i32", val_ptr="*fp32", s_ov="i32", k="i32"),
                    dict(KP=KP), target, 16)
    for NP, KP in ((64, 16), (4096, 2048), (16384, 4096)):
        compile_one(K._merge_kernel, dict(in_idx_ptr="*i32", in_val_ptr="*fp32", n="i32", scratch_ptr="*i64",
                                          idx_ptr="*i32", s_oi="i32", val_ptr="*fp32", s_ov="i32", k="i32"),
                    dict(NP=NP, KP=KP), target, 16)


if __name__ == "__main__":
    main()
