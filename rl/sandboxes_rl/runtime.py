"""A private event loop on a daemon thread that owns a sandbox source, for callers without one.

veRL calls `compute_score` synchronously (from the trainer's thread or a worker pool); TRL runs async
reward functions on its own daemon loop and calls environment methods from its main thread. A
`sandboxes.Pool` or `AsyncSandboxClient` belongs to the loop it was started on, so these adapters
keep theirs on a `SandboxRuntime`: one loop thread, one pool (or client), reached from any thread
(`call`) or any other loop (`run`).

```python
rt = SandboxRuntime(backend="local", warm=8)        # or SandboxRuntime(address="host:50051", api_key=...)
report = rt.call(lambda: use_sandbox(rt))           # sync, from any thread but the runtime's own
await rt.run(lambda: use_sandbox(rt))               # from a coroutine on another loop
rt.close()
```

`default_runtime()` is the process-wide one the adapters use unless given another: remote when
`$SANDBOXES_ADDRESS` is set (key from `$SANDBOXES_API_KEY`), else an embedded pool on
`$SANDBOXES_BACKEND` (default "local") with `$SANDBOXES_RL_WARM` warm sandboxes (default 8).
A forked child (a multiprocessing reward worker) gets a fresh runtime of its own.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import concurrent.futures.thread  # its exit hook must be registered before ours
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Self, TypeVar

from sandboxes import Cancelled

from .overlap import SandboxLease, SandboxProvider, as_provider

__all__ = ["SandboxRuntime", "configure", "default_runtime", "shutdown_default_runtime"]

log = logging.getLogger(__name__)

T = TypeVar("T")

ENV_ADDRESS = "SANDBOXES_ADDRESS"
ENV_API_KEY = "SANDBOXES_API_KEY"
ENV_BACKEND = "SANDBOXES_BACKEND"
ENV_WARM = "SANDBOXES_RL_WARM"


class SandboxRuntime:
    """An event loop thread with one sandbox source (embedded pool or remote client).

    `address` selects the remote client; otherwise an embedded `Pool(backend, warm,
    **pool_kwargs)`. `source_factory` (an async callable returning a Pool / client / provider,
    called on the runtime's loop) overrides both. The loop and the source start on first use.
    """

    def __init__(
        self,
        *,
        address: str | None = None,
        api_key: str | None = None,
        backend: str = "local",
        warm: int = 8,
        template: str | None = None,
        pool_kwargs: Mapping[str, Any] | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        source_factory: Callable[[], Awaitable[Any]] | None = None,
        name: str = "sandboxes-rl",
    ) -> None:
        self.address = address
        self.api_key = api_key
        self.backend = backend
        self.warm = warm
        self.template = template
        self.pool_kwargs = dict(pool_kwargs or {})
        self.client_kwargs = dict(client_kwargs or {})
        self._factory = source_factory
        self.name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._source: Any = None
        self._provider: SandboxProvider | None = None
        self._source_lock: asyncio.Lock | None = None
        self._closed = False

    # -- the loop ------------------------------------------------------------------------------

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The runtime's loop (started on first use)."""
        with self._lock:
            if self._closed:
                raise Cancelled("this sandbox runtime is closed")
            if self._pid != os.getpid():
                # Forked: the parent's loop thread does not exist here; start over (the parent's
                # pool and its sandboxes stay the parent's).
                self._loop = self._thread = None
                self._source = self._provider = self._source_lock = None
                self._pid = os.getpid()
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                thread = threading.Thread(target=run, name=self.name, daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    def in_runtime(self) -> bool:
        """True when called from the runtime's own loop thread."""
        return self._thread is not None and threading.current_thread() is self._thread

    def submit(self, fn: Callable[[], Awaitable[T]]) -> concurrent.futures.Future[T]:
        """Run `fn()` on the runtime's loop; a `concurrent.futures.Future` of its result."""
        return asyncio.run_coroutine_threadsafe(_call(fn), self.loop)

    def call(self, fn: Callable[[], Awaitable[T]], timeout: float | None = None) -> T:
        """Run `fn()` on the runtime's loop and block for its result (not from the runtime's thread)."""
        if self.in_runtime():
            raise RuntimeError(
                "SandboxRuntime.call() from the runtime's own loop would deadlock; await run()"
            )
        return self.submit(fn).result(timeout)

    async def run(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Await `fn()` run on the runtime's loop, from any loop (directly when already on it)."""
        loop = self.loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            return await fn()
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_call(fn), loop))

    # -- the sandbox source (runtime loop only) -----------------------------------------------

    async def provider(self) -> SandboxProvider:
        """The sandbox provider, created on first use (call on the runtime's loop)."""
        if self._provider is not None:
            return self._provider
        if self._source_lock is None:
            self._source_lock = asyncio.Lock()
        async with self._source_lock:
            if self._provider is None:
                source = await self._make_source()
                self._source = source
                self._provider = as_provider(source, self.template)
        return self._provider

    async def _make_source(self) -> Any:
        if self._factory is not None:
            return await self._factory()
        if self.address:
            from sandboxes.client import AsyncSandboxClient

            client = AsyncSandboxClient(self.address, self.api_key, **self.client_kwargs)
            await client.__aenter__()
            return client
        from sandboxes import Pool

        pool = Pool(backend=self.backend, warm=self.warm, **self.pool_kwargs)
        await pool.start()
        return pool

    async def lease(self, **kwargs: Any) -> SandboxLease:
        """A started `SandboxLease` (call on the runtime's loop)."""
        return SandboxLease(await self.provider(), **kwargs).start()

    @property
    def source(self) -> Any:
        """The pool or client once created (None before first use)."""
        return self._source

    # -- shutdown ------------------------------------------------------------------------------

    def close(self, timeout: float = 120.0) -> None:
        """Close the pool / client (destroying its sandboxes), then stop the loop thread. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
            forked = self._pid != os.getpid()
        if loop is None or thread is None or forked or not thread.is_alive():
            return
        if threading.current_thread() is thread:
            raise RuntimeError("SandboxRuntime.close() from the runtime's own loop thread")

        async def shutdown() -> None:
            source = self._source
            self._source = self._provider = None
            if source is None:
                return
            for name in ("close", "aclose"):
                fn = getattr(source, name, None)
                if fn is not None:
                    await fn()
                    return

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout)
        except Exception:
            log.exception("closing the sandbox runtime's pool failed")
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)
            if not thread.is_alive():
                loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = f"remote {self.address}" if self.address else f"embedded {self.backend}"
        return f"<SandboxRuntime {where}{' closed' if self._closed else ''}>"


async def _call(fn: Callable[[], Awaitable[T]]) -> T:
    return await fn()


# --- the process-wide default ---------------------------------------------------------------

_default: SandboxRuntime | None = None
_default_lock = threading.Lock()
_default_kwargs: dict[str, Any] | None = None


def configure(**kwargs: Any) -> SandboxRuntime:
    """Replace the default runtime with `SandboxRuntime(**kwargs)` (the old one is closed)."""
    global _default, _default_kwargs
    with _default_lock:
        old, _default, _default_kwargs = _default, None, dict(kwargs)
    if old is not None:
        old.close()
    return default_runtime()


def default_runtime() -> SandboxRuntime:
    """The process-wide runtime (see the module doc for how the environment configures it)."""
    global _default
    with _default_lock:
        if _default is None or _default._closed:
            if _default_kwargs is not None:
                kwargs = dict(_default_kwargs)
            elif os.environ.get(ENV_ADDRESS):
                kwargs = {"address": os.environ[ENV_ADDRESS], "api_key": os.environ.get(ENV_API_KEY)}
            else:
                kwargs = {
                    "backend": os.environ.get(ENV_BACKEND, "local"),
                    "warm": int(os.environ.get(ENV_WARM, "8")),
                }
            _default = SandboxRuntime(**kwargs)
        return _default


def shutdown_default_runtime() -> None:
    """Close the default runtime (also run at interpreter exit)."""
    global _default
    with _default_lock:
        rt, _default = _default, None
    if rt is not None:
        rt.close()


def _register_exit_hook() -> None:
    # Close the default runtime before the interpreter's thread pools shut down: closing the pool
    # destroys its sandboxes, which uses `asyncio.to_thread`. `threading._register_atexit` hooks run
    # in reverse order of registration, before the executors' own (registered at their import, done
    # just above), and before non-daemon threads are joined; plain `atexit` runs too late for that.
    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        try:
            register(shutdown_default_runtime)
            return
        except RuntimeError:  # already shutting down
            pass
    atexit.register(shutdown_default_runtime)


_register_exit_hook()
