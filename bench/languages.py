"""One grading per language against running the same compiler and program directly, in the same
run: the sum of two integers (the stdio set's `a_plus_b` reference of each language) with two
stdin/stdout cases, through `Sandbox.run_tests` of an embedded local pool with its defaults
(compile once, each case its own isolated process), against the baseline of the judge's own
compile command and two runs of the program as plain subprocesses on this host (no isolation,
same toolchain: the local backend runs the host's). Reported per language: median and p99 of
each, and their ratio."""

from __future__ import annotations

import asyncio
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import Report, Stats

ROUNDS = 20
CASES = (("2 3\n", "5"), ("40 -12\n", "28"))


# The judge's most graded languages lead (README.md shows the leading headlines of a report).
FIRST = ("python", "cpp")


def programs() -> dict[str, str]:
    from sandboxes.datasets.stdio import load_stdio

    (p,) = [p for p in load_stdio() if p.problem_id == "a_plus_b"]
    order = {lang: i for i, lang in enumerate(FIRST)}
    return dict(sorted(p.references.items(), key=lambda kv: (order.get(kv[0], len(FIRST)), kv[0])))


def direct(language: str, source: str) -> list[float]:
    """Compile (where the language does) and run both cases as plain subprocesses, ROUNDS times."""
    from sandboxes import languages

    script = languages.script_commands(language)
    assert script is not None
    source_file, compile_argv, run = script
    out = []
    for _ in range(ROUNDS):
        with tempfile.TemporaryDirectory(prefix="bench-lang-") as tmp:
            d = Path(tmp)
            (d / source_file).write_text(source)
            t = time.perf_counter()
            if compile_argv is not None:
                subprocess.run(compile_argv, cwd=d, check=True, capture_output=True)
            for stdin, want in CASES:
                r = subprocess.run(run, cwd=d, input=stdin.encode(), capture_output=True, check=True)
                assert r.stdout.split() == [want.encode()], (language, r.stdout)
            out.append(time.perf_counter() - t)
    return out


async def graded(sources: dict[str, str]) -> dict[str, list[float]]:
    import sandboxes
    from sandboxes import TestCase, Verdict

    tests = [TestCase(input=i, expected_output=o + "\n") for i, o in CASES]
    out: dict[str, list[float]] = {}
    async with sandboxes.Pool(warm=1) as pool, pool.sandbox() as sb:
        for language, source in sources.items():
            times = []
            for _ in range(ROUNDS + 1):
                t = time.perf_counter()
                r = await sb.run_tests(source, tests, language=language)
                times.append(time.perf_counter() - t)
                assert [c.verdict for c in r.cases] == [Verdict.ACCEPTED] * 2, (language, r)
            out[language] = times[1:]  # the first warms the sandbox's page cache
    return out


def run() -> Report:
    rep = Report("languages")
    sources = programs()
    ours = asyncio.run(graded(sources))
    for language, source in sources.items():
        g = rep.add(Stats.of(f"{language}: run_tests (compile + 2 cases)", ours[language]))
        d = rep.add(Stats.of(f"{language}: the same commands directly (baseline)", direct(language, source)))
        key = f"{language}: run_tests / direct (median)"
        rep.ratios[key] = g.median_ms / d.median_ms
        rep.headline(
            f"One {language} grading, compile + 2 cases (vs the same toolchain run directly)", g, d, key
        )
    return rep
