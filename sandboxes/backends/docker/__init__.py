"""The docker backend: each sandbox is a container whose entrypoint is the agent.

The pool reaches the agent over a unix socket in a host directory bind-mounted into the
container, with the native gRPC client: no `docker exec`, no network. The Docker API is used
only to create and remove containers (control plane), always from a small thread pool so the
event loop never blocks on it (`engine.py`).

Layout on the host (the root is the local backend's: `SANDBOXES_RUN_DIR`, `/run/sandboxes`, ...):

    <root>/docker-<pool_id>/owner.json     {"pid", "starttime"} of the managing process
    <root>/docker-<pool_id>/<sandbox>/     run dir (0700), mounted at /run/sandbox (`rundir.py`):
        token       the agent's token (0600), removed as soon as the agent is ready
        ready       a FIFO, the agent's readiness channel (`readiness`): one byte once it serves,
                    or the failure record of its start-up step (readiness is pushed)
        agent.sock  the agent's socket (0600, owned by root: only the manager may connect)
        agent.log   the agent's stderr (for people: the backend reads the step from `ready`)

Container settings (`spec.py`, `config.py`): read-only root (the container's own, which only the
agent sees), the image unpacked into the host's image cache (`images.resolve`, once per image id)
bind-mounted read-only at `IMAGE_MOUNT`, `network_mode="none"` unless the template allows the
network, every capability dropped but the few the agent needs (`AGENT_CAPABILITIES`),
`no-new-privileges`, a private cgroup namespace, memory / pids / CPU limits from the template,
`auto_remove` (a container whose agent exited -- its lease lapsed -- removes itself) and the
labels `sandboxes.pool`, `sandboxes.owner` (`host:pid:starttime`), `sandboxes.lease_ttl`,
`sandboxes.sandbox`, `sandboxes.run_dir`.

The sandbox is the agent's, as on the local backend: the agent builds the root (an overlay of
the unpacked image, idmapped into a user namespace whose ids are a host range of the sandbox's
own, `ids.claim`, with its upper layer, work dir and /tmp on tmpfs bounded in size and inodes),
pivots into it and runs programs in that namespace: uid 65534 by default, root (with a writable
root of `root_size_bytes`) for `Template.user="root"`, never with a capability over the host;
its per-exec cgroups live in the container's cgroup namespace. The agent binds its socket before
it pivots, so the manager reaches it through the run dir while no program can. Docker's seccomp
profile is off (`SECURITY_OPTS`: it refuses pivot_root): the agent's own filter, worn by its
serving thread and by every program, is the one that holds.

Readiness: the entrypoint is `/bin/sh -c` that opens the `ready` FIFO as fd 3 and execs the agent
with `--ready-fd 3` (the agent has no `--ready-file`; an inherited fd cannot cross the container
boundary, so the shell bridges it). The backend awaits the FIFO with `loop.add_reader`: `R` means
ready; a failure record names the step that failed (the agent's, or the shell's `agent` when the
image has no agent); end-of-file means the agent died unreported (`agent_start`).

Memory snapshots (`memory_snapshots`): the host's CRIU dumps a container's programs and restores
them into another container of the same template as on the local backend (`memory.py`), from
the agent's host pid (its socket's peer, the engine's `State.Pid`). The engine's own checkpoint
(`docker checkpoint`, experimental; runc's `checkpoint`) dumps the whole container, and CRIU
refuses a sandbox's: its programs' user namespace is nested in the container's ("Can't dump
nested user namespace").

A pool that dies without closing (`orphans.py`): its containers live on until their agents'
leases lapse, then remove themselves; the pool's watchdog (`watchdog.py`) removes each one's run
dir and host id range as it ends, and the pool dir after the last. A later pool's start removes
the containers of dead pools at once.
"""

from __future__ import annotations

from typing import Any

from .backend import DockerBackend, DockerSandbox
from .config import (
    AGENT_CAPABILITIES,
    AGENT_IN_IMAGE,
    DEFAULT_IMAGE,
    EGRESS_CAPABILITIES,
    LABEL_LEASE,
    LABEL_OWNER,
    LABEL_POOL,
    LABEL_RUN_DIR,
    LABEL_SANDBOX,
    LABEL_TEMPLATE,
)
from .orphans import reap_dead_pool

__all__ = [
    "AGENT_CAPABILITIES",
    "AGENT_IN_IMAGE",
    "DEFAULT_IMAGE",
    "EGRESS_CAPABILITIES",
    "LABEL_LEASE",
    "LABEL_OWNER",
    "LABEL_POOL",
    "LABEL_RUN_DIR",
    "LABEL_SANDBOX",
    "LABEL_TEMPLATE",
    "DockerBackend",
    "DockerSandbox",
    "create_backend",
    "reap_dead_pool",
]


def create_backend(**kwargs: Any) -> DockerBackend:
    """Factory used by `sandboxes.backends.get_backend`."""
    return DockerBackend(**kwargs)
