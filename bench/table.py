"""`python -m bench.table [--write]`: the benchmark tables, made from the headline rows of
`bench/results/*.json` (metric | ours | baseline in the same run | ratio). README.md has the rows
a user compares (each report's leading `README_ROWS` headlines, at most `MAX_README_ROWS`);
bench/README.md has every row. With `--write`, replaces the text between the markers
`<!-- bench-table -->` and `<!-- /bench-table -->` of both files; else prints the full table."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

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
    "reward": 1,
    "e2b_api": 1,
    "prime_api": 1,
    "checkpoints": 2,
    "volumes": 0,  # in bench/README.md only
    "volume_versions": 0,
    "k8s_checkpoints": 0,
}
MAX_README_ROWS = 25
ROOT = Path(__file__).resolve().parent.parent


def _ratio(v: float) -> str:
    return f"{v:.2f}" if abs(v) < 100 else f"{v:.0f}"


def table(results: Path | None = None, *, brief: bool = False) -> str:
    """The table of every headline, or (`brief`) README.md's rows."""
    results = results or RESULTS
    reports = {p.stem: json.loads(p.read_text()) for p in sorted(results.glob("*.json"))}
    names = [n for n in ORDER if n in reports] + sorted(set(reports) - set(ORDER))
    rows, whens, machines = [], set(), set()
    for name in names:
        rep = reports[name]
        if not rep.get("headlines"):
            continue
        whens.add(rep["when"][:10])
        m = rep.get("machine", {})
        machines.add(f"{m.get('cpus')} CPUs, Linux {m.get('kernel')}, Python {m.get('python')}")
        shown = rep["headlines"][: README_ROWS.get(name, 1)] if brief else rep["headlines"]
        for h in shown:
            ratio = f"{_ratio(rep['ratios'][h['ratio']])} ({h['ratio']})" if h.get("ratio") else ""
            rows.append(f"| {h['metric']} (`{h['command']}`) | {h['ours']} | {h['baseline']} | {ratio} |")
    where = (
        f"Measured on {', '.join(sorted(machines)) or 'no machine'}, {', '.join(sorted(whens)) or 'never'}; "
    )
    head = [
        where + "every baseline ran in the same run as what it is compared with.",
        "",
        "| metric | ours | baseline in the same run | ratio |",
        "| --- | --- | --- | --- |",
    ]
    if brief:
        if len(rows) > MAX_README_ROWS:
            raise SystemExit(f"README.md would have {len(rows)} benchmark rows, more than {MAX_README_ROWS}")
        head[-2:-2] = ["Every row of every benchmark: [bench/README.md](bench/README.md).", ""]
    return "\n".join(head + rows) + "\n"


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
