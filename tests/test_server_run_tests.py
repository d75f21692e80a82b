"""RunTests through the real server, the real client and real agents: verdicts of stdin/stdout and
check-style cases, compiled languages, limits, parity with the embedded `Sandbox.run_tests`, and bad
requests refused with INVALID_ARGUMENT while the server keeps serving."""

from __future__ import annotations

import asyncio
import inspect
import math
import uuid

import grpc
import pytest
from helpers import pgrep
from server_helpers import KEY_A, bearer, wait_for

from sandboxes import errors as E
from sandboxes._proto import common_pb2 as cpb
from sandboxes._proto import service_pb2 as pb
from sandboxes.client import AsyncSandboxClient, RemoteSandbox
from sandboxes.grading import Grading
from sandboxes.judging import TestCase, TestReport, Verdict
from sandboxes.sandbox import SandboxBase
from sandboxes.server.quota import QuotaLimits
from sandboxes.types import Limits

ADD = "a, b = map(int, input().split())\nprint(a + b)\n"

C_ADD = r"""
#include <stdio.h>
int main(void) {
    long a, b;
    if (scanf("%ld %ld", &a, &b) != 2) return 1;
    printf("%ld\n", a + b);
    return 0;
}
"""

HUMANEVAL_PROGRAM = '''
def add(x: int, y: int) -> int:
    """Add two numbers."""
    return x + y
'''

HUMANEVAL_CHECK = """
def check(candidate):
    assert candidate(2, 3) == 5
    assert candidate(-1, 1) == 0

check(add)
"""


def verdicts(report: TestReport) -> list[str]:
    return [c.verdict.value for c in report.cases]


def test_remote_run_tests_has_the_shared_signature() -> None:
    assert inspect.signature(RemoteSandbox.run_tests) == inspect.signature(SandboxBase.run_tests)


async def test_stdin_stdout_accepted_and_wrong_answer(client: AsyncSandboxClient) -> None:
    async with client.sandbox() as sb:
        report = await sb.run_tests(
            ADD,
            [
                TestCase("1 2\n", "3\n"),
                TestCase("5 5", "10"),  # whitespace compare: a missing newline is fine
                TestCase("2 2\n", "5\n"),
            ],
            time_limit=5,
        )
    assert isinstance(report, TestReport)
    assert verdicts(report) == ["accepted", "accepted", "wrong_answer"]
    assert report.passed == 2 and report.total == 3 and report.compiled
    assert report.cases[2].stdout == b"4\n" and report.cases[2].message
    assert report.verdict is Verdict.WRONG_ANSWER


async def test_c_program_accepted(client: AsyncSandboxClient) -> None:
    async with client.sandbox() as sb:
        report = await sb.run_tests(
            C_ADD,
            [TestCase("1 2", "3"), TestCase("40 2\n", "42\n")],
            language="c",
            time_limit=5,
        )
    assert verdicts(report) == ["accepted", "accepted"], report
    assert report.compiled and report.compile_time_s > 0


async def test_compile_error(client: AsyncSandboxClient) -> None:
    async with client.sandbox() as sb:
        report = await sb.run_tests(
            "int main(void) { return undeclared_name; }\n",
            [TestCase("", "0"), TestCase("1", "1")],
            language="c",
        )
    assert verdicts(report) == ["compile_error", "compile_error"]
    assert not report.compiled and report.passed == 0
    assert b"undeclared_name" in report.compile_output


async def test_time_limit_kills_the_case(client: AsyncSandboxClient) -> None:
    async with client.sandbox() as sb:
        report = await sb.run_tests(
            "import sys\nif sys.stdin.read().strip() == 'loop':\n    while True: pass\nprint('ok')\n",
            [TestCase("loop", "ok"), TestCase("x", "ok")],
            time_limit=1,
        )
        assert verdicts(report) == ["time_limit", "accepted"]
        assert report.cases[0].duration_s < 10
        # The sandbox is still fine after a case was killed.
        assert (await sb.exec(["echo", "alive"])).stdout == b"alive\n"


async def test_check_style_accepted(client: AsyncSandboxClient) -> None:
    async with client.sandbox() as sb:
        ok = await sb.run_tests(HUMANEVAL_PROGRAM, [TestCase(check=HUMANEVAL_CHECK)], time_limit=5)
        wrong = await sb.run_tests(
            HUMANEVAL_PROGRAM.replace("x + y", "x - y"), [TestCase(check=HUMANEVAL_CHECK)], time_limit=5
        )
    assert verdicts(ok) == ["accepted"] and ok.all_passed
    assert verdicts(wrong) != ["accepted"] and wrong.passed == 0
    assert b"AssertionError" in wrong.cases[0].stderr


