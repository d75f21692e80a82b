"""The one boundary between Python and the native module `sandboxes._native`.

Every native call goes through here: `native()` loads the extension (with a clear error when it was
not built), `api()` is that module behind `Translated`, which turns every `NativeError` of a call
into its `sandboxes.errors` type, and the `to_*` helpers convert flat native values into the
public dataclasses of `sandboxes.types`.
"""

from __future__ import annotations

import importlib
import inspect
import os
import shutil
import sysconfig
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from . import errors, judging, types

__all__ = [
    "AGENT_BIN_ENV",
    "Translated",
    "agent_path",
    "api",
    "native",
    "to_agent_info",
    "to_case_result",
    "to_dir_entry",
    "to_exec_event",
    "to_exec_result",
    "to_native_limits",
    "to_test_report",
    "translate",
]

AGENT_BIN_ENV = "SANDBOXES_AGENT_BIN"
AGENT_BIN_NAME = "sandbox-agent"

_native: ModuleType | None = None

F = TypeVar("F", bound=Callable[..., Any])


def native() -> ModuleType:
    """The native module, imported on first use so the pure-Python parts work without it."""
    global _native
    if _native is None:
        try:
            _native = importlib.import_module("sandboxes._native")
        except ImportError as e:
            raise errors.LaunchError(
                "the native extension sandboxes._native is not built; run `make install`",
                detail=str(e),
                step="import",
            ) from e
    return _native


def _is_native_error(exc: BaseException) -> bool:
    return _native is not None and isinstance(exc, _native.NativeError)


def translate(exc: BaseException) -> errors.SandboxError:
    """The `sandboxes.errors` exception for a `NativeError` (anything with `kind` / `detail` /
    `step` / `limit`): its kind is an `ErrorKind` value and its step a `Step` value, carried as
    they are."""
    kind = getattr(exc, "kind", "") or errors.ErrorKind.INTERNAL.value
    detail = getattr(exc, "detail", "") or str(exc)
    step = errors.Step.parse(getattr(exc, "step", "") or "")
    cls = errors.error_class(kind)
    if cls is errors.LaunchError:
        where = f" at step {step.value!r}" if step else ""
        return errors.LaunchError(f"sandbox launch failed{where}: {detail}", detail=detail, step=step)
    message = f"{kind}: {detail}" if detail else kind
    if cls is errors.SandboxLimitExceeded:
        limit = getattr(exc, "limit", "") or ""
        return errors.SandboxLimitExceeded(message, detail=detail, step=step, limit=limit)
    return cls(message, detail=detail, step=step)


class Translated:
    """A native object (the module, an agent client, an exec stream, a launched sandbox) whose
    every call raises `sandboxes.errors` instead of `NativeError`: the one place native errors are
    translated. A call's awaitable is translated when awaited, and a native object a call returns
    (a client, a stream, a sandbox handle) comes back wrapped too. Plain attributes pass through.
    """

    __slots__ = ("_native",)

    def __init__(self, obj: Any) -> None:
        self._native = obj

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._native, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                result = attr(*args, **kwargs)
            except Exception as e:
                if _is_native_error(e):
                    raise translate(e) from e
                raise
            if inspect.isawaitable(result):
                return _awaited(result)
            return _wrapped(result)

        return call

    def __repr__(self) -> str:
        return f"Translated({self._native!r})"


# Native types whose instances have calls that can fail (values and configs are passed as they are).
_WRAPPED = frozenset({"AgentClient", "ExecStream", "GradeStream", "LocalSandbox"})


def _wrapped(value: Any) -> Any:
    return Translated(value) if type(value).__name__ in _WRAPPED and _native is not None else value


async def _awaited(aw: Any) -> Any:
    try:
        return _wrapped(await aw)
    except Exception as e:
        if _is_native_error(e):
            raise translate(e) from e
        raise


_api: Translated | None = None


def api() -> Translated:
    """The native module behind `Translated`: what every caller in the package uses."""
    global _api
    if _api is None:
        _api = Translated(native())
    return _api


# --- conversions ---------------------------------------------------------------------------------


def to_exec_result(r: Any) -> types.ExecResult:
    """`_native.ExecResult` -> `types.ExecResult`."""
    return types.ExecResult(
        exit_code=r.exit_code,
        stdout=bytes(r.stdout),
        stderr=bytes(r.stderr),
        signal=r.signal,
        timed_out=r.timed_out,
        oom_killed=r.oom_killed,
        stdout_truncated=r.stdout_truncated,
        stderr_truncated=r.stderr_truncated,
        cpu_limited=r.cpu_limited,
        pids_limited=r.pids_limited,
        file_size_limited=r.file_size_limited,
        duration_s=r.wall_time_s,
        cpu_time_s=r.cpu_time_s,
        peak_memory_bytes=r.peak_memory_bytes,
        path=r.path or "spawn",
    )


