"""What a docker sandbox is made of: image names, mount points in the container, the labels every
container carries, the capabilities its agent keeps and the security options."""

from __future__ import annotations

DEFAULT_IMAGE = "sandboxes-sandbox:latest"
AGENT_IN_IMAGE = "/usr/local/bin/sandbox-agent"
RUN_MOUNT = "/run/sandbox"
IMAGE_MOUNT = "/run/sandbox-image"  # the unpacked image, read-only (the root's lower layer)
BUILD_DIR = "/run/sandbox-disk"  # where the agent mounts the sandbox's disk and builds its root
LAYERS_MOUNT = "/run/sandbox-layers"  # a checkpoint's layers, read-only: LAYERS_MOUNT/0 the bottom one
VOLUME_LAYERS_MOUNT = "/run/sandbox-volume-layers"  # layered volumes' layers: VOLUME_LAYERS_MOUNT/J/I
VOLUMES_MOUNT = "/run/sandbox-volumes"  # volumes' host mounts: VOLUMES_MOUNT/0, ... in Template.volumes order
DEFAULT_PIDS_LIMIT = 1024  # per container when the template sets no max_pids

LABEL_POOL = "sandboxes.pool"
LABEL_OWNER = "sandboxes.owner"
LABEL_LEASE = "sandboxes.lease_ttl"
LABEL_SANDBOX = "sandboxes.sandbox"
LABEL_RUN_DIR = "sandboxes.run_dir"
LABEL_TEMPLATE = "sandboxes.template"

# Every capability is dropped except these, each needed by the agent (root in the container) to
# run user programs as another uid and to manage their files. User programs get none of them:
# the agent drops to the sandbox uid, which clears all capabilities, with no_new_privs set.
AGENT_CAPABILITIES = {
    "SETUID": "setresuid() to the sandbox uid before exec'ing a user program",
    "SETGID": "setresgid() / setgroups() to the sandbox gid before exec'ing a user program",
    "KILL": "signal and kill user programs, which run under another uid",
    "CHOWN": "hand files written through the API to the sandbox uid",
    "DAC_OVERRIDE": "read, write and remove files in the work dir whatever their mode "
    "(the work dir belongs to the sandbox uid; programs may create 0600 files)",
    "FOWNER": "chmod / utime files the agent does not own (written by user programs)",
    "SYS_ADMIN": "mount the sandbox's root (overlay of the idmapped image, tmpfs), pivot_root into "
    "it, make the programs' user namespace",
}
# An allow-list sandbox's agent starts in the host's network namespace (its proxy's way out) and
# moves itself and its programs to a fresh one.
EGRESS_CAPABILITIES = {
    "NET_ADMIN": "bring up lo in the sandbox's own network namespace",
    "NET_BIND_SERVICE": "serve the sandbox's DNS on port 53 and allowed names on their ports",
}
# Docker's seccomp profile refuses pivot_root; the agent's own filter, worn by its serving thread
# and every program, is the one that holds. No AppArmor profile either (docker-default refuses
# mounts): the agent builds the root, then nothing in the sandbox can mount.
SECURITY_OPTS = ("no-new-privileges", "seccomp=unconfined", "apparmor=unconfined")
