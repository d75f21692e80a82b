"""`Sandbox`: the one interface both modes expose (embedded pool and remote client).

`SandboxBase` holds the conveniences every implementation shares: a str argv runs through
`/bin/sh -c`, `timeout` becomes the program's wall limit (the RPC deadline is that plus a margin),
per-claim env is merged client-side, str data is UTF-8 encoded, requests are validated.
`Sandbox` implements it by talking to the sandbox's agent directly through the native client.
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Self

from . import _bridge
from ._proto import common_pb2 as cpb
from .egress import EgressPolicy
from .errors import InvalidRequest, SandboxLost, SandboxPaused, SandboxTimeout
from .grading import MAX_BATCH, GradeStream, Grading, batch_deadline, build_batch
from .judging import RunTestsRequest, TestCase, TestReport, build_run_tests_request
from .owning_pool import OwningPool
from .state.checkpoints import DEFAULT_TTL_S, Checkpoint
from .templates import validate_env
from .types import (
    DEFAULT_READ_MAX_BYTES,
    AgentInfo,
    DirEntry,
    ExecEvent,
    ExecResult,
    FileMatch,
    Limits,
    ReadRange,
)

__all__ = ["Argv", "Data", "ExecStream", "FileVerbs", "Sandbox", "SandboxBase"]

log = logging.getLogger(__name__)

Argv = list[str] | tuple[str, ...] | str
Data = bytes | bytearray | memoryview | str

# The RPC deadline of an exec is its wall limit plus this margin (plus 10%): the agent enforces
# the limit and reports `timed_out`; the deadline only catches a wedged agent or a lost link.
DEADLINE_MARGIN_S = 5.0
# Deadline of the file / info calls.
DEFAULT_CALL_TIMEOUT_S = 60.0


def as_bytes(data: Data, what: str = "data") -> bytes:
    """bytes of `data`; str is UTF-8 encoded."""
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise InvalidRequest(f"{what} must be bytes or str, got {type(data).__name__}")


def normalize_argv(argv: Argv) -> list[str]:
    """A str runs via `/bin/sh -c`; a list must be non-empty strings without NUL."""
    if isinstance(argv, str):
        if not argv.strip():
            raise InvalidRequest("empty command")
        argv = ["/bin/sh", "-c", argv]
    elif isinstance(argv, (list, tuple)):
        argv = list(argv)
    else:
        raise InvalidRequest(f"argv must be a list of str or a str, got {type(argv).__name__}")
    if not argv or not argv[0]:
        raise InvalidRequest("empty argv")
    for a in argv:
        if not isinstance(a, str) or "\0" in a:
            raise InvalidRequest(f"argv items must be str without NUL, got {a!r}")
    return argv


@dataclasses.dataclass(frozen=True)
class ExecRequest:
    """A validated exec request, as the implementations receive it."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    limits: Limits
    deadline_s: float | None
    keep_descendants: bool = False
    terminal: tuple[int, int] | None = None  # (rows, cols) of a pseudo-terminal
    user: str = ""  # a user of the sandbox to run as; "": its programs' user


def check_user(user: object) -> str:
    """A user to run as or write for: a name or uid of the sandbox's `/etc/passwd`, "" for its
    programs' own; `InvalidRequest` otherwise (the agent says whether the sandbox has it)."""
    if user is None:
        return ""
    if not isinstance(user, str) or len(user) > 256 or any(c in user for c in ":\0\n"):
        raise InvalidRequest(f"user must be a user name or uid, got {user!r}")
    return user


def check_path(path: object) -> str:
    """A path of a file call: a non-empty string without NUL; `InvalidRequest` otherwise."""
    if not isinstance(path, str) or not path or "\0" in path:
        raise InvalidRequest(f"invalid path {path!r}")
    return path


def check_mode(mode: object) -> int:
    """Permission bits (0 to 0o7777); `InvalidRequest` otherwise."""
    if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o7777:
        raise InvalidRequest(f"invalid mode {mode!r}: permission bits, 0 to 0o7777")
    return mode


