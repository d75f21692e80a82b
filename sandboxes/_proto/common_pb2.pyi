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

class TerminalSize(_message.Message):
    __slots__ = ("rows", "cols")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLS_FIELD_NUMBER: _ClassVar[int]
    rows: int
    cols: int
    def __init__(self, rows: _Optional[int] = ..., cols: _Optional[int] = ...) -> None: ...

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

class FileEntry(_message.Message):
    __slots__ = ("path", "data", "mode")
    PATH_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    path: str
    data: bytes
    mode: int
    def __init__(self, path: _Optional[str] = ..., data: _Optional[bytes] = ..., mode: _Optional[int] = ...) -> None: ...

class WriteFilesResponse(_message.Message):
    __slots__ = ("bytes_written",)
    BYTES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    bytes_written: int
    def __init__(self, bytes_written: _Optional[int] = ...) -> None: ...

class FileChunk(_message.Message):
    __slots__ = ("data", "offset", "total_size")
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    offset: int
    total_size: int
    def __init__(self, data: _Optional[bytes] = ..., offset: _Optional[int] = ..., total_size: _Optional[int] = ...) -> None: ...

class DirEntry(_message.Message):
    __slots__ = ("name", "is_dir", "size", "mode", "is_symlink", "path", "mtime", "uid", "gid", "owner", "group", "symlink_target", "target_is_dir", "type")
    NAME_FIELD_NUMBER: _ClassVar[int]
    IS_DIR_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    IS_SYMLINK_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    MTIME_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    GID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    SYMLINK_TARGET_FIELD_NUMBER: _ClassVar[int]
    TARGET_IS_DIR_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    is_dir: bool
    size: int
    mode: int
    is_symlink: bool
    path: str
    mtime: float
    uid: int
    gid: int
    owner: str
    group: str
    symlink_target: str
    target_is_dir: bool
    type: str
    def __init__(self, name: _Optional[str] = ..., is_dir: _Optional[bool] = ..., size: _Optional[int] = ..., mode: _Optional[int] = ..., is_symlink: _Optional[bool] = ..., path: _Optional[str] = ..., mtime: _Optional[float] = ..., uid: _Optional[int] = ..., gid: _Optional[int] = ..., owner: _Optional[str] = ..., group: _Optional[str] = ..., symlink_target: _Optional[str] = ..., target_is_dir: _Optional[bool] = ..., type: _Optional[str] = ...) -> None: ...

class ListDirResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[DirEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[DirEntry, _Mapping]]] = ...) -> None: ...

class RemoveResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class FileOpRequest(_message.Message):
    __slots__ = ("stat", "make_dir", "move", "set_permissions", "find", "search")
    STAT_FIELD_NUMBER: _ClassVar[int]
    MAKE_DIR_FIELD_NUMBER: _ClassVar[int]
    MOVE_FIELD_NUMBER: _ClassVar[int]
    SET_PERMISSIONS_FIELD_NUMBER: _ClassVar[int]
    FIND_FIELD_NUMBER: _ClassVar[int]
    SEARCH_FIELD_NUMBER: _ClassVar[int]
    stat: StatOp
    make_dir: MakeDirOp
    move: MoveOp
    set_permissions: SetPermissionsOp
    find: FindOp
    search: SearchOp
    def __init__(self, stat: _Optional[_Union[StatOp, _Mapping]] = ..., make_dir: _Optional[_Union[MakeDirOp, _Mapping]] = ..., move: _Optional[_Union[MoveOp, _Mapping]] = ..., set_permissions: _Optional[_Union[SetPermissionsOp, _Mapping]] = ..., find: _Optional[_Union[FindOp, _Mapping]] = ..., search: _Optional[_Union[SearchOp, _Mapping]] = ...) -> None: ...

class StatOp(_message.Message):
    __slots__ = ("path",)
    PATH_FIELD_NUMBER: _ClassVar[int]
    path: str
    def __init__(self, path: _Optional[str] = ...) -> None: ...

class MakeDirOp(_message.Message):
    __slots__ = ("path", "mode", "exist_ok", "user")
    PATH_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    EXIST_OK_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    path: str
    mode: int
    exist_ok: bool
    user: str
    def __init__(self, path: _Optional[str] = ..., mode: _Optional[int] = ..., exist_ok: _Optional[bool] = ..., user: _Optional[str] = ...) -> None: ...

class MoveOp(_message.Message):
    __slots__ = ("source", "destination", "make_parents", "into_directory", "user")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    MAKE_PARENTS_FIELD_NUMBER: _ClassVar[int]
    INTO_DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    source: str
    destination: str
    make_parents: bool
    into_directory: bool
    user: str
    def __init__(self, source: _Optional[str] = ..., destination: _Optional[str] = ..., make_parents: _Optional[bool] = ..., into_directory: _Optional[bool] = ..., user: _Optional[str] = ...) -> None: ...

class SetPermissionsOp(_message.Message):
    __slots__ = ("path", "mode", "owner", "group")
    PATH_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    path: str
    mode: int
    owner: str
    group: str
    def __init__(self, path: _Optional[str] = ..., mode: _Optional[int] = ..., owner: _Optional[str] = ..., group: _Optional[str] = ...) -> None: ...

class FindOp(_message.Message):
    __slots__ = ("path", "pattern")
    PATH_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    path: str
    pattern: str
    def __init__(self, path: _Optional[str] = ..., pattern: _Optional[str] = ...) -> None: ...

class SearchOp(_message.Message):
    __slots__ = ("path", "text")
    PATH_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    path: str
    text: str
    def __init__(self, path: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class FileMatch(_message.Message):
    __slots__ = ("path", "line", "content")
    PATH_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    path: str
    line: int
    content: str
    def __init__(self, path: _Optional[str] = ..., line: _Optional[int] = ..., content: _Optional[str] = ...) -> None: ...

class FileOpResponse(_message.Message):
    __slots__ = ("entries", "paths", "matches")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    PATHS_FIELD_NUMBER: _ClassVar[int]
    MATCHES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[DirEntry]
    paths: _containers.RepeatedScalarFieldContainer[str]
    matches: _containers.RepeatedCompositeFieldContainer[FileMatch]
    def __init__(self, entries: _Optional[_Iterable[_Union[DirEntry, _Mapping]]] = ..., paths: _Optional[_Iterable[str]] = ..., matches: _Optional[_Iterable[_Union[FileMatch, _Mapping]]] = ...) -> None: ...

class TestCase(_message.Message):
    __slots__ = ("input", "expected_output", "check")
    INPUT_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    CHECK_FIELD_NUMBER: _ClassVar[int]
    input: bytes
    expected_output: bytes
    check: str
    def __init__(self, input: _Optional[bytes] = ..., expected_output: _Optional[bytes] = ..., check: _Optional[str] = ...) -> None: ...

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

class RunTestsBatchResult(_message.Message):
    __slots__ = ("index", "report")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    index: int
    report: RunTestsReport
    def __init__(self, index: _Optional[int] = ..., report: _Optional[_Union[RunTestsReport, _Mapping]] = ...) -> None: ...

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
