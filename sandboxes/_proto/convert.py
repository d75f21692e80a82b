"""Conversions between the wire messages of service.proto and the public `sandboxes.types`.

Shared by the server and the client so both sides read a field the same way.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sandboxes import judging as J
from sandboxes import types as T
from sandboxes._proto import common_pb2 as cpb
from sandboxes._proto import service_pb2 as pb

__all__ = [
    "case_from_pb",
    "case_result_from_pb",
    "case_result_to_pb",
    "compare_from_pb",
    "compare_to_pb",
    "dir_entry_from_pb",
    "dir_entry_to_pb",
    "event_from_pb",
    "event_to_pb",
    "info_from_pb",
    "info_to_pb",
    "limits_from_pb",
    "limits_to_pb",
    "report_from_pb",
    "report_to_pb",
    "result_from_pb",
    "result_to_pb",
    "run_tests_request_to_pb",
    "verdict_from_pb",
    "verdict_to_pb",
]

_PATH_TO_PB = {"spawn": cpb.EXEC_PATH_SPAWN, "zygote": cpb.EXEC_PATH_ZYGOTE}
_PATH_FROM_PB = {cpb.EXEC_PATH_SPAWN: "spawn", cpb.EXEC_PATH_ZYGOTE: "zygote"}

_LIMIT_FIELDS = (
    "wall_time_s",
    "cpu_time_s",
    "memory_bytes",
    "max_pids",
    "max_output_bytes",
    "max_file_size_bytes",
    "max_open_files",
)


def limits_to_pb(limits: T.Limits | None) -> cpb.Limits | None:
    if limits is None:
        return None
    msg = cpb.Limits(kill_on_output_limit=bool(limits.kill_on_output_limit))
    for name in _LIMIT_FIELDS:
        value = getattr(limits, name)
        if value is not None:
            setattr(msg, name, value)
    return msg


def limits_from_pb(msg: cpb.Limits | None) -> T.Limits | None:
    """Zero fields mean "the default" on the wire and `None` in `types.Limits`."""
    if msg is None:
        return None
    values = {name: (getattr(msg, name) or None) for name in _LIMIT_FIELDS}
    if not any(v is not None for v in values.values()) and not msg.kill_on_output_limit:
        return None
    return T.Limits(kill_on_output_limit=msg.kill_on_output_limit, **values)


def result_to_pb(r: T.ExecResult, *, with_output: bool = True) -> cpb.ExecResult:
    return cpb.ExecResult(
        exit_code=r.exit_code,
        signal=r.signal,
        stdout=r.stdout if with_output else b"",
        stderr=r.stderr if with_output else b"",
        timed_out=r.timed_out,
        oom_killed=r.oom_killed,
        stdout_truncated=r.stdout_truncated,
        stderr_truncated=r.stderr_truncated,
        wall_time_s=r.duration_s,
        cpu_time_s=r.cpu_time_s,
        peak_memory_bytes=r.peak_memory_bytes,
        cpu_limited=r.cpu_limited,
        pids_limited=r.pids_limited,
        file_size_limited=r.file_size_limited,
        path=_PATH_TO_PB.get(r.path, cpb.EXEC_PATH_UNSPECIFIED),
    )


def result_from_pb(m: cpb.ExecResult) -> T.ExecResult:
    return T.ExecResult(
        exit_code=m.exit_code,
        stdout=m.stdout,
        stderr=m.stderr,
        signal=m.signal,
        timed_out=m.timed_out,
        oom_killed=m.oom_killed,
        stdout_truncated=m.stdout_truncated,
        stderr_truncated=m.stderr_truncated,
        cpu_limited=m.cpu_limited,
        pids_limited=m.pids_limited,
        file_size_limited=m.file_size_limited,
        duration_s=m.wall_time_s,
        cpu_time_s=m.cpu_time_s,
        peak_memory_bytes=m.peak_memory_bytes,
        path=_PATH_FROM_PB.get(m.path, "spawn"),
    )


def event_to_pb(ev: T.ExecEvent) -> cpb.ExecEvent:
    kind = ev.kind
    if kind == "started":
        return cpb.ExecEvent(started=cpb.ExecEvent.Started(pid=ev.pid or 0))
    if kind == "stdout":
        return cpb.ExecEvent(stdout=ev.data or b"")
    if kind == "stderr":
        return cpb.ExecEvent(stderr=ev.data or b"")
    if kind == "exit":
        assert ev.result is not None
        return cpb.ExecEvent(exit=result_to_pb(ev.result))
    return cpb.ExecEvent(keepalive=cpb.ExecEvent.Keepalive())


def event_from_pb(m: cpb.ExecEvent) -> T.ExecEvent:
    kind = m.WhichOneof("kind")
    if kind == "started":
        return T.ExecEvent("started", pid=m.started.pid)
    if kind == "stdout":
        return T.ExecEvent("stdout", data=m.stdout)
    if kind == "stderr":
        return T.ExecEvent("stderr", data=m.stderr)
    if kind == "exit":
        return T.ExecEvent("exit", result=result_from_pb(m.exit))
    return T.ExecEvent("keepalive")


def dir_entry_to_pb(e: T.DirEntry) -> cpb.DirEntry:
    return cpb.DirEntry(**dataclasses.asdict(e))


def dir_entry_from_pb(m: cpb.DirEntry) -> T.DirEntry:
    return T.DirEntry.of(m)


def info_to_pb(i: T.AgentInfo) -> pb.InfoResponse:
    return pb.InfoResponse(
        version=i.version,
        cgroup_version=i.cgroup_version,
        seccomp=i.seccomp,
        namespaces=list(i.namespaces),
        languages=list(i.languages),
        zygote=i.zygote,
        sandbox_uid=i.sandbox_uid,
        sandbox_gid=i.sandbox_gid,
        running_execs=i.running_execs,
        total_execs=i.total_execs,
        memory_bytes=i.memory_bytes,
        uptime_s=i.uptime_s,
        work_dir=i.work_dir,
        landlock=i.landlock,
        egress_allowed=i.egress_allowed,
        egress_refused=i.egress_refused,
    )


def info_from_pb(m: pb.InfoResponse) -> T.AgentInfo:
    return T.AgentInfo(
        version=m.version,
        cgroup_version=m.cgroup_version,
        seccomp=m.seccomp,
        namespaces=tuple(m.namespaces),
        languages=tuple(m.languages),
        zygote=m.zygote,
        sandbox_uid=m.sandbox_uid,
        sandbox_gid=m.sandbox_gid,
        running_execs=m.running_execs,
        total_execs=m.total_execs,
        memory_bytes=m.memory_bytes,
        uptime_s=m.uptime_s,
        work_dir=m.work_dir,
        landlock=m.landlock,
        egress_allowed=m.egress_allowed,
        egress_refused=m.egress_refused,
    )


# -- run_tests ---------------------------------------------------------------------------------

_COMPARE_TO_PB: dict[str, int] = {
    "exact": cpb.COMPARE_EXACT,
    "whitespace": cpb.COMPARE_WHITESPACE,
    "float": cpb.COMPARE_FLOAT,
}
_COMPARE_FROM_PB: dict[int, str] = {v: k for k, v in _COMPARE_TO_PB.items()} | {
    cpb.COMPARE_UNSPECIFIED: "whitespace"
}

_VERDICT_TO_PB: dict[J.Verdict, int] = {
    J.Verdict.ACCEPTED: cpb.ACCEPTED,
    J.Verdict.WRONG_ANSWER: cpb.WRONG_ANSWER,
    J.Verdict.TIME_LIMIT: cpb.TIME_LIMIT,
    J.Verdict.MEMORY_LIMIT: cpb.MEMORY_LIMIT,
    J.Verdict.RUNTIME_ERROR: cpb.RUNTIME_ERROR,
    J.Verdict.COMPILE_ERROR: cpb.COMPILE_ERROR,
    J.Verdict.OUTPUT_LIMIT: cpb.OUTPUT_LIMIT,
    J.Verdict.SANDBOX_ERROR: cpb.SANDBOX_ERROR,
    J.Verdict.SKIPPED: cpb.SKIPPED,
}
_VERDICT_FROM_PB: dict[int, J.Verdict] = {v: k for k, v in _VERDICT_TO_PB.items()}


def compare_to_pb(compare: str) -> Any:
    return _COMPARE_TO_PB[compare]


def compare_from_pb(value: int) -> str | None:
    """The compare mode of a wire value; None for a value this package does not know."""
    return _COMPARE_FROM_PB.get(value)


def verdict_to_pb(v: J.Verdict) -> Any:
    return _VERDICT_TO_PB[J.Verdict(v)]


def verdict_from_pb(value: int) -> J.Verdict | None:
    """The verdict of a wire value; None for one this package does not know (a newer server)."""
    return _VERDICT_FROM_PB.get(value)


def case_from_pb(m: cpb.TestCase) -> J.TestCase:
    """A wire case -> `TestCase`: a non-empty `check` makes it check-script style, otherwise it is
    stdin/stdout style (an empty expected output is a valid expectation). Raises `InvalidRequest`."""
    if m.check:
        return J.TestCase(input=m.input, check=m.check)
    return J.TestCase(input=m.input, expected_output=m.expected_output)


def run_tests_request_to_pb(sandbox_id: str, req: J.RunTestsRequest) -> pb.RunTestsRequest:
    msg = pb.RunTestsRequest(
        sandbox_id=sandbox_id,
        language=req.language,
        source=req.source,
        tests=[cpb.TestCase(input=i, expected_output=o, check=c) for i, o, c in req.tests],
        stop_on_first_failure=req.stop_on_first_failure,
        compare=compare_to_pb(req.compare),
        float_tolerance=req.float_tolerance,
    )
    limits = limits_to_pb(req.limits)
    if limits is not None:
        msg.limits.CopyFrom(limits)
    return msg


def case_result_to_pb(c: J.CaseResult, *, excerpt_bytes: int = 0) -> cpb.CaseResult:
    """`excerpt_bytes` > 0 trims stdout / stderr further."""
    out, err = c.stdout, c.stderr
    if excerpt_bytes:
        out, err = out[:excerpt_bytes], err[:excerpt_bytes]
    return cpb.CaseResult(
        verdict=verdict_to_pb(c.verdict),
        exit_code=c.exit_code,
        signal=c.signal,
        wall_time_s=c.duration_s,
        cpu_time_s=c.cpu_time_s,
        peak_memory_bytes=c.peak_memory_bytes,
        stdout=out,
        stderr=err,
        message=c.message,
        path=_PATH_TO_PB.get(c.path, cpb.EXEC_PATH_UNSPECIFIED),
    )


def case_result_from_pb(m: cpb.CaseResult) -> J.CaseResult:
    verdict = verdict_from_pb(m.verdict)
    message = m.message
    if verdict is None:
        # A server newer than this package: keep the report usable, flag the case (as the
        # embedded bridge does for an unknown verdict from the agent).
        verdict = J.Verdict.SANDBOX_ERROR
        message = f"unknown verdict {m.verdict} from the server" + (f": {message}" if message else "")
    return J.CaseResult(
        verdict=verdict,
        exit_code=m.exit_code,
        signal=m.signal,
        duration_s=m.wall_time_s,
        cpu_time_s=m.cpu_time_s,
        peak_memory_bytes=m.peak_memory_bytes,
        stdout=m.stdout,
        stderr=m.stderr,
        message=message,
        path=_PATH_FROM_PB.get(m.path, "spawn"),
    )


def report_to_pb(r: J.TestReport, *, excerpt_bytes: int = 0) -> cpb.RunTestsReport:
    return cpb.RunTestsReport(
        cases=[case_result_to_pb(c, excerpt_bytes=excerpt_bytes) for c in r.cases],
        passed=r.passed,
        total=r.total,
        compiled=r.compiled,
        compile_output=r.compile_output,
        compile_time_s=r.compile_time_s,
        wall_time_s=r.duration_s,
    )


def report_from_pb(m: cpb.RunTestsReport) -> J.TestReport:
    return J.TestReport(
        cases=tuple(case_result_from_pb(c) for c in m.cases),
        passed=m.passed,
        total=m.total,
        compiled=m.compiled,
        compile_output=m.compile_output,
        compile_time_s=m.compile_time_s,
        duration_s=m.wall_time_s,
    )
