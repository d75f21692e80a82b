"""The long-lived programs of one sandbox: one holder for every surface's.

Some programs outlive the request that starts them: a command session's program (the Prime
gateway's and E2B's process services, `http/sessions.py`), a Daytona session's shell
(`http/daytona/sessions.py`), a Daytona terminal (`http/daytona/pty.py`), the kernel of a code
interpreter's context (`http/kernels.py`). Each is started through `ServerCore.programs(rec)`, a
`Holder`, which

- keeps it under its kind and a key while it runs (`running(kind)`), and forgets it when its
  stream is over (it exited, it was cancelled, its sandbox went);
- charges it as its surface asks: one of the record owner's exec slots (`session.py`), taken
  before it starts (`QuotaExceeded` past the key's limit) and given back when its stream is
  over, counted as the method given; or nothing, for what only serves requests that are
  charged themselves (a kernel serves cells, a session's shell its commands);
- ends every one at once when the sandbox's processes end: the core calls `close()` as it
  deletes the record (its owner, its lifetime, a shutdown) and as it evicts the sandbox to its
  files (a pause without memory, Daytona's stop: resuming starts a new sandbox, with a new
  holder). A pause that keeps memory keeps them, frozen with the sandbox.

A surface keeps what it knows of its programs (names, listeners, contexts) in its own module; what
of it goes with the sandbox (Daytona's sessions and terminals) it keeps in `state(kind)`, made
afresh for the next sandbox.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from sandboxes import errors as E

if TYPE_CHECKING:
    from sandboxes.sandbox import ExecStream
    from sandboxes.server.core import ServerCore
    from sandboxes.server.registry import Record

__all__ = ["ATTR", "Holder", "end_programs", "holder_of"]

ATTR = "core.programs"  # Record.attrs key of its sandbox's `Holder`

T = TypeVar("T")


def _nothing() -> None:
    return None


class Holder:
    """The long-lived programs of `rec`'s sandbox as it is now (see the module's docstring)."""

    def __init__(self, core: ServerCore, rec: Record) -> None:
        self.core = core
        self.rec = rec
        self.sandbox = rec.sandbox  # the one its programs run in
        self.closed = False
        self._running: dict[tuple[str, str], ExecStream] = {}
        self._left_out: set[ExecStream] = set()  # what a memory snapshot does not take
        self._state: dict[str, Any] = {}
        self._keys = itertools.count(1)

    def start(
        self,
        kind: str,
        key: str | None,
        argv: Any,
        *,
        charge: str | None,
        carried: bool = True,
        **kwargs: Any,
    ) -> ExecStream:
        """Starts `argv` in the sandbox (`Sandbox.exec_stream` with `kwargs`) as the program `key`
        of `kind` (None: a key of its own), held until its stream is over. `charge`: the method
        it is counted as, holding one of the owner's exec slots until then; None: not charged.
        `carried`: whether a memory snapshot takes it (a terminal never is: its other end is the
        agent's)."""
        if self.closed:
            raise E.SandboxLost(f"sandbox {self.rec.id} ended, and its programs with it")
        key = f"#{next(self._keys)}" if key is None else key
        if (kind, key) in self._running:
            raise E.Conflict(f"{kind} {key} is running")
        release = self.core.session(self.rec, charge).hold() if charge is not None else _nothing
        try:
            stream = self.sandbox.exec_stream(argv, **kwargs)
        except BaseException:
            release()
            raise
        self._running[kind, key] = stream
        if not carried or kwargs.get("terminal") is not None:
            self._left_out.add(stream)
        stream.on_end(release)
        stream.on_end(lambda: self._forget(kind, key, stream))
        return stream

    def _forget(self, kind: str, key: str, stream: ExecStream) -> None:
        self._left_out.discard(stream)
        if self._running.get((kind, key)) is stream:
            del self._running[kind, key]

    def left_out(self) -> set[int]:
        """The pids (in the sandbox) of the running programs a memory snapshot does not take:
        those started with `carried=False` and terminals. A copy has neither: its surfaces
        start them afresh."""
        return {s.pid for s in self._left_out if s.pid is not None}

    def running(self, kind: str | None = None) -> list[str]:
        """The keys of the running programs of `kind` (None: `kind/key` of every one)."""
        if kind is None:
            return [f"{k}/{key}" for k, key in self._running]
        return [key for k, key in self._running if k == kind]

    def __len__(self) -> int:
        return len(self._running)

    def state(self, kind: str, make: Callable[[], T]) -> T:
        """What a surface keeps of its `kind` of programs that goes with this sandbox (made by
        `make` the first time)."""
        if kind not in self._state:
            self._state[kind] = make()
        value: T = self._state[kind]
        return value

    def close(self) -> None:
        """Ends every program now (the sandbox's processes are ending, or the server is): each
        stream cancelled, its exec slot given back. Nothing starts here afterwards."""
        self.closed = True
        for stream in list(self._running.values()):
            stream.cancel()
        self._running.clear()


def holder_of(core: ServerCore, rec: Record) -> Holder:
    """`rec`'s holder: a new one for a sandbox that replaced the last one's (one made while
    it was being evicted would otherwise start programs in the sandbox that went)."""
    held = rec.attrs.get(ATTR)
    if held is None or held.sandbox is not rec.sandbox:
        if held is not None:
            held.close()
        held = rec.attrs[ATTR] = Holder(core, rec)
    return held


def end_programs(rec: Record) -> None:
    """Ends `rec`'s sandbox's long-lived programs (it is deleted or evicted)."""
    held = rec.attrs.pop(ATTR, None)
    if held is not None:
        held.close()
