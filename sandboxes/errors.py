"""Typed errors of the sandboxes service.

A user program that fails, times out or runs out of memory is a *result* (`ExecResult`), never an
exception. An exception means the infrastructure failed or the request was wrong. RL code turns
`SandboxError` into "reschedule" when `retryable`, never into a reward of 0.

One vocabulary on every layer: `ErrorKind` names what went wrong and `Step` which step of
starting a sandbox or a program failed. Both are declared in Rust (the native module's `Kind`,
`sandbox_exec::Step`) and carried unchanged from the agent through the native module and the
server's status trailers to these classes and to the HTTP surfaces' status table
(`sandboxes.server.http.statuses`); `_native.error_kinds()` and `_native.steps()` list the Rust
names, and a test holds these enums to them.
"""

from __future__ import annotations

import enum

__all__ = [
    "AuthError",
    "BackendUnavailable",
    "Cancelled",
    "Conflict",
    "Draining",
    "ErrorKind",
    "ImageUnavailable",
    "InvalidRequest",
    "LaunchError",
    "MemorySnapshotError",
    "NoSpace",
    "NotFound",
    "PoolExhausted",
    "QuotaExceeded",
    "SandboxError",
    "SandboxLimitExceeded",
    "SandboxLost",
    "SandboxPaused",
    "SandboxTimeout",
    "Step",
    "TooLarge",
    "error_class",
]


class ErrorKind(str, enum.Enum):
    """Stable names of error kinds (also used as metric labels and gRPC status details)."""

    INVALID_REQUEST = "invalid_request"
    TOO_LARGE = "too_large"
    CONFLICT = "conflict"
    NO_SPACE = "no_space"
    SANDBOX_LIMIT = "sandbox_limit"
    NOT_FOUND = "not_found"
    AUTH = "auth"
    QUOTA = "quota"
    POOL_EXHAUSTED = "pool_exhausted"
    SANDBOX_LOST = "sandbox_lost"
    TIMEOUT = "timeout"
    LAUNCH = "launch"
    BACKEND_UNAVAILABLE = "backend_unavailable"
    CANCELLED = "cancelled"
    DRAINING = "draining"
    INTERNAL = "internal"


class Step(str, enum.Enum):
    """A step of starting a sandbox or a program in it; an error that a step failed names it
    (`SandboxError.step`). The values are the Rust names (`sandbox_exec::Step`), one spelling."""

    # A program's start (the agent's executor).
    PIPE = "pipe"
    FORK = "fork"
    JOIN_CGROUP = "join_cgroup"
    SET_SID = "set_sid"
    RLIMIT = "rlimit"
    CHDIR = "chdir"
    SET_GROUPS = "set_groups"
    SET_GID = "set_gid"
    SET_UID = "set_uid"
    NO_NEW_PRIVS = "no_new_privs"
    SECCOMP = "seccomp"
    DUP2 = "dup2"
    EXEC = "exec"
    CREATE_CGROUP = "create_cgroup"
    CGROUP_LIMIT = "cgroup_limit"
    LANDLOCK = "landlock"
    USER_NS = "user_ns"
    # The agent's start-up.
    TOKEN = "token"
    FLAGS = "flags"
    HOSTNAME = "hostname"
    LOOPBACK = "loopback"
    LISTEN = "listen"
    EGRESS = "egress"
    MOUNT = "mount"
    ROOT_FILE = "root_file"
    PIVOT_ROOT = "pivot_root"
    ID_MAP = "id_map"
    CAPABILITIES = "capabilities"
    WORK_DIR = "work_dir"
    RUNTIME = "runtime"
    EXECUTOR = "executor"
    # The local launcher and its child.
    RUN_DIR = "run_dir"
    BIND = "bind"
    DEVNULL = "devnull"
    CLONE = "clone"
    SYNC = "sync"
    CGROUP_NAMESPACE = "cgroup_namespace"
    FDS = "fds"
    EXEC_AGENT = "exec_agent"
    READY_PIPE = "ready_pipe"
    AGENT_START = "agent_start"
    READY_TIMEOUT = "ready_timeout"
    # The manager (pool and backends).
    IMPORT = "import"
    AGENT_PATH = "agent_path"
    ID_RANGE = "id_range"
    IMAGE = "image"
    ENTRYPOINT = "entrypoint"
    AGENT = "agent"
    INSPECT = "inspect"
    CREATE = "create"
    START = "start"
    REMOVE = "remove"
    LIST = "list"
    TIMEOUT = "timeout"
    POD = "pod"
    CONFLICT = "conflict"
    CLOSED = "closed"
    # A program's start, continued.
    TERMINAL = "terminal"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, name: str | None) -> Step | None:
        """The step named `name` as read from a peer (None when empty or unknown: a newer peer's)."""
        try:
            return cls(name) if name else None
        except ValueError:
            return None


class SandboxError(Exception):
    """Base of every error the service raises. `retryable` tells RL code to reschedule; `step`
    names the step that failed, when one did."""

    kind: ErrorKind = ErrorKind.INTERNAL
    retryable: bool = True

    def __init__(self, message: str = "", *, detail: str = "", step: Step | str | None = None) -> None:
        super().__init__(message or self.kind.value)
        self.message = message or self.kind.value
        self.detail = detail
        self.step: Step | None = Step(step) if step else None


