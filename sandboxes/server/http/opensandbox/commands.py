"""execd's commands: `POST /command` streamed as server-sent events, in the foreground or the
background, their status, a background command's output, and interrupts.

```
POST   /command  {command | argv, cwd, background, timeout (ms), envs, uid}   text/event-stream
GET    /command/status/{id}          {id, content, running, exit_code, error, started_at, finished_at}
GET    /command/{id}/logs?cursor=N   text/plain (a background command's output from byte N;
                                     EXECD-COMMANDS-TAIL-CURSOR: where the next read starts)
DELETE /command?id=ID                SIGTERM to its process group, SIGKILL 3 s later
```

The stream is execd's: one bare JSON object per frame, each followed by a blank line (its SDK
reads these and standard SSE alike): `init` (`text`: the command's id), then `stdout` / `stderr`
chunks as they come, then `execution_complete` (`execution_time` in ms) for a command that
exited 0, else `error` (`ename` "CommandExecError", `evalue` its exit code as text: -1 for a
signal or a timeout, as Go reports them), with `ping` frames while it is quiet. A background
command's stream ends at once with `execution_complete`; its output (both streams, in order) is
kept for `/logs` (the last `MAX_LOG_BYTES`; a sandbox forgets its oldest finished commands past
`MAX_COMMANDS` of them or `MAX_KEPT_BYTES` of their output). A foreground command whose client goes away is
killed, as execd kills it when its request's context ends.

Shell text runs under bash where the image has it, else sh; `argv` runs as given. A command runs
as the sandbox's user (`uid`: another, where its programs run as root), in its work dir (relative
paths are under it), with the sandbox's environment under `envs`. Every command is a program of
the sandbox's `Holder` (`server/programs.py`, kind `opensandbox.command`), holding one of its
key's exec slots while it runs, ended with the sandbox; what it leaves running (`nohup server &`)
outlives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from sandboxes import errors as E
from sandboxes.server.http.endpoint import Refused
from sandboxes.server.http.fields import str_map
from sandboxes.server.http.timestamps import iso
from sandboxes.types import Limits

if TYPE_CHECKING:
    from sandboxes.sandbox import ExecStream
    from sandboxes.server.http.opensandbox.execd import Execd
    from sandboxes.server.http.opensandbox.state import OpenSandbox
    from sandboxes.server.registry import Record

__all__ = ["KIND", "Commands"]

KIND = "opensandbox.command"  # of the commands among a sandbox's long-lived programs
DEFAULT_TIMEOUT_S = 24 * 3600.0  # a command without a timeout
# Bounded by its deadline, not by CPU time: what it leaves running inherits its CPU rlimit.
LIMITS = Limits(cpu_time_s=DEFAULT_TIMEOUT_S, max_output_bytes=1 << 30)
MAX_LOG_BYTES = 16 << 20  # of a background command's output kept for /logs
MAX_COMMANDS = 1000  # kept per sandbox (the oldest finished ones are forgotten first)
# Output of finished commands a sandbox keeps: past it, the oldest finished ones are forgotten.
MAX_KEPT_BYTES = 64 << 20
LISTENER_CHUNKS = 256  # output chunks a slow stream may have unread before the command waits
PING_S = 3.0  # a quiet stream's keepalive
INTERRUPT_GRACE_S = 3.0
_SHELL = 'if command -v bash >/dev/null 2>&1; then exec bash -c "$0"; fi; exec sh -c "$0"'
_END = object()


@dataclass(eq=False)
class Command:
    id: str
    content: str
    background: bool
    stream: ExecStream
    started_at: float = field(default_factory=time.time)
    output: bytearray = field(default_factory=bytearray)  # a background command's, from `dropped` on
    dropped: int = 0
    exit_code: int | None = None
    error: str = ""
    finished_at: float | None = None
    listener: asyncio.Queue | None = None  # a foreground command's stream
    done: asyncio.Event = field(default_factory=asyncio.Event)
    pump: asyncio.Task | None = None

    def status_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "content": self.content,
            "running": self.exit_code is None,
            "exit_code": self.exit_code,
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at) if self.finished_at is not None else None,
        }
        if self.error:
            out["error"] = self.error
        return out

    def keep(self, data: bytes) -> None:
        self.output += data
        over = len(self.output) - MAX_LOG_BYTES
        if over > 0:
            del self.output[:over]
            self.dropped += over

    async def run(self) -> None:
        """Reads the program's events to its end: output to its stream or its log."""
        try:
            async for ev in self.stream:
                if ev.kind not in ("stdout", "stderr") or not ev.data:
                    continue
                if self.background:
                    self.keep(ev.data)
                elif self.listener is not None:
                    await self.listener.put((ev.kind, ev.data))  # a full queue holds the program back
        except Exception as e:  # noqa: BLE001 - the sandbox went away, or the command was ended
            self.error = f"the command ended without an exit: {getattr(e, 'message', e)}"
        finally:
            self.stream.cancel()  # over: its exec slot is given back
            self.finish()

    def abandon(self) -> None:
        """Its stream is over: what it prints from now on is dropped, and it ends if it runs
        (a client that went away ends its command, as execd's request context does)."""
        q, self.listener = self.listener, None
        while q is not None and not q.empty():  # a pump waiting for room goes on
            q.get_nowait()
        if not self.done.is_set():
            self.stream.cancel()

    def finish(self) -> None:
        r = self.stream.result
        if r is None:
            self.exit_code, self.error = -1, self.error or "the command was killed"
        elif r.signal or r.timed_out:
            # Go's ExitCode() of a process a signal ended; its error names the signal.
            self.exit_code = -1
            name = "killed" if r.timed_out else (signal.strsignal(r.signal) or str(r.signal)).lower()
            self.error = f"signal: {name}"
        else:
            self.exit_code = r.exit_code
            self.error = f"exit status {r.exit_code}" if r.exit_code else ""
        self.finished_at = time.time()
        self.done.set()
        if self.listener is not None:
            with contextlib.suppress(asyncio.QueueFull):
                self.listener.put_nowait((_END, None))


