"""Type stub of the native data-plane module (Rust, pyo3): `sandboxes._native`.

Only flat values, bytes and opaque handles cross this boundary. Every failure is raised as
`NativeError` with a `kind`; `sandboxes._bridge` translates it into `sandboxes.errors` in one place.
Checked against the built module by `make lint` (`python -m mypy.stubtest sandboxes._native`).
"""

from io import BufferedIOBase
from typing import IO, Self, final

__all__ = [
    "AgentClient",
    "AgentInfo",
    "CaseResult",
    "DirEntry",
    "ExecEvent",
    "ExecResult",
    "ExecStream",
    "GradeStream",
    "LaunchConfig",
    "Limits",
    "LocalSandbox",
    "NativeError",
    "RunTestsReport",
    "agent_version",
    "apply_layer",
    "egress_rules",
    "error_kinds",
    "kind_of_status_code",
    "languages",
    "launch_local",
    "non_public_networks",
    "own_cgroup_dirs",
    "pack_layer",
    "python_template_command",
    "squash_layers",
    "steps",
]

class NativeError(Exception):
    """Raised by every native call. `kind` is an `ErrorKind` value (`error_kinds()`)."""

    @property
    def kind(self) -> str: ...
    @property
    def detail(self) -> str: ...
    @property
    def step(self) -> str:
        """The step that failed, a `Step` value (`steps()`; e.g. "clone", "mount", "chdir"), or ""."""
    @property
    def limit(self) -> str:
        """For kind == "sandbox_limit": the sandbox limit that refused the call (e.g. "pids"), or ""."""

@final
class Limits:
    """Limits of one execution; zero means the agent's default."""

    wall_time_s: float
    cpu_time_s: float
    memory_bytes: int
    max_pids: int
    max_output_bytes: int
    max_file_size_bytes: int
    max_open_files: int
    kill_on_output_limit: bool
    def __new__(
        cls,
        wall_time_s: float = 0.0,
        cpu_time_s: float = 0.0,
        memory_bytes: int = 0,
        max_pids: int = 0,
        max_output_bytes: int = 0,
        max_file_size_bytes: int = 0,
        max_open_files: int = 0,
        kill_on_output_limit: bool = False,
    ) -> Self: ...

@final
class ExecResult:
    exit_code: int  # -1 when killed by a signal
    signal: int  # 0 when it exited normally
    stdout: bytes
    stderr: bytes
    timed_out: bool
    oom_killed: bool
    stdout_truncated: bool
    stderr_truncated: bool
    cpu_limited: bool
    pids_limited: bool
    file_size_limited: bool
    wall_time_s: float
    cpu_time_s: float
    peak_memory_bytes: int
    path: str  # "spawn" | "zygote"

@final
class ExecEvent:
    kind: str  # "started" | "stdout" | "stderr" | "exit" | "keepalive"
    pid: int | None  # started
    data: bytes | None  # stdout / stderr
    result: ExecResult | None  # exit (stdout/stderr empty: they were streamed)

@final
class ExecStream:
    """An interactive execution. Dropping it or `cancel()` kills the program."""

    async def next(self) -> ExecEvent | None:
        """The next event; None once the exit event was delivered."""
    async def send_stdin(self, data: bytes) -> None: ...
    async def close_stdin(self) -> None: ...
    async def signal(self, signo: int) -> None: ...
    async def resize(self, rows: int, cols: int) -> None: ...
    def cancel(self) -> Self: ...

@final
class DirEntry:
    name: str
    is_dir: bool
    is_symlink: bool
    size: int
    mode: int
    path: str
    mtime: float
    uid: int
    gid: int
    owner: str
    group: str
    symlink_target: str
    target_is_dir: bool
    type: str

@final
class AgentInfo:
    version: str
    cgroup_version: str
    seccomp: bool
    namespaces: list[str]
    languages: list[str]
    zygote: bool
    sandbox_uid: int
    sandbox_gid: int
    landlock: bool
    running_execs: int
    total_execs: int
    memory_bytes: int
    uptime_s: float
    work_dir: str
    egress_allowed: int
    egress_refused: int

@final
class CaseResult:
    verdict: str  # accepted | wrong_answer | time_limit | memory_limit | runtime_error |
    #               compile_error | output_limit | sandbox_error | skipped
    exit_code: int
    signal: int
    wall_time_s: float
    cpu_time_s: float
    peak_memory_bytes: int
    stdout: bytes  # excerpt
    stderr: bytes  # excerpt
    message: str
    path: str  # "spawn" | "zygote"

@final
class RunTestsReport:
    cases: list[CaseResult]
    passed: int
    total: int
    compiled: bool
    compile_output: bytes
    compile_time_s: float
    wall_time_s: float

@final
class GradeStream:
    """A batch of gradings in flight. Dropping it or `cancel()` kills what still runs."""

    async def next(self) -> tuple[int, RunTestsReport] | None:
        """The next (index, report) as it finishes; None once every submission was answered."""
    def cancel(self) -> Self: ...

