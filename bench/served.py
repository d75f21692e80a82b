"""`served(...)`: a `sandboxes serve` process as a user runs it (the CLI, its defaults), on free
ports, for the benchmarks of the server's APIs; its addresses are read from its "server started"
log line. Stopped with SIGTERM (graceful) on exit. With `cgroup`, the server starts in that
cgroup (`bench/cgroup_cpu.py`), and so do the sandboxes it makes: its CPU counted apart."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cgroup_cpu import join

__all__ = ["Served", "run_driver", "served"]


@dataclass(frozen=True)
class Served:
    address: str  # gRPC host:port
    http_url: str  # the HTTP-compatible APIs
    key: str


@contextlib.asynccontextmanager
async def served(
    *args: str, key: str = "bench-key-0123456789", cgroup: Path | None = None
) -> AsyncIterator[Served]:
    env = {**os.environ, "SANDBOXES_API_KEYS": f"bench:{key}"}
    extra: dict[str, Any] = {} if cgroup is None else {"preexec_fn": lambda: join(cgroup)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sandboxes",
        "serve",
        "--port",
        "0",
        "--http-port",
        "0",
        *args,
        env=env,
        stderr=asyncio.subprocess.PIPE,
        **extra,
    )
    try:
        assert proc.stderr is not None
        while True:
            line = await asyncio.wait_for(proc.stderr.readline(), 120)
            if not line:
                raise RuntimeError(f"sandboxes serve exited ({await proc.wait()}) before it started")
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("msg") == "server started":
                break
        drain = asyncio.create_task(_drain(proc.stderr))
        host = rec["address"].rsplit(":", 1)[0]
        yield Served(rec["address"], f"http://{host}:{rec['http_port']}", key)
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()
        with contextlib.suppress(NameError):
            drain.cancel()


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


async def run_driver(argv: list[str], env: dict[str, str]) -> Any:
    """Runs an SDK's driver (its client virtualenv's python and a scenario script); the JSON
    its last line prints."""
    proc = await asyncio.create_subprocess_exec(*argv, env=env, stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    if proc.returncode:
        raise SystemExit(f"{argv[1]} failed ({proc.returncode})")
    return json.loads(out.decode().strip().splitlines()[-1])