class SandboxCommands:
    """The commands of one sandbox (kept by its `Holder`, so they go with it)."""

    def __init__(self) -> None:
        self.by_id: dict[str, Command] = {}

    def add(self, c: Command) -> None:
        """Keeps `c`, forgetting the oldest finished commands past `MAX_COMMANDS` or past
        `MAX_KEPT_BYTES` of their output."""
        finished = [k for k, v in self.by_id.items() if v.exit_code is not None]
        kept = sum(len(self.by_id[k].output) for k in finished)
        while finished and (len(self.by_id) >= MAX_COMMANDS or kept > MAX_KEPT_BYTES):
            kept -= len(self.by_id.pop(finished.pop(0)).output)
        if len(self.by_id) >= MAX_COMMANDS:
            raise Refused(429, f"at most {MAX_COMMANDS} commands run at once in a sandbox")
        self.by_id[c.id] = c

    def get(self, command_id: str) -> Command:
        c = self.by_id.get(command_id)
        if c is None:
            raise Refused(404, f"command not found: {command_id}", fields={"code": "INVALID_REQUEST_BODY"})
        return c


def _frame(kind: str, **fields: Any) -> bytes:
    return json.dumps({"type": kind, **fields, "timestamp": int(time.time() * 1000)}).encode() + b"\n\n"


