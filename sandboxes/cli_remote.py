"""What the `sandboxes` command's modules share (`cli.py`, `cli_checkpoints.py`, `cli_volumes.py`):
exit codes, errors on stderr, the event loop a command runs on, and a call to the server of
`--address`."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["EXIT_INFRA", "EXIT_TIMEOUT", "err", "need_address", "remote", "run"]

EXIT_INFRA = 125
EXIT_TIMEOUT = 124


def run(coro_fn: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Run on uvloop when it is installed."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro_fn())
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro_fn())


def err(message: str) -> None:
    print(f"sandboxes: {message}", file=sys.stderr)


def need_address(args: argparse.Namespace) -> int | None:
    """2 (and why) when `args` names no server, else None."""
    if not args.address:
        err("this command talks to a server: give --address (or $SANDBOXES_ADDRESS)")
        return 2
    return None


def remote(args: argparse.Namespace, go: Callable[[Any], Coroutine[Any, Any, Any]]) -> tuple[int, Any]:
    """Runs `go(client)` against the server of `args`; (exit code, its result)."""
    from sandboxes.client import AsyncSandboxClient
    from sandboxes.errors import NotFound, SandboxError

    if (rc := need_address(args)) is not None:
        return rc, None

    async def call() -> Any:
        async with AsyncSandboxClient(args.address, args.api_key) as client:
            return await go(client)

    try:
        return 0, run(call)
    except NotFound as e:
        err(e.message)
        return 1, None
    except SandboxError as e:
        err(f"{e.kind.value}: {e.message}")
        return EXIT_INFRA, None
