"""Reaps a pool whose owner process died without closing it (SIGKILL, OOM kill, a crash).

`python .../watchdog.py BACKEND POOL_DIR PID STARTTIME PACKAGE_ROOT [ARG...]`: the local and
docker backends start one per pool dir (`start`), as a script in a session of its own. While it
waits it has imported only the standard library (a few MB, no CPU): it blocks on a pidfd of the
owner, no polling. When the owner ends, it imports the package and calls the backend's
`reap_dead_pool(pool_dir, pid, starttime, *args)`, the code a later pool's start uses for the
same job, and exits: the local backend kills the agents still running from that pool and removes
their cgroups, run dirs and host id ranges at once; the docker backend waits for the pool's
containers to end (their agents' leases lapse and each container removes itself) and removes
each one's run dir and id range as it goes, the pool dir after the last. A pool that closes
normally stops it with SIGTERM first (`stop`).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path


def _starttime(pid: int) -> int | None:
    """`rundirs.starttime`, restated: while it waits, the watchdog imports nothing of the package."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat[stat.rfind(")") + 2 :].split()[19])


def start(backend: str, pool_dir: Path, *args: str) -> subprocess.Popen[bytes] | None:
    """The watchdog of `pool_dir`, a pool dir of this process on backend `backend` (`args`: the
    backend's own, passed on to its `reap_dead_pool`); None when it cannot start (a later pool's
    start reaps instead)."""
    me = os.getpid()
    package_root = str(Path(__file__).resolve().parents[2])
    try:
        return subprocess.Popen(
            [
                sys.executable,
                __file__,
                backend,
                str(pool_dir),
                str(me),
                str(_starttime(me)),
                package_root,
                *args,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as e:
        import logging

        logging.getLogger(__name__).warning(
            "no watchdog for %s (a later pool's start reaps it instead): %s", pool_dir, e
        )
        return None


STOP_WAIT_S = 5.0


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    """Stop a watchdog whose pool closed (blocking: run it in a thread). A SIGTERM that reaches
    it while it starts can be lost (seen once: a watchdog stopped right after its start waited on
    for ever): after `STOP_WAIT_S` it is killed, which is safe while its owner lives."""
    if proc is not None:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str]) -> int:
    backend, pool_dir, pid, start_s, package_root, *args = argv
    start = int(start_s) if start_s.isdigit() else None
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    try:
        fd = os.pidfd_open(int(pid))
    except ProcessLookupError:
        fd = None
    if fd is not None and _starttime(int(pid)) == start:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while not poller.poll():
            pass
    # The owner is gone: nothing may stop us half-way now.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # The script's own directory (sys.path[0]) holds `docker/` and `kubernetes/`, which would
    # shadow the SDKs of those names: the package root replaces it.
    sys.path[0] = package_root
    import importlib
    import logging

    logging.basicConfig(level=logging.WARNING, format="sandboxes watchdog: %(message)s")
    module = importlib.import_module(f"sandboxes.backends.{backend}")
    n = module.reap_dead_pool(Path(pool_dir), int(pid), start, *args)
    logging.getLogger("sandboxes.watchdog").warning(
        "owner %s of %s ended without closing it: reaped %d sandboxes", pid, pool_dir, n
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
