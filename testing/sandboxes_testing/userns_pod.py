"""EMULATOR of a container runtime's user-namespaced pod (`hostUsers: false`), for the fake kubelet.

Run as root on this machine: `python -m sandboxes_testing.userns_pod SPEC_JSON`. It starts the
pod's container as a real runtime does for such a pod, then waits for it and exits with its code:

- a user namespace whose ids 0..65535 are the host's `base..` (a range `ids.claim` gave);
- the root file system: an overlay mounted by the host (as the runtime does) whose lower layer is
  the unpacked image, idmapped into that namespace (so the image's root-owned files are the
  pod's root's), and whose upper layer is the pod's own directory; read-only once its mount
  points are made (`readOnlyRootFilesystem`);
- mount, pid (the command is its pid 1), ipc and cgroup namespaces owned by the pod's user
  namespace;
  the host's network namespace (emulated pods share the address 127.0.0.1);
- `/proc` of the pod's pid namespace with the runtime's masks (`/dev/null` over kcore, keys, ...,
  read-only sys, irq, bus, fs, sysrq-trigger) unless the container asks for `procMount:
  Unmasked`; `/dev` a tmpfs with the usual devices; `/sys` the host's, read-only;
- the pod's volumes (emptyDirs and the token Secret, directories the kubelet made) bound at
  their mount paths;
- the command with its arguments, as the pod's uid 0, with the capabilities the container adds
  (all others dropped) and `no_new_privs`.

The container's processes die with the launcher (the command gets SIGKILL when it goes); SIGTERM
is passed on. Everything it mounts lives in namespaces that end with the pod.

SPEC_JSON: {"image": dir, "upper": dir, "base": int, "volumes": [[host dir, pod path, read_only]],
"unmasked": bool, "capabilities": ["SETUID", ...], "argv": [...], "env": {...}}
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import struct
import sys

LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.syscall.restype = ctypes.c_long
LIBC.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWIPC, CLONE_NEWCGROUP = (
    0x20000,
    0x10000000,
    0x20000000,
    0x8000000,
    0x2000000,
)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR, SYS_PIVOT_ROOT = 428, 429, 442, 155
OPEN_TREE_CLONE, AT_EMPTY_PATH, AT_RECURSIVE, AT_FDCWD = 1, 0x1000, 0x8000, -100
MOVE_MOUNT_F_EMPTY_PATH = 4
MOUNT_ATTR_RDONLY, MOUNT_ATTR_IDMAP = 1, 0x100000
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP = 1, 38, 24
RANGE = 1 << 16

# The capability numbers a pod's container may name (linux/capability.h).
CAPABILITIES = {
    "CHOWN": 0, "DAC_OVERRIDE": 1, "DAC_READ_SEARCH": 2, "FOWNER": 3, "FSETID": 4, "KILL": 5,
    "SETGID": 6, "SETUID": 7, "SETPCAP": 8, "NET_BIND_SERVICE": 10, "NET_ADMIN": 12,
    "NET_RAW": 13, "SYS_CHROOT": 18, "SYS_PTRACE": 19, "SYS_ADMIN": 21, "SYS_RESOURCE": 24,
    "MKNOD": 27, "AUDIT_WRITE": 29, "SETFCAP": 31,
}  # fmt: skip
LAST_CAP = 40
# What a runtime masks and makes read-only in a container's /proc (procMount: Default).
MASKED_FILES = ("kcore", "keys", "timer_list", "latency_stats", "sched_debug")
MASKED_DIRS = ("acpi", "scsi")
READ_ONLY = ("bus", "fs", "irq", "sys", "sysrq-trigger")
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")


def check(rc: int, what: str) -> int:
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return rc


def mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None
    check(LIBC.mount(enc(src), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def user_namespace(base: int) -> int:
    """An fd of a new user namespace whose ids 0..RANGE are the host's base.. (held by a child)."""
    r, w = os.pipe()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(w)
        os.close(ready_r)
        ok = LIBC.unshare(CLONE_NEWUSER) == 0
        os.write(ready_w, b"y" if ok else b"n")
        os.read(r, 1)
        os._exit(0)
    os.close(r)
    os.close(ready_w)
    try:
        if os.read(ready_r, 1) != b"y":
            raise OSError("unshare of the pod's user namespace failed")
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{pid}/{name}", "w") as f:
                f.write(f"0 {base} {RANGE}\n")
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
    finally:
        os.close(w)
        os.close(ready_r)
        os.waitpid(pid, 0)


def idmapped(src: str, target: str, userns: int) -> None:
    """Binds `src` at `target`, read-only, its ids shifted into `userns`."""
    tree = check(
        LIBC.syscall(SYS_OPEN_TREE, AT_FDCWD, src.encode(), OPEN_TREE_CLONE | os.O_CLOEXEC), "open_tree"
    )
    attr = ctypes.create_string_buffer(
        struct.pack("QQQQ", MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY, 0, 0, userns)
    )
    check(LIBC.syscall(SYS_MOUNT_SETATTR, tree, b"", AT_EMPTY_PATH, attr, 32), f"idmap {src}")
    check(
        LIBC.syscall(SYS_MOVE_MOUNT, tree, b"", AT_FDCWD, target.encode(), MOVE_MOUNT_F_EMPTY_PATH),
        "move_mount",
    )
    os.close(tree)