async def test_report_matches_the_embedded_one(server, client: AsyncSandboxClient) -> None:
    """The same program and cases judged remotely and in an embedded sandbox of the same pool give
    the same verdicts, counts and messages."""
    program = (
        "import sys\n"
        "s = sys.stdin.read().split()\n"
        "if s[0] == 'loop':\n    while True: pass\n"
        "if s[0] == 'boom':\n    raise SystemExit(3)\n"
        "if s[0] == 'float':\n    print(0.1 + 0.2)\n    sys.exit()\n"
        "print(int(s[0]) * 2)\n"
    )
    tests = [
        TestCase("2", "4"),
        TestCase("3", "7"),
        TestCase("boom", "0"),
        TestCase("loop", "0"),
        TestCase("float", "0.3"),
        TestCase("5", "10"),
    ]
    runs = [
        {"time_limit": 1, "compare": "float", "float_tolerance": 1e-9},
        {"time_limit": 1, "compare": "exact", "stop_on_first_failure": True},
        {"limits": Limits(wall_time_s=1, cpu_time_s=1, memory_bytes=256 << 20)},
    ]
    async with client.sandbox() as remote, server.pool.sandbox() as local:
        for kwargs in runs:
            r = await remote.run_tests(program, tests, **kwargs)
            e = await local.run_tests(program, tests, **kwargs)
            assert type(r) is type(e) is TestReport
            assert verdicts(r) == verdicts(e), kwargs
            assert (r.passed, r.total, r.compiled) == (e.passed, e.total, e.compiled)
            assert [c.message for c in r.cases] == [c.message for c in e.cases]
            assert [(c.stdout, c.exit_code) for c in r.cases] == [(c.stdout, c.exit_code) for c in e.cases]
    first = verdicts(r)
    assert first[:3] == ["accepted", "wrong_answer", "runtime_error"]


async def test_stop_on_first_failure_skips(client: AsyncSandboxClient) -> None:
    async with client.sandbox() as sb:
        report = await sb.run_tests(
            ADD, [TestCase("1 1", "3"), TestCase("1 1", "2")], stop_on_first_failure=True, time_limit=5
        )
    assert verdicts(report) == ["wrong_answer", "skipped"]


async def test_bad_input_from_the_client(server, client: AsyncSandboxClient) -> None:
    async with client.sandbox() as sb:
        # Refused by the server (the client does not know the agent's languages).
        with pytest.raises(E.InvalidRequest, match="unknown language"):
            await sb.run_tests("x", [TestCase("", "")], language="cobol")
        # Refused by the server before reaching the agent.
        with pytest.raises(E.InvalidRequest, match="check scripts"):
            await sb.run_tests("int main(){}", [TestCase(check="true")], language="c")
        # Refused client-side, before the wire.
        with pytest.raises(E.InvalidRequest):
            await sb.run_tests(ADD, [])
        with pytest.raises(E.InvalidRequest):
            await sb.run_tests(ADD, [TestCase("", "")], time_limit=-1)
        with pytest.raises(E.InvalidRequest):
            await sb.run_tests(ADD, [TestCase("", "")], compare="fuzzy")
        # Still serving, the same sandbox too.
        report = await sb.run_tests(ADD, [TestCase("1 2", "3")], time_limit=5)
        assert verdicts(report) == ["accepted"]
    assert server.service.metrics.errors.labels("RunTests", "invalid_request")._value.get() >= 2


