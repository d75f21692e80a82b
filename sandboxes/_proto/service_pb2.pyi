from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateRequest(_message.Message):
    __slots__ = ("template", "labels", "env", "files", "ttl_s", "idempotency_key", "timeout_s", "checkpoint_id", "volumes")
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
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    VOLUMES_FIELD_NUMBER: _ClassVar[int]
    template: str
    labels: _containers.ScalarMap[str, str]
    env: _containers.ScalarMap[str, str]
    files: _containers.RepeatedCompositeFieldContainer[_common_pb2.FileEntry]
    ttl_s: float
    idempotency_key: str
    timeout_s: float
    checkpoint_id: str
    volumes: _containers.RepeatedCompositeFieldContainer[VolumeMount]
    def __init__(self, template: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., env: _Optional[_Mapping[str, str]] = ..., files: _Optional[_Iterable[_Union[_common_pb2.FileEntry, _Mapping]]] = ..., ttl_s: _Optional[float] = ..., idempotency_key: _Optional[str] = ..., timeout_s: _Optional[float] = ..., checkpoint_id: _Optional[str] = ..., volumes: _Optional[_Iterable[_Union[VolumeMount, _Mapping]]] = ...) -> None: ...

class VolumeMount(_message.Message):
    __slots__ = ("volume", "path", "read_only")
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    volume: str
    path: str
    read_only: bool
    def __init__(self, volume: _Optional[str] = ..., path: _Optional[str] = ..., read_only: _Optional[bool] = ...) -> None: ...

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

class PauseRequest(_message.Message):
    __slots__ = ("sandbox_id", "files_only")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    FILES_ONLY_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    files_only: bool
    def __init__(self, sandbox_id: _Optional[str] = ..., files_only: _Optional[bool] = ...) -> None: ...

class PauseResponse(_message.Message):
    __slots__ = ("changed",)
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    changed: bool
    def __init__(self, changed: _Optional[bool] = ...) -> None: ...

class ResumeRequest(_message.Message):
    __slots__ = ("sandbox_id", "ttl_s")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    ttl_s: float
    def __init__(self, sandbox_id: _Optional[str] = ..., ttl_s: _Optional[float] = ...) -> None: ...

class ResumeResponse(_message.Message):
    __slots__ = ("changed", "sandbox")
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    changed: bool
    sandbox: Sandbox
    def __init__(self, changed: _Optional[bool] = ..., sandbox: _Optional[_Union[Sandbox, _Mapping]] = ...) -> None: ...

