from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ExecPath(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXEC_PATH_UNSPECIFIED: _ClassVar[ExecPath]
    EXEC_PATH_SPAWN: _ClassVar[ExecPath]
    EXEC_PATH_ZYGOTE: _ClassVar[ExecPath]

class Compare(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMPARE_UNSPECIFIED: _ClassVar[Compare]
    COMPARE_EXACT: _ClassVar[Compare]
    COMPARE_WHITESPACE: _ClassVar[Compare]
    COMPARE_FLOAT: _ClassVar[Compare]

class Verdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VERDICT_UNSPECIFIED: _ClassVar[Verdict]
    ACCEPTED: _ClassVar[Verdict]
    WRONG_ANSWER: _ClassVar[Verdict]
    TIME_LIMIT: _ClassVar[Verdict]
    MEMORY_LIMIT: _ClassVar[Verdict]
    RUNTIME_ERROR: _ClassVar[Verdict]
    COMPILE_ERROR: _ClassVar[Verdict]
    OUTPUT_LIMIT: _ClassVar[Verdict]
    SANDBOX_ERROR: _ClassVar[Verdict]
    SKIPPED: _ClassVar[Verdict]
EXEC_PATH_UNSPECIFIED: ExecPath
EXEC_PATH_SPAWN: ExecPath
EXEC_PATH_ZYGOTE: ExecPath
COMPARE_UNSPECIFIED: Compare
COMPARE_EXACT: Compare
COMPARE_WHITESPACE: Compare
COMPARE_FLOAT: Compare
VERDICT_UNSPECIFIED: Verdict
ACCEPTED: Verdict
WRONG_ANSWER: Verdict
TIME_LIMIT: Verdict
MEMORY_LIMIT: Verdict
RUNTIME_ERROR: Verdict
COMPILE_ERROR: Verdict
OUTPUT_LIMIT: Verdict
SANDBOX_ERROR: Verdict
SKIPPED: Verdict

class FileEntry(_message.Message):
    __slots__ = ("path", "data", "mode")
    PATH_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    path: str
    data: bytes
    mode: int
    def __init__(self, path: _Optional[str] = ..., data: _Optional[bytes] = ..., mode: _Optional[int] = ...) -> None: ...

class CreateRequest(_message.Message):
    __slots__ = ("template", "labels", "env", "files", "ttl_s", "idempotency_key", "timeout_s")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    template: str
    labels: _containers.ScalarMap[str, str]
    env: _containers.ScalarMap[str, str]
    files: _containers.RepeatedCompositeFieldContainer[FileEntry]
    ttl_s: float
    idempotency_key: str
    timeout_s: float
    def __init__(self, template: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., env: _Optional[_Mapping[str, str]] = ..., files: _Optional[_Iterable[_Union[FileEntry, _Mapping]]] = ..., ttl_s: _Optional[float] = ..., idempotency_key: _Optional[str] = ..., timeout_s: _Optional[float] = ...) -> None: ...

class Sandbox(_message.Message):
    __slots__ = ("id", "template", "labels", "created_at", "expires_at", "state")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    id: str
    template: str
    labels: _containers.ScalarMap[str, str]
    created_at: float
    expires_at: float
    state: str
    def __init__(self, id: _Optional[str] = ..., template: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., created_at: _Optional[float] = ..., expires_at: _Optional[float] = ..., state: _Optional[str] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("sandbox_id",)
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("labels",)
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    LABELS_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.ScalarMap[str, str]
    def __init__(self, labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ("sandboxes",)
    SANDBOXES_FIELD_NUMBER: _ClassVar[int]
    sandboxes: _containers.RepeatedCompositeFieldContainer[Sandbox]
    def __init__(self, sandboxes: _Optional[_Iterable[_Union[Sandbox, _Mapping]]] = ...) -> None: ...

class DeleteRequest(_message.Message):
    __slots__ = ("sandbox_id",)
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class DeleteResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BulkDeleteRequest(_message.Message):
    __slots__ = ("sandbox_ids", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SANDBOX_IDS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    sandbox_ids: _containers.RepeatedScalarFieldContainer[str]
    labels: _containers.ScalarMap[str, str]
    def __init__(self, sandbox_ids: _Optional[_Iterable[str]] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class BulkDeleteResponse(_message.Message):
    __slots__ = ("deleted_ids",)
    DELETED_IDS_FIELD_NUMBER: _ClassVar[int]
    deleted_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, deleted_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class Limits(_message.Message):
    __slots__ = ("wall_time_s", "cpu_time_s", "memory_bytes", "max_pids", "max_output_bytes", "max_file_size_bytes", "max_open_files", "kill_on_output_limit")
    WALL_TIME_S_FIELD_NUMBER: _ClassVar[int]
    CPU_TIME_S_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_PIDS_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_FILE_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_OPEN_FILES_FIELD_NUMBER: _ClassVar[int]
    KILL_ON_OUTPUT_LIMIT_FIELD_NUMBER: _ClassVar[int]
    wall_time_s: float
    cpu_time_s: float
    memory_bytes: int
    max_pids: int
    max_output_bytes: int
    max_file_size_bytes: int
    max_open_files: int
    kill_on_output_limit: bool
    def __init__(self, wall_time_s: _Optional[float] = ..., cpu_time_s: _Optional[float] = ..., memory_bytes: _Optional[int] = ..., max_pids: _Optional[int] = ..., max_output_bytes: _Optional[int] = ..., max_file_size_bytes: _Optional[int] = ..., max_open_files: _Optional[int] = ..., kill_on_output_limit: _Optional[bool] = ...) -> None: ...

class ExecRequest(_message.Message):
    __slots__ = ("sandbox_id", "argv", "env", "cwd", "stdin", "limits", "timeout_s", "keep_descendants")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    ARGV_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    KEEP_DESCENDANTS_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    argv: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    cwd: str
    stdin: bytes
    limits: Limits
    timeout_s: float
    keep_descendants: bool
    def __init__(self, sandbox_id: _Optional[str] = ..., argv: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., cwd: _Optional[str] = ..., stdin: _Optional[bytes] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., timeout_s: _Optional[float] = ..., keep_descendants: _Optional[bool] = ...) -> None: ...

class ExecResult(_message.Message):
    __slots__ = ("exit_code", "signal", "stdout", "stderr", "timed_out", "oom_killed", "stdout_truncated", "stderr_truncated", "wall_time_s", "cpu_time_s", "peak_memory_bytes", "cpu_limited", "pids_limited", "file_size_limited", "path")
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    OOM_KILLED_FIELD_NUMBER: _ClassVar[int]
    STDOUT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    STDERR_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    WALL_TIME_S_FIELD_NUMBER: _ClassVar[int]
    CPU_TIME_S_FIELD_NUMBER: _ClassVar[int]
    PEAK_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    CPU_LIMITED_FIELD_NUMBER: _ClassVar[int]
    PIDS_LIMITED_FIELD_NUMBER: _ClassVar[int]
    FILE_SIZE_LIMITED_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    exit_code: int
    signal: int
    stdout: bytes
    stderr: bytes
    timed_out: bool
    oom_killed: bool
    stdout_truncated: bool
    stderr_truncated: bool
    wall_time_s: float
    cpu_time_s: float
    peak_memory_bytes: int
    cpu_limited: bool
    pids_limited: bool
    file_size_limited: bool
    path: ExecPath
    def __init__(self, exit_code: _Optional[int] = ..., signal: _Optional[int] = ..., stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., timed_out: _Optional[bool] = ..., oom_killed: _Optional[bool] = ..., stdout_truncated: _Optional[bool] = ..., stderr_truncated: _Optional[bool] = ..., wall_time_s: _Optional[float] = ..., cpu_time_s: _Optional[float] = ..., peak_memory_bytes: _Optional[int] = ..., cpu_limited: _Optional[bool] = ..., pids_limited: _Optional[bool] = ..., file_size_limited: _Optional[bool] = ..., path: _Optional[_Union[ExecPath, str]] = ...) -> None: ...

class ExecInput(_message.Message):
    __slots__ = ("start", "stdin", "close_stdin", "signal")
    START_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    CLOSE_STDIN_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    start: ExecRequest
    stdin: bytes
    close_stdin: bool
    signal: int
    def __init__(self, start: _Optional[_Union[ExecRequest, _Mapping]] = ..., stdin: _Optional[bytes] = ..., close_stdin: _Optional[bool] = ..., signal: _Optional[int] = ...) -> None: ...

class ExecEvent(_message.Message):
    __slots__ = ("started", "stdout", "stderr", "exit", "keepalive")
    class Started(_message.Message):
        __slots__ = ("pid",)
        PID_FIELD_NUMBER: _ClassVar[int]
        pid: int
        def __init__(self, pid: _Optional[int] = ...) -> None: ...
    class Keepalive(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    STARTED_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    KEEPALIVE_FIELD_NUMBER: _ClassVar[int]
    started: ExecEvent.Started
    stdout: bytes
    stderr: bytes
    exit: ExecResult
    keepalive: ExecEvent.Keepalive
    def __init__(self, started: _Optional[_Union[ExecEvent.Started, _Mapping]] = ..., stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., exit: _Optional[_Union[ExecResult, _Mapping]] = ..., keepalive: _Optional[_Union[ExecEvent.Keepalive, _Mapping]] = ...) -> None: ...

class WriteFilesRequest(_message.Message):
    __slots__ = ("sandbox_id", "files")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    files: _containers.RepeatedCompositeFieldContainer[FileEntry]
    def __init__(self, sandbox_id: _Optional[str] = ..., files: _Optional[_Iterable[_Union[FileEntry, _Mapping]]] = ...) -> None: ...

class WriteFilesResponse(_message.Message):
    __slots__ = ("bytes_written",)
    BYTES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    bytes_written: int
    def __init__(self, bytes_written: _Optional[int] = ...) -> None: ...

class ReadFileRequest(_message.Message):
    __slots__ = ("sandbox_id", "path", "chunk_size", "offset", "length", "max_bytes")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    CHUNK_SIZE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    path: str
    chunk_size: int
    offset: int
    length: int
    max_bytes: int
    def __init__(self, sandbox_id: _Optional[str] = ..., path: _Optional[str] = ..., chunk_size: _Optional[int] = ..., offset: _Optional[int] = ..., length: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class FileChunk(_message.Message):
    __slots__ = ("data", "offset", "total_size")
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    offset: int
    total_size: int
    def __init__(self, data: _Optional[bytes] = ..., offset: _Optional[int] = ..., total_size: _Optional[int] = ...) -> None: ...

class ListDirRequest(_message.Message):
    __slots__ = ("sandbox_id", "path")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    path: str
    def __init__(self, sandbox_id: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class DirEntry(_message.Message):
    __slots__ = ("name", "is_dir", "size", "mode", "is_symlink")
    NAME_FIELD_NUMBER: _ClassVar[int]
    IS_DIR_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    IS_SYMLINK_FIELD_NUMBER: _ClassVar[int]
    name: str
    is_dir: bool
    size: int
    mode: int
    is_symlink: bool
    def __init__(self, name: _Optional[str] = ..., is_dir: _Optional[bool] = ..., size: _Optional[int] = ..., mode: _Optional[int] = ..., is_symlink: _Optional[bool] = ...) -> None: ...

class ListDirResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[DirEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[DirEntry, _Mapping]]] = ...) -> None: ...

class RemoveRequest(_message.Message):
    __slots__ = ("sandbox_id", "path", "recursive")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    RECURSIVE_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    path: str
    recursive: bool
    def __init__(self, sandbox_id: _Optional[str] = ..., path: _Optional[str] = ..., recursive: _Optional[bool] = ...) -> None: ...

class RemoveResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TestCase(_message.Message):
    __slots__ = ("input", "expected_output", "check")
    INPUT_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    CHECK_FIELD_NUMBER: _ClassVar[int]
    input: bytes
    expected_output: bytes
    check: str
    def __init__(self, input: _Optional[bytes] = ..., expected_output: _Optional[bytes] = ..., check: _Optional[str] = ...) -> None: ...

class RunTestsRequest(_message.Message):
    __slots__ = ("sandbox_id", "language", "source", "tests", "limits", "stop_on_first_failure", "compare", "float_tolerance", "excerpt_bytes")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TESTS_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    STOP_ON_FIRST_FAILURE_FIELD_NUMBER: _ClassVar[int]
    COMPARE_FIELD_NUMBER: _ClassVar[int]
    FLOAT_TOLERANCE_FIELD_NUMBER: _ClassVar[int]
    EXCERPT_BYTES_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    language: str
    source: str
    tests: _containers.RepeatedCompositeFieldContainer[TestCase]
    limits: Limits
    stop_on_first_failure: bool
    compare: Compare
    float_tolerance: float
    excerpt_bytes: int
    def __init__(self, sandbox_id: _Optional[str] = ..., language: _Optional[str] = ..., source: _Optional[str] = ..., tests: _Optional[_Iterable[_Union[TestCase, _Mapping]]] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., stop_on_first_failure: _Optional[bool] = ..., compare: _Optional[_Union[Compare, str]] = ..., float_tolerance: _Optional[float] = ..., excerpt_bytes: _Optional[int] = ...) -> None: ...

class CaseResult(_message.Message):
    __slots__ = ("verdict", "exit_code", "signal", "wall_time_s", "cpu_time_s", "peak_memory_bytes", "stdout", "stderr", "message", "path")
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    WALL_TIME_S_FIELD_NUMBER: _ClassVar[int]
    CPU_TIME_S_FIELD_NUMBER: _ClassVar[int]
    PEAK_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    verdict: Verdict
    exit_code: int
    signal: int
    wall_time_s: float
    cpu_time_s: float
    peak_memory_bytes: int
    stdout: bytes
    stderr: bytes
    message: str
    path: ExecPath
    def __init__(self, verdict: _Optional[_Union[Verdict, str]] = ..., exit_code: _Optional[int] = ..., signal: _Optional[int] = ..., wall_time_s: _Optional[float] = ..., cpu_time_s: _Optional[float] = ..., peak_memory_bytes: _Optional[int] = ..., stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., message: _Optional[str] = ..., path: _Optional[_Union[ExecPath, str]] = ...) -> None: ...

class RunTestsReport(_message.Message):
    __slots__ = ("cases", "passed", "total", "compiled", "compile_output", "compile_time_s", "wall_time_s")
    CASES_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    COMPILED_FIELD_NUMBER: _ClassVar[int]
    COMPILE_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    COMPILE_TIME_S_FIELD_NUMBER: _ClassVar[int]
    WALL_TIME_S_FIELD_NUMBER: _ClassVar[int]
    cases: _containers.RepeatedCompositeFieldContainer[CaseResult]
    passed: int
    total: int
    compiled: bool
    compile_output: bytes
    compile_time_s: float
    wall_time_s: float
    def __init__(self, cases: _Optional[_Iterable[_Union[CaseResult, _Mapping]]] = ..., passed: _Optional[int] = ..., total: _Optional[int] = ..., compiled: _Optional[bool] = ..., compile_output: _Optional[bytes] = ..., compile_time_s: _Optional[float] = ..., wall_time_s: _Optional[float] = ...) -> None: ...

class RunTestsBatchRequest(_message.Message):
    __slots__ = ("sandbox_id", "submissions", "parallelism")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    SUBMISSIONS_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    submissions: _containers.RepeatedCompositeFieldContainer[RunTestsRequest]
    parallelism: int
    def __init__(self, sandbox_id: _Optional[str] = ..., submissions: _Optional[_Iterable[_Union[RunTestsRequest, _Mapping]]] = ..., parallelism: _Optional[int] = ...) -> None: ...

class RunTestsBatchResult(_message.Message):
    __slots__ = ("index", "report")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    index: int
    report: RunTestsReport
    def __init__(self, index: _Optional[int] = ..., report: _Optional[_Union[RunTestsReport, _Mapping]] = ...) -> None: ...

class InfoRequest(_message.Message):
    __slots__ = ("sandbox_id",)
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class InfoResponse(_message.Message):
    __slots__ = ("version", "cgroup_version", "seccomp", "namespaces", "languages", "zygote", "sandbox_uid", "sandbox_gid", "running_execs", "total_execs", "memory_bytes", "uptime_s", "work_dir", "landlock", "egress_allowed", "egress_refused")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CGROUP_VERSION_FIELD_NUMBER: _ClassVar[int]
    SECCOMP_FIELD_NUMBER: _ClassVar[int]
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    LANGUAGES_FIELD_NUMBER: _ClassVar[int]
    ZYGOTE_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_UID_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_GID_FIELD_NUMBER: _ClassVar[int]
    RUNNING_EXECS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_EXECS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    WORK_DIR_FIELD_NUMBER: _ClassVar[int]
    LANDLOCK_FIELD_NUMBER: _ClassVar[int]
    EGRESS_ALLOWED_FIELD_NUMBER: _ClassVar[int]
    EGRESS_REFUSED_FIELD_NUMBER: _ClassVar[int]
    version: str
    cgroup_version: str
    seccomp: bool
    namespaces: _containers.RepeatedScalarFieldContainer[str]
    languages: _containers.RepeatedScalarFieldContainer[str]
    zygote: bool
    sandbox_uid: int
    sandbox_gid: int
    running_execs: int
    total_execs: int
    memory_bytes: int
    uptime_s: float
    work_dir: str
    landlock: bool
    egress_allowed: int
    egress_refused: int
    def __init__(self, version: _Optional[str] = ..., cgroup_version: _Optional[str] = ..., seccomp: _Optional[bool] = ..., namespaces: _Optional[_Iterable[str]] = ..., languages: _Optional[_Iterable[str]] = ..., zygote: _Optional[bool] = ..., sandbox_uid: _Optional[int] = ..., sandbox_gid: _Optional[int] = ..., running_execs: _Optional[int] = ..., total_execs: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., uptime_s: _Optional[float] = ..., work_dir: _Optional[str] = ..., landlock: _Optional[bool] = ..., egress_allowed: _Optional[int] = ..., egress_refused: _Optional[int] = ...) -> None: ...

class HealthRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PoolStats(_message.Message):
    __slots__ = ("values",)
    class ValuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.ScalarMap[str, float]
    def __init__(self, values: _Optional[_Mapping[str, float]] = ...) -> None: ...

class HealthResponse(_message.Message):
    __slots__ = ("status", "version", "pools", "sandboxes")
    class PoolsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: PoolStats
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[PoolStats, _Mapping]] = ...) -> None: ...
    STATUS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    POOLS_FIELD_NUMBER: _ClassVar[int]
    SANDBOXES_FIELD_NUMBER: _ClassVar[int]
    status: str
    version: str
    pools: _containers.MessageMap[str, PoolStats]
    sandboxes: int
    def __init__(self, status: _Optional[str] = ..., version: _Optional[str] = ..., pools: _Optional[_Mapping[str, PoolStats]] = ..., sandboxes: _Optional[int] = ...) -> None: ...
