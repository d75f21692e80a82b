"""Helpers of the server / client tests: the API keys the test servers know, bearer headers, a
bounded wait, the agents of a server's pool (seen from outside). The fixtures themselves (a real
server on 127.0.0.1 over a real local pool, real clients) are in conftest.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from helpers import wait_until

from sandboxes.backends.local import default_run_root
from sandboxes.server.app import Server

__all__ = ["KEYS", "KEY_A", "KEY_B", "agent_pids_of", "bearer", "wait_for"]

KEY_A = "test-key-alice-0123456789"
KEY_B = "test-key-bob-9876543210"
KEYS = {KEY_A: "alice", KEY_B: "bob"}


def bearer(key: str = KEY_A) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


async def wait_for(cond: Callable[[], Any], what: str, bound_s: float = 30.0, interval: float = 0.02) -> None:
    """Poll a real condition (sync or async) until it holds; fail past the bound (`wait_until`)."""
    await wait_until(cond, timeout=bound_s, interval=interval, what=what)


def agent_pids_of(server: Server) -> set[int]:
    """Pids of the agents of the server's pool, read from the local backend's records (outside view)."""
    pool_dir = Path(default_run_root()) / f"pool-{server.pool.id}"
    pids = set()
    for f in pool_dir.glob("*.json"):
        if f.name == "owner.json":
            continue
        try:
            pids.add(int(json.loads(f.read_text())["pid"]))
        except (OSError, ValueError, KeyError):
            continue
    return pids
