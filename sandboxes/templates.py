"""Templates: what a kind of sandbox looks like (backend, image, resources, exec defaults)."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .egress import MAX_EGRESS_RULES, check_rules
from .errors import InvalidRequest
from .types import Limits

__all__ = ["Template"]

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CLAIM = re.compile(r"[a-z0-9]([-a-z0-9]{0,251}[a-z0-9])?")  # a PersistentVolumeClaim's name
PYTHON_ZYGOTE_MODES = ("lazy", "eager", "off")
USERS = ("sandbox", "root")
# Where the compatible APIs run a container image they are asked for as root: a kubernetes root pod
# asks more of the cluster (docs/kubernetes.md), so there a server's default template opts in.
IMAGE_ROOT_BACKENDS = ("local", "docker")
EGRESS_BACKENDS = ("local", "docker", "kubernetes")  # the backends that enforce an allow-list `network`

# The bounds of every template that names none (documented in docs/sandbox.md).
DEFAULT_MEMORY_BYTES = 1 << 30
DEFAULT_MAX_PIDS = 256
DEFAULT_CPU_QUOTA = 1.0
DEFAULT_WORK_SIZE_BYTES = 1 << 30
DEFAULT_TMP_SIZE_BYTES = 256 << 20
DEFAULT_ROOT_SIZE_BYTES = 1 << 30
# Inodes of a sandbox tmpfs per byte of its size (the agent's `BYTES_PER_INODE`, for the mounts
# it makes; the docker backend's tmpfs mounts use this one). Empty files cost no space but ~1 KiB
# of kernel memory each, so without this bound a program could pin far more than its disk.
BYTES_PER_INODE = 8 << 10


@dataclass(frozen=True)
class Template:
    """How the pool builds one kind of sandbox.

    Sandbox-wide resources (`memory_bytes`, `max_pids`, `cpu_quota` in CPUs, and the disk:
    `work_size_bytes` for the work dir, `tmp_size_bytes` for /tmp and as much again for each of
    the judge's scratch and, unless root, /mnt) bound the whole sandbox and are enforced by the
    kernel (cgroup, tmpfs size and inode count); every template is bounded unless it says
    otherwise (0: no bound of that kind). The disk is memory-backed (tmpfs), so what a program
    writes also counts against `memory_bytes`. `limits` are the defaults of each
    exec inside it (merged under per-call limits).
    `env` is the base environment of every program; `warm` is how many ready sandboxes the pool
    keeps ahead of demand (None: the pool's `warm`). `lease_ttl_s` is how long an agent outlives
    a silent owner. `image` is what the sandbox runs: on docker / kubernetes an image name (docker
    default: `sandboxes-sandbox:latest`, built by `make images`); on the local backend an image
    of the local Docker engine, an image tarball or `docker save` archive, or an unpacked
    directory, unpacked once and cached by digest (`backends/images.py`) and used as the
    read-only lower layer of each sandbox's root (None: the host's /usr view); `agent_mount` (docker) bind-mounts this
    host's agent binary read-only into the container instead of using the image's own, so any
    image with glibc and /bin/sh works.

    `user` is who runs programs: `"sandbox"`, an unprivileged uid (`uid`/`gid`) under a
    read-only root with a writable work dir and /tmp; or `"root"`, root inside a user namespace
    of the sandbox's own (its host ids are a range no other sandbox has, with no capability over
    the host) with a writable root file system of `root_size_bytes` (every backend; kubernetes
    needs user-namespaced pods; thrown away with the sandbox, the host's files and the image
    never change).

    `network` is the egress policy: False (none: only the sandbox's own loopback), True (the
    host's network, or the container's bridge), or a list of allow-list rules (every
    backend): host names (`pypi.org`), their subdomains (`*.pythonhosted.org`), addresses or
    networks (`10.0.0.0/8`), each with an optional `:port`. An allow-list sandbox's ways out are
    its agent's proxy (the proxy variables are in every program's environment) and, for names,
    its DNS, whose answers the agent forwards; a name must resolve to a public address unless a
    rule names the address (docs/sandbox.md). Kubernetes adds a NetworkPolicy per list. A
    list sandbox's policy can be replaced while it runs (`Sandbox.set_network`: another
    allow-list, or a deny-list); an empty list starts it with nothing allowed.

    `python_zygote` is when the agent starts its prewarmed Python interpreter, from which Python
    executions and test cases are forked. Where the sandbox's `/usr` is the host's (no `image`,
    no `layers`) and the manager is root, the zygote is itself a fork of the local backend's
    template interpreter (`backends/python_template.py`): `"lazy"` makes the first Python
    execution a fork of the template that runs it in place of a zygote and makes the zygote for
    the second, `"eager"` makes the zygote when the sandbox starts. Elsewhere it is a
    started interpreter: `"lazy"` starts it on the second Python execution (the first, and any
    until the zygote is up, start a fresh interpreter: a sandbox that runs Python once, as a
    sandbox per RL rollout does, never pays for the zygote), `"eager"` when the sandbox starts,
    so that a warm sandbox's first Python execution is already a fork (its interpreter's start-up
    CPU and ~10 MiB of memory per sandbox, also for sandboxes that never run Python: on a loaded
    host it costs more than it saves, `python -m bench rollouts`). `"off"`: never.

    `layers` are the checkpoint layers (unpacked directories of this host) a sandbox is made
    from, bottom first: the pool sets them on the template it serves a checkpoint's sandboxes
    from (`Pool.claim(checkpoint=...)`, `Pool.fork`); each writable place of the sandbox is an
    overlay on its part of them (docs/sandbox.md, "Checkpoints").

    `volumes` are directories of this host bound in each sandbox: (host dir, path in the
    sandbox, read-only); on kubernetes (its `volume_claims`) the first of each is the name of a
    PersistentVolumeClaim instead. The pool sets them on the template it serves a claim's
    volumes from (`Pool.claim(volumes=...)`, `sandboxes.state.volumes`).

    `layered_volumes` are directories of each sandbox's own made of checkpoint layers: (path in
    the sandbox, read-only, layer directories of this host, bottom first). A sandbox's writes there
    are private to it (bounded like its work dir) and a checkpoint of that path alone
    (`Pool.capture_volume`) is a new layer of it: the versions of a volume
    (`sandboxes.server.volume_versions`). The pool sets them (`Pool.claim(layered_volumes=...)`).

    `memory_restores`: the pool sets it on the template it restores a memory snapshot's programs
    into (`Pool.claim` of a memory checkpoint, `Pool.fork(memory=True)`). On the local backend
    such a sandbox's pid namespace belongs to its programs' user namespace, with an init of its
    own, so that restored programs get their threads' and children's pids (docs/sandbox.md,
    "Memory snapshots"); its Python runs do not start from the backend's template process.
    """

    name: str = "default"
    backend: str = "local"
    image: str | None = None
    limits: Limits = field(default_factory=Limits)
    memory_bytes: int = DEFAULT_MEMORY_BYTES
    max_pids: int = DEFAULT_MAX_PIDS
    cpu_quota: float = DEFAULT_CPU_QUOTA
    env: Mapping[str, str] = field(default_factory=dict)
    network: bool | tuple[str, ...] = False
    lease_ttl_s: float = 30.0
    warm: int | None = None
    uid: int = 65534
    gid: int = 65534
    work_dir: str = "/work"
    work_size_bytes: int = DEFAULT_WORK_SIZE_BYTES
    tmp_size_bytes: int = DEFAULT_TMP_SIZE_BYTES
    seccomp: bool = True
    cgroups: bool = True
    ro_binds: tuple[str, ...] = ()
    create_timeout_s: float = 60.0
    labels: Mapping[str, str] = field(default_factory=dict)
    agent_mount: bool = False
    python_zygote: str = "lazy"
    user: str = "sandbox"
    root_size_bytes: int = DEFAULT_ROOT_SIZE_BYTES
    layers: tuple[str, ...] = ()
    volumes: tuple[tuple[str, str, bool], ...] = ()
    layered_volumes: tuple[tuple[str, bool, tuple[str, ...]], ...] = ()
    memory_restores: bool = False

    def __post_init__(self) -> None:
        # Frozen, but copy the mutable containers so callers cannot change a template later.
        object.__setattr__(self, "env", dict(self.env))
        object.__setattr__(self, "labels", dict(self.labels))
        object.__setattr__(self, "ro_binds", tuple(self.ro_binds))
        object.__setattr__(self, "layers", tuple(self.layers))
        object.__setattr__(self, "volumes", tuple(tuple(v) for v in self.volumes))
        object.__setattr__(
            self, "layered_volumes", tuple((v[0], v[1], tuple(v[2])) for v in self.layered_volumes)
        )
        if isinstance(self.network, (list, tuple)):
            object.__setattr__(self, "network", tuple(self.network))
        self.validate()

    def validate(self) -> None:
        """Raise `InvalidRequest` when a value is absurd."""
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise InvalidRequest(f"template name {self.name!r} must match {_NAME_RE.pattern}")
        if not self.backend or not isinstance(self.backend, str):
            raise InvalidRequest("template backend must be a non-empty string")
        if not isinstance(self.limits, Limits):
            raise InvalidRequest(f"template limits must be sandboxes.Limits, got {self.limits!r}")
        self.limits.validate()
        _check_int("memory_bytes", self.memory_bytes, 0, 1 << 40)
        if 0 < self.memory_bytes < (8 << 20):
            raise InvalidRequest("memory_bytes below 8 MiB cannot run an agent")
        _check_int("max_pids", self.max_pids, 0, 1 << 22)
        _check_num("cpu_quota", self.cpu_quota, 0.0, 1024.0)
        _check_num("lease_ttl_s", self.lease_ttl_s, 0.0, 7 * 24 * 3600.0)
        if 0 < self.lease_ttl_s < 0.5:
            raise InvalidRequest("lease_ttl_s below 0.5 s cannot be renewed reliably")
        if self.warm is not None:
            _check_int("warm", self.warm, 0, 10_000)
        _check_int("uid", self.uid, 0, (1 << 32) - 2)
        _check_int("gid", self.gid, 0, (1 << 32) - 2)
        _check_int("work_size_bytes", self.work_size_bytes, 0, 1 << 40)
        _check_int("tmp_size_bytes", self.tmp_size_bytes, 0, 1 << 40)
        _check_num("create_timeout_s", self.create_timeout_s, 0.001, 3600.0)
        if self.image is not None and (not isinstance(self.image, str) or not self.image.strip()):
            raise InvalidRequest(f"image must be a non-empty string or None, got {self.image!r}")
        if self.python_zygote not in PYTHON_ZYGOTE_MODES:
            raise InvalidRequest(
                f"python_zygote must be one of {', '.join(PYTHON_ZYGOTE_MODES)}, got {self.python_zygote!r}"
            )
        if self.user not in USERS:
            raise InvalidRequest(f"user must be one of {', '.join(USERS)}, got {self.user!r}")
        _check_int("root_size_bytes", self.root_size_bytes, 0, 1 << 40)
        _check_network(self.network)
        if not isinstance(self.agent_mount, bool):
            raise InvalidRequest(f"agent_mount must be a bool, got {self.agent_mount!r}")
        if not isinstance(self.memory_restores, bool):
            raise InvalidRequest(f"memory_restores must be a bool, got {self.memory_restores!r}")
        if not self.work_dir.startswith("/"):
            raise InvalidRequest(f"work_dir must be absolute, got {self.work_dir!r}")
        for p in self.ro_binds:
            if not isinstance(p, str) or not p.startswith("/"):
                raise InvalidRequest(f"ro_binds entries must be absolute paths, got {p!r}")
        for p in self.layers:
            if not isinstance(p, str) or not p.startswith("/"):
                raise InvalidRequest(f"layers entries must be absolute paths, got {p!r}")
        for vol in self.volumes:
            source_ok = (
                len(vol) == 3
                and isinstance(vol[0], str)
                and (
                    vol[0].startswith("/")
                    or (self.backend == "kubernetes" and _CLAIM.fullmatch(vol[0]) is not None)
                )
            )
            ok = source_ok and isinstance(vol[1], str) and vol[1].startswith("/")
            if not ok or not isinstance(vol[2], bool) or ":" in vol[0] + vol[1]:
                raise InvalidRequest(
                    f"volumes entries must be (host dir or claim, path in the sandbox, read_only) with "
                    f"absolute paths without ':', got {vol!r}"
                )
        for path, read_only, layer_dirs in self.layered_volumes:
            paths = (path, *layer_dirs)
            if not isinstance(read_only, bool) or not all(
                isinstance(p, str) and p.startswith("/") and ":" not in p for p in paths
            ):
                raise InvalidRequest(
                    "layered_volumes entries must be (path in the sandbox, read_only, layer "
                    f"directories) with absolute paths without ':', got {(path, read_only, layer_dirs)!r}"
                )
        validate_env(self.env)
        for k, v in self.labels.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise InvalidRequest("labels must map str to str")

    def replace(self, **changes: Any) -> Template:
        """A copy with `changes` applied (validated)."""
        return dataclasses.replace(self, **changes)

    @property
    def disk_bytes(self) -> int:
        """What a program may write: the writable root of a root sandbox, else the work dir."""
        return int(self.root_size_bytes if self.user == "root" else self.work_size_bytes)

    @property
    def egress_allow(self) -> tuple[str, ...]:
        """The allow-list rules of a sandbox whose network is one (else empty)."""
        return self.network if isinstance(self.network, tuple) else ()

    @property
    def has_egress(self) -> bool:
        """Whether the sandbox's network is an egress policy (a list, even an empty one): its
        agent's proxy, DNS and helper serve it, and it can change while the sandbox runs."""
        return isinstance(self.network, tuple)


def _check_network(network: Any) -> None:
    if isinstance(network, bool):
        return
    if not isinstance(network, tuple) or len(network) > MAX_EGRESS_RULES:
        raise InvalidRequest(
            f"network must be False (none), True (the host's) or a list of at most {MAX_EGRESS_RULES} "
            f"allow-list rules, got {network!r}"
        )
    check_rules(network)


def _check_int(name: str, value: Any, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidRequest(f"{name} must be an int in [{lo}, {hi}], got {value!r}")


def _check_num(name: str, value: Any, lo: float, hi: float) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not lo <= value <= hi
    ):
        raise InvalidRequest(f"{name} must be a number in [{lo}, {hi}], got {value!r}")


def validate_env(env: Mapping[str, str]) -> None:
    """Raise `InvalidRequest` unless `env` maps valid variable names to str without NUL."""
    for k, v in env.items():
        if not isinstance(k, str) or not _ENV_KEY_RE.match(k):
            raise InvalidRequest(f"invalid environment variable name {k!r}")
        if not isinstance(v, str) or "\0" in v:
            raise InvalidRequest(f"environment variable {k} must be a str without NUL")