class _EventStream(StreamingResponse):
    """A stream of frames that calls `on_close` once it is over, however it ended (a client that
    goes away before its first frame included: its generator's own cleanup never runs then)."""

    def __init__(self, frames: AsyncIterator[bytes], on_close: Callable[[], object]) -> None:
        super().__init__(frames, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        self.on_close = on_close

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.on_close()


class Commands:
    """The command routes of execd (`execd` routes them to a sandbox)."""

    def __init__(self, execd: Execd) -> None:
        self.execd = execd
        self.core = execd.core

    def routes(self) -> list[tuple[str, Any, str]]:
        return [
            ("/command", self.run, "POST"),
            ("/command", self.interrupt, "DELETE"),
            ("/command/status/{command_id}", self.status, "GET"),
            ("/command/{command_id}/logs", self.logs, "GET"),
        ]

    def of(self, rec: Record) -> SandboxCommands:
        commands: SandboxCommands = self.core.programs(rec).state(KIND, SandboxCommands)
        return commands

    async def run(self, request: Request, rec: Record, sb: OpenSandbox) -> Response:
        body = await self.execd.body(request)
        command, argv = body.get("command"), body.get("argv")
        if isinstance(command, str) and command.strip():
            run = ["/bin/sh", "-c", _SHELL, command]
            content = command
        elif (
            isinstance(argv, list) and argv and all(isinstance(a, str) and a and "\0" not in a for a in argv)
        ):
            run, content = list(argv), " ".join(argv)
        else:
            raise Refused(400, "command (shell text) or argv (a non-empty list of strings) is required")
        timeout = body.get("timeout")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 0):
            raise Refused(400, "timeout must be a whole number of milliseconds")
        if body.get("gid") is not None:
            raise Refused(400, "gid is not supported here: a command runs with its user's group")
        uid = body.get("uid")
        if uid is not None and (isinstance(uid, bool) or not isinstance(uid, int) or uid < 0):
            raise Refused(400, "uid must be a user id")
        env = {**sb.env, **str_map(body.get("envs"), "envs")}
        cwd = sb.resolve(body["cwd"], "cwd") if body.get("cwd") else sb.work_dir
        background = bool(body.get("background"))
        commands = self.of(rec)
        cid = str(uuid.uuid4())
        try:
            stream = self.core.programs(rec).start(
                KIND,
                cid,
                run,
                charge=KIND,
                env=env,
                cwd=cwd,
                timeout=timeout / 1000.0 if timeout else DEFAULT_TIMEOUT_S,
                stdin=b"",
                limits=LIMITS,
                keep_descendants=True,
                user=str(uid) if uid is not None else None,
            )
        except E.InvalidRequest as e:
            raise Refused(400, e.message) from None
        c = Command(id=cid, content=content, background=background, stream=stream)
        if not background:
            c.listener = asyncio.Queue(LISTENER_CHUNKS)
        commands.add(c)
        c.pump = asyncio.create_task(c.run(), name=f"opensandbox-command-{cid}")
        if background:
            return _EventStream(self._background(c), lambda: None)
        return _EventStream(self._foreground(c), c.abandon)

    async def _background(self, c: Command) -> AsyncIterator[bytes]:
        yield _frame("init", text=c.id)
        yield _frame("execution_complete", execution_time=int((time.time() - c.started_at) * 1000))

    async def _foreground(self, c: Command) -> AsyncIterator[bytes]:
        q = c.listener
        assert q is not None
        try:
            yield _frame("init", text=c.id)
            while not (c.done.is_set() and q.empty()):  # (its end may not have fit in a full queue)
                try:
                    kind, data = await asyncio.wait_for(q.get(), PING_S)
                except TimeoutError:
                    yield _frame("ping", text="pong")
                    continue
                if kind is _END:
                    break
                yield _frame(kind, text=data.decode(errors="replace"))
            await c.done.wait()
            if c.exit_code == 0:
                yield _frame("execution_complete", execution_time=int((time.time() - c.started_at) * 1000))
            else:
                yield _frame(
                    "error",
                    error={"ename": "CommandExecError", "evalue": str(c.exit_code), "traceback": [c.error]},
                )
        finally:
            c.abandon()

    async def status(self, request: Request, rec: Record, sb: OpenSandbox) -> Response:
        return JSONResponse(self.of(rec).get(request.path_params["command_id"]).status_json())

    async def logs(self, request: Request, rec: Record, sb: OpenSandbox) -> Response:
        c = self.of(rec).get(request.path_params["command_id"])
        if not c.background:
            raise Refused(
                400, f"command {c.id} is not running in background", fields={"code": "INVALID_REQUEST_BODY"}
            )
        raw = request.query_params.get("cursor") or "0"
        if not raw.isdigit():
            raise Refused(400, "cursor must be a byte offset")
        start = max(0, int(raw) - c.dropped)
        data = bytes(c.output[start:])
        return PlainTextResponse(
            data.decode(errors="replace"),
            headers={"EXECD-COMMANDS-TAIL-CURSOR": str(c.dropped + len(c.output))},
        )

    async def interrupt(self, request: Request, rec: Record, sb: OpenSandbox) -> Response:
        cid = request.query_params.get("id") or ""
        c = self.of(rec).get(cid)
        if c.done.is_set():
            raise Refused(400, f"command session {cid} is not running", fields={"code": "RUNTIME_ERROR"})
        with contextlib.suppress(E.SandboxError):
            await c.stream.signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(c.done.wait(), INTERRUPT_GRACE_S)
        except TimeoutError:
            c.stream.cancel()
            await c.done.wait()
        return Response(status_code=200)
