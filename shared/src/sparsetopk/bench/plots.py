"""PNG plots (matplotlib, optional): speedup over torch.topk per scenario; % of bandwidth vs width."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

from .scenarios import by_scenario


def available() -> Optional[str]:
    """None if matplotlib can be used, else why not."""
    try:
        import matplotlib  # noqa: F401
    except Exception as exc:
        return f"matplotlib is not installed ({type(exc).__name__}); pip install 'sparsetopk[bench]' for plots"
    return None


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _backend_names(cells: List[dict]) -> List[str]:
    names = []
    for c in cells:
        for n, r in c.get("results", {}).items():
            if r.get("kind") == "backend" and n not in names:
                names.append(n)
    return sorted(names)


def _short(c: dict) -> str:
    extra = f" R={c['shards']}" if c.get("op") == "merge" else ""
    dt = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}.get(c["dtype"], c["dtype"])
    return f"{c['label']}{extra} k{c['k']} {c['order']} {dt} {c['dist']}"


def write_plots(doc: dict, folder, title_suffix: str = "") -> Dict[str, str]:
    """Write the PNGs; returns {plot id: path}."""
    plt = _plt()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out: Dict[str, str] = {}
    dev = doc.get("device", {}).get("name", "")
    timer = doc.get("method", {}).get("timer", "")
    cells_all = [c for c in doc.get("cells", []) if c.get("results")]
    for scen, cells in by_scenario(cells_all).items():
        names = [n for n in _backend_names(cells)]
        cells = [c for c in cells if c["results"].get("torch.topk", {}).get("us")]
        if not names or not cells:
            continue
        n, m = len(cells), len(names)
        bar = 0.8 / m
        fig, ax = plt.subplots(figsize=(9, min(40.0, max(2.5, 0.22 * n * max(1.0, m * 0.5) + 1.2))))
        for j, name in enumerate(names):
            ys, xs = [], []
            for i, c in enumerate(cells):
                r = c["results"].get(name, {})
                sp = None if r.get("error") else r.get("speedup_vs_torch")
                if sp:
                    ys.append(i + (j - (m - 1) / 2) * bar)
                    xs.append(sp)
            ax.barh(ys, xs, height=bar, label=name)
        ax.axvline(1.0, color="k", lw=0.8, ls="--")
        ax.set_yticks(range(n))
        ax.set_yticklabels([_short(c) for c in cells], fontsize=7)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("speedup over torch.topk (higher is better; log scale)")
        ax.set_title(f"{scen}: speedup over torch.topk, {dev} ({timer}){title_suffix}", fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
        ax.grid(axis="x", alpha=0.3, which="both")
        fig.tight_layout()
        p = folder / f"speedup-{scen}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        out[f"speedup-{scen}"] = str(p)
    # % of bandwidth vs width
    pts: Dict[str, list] = {}
    for c in cells_all:
        if c.get("op") != "topk":
            continue
        w = c.get("geometry", {}).get("valid_cols_mean") or c.get("width")
        for name, r in c["results"].items():
            if r.get("pct_bw") is not None and not r.get("error"):
                pts.setdefault(name, []).append((w, r["pct_bw"], c["dtype"]))
    if pts:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        colors = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
        for ci, name in enumerate(sorted(pts, key=lambda s: (s == "torch.topk", s))):
            for dt, marker in (("float32", "o"), ("bfloat16", "^"), ("float16", "s")):
                xy = [(w, p) for w, p, d in pts[name] if d == dt]
                if xy:
                    ax.scatter([a for a, _ in xy], [b for _, b in xy], marker=marker, s=18, alpha=0.75,
                               color=colors[ci % len(colors)], label=f"{name} ({dt})")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("valid columns per row (mean)")
        ax.set_ylabel("% of measured copy bandwidth")
        ax.set_title(f"bytes-read floor / time, {dev} ({timer}){title_suffix}", fontsize=9)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=6, ncol=2)
        fig.tight_layout()
        p = folder / "bandwidth.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        out["bandwidth"] = str(p)
    return out
