"""A Connect service of another platform's wire, served by `connectrpc` from a table of its methods:
`service_app("process.Process", [Rpc("Start", "server_stream", Req, Resp, handler), ...])`.

Both codecs (binary protobuf and JSON) are offered; the client's content type picks one. A body
that does not decode is the caller's error (`invalid_argument`), not the server's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from connectrpc.code import Code
from connectrpc.codec import Codec
from connectrpc.compat import google_protobuf_codecs
from connectrpc.errors import ConnectError
from connectrpc.method import IdempotencyLevel, MethodInfo
from connectrpc.server import ConnectASGIApplication, Endpoint
from google.protobuf.json_format import ParseError
from google.protobuf.message import DecodeError

__all__ = ["Rpc", "service_app"]


@dataclass(frozen=True)
class Rpc:
    name: str
    kind: str  # "unary" | "server_stream" | "client_stream"
    request: type
    response: type
    handler: Callable[..., Any]
    no_side_effects: bool = False


class _Checked:
    """A codec whose undecodable input is `invalid_argument`."""

    def __init__(self, codec: Codec) -> None:
        self._codec = codec

    def name(self) -> str:
        return self._codec.name()

    def encode(self, message: Any) -> bytes:
        return self._codec.encode(message)

    def decode(self, data: bytes | bytearray, message_class: Any) -> Any:
        try:
            return self._codec.decode(data, message_class)
        except (ParseError, DecodeError, UnicodeDecodeError) as e:
            raise ConnectError(Code.INVALID_ARGUMENT, f"the request does not decode: {e}") from None


_CODECS: list[Any] = [_Checked(c) for c in google_protobuf_codecs()]


def service_app(
    service: str, rpcs: Sequence[Rpc], *, read_max_bytes: int = 64 << 20
) -> ConnectASGIApplication:
    """The ASGI app of `service` (paths `/<service>/<Method>`)."""

    def endpoints(_: object) -> dict[str, Any]:
        table = {}
        for rpc in rpcs:
            level = IdempotencyLevel.NO_SIDE_EFFECTS if rpc.no_side_effects else IdempotencyLevel.UNKNOWN
            info: MethodInfo = MethodInfo(
                name=rpc.name,
                service_name=service,
                input=rpc.request,
                output=rpc.response,
                idempotency_level=level,
            )
            table[f"/{service}/{rpc.name}"] = getattr(Endpoint, rpc.kind)(info, rpc.handler)
        return table

    class _App(ConnectASGIApplication):
        @property
        def path(self) -> str:
            return f"/{service}"

    return _App(service=object(), endpoints=endpoints, codecs=_CODECS, read_max_bytes=read_max_bytes)