def to_exec_event(e: Any) -> types.ExecEvent:
    """`_native.ExecEvent` -> `types.ExecEvent`."""
    return types.ExecEvent(
        kind=e.kind,
        pid=e.pid,
        data=bytes(e.data) if e.data is not None else b"",
        result=to_exec_result(e.result) if e.result is not None else None,
    )


def to_dir_entry(e: Any) -> types.DirEntry:
    """`_native.DirEntry` -> `types.DirEntry`."""
    return types.DirEntry.of(e)


def to_agent_info(i: Any) -> types.AgentInfo:
    """`_native.AgentInfo` -> `types.AgentInfo`."""
    return types.AgentInfo(
        version=i.version,
        cgroup_version=i.cgroup_version,
        seccomp=i.seccomp,
        namespaces=tuple(i.namespaces),
        languages=tuple(i.languages),
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


def _verdict(name: str) -> judging.Verdict:
    try:
        return judging.Verdict(name)
    except ValueError:
        # An agent newer than this package: keep the report usable, flag the case.
        return judging.Verdict.SANDBOX_ERROR


def to_case_result(c: Any) -> judging.CaseResult:
    """`_native.CaseResult` -> `judging.CaseResult`."""
    verdict = _verdict(c.verdict)
    message = c.message
    if verdict is judging.Verdict.SANDBOX_ERROR and c.verdict != verdict.value:
        message = f"unknown verdict {c.verdict!r} from the agent" + (f": {message}" if message else "")
    return judging.CaseResult(
        verdict=verdict,
        exit_code=c.exit_code,
        signal=c.signal,
        duration_s=c.wall_time_s,
        cpu_time_s=c.cpu_time_s,
        peak_memory_bytes=c.peak_memory_bytes,
        stdout=bytes(c.stdout),
        stderr=bytes(c.stderr),
        message=message,
        path=c.path or "spawn",
    )


def to_test_report(r: Any) -> judging.TestReport:
    """`_native.RunTestsReport` -> `judging.TestReport`."""
    return judging.TestReport(
        cases=tuple(to_case_result(c) for c in r.cases),
        passed=r.passed,
        total=r.total,
        compiled=r.compiled,
        compile_output=bytes(r.compile_output),
        compile_time_s=r.compile_time_s,
        duration_s=r.wall_time_s,
    )


def to_native_limits(limits: types.Limits | None) -> Any:
    """`types.Limits` (None = default) -> `_native.Limits` (0 = default); validates first."""
    if limits is None:
        return None
    limits.validate()
    return native().Limits(
        wall_time_s=float(limits.wall_time_s or 0.0),
        cpu_time_s=float(limits.cpu_time_s or 0.0),
        memory_bytes=int(limits.memory_bytes or 0),
        max_pids=int(limits.max_pids or 0),
        max_output_bytes=int(limits.max_output_bytes or 0),
        max_file_size_bytes=int(limits.max_file_size_bytes or 0),
        max_open_files=int(limits.max_open_files or 0),
        kill_on_output_limit=bool(limits.kill_on_output_limit),
    )


# --- the agent binary ----------------------------------------------------------------------------


def _executable(p: Path) -> bool:
    return p.is_file() and os.access(p, os.X_OK)


def agent_path() -> str:
    """Path of the `sandbox-agent` binary the local backend launches.

    Looked up in order: env `SANDBOXES_AGENT_BIN`; `sandboxes/_bin/sandbox-agent` next to the
    package (wheels); the repository's `sandbox_core/target/release/sandbox-agent` (development
    checkout); the active environment's scripts dir (a `bindings = "bin"` wheel). Raises
    `LaunchError` (step "agent_path") when none exists.
    """
    env = os.environ.get(AGENT_BIN_ENV)
    if env:
        p = Path(env)
        if not _executable(p):
            raise errors.LaunchError(f"{AGENT_BIN_ENV}={env} is not an executable file", step="agent_path")
        return str(p.resolve())
    pkg = Path(__file__).resolve().parent
    candidates = [
        pkg / "_bin" / AGENT_BIN_NAME,
        pkg.parent / "sandbox_core" / "target" / "release" / AGENT_BIN_NAME,
        Path(sysconfig.get_path("scripts")) / AGENT_BIN_NAME,
    ]
    for p in candidates:
        if _executable(p):
            return str(p)
    found = shutil.which(AGENT_BIN_NAME)
    if found:
        return found
    tried = ", ".join(str(c) for c in candidates)
    raise errors.LaunchError(
        f"sandbox-agent binary not found (tried ${AGENT_BIN_ENV}, {tried}, $PATH); "
        "build it with `make install` or set $" + AGENT_BIN_ENV,
        step="agent_path",
    )
