"""Conversions between the wire messages of service.proto and the public `sandboxes.types`.

Shared by the server and the client so both sides read a field the same way.
"""

from __future__ import annotations

from sandboxes import types as T
from sandboxes._proto import service_pb2 as pb

__all__ = [
    "dir_entry_from_pb",
    "dir_entry_to_pb",
    "event_from_pb",
    "event_to_pb",
    "info_from_pb",
    "info_to_pb",
    "limits_from_pb",
    "limits_to_pb",
    "result_from_pb",
    "result_to_pb",
]

_PATH_TO_PB = {"spawn": pb.EXEC_PATH_SPAWN, "zygote": pb.EXEC_PATH_ZYGOTE}
_PATH_FROM_PB = {pb.EXEC_PATH_SPAWN: "spawn", pb.EXEC_PATH_ZYGOTE: "zygote"}

_LIMIT_FIELDS = (
    "wall_time_s",
    "cpu_time_s",
    "memory_bytes",
    "max_pids",
    "max_output_bytes",
    "max_file_size_bytes",
    "max_open_files",
)


def limits_to_pb(limits: T.Limits | None) -> pb.Limits | None:
    if limits is None:
        return None
    msg = pb.Limits(kill_on_output_limit=bool(limits.kill_on_output_limit))
    for name in _LIMIT_FIELDS:
        value = getattr(limits, name)
        if value is not None:
            setattr(msg, name, value)
    return msg


def limits_from_pb(msg: pb.Limits | None) -> T.Limits | None:
    """Zero fields mean "the default" on the wire and `None` in `types.Limits`."""
    if msg is None:
        return None
    values = {name: (getattr(msg, name) or None) for name in _LIMIT_FIELDS}
    if not any(v is not None for v in values.values()) and not msg.kill_on_output_limit:
        return None
    return T.Limits(kill_on_output_limit=msg.kill_on_output_limit, **values)


def result_to_pb(r: T.ExecResult, *, with_output: bool = True) -> pb.ExecResult:
    return pb.ExecResult(
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
        path=_PATH_TO_PB.get(r.path, pb.EXEC_PATH_UNSPECIFIED),
    )


def result_from_pb(m: pb.ExecResult) -> T.ExecResult:
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


def event_to_pb(ev: T.ExecEvent) -> pb.ExecEvent:
    kind = ev.kind
    if kind == "started":
        return pb.ExecEvent(started=pb.ExecEvent.Started(pid=ev.pid or 0))
    if kind == "stdout":
        return pb.ExecEvent(stdout=ev.data or b"")
    if kind == "stderr":
        return pb.ExecEvent(stderr=ev.data or b"")
    if kind == "exit":
        assert ev.result is not None
        return pb.ExecEvent(exit=result_to_pb(ev.result))
    return pb.ExecEvent(keepalive=pb.ExecEvent.Keepalive())


def event_from_pb(m: pb.ExecEvent) -> T.ExecEvent:
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


def dir_entry_to_pb(e: T.DirEntry) -> pb.DirEntry:
    return pb.DirEntry(name=e.name, is_dir=e.is_dir, size=e.size, mode=e.mode, is_symlink=e.is_symlink)


def dir_entry_from_pb(m: pb.DirEntry) -> T.DirEntry:
    return T.DirEntry(name=m.name, is_dir=m.is_dir, size=m.size, mode=m.mode, is_symlink=m.is_symlink)


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
    )