class GetPortRequest(_message.Message):
    __slots__ = ("sandbox_id", "port")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    port: int
    def __init__(self, sandbox_id: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class Port(_message.Message):
    __slots__ = ("url", "host", "token")
    URL_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    url: str
    host: str
    token: str
    def __init__(self, url: _Optional[str] = ..., host: _Optional[str] = ..., token: _Optional[str] = ...) -> None: ...

class SetNetworkRequest(_message.Message):
    __slots__ = ("sandbox_id", "network")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    network: Network
    def __init__(self, sandbox_id: _Optional[str] = ..., network: _Optional[_Union[Network, _Mapping]] = ...) -> None: ...

class Network(_message.Message):
    __slots__ = ("rules", "deny", "mode")
    RULES_FIELD_NUMBER: _ClassVar[int]
    DENY_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    rules: _containers.RepeatedScalarFieldContainer[str]
    deny: bool
    mode: str
    def __init__(self, rules: _Optional[_Iterable[str]] = ..., deny: _Optional[bool] = ..., mode: _Optional[str] = ...) -> None: ...

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

class ExecRequest(_message.Message):
    __slots__ = ("sandbox_id", "argv", "env", "cwd", "stdin", "limits", "timeout_s", "keep_descendants", "terminal", "user")
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
    TERMINAL_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    argv: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    cwd: str
    stdin: bytes
    limits: _common_pb2.Limits
    timeout_s: float
    keep_descendants: bool
    terminal: _common_pb2.TerminalSize
    user: str
    def __init__(self, sandbox_id: _Optional[str] = ..., argv: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., cwd: _Optional[str] = ..., stdin: _Optional[bytes] = ..., limits: _Optional[_Union[_common_pb2.Limits, _Mapping]] = ..., timeout_s: _Optional[float] = ..., keep_descendants: _Optional[bool] = ..., terminal: _Optional[_Union[_common_pb2.TerminalSize, _Mapping]] = ..., user: _Optional[str] = ...) -> None: ...

class ExecInput(_message.Message):
    __slots__ = ("start", "stdin", "close_stdin", "signal", "resize")
    START_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    CLOSE_STDIN_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    RESIZE_FIELD_NUMBER: _ClassVar[int]
    start: ExecRequest
    stdin: bytes
    close_stdin: bool
    signal: int
    resize: _common_pb2.TerminalSize
    def __init__(self, start: _Optional[_Union[ExecRequest, _Mapping]] = ..., stdin: _Optional[bytes] = ..., close_stdin: _Optional[bool] = ..., signal: _Optional[int] = ..., resize: _Optional[_Union[_common_pb2.TerminalSize, _Mapping]] = ...) -> None: ...

class WriteFilesRequest(_message.Message):
    __slots__ = ("sandbox_id", "files", "user")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    files: _containers.RepeatedCompositeFieldContainer[_common_pb2.FileEntry]
    user: str
    def __init__(self, sandbox_id: _Optional[str] = ..., files: _Optional[_Iterable[_Union[_common_pb2.FileEntry, _Mapping]]] = ..., user: _Optional[str] = ...) -> None: ...

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

class ListDirRequest(_message.Message):
    __slots__ = ("sandbox_id", "path", "depth")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    path: str
    depth: int
    def __init__(self, sandbox_id: _Optional[str] = ..., path: _Optional[str] = ..., depth: _Optional[int] = ...) -> None: ...

class FileOpRequest(_message.Message):
    __slots__ = ("sandbox_id", "op")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    op: _common_pb2.FileOpRequest
    def __init__(self, sandbox_id: _Optional[str] = ..., op: _Optional[_Union[_common_pb2.FileOpRequest, _Mapping]] = ...) -> None: ...

class RemoveRequest(_message.Message):
    __slots__ = ("sandbox_id", "path", "recursive")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    RECURSIVE_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    path: str
    recursive: bool
    def __init__(self, sandbox_id: _Optional[str] = ..., path: _Optional[str] = ..., recursive: _Optional[bool] = ...) -> None: ...

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
    tests: _containers.RepeatedCompositeFieldContainer[_common_pb2.TestCase]
    limits: _common_pb2.Limits
    stop_on_first_failure: bool
    compare: _common_pb2.Compare
    float_tolerance: float
    excerpt_bytes: int
    def __init__(self, sandbox_id: _Optional[str] = ..., language: _Optional[str] = ..., source: _Optional[str] = ..., tests: _Optional[_Iterable[_Union[_common_pb2.TestCase, _Mapping]]] = ..., limits: _Optional[_Union[_common_pb2.Limits, _Mapping]] = ..., stop_on_first_failure: _Optional[bool] = ..., compare: _Optional[_Union[_common_pb2.Compare, str]] = ..., float_tolerance: _Optional[float] = ..., excerpt_bytes: _Optional[int] = ...) -> None: ...

class RunTestsBatchRequest(_message.Message):
    __slots__ = ("sandbox_id", "submissions", "parallelism")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    SUBMISSIONS_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    submissions: _containers.RepeatedCompositeFieldContainer[RunTestsRequest]
    parallelism: int
    def __init__(self, sandbox_id: _Optional[str] = ..., submissions: _Optional[_Iterable[_Union[RunTestsRequest, _Mapping]]] = ..., parallelism: _Optional[int] = ...) -> None: ...

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
    __slots__ = ("status", "version", "pools", "sandboxes", "criu")
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
    CRIU_FIELD_NUMBER: _ClassVar[int]
    status: str
    version: str
    pools: _containers.MessageMap[str, PoolStats]
    sandboxes: int
    criu: Criu
    def __init__(self, status: _Optional[str] = ..., version: _Optional[str] = ..., pools: _Optional[_Mapping[str, PoolStats]] = ..., sandboxes: _Optional[int] = ..., criu: _Optional[_Union[Criu, _Mapping]] = ...) -> None: ...

class Criu(_message.Message):
    __slots__ = ("found", "version", "ok", "reason")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    found: bool
    version: str
    ok: bool
    reason: str
    def __init__(self, found: _Optional[bool] = ..., version: _Optional[str] = ..., ok: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class CreateCheckpointRequest(_message.Message):
    __slots__ = ("sandbox_id", "name", "ttl_s", "keep", "memory")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    KEEP_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    name: str
    ttl_s: float
    keep: bool
    memory: bool
    def __init__(self, sandbox_id: _Optional[str] = ..., name: _Optional[str] = ..., ttl_s: _Optional[float] = ..., keep: _Optional[bool] = ..., memory: _Optional[bool] = ...) -> None: ...

class Checkpoint(_message.Message):
    __slots__ = ("id", "name", "template", "source_sandbox_id", "size_bytes", "layers", "created_at", "expires_at", "memory")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    template: str
    source_sandbox_id: str
    size_bytes: int
    layers: int
    created_at: float
    expires_at: float
    memory: bool
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., template: _Optional[str] = ..., source_sandbox_id: _Optional[str] = ..., size_bytes: _Optional[int] = ..., layers: _Optional[int] = ..., created_at: _Optional[float] = ..., expires_at: _Optional[float] = ..., memory: _Optional[bool] = ...) -> None: ...

class Volume(_message.Message):
    __slots__ = ("id", "name", "size_bytes", "inodes", "created_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    INODES_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    size_bytes: int
    inodes: int
    created_at: float
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., size_bytes: _Optional[int] = ..., inodes: _Optional[int] = ..., created_at: _Optional[float] = ...) -> None: ...

class CreateVolumeRequest(_message.Message):
    __slots__ = ("name", "size_bytes", "inodes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    INODES_FIELD_NUMBER: _ClassVar[int]
    name: str
    size_bytes: int
    inodes: int
    def __init__(self, name: _Optional[str] = ..., size_bytes: _Optional[int] = ..., inodes: _Optional[int] = ...) -> None: ...

class GetVolumeRequest(_message.Message):
    __slots__ = ("volume",)
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    volume: str
    def __init__(self, volume: _Optional[str] = ...) -> None: ...

class ListVolumesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListVolumesResponse(_message.Message):
    __slots__ = ("volumes",)
    VOLUMES_FIELD_NUMBER: _ClassVar[int]
    volumes: _containers.RepeatedCompositeFieldContainer[Volume]
    def __init__(self, volumes: _Optional[_Iterable[_Union[Volume, _Mapping]]] = ...) -> None: ...

class DeleteVolumeRequest(_message.Message):
    __slots__ = ("volume",)
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    volume: str
    def __init__(self, volume: _Optional[str] = ...) -> None: ...

class DeleteVolumeResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetCheckpointRequest(_message.Message):
    __slots__ = ("checkpoint_id",)
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    checkpoint_id: str
    def __init__(self, checkpoint_id: _Optional[str] = ...) -> None: ...

class ListCheckpointsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListCheckpointsResponse(_message.Message):
    __slots__ = ("checkpoints",)
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    checkpoints: _containers.RepeatedCompositeFieldContainer[Checkpoint]
    def __init__(self, checkpoints: _Optional[_Iterable[_Union[Checkpoint, _Mapping]]] = ...) -> None: ...

class DeleteCheckpointRequest(_message.Message):
    __slots__ = ("checkpoint_id",)
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    checkpoint_id: str
    def __init__(self, checkpoint_id: _Optional[str] = ...) -> None: ...

class DeleteCheckpointResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ForkRequest(_message.Message):
    __slots__ = ("sandbox_id", "count", "labels", "ttl_s", "memory")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    count: int
    labels: _containers.ScalarMap[str, str]
    ttl_s: float
    memory: bool
    def __init__(self, sandbox_id: _Optional[str] = ..., count: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., ttl_s: _Optional[float] = ..., memory: _Optional[bool] = ...) -> None: ...

class ForkResponse(_message.Message):
    __slots__ = ("sandboxes",)
    SANDBOXES_FIELD_NUMBER: _ClassVar[int]
    sandboxes: _containers.RepeatedCompositeFieldContainer[Sandbox]
    def __init__(self, sandboxes: _Optional[_Iterable[_Union[Sandbox, _Mapping]]] = ...) -> None: ...
