"""Python kernels of code interpreters (E2B's `run_code`, Daytona's `code_interpreter.run_code`):
contexts whose state is kept across cells.

A context is one Python kernel (`kernel_main.py`) running inside the sandbox as any program does,
under the same isolation and caps, its namespace kept across cells. A sandbox's contexts are the
record's `kernel_contexts`, the same whichever API made them; their kernels are programs of the
sandbox's `Holder` (`server/programs.py`, kind `kernel`, not charged: each cell is, by the API
that runs it), so they end with the sandbox. Cells of one context run in order:
`begin` takes the context (its lock) and sends the cell, `events` yields what the cell does
(`stdout` / `stderr` / `result` / `error` dicts as the kernel writes them, a `keepalive` every
`KEEPALIVE_S` of silence, then `end_of_execution`) and gives the context back at the end. A
caller that stops reading mid-cell interrupts it (SIGINT: `KeyboardInterrupt`, the context keeps
its state); a kernel that does not stop within `INTERRUPT_GRACE_S` is killed, and the context's
next cell starts a fresh one and says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import signal
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandboxes import errors as E
from sandboxes.server.http import cells
from sandboxes.server.http.endpoint import Refused
from sandboxes.types import Limits

if TYPE_CHECKING:
    from sandboxes.server.surface_core import SurfaceCore

__all__ = ["ATTR", "KIND", "Context", "Contexts", "Kernels", "language_of"]

log = logging.getLogger("sandboxes.server")

ATTR = "kernel_contexts"
KIND = "kernel"  # of the kernels among a sandbox's long-lived programs
KERNEL_SOURCE = (Path(__file__).with_name("kernel_main.py")).read_text()
LANGUAGES = {"python": "python", "py": "python", "python3": "python"}
MAX_CONTEXTS = 32
KEEPALIVE_S = 5.0
INTERRUPT_GRACE_S = 3.0
START_TIMEOUT_S = 30.0
# A kernel lives as long as its sandbox may (the longest timeout), bounded by CPU time per cell
# through the sandbox's own caps rather than a per-program rlimit.
KERNEL_LIMITS = Limits(cpu_time_s=24 * 3600.0)


def language_of(value: Any) -> str:
    name = LANGUAGES.get(str(value or "python").lower())
    if name is None:
        raise Refused(400, f"language {value!r} is not supported by this server's code interpreter (python)")
    return name


@dataclass(eq=False)
class Context:
    """One kernel: its id, language and working directory, and the cell running in it."""

    id: str
    language: str
    cwd: str
    stream: Any = None  # the kernel's ExecStream
    queue: asyncio.Queue | None = None  # the running cell's events
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    pump: asyncio.Task | None = None
    pending: bytes = b""
    lost: bool = False  # its kernel died: the next cell says the state is gone
    created_at: float = field(default_factory=time.time)

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
        self.interrupts: set[asyncio.Task] = set()

    def remove(self, context_id: str) -> Context | None:
        ctx = self.by_id.pop(context_id, None)
        if ctx is not None:
            for name, c in list(self.default.items()):
                if c is ctx:
                    del self.default[name]
            ctx.stop()
        return ctx


class Kernels:
    """The kernels of the sandboxes of a server (`core`'s)."""

    def __init__(self, core: SurfaceCore) -> None:
        self.core = core

    @staticmethod
    def contexts(rec: Any) -> Contexts:
        return rec.attrs.setdefault(ATTR, Contexts())

    async def start(self, rec: Any, ctx: Context) -> None:
        """A fresh kernel for `ctx` (waits until it is ready)."""
        ctx.stop()
        ctx.pending = b""
        ctx.queue = None
        stream = self.core.programs(rec).start(
            KIND,
            ctx.id,
            ["python3", "-u", "-c", KERNEL_SOURCE],
            charge=None,
            carried=False,  # a copy of the sandbox has no contexts: its cells start a fresh kernel
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
                        elif ctx.queue is not None:
                            ctx.queue.put_nowait(event)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the sandbox went away
            log.info("kernel %s ended: %s", ctx.id, e)
        finally:
            ctx.lost = True
            if not ready.done():
                why = errors.decode("utf-8", "replace").strip() or "the kernel exited"
                ready.set_exception(E.InvalidRequest(f"the python kernel could not start: {why}"))
            if ctx.queue is not None:
                ctx.queue.put_nowait(None)

    async def context(self, rec: Any, work_dir: str, context_id: str | None, language: Any) -> Context:
        """The context `context_id` names, else the default one of `language` (made now)."""
        contexts = self.contexts(rec)
        if context_id:
            ctx = contexts.by_id.get(str(context_id))
            if ctx is None:
                raise Refused(404, f"Context {context_id} not found")
            return ctx
        name = language_of(language)
        ctx = contexts.default.get(name)
        if ctx is None:
            ctx = await self.new(rec, name, work_dir)
            contexts.default[name] = ctx
        return ctx

    async def new(self, rec: Any, language: str, cwd: str) -> Context:
        contexts = self.contexts(rec)
        if len(contexts.by_id) >= MAX_CONTEXTS:
            raise Refused(429, f"at most {MAX_CONTEXTS} contexts per sandbox")
        ctx = Context(id=secrets.token_hex(8), language=language, cwd=cwd)
        contexts.by_id[ctx.id] = ctx
        try:
            await self.start(rec, ctx)
        except BaseException:
            contexts.by_id.pop(ctx.id, None)
            raise
        ctx.lost = False
        return ctx

    async def restart(self, rec: Any, ctx: Context) -> None:
        async with ctx.lock:
            await self.start(rec, ctx)
            ctx.lost = False

    async def begin(self, rec: Any, ctx: Context, code: str, env: dict[str, str] | None) -> bool:
        """Takes `ctx` and sends it a cell (a fresh kernel first if its own died); whether its
        earlier state is gone. The caller then reads `events`, which gives `ctx` back."""
        await ctx.lock.acquire()
        try:
            restarted = False
            if not ctx.alive():
                await self.start(rec, ctx)
                restarted = ctx.lost
                ctx.lost = False
            ctx.queue = asyncio.Queue()
            await ctx.stream.send_stdin(json.dumps({"code": cells.source(code), "env": env}).encode() + b"\n")
        except BaseException:
            ctx.lock.release()
            raise
        return restarted

    async def events(self, rec: Any, ctx: Context, restarted: bool) -> AsyncGenerator[dict[str, Any], None]:
        """The events of the cell `begin` sent; `ctx` is given back when it ends, or interrupted
        and given back then if the caller stops reading first."""
        queue = ctx.queue
        assert queue is not None
        done = False
        try:
            if restarted:
                note = "the context's kernel was restarted: its earlier state is gone\n"
                yield {"type": "stderr", "text": note}
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
                except TimeoutError:
                    yield {"type": "keepalive"}
                    continue
                if event is None:  # the kernel died mid-cell
                    done = True
                    value = "the kernel stopped while running this cell; its state is gone"
                    yield {"type": "error", "name": "KernelRestarted", "value": value, "traceback": ""}
                    yield {"type": "end_of_execution"}
                    return
                if event.get("type") == "end":
                    done = True
                    yield {"type": "end_of_execution"}
                    return
                yield event
        finally:
            if done:
                ctx.queue = None
                ctx.lock.release()
            else:
                task = asyncio.create_task(self._interrupt(ctx, queue), name=f"sandboxes-interrupt-{ctx.id}")
                interrupts = self.contexts(rec).interrupts
                interrupts.add(task)
                task.add_done_callback(interrupts.discard)

    async def _interrupt(self, ctx: Context, queue: asyncio.Queue) -> None:
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
                    event = await asyncio.wait_for(queue.get(), left)
                except TimeoutError:
                    continue
                if event is None or event.get("type") == "end":
                    return
        finally:
            ctx.queue = None
            ctx.lock.release()
