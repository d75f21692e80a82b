"""`python -m bench.table [--write]`: the benchmark tables, made from the headline rows of
`bench/results/*.json` (metric | ours | baseline in the same run | ratio).

README.md has the rows a user compares, from one run only (one machine, one day: the run with the
most reports), each report's leading `README_ROWS` headlines, at most `MAX_README_ROWS`, without
their targets. bench/README.md has every row of every run, one table per run, each row's target
(what we aim for: a headline's "(target ...)") in a column of its own. With `--write`, replaces
the text between the markers `<!-- bench-table -->` and `<!-- /bench-table -->` of both files;
else prints the full tables."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from bench.common import RESULTS

START, END = "<!-- bench-table -->", "<!-- /bench-table -->"
# The order of the rows: the data path first, then pools, kinds, peers, rewards.
ORDER = [
    "exec_true",
    "pool",
    "kinds",
    "density",
    "burst",
    "docker",
    "k8s",
    "overlap",
    "rollouts",
    "sandbox_cost",
    "first_command",
    "reward",
]
# How many of a report's headlines (its most telling first) README.md shows; 1 where unnamed.
README_ROWS = {
    "exec_true": 1,
    "pool": 2,
    "docker": 2,
    "rollouts": 2,
    "reward": 1,
    "e2b_api": 1,
    "prime_api": 1,
    "checkpoints": 1,
    "daytona_api": 0,  # in bench/README.md only
    "volumes": 0,
    "volume_versions": 0,
    "k8s_checkpoints": 0,
}
MAX_README_ROWS = 23
# A headline's target, in its metric ("(target 10x)") or its ratio's name ("(median, target >= 4)").
TARGET = re.compile(r"\s*\(target ([^()]*)\)|,\s*target ([^()]*)(?=\))")
ROOT = Path(__file__).resolve().parent.parent


def _ratio(v: float) -> str:
    return f"{v:.2f}" if abs(v) < 100 else f"{v:.0f}"


def _without_targets(text: str) -> tuple[str, list[str]]:
    """`text` without its "(target ...)" parts, and those targets."""
    return TARGET.sub("", text), [a or b for a, b in TARGET.findall(text)]


def _run(rep: dict[str, Any]) -> tuple[str, str]:
    """The run a report is of: (its machine, its day)."""
    m = rep.get("machine", {})
    return f"{m.get('cpus')} CPUs, Linux {m.get('kernel')}, Python {m.get('python')}", rep["when"][:10]


def _rows(reports: dict[str, dict[str, Any]], *, brief: bool) -> list[str]:
    rows = []
    for name, rep in reports.items():
        for h in rep["headlines"][: README_ROWS.get(name, 1)] if brief else rep["headlines"]:
            metric, targets = _without_targets(h["metric"])
            ratio = ""
            if h.get("ratio"):
                label, more = _without_targets(h["ratio"])
                ratio, targets = f"{_ratio(rep['ratios'][h['ratio']])} ({label})", targets + more
            cells = [f"{metric} (`{h['command']}`)", h["ours"], h["baseline"], ratio]
            if not brief:
                cells.append("; ".join(targets))
            rows.append("| " + " | ".join(cells) + " |")
    return rows


def table(results: Path | None = None, *, brief: bool = False) -> str:
    """Every headline, a table per run, or (`brief`) README.md's rows, of one run."""
    results = results or RESULTS
    found = {p.stem: json.loads(p.read_text()) for p in sorted(results.glob("*.json"))}
    names = [n for n in ORDER if n in found] + sorted(set(found) - set(ORDER))
    reports = {n: found[n] for n in names if found[n].get("headlines")}
    runs: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for name, rep in reports.items():
        runs.setdefault(_run(rep), {})[name] = rep
    same_run = "every baseline ran in the same run as what it is compared with."
    if brief:
        if not runs:
            return f"No results yet; {same_run}\n"
        (machine, day), shown = max(runs.items(), key=lambda kv: (len(kv[1]), kv[0][1]))
        rows = _rows(shown, brief=True)
        if len(rows) > MAX_README_ROWS:
            raise SystemExit(f"README.md would have {len(rows)} benchmark rows, more than {MAX_README_ROWS}")
        head = [
            f"Measured on {machine}, {day}; {same_run}",
            "",
            "Every row of every run, with the targets: [bench/README.md](bench/README.md).",
            "",
            "| metric | ours | baseline in the same run | ratio |",
            "| --- | --- | --- | --- |",
        ]
        return "\n".join(head + rows) + "\n"
    parts = []
    for (machine, day), of_run in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0]), reverse=True):
        parts += [
            f"Measured on {machine}, {day}; {same_run}",
            "",
            "| metric | ours | baseline in the same run | ratio | target |",
            "| --- | --- | --- | --- | --- |",
            *_rows(of_run, brief=False),
            "",
        ]
    return "\n".join(parts) if parts else f"No results yet; {same_run}\n"


def write(path: Path, *, brief: bool = True) -> None:
    """Replace the table between the markers of `path` (README.md's rows, or every row)."""
    text = path.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"{path} has no {START} ... {END} markers")
    before, rest = text.split(START, 1)
    _, after = rest.split(END, 1)
    path.write_text(f"{before}{START}\n{table(brief=brief)}{END}{after}")


def write_all() -> None:
    """README.md's rows and bench/README.md's full table."""
    write(ROOT / "README.md")
    write(ROOT / "bench" / "README.md", brief=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.table")
    ap.add_argument(
        "--write", action="store_true", help="rewrite the tables of README.md and bench/README.md"
    )
    args = ap.parse_args(argv)
    if args.write:
        write_all()
    else:
        print(table(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
