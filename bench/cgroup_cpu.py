"""CPU of everything a benchmark causes, counted through a cgroup that holds it.

`CpuScope` moves this process into a fresh cgroup of its own before the benchmark starts
anything; every process it starts afterwards is born there or below (the manager's sandboxes make
their cgroups under it: `<own>/sandboxes/<name>` in each hierarchy), so the cgroup's CPU counter
covers this process, the agents, their programs and zygotes, and the baselines' processes, all
started as its descendants, and nothing of the other work on the machine. The counter is
hierarchical and charged as the CPU is spent, so what a sandbox's cgroup spent stays counted after
that cgroup is removed.

- cgroup v1: a directory in the `cpuacct` hierarchy under this process's own (`cpuacct.usage`, ns);
- cgroup v2 (when no v1 `cpuacct` is mounted): a directory under this process's own
  (`cpu.stat` `usage_usec`, present without any controller enabled);
- neither usable (no permission, no such hierarchy): the machine's CPU from /proc/stat (every
  process and the kernel, the other work on the machine included), with the reason in `source`.

Not counted through a cgroup: kernel threads (they live in the root cgroup) and processes this
process started before it entered the scope. At the end this process moves back to its old
cgroup and the scope's (now empty) directories are removed.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Self

TICK = os.sysconf("SC_CLK_TCK")
PREFIX = "bench-cpu-"


def machine_cpu_s() -> float:
    """CPU seconds the whole machine has spent, all processes and the kernel (not idle)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return (sum(v) - v[3] - v[4]) / TICK


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fstype, options) of every cgroup mount."""
    out = []
    with open("/proc/self/mounts") as f:
        for line in f:
            _dev, mnt, fstype, opts, *_ = line.split()
            if fstype in ("cgroup", "cgroup2"):
                out.append((mnt, fstype, set(opts.split(","))))
    return out


def _membership() -> tuple[dict[str, str], str | None]:
    """(v1 controller -> path, v2 path) of this process, from /proc/self/cgroup."""
    v1: dict[str, str] = {}
    v2 = None
    with open("/proc/self/cgroup") as f:
        for line in f:
            hid, ctrls, path = line.rstrip("\n").split(":", 2)
            if hid == "0" and not ctrls:
                v2 = path
            for c in ctrls.split(","):
                if c:
                    v1[c] = path
    return v1, v2


@dataclass
class Budget:
    """A reading: CPU seconds of the scope (or the machine), of this process alone, and of the
    machine (/proc/stat: the other work on it included, for comparison)."""

    total: float
    manager: float
    machine: float


class CpuScope:
    """A fresh cgroup holding this process and what it starts (see the module doc). Use as a
    context manager; nested uses share the outermost's cgroup."""

    _active: CpuScope | None = None

    def __init__(self, prefer: str = "v1") -> None:
        self.prefer = prefer
        self.dir: Path | None = None
        self.old: Path | None = None
        self.version = ""
        self.source = ""
        self._outer: CpuScope | None = None

    # -- entering and leaving ----------------------------------------------------------------------

    def _places(self) -> list[tuple[str, Path]]:
        """(version, this process's own directory) of the usable hierarchies, preferred first."""
        v1, v2 = _membership()
        out = []
        for mnt, fstype, opts in _mounts():
            if fstype == "cgroup" and "cpuacct" in opts and "cpuacct" in v1:
                out.append(("v1", Path(mnt + v1["cpuacct"].rstrip("/"))))
            elif fstype == "cgroup2" and v2 is not None:
                out.append(("v2", Path(mnt + v2.rstrip("/"))))
        return sorted(out, key=lambda p: p[0] != self.prefer)

    def __enter__(self) -> Self:
        if CpuScope._active is not None:
            self._outer = CpuScope._active
            self.dir, self.version, self.source = self._outer.dir, self._outer.version, self._outer.source
            return self
        reasons = []
        for version, own in self._places():
            d = own / f"{PREFIX}{os.getpid()}"
            try:
                d.mkdir(exist_ok=True)
                (d / "cgroup.procs").write_text(str(os.getpid()))
            except OSError as e:
                reasons.append(f"{version} {d}: {e.strerror}")
                _rmdir(d)
                continue
            self.dir, self.old, self.version = d, own, version
            counter = "cpuacct.usage" if version == "v1" else "cpu.stat usage_usec"
            self.source = f"cgroup {version} {d} ({counter})"
            break
        else:
            self.source = (
                "/proc/stat, machine-wide (no cgroup: " + ("; ".join(reasons) or "none mounted") + ")"
            )
        CpuScope._active = self
        return self

    def __exit__(self, *exc: object) -> None:
        if self._outer is not None:
            return
        CpuScope._active = None
        if self.dir is None or self.old is None:
            return
        try:
            (self.old / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            return  # still inside: the directory cannot go
        _remove_tree(self.dir)

    # -- reading -----------------------------------------------------------------------------------

    def cpu_s(self, sub: Path | None = None) -> float:
        """CPU seconds spent in the scope so far (or by the whole machine, without a cgroup); of
        the cgroup `sub` (from `child`) only when given."""
        d = sub or self.dir
        if d is None:
            return machine_cpu_s()
        if self.version == "v1":
            return int((d / "cpuacct.usage").read_text()) / 1e9
        for line in (d / "cpu.stat").read_text().splitlines():
            key, value = line.split()
            if key == "usage_usec":
                return int(value) / 1e6
        raise RuntimeError(f"no usage_usec in {d / 'cpu.stat'}")

    def child(self, name: str) -> Path | None:
        """A cgroup under the scope for a process tree to be counted apart (e.g. a server with its
        sandboxes: started with `join(dir)` as its `preexec_fn`, it makes their cgroups under
        its own); None without a cgroup. Removed with the scope."""
        if self.dir is None:
            return None
        d = self.dir / name
        d.mkdir(exist_ok=True)
        return d

    def now(self) -> Budget:
        """The scope's CPU, this process's own (`process_time`: every thread, ns clock) and the
        machine's."""
        return Budget(self.cpu_s(), time.process_time(), machine_cpu_s())

    @staticmethod
    def split(b0: Budget, b1: Budget, n: int, digits: int = 1) -> dict[str, float]:
        """The CPU between two readings in ms per item: the manager (this process: pool, client,
        gRPC), the agents with their programs and zygotes (the rest of the scope), the total."""
        total, manager = b1.total - b0.total, b1.manager - b0.manager
        ms = 1000 / n
        return {
            "manager": round(manager * ms, digits),
            "agents and programs": round((total - manager) * ms, digits),
            "total": round(total * ms, digits),
        }


def join(d: Path) -> None:
    """Moves the calling process into the cgroup `d` (a `preexec_fn`: the child, before its exec)."""
    (d / "cgroup.procs").write_text(str(os.getpid()))


def _rmdir(d: Path) -> None:
    try:
        d.rmdir()
    except OSError:
        pass


def _remove_tree(top: Path) -> None:
    """rmdir `top` and the empty cgroups under it, deepest first (the sandboxes' parent dir the
    manager leaves behind); a cgroup still holding a process is left, as is its parent."""
    for root, _dirs, _files in sorted(os.walk(top, topdown=False), key=lambda t: -len(t[0])):
        _rmdir(Path(root))
