"""`sandboxes checkpoint …` and `sandboxes fork`: a server's checkpoints of your API key.

```
sandboxes checkpoint create SANDBOX_ID [--name NAME] [--ttl SECONDS | --keep] [--memory]   # its id
sandboxes checkpoint ls [--json]
sandboxes checkpoint rm CHECKPOINT_ID ...
sandboxes fork SANDBOX_ID [-n COUNT] [--memory]                                 # prints the new ids
```

A sandbox is made from a checkpoint with `sandboxes exec --checkpoint ID` (or the client's
`create(checkpoint=...)`). With `--memory` the sandbox's running programs go too, and run on in
each sandbox made from it.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from sandboxes.cli_remote import err, remote

__all__ = ["add_parsers"]


def cmd_create(args: argparse.Namespace) -> int:
    ttl = None if args.keep else args.ttl

    async def go(client: Any) -> Any:
        return await (await client.get(args.sandbox_id)).checkpoint(
            name=args.name, memory=args.memory, **({"ttl_s": ttl} if ttl is not None or args.keep else {})
        )

    rc, cp = remote(args, go)
    if cp is not None:
        print(cp.id)
    return rc


def cmd_ls(args: argparse.Namespace) -> int:
    rc, cps = remote(args, lambda client: client.checkpoints())
    if cps is None:
        return rc
    rows = [
        {
            "id": cp.id,
            "name": cp.name,
            "template": cp.template,
            "source": cp.source,
            "size_bytes": cp.bytes,
            "created_at": cp.created_at,
            "expires_at": cp.expires_at,
            "memory": cp.memory,
        }
        for cp in cps
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    now = time.time()
    for r in rows:
        expires = f"{max(0.0, r['expires_at'] - now):.0f}s" if r["expires_at"] else "kept"
        print(f"{r['id']}\t{r['name'] or '-'}\t{r['template']}\t{r['size_bytes']}\t{expires}")
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    async def go(client: Any) -> list[str]:
        missing = []
        for cid in args.ids:
            try:
                await client.delete_checkpoint(cid)
                print(cid)
            except Exception as e:
                from sandboxes.errors import NotFound

                if not isinstance(e, NotFound):
                    raise
                missing.append(cid)
        return missing

    rc, missing = remote(args, go)
    if missing:
        err(f"not found: {', '.join(missing)}")
        return 1
    return rc


def cmd_fork(args: argparse.Namespace) -> int:
    async def go(client: Any) -> Any:
        return await (await client.get(args.sandbox_id)).fork(args.n, memory=args.memory)

    rc, forks = remote(args, go)
    for f in forks or ():
        print(f.id)
    return rc


def add_parsers(sub: Any, remote_args: Callable[[argparse.ArgumentParser], None]) -> None:
    """Adds `checkpoint` (create, ls, rm) and `fork` to the `sandboxes` command's subparsers."""
    p = sub.add_parser("checkpoint", help="checkpoints of your API key on a server (create, ls, rm)")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    c = verbs.add_parser("create", help="checkpoint a sandbox's file system; prints the checkpoint's id")
    remote_args(c)
    c.add_argument("sandbox_id")
    c.add_argument("--name", default="")
    c.add_argument(
        "--ttl", type=float, default=None, metavar="SECONDS", help="kept this long (default: a day)"
    )
    c.add_argument("--keep", action="store_true", help="kept until deleted")
    c.add_argument(
        "--memory", action="store_true", help="its running programs too (they run on in each copy)"
    )
    c.set_defaults(fn=cmd_create)
    c = verbs.add_parser("ls", help="list your checkpoints")
    remote_args(c)
    c.add_argument("--json", action="store_true")
    c.set_defaults(fn=cmd_ls)
    c = verbs.add_parser("rm", help="delete checkpoints (sandboxes made from them keep running)")
    remote_args(c)
    c.add_argument("ids", nargs="+")
    c.set_defaults(fn=cmd_rm)
    p = sub.add_parser("fork", help="new sandboxes of a sandbox's file system now; prints their ids")
    remote_args(p)
    p.add_argument("sandbox_id")
    p.add_argument("-n", type=int, default=1, help="how many (default 1)")
    p.add_argument("--memory", action="store_true", help="its running programs run on in each")
    p.set_defaults(fn=cmd_fork)
