"""The code interpreter of `e2b-code-interpreter` (the sandbox's port 49999): `run_code` and its
contexts.

```
POST   /execute                {code, context_id, language, env_vars} -> NDJSON events
POST   /contexts               {language?, cwd?} -> {id, language, cwd}
GET    /contexts               [{id, language, cwd}]
DELETE /contexts/{id}          the context's kernel is stopped
POST   /contexts/{id}/restart  a fresh kernel (its state is gone)
```

A context is one Python kernel (`kernel_main.py`) running inside the sandbox as any program does,
under the same isolation and caps, its namespace kept across cells. Cells of one context run in
order. The events of a cell go to the client as they happen (`number_of_executions`, `stdout` /
`stderr`, `result`, `error`, then `end_of_execution`), with a keepalive line every
`KEEPALIVE_S` of silence so a client that went away is noticed. The SDK's timeout is its own: when
its connection closes mid-cell the cell is interrupted (SIGINT: `KeyboardInterrupt`, the context
keeps its state); a kernel that does not stop within `INTERRUPT_GRACE_S` is killed, and the
context's next cell starts a fresh one and says so. Errors are plain text with the status the SDK
maps: 404 an unknown context, 400 a bad request, 502 a sandbox that has ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from sandboxes import errors as E
from sandboxes.server.http.e2b.envd import in_sandbox
from sandboxes.server.http.endpoint import Envelope, Refused, text_body
from sandboxes.server.http.timestamps import iso
from sandboxes.types import Limits

__all__ = ["Interpreter"]

log = logging.getLogger("sandboxes.server.e2b")

KERNEL_SOURCE = (Path(__file__).with_name("kernel_main.py")).read_text()
LANGUAGES = {"python": "python", "py": "python", "python3": "python"}
MAX_CONTEXTS = 32
MAX_CODE_BYTES = 16 << 20
KEEPALIVE_S = 5.0
INTERRUPT_GRACE_S = 3.0
START_TIMEOUT_S = 30.0
# A kernel lives as long as its sandbox may (the longest timeout), bounded by CPU time per cell
# through the sandbox's own caps rather than a per-program rlimit.
KERNEL_LIMITS = Limits(cpu_time_s=24 * 3600.0)


@dataclass(eq=False)
class Context:
    """One kernel: its id, language and working directory, and the cell running in it."""

    id: str
    language: str
    cwd: str
    stream: Any = None  # the kernel's ExecStream
    events: asyncio.Queue | None = None  # the running cell's events
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    pump: asyncio.Task | None = None
    pending: bytes = b""
    lost: bool = False  # its kernel died: the next cell says the state is gone

    def json(self) -> dict[str, str]:
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def alive(self) -> bool:
        return self.pump is not None and not self.pump.done()

    def stop(self) -> None:
        if self.stream is not None:
            self.stream.cancel()
        if self.pump is not None:
            self.pump.cancel()


class Contexts:
    """The contexts of one sandbox; the first python one is its default."""

    def __init__(self) -> None:
        self.by_id: dict[str, Context] = {}
        self.default: dict[str, Context] = {}

    def close(self) -> None:
        for c in self.by_id.values():
            c.stop()
        self.by_id.clear()
        self.default.clear()


# The interpreter's errors are plain text (the SDK reads the body as the message).
ENVELOPE = Envelope("e2b interpreter", text_body)


class Interpreter:
    """The routes of the sandbox's port 49999, for the sandbox in `TARGET`, over the server's
    `core`."""

    def __init__(self, core: Any) -> None:
        self.core = core

    def routes(self) -> list[Route]:
        return [
            Route("/execute", self._wrap(self.execute), methods=["POST"]),
            Route("/contexts", self._wrap(self.create_context), methods=["POST"]),
            Route("/contexts", self._wrap(self.list_contexts), methods=["GET"]),
            Route("/contexts/{context_id}", self._wrap(self.remove_context), methods=["DELETE"]),
            Route("/contexts/{context_id}/restart", self._wrap(self.restart_context), methods=["POST"]),
            Route("/health", self._wrap(self.health), methods=["GET"]),
        ]

    @staticmethod
    def _wrap(fn: Any) -> Any:
        return in_sandbox(fn, ENVELOPE)

    @staticmethod
    def _contexts(rec: Any) -> Contexts:
        return rec.attrs.setdefault("e2b_contexts", Contexts())

    async def _body(self, request: Request) -> dict[str, Any]:
        body = await ENVELOPE.json(request, MAX_CODE_BYTES)
        if not isinstance(body, dict):
            raise Refused(400, "the body must be a JSON object")
        return body

    @staticmethod
    def _language(value: Any) -> str:
        name = LANGUAGES.get(str(value or "python").lower())
        if name is None:
            raise Refused(
                400, f"language {value!r} is not supported by this server's code interpreter (python)"
            )
        return name

    # -- kernels -----------------------------------------------------------------------------

    async def _start(self, rec: Any, ctx: Context) -> None:
        """A fresh kernel for `ctx` (waits until it is ready)."""
        ctx.stop()
        ctx.pending = b""
        ctx.events = None
        stream = rec.sandbox.exec_stream(
            ["python3", "-u", "-c", KERNEL_SOURCE],
            cwd=ctx.cwd,
            stdin=None,
            timeout=KERNEL_LIMITS.cpu_time_s,
            limits=KERNEL_LIMITS,
        )
        ctx.stream = stream
        ready: asyncio.Future = asyncio.get_running_loop().create_future()
        ctx.pump = asyncio.create_task(self._pump(ctx, ready), name=f"sandboxes-kernel-{ctx.id}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), START_TIMEOUT_S)
        except BaseException:
            ctx.stop()
            raise

    async def _pump(self, ctx: Context, ready: asyncio.Future) -> None:
        """Turns the kernel's stdout into events for the running cell."""
        errors = b""
        try:
            async for ev in ctx.stream:
                if ev.kind == "stderr":
                    errors = (errors + ev.data)[-4096:]
                elif ev.kind == "stdout":
                    ctx.pending += ev.data
                    *lines, ctx.pending = ctx.pending.split(b"\n")
                    for line in lines:
                        try:
                            event = json.loads(line)
                        except ValueError:
                            continue
                        if event.get("type") == "ready":
                            if not ready.done():
                                ready.set_result(None)
                        elif ctx.events is not None:
                            ctx.events.put_nowait(event)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the sandbox went away
            log.info("kernel %s ended: %s", ctx.id, e)
        finally:
            ctx.lost = True
            if not ready.done():
                why = errors.decode("utf-8", "replace").strip() or "the kernel exited"
                ready.set_exception(E.InvalidRequest(f"the python kernel could not start: {why}"))
            if ctx.events is not None:
                ctx.events.put_nowait(None)

    async def _context(self, rec: Any, sb: Any, body: dict[str, Any]) -> Context:
        contexts = self._contexts(rec)
        context_id = body.get("context_id")
        language = body.get("language")
        if context_id and language:
            raise Refused(400, "Only one of context_id or language can be provided")
        if context_id:
            ctx = contexts.by_id.get(str(context_id))
            if ctx is None:
                raise Refused(404, f"Context {context_id} not found")
            return ctx
        name = self._language(language)
        ctx = contexts.default.get(name)
        if ctx is None:
            ctx = await self._new(rec, contexts, name, sb.work_dir)
            contexts.default[name] = ctx
        return ctx

    async def _new(self, rec: Any, contexts: Contexts, language: str, cwd: str) -> Context:
        if len(contexts.by_id) >= MAX_CONTEXTS:
            raise Refused(429, f"at most {MAX_CONTEXTS} contexts per sandbox")
        ctx = Context(id=secrets.token_hex(8), language=language, cwd=cwd)
        contexts.by_id[ctx.id] = ctx
        try:
            await self._start(rec, ctx)
        except BaseException:
            contexts.by_id.pop(ctx.id, None)
            raise
        ctx.lost = False
        return ctx

    # -- endpoints ---------------------------------------------------------------------------

    async def execute(self, request: Request, rec: Any, sb: Any) -> Response:
        body = await self._body(request)
        code = body.get("code")
        if not isinstance(code, str):
            raise Refused(400, "code must be a string")
        env = body.get("env_vars")
        if env is not None and not (
            isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
        ):
            raise Refused(400, "env_vars must map strings to strings")
        # The cell is an execution of the sandbox owner's: it holds an exec slot until it ends.
        slot = contextlib.ExitStack()
        slot.enter_context(self.core.exec_slot(rec.owner, "e2b.run_code"))
        try:
            ctx = await self._context(rec, sb, body)
            await ctx.lock.acquire()
        except BaseException:
            slot.close()
            raise
        try:
            restarted = False
            if not ctx.alive():
                await self._start(rec, ctx)
                restarted = ctx.lost
                ctx.lost = False
            ctx.events = asyncio.Queue()
            line = json.dumps({"code": code, "env": env}).encode() + b"\n"
            await ctx.stream.send_stdin(line)
        except BaseException:
            ctx.lock.release()
            slot.close()
            raise
        return StreamingResponse(self._cell(rec, ctx, restarted, slot), media_type="application/x-ndjson")

    async def _cell(
        self, rec: Any, ctx: Context, restarted: bool, slot: contextlib.ExitStack
    ) -> AsyncIterator[bytes]:
        """The events of the running cell of `ctx`, which holds `ctx.lock` and the exec `slot`
        until the cell ends."""
        events = ctx.events
        assert events is not None
        done = False
        try:
            if restarted:
                note = "the context's kernel was restarted: its earlier state is gone\n"
                yield _line({"type": "stderr", "text": note, "timestamp": _now()})
            while True:
                try:
                    event = await asyncio.wait_for(events.get(), KEEPALIVE_S)
                except TimeoutError:
                    yield _line({"type": "keepalive"})
                    continue
                if event is None:  # the kernel died mid-cell
                    done = True
                    value = "the kernel stopped while running this cell; its state is gone"
                    yield _line({"type": "error", "name": "KernelRestarted", "value": value, "traceback": ""})
                    yield _line({"type": "end_of_execution"})
                    return
                if event.get("type") == "end":
                    done = True
                    yield _line({"type": "end_of_execution"})
                    return
                yield _line(event)
        finally:
            slot.close()
            if done:
                ctx.events = None
                ctx.lock.release()
            else:
                # The client went away mid-cell: interrupt it, in the background.
                task = asyncio.create_task(self._interrupt(ctx, events), name=f"sandboxes-interrupt-{ctx.id}")
                rec.attrs.setdefault("e2b_interrupts", set()).add(task)
                task.add_done_callback(rec.attrs["e2b_interrupts"].discard)

    async def _interrupt(self, ctx: Context, events: asyncio.Queue) -> None:
        try:
            with contextlib.suppress(E.SandboxError):
                await ctx.stream.signal(signal.SIGINT)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + INTERRUPT_GRACE_S
            while True:
                left = deadline - loop.time()
                if left <= 0:
                    ctx.stop()  # the next cell of this context starts a fresh kernel
                    return
                try:
                    event = await asyncio.wait_for(events.get(), left)
                except TimeoutError:
                    continue
                if event is None or event.get("type") == "end":
                    return
        finally:
            ctx.events = None
            ctx.lock.release()

    async def create_context(self, request: Request, rec: Any, sb: Any) -> Response:
        body = await self._body(request)
        language = self._language(body.get("language"))
        cwd = body.get("cwd") or sb.work_dir
        if not isinstance(cwd, str) or not cwd.startswith("/"):
            raise Refused(400, "cwd must be an absolute path")
        ctx = await self._new(rec, self._contexts(rec), language, cwd)
        return _json(ctx.json())

    async def list_contexts(self, request: Request, rec: Any, sb: Any) -> Response:
        return _json([c.json() for c in self._contexts(rec).by_id.values()])

    async def remove_context(self, request: Request, rec: Any, sb: Any) -> Response:
        contexts = self._contexts(rec)
        ctx = contexts.by_id.pop(request.path_params["context_id"], None)
        if ctx is None:
            raise Refused(404, f"Context {request.path_params['context_id']} not found")
        for name, c in list(contexts.default.items()):
            if c is ctx:
                del contexts.default[name]
        ctx.stop()
        return Response(status_code=204)

    async def restart_context(self, request: Request, rec: Any, sb: Any) -> Response:
        ctx = self._contexts(rec).by_id.get(request.path_params["context_id"])
        if ctx is None:
            raise Refused(404, f"Context {request.path_params['context_id']} not found")
        async with ctx.lock:
            await self._start(rec, ctx)
            ctx.lost = False
        return Response(status_code=204)

    async def health(self, request: Request, rec: Any, sb: Any) -> Response:
        return Response(status_code=204)


def _now() -> str:
    return iso(time.time())


def _line(event: dict[str, Any]) -> bytes:
    return json.dumps(event).encode() + b"\n"


def _json(value: Any) -> Response:
    return Response(json.dumps(value), media_type="application/json")
