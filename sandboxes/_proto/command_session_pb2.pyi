from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Signal(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SIGNAL_UNSPECIFIED: _ClassVar[Signal]
    SIGNAL_SIGKILL: _ClassVar[Signal]
    SIGNAL_SIGTERM: _ClassVar[Signal]
SIGNAL_UNSPECIFIED: Signal
SIGNAL_SIGKILL: Signal
SIGNAL_SIGTERM: Signal

class PTY(_message.Message):
    __slots__ = ("size",)
    class Size(_message.Message):
        __slots__ = ("cols", "rows")
        COLS_FIELD_NUMBER: _ClassVar[int]
        ROWS_FIELD_NUMBER: _ClassVar[int]
        cols: int
        rows: int
        def __init__(self, cols: _Optional[int] = ..., rows: _Optional[int] = ...) -> None: ...
    SIZE_FIELD_NUMBER: _ClassVar[int]
    size: PTY.Size
    def __init__(self, size: _Optional[_Union[PTY.Size, _Mapping]] = ...) -> None: ...

class CommandSpec(_message.Message):
    __slots__ = ("cmd", "args", "envs", "cwd", "user")
    class EnvsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CMD_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    ENVS_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    cmd: str
    args: _containers.RepeatedScalarFieldContainer[str]
    envs: _containers.ScalarMap[str, str]
    cwd: str
    user: str
    def __init__(self, cmd: _Optional[str] = ..., args: _Optional[_Iterable[str]] = ..., envs: _Optional[_Mapping[str, str]] = ..., cwd: _Optional[str] = ..., user: _Optional[str] = ...) -> None: ...

class CommandSessionSelector(_message.Message):
    __slots__ = ("pid", "tag", "session_uuid")
    PID_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    SESSION_UUID_FIELD_NUMBER: _ClassVar[int]
    pid: int
    tag: str
    session_uuid: str
    def __init__(self, pid: _Optional[int] = ..., tag: _Optional[str] = ..., session_uuid: _Optional[str] = ...) -> None: ...

class StartRequest(_message.Message):
    __slots__ = ("command", "pty", "tag", "stdin", "session_uuid")
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    PTY_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    SESSION_UUID_FIELD_NUMBER: _ClassVar[int]
    command: CommandSpec
    pty: PTY
    tag: str
    stdin: bool
    session_uuid: str
    def __init__(self, command: _Optional[_Union[CommandSpec, _Mapping]] = ..., pty: _Optional[_Union[PTY, _Mapping]] = ..., tag: _Optional[str] = ..., stdin: _Optional[bool] = ..., session_uuid: _Optional[str] = ...) -> None: ...

class CommandSessionEvent(_message.Message):
    __slots__ = ("start", "data", "end", "keepalive")
    class StartEvent(_message.Message):
        __slots__ = ("pid",)
        PID_FIELD_NUMBER: _ClassVar[int]
        pid: int
        def __init__(self, pid: _Optional[int] = ...) -> None: ...
    class DataEvent(_message.Message):
        __slots__ = ("stdout", "stderr", "pty")
        STDOUT_FIELD_NUMBER: _ClassVar[int]
        STDERR_FIELD_NUMBER: _ClassVar[int]
        PTY_FIELD_NUMBER: _ClassVar[int]
        stdout: bytes
        stderr: bytes
        pty: bytes
        def __init__(self, stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., pty: _Optional[bytes] = ...) -> None: ...
    class EndEvent(_message.Message):
        __slots__ = ("exit_code", "exited", "status", "error")
        EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
        EXITED_FIELD_NUMBER: _ClassVar[int]
        STATUS_FIELD_NUMBER: _ClassVar[int]
        ERROR_FIELD_NUMBER: _ClassVar[int]
        exit_code: int
        exited: bool
        status: str
        error: str
        def __init__(self, exit_code: _Optional[int] = ..., exited: _Optional[bool] = ..., status: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...
    class KeepAlive(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    START_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    KEEPALIVE_FIELD_NUMBER: _ClassVar[int]
    start: CommandSessionEvent.StartEvent
    data: CommandSessionEvent.DataEvent
    end: CommandSessionEvent.EndEvent
    keepalive: CommandSessionEvent.KeepAlive
    def __init__(self, start: _Optional[_Union[CommandSessionEvent.StartEvent, _Mapping]] = ..., data: _Optional[_Union[CommandSessionEvent.DataEvent, _Mapping]] = ..., end: _Optional[_Union[CommandSessionEvent.EndEvent, _Mapping]] = ..., keepalive: _Optional[_Union[CommandSessionEvent.KeepAlive, _Mapping]] = ...) -> None: ...

class StartResponse(_message.Message):
    __slots__ = ("event",)
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: CommandSessionEvent
    def __init__(self, event: _Optional[_Union[CommandSessionEvent, _Mapping]] = ...) -> None: ...

class ConnectRequest(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: CommandSessionSelector
    def __init__(self, session: _Optional[_Union[CommandSessionSelector, _Mapping]] = ...) -> None: ...

class ConnectResponse(_message.Message):
    __slots__ = ("event",)
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: CommandSessionEvent
    def __init__(self, event: _Optional[_Union[CommandSessionEvent, _Mapping]] = ...) -> None: ...

class CommandSessionInfo(_message.Message):
    __slots__ = ("command", "pid", "tag", "session_uuid")
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    SESSION_UUID_FIELD_NUMBER: _ClassVar[int]
    command: CommandSpec
    pid: int
    tag: str
    session_uuid: str
    def __init__(self, command: _Optional[_Union[CommandSpec, _Mapping]] = ..., pid: _Optional[int] = ..., tag: _Optional[str] = ..., session_uuid: _Optional[str] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ("sessions",)
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[CommandSessionInfo]
    def __init__(self, sessions: _Optional[_Iterable[_Union[CommandSessionInfo, _Mapping]]] = ...) -> None: ...

class CommandInput(_message.Message):
    __slots__ = ("stdin", "pty")
    STDIN_FIELD_NUMBER: _ClassVar[int]
    PTY_FIELD_NUMBER: _ClassVar[int]
    stdin: bytes
    pty: bytes
    def __init__(self, stdin: _Optional[bytes] = ..., pty: _Optional[bytes] = ...) -> None: ...

class SendInputRequest(_message.Message):
    __slots__ = ("session", "input", "input_uuid")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    INPUT_UUID_FIELD_NUMBER: _ClassVar[int]
    session: CommandSessionSelector
    input: CommandInput
    input_uuid: str
    def __init__(self, session: _Optional[_Union[CommandSessionSelector, _Mapping]] = ..., input: _Optional[_Union[CommandInput, _Mapping]] = ..., input_uuid: _Optional[str] = ...) -> None: ...

class SendInputResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SendSignalRequest(_message.Message):
    __slots__ = ("session", "signal", "signal_uuid")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_UUID_FIELD_NUMBER: _ClassVar[int]
    session: CommandSessionSelector
    signal: Signal
    signal_uuid: str
    def __init__(self, session: _Optional[_Union[CommandSessionSelector, _Mapping]] = ..., signal: _Optional[_Union[Signal, str]] = ..., signal_uuid: _Optional[str] = ...) -> None: ...

class SendSignalResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UpdateRequest(_message.Message):
    __slots__ = ("session", "pty")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    PTY_FIELD_NUMBER: _ClassVar[int]
    session: CommandSessionSelector
    pty: PTY
    def __init__(self, session: _Optional[_Union[CommandSessionSelector, _Mapping]] = ..., pty: _Optional[_Union[PTY, _Mapping]] = ...) -> None: ...

class UpdateResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
