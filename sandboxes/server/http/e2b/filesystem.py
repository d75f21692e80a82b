"""`filesystem.Filesystem` of the E2B in-sandbox daemon (Connect, JSON): `files.list / exists /
get_info / remove / rename / make_dir`.

Each call is one of the agent's file operations (`SandboxBase.stat / list_dir / make_dir / move /
remove`), on the agent's path resolution, and the listings and changes are charged to the key as
executions are (`ServerCore.session`). A directory made, or the parents of a move, belong to the
call's user. Relative paths are under the sandbox's work dir (the platform's home). Watching a
directory is not served (`unimplemented`).
"""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from sandboxes import errors as E
from sandboxes._proto import envd_filesystem_pb2 as fs
from sandboxes.server.http.connect import Rpc, service_app
from sandboxes.server.http.e2b.process import request_user, target
from sandboxes.types import DirEntry

if TYPE_CHECKING:
    from sandboxes.server.http.e2b.state import E2bSandbox
    from sandboxes.server.session import Session
    from sandboxes.server.surface_core import SurfaceCore

__all__ = ["SERVICE", "Filesystem", "connect_app"]

SERVICE = "filesystem.Filesystem"
MAX_DEPTH = 64
_TYPES = {"dir": fs.FILE_TYPE_DIRECTORY}


def resolve(sb: E2bSandbox, path: str) -> str:
    """`sb.resolve(path)`, its refusal as the call's `invalid_argument`."""
    try:
        return sb.resolve(path)
    except E.InvalidRequest as e:
        raise ConnectError(Code.INVALID_ARGUMENT, e.message) from None


def entry_info(e: DirEntry) -> Any:
    """The agent's entry as envd's `EntryInfo` (a symlink's type is its target's, its target
    absolute)."""
    info = fs.EntryInfo(
        name=e.name,
        type=fs.FILE_TYPE_DIRECTORY if (e.target_is_dir if e.is_symlink else e.is_dir) else fs.FILE_TYPE_FILE,
        path=e.path,
        size=e.size,
        mode=e.mode,
        permissions=e.symbolic_mode,
        owner=e.owner,
        group=e.group,
        is_symlink=e.is_symlink,
    )
    info.modified_time.FromDatetime(datetime.fromtimestamp(e.mtime, UTC))
    if e.is_symlink:
        info.symlink_target = posixpath.normpath(posixpath.join(posixpath.dirname(e.path), e.symlink_target))
    return info


@contextlib.contextmanager
def _as_connect_errors(path: str) -> Iterator[None]:
    """The agent's typed errors as envd's Connect codes."""
    try:
        yield
    except E.QuotaExceeded as e:
        raise ConnectError(Code.RESOURCE_EXHAUSTED, e.message) from None
    except E.NotFound:
        raise ConnectError(Code.NOT_FOUND, f"{path}: no such file or directory") from None
    except E.Conflict as e:
        raise ConnectError(Code.ALREADY_EXISTS, e.message) from None
    except E.AuthError as e:
        raise ConnectError(Code.PERMISSION_DENIED, e.message) from None
    except E.InvalidRequest as e:
        raise ConnectError(Code.INVALID_ARGUMENT, e.message) from None
    except E.SandboxError as e:
        raise ConnectError(Code.UNAVAILABLE, f"{e.kind.value}: {e.message}") from None


class Filesystem:
    """The Connect service: handlers for `connect_app`, over the server's `core`."""

    def __init__(self, core: SurfaceCore) -> None:
        self.core = core

    def _session(self, ctx: Any, op: str) -> tuple[Session, E2bSandbox, str | None]:
        """The call's sandbox, the charged session its operation runs in, and its user (whose
        are the directories it makes)."""
        rec, sb = target()
        user = request_user(ctx, sb)
        return self.core.session(rec, f"e2b.{op}"), sb, user

    async def stat(self, req: Any, ctx: Any) -> Any:
        session, sb, _ = self._session(ctx, "stat")
        path = resolve(sb, req.path)
        with _as_connect_errors(path):
            return fs.StatResponse(entry=entry_info(await session.stat(path)))

    async def list_dir(self, req: Any, ctx: Any) -> Any:
        depth = req.depth or 1
        if depth > MAX_DEPTH:
            raise ConnectError(Code.INVALID_ARGUMENT, f"depth is at most {MAX_DEPTH}")
        session, sb, _ = self._session(ctx, "list")
        path = resolve(sb, req.path)
        with _as_connect_errors(path):
            entries = await session.list_dir(path, depth)
        return fs.ListDirResponse(entries=[entry_info(e) for e in entries])

    async def make_dir(self, req: Any, ctx: Any) -> Any:
        session, sb, user = self._session(ctx, "mkdir")
        path = resolve(sb, req.path)
        with _as_connect_errors(path):
            return fs.MakeDirResponse(
                entry=entry_info(await session.make_dir(path, exist_ok=False, user=user))
            )

    async def move(self, req: Any, ctx: Any) -> Any:
        session, sb, user = self._session(ctx, "move")
        source, destination = resolve(sb, req.source), resolve(sb, req.destination)
        with _as_connect_errors(source):
            entry = await session.move(source, destination, make_parents=True, user=user)
        return fs.MoveResponse(entry=entry_info(entry))

    async def remove(self, req: Any, ctx: Any) -> Any:
        rec, sb = target()
        request_user(ctx, sb)
        path = resolve(sb, req.path)
        try:
            await rec.sandbox.remove(path, recursive=True)
        except E.NotFound as e:
            raise ConnectError(Code.NOT_FOUND, e.message) from None
        except E.InvalidRequest as e:
            raise ConnectError(Code.INVALID_ARGUMENT, e.message) from None
        except E.SandboxError as e:
            raise ConnectError(Code.UNAVAILABLE, f"{e.kind.value}: {e.message}") from None
        return fs.RemoveResponse()

    async def watch_dir(self, req: Any, ctx: Any) -> AsyncIterator[Any]:
        raise ConnectError(Code.UNIMPLEMENTED, "watching a directory is not supported by this server")
        yield  # an async generator, as the streaming endpoint expects

    async def unsupported(self, req: Any, ctx: Any) -> Any:
        raise ConnectError(Code.UNIMPLEMENTED, "watching a directory is not supported by this server")


def connect_app(service: Filesystem) -> Any:
    """The Connect ASGI app of `service` (paths `/filesystem.Filesystem/<Method>`)."""
    s = service
    return service_app(
        SERVICE,
        [
            Rpc("Stat", "unary", fs.StatRequest, fs.StatResponse, s.stat),
            Rpc("ListDir", "unary", fs.ListDirRequest, fs.ListDirResponse, s.list_dir),
            Rpc("MakeDir", "unary", fs.MakeDirRequest, fs.MakeDirResponse, s.make_dir),
            Rpc("Move", "unary", fs.MoveRequest, fs.MoveResponse, s.move),
            Rpc("Remove", "unary", fs.RemoveRequest, fs.RemoveResponse, s.remove),
            Rpc("WatchDir", "server_stream", fs.WatchDirRequest, fs.WatchDirResponse, s.watch_dir),
            Rpc("CreateWatcher", "unary", fs.CreateWatcherRequest, fs.CreateWatcherResponse, s.unsupported),
            Rpc(
                "GetWatcherEvents",
                "unary",
                fs.GetWatcherEventsRequest,
                fs.GetWatcherEventsResponse,
                s.unsupported,
            ),
            Rpc("RemoveWatcher", "unary", fs.RemoveWatcherRequest, fs.RemoveWatcherResponse, s.unsupported),
        ],
    )