def check_depth(depth: object) -> int:
    """Levels of a listing, 1 to 64; `InvalidRequest` otherwise."""
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= 64:
        raise InvalidRequest(f"depth must be an int from 1 to 64, got {depth!r}")
    return depth


def check_text(text: object, what: str) -> str:
    """A non-empty string without NUL; `InvalidRequest` otherwise."""
    if not isinstance(text, str) or not text or "\0" in text:
        raise InvalidRequest(f"{what} must be a non-empty string without NUL, got {text!r}")
    return text


def check_terminal(rows: object, cols: object) -> tuple[int, int]:
    """`(rows, cols)` of a terminal, each 1-65535; `InvalidRequest` otherwise."""
    for name, v in (("rows", rows), ("cols", cols)):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 65535:
            raise InvalidRequest(f"terminal {name} must be an int from 1 to 65535, got {v!r}")
    return int(rows), int(cols)  # type: ignore[call-overload]


class ExecStream:
    """One running program: an async iterator of `ExecEvent` (started, stdout, stderr, exit).

    `send_stdin`, `close_stdin` and `signal` talk to the program while it runs; `cancel()` (or
    leaving `async with`) kills it. After the exit event, `result` holds its `ExecResult` (whose
    stdout / stderr are empty: they were streamed); `wait()` drains the rest and returns a result
    with the remaining output collected.

    `source` is any object with the native stream's methods (`next`, `send_stdin`, `close_stdin`,
    `signal`, `cancel`); `convert` turns its events into `ExecEvent`.
    """

    def __init__(
        self,
        source: Any,
        *,
        convert: Callable[[Any], ExecEvent] = lambda e: e,
        stdin: bytes | None = None,
        terminal: bool = False,
    ) -> None:
        self._source = source
        self._terminal = terminal
        self._convert = convert
        self._stdin = stdin
        self._feeder: asyncio.Task[None] | None = None
        self._done = False
        self._on_end: list[Callable[[], object]] = []
        self.pid: int | None = None
        self.result: ExecResult | None = None

    @property
    def terminal(self) -> bool:
        """Whether the program runs on a terminal (started with `terminal=`)."""
        return self._terminal

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> ExecEvent:
        if self._done:
            raise StopAsyncIteration
        if self._stdin is not None and self._feeder is None:
            self._feeder = asyncio.ensure_future(self._feed(self._stdin))
        try:
            raw = await self._source.next()
        except BaseException:
            self.cancel()
            raise
        if raw is None:
            self._finish()
            raise StopAsyncIteration
        event = self._convert(raw)
        if event.kind == "started":
            self.pid = event.pid
        elif event.kind == "exit":
            self.result = event.result
        return event

    async def _feed(self, data: bytes) -> None:
        try:
            if data:
                await self.send_stdin(data)
            await self.close_stdin()
        except Exception as e:  # noqa: BLE001 - the program may exit before reading its input
            log.debug("stdin feed stopped: %s", e)

    async def send_stdin(self, data: Data) -> None:
        """Write to the program's stdin."""
        await self._source.send_stdin(as_bytes(data, "stdin"))

    async def close_stdin(self) -> None:
        """Close the program's stdin (it reads EOF)."""
        await self._source.close_stdin()

    async def signal(self, signo: int) -> None:
        """Send a signal to the program's process group."""
        await self._source.signal(int(signo))

    async def resize(self, rows: int, cols: int) -> None:
        """Give the program's terminal a new size (a stream started with `terminal=`): its
        foreground process group sees SIGWINCH."""
        await self._source.resize(*self.check_resize(rows, cols))

    def check_resize(self, rows: object, cols: object) -> tuple[int, int]:
        """The terminal size a resize to `rows` x `cols` asks for; `InvalidRequest` if the size
        is absurd or the program has no terminal."""
        size = check_terminal(rows, cols)
        if not self.terminal:
            raise InvalidRequest("this program runs without a terminal: start it with terminal=")
        return size

    def cancel(self) -> None:
        """Kill the program (no-op once it exited)."""
        if not self._done:
            self._source.cancel()
        self._finish()

    def on_end(self, fn: Callable[[], object]) -> None:
        """Call `fn` once when the stream is over: its last event read, an error, or `cancel()`."""
        if self._done:
            fn()
        else:
            self._on_end.append(fn)

    def _finish(self) -> None:
        self._done = True
        if self._feeder is not None and not self._feeder.done():
            self._feeder.cancel()
        ends, self._on_end = self._on_end, []
        for fn in ends:
            fn()

    async def aclose(self) -> None:
        """Same as `cancel()`; lets `contextlib.aclosing` work."""
        self.cancel()

    async def wait(self) -> ExecResult:
        """Consume the remaining events; the exit result with the output seen here filled in."""
        out, err = bytearray(), bytearray()
        async for ev in self:
            if ev.kind == "stdout":
                out += ev.data
            elif ev.kind == "stderr":
                err += ev.data
        if self.result is None:
            raise SandboxLost("exec stream ended without an exit event")
        return dataclasses.replace(
            self.result,
            stdout=self.result.stdout + bytes(out),
            stderr=self.result.stderr + bytes(err),
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cancel()


class FileVerbs(abc.ABC):
    """The agent's file operations beyond read, write, list and remove, as methods over one
    `file_op` (common.proto's `FileOpRequest`): a sandbox's own, or a charged session's."""

    @abc.abstractmethod
    async def file_op(self, op: cpb.FileOpRequest) -> cpb.FileOpResponse:
        """One file operation of the agent's (common.proto's `FileOpRequest`), as the methods
        below build them."""

    async def stat(self, path: str) -> DirEntry:
        """The entry of `path` (a symlink is described, not followed); `NotFound` if none."""
        out = await self.file_op(cpb.FileOpRequest(stat=cpb.StatOp(path=check_path(path))))
        return DirEntry.of(out.entries[0])

    async def make_dir(
        self, path: str, *, mode: int = 0o755, exist_ok: bool = True, user: str | None = None
    ) -> DirEntry:
        """Make the directory `path` and its missing parents; an existing one is `Conflict`
        unless `exist_ok`, a file there is `InvalidRequest`. `user`: whose they are."""
        op = cpb.MakeDirOp(
            path=check_path(path), mode=check_mode(mode), exist_ok=exist_ok, user=check_user(user)
        )
        return DirEntry.of((await self.file_op(cpb.FileOpRequest(make_dir=op))).entries[0])

    async def move(
        self,
        source: str,
        destination: str,
        *,
        make_parents: bool = False,
        into_directory: bool = False,
        user: str | None = None,
    ) -> DirEntry:
        """Rename `source` to `destination` (a file replaces a file, a directory an empty one;
        between file systems it is copied, then removed). `make_parents`: make destination's
        missing parents (`user`'s); `into_directory`: an existing directory at destination
        receives source inside it, as `mv` does. Answers the moved entry."""
        op = cpb.MoveOp(
            source=check_path(source),
            destination=check_path(destination),
            make_parents=make_parents,
            into_directory=into_directory,
            user=check_user(user),
        )
        return DirEntry.of((await self.file_op(cpb.FileOpRequest(move=op))).entries[0])

    async def set_permissions(
        self, path: str, *, mode: int | None = None, owner: str | None = None, group: str | None = None
    ) -> DirEntry:
        """Set `path`'s permission bits and/or its owner and group (names of the sandbox's
        /etc/passwd and /etc/group, or ids; another user's only in a sandbox whose programs run
        as root). A symlink's target is changed."""
        op = cpb.SetPermissionsOp(path=check_path(path), owner=check_user(owner), group=check_user(group))
        if mode is not None:
            op.mode = check_mode(mode)
        return DirEntry.of((await self.file_op(cpb.FileOpRequest(set_permissions=op))).entries[0])

    async def find_files(self, path: str, pattern: str) -> list[str]:
        """Absolute paths under `path` (itself included) whose name matches the glob `pattern`."""
        op = cpb.FindOp(path=check_path(path), pattern=check_text(pattern, "pattern"))
        return list((await self.file_op(cpb.FileOpRequest(find=op))).paths)

    async def search_files(self, path: str, text: str) -> list[FileMatch]:
        """The lines that contain `text` in the files under `path` (or in `path`), as `grep -rnIF`:
        files that look binary are skipped."""
        op = cpb.SearchOp(path=check_path(path), text=check_text(text, "text"))
        out = await self.file_op(cpb.FileOpRequest(search=op))
        return [FileMatch(m.path, m.line, m.content) for m in out.matches]


class SandboxBase(FileVerbs):
    """The interface of a sandbox, whichever way it is reached.

    Implementations provide `_exec`, `_exec_stream`, `_write_files`, `read_file`, `list_dir`,
    `remove`, `info` and `close`, and `_run_tests` (it receives a validated `RunTestsRequest`);
    the public conveniences are shared here.
    """

    id: str
    template: str
    labels: dict[str, str]

    def __init__(
        self,
        id: str,
        template: str,
        *,
        labels: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.id = id
        self.template = template
        self.labels = dict(labels or {})
        self.env: dict[str, str] = {}
        self.default_limits = limits or Limits()
        if env:
            self.set_env(env)

    def set_env(self, env: Mapping[str, str]) -> None:
        """Add per-claim environment merged into every exec (client-side: no round trip)."""
        validate_env(env)
        self.env.update(env)

    def _request(
        self,
        argv: Argv,
        timeout: float | None,
        env: Mapping[str, str] | None,
        cwd: str | None,
        limits: Limits | None,
        keep_descendants: bool = False,
        user: str | None = None,
    ) -> ExecRequest:
        args = normalize_argv(argv)
        merged_env = dict(self.env)
        if env:
            validate_env(env)
            merged_env.update(env)
        if limits is not None and not isinstance(limits, Limits):
            raise InvalidRequest(f"limits must be sandboxes.Limits, got {type(limits).__name__}")
        eff = self.default_limits.merged(limits)
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
                raise InvalidRequest(f"timeout must be a number, got {timeout!r}")
            if not math.isfinite(timeout) or timeout <= 0:
                raise InvalidRequest(f"timeout must be > 0, got {timeout!r}")
            eff = dataclasses.replace(eff, wall_time_s=float(timeout))
        eff.validate()
        deadline = None
        if eff.wall_time_s:
            deadline = eff.wall_time_s * 1.1 + DEADLINE_MARGIN_S
        if cwd is not None and (not isinstance(cwd, str) or "\0" in cwd):
            raise InvalidRequest(f"cwd must be a str without NUL, got {cwd!r}")
        return ExecRequest(
            args, merged_env, cwd or "", eff, deadline, bool(keep_descendants), user=check_user(user)
        )

    async def exec(
        self,
        argv: Argv,
        *,
        timeout: float | None = None,
        stdin: Data = b"",
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        limits: Limits | None = None,
        keep_descendants: bool = False,
        user: str | None = None,
    ) -> ExecResult:
        """Run a program to completion. A str `argv` runs via `/bin/sh -c`.

        `timeout` is the program's wall-time limit in seconds; passing it yields a result with
        `timed_out=True` (the whole process tree is killed), not an exception. A failing program
        is a result too; exceptions mean the infrastructure failed (`SandboxLost`, ...).
        With `keep_descendants`, what the program leaves running (`server &`) outlives it, as in
        a container, until it ends or the sandbox does; otherwise it dies with the program.
        `user` (a name of the sandbox's `/etc/passwd`, or a uid) runs it as that user, with its
        groups and HOME; only a sandbox whose programs run as root has users other than its own.
        """
        req = self._request(argv, timeout, env, cwd, limits, keep_descendants, user)
        return await self._exec(req, as_bytes(stdin, "stdin"))

    def exec_stream(
        self,
        argv: Argv,
        *,
        timeout: float | None = None,
        stdin: Data | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        limits: Limits | None = None,
        keep_descendants: bool = False,
        terminal: tuple[int, int] | None = None,
        user: str | None = None,
    ) -> ExecStream:
        """Start a program interactively; iterate the returned `ExecStream` for its events.

        With `stdin` given, it is written and stdin closed; without, stdin stays open for
        `send_stdin` / `close_stdin`. Breaking out of the loop does not kill the program:
        use `async with sb.exec_stream(...) as s:` or `s.cancel()`.

        `terminal=(rows, cols)` runs it on a pseudo-terminal instead of pipes, as a terminal
        emulator would (`bash -i` gets job control): its output, both streams as a terminal
        shows them, comes as `stdout` events of raw terminal bytes; `send_stdin` types (echoed by
        the terminal; `"\x03"` is Ctrl-C, `"\x04"` at a line's start is end-of-file);
        `resize(rows, cols)` changes the size. `user`: as for `exec`.
        """
        req = self._request(argv, timeout, env, cwd, limits, keep_descendants, user)
        if terminal is not None:
            if not isinstance(terminal, tuple) or len(terminal) != 2:
                raise InvalidRequest(f"terminal must be (rows, cols), got {terminal!r}")
            req = dataclasses.replace(req, terminal=check_terminal(*terminal))
        data = None if stdin is None else as_bytes(stdin, "stdin")
        return self._exec_stream(req, data)

    async def write_file(self, path: str, data: Data, mode: int = 0o644) -> None:
        """Write one file (relative paths are under the work dir); parents are created."""
        await self.write_files({path: data}, mode=mode)

    async def write_files(
        self,
        files: Mapping[str, Data | tuple[Data, int]],
        *,
        mode: int = 0o644,
        user: str | None = None,
    ) -> None:
        """Write several files in one call; a value may be `(data, mode)` to set its mode.
        `user`: the user of the sandbox they (and the directories made for them) belong to."""
        triples: list[tuple[str, bytes, int]] = []
        for path, value in files.items():
            if not isinstance(path, str) or not path or "\0" in path:
                raise InvalidRequest(f"invalid path {path!r}")
            data, m = value if isinstance(value, tuple) else (value, mode)
            if isinstance(m, bool) or not isinstance(m, int) or not 0 <= m <= 0o7777:
                raise InvalidRequest(f"invalid mode {m!r} for {path}")
            triples.append((path, as_bytes(data, path), m))
        if triples:
            await self._write_files(triples, check_user(user))

    async def run_tests(
        self,
        program: str,
        tests: Sequence[TestCase],
        *,
        language: str = "python",
        time_limit: float | None = None,
        memory_limit_mb: float | None = None,
        stop_on_first_failure: bool = False,
        compare: str = "whitespace",
        float_tolerance: float | None = None,
        limits: Limits | None = None,
    ) -> TestReport:
        """Judge `program` against `tests`: compile once, run every case isolated, one verdict each.

        `language`: a name of `sandboxes.languages.table()` ("python", "c", "cpp", "bash",
        "java", "javascript", "typescript", "go", "rust", or an alias; `info().languages` lists
        what the sandbox has). Each `TestCase` is stdin/stdout style (`expected_output`, compared per `compare`:
        "exact" byte for byte, "whitespace" token by token, "float" tokens equal within
        `float_tolerance`, default 1e-6 absolute or relative) or check-script style (`check`,
        Python and Bash only). `time_limit` (s) sets each case's wall and CPU limits,
        `memory_limit_mb` its memory limit; both override `limits`, which override the sandbox's
        defaults. With `stop_on_first_failure`, cases after the first failure are `skipped`.

        A program that fails, loops or runs out of memory yields verdicts, not exceptions. Raises
        `InvalidRequest` for a bad request (unknown language, no tests, a check with a compiled
        language, absurd limits); other `SandboxError`s mean the infrastructure failed.
        """
        req = build_run_tests_request(
            program,
            tests,
            language=language,
            base_limits=self.default_limits,
            time_limit=time_limit,
            memory_limit_mb=memory_limit_mb,
            stop_on_first_failure=stop_on_first_failure,
            compare=compare,
            float_tolerance=float_tolerance,
            limits=limits,
        )
        return await self._run_tests(req)

    def run_tests_batch(
        self,
        gradings: Sequence[Grading],
        *,
        time_limit: float | None = None,
        memory_limit_mb: float | None = None,
        stop_on_first_failure: bool = False,
        compare: str = "whitespace",
        float_tolerance: float | None = None,
        limits: Limits | None = None,
        parallelism: int = 1,
    ) -> GradeStream:
        """Judge many programs in one call: `async for index, report in sb.run_tests_batch(...)`.

        Each `Grading` is a program with its tests and language (and optionally its own limits
        and comparison); the other arguments are `run_tests`'s, for every grading. The agent
        grades each exactly as `run_tests` would and the stream yields each report as it
        finishes, with its index in `gradings`. Raises `InvalidRequest` (naming the submission)
        before anything runs when one is invalid; cancelling the stream kills what runs.

        `parallelism` gradings run side by side (at most the sandbox's CPUs). Programs side by
        side share the sandbox's user, so one could signal another: more than 1 is for gradings
        of one trust domain; `Pool.grade` spreads a batch over sandboxes instead.
        """
        if (
            isinstance(parallelism, bool)
            or not isinstance(parallelism, int)
            or not 1 <= parallelism <= MAX_BATCH
        ):
            raise InvalidRequest(f"parallelism must be an int in [1, {MAX_BATCH}], got {parallelism!r}")
        reqs = build_batch(
            gradings,
            base_limits=self.default_limits,
            time_limit=time_limit,
            memory_limit_mb=memory_limit_mb,
            stop_on_first_failure=stop_on_first_failure,
            compare=compare,
            float_tolerance=float_tolerance,
            limits=limits,
        )
        if not reqs:
            return GradeStream.empty()
        return self._run_tests_batch(reqs, parallelism)

    @abc.abstractmethod
    async def _run_tests(self, req: RunTestsRequest) -> TestReport: ...

    @abc.abstractmethod
    def _run_tests_batch(self, reqs: list[RunTestsRequest], parallelism: int = 1) -> GradeStream: ...

    @abc.abstractmethod
    async def _exec(self, req: ExecRequest, stdin: bytes) -> ExecResult: ...

    @abc.abstractmethod
    def _exec_stream(self, req: ExecRequest, stdin: bytes | None) -> ExecStream: ...

    @abc.abstractmethod
    async def _write_files(self, files: list[tuple[str, bytes, int]], user: str = "") -> None: ...

    async def read_file(
        self,
        path: str,
        *,
        offset: int = 0,
        length: int | None = None,
        max_bytes: int = DEFAULT_READ_MAX_BYTES,
    ) -> bytes:
        """The content of a regular file, or `length` bytes of it from `offset`.

        A read of more than `max_bytes` raises `TooLarge` before any byte is sent; a FIFO, socket,
        device or directory raises `InvalidRequest` (file calls never block on what a program
        made)."""
        return await self._read_file(path, ReadRange.of(offset, length, max_bytes))

    @abc.abstractmethod
    async def _read_file(self, path: str, r: ReadRange) -> bytes: ...

    @abc.abstractmethod
    async def list_dir(self, path: str = ".", depth: int = 1) -> list[DirEntry]:
        """Entries of a directory (relative paths are under the work dir), and theirs down to
        `depth` levels (at most 64), each directory's right after it; symlinks are not followed,
        no other mount is entered."""

    @abc.abstractmethod
    async def remove(self, path: str, recursive: bool = False) -> None:
        """Remove a file, or a directory (`recursive=True` for a non-empty one)."""

    @abc.abstractmethod
    async def info(self) -> AgentInfo:
        """The agent's version, capabilities and usage (also a health check)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release the sandbox (destroyed by default). Idempotent."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id} template={self.template}>"


class Sandbox(SandboxBase):
    """A sandbox whose agent this process drives directly (local, docker, kubernetes backends).

    Obtained from `Pool.claim()` / `Pool.sandbox()`; `close()` hands it back to its pool.
    """

    def __init__(
        self,
        handle: Any,
        client: Any,
        *,
        template: str,
        limits: Limits | None = None,
        labels: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        on_close: Callable[[Sandbox], Awaitable[None]] | None = None,
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
    ) -> None:
        super().__init__(handle.id, template, labels=labels, env=env, limits=limits)
        self.handle = handle
        self._client = client
        self._on_close = on_close
        self.call_timeout_s = call_timeout_s
        self._closed = False
        self._paused = False  # every process stopped (`pause`); calls are refused meanwhile
        self._pool: OwningPool[Sandbox] | None = None  # set by the pool that made it
        self.egress: EgressPolicy | None = None  # set by `set_network`; None: its template's

    async def checkpoint(
        self, *, name: str = "", ttl_s: float | None = DEFAULT_TTL_S, memory: bool = False
    ) -> Checkpoint:
        """This sandbox's file system now, as a checkpoint (`Pool.checkpoint`): kept `ttl_s`
        seconds (None: until deleted); new sandboxes are made from it with
        `pool.claim(checkpoint=cp)`. This sandbox keeps running, unaffected. With `memory`, its
        running programs too: they run on in each sandbox made from it."""
        return await self._owner_pool().checkpoint(self, name=name, ttl_s=ttl_s, memory=memory)

    async def fork(self, n: int = 1, **kwargs: Any) -> list[Sandbox]:
        """`n` new sandboxes of this sandbox's file system now, each with writes of its own
        (`Pool.fork`); `memory=True`: its running programs run on in each."""
        return await self._owner_pool().fork(self, n, **kwargs)

    async def pause(self) -> bool:
        """Stop every process of this sandbox where it runs (`Pool.pause`): no CPU, memory,
        files and connections kept, calls refused (`SandboxPaused`) until `resume`. False when it
        was paused already."""
        return await self._owner_pool().pause(self)

    async def resume(self) -> bool:
        """Continue a paused sandbox's processes (`Pool.resume`); False when it was not paused."""
        return await self._owner_pool().resume(self)

    @property
    def paused(self) -> bool:
        return self._paused

    def _owner_pool(self) -> OwningPool[Sandbox]:
        if self._closed:
            raise SandboxLost(f"sandbox {self.id} is closed")
        if self._pool is None:
            raise InvalidRequest(f"sandbox {self.id} has no pool")
        return self._pool

    @property
    def endpoint(self) -> str:
        """Where the agent listens (`unix:///…` or `http://ip:port`)."""
        return self.handle.endpoint

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._paused:
            raise SandboxPaused(f"sandbox {self.id} is paused: resume it first")
        if self._closed:
            raise SandboxLost(f"sandbox {self.id} is closed")

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A native call bounded by `call_timeout_s`, errors translated."""
        self._check_open()
        try:
            async with asyncio.timeout(self.call_timeout_s):
                return await fn(*args, **kwargs)
        except TimeoutError as e:
            if isinstance(e, SandboxTimeout):
                raise
            raise SandboxTimeout(f"sandbox {self.id}: call took over {self.call_timeout_s}s") from e

    async def call_agent(self, fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        """`fn(agent client, *args, **kwargs)` run as this sandbox's own calls are: refused while
        it is paused or closed, bounded by `call_timeout_s`, errors translated (how the pool
        captures its files as a layer, `derived_pools.py`)."""
        return await self._call(fn, self._client, *args, **kwargs)

    async def _exec(self, req: ExecRequest, stdin: bytes) -> ExecResult:
        self._check_open()
        r = await self._client.exec(
            req.argv,
            env=req.env or None,
            cwd=req.cwd,
            stdin=stdin,
            limits=_bridge.to_native_limits(req.limits),
            timeout_s=req.deadline_s,
            keep_descendants=req.keep_descendants,
            user=req.user or None,
        )
        return _bridge.to_exec_result(r)

    async def _run_tests(self, req: RunTestsRequest) -> TestReport:
        self._check_open()
        r = await self._client.run_tests(
            req.language,
            req.source,
            list(req.tests),
            limits=_bridge.to_native_limits(req.limits),
            stop_on_first_failure=req.stop_on_first_failure,
            compare=req.compare,
            float_tolerance=req.float_tolerance,
            timeout_s=req.deadline_s,
        )
        return _bridge.to_test_report(r)

    def _run_tests_batch(self, reqs: list[RunTestsRequest], parallelism: int = 1) -> GradeStream:
        self._check_open()
        source = self._client.run_tests_batch(
            [
                (
                    r.language,
                    r.source,
                    list(r.tests),
                    _bridge.to_native_limits(r.limits),
                    r.stop_on_first_failure,
                    r.compare,
                    r.float_tolerance,
                )
                for r in reqs
            ],
            parallelism=parallelism,
            timeout_s=batch_deadline(reqs),
        )
        return GradeStream(source, len(reqs), convert=_bridge.to_test_report)

    def _exec_stream(self, req: ExecRequest, stdin: bytes | None) -> ExecStream:
        self._check_open()
        source = self._client.exec_stream(
            req.argv,
            env=req.env or None,
            cwd=req.cwd,
            limits=_bridge.to_native_limits(req.limits),
            keep_descendants=req.keep_descendants,
            terminal=req.terminal,
            user=req.user or None,
        )
        return ExecStream(
            source, convert=_bridge.to_exec_event, stdin=stdin, terminal=req.terminal is not None
        )

    async def _write_files(self, files: list[tuple[str, bytes, int]], user: str = "") -> None:
        await self._call(self._client.write_files, files, user or None)

    async def _read_file(self, path: str, r: ReadRange) -> bytes:
        return bytes(await self._call(self._client.read_file, path, r.offset, r.length, r.max_bytes))

    async def list_dir(self, path: str = ".", depth: int = 1) -> list[DirEntry]:
        entries = await self._call(self._client.list_dir, path, check_depth(depth))
        return [_bridge.to_dir_entry(e) for e in entries]

    async def file_op(self, op: cpb.FileOpRequest) -> cpb.FileOpResponse:
        return cpb.FileOpResponse.FromString(await self._call(self._client.file_op, op.SerializeToString()))

    async def remove(self, path: str, recursive: bool = False) -> None:
        """Remove a file, or a directory (`recursive=True` for a non-empty one)."""
        await self._call(self._client.remove, path, recursive)

    async def info(self) -> AgentInfo:
        """The agent's version, capabilities and usage (also a health check)."""
        return _bridge.to_agent_info(await self._call(self._client.info))

    async def set_network(
        self, *, allow: Sequence[str] | None = None, deny: Sequence[str] | None = None
    ) -> EgressPolicy:
        """Replace the egress policy of a sandbox whose template's network is a list (an
        allow-list, even an empty one): `allow` is what it may reach from now on, or `deny` what
        it may not (every other public destination stays open; `deny=[]`: the public internet).
        Every connection opened after this returns obeys the new policy; connections already
        open stay open. A sandbox whose network is none or the host's cannot change it
        (InvalidRequest). Checkpoints and forks of this sandbox start with its template's."""
        policy = EgressPolicy.of(allow, deny)
        await self.set_egress_policy(policy)
        return policy

    async def set_egress_policy(self, policy: EgressPolicy) -> None:
        """`set_network` with a policy made already."""
        if self._pool is not None:
            await self._pool.fence_egress(self, policy)
        await self._call(self._client.set_egress, list(policy.rules), policy.deny)
        self.egress = policy

    async def _renew_lease(self, ttl_s: float) -> float:
        """Extend the agent's lease (the pool's renewer calls this)."""
        return float(await self._call(self._client.renew_lease, ttl_s))

    async def close(self) -> None:
        """Hand the sandbox back to its pool, which destroys it. Idempotent."""
        if self._closed:
            return
        if self._on_close is not None:
            await self._on_close(self)
        else:
            self._mark_closed()

    def _mark_closed(self) -> None:
        """Forget the connection; the owner destroys the sandbox itself."""
        if not self._closed:
            self._closed = True
            try:
                self._client.close()
            except Exception:
                log.debug("closing agent client of %s failed", self.id, exc_info=True)