async def test_bad_requests_on_the_wire(server, client: AsyncSandboxClient, raw_stub) -> None:
    live = await client.create()
    sid = live.id
    md = {"metadata": bearer(KEY_A), "timeout": 60}
    ok_case = cpb.TestCase(input=b"1 2", expected_output=b"3")

    def req(**kw) -> pb.RunTestsRequest:
        base = {"sandbox_id": sid, "language": "python", "source": ADD, "tests": [ok_case]}
        base.update(kw)
        return pb.RunTestsRequest(**base)

    bad = [
        (req(language=""), "language is required"),
        (req(language="cobol"), "unknown language"),
        (req(source="   "), "source is empty"),
        (req(tests=[]), "no test cases"),
        (req(tests=[ok_case] * 10_001), "more than the maximum of 10000"),
        (
            req(tests=[cpb.TestCase(expected_output=b"1", check="assert True")]),
            "both expected_output and check",
        ),
        (req(language="cpp", tests=[cpb.TestCase(check="x")]), "check scripts"),
        (req(limits=cpb.Limits(wall_time_s=1e9)), "wall_time_s"),
        (req(limits=cpb.Limits(wall_time_s=math.nan)), "wall_time_s"),
        (req(limits=cpb.Limits(memory_bytes=1 << 62)), "memory_bytes"),
        (req(tests=[ok_case] * 10_000, limits=cpb.Limits(wall_time_s=60)), "maximum"),
        (req(compare=42), "compare"),
        (req(float_tolerance=-1.0), "float_tolerance"),
        (req(float_tolerance=math.inf), "float_tolerance"),
        (req(excerpt_bytes=1 << 30), "excerpt_bytes"),
        (req(sandbox_id=""), "sandbox_id"),
    ]
    for msg, says in bad:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await raw_stub.RunTests(msg, **md)
        err = info.value
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (says, err.code(), err.details())
        assert dict(err.trailing_metadata() or ())["sandboxes-error-kind"] == "invalid_request"
        assert says.lower() in (err.details() or "").lower(), (says, err.details())

    # Undecodable bytes (a string field with invalid UTF-8) are a clear INVALID_ARGUMENT too.
    raw = raw_stub.channel.unary_unary(
        "/sandboxes.v1.Sandboxes/RunTests",
        request_serializer=lambda b: b,
        response_deserializer=cpb.RunTestsReport.FromString,
    )
    broken = req().SerializeToString().replace(b"python", b"pyth\xffn")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await raw(broken, **md)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    # Unknown sandbox, and another key's sandbox: NOT_FOUND.
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await raw_stub.RunTests(req(sandbox_id="sb-nope"), **md)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await raw_stub.RunTests(req(), metadata=bearer("test-key-bob-9876543210"), timeout=60)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    # No key at all: UNAUTHENTICATED.
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await raw_stub.RunTests(req(), timeout=60)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED

    # The server, and the sandbox the bad requests named, keep serving.
    assert (await live.exec(["echo", "alive"])).stdout == b"alive\n"
    good = await raw_stub.RunTests(req(), **md)
    assert [c.verdict for c in good.cases] == [cpb.ACCEPTED] and good.passed == 1
    assert (await client.health())["status"] == "serving"
    await live.close()


async def test_excerpt_bytes_trims_output(client: AsyncSandboxClient, raw_stub) -> None:
    async with client.sandbox() as sb:
        msg = pb.RunTestsRequest(
            sandbox_id=sb.id,
            language="python",
            source="print('x' * 500)\nimport sys\nprint('y' * 500, file=sys.stderr)\n",
            tests=[cpb.TestCase(expected_output=b"nope")],
            excerpt_bytes=10,
        )
        report = await raw_stub.RunTests(msg, metadata=bearer(KEY_A), timeout=60)
    case = report.cases[0]
    assert case.verdict == cpb.WRONG_ANSWER
    assert case.stdout == b"x" * 10 and case.stderr == b"y" * 10


async def test_run_tests_counts_as_an_exec(make_server) -> None:
    """RunTests holds one exec slot of the key's quota while it runs, and is counted in metrics."""
    server = await make_server(quota=QuotaLimits(max_execs=1))
    async with AsyncSandboxClient(server.address, KEY_A, timeout=60) as c:
        sb = await c.create()
        m = f"sbx-judge-{uuid.uuid4().hex}"
        judging = asyncio.ensure_future(
            sb.run_tests(
                f"import os\nos.execv('/bin/sh', ['sh', '-c', 'sleep 1000; :', {m!r}])\n",
                [TestCase("", "")],
                time_limit=600,
            )
        )
        await wait_for(lambda: server.quotas.execs("alice") == 1, "RunTests to take its exec slot")
        with pytest.raises(E.QuotaExceeded):
            await sb.exec(["true"])
        with pytest.raises(E.QuotaExceeded):
            await sb.run_tests(ADD, [TestCase("1 2", "3")])
        await wait_for(lambda: pgrep(m), "the judged program to run")
        # Cancelling the call kills the judged program.
        judging.cancel()
        with pytest.raises(asyncio.CancelledError):
            await judging
        await wait_for(lambda: server.quotas.execs("alice") == 0, "exec slot to be freed")
        await wait_for(lambda: not pgrep(m), "the cancelled case's program to die")
        report = await sb.run_tests(ADD, [TestCase("1 2", "3"), TestCase("1 2", "4")], time_limit=5)
        assert verdicts(report) == ["accepted", "wrong_answer"]
        v = server.metrics.verdicts
        assert v.labels("python", "accepted")._value.get() == 1
        assert v.labels("python", "wrong_answer")._value.get() == 1
        assert server.metrics.exec_latency.labels("RunTests")._sum.get() > 0
        await sb.close()


def test_remote_run_tests_batch_has_the_shared_signature() -> None:
    assert inspect.signature(RemoteSandbox.run_tests_batch) == inspect.signature(SandboxBase.run_tests_batch)