@final
class AgentClient:
    """A connection to one agent. `endpoint` is `unix:///path/agent.sock` or `http://host:port`.
    Connects lazily and reuses one HTTP/2 connection for all calls; safe to share between tasks.
    Cancelling an awaited call cancels the RPC, and the agent kills the program it started."""

    endpoint: str
    def __new__(cls, endpoint: str, token: str, connect_timeout_s: float = 5.0) -> Self: ...
    async def exec(
        self,
        argv: list[str],
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        stdin: bytes = ...,
        limits: Limits | None = None,
        clear_env: bool = False,
        timeout_s: float | None = None,
        keep_descendants: bool = False,
        user: str | None = None,
    ) -> ExecResult:
        """Run to completion. `timeout_s` is the RPC deadline (the program's own wall limit is in
        `limits`); a program that fails is a result, not an exception. `user`: a user of the
        sandbox to run as (only a sandbox whose programs run as root has others)."""
    def exec_stream(
        self,
        argv: list[str],
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        limits: Limits | None = None,
        clear_env: bool = False,
        keep_descendants: bool = False,
        terminal: tuple[int, int] | None = None,
        user: str | None = None,
    ) -> ExecStream: ...
    async def write_files(self, files: list[tuple[str, bytes, int]], user: str | None = None) -> int:
        """(path, data, mode) triples; mode 0 means 0o644. Returns bytes written. `user`: the
        user of the sandbox the files and the directories made for them belong to."""
    async def read_file(self, path: str, offset: int, length: int, max_bytes: int) -> bytes: ...
    async def list_dir(self, path: str, depth: int = 1) -> list[DirEntry]: ...
    async def file_op(self, request: bytes) -> bytes:
        """One file operation: `request` is an encoded `FileOpRequest` (common.proto), the answer
        an encoded `FileOpResponse`; the caller's own messages, carried as they are."""
    async def checkpoint(
        self,
        dest: str,
        timeout_s: float | None = None,
        volume: str = ...,  # "" (default): the sandbox's file system
        max_bytes: int = 0,
        max_entries: int = 0,
    ) -> tuple[str, int, int]:
        """The sandbox's changes (`volume`: those of its layered volume at that path) unpacked into
        `dest` as a layer: (sha256, bytes the layer allocates, entries). Past `max_bytes` of the
        stream or `max_entries` entries (0: unbounded) it stops with kind `too_large`."""
    async def remove(self, path: str, recursive: bool = False) -> None: ...
    async def info(self) -> AgentInfo: ...
    async def renew_lease(self, ttl_s: float) -> float:
        """Extend the agent's lease; returns seconds until it expires."""
    async def set_egress(self, rules: list[str], deny: bool = False) -> None:
        """Replace the sandbox's egress policy (InvalidRequest: started without one)."""
    async def forward(self, port: int, fd: int, head: bytes) -> None:
        """Splice `fd` (a connected TCP socket, owned from here on) to `port` of the sandbox's
        loopback, `head` first; NotFound when nothing answers there."""
    async def run_tests(
        self,
        language: str,
        source: str,
        tests: list[tuple[bytes, bytes, str]],
        limits: Limits | None = None,
        stop_on_first_failure: bool = False,
        compare: str = "whitespace",
        float_tolerance: float = 0.0,
        excerpt_bytes: int = 0,
        timeout_s: float | None = None,
    ) -> RunTestsReport:
        """Judge `source` against (input, expected_output, check) triples: compile once, run each
        case isolated. compare: "exact" | "whitespace" | "float"."""
    def run_tests_batch(
        self,
        submissions: list[tuple[str, str, list[tuple[bytes, bytes, str]], Limits | None, bool, str, float]],
        parallelism: int = 0,
        timeout_s: float | None = None,
    ) -> GradeStream:
        """Grade many (language, source, tests, limits, stop_on_first_failure, compare,
        float_tolerance) submissions in one call, `parallelism` side by side (0: one at a time)."""
    def close(self) -> Self: ...