class InvalidRequest(SandboxError, ValueError):
    """The request is malformed (bad argument, absurd limit, path outside the sandbox)."""

    kind = ErrorKind.INVALID_REQUEST
    retryable = False


class TooLarge(InvalidRequest):
    """A request or a file is over a bound: a read above its `max_bytes`, a write above the
    agent's per-call ceiling, a file above the file-size limit. Split it, or raise the bound."""

    kind = ErrorKind.TOO_LARGE


class SandboxPaused(InvalidRequest):
    """The sandbox is paused: its processes are stopped and it serves no call until resumed."""


class Conflict(InvalidRequest):
    """The request conflicts with what is there now: a name already taken, a version of a volume
    that is no longer its newest, another change of the same thing in flight."""

    kind = ErrorKind.CONFLICT


class MemorySnapshotError(Conflict):
    """CRIU refused to dump a sandbox's running programs, or to restore them into a new sandbox
    (`stage`: "dump" or "restore"); `what` is CRIU's own error line. A refused dump leaves the
    sandbox running as it was: the caller gets this, never a copy of its files alone."""

    def __init__(self, message: str = "", *, detail: str = "", stage: str = "", what: str = "") -> None:
        super().__init__(message, detail=detail)
        self.stage = stage
        self.what = what


class NoSpace(SandboxError, OSError):
    """The sandbox's disk is full (its disk quota is reached). The sandbox keeps serving: remove
    files, or use a template with a larger disk. Not an infrastructure failure: not retryable."""

    kind = ErrorKind.NO_SPACE
    retryable = False


class SandboxLimitExceeded(SandboxError):
    """The sandbox's own limit refused the call; `limit` names it (`"pids"`: as many programs run
    as the sandbox's process limit allows). The sandbox keeps serving: wait for programs to end,
    or use a template with a larger limit. Not an infrastructure failure: not retryable."""

    kind = ErrorKind.SANDBOX_LIMIT
    retryable = False

    def __init__(
        self, message: str = "", *, detail: str = "", step: Step | str | None = None, limit: str = ""
    ) -> None:
        super().__init__(message, detail=detail, step=step)
        self.limit = limit


class NotFound(SandboxError, LookupError):
    """No such sandbox, template or file."""

    kind = ErrorKind.NOT_FOUND
    retryable = False


class AuthError(SandboxError, PermissionError):
    """Missing or wrong API key / agent token, or a path the sandbox may not touch."""

    kind = ErrorKind.AUTH
    retryable = False


class QuotaExceeded(SandboxError):
    """The caller's concurrency quota is used up."""

    kind = ErrorKind.QUOTA


class PoolExhausted(SandboxError):
    """No sandbox became free within the claim's wait."""

    kind = ErrorKind.POOL_EXHAUSTED


class SandboxLost(SandboxError):
    """The sandbox died or became unreachable (agent killed, pod evicted, container gone)."""

    kind = ErrorKind.SANDBOX_LOST


class SandboxTimeout(SandboxError, TimeoutError):
    """An infrastructure call passed its deadline (not a user program's time limit)."""

    kind = ErrorKind.TIMEOUT


class LaunchError(SandboxError):
    """A sandbox could not be started; `step` names the step that failed."""

    kind = ErrorKind.LAUNCH


class ImageUnavailable(LaunchError):
    """The image a sandbox was asked of cannot be had here (not in the engine, nothing pulled,
    not a root file system): the caller's to change, not to retry. Its step is `image`."""

    retryable = False

    def __init__(self, message: str = "", *, detail: str = "") -> None:
        super().__init__(message, detail=detail, step=Step.IMAGE)


class BackendUnavailable(SandboxError):
    """The backend (Docker engine, Kubernetes API) cannot be reached or refused the request."""

    kind = ErrorKind.BACKEND_UNAVAILABLE


class Cancelled(SandboxError):
    """The call was cancelled (e.g. the server is shutting down)."""

    kind = ErrorKind.CANCELLED


class Draining(SandboxError):
    """The server is shutting down and refused the call before doing anything of it: any call,
    even a non-idempotent one, is safe to send again (the client does, on a new connection, which
    a load balancer gives to another replica)."""

    kind = ErrorKind.DRAINING


_CLASS_OF_KIND: dict[str, type[SandboxError]] = {
    cls.kind.value: cls
    for cls in (
        InvalidRequest,
        TooLarge,
        Conflict,
        NoSpace,
        SandboxLimitExceeded,
        NotFound,
        AuthError,
        QuotaExceeded,
        PoolExhausted,
        SandboxLost,
        SandboxTimeout,
        LaunchError,
        BackendUnavailable,
        Cancelled,
        Draining,
        SandboxError,
    )
}


def error_class(kind: str | None) -> type[SandboxError]:
    """The class of an error kind read from a peer (`SandboxError` for an unknown one)."""
    return _CLASS_OF_KIND.get(kind or "", SandboxError)
