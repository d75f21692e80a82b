"""Validation of the Prime Sandboxes API's request bodies (`POST /api/v1/sandbox` and friends).

Each parser returns plain values or raises `InvalidRequest`, answered with HTTP 422 and the
`{"detail": ...}` body the SDK reads. Fields of every SDK version are known (current SDKs send
`vm` and `checkpoint_id`; older ones a string `start_command`, `guaranteed`,
`registry_credentials_id`); an unknown field is refused, not ignored.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass
from typing import Any

from sandboxes.egress import MAX_EGRESS_RULES, EgressPolicy
from sandboxes.errors import InvalidRequest
from sandboxes.server.volume_versions import MAX_ATTACHMENTS

__all__ = [
    "CreateArgs",
    "PrimePolicy",
    "VolumeMount",
    "egress_rules",
    "parse_create",
    "parse_ids",
    "parse_page",
    "parse_policy",
]

MAX_LABELS = 64
MAX_LABEL = 256
MAX_NAME = 256
MAX_ENV = 4096
MAX_CPU = 1024.0
MAX_MEMORY_GB = 4096.0
MAX_DISK_GB = 65536.0
# A domain entry becomes two rules (ports 80 and 443): the entries that fit a template's rules.
MAX_EGRESS_ENTRIES = MAX_EGRESS_RULES // 2
_IPV4_OR_CIDR = re.compile(r"\d{1,3}(\.\d{1,3}){3}(/\d{1,2})?")
MAX_TIMEOUT_MINUTES = 7 * 24 * 60
MAX_BATCH = 100

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MOUNT_PATH = re.compile(r"(/[A-Za-z0-9._@+-]+)+")
# Where the sandbox's system lives (its agent refuses the rest of what it owns).
_RESERVED_TOPS = {"proc", "dev", "sys", "etc", "judge", "tmp", "usr", "bin", "sbin", "lib", "lib64", "run"}

_CREATE_FIELDS = {
    "name", "docker_image", "checkpoint_id", "arch", "start_command", "cpu_cores", "memory_gb",
    "disk_size_gb", "gpu_count", "gpu_type", "vm", "network_allowlist", "network_denylist",
    "timeout_minutes", "idle_timeout_minutes", "environment_vars", "secrets", "labels", "team_id",
    "region", "advanced_configs", "idempotency_key", "volumes", "registry_credentials_id",
    "guaranteed",
}  # fmt: skip

# A start command that only keeps a container alive: nothing to run here.
_KEEPALIVES = {"tail -f /dev/null", "sleep infinity"}


@dataclass(frozen=True)
class CreateArgs:
    name: str
    docker_image: str
    cpu_cores: float
    memory_gb: float
    disk_size_gb: float
    timeout_minutes: int
    idle_timeout_minutes: int | None
    environment_vars: dict[str, str]
    secrets: dict[str, str]
    labels: list[str]
    vm: bool
    start_command: dict[str, Any] | None  # {"executable", "args"} as the API returns it
    start_shell: str | None  # what runs at start, through /bin/bash -c
    idempotency_key: str | None
    checkpoint_id: str | None = None  # restored from this checkpoint (its template and image)
    # The egress policy asked for (None: none was, and the sandbox reaches nothing until one is).
    network: PrimePolicy | None = None
    volumes: tuple[VolumeMount, ...] = ()


@dataclass(frozen=True)
class VolumeMount:
    """A volume to attach at create (the SDK's `VolumeMount`)."""

    name: str
    mount_path: str
    read_only: bool


@dataclass(frozen=True)
class PrimePolicy:
    """An egress policy as the API shows it (at most one list set) and as the agent's."""

    allowlist: list[str] | None
    denylist: list[str] | None
    egress: EgressPolicy


def _number(body: dict, key: str, default: float, lo: float, hi: float) -> float:
    v = body.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise InvalidRequest(f"{key} must be a number")
    if not lo < v <= hi:
        raise InvalidRequest(f"{key} must be in ({lo:g}, {hi:g}], got {v:g}")
    return float(v)


def _int(body: dict, key: str, default: int | None) -> int | None:
    v = body.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise InvalidRequest(f"{key} must be an integer")
    return v


def _str_map(body: dict, key: str) -> dict[str, str]:
    v = body.get(key) or {}
    if not isinstance(v, dict) or len(v) > MAX_ENV:
        raise InvalidRequest(f"{key} must be an object of at most {MAX_ENV} string values")
    for k, val in v.items():
        if not isinstance(k, str) or not _ENV_KEY.match(k):
            raise InvalidRequest(f"{key}: {str(k)[:64]!r} is not a valid environment variable name")
        if not isinstance(val, str) or "\x00" in val:
            raise InvalidRequest(f"{key}[{k}] must be a string without NUL")
    return dict(v)


def _labels(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_LABELS:
        raise InvalidRequest(f"labels must be a list of at most {MAX_LABELS} strings")
    for label in value:
        if not isinstance(label, str) or not label or len(label) > MAX_LABEL or "\x00" in label:
            raise InvalidRequest(f"each label must be a non-empty string of at most {MAX_LABEL} characters")
    return list(dict.fromkeys(value))


def _start(value: Any) -> tuple[dict[str, Any] | None, str | None]:
    if value is None:
        return None, None
    if isinstance(value, str):
        shell = value.strip()
        return None, (None if not shell or shell in _KEEPALIVES else value)
    if isinstance(value, dict) and set(value) <= {"executable", "args"}:
        exe, args = value.get("executable"), value.get("args") or []
        if isinstance(exe, str) and exe and isinstance(args, list) and all(isinstance(a, str) for a in args):
            line = shlex.join([exe, *args])
            return {"executable": exe, "args": list(args)}, (None if line in _KEEPALIVES else line)
    raise InvalidRequest("start_command must be a string or {executable, args}")


def parse_create(body: Any) -> CreateArgs:
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object")
    unknown = sorted(set(body) - _CREATE_FIELDS)
    if unknown:
        raise InvalidRequest(f"unknown fields: {', '.join(unknown)}")
    name = body.get("name")
    if not isinstance(name, str) or not name or len(name) > MAX_NAME:
        raise InvalidRequest(f"name is required (a string of at most {MAX_NAME} characters)")
    checkpoint = body.get("checkpoint_id")
    if checkpoint is not None and (not isinstance(checkpoint, str) or not 0 < len(checkpoint) <= 64):
        raise InvalidRequest("checkpoint_id must be a string of 1 to 64 characters")
    image = body.get("docker_image")
    if checkpoint:
        if image is not None:
            raise InvalidRequest("omit docker_image when restoring a checkpoint")
        image = ""  # the checkpoint's
    elif not isinstance(image, str) or not image or len(image) > 1024:
        raise InvalidRequest("docker_image is required unless checkpoint_id is set")
    if body.get("gpu_count") not in (None, 0) or body.get("gpu_type") is not None:
        raise InvalidRequest("GPUs are not available on this server")
    volumes = _volumes(body.get("volumes"))
    if body.get("arch") not in (None, "amd64"):
        raise InvalidRequest("only amd64 sandboxes are available on this server")
    allow, deny = body.get("network_allowlist"), body.get("network_denylist")
    network = None if allow is None and deny is None else parse_policy({"allowlist": allow, "denylist": deny})
    timeout = _int(body, "timeout_minutes", 60)
    if timeout is None or timeout > MAX_TIMEOUT_MINUTES:
        raise InvalidRequest(f"timeout_minutes must be at most {MAX_TIMEOUT_MINUTES} (<= 0: no limit)")
    idle = _int(body, "idle_timeout_minutes", None)
    if idle is not None and (idle < 1 or (timeout > 0 and idle > timeout)):
        raise InvalidRequest("idle_timeout_minutes must be >= 1 and <= timeout_minutes")
    key = body.get("idempotency_key")
    if key is not None and (not isinstance(key, str) or len(key) > 256):
        raise InvalidRequest("idempotency_key must be a string of at most 256 characters")
    vm = body.get("vm")
    if vm is not None and not isinstance(vm, bool):
        raise InvalidRequest("vm must be a boolean")
    start_command, start_shell = _start(body.get("start_command"))
    return CreateArgs(
        name=name,
        docker_image=image,
        cpu_cores=_number(body, "cpu_cores", 1.0, 0.0, MAX_CPU),
        memory_gb=_number(body, "memory_gb", 1.0, 0.0, MAX_MEMORY_GB),
        disk_size_gb=_number(body, "disk_size_gb", 5.0, 0.0, MAX_DISK_GB),
        timeout_minutes=timeout,
        idle_timeout_minutes=idle,
        environment_vars=_str_map(body, "environment_vars"),
        secrets=_str_map(body, "secrets"),
        labels=_labels(body.get("labels")),
        vm=bool(vm),
        start_command=start_command,
        start_shell=start_shell,
        idempotency_key=key,
        checkpoint_id=checkpoint or None,
        network=network,
        volumes=volumes,
    )


def _volumes(value: Any) -> tuple[VolumeMount, ...]:
    """`volumes`: at most MAX_ATTACHMENTS, each `{name, mount_path, read_only}` at an absolute
    path of plain names of its own (no two at one path, nor one inside another)."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_ATTACHMENTS:
        raise InvalidRequest(f"volumes must be a list of at most {MAX_ATTACHMENTS} mounts")
    mounts: list[VolumeMount] = []
    for m in value:
        if not isinstance(m, dict) or set(m) - {"name", "mount_path", "read_only"}:
            raise InvalidRequest("each volume is {name, mount_path, read_only}")
        name, path, ro = m.get("name"), m.get("mount_path"), m.get("read_only", False)
        if not isinstance(name, str) or not name:
            raise InvalidRequest("a volume's name is required")
        if not isinstance(ro, bool):
            raise InvalidRequest("a volume's read_only must be a boolean")
        if (
            not isinstance(path, str)
            or not _MOUNT_PATH.fullmatch(path)
            or any(part in (".", "..") for part in path.split("/"))
        ):
            raise InvalidRequest(f"mount_path {path!r} must be an absolute path below / without . or ..")
        if path.split("/")[1] in _RESERVED_TOPS:
            raise InvalidRequest(f"mount_path {path!r} is inside a directory the sandbox's system owns")
        for other in mounts:
            if other.name == name:
                raise InvalidRequest(f"volume {name!r} is attached twice")
            if (path + "/").startswith(other.mount_path + "/") or (other.mount_path + "/").startswith(
                path + "/"
            ):
                raise InvalidRequest(f"mount paths {other.mount_path!r} and {path!r} overlap")
        mounts.append(VolumeMount(name, path, ro))
    return tuple(mounts)


def parse_page(query: Any) -> tuple[int, int]:
    """A list's `page` (from 1) and `per_page` (1..1000, 50 by default) query parameters."""
    try:
        page = max(1, int(query.get("page", 1)))
        per_page = min(max(1, int(query.get("per_page", 50))), 1000)
    except ValueError:
        raise InvalidRequest("page and per_page must be integers") from None
    return page, per_page


def parse_ids(body: Any, key: str = "sandbox_ids") -> list[str]:
    """A batch's list of 1..MAX_BATCH unique ids."""
    ids = body.get(key) if isinstance(body, dict) else None
    if (
        not isinstance(ids, list)
        or not ids
        or len(ids) > MAX_BATCH
        or not all(isinstance(i, str) for i in ids)
    ):
        raise InvalidRequest(f"{key} must be a list of 1 to {MAX_BATCH} ids")
    if len(set(ids)) != len(ids):
        raise InvalidRequest(f"{key} must be unique")
    return ids


def parse_policy(body: Any) -> PrimePolicy:
    """An egress policy of the API (`{"allowlist": [...]}` or `{"denylist": [...]}`): an
    allow-list lets only what it names out (`egress_rules`; `[]`: nothing, as the SDK's
    `deny=["*"]`); a deny-list lets every public destination out but what it names (`[]`: the
    public internet, as the SDK's `allow=["*"]`). Neither: the public internet too."""
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object")
    allow, deny = body.get("allowlist"), body.get("denylist")
    for name, v in (("allowlist", allow), ("denylist", deny)):
        if v is not None and (not isinstance(v, list) or not all(isinstance(e, str) for e in v)):
            raise InvalidRequest(f"{name} must be a list of strings")
        if v is not None and len(v) > MAX_EGRESS_ENTRIES:
            raise InvalidRequest(f"{name} supports at most {MAX_EGRESS_ENTRIES} entries")
    if allow is not None and deny is not None:
        raise InvalidRequest("allowlist and denylist are mutually exclusive; provide at most one")
    if allow is not None:
        allow = [e.strip() for e in allow]
        return PrimePolicy(allow, None, EgressPolicy.of(allow=egress_rules(allow)))
    deny = [e.strip() for e in deny or []]
    return PrimePolicy(None, deny, EgressPolicy.of(deny=_entries(deny)))


def _entries(entries: list[str]) -> tuple[str, ...]:
    """Entries the agent's rules hold as they are: refuses what the proxy cannot hold."""
    for entry in entries:
        if not entry or any(c.isspace() for c in entry) or "://" in entry or "@" in entry:
            raise InvalidRequest(f"'{entry}' is not a host name, *.domain, IPv4 address or CIDR")
        _, sep, port = entry.rpartition(":")
        if sep and "-" in port:
            raise InvalidRequest(f"'{entry}': port ranges are not available on this server; name each port")
    return tuple(entries)


def egress_rules(allowlist: list[str]) -> tuple[str, ...]:
    """The agent's rules for a Prime allow-list: a domain (or `*.domain`) without a port is
    matched on 80 and 443, as on the platform; an address or network without one on every port.
    A port range is refused (the proxy takes one port per rule)."""
    rules: list[str] = []
    for entry in _entries(allowlist):
        host, sep, _ = entry.rpartition(":")
        bare = host if sep else entry
        is_address = bool(_IPV4_OR_CIDR.fullmatch(bare))
        if sep or is_address:
            rules.append(entry)
        else:
            rules += [f"{entry}:80", f"{entry}:443"]
    return tuple(rules)
