"""NumPy model of nvidia-sm100's binned sample estimate (`sample_est_binned` in
packages/nvidia-sm100/csrc/topk_kernels.cuh), for choosing its constants on the
CPU before a device run. Per row kind and length it reports how often the one
pass declines (the kernel then runs the radix passes), the m-th sample's bin
count E, how many samples the pass counts (shared atomics), and the row's
candidates (keys >= est; the radix estimate gives ~2.5 k for the split, ~1.6 k
for sampled rows).

    python ci/estimate_model.py                 (every kind, a few lengths)
    python ci/estimate_model.py --trials 100 --kinds normal,bf16

The model follows the kernel's arithmetic on the 32-bit ordered scores: sample
runs of 8 columns spread over the row (one per thread; sampled rows: 1-2 per
thread), m = max(16, c k S / n) (sampled rows: at most mu + 5 sqrt(mu) + 2,
mu = k S / n, as the kernel's sample_m), groups of G adjacent threads (the largest
power of two <= 32 leaving >= m groups) whose least maximum is lo, bins capped
at 2^17 (2^15 without groups) ordered scores, decline when fewer than m
samples are counted or E > max(4, m / 8) with bins wider than the type's
score spacing (16 zero bits for bf16, 13 for fp16). It is a model: the
kernel's own tests (test_split_estimate_gpu.py) read what the kernel did.
"""

import argparse

import numpy as np


def ordered(f: np.ndarray) -> np.ndarray:
    f = np.where(f == 0, np.float32(0), f).astype(np.float32)
    b = f.view(np.uint32).astype(np.int64)
    return np.where(b >= 0x80000000, b ^ 0xFFFFFFFF, b | 0x80000000)


def to_bf16(f: np.ndarray) -> np.ndarray:
    b = f.astype(np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return b.astype(np.uint32).view(np.float32)


def estimate(samp: np.ndarray, m: int, zb: int):
    """samp: [threads, per] ordered scores. Returns (declined, E, counted, est)."""
    nt = samp.shape[0]
    hi = int(samp.max())
    G = 0
    if m <= nt:
        G = 1
        while G < 32 and nt // (2 * G) >= m:
            G *= 2
    cap = 17 if G else 15
    lo = hi - min(hi, (2048 << cap) - 1)
    if G:
        lo = max(lo, int(samp.max(1).reshape(nt // G, G).max(1).min()))
    sh = max(0, (hi - lo).bit_length() - 11)
    o = samp.ravel()
    o = o[o >= lo]
    if o.size < m:
        return True, 0, o.size, None
    hist = np.bincount(2047 - ((hi - o) >> sh), minlength=2048)
    acc = 0
    for b in range(2047, -1, -1):
        if acc + hist[b] >= m:
            break
        acc += hist[b]
    E = int(hist[b])
    if E > max(4, m >> 3) and sh > zb:
        return True, E, o.size, None
    est = max(hi - ((2048 - b) << sh) + 1, lo)
    assert est <= np.sort(samp.ravel())[-m]  # est never above the m-th sample
    return False, E, o.size, est


def row(kind: str, n: int, rng) -> np.ndarray:
    z = rng.standard_normal(n)
    x = {
        "normal": z,
        "bf16": z,
        "grid": np.round(z * 4) / 4,
        "shifted": z * 0.01 + 100,
        "exponential": rng.exponential(size=n),
        "uniform": rng.random(n),
        "loguniform": np.log(rng.random(n)),
        "negative": z - 5,
    }[kind].astype(np.float32)
    return to_bf16(x) if kind == "bf16" else x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--kinds", default="normal,bf16,grid,shifted,exponential,uniform,loguniform,negative")
    ap.add_argument("--k", type=int, default=2048)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    k = args.k
    # (kernel, threads, samples a thread, m = max(16, num k S / (den n)), lengths)
    setups = [("split", 1024, lambda n: 8, (5, 2), (12000, 41000, 100000, 400000, 1 << 20)),
              ("sampled-rows", 256, lambda n: 16 if n > 65536 else 8, (8, 5), (17000, 40000, 64000, 131072))]
    print("kernel        kind         n        m    declined  E mean/max  counted  candidates (mean)")
    for name, nt, per_of, (cn, cd), lengths in setups:
        for kind in args.kinds.split(","):
            zb = 16 if kind == "bf16" else 0
            for n in lengths:
                per = per_of(n)
                S = nt * per
                m = max(16, (cn * k * S + cd * n - 1) // (cd * n))
                if name == "sampled-rows":  # sample_m's binomial cap (float32 there; a bound, not bit-exact)
                    mu = k * S / n
                    m = max(16, min(m, int(mu + 5 * mu ** 0.5) + 2))
                res = []
                for _ in range(args.trials):
                    o = ordered(row(kind, n, rng))
                    starts = np.arange(nt) * ((n - per) // nt)
                    samp = o[starts[:, None] + np.arange(per)[None, :]]
                    dec, E, cnt, est = estimate(samp, m, zb)
                    res.append((dec, E, cnt, -1 if est is None else int((o >= est).sum())))
                a = np.array(res)
                ok = a[:, 0] == 0
                cand = f"{a[ok, 3].mean():.0f}" if ok.any() else "-"
                print(f"{name:13s} {kind:11s} {n:8d} {m:5d} {1 - ok.mean():9.2f} {a[:, 1].mean():6.1f}/{a[:, 1].max():<4d}"
                      f" {a[:, 2].mean():8.0f}  {cand}")


if __name__ == "__main__":
    main()
