"""`python -m bench [name ...]`: run benchmarks with their baselines in one run, save JSON results
in bench/results/, print a table of ratios, draw the PNG plots (bench/plots.py) and regenerate
the benchmark tables of README.md and bench/README.md from the results (bench/table.py)."""

from __future__ import annotations

import argparse
import importlib

BENCHMARKS = {
    "exec_true": "bench.exec_latency",
    "pool": "bench.pool_bench",
    "density": "bench.density",
    "burst": "bench.burst",
    "overlap": "bench.overlap",
    "k8s": "bench.k8s_bench",
    "docker": "bench.docker_bench",
    "reward": "bench.reward",
    "kinds": "bench.sandbox_kinds",
    "egress": "bench.egress",
    "prime_api": "bench.prime_api",
    "e2b_api": "bench.e2b_api",
    "languages": "bench.languages",
    "verifiers_v1": "bench.verifiers_v1",
    "checkpoints": "bench.checkpoints",
    "rollouts": "bench.rollouts",
    "first_command": "bench.first_command",
    "sandbox_cost": "bench.sandbox_cost",
    "ports": "bench.ports",
    "templates": "bench.templates",
    "daytona_api": "bench.daytona_api",
    "pause": "bench.pause",
    "volumes": "bench.volumes",
    "volume_versions": "bench.volume_versions",
    "k8s_checkpoints": "bench.k8s_checkpoints",
    "memory_snapshots": "bench.memory_snapshots",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench")
    ap.add_argument("names", nargs="*", help=f"benchmarks to run (default: all): {', '.join(BENCHMARKS)}")
    args = ap.parse_args(argv)
    for name in args.names or list(BENCHMARKS):
        mod = importlib.import_module(BENCHMARKS[name])
        rep = mod.run()
        rep.print()
        print(f"saved {rep.save()}")
    from bench import plots, table

    plots.main()
    table.write_all()
    print("README.md, bench/README.md: benchmark tables regenerated from bench/results/*.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
