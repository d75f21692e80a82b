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
