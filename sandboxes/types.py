"""Results and requests as frozen dataclasses: the public data types of the API."""

from __future__ import annotations

import dataclasses
import math
import stat
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import InvalidRequest

__all__ = [
    "DEFAULT_READ_MAX_BYTES",
    "AgentInfo",
    "DirEntry",
    "ExecEvent",
    "ExecResult",
    "FileMatch",
    "Limits",
    "ReadRange",
]

# Most bytes one `read_file` returns unless the caller names another bound: a file larger than
# this is a `TooLarge` error (read it in parts with offset/length), never a huge allocation.
DEFAULT_READ_MAX_BYTES = 256 << 20


@dataclass(frozen=True)
class ReadRange:
    """What one `read_file` reads: `length` bytes from `offset` (0: to the end of the file), at
    most `max_bytes` of them (a larger read is refused before any byte is sent)."""

    offset: int = 0
    length: int = 0
    max_bytes: int = DEFAULT_READ_MAX_BYTES

    @classmethod
    def of(cls, offset: int, length: int | None, max_bytes: int) -> ReadRange:
        """A validated range; `length` None means to the end of the file."""
        for name, v, lo in (("offset", offset, 0), ("length", length or 0, 0), ("max_bytes", max_bytes, 1)):
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v < 1 << 63:
                raise InvalidRequest(f"{name} must be an int in [{lo}, 2**63), got {v!r}")
        if length == 0:
            raise InvalidRequest("length must be positive, or None to read to the end")
        return cls(offset, length or 0, max_bytes)


@dataclass(frozen=True)
class Limits:
    """Limits of one execution; `None` means the sandbox template's / agent's default."""

    wall_time_s: float | None = None
    cpu_time_s: float | None = None
    memory_bytes: int | None = None
    max_pids: int | None = None
    max_output_bytes: int | None = None
    max_file_size_bytes: int | None = None
    max_open_files: int | None = None
    kill_on_output_limit: bool = False

    def merged(self, override: Limits | None) -> Limits:
        """`override`'s set fields on top of these."""
        if override is None:
            return self
        changes = {
            f.name: getattr(override, f.name)
            for f in dataclasses.fields(override)
            if getattr(override, f.name) not in (None, False)
        }
        return dataclasses.replace(self, **changes)

    def validate(self) -> Limits:
        """Raise `InvalidRequest` on a negative, non-finite or absurd value; returns self.

        The ceilings mirror the agent's (it refuses the same values), so a bad request fails
        before it crosses the wire and with a clear message.
        """
        for name, ceiling in _LIMIT_CEILINGS.items():
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidRequest(f"limits.{name} must be a number, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise InvalidRequest(f"limits.{name} must be finite and >= 0, got {value!r}")
            if value > ceiling:
                raise InvalidRequest(f"limits.{name}={value!r} is above the ceiling {ceiling!r}")
        return self


_LIMIT_CEILINGS: dict[str, float] = {
    "wall_time_s": 24 * 3600.0,
    "cpu_time_s": 24 * 3600.0,
    "memory_bytes": 1 << 40,
    "max_pids": 1 << 20,
    "max_output_bytes": 1 << 30,
    "max_file_size_bytes": 1 << 40,
    "max_open_files": 1 << 20,
}


@dataclass(frozen=True)
class ExecResult:
    """What one program did. A failing program is a result, not an exception."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    signal: int = 0
    timed_out: bool = False
    oom_killed: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    cpu_limited: bool = False
    pids_limited: bool = False
    file_size_limited: bool = False
    duration_s: float = 0.0
    cpu_time_s: float = 0.0
    peak_memory_bytes: int = 0
    path: str = "spawn"

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.oom_killed

    @property
    def shell_status(self) -> int:
        """The status as a shell reports it (`$?`): the exit code, or 128 + the killing signal."""
        return 128 + self.signal if self.signal else self.exit_code

    @property
    def output_truncated(self) -> bool:
        return self.stdout_truncated or self.stderr_truncated

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace")


@dataclass(frozen=True)
class ExecEvent:
    """One event of a streamed execution."""

    kind: Literal["started", "stdout", "stderr", "exit", "keepalive"]
    pid: int | None = None
    data: bytes = b""
    result: ExecResult | None = None


_TYPE_BITS = {
    "dir": stat.S_IFDIR,
    "symlink": stat.S_IFLNK,
    "fifo": stat.S_IFIFO,
    "socket": stat.S_IFSOCK,
    "char": stat.S_IFCHR,
    "block": stat.S_IFBLK,
}


@dataclass(frozen=True)
class DirEntry:
    """One entry of a sandbox's file system, as the agent describes it (common.proto's
    `DirEntry`): a symlink is described, not followed; ids and names are the sandbox's own."""

    name: str
    is_dir: bool
    size: int
    mode: int
    is_symlink: bool = False
    path: str = ""  # absolute, inside the sandbox
    mtime: float = 0.0
    uid: int = 0
    gid: int = 0
    owner: str = ""
    group: str = ""
    symlink_target: str = ""
    target_is_dir: bool = False
    type: str = "file"  # "dir", "symlink", "fifo", "socket", "char", "block"

    @property
    def symbolic_mode(self) -> str:
        """The mode as `ls -l` writes it (`drwxr-xr-x`)."""
        return stat.filemode(self.mode | _TYPE_BITS.get(self.type, stat.S_IFREG))

    @classmethod
    def of(cls, m: Any) -> DirEntry:
        """The entry of an object with the same fields (a `DirEntry` message, native or protobuf)."""
        return cls(**{f.name: getattr(m, f.name) for f in dataclasses.fields(cls)})


@dataclass(frozen=True)
class FileMatch:
    """A line that contains a searched text (`SandboxBase.search_files`)."""

    path: str
    line: int  # 1-based
    content: str  # the line without its newline, cut at 4 KiB


@dataclass(frozen=True)
class AgentInfo:
    version: str
    cgroup_version: str
    seccomp: bool
    namespaces: tuple[str, ...] = ()
    languages: tuple[str, ...] = ()
    zygote: bool = False
    sandbox_uid: int = 0
    sandbox_gid: int = 0
    running_execs: int = 0
    total_execs: int = 0
    memory_bytes: int = 0
    uptime_s: float = 0.0
    work_dir: str = ""
    # run_tests cases may write only beneath their own directory (Landlock in the kernel)
    landlock: bool = False
    # connections the egress proxy opened and refused (a sandbox whose network is an allow-list)
    egress_allowed: int = 0
    egress_refused: int = 0
    extra: dict = field(default_factory=dict)
