"""What a dead pool left on this host: containers, run dirs, host id ranges.

Two paths reach them. A pool's start (`reap_orphans`) removes the containers of every pool on
this host whose owner process is gone, their run dirs and id ranges, and the dead pools' dirs.
The watchdog of a pool (`watchdog.py`) wakes when its owner dies and removes each sandbox's run
dir and id range as soon as its container has ended (its agent's lease lapsed; the container
removes itself), and the pool dir after the last: no later pool is needed.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
from pathlib import Path
from typing import Any

from ...errors import SandboxError
from .. import ids
from ..rundirs import alive, dead_pool_dirs
from .config import LABEL_OWNER, LABEL_POOL, LABEL_RUN_DIR, LABEL_SANDBOX
from .engine import connect, remove_container, translate

log = logging.getLogger("sandboxes.backends.docker")

POOL_DIR_PREFIX = "docker-"
_RUNNING = ("running", "paused", "restarting")


def reap_dead_owners(api: Any, pool_id: str, hostname: str, run_root: Path, pool_dir: Path) -> int:
    """Remove the containers and run dirs of dead pools on this host (blocking); how many
    containers. `pool_id` / `pool_dir` are the caller's own, left alone."""
    try:
        containers = api.containers(all=True, filters={"label": LABEL_OWNER})
    except Exception as e:
        raise translate(e, "list", "") from e
    reaped = 0
    dead: set[tuple[int, int | None]] = set()
    for c in containers:
        labels = c.get("Labels") or {}
        if labels.get(LABEL_POOL) == pool_id:
            continue
        host, pid, start = parse_owner(labels.get(LABEL_OWNER, ""))
        if host != hostname or pid is None or alive(pid, start):
            continue  # another host's, or its owner still runs
        try:
            remove_container(api, c["Id"])
        except SandboxError as e:
            log.warning("removing orphaned container %s failed: %s", c["Id"][:12], e)
            continue
        log.info("removed container %s left by dead pool %s", c["Id"][:12], labels.get(LABEL_POOL))
        reaped += 1
        run_dir = safe_run_dir(labels.get(LABEL_RUN_DIR, ""), labels.get(LABEL_SANDBOX, ""))
        if run_dir is not None:
            shutil.rmtree(run_dir, ignore_errors=True)
        dead.add((pid, start))
    # Their containers were removed above or are gone by themselves.
    for d in dead_pool_dirs(run_root, POOL_DIR_PREFIX + "*", pool_dir):
        shutil.rmtree(d, ignore_errors=True)
    for pid, start in dead:  # their id ranges, held while the run dirs were there
        ids.release_owned_by(pid, start)
    return reaped


def reap_dead_pool(pool_dir: Path, owner: int, owner_start: int | None, docker_host: str = "") -> int:
    """The watchdog's job once `owner` died without closing `pool_dir`: each sandbox's run dir
    and host id range removed once its container ended, the pool dir after the last (a container
    made but never started is removed); returns how many sandboxes ended. Blocks on the engine's
    events meanwhile, for as long as the containers' leases keep them."""
    selector = {"label": [f"{LABEL_POOL}={pool_dir.name.removeprefix(POOL_DIR_PREFIX)}"]}
    try:
        api = connect(docker_host or None, 60.0, 1).api
        # Subscribed before the first look: no container can end unseen between the two.
        events = api.events(filters={**selector, "type": ["container"], "event": ["die", "destroy"]})
    except Exception as e:  # noqa: BLE001 - the next pool's start reaps instead
        log.warning("cannot watch the containers of %s: %s", pool_dir, e)
        return 0
    ended = 0
    try:
        while True:
            running = set()
            for c in api.containers(all=True, filters=selector):
                if c.get("State") == "paused":  # its lease cannot lapse, and nobody will resume it
                    remove_container(api, c["Id"])
                elif c.get("State") in _RUNNING:
                    running.add((c.get("Labels") or {}).get(LABEL_SANDBOX))
                elif c.get("State") == "created":  # its owner died between create and start
                    remove_container(api, c["Id"])
            for d in list(pool_dir.iterdir()) if pool_dir.is_dir() else ():
                if d.is_dir() and d.name not in running:
                    shutil.rmtree(d, ignore_errors=True)
                    ended += 1
            ids.release_owned_by(owner, owner_start)
            if not running:
                shutil.rmtree(pool_dir, ignore_errors=True)
                return ended
            next(events)  # a container of the pool died or went
    except Exception as e:  # noqa: BLE001 - the next pool's start reaps the rest
        log.warning("watching the containers of %s failed: %s", pool_dir, e)
        return ended
    finally:
        events.close()


def parse_owner(owner: str) -> tuple[str, int | None, int | None]:
    """`host:pid:starttime` of a container's owner label."""
    parts = owner.rsplit(":", 2)
    if len(parts) != 3:
        return "", None, None
    host, pid_s, start_s = parts
    try:
        pid = int(pid_s)
    except ValueError:
        return host, None, None
    try:
        start = int(start_s)
    except ValueError:
        start = None
    return host, pid, start


def safe_run_dir(path: str, sandbox_id: str) -> Path | None:
    """The run dir named by a container label, only if it has our shape (never rm an arbitrary path)."""
    if not path or not sandbox_id:
        return None
    p = Path(path)
    if not p.is_absolute() or p.name != sandbox_id or not p.parent.name.startswith(POOL_DIR_PREFIX):
        return None
    if ".." in p.parts:
        return None
    try:
        st = p.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        return None
    return p
