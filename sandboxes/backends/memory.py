"""Memory snapshots on the local and docker backends: a sandbox's running programs (their
processes, memory, open files, pipes, timers, cwd) dumped by CRIU while they run, and restored
into a new sandbox of the same template, where they run on from the dumped state.

A sandbox's programs are children of its agent (pid 1 of its pid namespace: the local
launcher's, or a container's init), each its own session leader in an exec cgroup of its own and
in the programs' user namespace, which the agent holds open at `USERNS_FD`. The agent itself, in
the host's user namespace, is never dumped: its socket lives outside the sandbox, and a new
sandbox has an agent of its own. Everything here starts from the agent's host pid.

CRIU runs as host root in the sandbox's mount, pid, network, ipc, uts and cgroup namespaces but
not its user namespace. `nsenter -t <agent>` enters all but the mount namespace; CRIU and its
libraries are loaded from the host's root, and only then does a preload (`deploy/criu-mntns.c`,
`MNTNS_PRELOAD`) enter the sandbox's mount namespace. The sandbox's root may be one it writes (a
container's, an image's: its own /etc/ld.so.preload, its libraries, /usr/lib/criu): a host-root
process takes no code from it. CRIU's plugins are looked for in its own work dir.

- dump: `criu dump --leave-running -t <program>` per program, one images directory each; the
  source sandbox runs on. The images say the programs' user namespace is one to create (it is not
  CRIU's own): `inventory.img` is rewritten so that it is CRIU's root one and `userns-*.img` goes,
  and the restore joins the target's instead.
- restore: `criu restore --restore-detached --join-ns time:<the target's> --join-ns user:<the
  target's USERNS_FD>` (in that order: the time namespace is the host's) in the target's
  namespaces, CRIU itself first moved into a cgroup `exec-restored-<pid>` below the target
  sandbox's own in every hierarchy it has one in (`--manage-cgroups=ignore`): the local
  launcher's `<own>/sandboxes/<id>`, or a container's cgroup wherever the engine put it, every v1
  hierarchy included (devices, cpuset, blkio). That cgroup holds the limits the program's exec
  cgroup had (its memory and pids, read at the dump): the program keeps its own limits, counts
  against the target's, freezes with it and dies with it. It becomes a child of the target's
  agent.

Pids: CRIU gives the programs their dumped pids, so the target must not run a task at one of
them. The agent's start-up takes its pid namespace's first pids and then moves the namespace's
last pid above them (`sandbox_core/crates/agent/src/setup/pids.rs`): programs' pids are above
every pid a fresh sandbox holds, and a claim from a memory checkpoint restores before it writes
anything into the sandbox (which would start a thread). Before a restore the target's next pids
are moved above the dumped trees' highest (its pid namespace's `ns_last_pid`), so CRIU and what
it forks take none of them either; a pid still taken is refused by name. The images directory
is readable by others (the restorer, in the target's user namespace, has no right over root's
files) and lives in a directory only root can enter.

Requires the CRIU of `deploy/criu.sh` and its preload (its patches: CRIU without
CAP_SYS_RESOURCE and CAP_NET_ADMIN over the sandbox). What CRIU refuses comes back as
`MemorySnapshotError` naming its own error line.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import tempfile
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import MemorySnapshotError

__all__ = [
    "DumpedProgram",
    "continue_programs",
    "dump_programs",
    "programs_of",
    "restore_programs",
    "sandbox_cgroup_dirs",
]

USERNS_FD = 1021  # sandbox_exec::seccomp::USERNS_FD: the agent's handle on the programs' user namespace
CRIU_TIMEOUT_S = 120.0
# A restored program's cgroup, `exec-restored-<its pid>`: an exec cgroup of its new sandbox.
RESTORED_CGROUP = "exec-restored-"
EXTERNAL_PIPES = "agent-pipes.json"  # in a program's images: the pipes its agent held the other end of
LIMITS = "limits.json"  # in a program's images: the limits of its exec cgroup, knob by knob
# The knobs of an exec cgroup that hold the program's own limits (the agent's per-exec memory and
# pids), in the order a fresh cgroup takes them (v1: memory before memory+swap when lowering).
_LIMIT_KNOBS = (
    "memory.limit_in_bytes",
    "memory.memsw.limit_in_bytes",
    "memory.max",
    "memory.swap.max",
    "memory.oom.group",
    "pids.max",
)
# The agent's namespaces nsenter enters: all but its user namespace (a restore joins the programs'
# own) and its mount namespace (entered by `MNTNS_PRELOAD` once CRIU is loaded).
_NAMESPACES = ["-p", "-n", "-i", "-u", "-C"]
# deploy/criu-mntns.c, installed by deploy/criu.sh beside CRIU (<prefix>/sbin/criu ->
# <prefix>/lib/sandboxes/criu-mntns.so): preloaded into CRIU, it enters the mount namespace
# open at the fd its variable names.
MNTNS_PRELOAD = Path("lib/sandboxes/criu-mntns.so")
_MNTNS_FD_VAR = "SANDBOXES_CRIU_MNTNS_FD"


@dataclass(frozen=True)
class DumpedProgram:
    """One program's images: `pid` in its sandbox's pid namespace, `dir` its images directory,
    `seconds` the dump's duration, `bytes` the images' size; `stopped` the host pids of its tree
    a dump with `leave_stopped` stopped (`continue_programs` continues them)."""

    pid: int
    dir: Path
    seconds: float
    bytes: int
    stopped: tuple[int, ...] = ()


def _criu(stage: str) -> str:
    criu = shutil.which("criu")
    if criu is None:
        raise MemorySnapshotError("CRIU is not installed on this host (deploy/criu.sh)", stage=stage)
    return criu


def mntns_preload(criu: str) -> Path:
    """The preload that enters CRIU into a sandbox's mount namespace, beside `criu` (its real path)."""
    return Path(os.path.realpath(criu)).parent.parent / MNTNS_PRELOAD