def root_fs(spec: dict, userns: int, stage: str) -> str:
    """The pod's root (an overlay of the idmapped image and the pod's upper layer) at stage/root,
    mounted by the host in the launcher's own mount namespace."""
    lower, root, upper, work = (os.path.join(stage, d) for d in ("lower", "root", "upper", "work"))
    for d in (lower, root):
        os.makedirs(d, exist_ok=True)
    os.makedirs(upper, exist_ok=True)
    os.makedirs(work, exist_ok=True)
    os.chown(upper, spec["base"], spec["base"])
    idmapped(spec["image"], lower, userns)
    mount("overlay", root, "overlay", 0, f"lowerdir={lower},upperdir={upper},workdir={work}")
    return root


def detached(path: str) -> int:
    """A detached copy of the mount tree at `path` (attached later with `attach`)."""
    flags = OPEN_TREE_CLONE | os.O_CLOEXEC | AT_RECURSIVE
    return check(LIBC.syscall(SYS_OPEN_TREE, AT_FDCWD, path.encode(), flags), f"open_tree {path}")


def attach(tree: int, target: str) -> None:
    check(
        LIBC.syscall(SYS_MOVE_MOUNT, tree, b"", AT_FDCWD, target.encode(), MOVE_MOUNT_F_EMPTY_PATH),
        f"move_mount {target}",
    )
    os.close(tree)


def enter_pod(spec: dict, root: str) -> None:
    """In the pod's pid 1, in its namespaces: its root, volumes, /proc, /dev, /sys; then exec."""
    # The copy of the host-made root in this namespace is locked to its parent, and pivot_root
    # refuses a locked mount: a bind of it made here is not.
    mount(root, root, None, MS_BIND | MS_REC)
    # Before the pivot, as runtimes do: a user namespace's new proc mount must have a fully
    # visible one beside it (the host's, until the old root goes).
    mount("proc", os.path.join(root, "proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    # What comes from the host is taken now (binds need their source in this namespace) and
    # put in place once inside, where the image's own symlinks resolve within it.
    volumes = [(detached(src), dst, ro) for src, dst, ro in spec["volumes"]]
    devices = {d: detached(f"/dev/{d}") for d in DEVICES}
    sys_tree = detached("/sys")
    os.chdir(root)
    check(LIBC.syscall(SYS_PIVOT_ROOT, b".", b"."), "pivot_root")
    check(LIBC.umount2(b".", 2), "detach the old root")
    os.chdir("/")
    os.makedirs("/dev", exist_ok=True)
    mount("tmpfs", "/dev", "tmpfs", MS_NOSUID, "mode=755,size=64k")
    for name, tree in devices.items():
        open(f"/dev/{name}", "w").close()
        attach(tree, f"/dev/{name}")
    os.makedirs("/sys", exist_ok=True)
    attach(sys_tree, "/sys")
    mount(None, "/sys", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for tree, path, read_only in volumes:
        os.makedirs(path, exist_ok=True)
        attach(tree, path)
        if read_only:
            mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    if not spec["unmasked"]:
        for name in MASKED_FILES:
            if os.path.exists(f"/proc/{name}"):
                mount("/dev/null", f"/proc/{name}", None, MS_BIND)
        for name in MASKED_DIRS:
            if os.path.isdir(f"/proc/{name}"):
                mount("tmpfs", f"/proc/{name}", "tmpfs", MS_RDONLY)
        for name in READ_ONLY:
            if os.path.exists(f"/proc/{name}"):
                mount(f"/proc/{name}", f"/proc/{name}", None, MS_BIND | MS_REC)
                mount(None, f"/proc/{name}", None, MS_REMOUNT | MS_BIND | MS_RDONLY)
    mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY)
    keep = {CAPABILITIES[c] for c in spec["capabilities"]}
    for cap in range(LAST_CAP + 1):
        if cap not in keep:
            LIBC.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    check(LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    argv = spec["argv"]
    os.execve(argv[0], argv, spec["env"])


def main(argv: list[str]) -> int:
    spec = json.loads(argv[1])
    base = spec["base"]
    userns = user_namespace(base)
    # Host-side steps in a mount namespace of the launcher's own: nothing reaches the host's.
    check(LIBC.unshare(CLONE_NEWNS), "unshare the launcher's mount namespace")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    stage = spec["upper"]
    root = root_fs(spec, userns, stage)
    # The pod's own user namespace, then namespaces it owns.
    check(LIBC.setns(userns, CLONE_NEWUSER), "enter the pod's user namespace")
    os.close(userns)
    check(LIBC.setgroups(0, None), "setgroups")
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    check(
        LIBC.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWCGROUP),
        "unshare the pod's namespaces",
    )
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    pid = os.fork()
    if pid == 0:
        try:
            LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            enter_pod(spec, root)
        except BaseException as e:  # noqa: BLE001
            print(f"userns_pod: {e}", file=sys.stderr)
        os._exit(127)
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda signo, _frame: os.kill(pid, signo))
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
