"""A charged session: the way every surface runs a program in a sandbox it serves.

`ServerCore.session(rec, method)` hands one out. Each program it starts holds one of the record
owner's exec slots (`Quotas.exec_slot`) for as long as it runs, taken before anything starts
(`QuotaExceeded` past the key's limit, which each surface answers in its own shape) and counted
and timed as `method`:

- `exec` and `run_tests` until they return, `run_tests_batch` until its stream closes;
- `exec_stream` until the stream is over (its last event read, an error, or `cancel()`), so a
  terminal, a session's shell command or a background process holds its slot while it lives;
- a listing or a file operation (`list_dir`, `file_op` and the `FileVerbs` built on it: stat,
  make dir, move, permissions, find, search) until it returns: a walk of a tree is the agent's
  work in the sandbox on the key's behalf, as a program's is (reads and writes of one file are
  not charged);
- `hold()` for work that is more than one program (a cell through a kernel, a command in a
  session's shell): the slot until the returned release is called.

Programs that outlive their request (a command session's, a terminal) are started through the
sandbox's `Holder` (`programs.py`), which takes their slot with `hold()` and ends them with the
sandbox.

What the server runs to set a sandbox up (a build's steps, a create's start command, the kernel
that serves cells) belongs to that create or cell and is not charged apart.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

from sandboxes._proto import common_pb2 as cpb
from sandboxes.sandbox import FileVerbs

if TYPE_CHECKING:
    from sandboxes.sandbox import ExecStream
    from sandboxes.server.core import ServerCore
    from sandboxes.server.registry import Record
    from sandboxes.types import DirEntry, ExecResult

__all__ = ["Session"]


class Session(FileVerbs):
    """`rec`'s sandbox as a surface runs programs and file operations in it, each charged to
    `rec.owner`."""

    def __init__(self, core: ServerCore, rec: Record, method: str) -> None:
        self.core = core
        self.rec = rec
        self.method = method

    @contextlib.contextmanager
    def charge(self) -> Iterator[None]:
        """One exec slot of the owner's around the block."""
        with self.core.exec_slot(self.rec.owner, self.method):
            yield

    def hold(self) -> Callable[[], None]:
        """One exec slot of the owner's from now until the returned release is called (once is
        enough; more calls do nothing)."""
        slot = contextlib.ExitStack()
        slot.enter_context(self.charge())
        return slot.close

    async def file_op(self, op: cpb.FileOpRequest) -> cpb.FileOpResponse:
        with self.charge():
            return await self.rec.sandbox.file_op(op)

    async def list_dir(self, path: str = ".", depth: int = 1) -> list[DirEntry]:
        with self.charge():
            return await self.rec.sandbox.list_dir(path, depth)

    async def exec(self, argv: Any, **kwargs: Any) -> ExecResult:
        with self.charge():
            return await self.rec.sandbox.exec(argv, **kwargs)

    def exec_stream(self, argv: Any, **kwargs: Any) -> ExecStream:
        release = self.hold()
        try:
            stream = self.rec.sandbox.exec_stream(argv, **kwargs)
        except BaseException:
            release()
            raise
        stream.on_end(release)
        return stream

    async def run_tests(self, *args: Any, **kwargs: Any) -> Any:
        with self.charge():
            return await self.rec.sandbox.run_tests(*args, **kwargs)

    @contextlib.asynccontextmanager
    async def run_tests_batch(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        with self.charge():
            async with self.rec.sandbox.run_tests_batch(*args, **kwargs) as stream:
                yield stream
