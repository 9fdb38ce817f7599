"""Quick SASS look at one nvidia-sm100 kernel, on the CPU machine (~20 s instead of the
whole topk.cu's ~4 min): a translation unit of topk.cu up to its last kernel-header
include plus explicit instantiations of the kernels named, built for sm_90a with
`-Xptxas -v`; prints registers / spills, then each loop (backward branch) of those
kernels with its instruction count and what it holds (shared stores, global loads,
prefetches, votes). Compare two source trees by running it on each.

    python ci/gpu/quick_sass.py                          # topk_sampled_rows_kernel<float>
    python ci/gpu/quick_sass.py --root /tmp/wt "topk_sampled_rows_kernel<bf16_tag>"
    python ci/gpu/quick_sass.py "split_items_kernel<float, false>(TopkParams, SplitWs)"

Needs nvcc and cuobjdump + nvdisasm (CUOBJDUMP / PATH; `pip download
nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm` gives both, notes/nvidia-sm100.md).
"""
import argparse
import os
import re
import subprocess
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("kernels", nargs="*", default=["topk_sampled_rows_kernel<float>"])
ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
ap.add_argument("--min", type=int, default=8, help="smallest loop listed (instructions)")
ap.add_argument("--spills", action="store_true", help="also list each local load / store (LDL / STL) and its loop")
ap.add_argument("--keep", metavar="FILE", help="also write the whole SASS listing to FILE")
args = ap.parse_args()
csrc = os.path.join(args.root, "packages", "nvidia-sm100", "csrc")
lines = open(os.path.join(csrc, "topk.cu")).read().split("\n")
last = max(i for i, ln in enumerate(lines) if re.match(r'#include "(topk_|merge)', ln))
with tempfile.TemporaryDirectory() as d:
    src, cub = os.path.join(d, "one.cu"), os.path.join(d, "one.cubin")
    # a kernel named without its parameters takes (TopkParams); give them otherwise,
    # e.g. "split_items_kernel<float, false>(TopkParams, SplitWs)"
    inst = "\n".join(f"template __global__ void {k if '(' in k else k + '(TopkParams)'};" for k in args.kernels)
    open(src, "w").write("\n".join(lines[: last + 1]) + f"\nnamespace stk_nv {{\n{inst}\n}}\n")
    cmd = ["nvcc", "-std=c++17", "-O3", "--expt-relaxed-constexpr", "-gencode", "arch=compute_90a,code=sm_90a",
           f"-I{csrc}", f"-I{os.path.join(args.root, 'shared', 'include')}", "-Xptxas", "-v", "-cubin", src, "-o", cub]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(r.stderr[-3000:])
    name = None
    for line in r.stderr.split("\n"):
        if "Compiling entry function" in line:
            name = line.split("'")[1] if any(k.split("<")[0] in line for k in args.kernels) else None
        elif name and ("stack frame" in line or "Used" in line):
            print(f"{name}: {line.split('info    :')[-1].strip()}")
            name = None if "Used" in line else name
    sass = subprocess.run([os.environ.get("CUOBJDUMP", "cuobjdump"), "-sass", cub], capture_output=True,
                          text=True, check=True).stdout
    if args.keep:
        open(args.keep, "w").write(sass)
for f in sass.split("Function : ")[1:]:
    name = f.split("\n")[0].strip()
    if not any(k.split("<")[0] in name for k in args.kernels):
        continue  # a non-template kernel of the headers
    ins = [(int(m.group(1), 16), m.group(2).strip())
           for m in (re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", ln) for ln in f.split("\n")) if m]
    print(f"{name}: {len(ins)} instructions")
    loops = []
    for a, t in ins:
        m = re.search(r"BRA (0x[0-9a-f]+)", t)
        if m and int(m.group(1), 16) < a:
            body = [x for x in ins if int(m.group(1), 16) <= x[0] <= a]
            tags = [k for k in ("STS", "LDG", "CCTL", "VOTE", "FSETP", "HSET2", "BAR") if any(k in x[1] for x in body)]
            if args.min <= len(body) < len(ins) // 2:
                print(f"  loop {int(m.group(1), 16):#x}-{a:#x}: {len(body)} instructions {' '.join(tags)}")
            loops.append((int(m.group(1), 16), a, len(body)))
    for a, t in ins if args.spills else []:
        if re.match(r"(@!?U?P\w+\s+)?(LDL|STL)", t):
            inner = min((lp for lp in loops if lp[0] <= a <= lp[1]), key=lambda lp: lp[2], default=None)
            where = f"in loop {inner[0]:#x}-{inner[1]:#x} ({inner[2]})" if inner else "outside loops"
            print(f"  {a:#x} {t}  {where}")