@final
class LaunchConfig:
    """How the local backend starts one agent in fresh namespaces (fields readable and settable,
    as given to the constructor)."""

    agent_path: str
    run_dir: str
    uid: int
    gid: int
    lease_ttl_s: float
    memory_bytes: int
    max_pids: int
    cpu_quota: float
    work_dir: str
    work_size_bytes: int
    tmp_size_bytes: int
    network: bool
    seccomp: bool
    cgroups: bool
    ro_binds: list[str]
    env: list[tuple[str, str]]
    python_zygote: str
    user: str
    id_base: int
    root_size_bytes: int
    image_root: str
    layers: list[str]
    volumes: list[str]
    layered_volumes: list[str]
    egress_allow: list[str] | None
    python_template: str
    programs_pid_ns: bool

    def __new__(
        cls,
        agent_path: str,
        run_dir: str,
        *,
        uid: int = 65534,
        gid: int = 65534,
        lease_ttl_s: float = 30.0,
        memory_bytes: int = 0,
        max_pids: int = 0,
        cpu_quota: float = 0.0,
        work_dir: str = ...,  # "/work"
        work_size_bytes: int = 0,
        tmp_size_bytes: int = 0,
        network: bool = False,
        seccomp: bool = True,
        cgroups: bool = True,
        ro_binds: list[str] | None = None,
        env: dict[str, str] | None = None,
        python_zygote: str = ...,  # "lazy" (default) | "eager" | "off" (see Template.python_zygote)
        user: str = ...,  # "sandbox" (default) | "root" (see Template.user)
        id_base: int = 0,  # root: first host id of the sandbox's user namespace
        root_size_bytes: int = 0,  # root: size of the writable root
        image_root: str = ...,  # an unpacked image to build the root on (default "": host /usr view)
        egress_allow: list[str] | None = None,  # an allow-list, possibly empty (see Template.network)
        layers: list[str] | None = None,  # checkpoint layers, bottom first (see Template.layers)
        volumes: list[str] | None = None,  # "SRC:DST[:ro]" host directories bound in the sandbox
        layered_volumes: list[str] | None = None,  # "rw|ro:DST[:LAYER...]" (see Template.layered_volumes)
        python_template: str = ...,  # a Python template's socket (default "": none; see backends/python_template.py)
        programs_pid_ns: bool = False,  # the pid namespace is the programs' user namespace's (Template.memory_restores)
    ) -> Self: ...

@final
class LocalSandbox:
    """Handle of one launched agent (pid 1 of its own pid namespace)."""

    pid: int
    endpoint: str  # unix:///<run_dir>/agent.sock
    token: str
    run_dir: str
    cgroup: str  # "" when the sandbox has no cgroup
    def alive(self) -> bool: ...
    def kill(self) -> None:
        """SIGKILL the agent (its pid namespace dies with it), reap it, remove its cgroup and
        run dir. Idempotent."""
    async def wait(self) -> int:
        """Wait for the agent to exit; returns its wait status."""
    def freeze(self, frozen: bool) -> None:
        """Pause (`frozen`) or resume every process of the sandbox, the agent included, through
        its cgroup's freezer; returns once the kernel reports the new state. Raises
        NativeError(kind="internal") when the host has no freezer or the state is not reached."""

async def launch_local(config: LaunchConfig) -> LocalSandbox:
    """Start an agent; returns once the agent itself signalled readiness (pushed through a pipe,
    not polled). Raises NativeError(kind="launch", step=...) when a step fails: the launcher's,
    or the agent's start-up step it reported on its readiness channel."""

def agent_version() -> str: ...
def python_template_command(python: str, listen_fd: int, retire_fd: int) -> list[str]:
    """The command line of a Python template process serving on its listening socket `listen_fd`
    until the write end of its pipe `retire_fd` is closed (backends/python_template.py)."""

def own_cgroup_dirs() -> list[tuple[str, str]]:
    """This process's own cgroup directory in each hierarchy a sandbox's cgroup is made in:
    (controllers joined by commas, or "" for cgroup v2, directory); on cgroup v1 also the
    freezer hierarchy's ("freezer", directory), where paused sandboxes are frozen."""

def egress_rules(rules: list[str]) -> list[tuple[str, str, int | None]]: ...
def non_public_networks() -> list[str]: ...
def error_kinds() -> list[str]:
    """Every error kind's name (the values of `sandboxes.errors.ErrorKind`)."""

def steps() -> list[str]:
    """Every step's name (the values of `sandboxes.errors.Step`)."""

def kind_of_status_code(code: int) -> str:
    """The error kind the native client gives an agent's status of this gRPC code (no reason)."""

def languages() -> list[tuple[str, list[str], str, list[str] | None, list[str], bool, list[str]]]:
    """The judge's language table: (name, aliases with the name first, source file, compile argv
    or None, run argv, takes check scripts, version command); paths relative to the program's
    directory."""

def pack_layer(
    layer: str,
    dest: str,
    relocate: dict[str, str] = ...,  # {} (default): nothing moved
    under: str = ...,  # "" (default): the layer at the tar's top
) -> tuple[str, str, int]:
    """The layer directory `layer` (an overlay's lower-layer form) written to `dest` as a gzipped
    OCI layer tar, the same bytes for the same layer: the contents of each directory `relocate`
    names (relative to the layer's top) moved to its value, and with `under` the whole layer
    below that directory. Returns (digest of the gzip, diff_id of the tar, both "sha256:<hex>";
    size of the gzip)."""

def squash_layers(layers: list[str], dest: str) -> None:
    """The layer directories `layers` (bottom first) merged into the empty directory `dest` as one
    bottom layer: whiteouts applied and dropped, opaque directories replacing, files hard-linked."""

def apply_layer(src: IO[bytes] | BufferedIOBase, dest: str) -> None:
    """The OCI layer tar `src` holds (a seekable binary file of the uncompressed tar, read twice
    from its start) applied onto the root file system at `dest`: whiteouts delete what lower
    layers made, owners and modes are kept, nothing is written outside `dest`. Raises
    NativeError(kind="launch", step="image") when it cannot."""