async def test_a_batch_matches_the_embedded_one(server, client: AsyncSandboxClient) -> None:
    """One RunTestsBatch call over the wire gives, submission by submission, the reports the
    embedded `Sandbox.run_tests_batch` gives, each submission with its own language, limits and
    comparison."""
    gradings = [
        Grading(ADD, [TestCase("1 2", "3"), TestCase("1 2", "4")]),
        Grading(C_ADD, [TestCase("40 2", "42")], language="c"),
        Grading("int main(void) { return 0 }", [TestCase("", "")], language="c"),
        Grading("while True: pass", [TestCase("", "")], time_limit=0.5),
        Grading("print(0.1 + 0.2)", [TestCase("", "0.3")], compare="float"),
        Grading("print(0.1 + 0.2)", [TestCase("", "0.3")], compare="exact"),
        Grading(HUMANEVAL_PROGRAM, [TestCase(check=HUMANEVAL_CHECK)]),
        Grading(ADD, [TestCase("1 1", "3"), TestCase("1 1", "2")], stop_on_first_failure=True),
    ]
    async with client.sandbox() as remote, server.pool.sandbox() as local:
        got = {i: r async for i, r in remote.run_tests_batch(gradings, time_limit=5)}
        want = {i: r async for i, r in local.run_tests_batch(gradings, time_limit=5)}
    assert sorted(got) == sorted(want) == list(range(len(gradings)))
    for i in range(len(gradings)):
        assert type(got[i]) is TestReport
        assert verdicts(got[i]) == verdicts(want[i]), i
        assert (got[i].passed, got[i].total, got[i].compiled) == (
            want[i].passed,
            want[i].total,
            want[i].compiled,
        )
        assert [c.message for c in got[i].cases] == [c.message for c in want[i].cases]
    assert [verdicts(got[i]) for i in range(len(gradings))] == [
        ["accepted", "wrong_answer"],
        ["accepted"],
        ["compile_error"],
        ["time_limit"],
        ["accepted"],
        ["wrong_answer"],
        ["accepted"],
        ["wrong_answer", "skipped"],
    ]
    assert server.service.metrics.verdicts.labels("c", "compile_error")._value.get() >= 1


async def test_a_bad_batch_on_the_wire_is_refused_and_the_server_serves(server, client, raw_stub) -> None:
    live = await client.create()
    ok = pb.RunTestsRequest(
        language="python", source=ADD, tests=[cpb.TestCase(input=b"1 2", expected_output=b"3")]
    )
    bad = pb.RunTestsRequest(language="cobol", source="x", tests=[cpb.TestCase()])

    async def answers(**kw) -> list:
        call = raw_stub.RunTestsBatch(
            pb.RunTestsBatchRequest(sandbox_id=live.id, **kw), metadata=bearer(KEY_A), timeout=60
        )
        return [m async for m in call]

    for kw, match in [
        ({"submissions": []}, "no submissions"),
        ({"submissions": [ok, bad]}, "submission 1: unknown language"),
        ({"submissions": [ok] * 4097}, "more than the maximum of 4096"),
        ({"submissions": [ok], "parallelism": 10_000}, "parallelism"),
    ]:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await answers(**kw)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, kw
        assert match in info.value.details(), (kw, info.value.details())
    with pytest.raises(grpc.aio.AioRpcError) as info:
        call = raw_stub.RunTestsBatch(
            pb.RunTestsBatchRequest(sandbox_id="nope", submissions=[ok]), metadata=bearer(KEY_A)
        )
        [m async for m in call]
    assert info.value.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT)
    results = await answers(submissions=[ok, ok])
    assert sorted(m.index for m in results) == [0, 1]
    assert all(m.report.passed == 1 for m in results)
    await live.close()


async def test_cancelling_a_remote_batch_kills_its_programs(make_server) -> None:
    server = await make_server(quota=QuotaLimits(max_execs=1))
    async with AsyncSandboxClient(server.address, KEY_A, timeout=60) as c:
        sb = await c.create()
        m = f"sbx-batch-{uuid.uuid4().hex}"
        sleeper = f"import os\nos.execv('/bin/sh', ['sh', '-c', 'sleep 1000; :', {m!r}])\n"
        stream = sb.run_tests_batch([Grading(sleeper, [TestCase("", "")])] * 3, time_limit=600)
        first = asyncio.ensure_future(anext(stream))
        await wait_for(lambda: server.quotas.execs("alice") == 1, "the batch to take its exec slot")
        await wait_for(lambda: pgrep(m), "the batch's programs to run")
        with pytest.raises(E.QuotaExceeded):
            await sb.exec(["true"])
        first.cancel()
        stream.cancel()
        await wait_for(lambda: server.quotas.execs("alice") == 0, "exec slot to be freed")
        await wait_for(lambda: not pgrep(m), "the cancelled batch's programs to die")
        got = [r async for r in sb.run_tests_batch([Grading(ADD, [TestCase("1 2", "3")])])]
        assert [(i, r.all_passed) for i, r in got] == [(0, True)]
        await sb.close()
