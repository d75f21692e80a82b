"""The gRPC envelope of the service's verbs: every call is served by the core (refused untouched
while draining), authenticated, decoded by our own deserializer, and any error becomes a status
with the exact kind in trailing metadata (`sandboxes.status`), counted and logged.

Requests are decoded by our own deserializer: a message gRPC cannot parse (e.g. a string field with
invalid UTF-8) becomes a clear INVALID_ARGUMENT instead of an opaque INTERNAL.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from sandboxes import errors as E
from sandboxes.server.auth import ApiKeys
from sandboxes.server.core import ServerCore
from sandboxes.status import status_of, trailing_metadata_of

__all__ = ["Calls", "check"]

log = logging.getLogger("sandboxes.server")


class _BadMessage:
    """What our deserializer returns for bytes that are not a valid message."""

    def __init__(self, type_name: str, error: Exception) -> None:
        self.message = (
            f"request is not a valid {type_name}: {error or 'parse error'} "
            "(string fields must be valid UTF-8)"
        )


def _deserializer(cls: Any) -> Callable[[bytes], Any]:
    name = cls.DESCRIPTOR.full_name

    def deserialize(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except Exception as e:  # noqa: BLE001 (DecodeError and friends: answered as INVALID_ARGUMENT)
            return _BadMessage(name, e)

    return deserialize


def check(request: Any) -> Any:
    """`request`, or `InvalidRequest` if its bytes were not a valid message."""
    if isinstance(request, _BadMessage):
        raise E.InvalidRequest(request.message)
    return request


class Calls:
    """Method handlers of the verbs `fn(request, context, owner)` of one service."""

    def __init__(self, core: ServerCore, auth: ApiKeys) -> None:
        self.core = core
        self.auth = auth

    def unary(self, name: str, fn: Callable, req_cls: Any, resp_cls: Any, *, probe: bool = False) -> Any:
        """A unary verb; a `probe` (health) is served while draining, and to an unauthenticated
        caller with `owner=None`."""

        async def handle(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                with self.core.serving(name, while_draining=probe):
                    try:
                        owner = self.auth.authenticate(context.invocation_metadata())
                    except E.AuthError:
                        if not probe:
                            raise
                        owner = None
                    return await fn(check(request), context, owner)
            except Exception as e:  # noqa: BLE001 (every error becomes a status)
                await self._abort(name, context, e)

        return grpc.unary_unary_rpc_method_handler(
            handle,
            request_deserializer=_deserializer(req_cls),
            response_serializer=resp_cls.SerializeToString,
        )

    def server_stream(self, name: str, fn: Callable[..., AsyncIterator], req_cls: Any, resp_cls: Any) -> Any:
        """A verb answering a stream (its handler checks its request with `check`)."""
        return grpc.unary_stream_rpc_method_handler(
            self._streaming(name, fn),
            request_deserializer=_deserializer(req_cls),
            response_serializer=resp_cls.SerializeToString,
        )

    def bidi_stream(self, name: str, fn: Callable[..., AsyncIterator], req_cls: Any, resp_cls: Any) -> Any:
        """A verb reading and answering streams (its handler checks each message with `check`)."""
        return grpc.stream_stream_rpc_method_handler(
            self._streaming(name, fn),
            request_deserializer=_deserializer(req_cls),
            response_serializer=resp_cls.SerializeToString,
        )

    def _streaming(self, name: str, fn: Callable[..., AsyncIterator]) -> Callable[..., AsyncIterator]:
        async def handle(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator:
            try:
                with self.core.serving(name):
                    owner = self.auth.authenticate(context.invocation_metadata())
                    async for item in fn(request, context, owner):
                        yield item
            except Exception as e:  # noqa: BLE001 (every error becomes a status)
                await self._abort(name, context, e)

        return handle

    async def _abort(self, method: str, context: grpc.aio.ServicerContext, exc: Exception) -> None:
        if isinstance(exc, grpc.aio.AbortError):
            raise exc
        if not isinstance(exc, E.SandboxError):
            log.exception("internal error in %s", method, exc_info=exc)
            exc = E.SandboxError(f"internal error in {method}: {type(exc).__name__}: {exc}")
        kind = exc.kind.value
        self.core.metrics.errors.labels(method, kind).inc()
        log.info(
            "call failed",
            extra={"method": method, "kind": kind, "error": exc.message, "peer": context.peer()},
        )
        await context.abort(status_of(exc), exc.message, trailing_metadata_of(exc))
