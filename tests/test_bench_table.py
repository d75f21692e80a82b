"""README's benchmark table is generated from the benchmarks' result files (`bench/table.py`)."""

from __future__ import annotations

import json
from pathlib import Path

from bench import table
from bench.common import Report, Stats


def test_rows_come_from_headlines_and_markers_are_replaced(tmp_path: Path, monkeypatch) -> None:
    rep = Report("exec_true")
    ours = rep.add(Stats.of("ours", [0.001, 0.002, 0.003]))
    base = rep.add(Stats.of("base", [0.0005, 0.0006]))
    rep.ratios["overhead"] = ours.median_ms - base.median_ms
    rep.headline("exec of true", ours, base, "overhead")
    rep.headline("density", "1.2 MB each")
    results = tmp_path / "results"
    monkeypatch.setattr("bench.common.RESULTS", results)
    rep.save()
    (results / "old.json").write_text(json.dumps({"name": "old", "stats": [], "ratios": {}, "when": "x"}))
    text = table.table(results)
    assert (
        "| exec of true (`python -m bench exec_true`) | 2 ms median, 3 ms p99 | 0.55 ms median, 0.6 ms p99 | 1.45 (overhead) |"
        in text
    )
    assert "| density (`python -m bench exec_true`) | 1.2 MB each |  |  |" in text
    assert "old" not in text  # a result without headlines adds no row
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{table.START}\nstale row\n{table.END}\nrest\n")
    monkeypatch.setattr(table, "RESULTS", results)
    table.write(readme)
    written = readme.read_text()
    assert written.startswith("intro\n") and written.endswith(f"{table.END}\nrest\n")
    assert "stale row" not in written and "exec of true" in written


def test_a_headline_must_name_a_ratio_of_its_report() -> None:
    rep = Report("x")
    s = rep.add(Stats.of("s", [0.001]))
    try:
        rep.headline("m", s, s, "no such ratio")
    except KeyError:
        return
    raise AssertionError("a headline naming no ratio was accepted")


def _result(results: Path, name: str, when: str, metric: str, ratio: str) -> None:
    results.mkdir(exist_ok=True)
    report = {
        "name": name,
        "stats": [],
        "ratios": {ratio: 2.0},
        "headlines": [{"metric": metric, "ours": "1 ms", "baseline": "2 ms", "ratio": ratio, "command": "c"}],
        "machine": {"cpus": 2, "python": "3.11.7", "kernel": "6.1"},
        "when": when,
    }
    (results / f"{name}.json").write_text(json.dumps(report))


def test_readme_shows_one_run_without_targets_and_bench_readme_every_run_with_them(tmp_path: Path) -> None:
    results = tmp_path / "results"
    _result(results, "a", "2026-01-01T10:00:00Z", "cold create (target 2x the default)", "x / y (median)")
    _result(results, "b", "2026-01-01T11:00:00Z", "exec", "p99 / p50, callers (target <= 3)")
    _result(results, "c", "2026-01-02T09:00:00Z", "burst", "fresh / ours (wall, target >= 2)")
    brief = table.table(results, brief=True)
    assert "Measured on 2 CPUs, Linux 6.1, Python 3.11.7, 2026-01-01;" in brief
    assert "| cold create (`c`) | 1 ms | 2 ms | 2.00 (x / y (median)) |" in brief
    assert "| exec (`c`) | 1 ms | 2 ms | 2.00 (p99 / p50, callers) |" in brief
    assert "burst" not in brief and "(target" not in brief and "target >=" not in brief  # one run; no targets
    full = table.table(results)
    assert full.index("2026-01-02") < full.index("2026-01-01")  # a table per run, the newest first
    assert "| cold create (`c`) | 1 ms | 2 ms | 2.00 (x / y (median)) | 2x the default |" in full
    assert "| burst (`c`) | 1 ms | 2 ms | 2.00 (fresh / ours (wall)) | >= 2 |" in full
