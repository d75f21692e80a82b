"""`sandboxes volume …`, `sandboxes pause` and `sandboxes resume`: a server's volumes of your API
key, and pausing its sandboxes.

```
sandboxes volume create NAME [--size BYTES] [--inodes N]    # prints its id
sandboxes volume ls [--json]
sandboxes volume rm VOLUME ...                              # by id or name
sandboxes pause SANDBOX_ID [--files-only]
sandboxes resume SANDBOX_ID [--ttl SECONDS]
```
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from sandboxes.cli_remote import err, remote

__all__ = ["add_parsers"]


def cmd_create(args: argparse.Namespace) -> int:
    rc, vol = remote(args, lambda c: c.create_volume(args.name, size_bytes=args.size, inodes=args.inodes))
    if vol is not None:
        print(vol.id)
    return rc


def cmd_ls(args: argparse.Namespace) -> int:
    rc, vols = remote(args, lambda c: c.volumes())
    if vols is None:
        return rc
    rows = [
        {
            "id": v.id,
            "name": v.name,
            "size_bytes": v.size_bytes,
            "inodes": v.inodes,
            "created_at": v.created_at,
        }
        for v in vols
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        print(f"{r['id']}\t{r['name']}\t{r['size_bytes']}\t{r['inodes']}")
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    from sandboxes.errors import NotFound

    async def go(client: Any) -> list[str]:
        missing = []
        for ref in args.volumes:
            try:
                await client.delete_volume(ref)
                print(ref)
            except NotFound:
                missing.append(ref)
        return missing

    rc, missing = remote(args, go)
    if missing:
        err(f"not found: {', '.join(missing)}")
        return 1
    return rc


def cmd_pause(args: argparse.Namespace) -> int:
    async def go(client: Any) -> bool:
        return await (await client.get(args.sandbox_id)).pause(files_only=args.files_only)

    rc, changed = remote(args, go)
    if changed is not None:
        print("paused" if changed else "paused already")
    return rc


def cmd_resume(args: argparse.Namespace) -> int:
    async def go(client: Any) -> bool:
        return await (await client.get(args.sandbox_id)).resume(ttl_s=args.ttl)

    rc, changed = remote(args, go)
    if changed is not None:
        print("resumed" if changed else "not paused")
    return rc


def add_parsers(sub: Any, remote_args: Callable[[argparse.ArgumentParser], None]) -> None:
    """Adds `volume` (create, ls, rm), `pause` and `resume` to the `sandboxes` command."""
    p = sub.add_parser("volume", help="volumes of your API key on a server (create, ls, rm)")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    c = verbs.add_parser("create", help="make a volume; prints its id")
    remote_args(c)
    c.add_argument("name")
    c.add_argument("--size", type=int, default=0, metavar="BYTES", help="its bound (default 1 GiB)")
    c.add_argument(
        "--inodes", type=int, default=0, metavar="N", help="files it holds (default: one per 16 KiB)"
    )
    c.set_defaults(fn=cmd_create)
    c = verbs.add_parser("ls", help="list your volumes")
    remote_args(c)
    c.add_argument("--json", action="store_true")
    c.set_defaults(fn=cmd_ls)
    c = verbs.add_parser("rm", help="delete volumes (their data goes once no sandbox mounts them)")
    remote_args(c)
    c.add_argument("volumes", nargs="+", metavar="VOLUME")
    c.set_defaults(fn=cmd_rm)
    p = sub.add_parser("pause", help="stop every process of a sandbox where it runs")
    remote_args(p)
    p.add_argument("sandbox_id")
    p.add_argument("--files-only", action="store_true", help="end its processes, keep its files")
    p.set_defaults(fn=cmd_pause)
    p = sub.add_parser("resume", help="continue a paused sandbox")
    remote_args(p)
    p.add_argument("sandbox_id")
    p.add_argument("--ttl", type=float, default=None, metavar="SECONDS", help="its TTL from now")
    p.set_defaults(fn=cmd_resume)
