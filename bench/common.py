"""Shared helpers: timing statistics, result files and the ratio table."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).resolve().parent.parent


def client_python(venv: str) -> Path:
    """The interpreter of a client SDK's virtualenv (`make clients`; `CLIENT_VENVS` names their
    directory, as the Makefile and the tests read it)."""
    return ROOT / os.environ.get("CLIENT_VENVS", ".venv-clients") / venv / "bin" / "python"


MAX_SAMPLES = 1000


@dataclass
class Stats:
    name: str
    n: int
    median_ms: float
    p99_ms: float
    mean_ms: float
    min_ms: float
    # The sorted samples (at most MAX_SAMPLES evenly spaced quantiles), for the plots.
    samples_ms: list[float] = field(default_factory=list, repr=False)

    @classmethod
    def of(cls, name: str, samples_s: list[float]) -> Stats:
        ms = sorted(s * 1000 for s in samples_s)
        p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
        if len(ms) > MAX_SAMPLES:
            step = (len(ms) - 1) / (MAX_SAMPLES - 1)
            kept = [ms[round(i * step)] for i in range(MAX_SAMPLES)]
        else:
            kept = ms
        kept = [round(x, 4) for x in kept]
        return cls(name, len(ms), statistics.median(ms), p99, statistics.fmean(ms), ms[0], kept)


def _ms(v: float) -> str:
    return f"{v:.3g} ms" if v < 100 else f"{v:.0f} ms"


@dataclass
class Report:
    """One benchmark: its measurements, baselines and the ratios derived from them."""

    name: str
    stats: list[Stats] = field(default_factory=list)
    ratios: dict[str, float] = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    # The rows this benchmark puts in README's table (`python -m bench.table`).
    headlines: list[dict] = field(default_factory=list)

    def add(self, s: Stats) -> Stats:
        self.stats.append(s)
        return s

    def headline(
        self,
        metric: str,
        ours: Stats | str,
        baseline: Stats | str | None = None,
        ratio: str | None = None,
        command: str | None = None,
    ) -> None:
        """A row of README's table: `ours` and `baseline` are measurements of this run (their
        median and p99 are shown) or text; `ratio` names one of `ratios`."""

        def cell(v: Stats | str | None) -> str:
            if v is None:
                return ""
            if isinstance(v, Stats):
                return f"{_ms(v.median_ms)} median, {_ms(v.p99_ms)} p99"
            return v

        if ratio is not None and ratio not in self.ratios:
            raise KeyError(f"no ratio {ratio!r} in {self.name}")
        self.headlines.append(
            {
                "metric": metric,
                "ours": cell(ours),
                "baseline": cell(baseline),
                "ratio": ratio,
                "command": command or f"python -m bench {self.name}",
            }
        )

    def save(self) -> Path:
        RESULTS.mkdir(exist_ok=True)
        path = RESULTS / f"{self.name}.json"
        data = asdict(self) | {
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "kernel": platform.release(),
            },
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        path.write_text(json.dumps(data, indent=2))
        return path

    def print(self) -> None:
        print(f"\n## {self.name}")
        print(f"{'measurement':44} {'n':>6} {'median ms':>10} {'p99 ms':>10}")
        for s in self.stats:
            print(f"{s.name:44} {s.n:>6} {s.median_ms:>10.3f} {s.p99_ms:>10.3f}")
        for k, v in self.ratios.items():
            print(f"{k:44} {v:>10.2f}")
        for k, v in self.extra.items():
            print(f"{k:44} {v}")
