"""The envelope of every endpoint of the HTTP APIs: draining, the caller's key, bounded bodies, the
one refusal type, the status of each error (`statuses.py`) and the log of a failure of ours,
written once; each API supplies only its error body's shape and the statuses it gives a bad
request and a failure of the server's own.

A handler raises `Refused` for an answer of its own API (a status and a message, and any other
fields of that API's error body), or a `sandboxes.errors` exception, which is answered with the
table's status: an API module then holds its routes and field mappings, nothing else.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from sandboxes import errors as E
from sandboxes.server.http.bodies import BodyTooLarge, read_json
from sandboxes.server.http.statuses import http_status

__all__ = ["Envelope", "ErrorBody", "Refused", "code_body", "detail_body", "message_body", "text_body"]

log = logging.getLogger("sandboxes.server.http")

ErrorBody = Callable[[int, str], "dict[str, Any] | str"]  # a JSON object, or plain text
Endpoint = Callable[[Request], Awaitable[Response]]

SHUTTING_DOWN = "server is shutting down"


class Refused(Exception):
    """An answer of the API's own: `status`, `message`, and `fields` of its error body beside the
    message (`{"error": "sandbox_terminated"}`, say); `headers` go with the response."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        fields: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.fields = dict(fields or {})
        self.headers = dict(headers or {})


def detail_body(status: int, message: str) -> dict[str, Any]:
    """`{"detail": ...}`: SandboxFusion's and the Prime API's (FastAPI's) error body."""
    return {"detail": message}


def message_body(status: int, message: str) -> dict[str, Any]:
    """`{"message": ...}`: Piston's error body."""
    return {"message": message}


def code_body(status: int, message: str) -> dict[str, Any]:
    """`{"code": <status>, "message": ...}`: the E2B API's and its daemon's error body."""
    return {"code": status, "message": message}


def text_body(status: int, message: str) -> str:
    """The message as plain text: the E2B code interpreter's errors (its SDK reads the body)."""
    return message


@dataclass(frozen=True)
class Envelope:
    """How one API answers. `body` is its error body's shape; `invalid` the status of a bad
    request (400, or 422 where the platform answers that); `other` the status of a failure of the
    server's own (500, or 502 where the platform's gateway answers that)."""

    name: str
    body: ErrorBody
    invalid: int = 400
    other: int = 500

    def error(
        self,
        status: int,
        message: str,
        *,
        fields: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        body = self.body(status, message)
        if isinstance(body, str):
            return PlainTextResponse(body, status_code=status, headers=headers)
        return JSONResponse({**body, **(fields or {})}, status_code=status, headers=headers)

    def failure(self, e: E.SandboxError) -> tuple[int, str]:
        """The status and message of `e`: a failure of ours names its kind."""
        status = http_status(e, invalid=self.invalid, other=self.other)
        return status, e.message if status < 500 else f"{e.kind.value}: {e.message}"

    def answer(self, exc: Exception, request: Request | None = None) -> Response | None:
        """The response to `exc`, or None if it is none of the envelope's (the server's last
        handler answers it as an internal error)."""
        if isinstance(exc, Refused):
            return self.error(exc.status, exc.message, fields=exc.fields, headers=exc.headers)
        if isinstance(exc, BodyTooLarge):
            # The rest of the body is not read: the connection cannot serve another request.
            return self.error(413, str(exc), headers={"Connection": "close"})
        if isinstance(exc, E.SandboxError):
            status, message = self.failure(exc)
            if status >= 500 and request is not None:
                log.warning(
                    "%s %s %s failed: %s: %s",
                    self.name,
                    request.method,
                    request.url.path,
                    exc.kind.value,
                    exc.message,
                )
            return self.error(status, message)
        return None

    def guard(self, fn: Callable[[Request], Awaitable[Response]]) -> Endpoint:
        """`fn` with its refusals and errors answered in this API's shape."""

        async def endpoint(request: Request) -> Response:
            try:
                return await fn(request)
            except Exception as e:
                answered = self.answer(e, request)
                if answered is None:
                    raise
                return answered

        return endpoint

    def keyed(
        self,
        fn: Callable[[Request, str], Awaitable[Response]],
        *,
        owner: Callable[[Request], str],
        draining: Callable[[], bool],
    ) -> Endpoint:
        """`fn(request, owner)` for the owner of the caller's key (`owner(request)`; 401 when it
        raises), refused with 503 while the server drains, its errors answered by `guard`."""

        async def call(request: Request) -> Response:
            if draining():
                raise Refused(503, SHUTTING_DOWN)
            try:
                who = owner(request)
            except E.SandboxError as e:
                raise Refused(401, e.message) from None
            return await fn(request, who)

        return self.guard(call)

    @staticmethod
    async def json(request: Request, limit: int) -> Any:
        """The body as JSON, at most `limit` bytes (`BodyTooLarge`), else `InvalidRequest`."""
        try:
            return await read_json(request, limit)
        except BodyTooLarge:
            raise
        except ValueError as e:
            raise E.InvalidRequest(str(e)) from None
