"""`filesystem.Filesystem` of the E2B in-sandbox daemon (Connect, JSON): `files.list / exists /
get_info / remove / rename / make_dir`.

Stat, ListDir, MakeDir and Move run one short shell program in the sandbox (coreutils and GNU
find, as the sandbox's user, from its work dir), so what they see and may change is exactly what
a program of that sandbox sees and may change; Remove is the agent's own. Relative paths are
under the sandbox's work dir (the platform's home). Watching a directory is not served
(`unimplemented`).
"""

from __future__ import annotations

import posixpath
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from connectrpc.code import Code
from connectrpc.errors import ConnectError

from sandboxes import errors as E
from sandboxes._proto import envd_filesystem_pb2 as fs
from sandboxes.server.http.connect import Rpc, service_app
from sandboxes.server.http.e2b.process import request_user, target
from sandboxes.types import Limits

__all__ = ["SERVICE", "Filesystem", "connect_app"]

SERVICE = "filesystem.Filesystem"
MAX_DEPTH = 64
LISTING_BYTES = 64 << 20
# One entry: type, target's type, size, octal mode, symbolic mode, owner, group, mtime, link, path.
_FIELDS = 10
_FORMAT = r"%y\0%Y\0%s\0%m\0%M\0%u\0%g\0%T@\0%l\0%p\0"
_MISSING, _NOT_DIR, _EXISTS = 3, 20, 17
_EXISTS_TEST = '[ -e "$1" ] || [ -L "$1" ]'
_SCRIPTS = {
    "stat": f'{_EXISTS_TEST} || exit {_MISSING}; exec find "$1" -maxdepth 0 -printf "$0"',
    "list": (
        f'{_EXISTS_TEST} || exit {_MISSING}; [ -d "$1" ] || exit {_NOT_DIR}; '
        'exec find "$1" -mindepth 1 -maxdepth "$2" -printf "$0"'
    ),
    "mkdir": (
        f'if {_EXISTS_TEST}; then [ -d "$1" ] && exit {_EXISTS}; exit {_NOT_DIR}; fi; '
        'mkdir -p -- "$1" && exec find "$1" -maxdepth 0 -printf "$0"'
    ),
    "move": (
        f'{_EXISTS_TEST} || exit {_MISSING}; mkdir -p -- "$(dirname -- "$2")" && mv -T -- "$1" "$2" '
        '&& exec find "$2" -maxdepth 0 -printf "$0"'
    ),
}
_TYPES = {"d": fs.FILE_TYPE_DIRECTORY}


def resolve(sb: Any, path: str) -> str:
    """`sb.resolve(path)`, its refusal as the call's `invalid_argument`."""
    try:
        return sb.resolve(path)
    except E.InvalidRequest as e:
        raise ConnectError(Code.INVALID_ARGUMENT, e.message) from None


def _entries(out: bytes) -> list[Any]:
    parts = out.split(b"\0")
    entries = []
    for i in range(0, len(parts) - _FIELDS + 1, _FIELDS):
        kind, target_kind, size, mode, perms, owner, group, mtime, link, path = (
            p.decode("utf-8", "surrogateescape") for p in parts[i : i + _FIELDS]
        )
        symlink = kind == "l"
        info = fs.EntryInfo(
            name=posixpath.basename(path) or path,
            type=_TYPES.get(target_kind if symlink else kind, fs.FILE_TYPE_FILE),
            path=path,
            size=int(size or 0),
            mode=int(mode or "0", 8),
            permissions=perms,
            owner=owner,
            group=group,
            is_symlink=symlink,
        )
        seconds = float(mtime or 0)
        info.modified_time.FromDatetime(datetime.fromtimestamp(seconds, UTC))
        if symlink:
            info.symlink_target = posixpath.normpath(posixpath.join(posixpath.dirname(path), link))
        entries.append(info)
    return entries


class Filesystem:
    """The Connect service: handlers for `connect_app`, over the server's `core`."""

    def __init__(self, core: Any) -> None:
        self.core = core

    async def _run(self, ctx: Any, op: str, *args: str) -> list[Any]:
        """Runs the shell program of `op` on `args` (an execution of the sandbox owner's, in one
        of its exec slots); the entries it printed."""
        rec, sb = target()
        user = request_user(ctx, sb)
        try:
            r = await self.core.session(rec, f"e2b.{op}").exec(
                ["/bin/sh", "-c", _SCRIPTS[op], _FORMAT, *args],
                cwd=sb.work_dir,
                timeout=60,
                limits=Limits(max_output_bytes=LISTING_BYTES),
                user=user,
            )
        except E.QuotaExceeded as e:
            raise ConnectError(Code.RESOURCE_EXHAUSTED, e.message) from None
        except E.InvalidRequest as e:
            raise ConnectError(Code.INVALID_ARGUMENT, e.message) from None
        except E.SandboxError as e:
            raise ConnectError(Code.UNAVAILABLE, f"{e.kind.value}: {e.message}") from None
        where = args[-1] if op == "move" else args[0]
        if r.exit_code == _MISSING:
            raise ConnectError(Code.NOT_FOUND, f"{args[0]}: no such file or directory")
        if r.exit_code == _NOT_DIR:
            what = "a file exists there" if op == "mkdir" else "not a directory"
            raise ConnectError(Code.INVALID_ARGUMENT, f"{where}: {what}")
        if r.exit_code == _EXISTS:
            raise ConnectError(Code.ALREADY_EXISTS, f"{where}: the directory exists")
        if r.timed_out or r.exit_code != 0 and not (op == "list" and r.stdout):
            why = r.stderr.decode("utf-8", "replace").strip() or f"exit {r.exit_code}"
            code = Code.PERMISSION_DENIED if "ermission denied" in why else Code.INTERNAL
            raise ConnectError(code, f"{where}: {why}")
        return _entries(r.stdout)

    async def stat(self, req: Any, ctx: Any) -> Any:
        entries = await self._run(ctx, "stat", resolve(target()[1], req.path))
        return fs.StatResponse(entry=entries[0] if entries else None)

    async def list_dir(self, req: Any, ctx: Any) -> Any:
        depth = req.depth or 1
        if depth > MAX_DEPTH:
            raise ConnectError(Code.INVALID_ARGUMENT, f"depth is at most {MAX_DEPTH}")
        entries = await self._run(ctx, "list", resolve(target()[1], req.path), str(depth))
        return fs.ListDirResponse(entries=entries)

    async def make_dir(self, req: Any, ctx: Any) -> Any:
        entries = await self._run(ctx, "mkdir", resolve(target()[1], req.path))
        return fs.MakeDirResponse(entry=entries[0] if entries else None)

    async def move(self, req: Any, ctx: Any) -> Any:
        sb = target()[1]
        entries = await self._run(ctx, "move", resolve(sb, req.source), resolve(sb, req.destination))
        return fs.MoveResponse(entry=entries[0] if entries else None)

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
