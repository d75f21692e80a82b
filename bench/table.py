"""`python -m bench.table [--write README.md]`: the benchmark table of README.md, made from the
headline rows of `bench/results/*.json` (metric | ours | baseline in the same run | ratio). With
`--write`, replaces the text between the markers `<!-- bench-table -->` and
`<!-- /bench-table -->` of that file; else prints the table."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.common import RESULTS

START, END = "<!-- bench-table -->", "<!-- /bench-table -->"
# The order of README's rows: the data path first, then pools, kinds, peers, rewards.
ORDER = ["exec_true", "pool", "kinds", "density", "burst", "docker", "k8s", "overlap", "reward"]


def _ratio(v: float) -> str:
    return f"{v:.2f}" if abs(v) < 100 else f"{v:.0f}"


def table(results: Path | None = None) -> str:
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
        for h in rep["headlines"]:
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
    return "\n".join(head + rows) + "\n"


def write(path: Path) -> None:
    text = path.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"{path} has no {START} ... {END} markers")
    before, rest = text.split(START, 1)
    _, after = rest.split(END, 1)
    path.write_text(f"{before}{START}\n{table()}{END}{after}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.table")
    ap.add_argument("--write", type=Path, help="replace the table between the markers of this file")
    args = ap.parse_args(argv)
    if args.write:
        write(args.write)
    else:
        print(table(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
