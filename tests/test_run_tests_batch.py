"""Batch grading through the real agent: `Sandbox.run_tests_batch` gives exactly the verdicts of one
`run_tests` call per submission, one submission never changes another's verdict, cancelling a
batch kills its programs, a bad batch is refused before anything runs, and `Pool.grade` answers
every submission once, also when a lane's sandbox dies under it."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from language_programs import PROGRAMS
from test_run_tests import C_DOUBLE, MULTI

from sandboxes import Grading, InvalidRequest, TestCase, TestReport, Verdict

SUM_CASES = [TestCase("1 2\n", "3\n"), TestCase("40 2\n", "42\n")]
# Inputs of MULTI, one verdict each: accepted, wrong answer, time / memory / output limit, two
# runtime errors.
MULTI_INPUTS = ("21", "5", "loop", "hog", "spam", "exit", "raise")
C_BROKEN = "int main(void) { return 0 }\n"
BASH_SUM = "read a b; echo $((a + b))\n"


def verdicts(report: TestReport) -> list[Verdict]:
    return [c.verdict for c in report.cases]


def mixed_batch(n: int = 200) -> list[Grading]:
    """`n` submissions: every kind of program of every compiled and managed language once, then
    Python, C and Bash ones of every verdict, cycled."""
    out = []
    for lang, p in PROGRAMS.items():
        for src in (p.sum, p.wrong, p.broken, p.crash, p.hog, p.spin):
            out.append(Grading(src, SUM_CASES, language=lang))
    cycle: list[Grading] = []
    for line in MULTI_INPUTS:
        expected = "11" if line == "5" else "42"
        cycle.append(Grading(MULTI, [TestCase(f"{line}\n", f"{expected}\n")]))
    cycle += [
        Grading(C_DOUBLE, [TestCase("21", "42"), TestCase("4", "9")], language="c"),
        Grading(C_BROKEN, [TestCase("", "")], language="c"),
        Grading(BASH_SUM, SUM_CASES, language="bash"),
        Grading("def f(x):\n    return x + 1\n", [TestCase(check="assert f(1) == 2")]),
        Grading("def f(x):\n    return x\n", [TestCase(check="assert f(1) == 2")]),
    ]
    # Few loops: each costs its whole time limit.
    cheap = [g for g in cycle if g.tests[0].input not in (b"loop\n",)]
    i = 0
    while len(out) < n:
        out.append((cycle if i % 4 == 0 else cheap)[i % len(cheap)])
        i += 1
    return out[:n]


async def _one_by_one(sb: Any, gradings: list[Grading], **kwargs: Any) -> list[TestReport]:
    out = []
    for g in gradings:
        out.append(await sb.run_tests(g.program, g.tests, language=g.language, **kwargs))
    return out


async def _batch(sb: Any, gradings: list[Grading], **kwargs: Any) -> dict[int, TestReport]:
    got: dict[int, TestReport] = {}
    async for i, report in sb.run_tests_batch(gradings, **kwargs):
        assert i not in got
        got[i] = report
    return got


async def test_a_mixed_batch_gives_the_verdicts_of_one_call_each(make_pool) -> None:
    limits = {"time_limit": 2.0, "memory_limit_mb": 256}
    gradings = mixed_batch(200)
    pool = await make_pool(warm=2, cpu_quota=2.0)
    async with pool.sandbox() as a, pool.sandbox() as b:
        single, batch = await asyncio.gather(
            _one_by_one(a, gradings, **limits), _batch(b, gradings, **limits)
        )
    assert sorted(batch) == list(range(len(gradings)))
    for i, g in enumerate(gradings):
        assert verdicts(batch[i]) == verdicts(single[i]), (i, g.language, g.program[:60])
        assert (batch[i].passed, batch[i].total, batch[i].compiled) == (
            single[i].passed,
            single[i].total,
            single[i].compiled,
        )
    seen = {v for r in batch.values() for v in verdicts(r)}
    assert seen >= {
        Verdict.ACCEPTED,
        Verdict.WRONG_ANSWER,
        Verdict.TIME_LIMIT,
        Verdict.MEMORY_LIMIT,
        Verdict.RUNTIME_ERROR,
        Verdict.COMPILE_ERROR,
        Verdict.OUTPUT_LIMIT,
    }
    # Each language's reference solution passes in the batch, its wrong one does not.
    for k, lang in enumerate(PROGRAMS):
        assert batch[6 * k].all_passed, lang
        assert not batch[6 * k + 1].all_passed, lang


FORK_BOMB = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
FLOOD = "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n"
SLEEPER = "import time\ntime.sleep(30)\n"
KILLER = "import os, time\ntime.sleep(0.5)\nos.kill(-1, 9)\n"
DISK = "import os\nwith open('f', 'wb') as f:\n    while True:\n        f.write(os.urandom(1 << 20))\n"


async def test_a_hostile_submission_does_not_change_another_verdict(make_pool) -> None:
    pool = await make_pool(warm=1, cpu_quota=2.0)
    good = [
        Grading(MULTI, [TestCase("21", "42"), TestCase("5", "10")]),
        Grading(C_DOUBLE, [TestCase("3", "6")], language="c"),
        Grading(BASH_SUM, SUM_CASES, language="bash"),
    ]
    hostile = [Grading(src, [TestCase("", "")]) for src in (FORK_BOMB, FLOOD, SLEEPER, DISK)]
    async with pool.sandbox() as sb:
        alone = await _batch(sb, good, time_limit=2.0)
        mixed = hostile[:2] + good + hostile[2:]
        together = await _batch(sb, mixed, time_limit=2.0, parallelism=2)
        assert all(r.all_passed for r in alone.values())
        for j, g in enumerate(good):
            assert verdicts(together[2 + j]) == verdicts(alone[j])
        assert together[0].verdict is not Verdict.ACCEPTED  # the fork bomb
        assert together[1].verdict is Verdict.OUTPUT_LIMIT
        assert together[5].verdict is Verdict.TIME_LIMIT
        # The sandbox still serves, and nothing of the batch runs on.
        r = await sb.exec(["true"])
        assert r.exit_code == 0
        assert (await sb.info()).running_execs == 0


async def test_a_submission_cannot_signal_another_by_default(make_pool) -> None:
    """Side by side, programs of one sandbox share its user: by default a batch grades one
    submission at a time, so one that kills every process it may does not reach another."""
    pool = await make_pool(warm=1, cpu_quota=2.0)
    slow = Grading("import time\ntime.sleep(2)\nprint('ok')\n", [TestCase("", "ok")])
    killer = Grading(KILLER, [TestCase("", "")])
    async with pool.sandbox() as sb:
        got = await _batch(sb, [slow, killer, slow])
        assert [got[i].all_passed for i in (0, 2)] == [True] * 2
        # Side by side, it does: the reason the default is one at a time.
        side = await _batch(sb, [slow, killer], parallelism=2)
        assert side[0].verdict is Verdict.RUNTIME_ERROR


async def test_cancelling_a_batch_kills_its_programs(make_pool) -> None:
    pool = await make_pool(warm=1, cpu_quota=2.0)
    async with pool.sandbox() as sb:
        gradings = [Grading("print(1)", [TestCase("", "1")])] + [Grading(SLEEPER, [TestCase("", "")])] * 6
        stream = sb.run_tests_batch(gradings, time_limit=60.0, parallelism=3)
        i, report = await anext(stream)
        assert (i, report.all_passed) == (0, True)

        async def running() -> int:
            return (await sb.info()).running_execs

        for _ in range(200):  # the sleepers start
            if await running() >= 2:
                break
            await asyncio.sleep(0.05)
        assert await running() >= 2
        stream.cancel()
        for _ in range(200):
            if await running() == 0:
                break
            await asyncio.sleep(0.05)
        assert await running() == 0
        with pytest.raises(StopAsyncIteration):
            await anext(stream)
        assert (await sb.exec(["true"])).exit_code == 0


async def test_leaving_the_loop_kills_what_runs(make_pool) -> None:
    pool = await make_pool(warm=1, cpu_quota=2.0)
    async with pool.sandbox() as sb:
        gradings = [Grading("print(1)", [TestCase("", "1")])] + [Grading(SLEEPER, [TestCase("", "")])] * 4
        async for i, _ in sb.run_tests_batch(gradings, time_limit=60.0, parallelism=2):
            assert i == 0
            for _ in range(200):  # a sleeper runs
                if (await sb.info()).running_execs >= 1:
                    break
                await asyncio.sleep(0.05)
            assert (await sb.info()).running_execs >= 1
            break
        for _ in range(200):
            if (await sb.info()).running_execs == 0:
                break
            await asyncio.sleep(0.05)
        assert (await sb.info()).running_execs == 0


async def test_parallelism_bounds_what_runs_at_once(make_pool) -> None:
    """Each program prints when it started and ended (the sandbox's monotonic clock); the
    intervals show how many ran at once: never more than `parallelism`, and with 3, some overlap."""
    pool = await make_pool(warm=1, cpu_quota=3.0)
    prog = "import time\na = time.monotonic()\ntime.sleep(0.3)\nprint(a, time.monotonic())\n"
    gradings = [Grading(prog, [TestCase("", "x")])] * 6

    async def most_at_once(parallelism: int) -> int:
        spans = []
        async for _, r in sb.run_tests_batch(gradings, parallelism=parallelism, compare="exact"):
            a, b = map(float, r.cases[0].stdout.split())
            spans.append((a, b))
        return max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)

    async with pool.sandbox() as sb:
        assert await most_at_once(1) == 1
        assert 2 <= await most_at_once(3) <= 3
        # At most the sandbox's CPUs (its cgroup's quota of 3); one at a time by default.
        assert 2 <= await most_at_once(8) <= 3
        spans = [r async for _, r in sb.run_tests_batch(gradings[:3], compare="exact")]
        assert len(spans) == 3 and all(r.cases[0].stdout for r in spans)


@pytest.mark.parametrize(
    ("gradings", "match"),
    [
        (
            [Grading("print(1)", [TestCase("", "1")]), Grading("x", [TestCase("", "")], language="cobol")],
            "submission 1",
        ),
        ([Grading("print(1)", [])], "submission 0: no test cases"),
        ([Grading("", [TestCase("", "")])], "submission 0: program is empty"),
        (["print(1)"], "submission 0: expected sandboxes.Grading"),
        (Grading("print(1)", [TestCase("", "1")]), "a list of sandboxes.Grading"),
        (
            [Grading("int main(){}", [TestCase(check="assert True")], language="c")],
            "submission 0: check scripts",
        ),
    ],
)
async def test_a_bad_batch_is_refused_before_anything_runs(sb, gradings, match) -> None:
    before = (await sb.info()).total_execs
    with pytest.raises(InvalidRequest, match=match):
        async for _ in sb.run_tests_batch(gradings):
            pass
    assert (await sb.info()).total_execs == before
    assert (await sb.exec(["true"])).exit_code == 0


async def test_an_empty_batch_answers_nothing(sb) -> None:
    assert [x async for x in sb.run_tests_batch([])] == []


async def test_pool_grade_answers_every_submission_once(make_pool) -> None:
    pool = await make_pool(warm=3)
    gradings = [
        Grading("print(int(input()) * 2)", [TestCase(str(i), str(2 * i if i % 5 else -1))]) for i in range(90)
    ]
    got: dict[int, TestReport] = {}
    async for i, r in pool.grade(gradings, chunk=4):
        assert i not in got
        got[i] = r
    assert sorted(got) == list(range(90))
    assert [got[i].all_passed for i in range(90)] == [bool(i % 5) for i in range(90)]
    assert [x async for x in pool.grade([])] == []
    with pytest.raises(InvalidRequest, match="submission 1"):
        async for _ in pool.grade([gradings[0], Grading("x", [TestCase("", "")], language="cobol")]):
            pass


async def test_pool_grade_survives_a_lane_whose_sandbox_dies(make_pool) -> None:
    """One lane's agent is killed while it grades: its unanswered submissions go to a fresh
    sandbox, and every submission still gets its true verdict."""
    pool = await make_pool(warm=2)
    slow = "import time\ntime.sleep(0.05)\nprint(int(input()) + 1)\n"
    gradings = [Grading(slow, [TestCase(str(i), str(i + 1))]) for i in range(60)]
    got: dict[int, TestReport] = {}
    killed = False
    async for i, r in pool.grade(gradings, sandboxes=2, chunk=6):
        got[i] = r
        if not killed and len(got) == 8:
            victims = list(pool._tps[pool.default_template].claimed.values())
            assert victims
            os.kill(victims[0].handle.backend_data.pid, 9)
            killed = True
    assert killed and sorted(got) == list(range(60))
    assert all(got[i].all_passed for i in range(60)), [i for i in range(60) if not got[i].all_passed]


async def test_pool_grade_takes_more_than_one_call_can_hold(make_pool) -> None:
    """One agent call holds at most 4,096 submissions; `Pool.grade` sends a larger batch in chunks."""
    from sandboxes.grading import MAX_BATCH

    pool = await make_pool(warm=2)
    gradings = [Grading("pass", [TestCase(check="pass")])] * (MAX_BATCH + 4)
    async with pool.sandbox() as sb:
        with pytest.raises(InvalidRequest, match="max 4096"):
            sb.run_tests_batch(gradings)
    got = {i: r.all_passed async for i, r in pool.grade(gradings)}
    assert sorted(got) == list(range(len(gradings))) and all(got.values())
