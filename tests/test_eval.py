"""`sandboxes eval` and `sandboxes.evaluate`: grading a problem set through an embedded pool."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

import sandboxes
from sandboxes import evaluate as ev
from sandboxes.datasets import DatasetError, load_humaneval, load_stdio
from sandboxes.errors import InvalidRequest, SandboxLost

PKG_ROOT = str(Path(sandboxes.__file__).resolve().parent.parent)


async def run_cli(*args: str) -> tuple[int, str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = PKG_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sandboxes",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 240)
    return proc.returncode, out.decode(), err.decode()


async def test_cli_eval_stdio_limit_5(native, tmp_path: Path) -> None:
    out_file = tmp_path / "report.json"
    rc, out, err = await run_cli("eval", "stdio", "--limit", "5", "--workers", "2", "--output", str(out_file))
    assert rc == 0, err
    assert "5/5 accepted" in out and "pass rate 100.0%" in out and "problems/s" in out
    assert "verdicts: accepted 5" in out
    report = json.loads(out_file.read_text())
    assert report["problems"] == 5 and report["accepted"] == 5 and report["pass_rate"] == 1.0
    assert report["verdicts"] == {"accepted": 5} and report["infra_errors"] == 0
    assert [r["problem_id"] for r in report["results"]] == [p.problem_id for p in load_stdio()[:5]]
    assert all(r["cases"] and set(r["cases"]) == {"accepted"} for r in report["results"])


async def test_cli_eval_solutions_file(native, tmp_path: Path) -> None:
    sols = tmp_path / "samples.jsonl"
    lines = [
        {
            "task_id": "HumanEval/0",
            "completion": load_humaneval()[0].references["python"][len(load_humaneval()[0].prompt) :],
        },
        {"task_id": "HumanEval/2", "completion": "    return 0.0\n"},
        {"problem_id": "HumanEval/4", "program": "this is not python"},
    ]
    sols.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out_file = tmp_path / "r.json"
    rc, out, err = await run_cli("eval", "humaneval", "--solutions", str(sols), "--output", str(out_file))
    assert rc == 0, err
    assert "1/3 accepted" in out
    report = json.loads(out_file.read_text())
    assert [r["verdict"] for r in report["results"]] == ["accepted", "runtime_error", "runtime_error"]


async def test_cli_eval_bad_arguments(native, tmp_path: Path) -> None:
    rc, _, err = await run_cli("eval", "stdio", "--solutions", str(tmp_path / "missing.jsonl"))
    assert rc == 2 and "cannot read" in err
    rc, _, err = await run_cli("eval", "stdio", "--workers", "0")
    assert rc == 2 and "--workers" in err
    rc, _, err = await run_cli("eval", "nosuchset")
    assert rc == 2 and "invalid choice" in err


async def test_evaluate_canonical_broken_and_other_languages(make_pool) -> None:
    pool = await make_pool(warm=2)
    problems = [p for p in load_stdio() if "c" in p.references][:3]
    seen = []
    good = await ev.evaluate(
        ev.submissions(problems, "canonical", "c"), workers=2, pool=pool, on_result=seen.append
    )
    assert good.accepted == 3 and good.pass_rate == 1.0 and len(seen) == 3
    assert {r.language for r in good.results} == {"c"}
    bad = await ev.evaluate(ev.submissions(problems, "broken"), workers=2, pool=pool, time_limit=5)
    assert bad.accepted == 0 and bad.verdict_counts() == {"wrong_answer": 3}
    d = json.loads(json.dumps(bad.to_dict()))
    assert d["problems"] == 3 and d["results"][0]["verdict"] == "wrong_answer" and d["results"][0]["message"]
    # "canonical" leaves out problems without a reference in the asked language.
    assert len(ev.submissions(load_stdio(), "canonical", "c")) < len(load_stdio())


def test_load_solutions_errors(tmp_path: Path) -> None:
    problems = load_stdio()[:2]
    f = tmp_path / "s.jsonl"
    for line, match in [
        ({"program": "x"}, "no problem_id"),
        ({"problem_id": "nope", "program": "x"}, "unknown problem"),
        ({"problem_id": problems[0].problem_id}, "no program"),
    ]:
        f.write_text(json.dumps(line) + "\n")
        with pytest.raises(DatasetError, match=match):
            ev.load_solutions(f, problems)
    f.write_text(
        json.dumps({"problem_id": problems[1].problem_id, "solution": "print(1)", "language": "bash"}) + "\n"
    )
    (s,) = ev.load_solutions(f, problems)
    assert s.problem is problems[1] and s.program == "print(1)" and s.language == "bash"


class FlakyPool:
    """A pool whose claims fail `fail` times with `error`, then claim for real from `real`; it
    counts claims and releases and records the ids of the sandboxes it handed out."""

    def __init__(self, real: sandboxes.Pool, error: Exception | None = None, fail: int = 0) -> None:
        self.real, self.error, self.fail, self.claims, self.released = real, error, fail, 0, 0
        self.ids: list[str] = []

    async def claim(self):
        self.claims += 1
        if self.fail > 0:
            self.fail -= 1
            raise self.error
        sb = await self.real.claim()
        self.ids.append(sb.id)
        return sb

    async def release(self, sb) -> None:
        self.released += 1
        await self.real.release(sb)


async def test_consecutive_gradings_share_a_sandbox_up_to_per_sandbox(make_pool) -> None:
    """Each worker grades up to `per_sandbox` submissions in one sandbox, then takes a fresh one,
    and gives every sandbox back at the end; verdicts do not depend on the sharing."""
    pool = await make_pool(warm=1)
    subs = ev.submissions(load_stdio()[:5], "canonical") + ev.submissions(load_stdio()[:5], "broken")
    counting = FlakyPool(pool)
    r = await ev.evaluate(subs, workers=1, pool=counting, per_sandbox=4)
    assert [x.accepted for x in r.results] == [True] * 5 + [False] * 5
    assert counting.claims == 3 and len(set(counting.ids)) == 3 and counting.released == 3
    fresh = FlakyPool(pool)
    r1 = await ev.evaluate(subs[:3], workers=1, pool=fresh, per_sandbox=1)
    assert r1.accepted == 3 and fresh.claims == 3 and fresh.released == 3
    with pytest.raises(InvalidRequest):
        await ev.evaluate(subs, workers=1, pool=pool, per_sandbox=0)


async def test_a_lost_sandbox_is_replaced_and_the_grading_retried(make_pool) -> None:
    pool = await make_pool(warm=1)
    subs = ev.submissions(load_stdio()[:3], "canonical")
    counting = FlakyPool(pool)
    killed = False

    def kill_first_sandbox(res: ev.ProblemResult) -> None:
        nonlocal killed
        if not killed:
            killed = True
            sb = next(iter(pool._tps.values())).claimed[counting.ids[0]]
            os.kill(sb.handle.backend_data.pid, 9)

    r = await ev.evaluate(subs, workers=1, pool=counting, per_sandbox=10, on_result=kill_first_sandbox)
    assert r.accepted == 3 and r.infra_errors == 0, r.results
    assert counting.claims == 2 and counting.released == 2


async def test_an_infrastructure_failure_is_retried_once_then_recorded(make_pool) -> None:
    pool = await make_pool(warm=1)
    subs = ev.submissions(load_stdio()[:1], "canonical")
    once = FlakyPool(pool, SandboxLost("agent went away"), fail=1)
    r = await ev.evaluate(subs, workers=1, pool=once)
    assert r.accepted == 1 and once.claims == 2 and r.infra_errors == 0
    twice = FlakyPool(pool, SandboxLost("agent went away"), fail=2)
    r = await ev.evaluate(subs, workers=1, pool=twice)
    (res,) = r.results
    assert res.verdict == "sandbox_error" and res.infra_error and "agent went away" in res.message
    assert r.infra_errors == 1 and r.pass_rate == 0.0
    invalid = FlakyPool(pool, InvalidRequest("bad"), fail=5)
    r = await ev.evaluate(subs, workers=1, pool=invalid)
    assert invalid.claims == 1 and r.infra_errors == 0 and r.results[0].verdict == "sandbox_error"


class _Counting:
    """A sandbox whose concurrent `run_tests` calls are counted."""

    def __init__(self, sb, peak: dict) -> None:
        self._sb, self._peak, self._now = sb, peak, 0
        self.id = sb.id

    async def run_tests(self, *args, **kwargs):
        self._now += 1
        self._peak[self.id] = max(self._peak.get(self.id, 0), self._now)
        try:
            return await self._sb.run_tests(*args, **kwargs)
        finally:
            self._now -= 1


class CountingPool:
    def __init__(self, real: sandboxes.Pool) -> None:
        self.real, self.peak, self.wrapped = real, {}, {}
        self.templates, self.default_template = real.templates, real.default_template

    async def claim(self):
        sb = await self.real.claim()
        self.wrapped[sb.id] = sb
        return _Counting(sb, self.peak)

    async def release(self, sb) -> None:
        await self.real.release(self.wrapped.pop(sb.id))


async def test_workers_beyond_the_cores_share_sandboxes_and_wait_their_turn(make_pool) -> None:
    """More workers than the machine's cores: no more sandboxes than keep the cores busy, and in
    each at most its CPU quota of gradings at once (the rest wait in the lane)."""
    from sandboxes.grading import host_lanes

    pool = await make_pool(warm=1)
    subs = (ev.submissions(load_stdio()[:6], "canonical") + ev.submissions(load_stdio()[:6], "broken")) * 2
    counting = CountingPool(pool)
    r = await ev.evaluate(subs, workers=8, pool=counting)
    assert [x.accepted for x in r.results] == ([True] * 6 + [False] * 6) * 2
    lanes = host_lanes(pool.templates[pool.default_template])
    assert 1 <= len(counting.peak) <= lanes
    assert max(counting.peak.values()) == 1  # the default template's CPU quota is 1
