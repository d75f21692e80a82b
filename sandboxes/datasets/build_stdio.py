"""Regenerate `data/stdio.jsonl` from `_stdio_problems.py`: `python -m sandboxes.datasets.build_stdio`.

Every case's expected output is what the Python reference prints for its input, run locally (no
sandbox) with Debian's `python3 -I`. The references in the other languages (C, C++, Java,
JavaScript, TypeScript, Go, Rust) are compiled where their language compiles and run on the same
inputs, and must agree (token by token), so every reference in the file is known to be correct. The inputs
come from generators seeded by the problem id: the output file is byte-for-byte reproducible.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from .. import languages
from ._stdio_problems import PROBLEMS, Source

__all__ = ["DATA_FILE", "build", "main"]

DATA_FILE = Path(__file__).resolve().parent / "data" / "stdio.jsonl"
MIN_CASES = 5
RUN_TIMEOUT_S = 30.0


def _python() -> str:
    return "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


def _run(argv: list[str], stdin: str, what: str, cwd: Path | None = None) -> str:
    p = subprocess.run(
        argv, input=stdin.encode(), capture_output=True, timeout=RUN_TIMEOUT_S, check=False, cwd=cwd
    )
    if p.returncode != 0:
        raise RuntimeError(f"{what} failed ({p.returncode}): {p.stderr.decode(errors='replace')[-500:]}")
    return p.stdout.decode()


def _reference(lang: str, source: str, workdir: Path, name: str) -> tuple[list[str], Path]:
    """(argv, its directory) that runs a reference, compiled first where its language compiles,
    by the commands of `sandboxes.languages.script_commands`."""
    script = languages.script_commands(lang)
    if script is None:
        raise RuntimeError(f"{lang} is not a language of the judge")
    source_file, compile_argv, run = script
    d = workdir / f"{name}-{lang}"
    d.mkdir(parents=True, exist_ok=True)
    (d / source_file).write_text(source)
    tool = (compile_argv or run)[0]
    if not os.access(tool, os.X_OK):
        raise RuntimeError(f"{tool} is needed to check the {lang} references (make toolchains)")
    if compile_argv is not None:
        p = subprocess.run(compile_argv, cwd=d, capture_output=True, check=False)
        if p.returncode != 0:
            raise RuntimeError(
                f"{name} ({lang}) does not compile: {p.stderr.decode(errors='replace')[-1000:]}"
            )
    return run, d


def build_one(src: Source, workdir: Path) -> dict:
    """The JSONL record of one problem (its references checked against each other)."""
    if "python" not in src.references:
        raise RuntimeError(f"{src.problem_id}: a Python reference is required")
    inputs = src.gen(random.Random(src.problem_id))
    if len(inputs) < MIN_CASES:
        raise RuntimeError(f"{src.problem_id}: {len(inputs)} cases, at least {MIN_CASES} needed")
    py = [_python(), "-I", "-c", src.references["python"]]
    outputs = [_run(py, i, f"{src.problem_id} python reference") for i in inputs]
    for i, out in enumerate(outputs):
        if not out.split():
            raise RuntimeError(f"{src.problem_id} case {i}: empty expected output")
    for lang in sorted(set(src.references) - {"python"}):
        exe, where = _reference(lang, src.references[lang], workdir, src.problem_id)
        for i, (inp, want) in enumerate(zip(inputs, outputs)):
            got = _run(exe, inp, f"{src.problem_id} {lang} reference", where)
            if got.split() != want.split():
                raise RuntimeError(f"{src.problem_id}: the {lang} reference disagrees on case {i}")
    return {
        "problem_id": src.problem_id,
        "prompt": src.prompt,
        "reference": dict(sorted(src.references.items())),
        "verification_info": {
            "language": "python",
            "test_cases": [
                {"input": inp, "output": out, "type": "stdin_stdout"} for inp, out in zip(inputs, outputs)
            ],
        },
    }


def build(path: Path = DATA_FILE) -> int:
    """Write every problem to `path`; returns how many."""
    ids = [p.problem_id for p in PROBLEMS]
    if len(set(ids)) != len(ids):
        raise RuntimeError("duplicate problem ids")
    with tempfile.TemporaryDirectory(prefix="stdio-build-") as tmp:
        records = [build_one(src, Path(tmp)) for src in PROBLEMS]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    return len(records)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DATA_FILE)
    args = parser.parse_args(argv)
    n = build(args.output)
    print(f"wrote {n} problems to {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