def _criu_in(agent_pid: int, mntns_fd: int, stage: str) -> list[str]:
    """The command running the host's CRIU in the namespaces of the sandbox whose agent is
    `agent_pid` but its user namespace: `nsenter` enters the others and forks into its pid
    namespace; CRIU and its libraries are loaded from the host's root, then the preload enters
    the mount namespace open at `mntns_fd` (inherited). The sandbox's root, which it may own
    (a container's, an image's), is never where CRIU's code comes from; CRIU's plugins are
    looked for in its work dir (`-L @WORK@`: none), not in that root's /usr/lib/criu."""
    criu = _criu(stage)
    preload = mntns_preload(criu)
    if not preload.is_file():
        raise MemorySnapshotError(
            f"{preload}, which enters CRIU into a sandbox's mount namespace, is not installed "
            "(deploy/criu.sh)",
            stage=stage,
        )
    env = shutil.which("env") or "/usr/bin/env"
    argv = ["nsenter", "-t", str(agent_pid), *_NAMESPACES, env, f"LD_PRELOAD={preload}"]
    return [*argv, f"{_MNTNS_FD_VAR}={mntns_fd}", criu, "-L", "@WORK@"]


# Run in the target's pid namespace (nsenter's child; this host's root and /proc, whose
# ns_last_pid is the writer's own pid namespace's): its next pids are above $1.
_ALLOCATE_ABOVE = 'f=/proc/sys/kernel/ns_last_pid; [ "$(cat "$f")" -ge "$1" ] || echo "$1" > "$f"'


def _allocate_above(agent_pid: int, pid: int) -> None:
    """Makes the sandbox's next pids higher than `pid` (a dumped tree's highest): CRIU's restore
    gives the tree its dumped pids, and CRIU itself and its helpers, forked into the sandbox's
    pid namespace first, must not take one of them (the first pid a fresh container gives is
    the one its source gave its first program)."""
    argv = ["nsenter", "-t", str(agent_pid), "-p", "sh", "-c", _ALLOCATE_ABOVE, "sh", str(pid)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=CRIU_TIMEOUT_S, check=False)
    if r.returncode != 0:
        raise MemorySnapshotError(
            f"cannot move the sandbox's next pid above {pid}: {r.stderr.strip()}", stage="restore"
        )


