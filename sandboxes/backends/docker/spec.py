"""The container of one sandbox: its entrypoint (the agent, with readiness bridged through a
FIFO), the agent's flags, mounts, limits, network mode and labels. Pure: no API call."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...templates import Template
from .config import (
    AGENT_CAPABILITIES,
    AGENT_IN_IMAGE,
    BUILD_DIR,
    DEFAULT_PIDS_LIMIT,
    EGRESS_CAPABILITIES,
    IMAGE_MOUNT,
    LABEL_LEASE,
    LABEL_OWNER,
    LABEL_POOL,
    LABEL_RUN_DIR,
    LABEL_SANDBOX,
    LABEL_TEMPLATE,
    LAYERS_MOUNT,
    RUN_MOUNT,
    SECURITY_OPTS,
    VOLUME_LAYERS_MOUNT,
    VOLUMES_MOUNT,
)

# The entrypoint script. fd 3 is the `ready` FIFO (opened first, so any failure after this point
# closes it: the backend sees end-of-file), stderr goes to agent.log in the run dir (readable from
# the host after an auto-removed container is gone). $1 is the agent path, the rest its flags. A
# missing agent is reported as the failure record of step `agent`.
ENTRYPOINT = (
    "exec 3>" + RUN_MOUNT + "/ready 2>>" + RUN_MOUNT + "/agent.log; "
    'a="$1"; shift; '
    '[ -x "$a" ] || { m="sandboxes: no executable agent at $a in this image"; '
    'echo "$m" >&2; printf "F%s\n%s" agent "$m" >&3; exit 127; }; '
    'exec "$a" "$@" --ready-fd 3'
)


@dataclass(frozen=True)
class Placement:
    """Where one sandbox's container goes: its pool, name, image and the host paths it mounts."""

    pool_id: str
    owner: str  # `host:pid:starttime` of the managing process
    image: str
    name: str
    run_dir: Path
    image_root: str  # the image unpacked in the host's cache
    agent_bin: str | None  # a host agent bound over the image's (`Template.agent_mount`)
    id_base: int  # the sandbox's host id range (0: none)


def container_spec(t: Template, p: Placement) -> dict[str, Any]:
    """The `create_container` arguments of a sandbox of template `t` placed as `p`."""
    agent_args = [
        "--listen", f"unix:{RUN_MOUNT}/agent.sock",
        "--token-file", f"{RUN_MOUNT}/token",
        "--lease-ttl", repr(float(t.lease_ttl_s)),
        "--work-dir", t.work_dir,
        "--uid", str(t.uid),
        "--gid", str(t.gid),
        "--namespaces", "pid,mnt,net,ipc,uts,cgroup,user",
        "--python-zygote", t.python_zygote,
        "--new-root",
        "--build-dir", BUILD_DIR,
        "--image-root", IMAGE_MOUNT,
        "--user", t.user,
        "--id-base", str(p.id_base),
        "--root-size", str(t.root_size_bytes),
        "--work-size", str(t.work_size_bytes),
        "--tmp-size", str(t.tmp_size_bytes),
    ]  # fmt: skip
    if not t.seccomp:
        agent_args.append("--no-seccomp")
    if not t.cgroups:
        agent_args.append("--no-cgroups")
    for k, v in t.env.items():
        agent_args += ["--env", f"{k}={v}"]
    if t.has_egress:  # the engine names no host in the host's network namespace
        agent_args += ["--egress", "allow", "--hostname", "sandbox"]
    for rule in t.egress_allow:
        agent_args += ["--egress-rule", rule]
    if t.network is True:  # the bridge's resolver, which the engine gave the container
        agent_args.append("--outside-dns")
    binds = {
        str(p.run_dir): {"bind": RUN_MOUNT, "mode": "rw"},
        p.image_root: {"bind": IMAGE_MOUNT, "mode": "ro"},
    }
    if p.agent_bin:
        binds[p.agent_bin] = {"bind": AGENT_IN_IMAGE, "mode": "ro"}
    for i, layer in enumerate(t.layers):  # a checkpoint's layers, read-only, bottom first
        binds[layer] = {"bind": f"{LAYERS_MOUNT}/{i}", "mode": "ro"}
        agent_args += ["--layer", f"{LAYERS_MOUNT}/{i}"]
    for i, (src, dst, ro) in enumerate(t.volumes):  # volumes' host mounts, into the root from there
        binds[src] = {"bind": f"{VOLUMES_MOUNT}/{i}", "mode": "ro" if ro else "rw"}
        agent_args += ["--volume", f"{VOLUMES_MOUNT}/{i}:{dst}{':ro' if ro else ''}"]
    for j, (dst, ro, layer_dirs) in enumerate(t.layered_volumes):  # each layer bound once
        inside = []
        for i, layer in enumerate(layer_dirs):
            binds.setdefault(layer, {"bind": f"{VOLUME_LAYERS_MOUNT}/{j}/{i}", "mode": "ro"})
            inside.append(binds[layer]["bind"])
        agent_args += ["--layered-volume", ":".join(("ro" if ro else "rw", dst, *inside))]
    for path in t.ro_binds:
        binds[path] = {"bind": path, "mode": "ro"}  # into the container, and from there into the root
        agent_args += ["--ro-bind", path]
    host_config: dict[str, Any] = {
        "binds": binds,
        # The mount point of the sandbox's disk (a directory docker makes in the read-only root).
        "tmpfs": {BUILD_DIR: "rw,nosuid,nodev,noexec,size=1m,mode=0700"},
        "read_only": True,
        "network_mode": network_mode(t),
        "cap_drop": ["ALL"],
        "cap_add": sorted({*AGENT_CAPABILITIES, *(EGRESS_CAPABILITIES if t.has_egress else ())}),
        "security_opt": list(SECURITY_OPTS),
        "cgroupns": "private",
        "pids_limit": t.max_pids or DEFAULT_PIDS_LIMIT,
        "auto_remove": True,
        "init": False,
    }
    if t.memory_bytes:
        host_config["mem_limit"] = t.memory_bytes
        host_config["memswap_limit"] = t.memory_bytes  # no swap beyond the limit
    if t.cpu_quota:
        host_config["nano_cpus"] = int(t.cpu_quota * 1e9)
    labels = {
        LABEL_POOL: p.pool_id,
        LABEL_OWNER: p.owner,
        LABEL_LEASE: repr(float(t.lease_ttl_s)),
        LABEL_SANDBOX: p.run_dir.name,
        LABEL_RUN_DIR: str(p.run_dir),
        LABEL_TEMPLATE: t.name,
    }
    return {
        "image": p.image,
        "name": p.name,
        "entrypoint": ["/bin/sh", "-c", ENTRYPOINT, "sandbox-agent", AGENT_IN_IMAGE, *agent_args],
        "user": "0:0",
        "working_dir": "/",
        "hostname": None if t.has_egress else "sandbox",
        "labels": labels,
        "host_config": host_config,
    }


def network_mode(t: Template) -> str:
    """`none`; the bridge for `network=True`; for an allow-list the host's namespace, which only
    the agent's egress helper keeps (programs are in a namespace with only lo): connections are
    opened where the local backend opens them, and the allow-list is the only way out."""
    if t.has_egress:
        return "host"
    return "bridge" if t.network else "none"
