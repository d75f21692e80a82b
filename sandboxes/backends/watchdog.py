"""Reaps a local pool whose owner process died without closing it (SIGKILL, OOM kill, a crash).

`python .../watchdog.py POOL_DIR PID STARTTIME PACKAGE_ROOT`: the local backend starts one per
pool dir, as a script in a session of its own. While it waits it has imported only the standard
library (a few MB, no CPU): it blocks on a pidfd of the owner, no polling. When the owner ends, it
imports the package, kills the agents still running from that pool, removes their cgroups, run
dirs and host id ranges (`_reap_pool_dir`, the code a later pool's start uses for the same job),
and exits. A pool that closes normally stops it with SIGTERM first.
"""

from __future__ import annotations

import os
import select
import signal
import sys


def _starttime(pid: int) -> int | None:
    """`rundirs.starttime`, restated: while it waits, the watchdog imports nothing of the package."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat[stat.rfind(")") + 2 :].split()[19])


def main(argv: list[str]) -> int:
    pool_dir, pid, start, package_root = argv[0], int(argv[1]), int(argv[2]), argv[3]
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        fd = None
    if fd is not None and _starttime(pid) == start:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while not poller.poll():
            pass
    # The owner is gone: nothing may stop us half-way now.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.path.insert(0, package_root)
    import logging
    from pathlib import Path

    from sandboxes.backends import ids
    from sandboxes.backends.local import _reap_pool_dir

    logging.basicConfig(level=logging.WARNING, format="sandboxes watchdog: %(message)s")
    if Path(pool_dir).is_dir():
        n = _reap_pool_dir(Path(pool_dir))
        logging.getLogger("sandboxes.watchdog").warning(
            "owner %s of %s ended without closing it: reaped %d sandboxes", pid, pool_dir, n
        )
    ids.release_owned_by(pid, start)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