def _check_free(agent_pid: int, dumped: set[int]) -> None:
    """Refuses a restore that would give a task of the sandbox's a pid one of its own tasks (the
    agent's threads, its programs, those restored before) holds: CRIU would fail on it half-way."""
    tasks = _tree(agent_pid) + [t for p in programs_of(agent_pid) for t in _tree(p)]
    for host_pid in tasks:
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{host_pid}/task").iterdir():
                pid = _ns_pid(int(task.name))
                if pid in dumped:
                    what = f"pid {pid} is taken in the new sandbox by {_comm(int(task.name))}"
                    raise MemorySnapshotError(
                        f"{what}: the programs cannot have their pids", stage="restore", what=what
                    )


def _open_mntns(agent_pid: int) -> int:
    return os.open(f"/proc/{agent_pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)


def _ns_pid(host_pid: int) -> int:
    """`host_pid`'s pid in its own (innermost) pid namespace."""
    return int(_status_field(host_pid, "NSpid").split()[-1])


def _cgroups(pid: int) -> dict[str, str]:
    """`pid`'s cgroup path per hierarchy (its controllers joined by commas; "" for v2)."""
    paths = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        paths[ctrls] = path
    return paths


def programs_of(agent_pid: int) -> list[int]:
    """The host pids of the agent's programs: its children in an exec cgroup (`exec-*`, one per
    program), and the programs restored into the sandbox (each the first of its
    `exec-restored-*` cgroup: a child of the agent where the agent is its pid namespace's init,
    else of that init, which took it when its restorer ended). The agent's helpers (the Python
    zygote in `zygote-*`, others in the agent's own cgroup) are the sandbox's own, started again
    by every new sandbox. A sandbox without cgroups cannot tell them apart:
    `MemorySnapshotError`."""
    dirs = sandbox_cgroup_dirs(agent_pid)
    if not dirs:
        raise MemorySnapshotError(
            "the sandbox has no cgroups (its template's cgroups=False): its programs cannot be told "
            "from its agent's own processes",
            stage="dump",
        )
    children: set[int] = set()
    for task in Path(f"/proc/{agent_pid}/task").iterdir():
        with open(task / "children") as f:
            children.update(int(p) for p in f.read().split())
    for restored in dirs[0].glob(f"{RESTORED_CGROUP}*"):
        with contextlib.suppress(OSError):
            procs = {int(p) for p in (restored / "cgroup.procs").read_text().split()}
            children.update(p for p in procs if _parent(p) not in procs)
    try:
        return sorted(
            pid
            for pid in children
            if any(Path(path).name.startswith("exec-") for path in _cgroups(pid).values())
        )
    except FileNotFoundError:  # a program ended while listed
        return programs_of(agent_pid)


def _parent(pid: int) -> int:
    try:
        return int(_status_field(pid, "PPid"))
    except (OSError, MemorySnapshotError):
        return 0


# ioctl(2) of a namespace's fd: its owner user namespace, as a new fd (linux/nsfs.h).
_NS_GET_USERNS = 0xB701


def _pid_ns_owned_by_programs(agent_pid: int) -> bool:
    """Whether the sandbox's pid namespace belongs to its programs' user namespace (the local
    launcher's with `programs_pid_ns`): there a restored program's children and threads can be
    given their pids. A container's or a pod's belongs to the host's."""
    import fcntl

    try:
        ns = os.open(f"/proc/{agent_pid}/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        owner = fcntl.ioctl(ns, _NS_GET_USERNS)
    except OSError:
        return False
    finally:
        os.close(ns)
    try:
        mine, programs = os.fstat(owner), os.stat(f"/proc/{agent_pid}/fd/{USERNS_FD}")
    except OSError:
        return False
    finally:
        os.close(owner)
    return (mine.st_dev, mine.st_ino) == (programs.st_dev, programs.st_ino)


def _hierarchy_mounts() -> dict[str, tuple[Path, str]]:
    """This host's cgroup hierarchies as `/proc/PID/cgroup` names them (controllers joined by
    commas, `name=...`; "" for v2): (a mount point, the hierarchy's path at that mount)."""
    controllers = {line.split()[0] for line in Path("/proc/cgroups").read_text().splitlines()[1:]}
    mounts: dict[str, tuple[Path, str]] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, _, after = line.partition(" - ")
        parts, (fstype, _source, options) = fields.split(), after.split(maxsplit=2)
        if fstype == "cgroup2":
            key = ""
        elif fstype == "cgroup":
            opts = options.split(",")
            key = ",".join(o for o in opts if o in controllers or o.startswith("name="))
        else:
            continue
        mounts.setdefault(key, (Path(parts[4].replace("\\040", " ")), parts[3]))
    return mounts


def sandbox_cgroup_dirs(agent_pid: int) -> list[Path]:
    """The host directories of the sandbox's cgroup, one per hierarchy it has one in (the
    agent's own cgroup, or its parent where the agent moved itself into the leaf `agent`):
    every hierarchy where the agent is elsewhere than this process, whether below this
    process's own (the local backend's `<own>/sandboxes/<id>`) or not (a container's
    `/docker/<id>`, in every hierarchy the engine places it, e.g. devices and cpuset)."""
    mine = _cgroups(os.getpid())
    mounts = _hierarchy_mounts()
    dirs = []
    for ctrls, path in _cgroups(agent_pid).items():
        if ctrls not in mounts or path == mine.get(ctrls):
            continue
        mount, root = mounts[ctrls]
        try:
            rel = Path(path).relative_to(root)
        except ValueError:
            continue  # outside what this host mounts of the hierarchy
        if rel.name == "agent":
            rel = rel.parent
        dirs.append(mount / rel)
    return dirs


def _make_child_cgroup(parent: Path, name: str) -> Path:
    """`parent/name`, made when missing; a v1 cpuset child gets its parent's cpus and memory
    nodes (it starts with none, and takes no task so)."""
    child = parent / name
    child.mkdir(exist_ok=True)
    for knob in ("cpuset.cpus", "cpuset.mems"):
        if (child / knob).exists() and not (child / knob).read_text().strip():
            (child / knob).write_text((parent / knob).read_text())
    return child


def _exec_cgroup_dirs(host_pid: int) -> list[Path]:
    """The host directories of `host_pid`'s exec cgroup, one per hierarchy it has one in."""
    mounts = _hierarchy_mounts()
    dirs = []
    for ctrls, path in _cgroups(host_pid).items():
        if ctrls in mounts and Path(path).name.startswith("exec-"):
            mount, root = mounts[ctrls]
            with contextlib.suppress(ValueError):
                dirs.append(mount / Path(path).relative_to(root))
    return dirs


def _exec_limits(host_pid: int) -> dict[str, str]:
    """The limits of `host_pid`'s exec cgroup (`_LIMIT_KNOBS` it has), which its restore keeps."""
    limits = {}
    for d in _exec_cgroup_dirs(host_pid):
        for knob in _LIMIT_KNOBS:
            with contextlib.suppress(OSError):
                limits[knob] = (d / knob).read_text().strip()
    return limits


def _restored_cgroups(sandbox_dirs: Sequence[Path], pid: int, limits: Mapping[str, str]) -> list[Path]:
    """A restored program's exec cgroup below the sandbox's own in every hierarchy, named by its
    pid (unique in the sandbox) and holding its exec cgroup's limits; their `cgroup.procs`."""
    procs = []
    for d in sandbox_dirs:
        with contextlib.suppress(OSError):
            (d / f"{RESTORED_CGROUP}{pid}").rmdir()  # an earlier program's at this pid, ended
        child = _make_child_cgroup(d, f"{RESTORED_CGROUP}{pid}")
        for knob in _LIMIT_KNOBS:
            if knob in limits and (child / knob).exists():
                try:
                    (child / knob).write_text(limits[knob])
                except OSError as e:
                    raise MemorySnapshotError(
                        f"cannot give the restored program {pid} its limit {knob}={limits[knob]}: {e}",
                        stage="restore",
                    ) from e
        procs.append(child / "cgroup.procs")
    return procs


def _last_error(log: Path, fallback: str) -> str:
    """CRIU's first fatal error line in its log (the errors it logs and survives excluded)."""
    survived = ("tun: Unable to create tun", "Can't setup RLIMIT_NOFILE for self")
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return fallback
    for line in lines:
        if "Error (" in line and not any(s in line for s in survived):
            return re.sub(r"^\(\s*[\d.]+\)\s*(\d+:\s*)?", "", line).strip()
    return fallback


def _agent_pipes(agent_pid: int, host_pid: int) -> list[int]:
    """The inodes of the pipes `host_pid` shares with its agent: its stdio, whose other ends are
    the agent's (an exec's stream), which a restored program does not have."""

    def pipes(pid: int) -> set[int]:
        found = set()
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                if m := re.fullmatch(r"pipe:\[(\d+)\]", os.readlink(fd)):
                    found.add(int(m.group(1)))
        return found

    return sorted(pipes(host_pid) & pipes(agent_pid))


def _run(
    argv: list[str], images: Path, stage: str, fds: Sequence[int] = (), work: Path | None = None
) -> float:
    """Runs CRIU with `images` (and `work`, where its log `<stage>.log` goes; default: `images`)
    open at inherited fds, named in `argv` as `@IMAGES@` and `@WORK@` (`/proc/self/fd/N` reaches
    them from inside the sandbox's mount namespace); raises `MemorySnapshotError` with CRIU's
    error, the log's last lines its detail."""
    work = work or images
    image_fd = os.open(images, os.O_RDONLY | os.O_DIRECTORY)
    work_fd = os.open(work, os.O_RDONLY | os.O_DIRECTORY)
    try:
        argv = [
            a.replace("@IMAGES@", f"/proc/self/fd/{image_fd}").replace("@WORK@", f"/proc/self/fd/{work_fd}")
            for a in argv
        ]
        t = time.monotonic()
        try:
            r = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=CRIU_TIMEOUT_S,
                pass_fds=(image_fd, work_fd, *fds),
                check=False,
            )
        except subprocess.TimeoutExpired as e:
            raise MemorySnapshotError(f"CRIU's {stage} took over {CRIU_TIMEOUT_S:.0f} s", stage=stage) from e
        took = time.monotonic() - t
    finally:
        os.close(image_fd)
        os.close(work_fd)
    if r.returncode != 0:
        log = work / f"{stage}.log"
        said = (r.stderr or r.stdout).strip().splitlines()
        what = _last_error(log, said[-1] if said else "")
        try:
            detail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        except OSError:
            detail = "\n".join(said[-20:])
        raise MemorySnapshotError(
            f"CRIU refused the {stage}: {what or f'exit {r.returncode}'}",
            stage=stage,
            what=what,
            detail=detail,
        )
    return took


def _tree(host_pid: int) -> list[int]:
    """`host_pid` and its descendants (those that ended while listed left out)."""
    found, todo = [], [host_pid]
    while todo:
        pid = todo.pop()
        found.append(pid)
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
    return found


# Kinds of fd CRIU cannot dump (an io_uring cannot even be passed to its parasite).
_UNSUPPORTED_FDS = (
    "anon_inode:[io_uring]",
    "anon_inode:[perf_event]",
    "anon_inode:bpf-",
    "anon_inode:[userfaultfd]",
)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def _unsupported_fd(tree: Sequence[int]) -> str:
    """The first fd of `tree` of a kind CRIU cannot dump, in words ("" when none)."""
    for pid in tree:
        with contextlib.suppress(OSError):
            for fd in sorted(Path(f"/proc/{pid}/fd").iterdir(), key=lambda p: int(p.name)):
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith(_UNSUPPORTED_FDS):
                        return f"fd {fd.name} of {_comm(pid)} ({_ns_pid(pid)}) is {target}, which CRIU cannot dump"
    return ""


def _refuse_undumpable(tree: Sequence[int]) -> None:
    """A process that made itself undumpable (`prctl(PR_SET_DUMPABLE, 0)`, or a set-id exec)
    refused its memory to anyone but root: its memory is not taken. The kernel shows it as
    the files of its /proc directory owned by its user namespace's root instead of its own
    user (a program running as that root is not told apart)."""
    for pid in tree:
        try:
            euid = int(_status_field(pid, "Uid").split()[1])
            owner = os.stat(f"/proc/{pid}/status").st_uid
        except (OSError, MemorySnapshotError):
            continue  # it ended
        if owner != euid:
            what = f"{_comm(pid)} ({_ns_pid(pid)}) made itself undumpable"
            raise MemorySnapshotError(f"{what}: its memory is not taken", stage="dump", what=what)


def _refuse_more_than_one_task(tree: Sequence[int]) -> None:
    """A program of more than one task (a thread, or a child process) cannot be restored into a
    sandbox whose pid namespace is the host's user namespace's (a container's, a pod's): CRIU
    gives each restored task its dumped id, which the kernel grants only to a process with
    CAP_CHECKPOINT_RESTORE over the pid namespace's owner, and every task but the first is made
    by the program itself, inside its user namespace, which has none there. Refused before
    anything is dumped, rather than a snapshot that no sandbox can be made from. (The local
    backend restores into sandboxes whose pid namespace is their programs' user namespace's:
    `Template.memory_restores`.)"""
    for pid in tree:
        try:
            threads = int(_status_field(pid, "Threads"))
        except (OSError, ValueError, MemorySnapshotError):
            continue  # it ended
        if threads > 1:
            what = f"{_comm(pid)} ({_ns_pid(pid)}) runs {threads} threads"
            raise MemorySnapshotError(
                f"{what}: only single-threaded programs without child processes can be restored here",
                stage="dump",
                what=what,
            )
    if len(tree) > 1:
        what = f"{_comm(tree[0])} ({_ns_pid(tree[0])}) has child processes ({len(tree) - 1})"
        raise MemorySnapshotError(
            f"{what}: only single-threaded programs without child processes can be restored here",
            stage="dump",
            what=what,
        )


def _status_field(pid: int, name: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    raise MemorySnapshotError(f"process {pid} has no {name}", stage="dump")


def _stopped(pid: int) -> bool:
    """Whether `pid` is stopped by a signal (state T) or gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "T"


def dump_programs(
    agent_pid: int,
    dest: Path,
    *,
    leave_stopped: bool = False,
    leave_out: Collection[int] = (),
    many_tasks: bool = False,
) -> list[DumpedProgram]:
    """Dumps every program of the sandbox whose agent is `agent_pid` (host pid), but those whose
    pid in the sandbox is in `leave_out` (what the caller makes afresh), into
    `dest/<pid>/`, leaving them running, or with `leave_stopped` stopped (SIGSTOP) until
    `continue_programs`: what they write meanwhile (their files) is what the images expect. `dest`
    must not exist; it is made only root can enter. When a dump fails, `dest` is removed and the
    programs dumped before it are continued: the sandbox runs on as it was. Programs of more
    than one task (threads, child processes) only with `many_tasks`: where the sandboxes they
    are restored into have a pid namespace of their programs' user namespace's
    (`Template.memory_restores` on the local backend)."""
    mntns = _open_mntns(agent_pid)
    try:
        criu = _criu_in(agent_pid, mntns, "dump")
        return _dump(agent_pid, dest, criu, mntns, leave_stopped, set(leave_out), many_tasks)
    finally:
        os.close(mntns)


def _dump(
    agent_pid: int,
    dest: Path,
    criu: list[str],
    mntns: int,
    leave_stopped: bool,
    leave_out: set[int],
    many_tasks: bool,
) -> list[DumpedProgram]:
    dest.mkdir(mode=0o700)
    dumped: list[DumpedProgram] = []
    try:
        for host_pid in programs_of(agent_pid):
            pid = _ns_pid(host_pid)
            if pid in leave_out:
                continue
            images = dest / str(pid)
            images.mkdir(mode=0o755)
            images.chmod(0o755)  # the restorer reads it from inside a user namespace
            (images / EXTERNAL_PIPES).write_text(json.dumps(_agent_pipes(agent_pid, host_pid)))
            (images / LIMITS).write_text(json.dumps(_exec_limits(host_pid)))
            tree = _tree(host_pid)
            _refuse_undumpable(tree)
            if not many_tasks:
                _refuse_more_than_one_task(tree)
            # A task stopped already (by its own signal) stays so: it is not ours to continue.
            running = [p for p in tree if not _stopped(p)]
            argv = [*criu, "dump", "-t", str(pid)]
            argv += ["--leave-stopped" if leave_stopped else "--leave-running", "-D", "@IMAGES@"]
            argv += ["-W", "@WORK@", "-o", "dump.log"]
            try:
                took = _run(argv, images, "dump", fds=[mntns])
            except MemorySnapshotError as e:
                if cause := _unsupported_fd(tree):
                    raise MemorySnapshotError(f"{cause}: {e}", stage="dump", what=cause) from e
                raise
            _as_own_user_namespace(images)
            size = sum(f.stat().st_size for f in images.iterdir())
            dumped.append(DumpedProgram(pid, images, took, size, tuple(running) if leave_stopped else ()))
        return dumped
    except BaseException:
        continue_programs(dumped)
        shutil.rmtree(dest, ignore_errors=True)
        raise


def continue_programs(dumped: Sequence[DumpedProgram]) -> None:
    """Continues what a dump with `leave_stopped` stopped (SIGCONT)."""
    for program in dumped:
        for pid in program.stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def restore_programs(agent_pid: int, programs: Sequence[DumpedProgram] | Path) -> list[float]:
    """Restores dumped programs (`dump_programs`' answer, or its `dest`) into the sandbox whose
    agent is `agent_pid`; returns each restore's duration. The images are left as they are."""
    mntns = _open_mntns(agent_pid)
    try:
        criu = _criu_in(agent_pid, mntns, "restore")
        return _restore(agent_pid, programs, criu, mntns)
    finally:
        os.close(mntns)


def _restore(
    agent_pid: int, programs: Sequence[DumpedProgram] | Path, criu: list[str], mntns: int
) -> list[float]:
    if isinstance(programs, Path):
        dirs = sorted((d for d in programs.iterdir() if d.is_dir()), key=lambda d: int(d.name))
    else:
        dirs = [p.dir for p in programs]
    if dirs:
        per_program = [_dumped_pids(images) for images in dirs]
        if any(len(pids) > 1 for pids in per_program) and not _pid_ns_owned_by_programs(agent_pid):
            raise MemorySnapshotError(
                "programs of more than one task (threads, child processes) are restored only into a "
                "sandbox whose pid namespace is its programs' user namespace's (Template.memory_restores)",
                stage="restore",
            )
        dumped = set().union(*per_program)
        _allocate_above(agent_pid, max(dumped))
        _check_free(agent_pid, dumped)
    sandbox_dirs = sandbox_cgroup_dirs(agent_pid)
    agent = _ns_pid(agent_pid)  # in the sandbox's pid namespace: its init, or the init's child
    # The shell joins the target's cgroups, then becomes nsenter and CRIU: what CRIU forks is born there.
    join = 'while [ "$1" != -- ]; do echo $$ > "$1"; shift; done; shift; exec "$@"'
    took = []
    for images in dirs:
        limits = json.loads((images / LIMITS).read_text()) if (images / LIMITS).exists() else {}
        procs = [str(p) for p in _restored_cgroups(sandbox_dirs, int(images.name), limits)]
        argv = ["sh", "-ec", join, "sh", *procs, "--", *criu]
        argv += ["restore", "-D", "@IMAGES@", "-W", "@WORK@", "-o", "restore.log"]
        # The target's time namespace is joined before its user namespace (as root of the host):
        # CRIU would otherwise make one of its own for the programs, which no later dump enters.
        argv += ["--restore-detached", "--join-ns", f"time:/proc/{agent}/ns/time"]
        argv += ["--join-ns", f"user:/proc/{agent}/fd/{USERNS_FD}", "--manage-cgroups=ignore"]
        # What the programs' stdio pipes to their old agent become: the target's own /dev/null,
        # an fd of its own for each (CRIU takes each inherited fd over).
        nulls: list[int] = []
        # The images are only read (restores from one run at once); CRIU's log and stats go here.
        work = Path(tempfile.mkdtemp(prefix="criu-restore-"))
        try:
            for inode in json.loads((images / EXTERNAL_PIPES).read_text()):
                nulls.append(os.open(f"/proc/{agent_pid}/root/dev/null", os.O_RDWR | os.O_CLOEXEC))
                argv += ["--inherit-fd", f"fd[{nulls[-1]}]:pipe:[{inode}]"]
            took.append(_run(argv, images, "restore", fds=[mntns, *nulls], work=work))
        finally:
            for fd in nulls:
                os.close(fd)
            shutil.rmtree(work, ignore_errors=True)
    return took


# --- the images' user namespace ------------------------------------------------------------------
# CRIU images are protobuf messages after a 4-byte magic (8 bytes: two magics, but for the
# inventory), each message preceded by its 4-byte little-endian size. `root_ids` is field 3 of
# `inventory_entry`; `user_ns_id` field 10 of `task_kobj_ids_entry`; `pid` field 1 and `threads` field 5 of `pstree_entry`
# (criu/images/*.proto).

_ROOT_IDS = 3
_PSTREE_PID = 1
_PSTREE_THREADS = 5
_USER_NS_ID = 10


def _varint(b: bytes, i: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return v, i


def _enc_varint(v: int) -> bytes:
    out = bytearray()
    while True:
        c, v = v & 0x7F, v >> 7
        out.append(c | 0x80 if v else c)
        if not v:
            return bytes(out)


def _fields(b: bytes) -> list[tuple[int, int, int | bytes]]:
    """A message's fields in order: (number, wire type, value)."""
    out: list[tuple[int, int, int | bytes]] = []
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        num, wt = key >> 3, key & 7
        v: int | bytes
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 2:
            n, i = _varint(b, i)
            v, i = b[i : i + n], i + n
        elif wt in (1, 5):
            n = 8 if wt == 1 else 4
            v, i = b[i : i + n], i + n
        else:
            raise MemorySnapshotError(f"unexpected protobuf wire type {wt} in CRIU's images", stage="dump")
        out.append((num, wt, v))
    return out


def _encode(fields: list[tuple[int, int, int | bytes]]) -> bytes:
    out = bytearray()
    for num, wt, v in fields:
        out += _enc_varint(num << 3 | wt)
        if wt == 0:
            assert isinstance(v, int)
            out += _enc_varint(v)
        else:
            assert isinstance(v, bytes)
            out += (_enc_varint(len(v)) if wt == 2 else b"") + v
    return bytes(out)


def _message(path: Path, header: int) -> tuple[bytes, bytes, bytes]:
    """(the magic, the first message, what follows it) of a CRIU image."""
    b = path.read_bytes()
    (size,) = struct.unpack_from("<I", b, header)
    return b[:header], b[header + 4 : header + 4 + size], b[header + 4 + size :]


def _messages(path: Path, header: int) -> list[bytes]:
    """Every message of a CRIU image."""
    b = path.read_bytes()
    out, i = [], header
    while i < len(b):
        (size,) = struct.unpack_from("<I", b, i)
        out.append(b[i + 4 : i + 4 + size])
        i += 4 + size
    return out


def _dumped_pids(images: Path) -> set[int]:
    """The pids (of tasks and of threads) of the tree dumped in `images`."""
    pids: set[int] = set()
    for entry in _messages(images / "pstree.img", 8):
        for num, _, v in _fields(entry):
            if num == _PSTREE_PID and isinstance(v, int):
                pids.add(v)
            elif num == _PSTREE_THREADS:
                if isinstance(v, int):
                    pids.add(v)
                else:  # packed
                    i = 0
                    while i < len(v):
                        tid, i = _varint(v, i)
                        pids.add(tid)
    return pids


def _as_own_user_namespace(images: Path) -> None:
    """Rewrites `images` so that the dumped tree's user namespace is the restoring CRIU's own
    (the restore joins the target's with `--join-ns`): the inventory's root user namespace id
    becomes the tree's, and the user namespace's own image goes."""
    _, root, _ = _message(images / "pstree.img", 8)  # the first entry: the tree's root task
    pid = {n: v for n, _, v in _fields(root)}.get(_PSTREE_PID)
    if not isinstance(pid, int):
        raise MemorySnapshotError(f"no root task in {images}/pstree.img", stage="dump")
    _, first, _ = _message(images / f"ids-{pid}.img", 8)
    user_ns = {n: v for n, _, v in _fields(first)}.get(_USER_NS_ID)
    inventory = images / "inventory.img"
    magic, inv, rest = _message(inventory, 4)
    fields = []
    for num, wt, v in _fields(inv):
        if num == _ROOT_IDS and isinstance(v, bytes) and user_ns is not None:
            v = _encode([(n, w, user_ns if n == _USER_NS_ID else x) for n, w, x in _fields(v)])
        fields.append((num, wt, v))
    body = _encode(fields)
    inventory.write_bytes(magic + struct.pack("<I", len(body)) + body + rest)
    for image in images.glob("userns-*.img"):
        image.unlink()
