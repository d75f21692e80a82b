"""A Connect service of another platform's wire, served by `connectrpc` from a table of its methods:
`service_app("process.Process", [Rpc("Start", "server_stream", Req, Resp, handler), ...])`.

Both codecs (binary protobuf and JSON) are offered; the client's content type picks one."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from connectrpc.compat import google_protobuf_codecs
from connectrpc.method import IdempotencyLevel, MethodInfo
from connectrpc.server import ConnectASGIApplication, Endpoint

__all__ = ["Rpc", "service_app"]


@dataclass(frozen=True)
class Rpc:
    name: str
    kind: str  # "unary" | "server_stream" | "client_stream"
    request: type
    response: type
    handler: Callable[..., Any]
    no_side_effects: bool = False


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

    return _App(
        service=object(), endpoints=endpoints, codecs=google_protobuf_codecs(), read_max_bytes=read_max_bytes
    )
