"""The remote client: exact exception classes, safe retries only, deadlines, and the Sandbox
interface over the real server."""

from __future__ import annotations

import collections

import grpc
import pytest
import pytest_asyncio
from server_helpers import KEY_A

from sandboxes import errors as E
from sandboxes._proto import common_pb2 as cpb
from sandboxes._proto import service_pb2 as pb
from sandboxes.client import AsyncSandboxClient, RemoteSandbox
from sandboxes.judging import TestCase
from sandboxes.sandbox import SandboxBase
from sandboxes.status import (
    KIND_KEY,
    Unauthenticated,
    error_from_status,
    status_of,
    trailing_metadata_of,
)

ALL_ERRORS = [
    E.InvalidRequest,
    E.NotFound,
    E.AuthError,
    E.QuotaExceeded,
    E.PoolExhausted,
    E.SandboxLost,
    E.SandboxTimeout,
    E.LaunchError,
    E.BackendUnavailable,
    E.Cancelled,
    E.SandboxError,
]


@pytest.mark.parametrize("cls", ALL_ERRORS)
def test_every_error_kind_roundtrips(cls) -> None:
    exc = cls("boom", step="clone") if cls is E.LaunchError else cls("boom")
    back = error_from_status(status_of(exc), exc.message, trailing_metadata_of(exc))
    assert type(back) is cls and back.message == "boom"
    if cls is E.LaunchError:
        assert back.step == "clone"


def test_status_codes() -> None:
    assert status_of(E.InvalidRequest()) == grpc.StatusCode.INVALID_ARGUMENT
    assert status_of(E.NotFound()) == grpc.StatusCode.NOT_FOUND
    assert status_of(Unauthenticated()) == grpc.StatusCode.UNAUTHENTICATED
    assert status_of(E.AuthError()) == grpc.StatusCode.PERMISSION_DENIED
    assert status_of(E.QuotaExceeded()) == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert status_of(E.PoolExhausted()) == grpc.StatusCode.UNAVAILABLE
    assert status_of(E.SandboxLost()) == grpc.StatusCode.ABORTED
    assert status_of(E.SandboxTimeout()) == grpc.StatusCode.DEADLINE_EXCEEDED
    assert status_of(E.Cancelled()) == grpc.StatusCode.CANCELLED
    assert status_of(ValueError()) == grpc.StatusCode.INTERNAL


def test_statuses_from_grpc_itself() -> None:
    # No kind in the trailers: mapped from the code.
    assert type(error_from_status(grpc.StatusCode.UNAVAILABLE, "connection refused")) is E.BackendUnavailable
    assert type(error_from_status(grpc.StatusCode.DEADLINE_EXCEEDED, "")) is E.SandboxTimeout
    assert type(error_from_status(grpc.StatusCode.UNAUTHENTICATED, "")) is E.AuthError
    too_big = "Received message larger than max (104857600 vs. 67108864)"
    assert type(error_from_status(grpc.StatusCode.RESOURCE_EXHAUSTED, too_big)) is E.InvalidRequest
    assert type(error_from_status(grpc.StatusCode.UNKNOWN, "?")) is E.SandboxError


# -- retries against a scripted server ---------------------------------------------------------


class Scripted:
    """A tiny gRPC server answering each method from a script of outcomes (no pool, no agents)."""

    def __init__(self) -> None:
        self.calls: dict[str, list] = collections.defaultdict(list)
        self.deadlines: dict[str, list] = collections.defaultdict(list)  # seconds left on arrival
        self.script: dict[str, list] = {}
        self.server = None
        self.address = ""

    def _handler(self, method: str, resp_cls):
        async def handle(request, context):
            self.calls[method].append(request)
            self.deadlines[method].append(context.time_remaining())
            script = self.script.get(method)
            outcome = script.pop(0) if script else "ok"
            if outcome == "unavailable":
                await context.abort(grpc.StatusCode.UNAVAILABLE, "try again")
            if outcome == "pool_exhausted":
                await context.abort(grpc.StatusCode.UNAVAILABLE, "empty", ((KIND_KEY, "pool_exhausted"),))
            if outcome == "not_found":
                await context.abort(grpc.StatusCode.NOT_FOUND, "gone", ((KIND_KEY, "not_found"),))
            if resp_cls is pb.Sandbox:
                return pb.Sandbox(id="sb-scripted", template="default")
            return resp_cls()

        return grpc.unary_unary_rpc_method_handler(
            handle,
            request_deserializer={
                "Create": pb.CreateRequest,
                "Exec": pb.ExecRequest,
                "Delete": pb.DeleteRequest,
                "List": pb.ListRequest,
                "WriteFiles": pb.WriteFilesRequest,
                "Get": pb.GetRequest,
                "RunTests": pb.RunTestsRequest,
            }[method].FromString,
            response_serializer=resp_cls.SerializeToString,
        )

    async def start(self) -> Scripted:
        self.server = grpc.aio.server()
        methods = {
            "Create": pb.Sandbox,
            "Get": pb.Sandbox,
            "Exec": cpb.ExecResult,
            "Delete": pb.DeleteResponse,
            "List": pb.ListResponse,
            "WriteFiles": cpb.WriteFilesResponse,
            "RunTests": cpb.RunTestsReport,
        }
        self.server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    "sandboxes.v1.Sandboxes", {m: self._handler(m, r) for m, r in methods.items()}
                ),
            )
        )
        port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        self.address = f"127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        await self.server.stop(0)


@pytest_asyncio.fixture
async def scripted():
    s = await Scripted().start()
    yield s
    await s.stop()


@pytest.mark.asyncio
async def test_create_retries_with_one_idempotency_key(scripted) -> None:
    scripted.script["Create"] = ["unavailable", "unavailable", "ok"]
    async with AsyncSandboxClient(scripted.address, "k", retries=3, backoff_s=0.001) as c:
        sb = await c.create(labels={"a": "b"})
    assert sb.id == "sb-scripted"
    keys = {r.idempotency_key for r in scripted.calls["Create"]}
    assert len(scripted.calls["Create"]) == 3 and len(keys) == 1 and keys != {""}


@pytest.mark.asyncio
async def test_retries_give_up(scripted) -> None:
    scripted.script["List"] = ["unavailable"] * 10
    async with AsyncSandboxClient(scripted.address, "k", retries=2, backoff_s=0.001) as c:
        with pytest.raises(E.BackendUnavailable):
            await c.list()
    assert len(scripted.calls["List"]) == 3


@pytest.mark.asyncio
async def test_unsafe_calls_are_not_retried(scripted) -> None:
    scripted.script["Exec"] = ["unavailable", "ok"]
    scripted.script["WriteFiles"] = ["unavailable", "ok"]
    async with AsyncSandboxClient(scripted.address, "k", retries=3, backoff_s=0.001) as c:
        sb = await c.get("sb-scripted")
        with pytest.raises(E.BackendUnavailable):
            await sb.exec(["true"])
        with pytest.raises(E.BackendUnavailable):
            await sb.write_file("a", b"x")
    assert len(scripted.calls["Exec"]) == 1 and len(scripted.calls["WriteFiles"]) == 1


@pytest.mark.asyncio
async def test_run_tests_is_not_retried_and_has_a_derived_deadline(scripted) -> None:
    scripted.script["RunTests"] = ["unavailable", "ok", "ok"]
    async with AsyncSandboxClient(scripted.address, "k", retries=3, backoff_s=0.001) as c:
        sb = await c.get("sb-scripted")
        with pytest.raises(E.BackendUnavailable):
            await sb.run_tests("print(1)", [TestCase("", "1")], time_limit=2)
        assert len(scripted.calls["RunTests"]) == 1
        # 40 s compile margin + 3 x (2 s x 1.1 + 1 s) + 5 s + 10 s network margin = 64.6 s.
        await sb.run_tests("print(1)", [TestCase("", "1")] * 3, time_limit=2, compare="exact")
        req = scripted.calls["RunTests"][-1]
        assert req.sandbox_id == "sb-scripted" and len(req.tests) == 3
        assert req.limits.wall_time_s == 2 and req.compare == cpb.COMPARE_EXACT
        assert 60 < scripted.deadlines["RunTests"][-1] <= 65  # the wire rounds timeouts up
        # 1000 cases get a longer deadline than 3.
        await sb.run_tests("print(1)", [TestCase("", "1")] * 1000, time_limit=2)
        assert 3000 < scripted.deadlines["RunTests"][-1] <= 3255 * 1.01


@pytest.mark.asyncio
async def test_pool_exhausted_is_not_retried(scripted) -> None:
    scripted.script["Create"] = ["pool_exhausted", "ok"]
    async with AsyncSandboxClient(scripted.address, "k", retries=3, backoff_s=0.001) as c:
        with pytest.raises(E.PoolExhausted):
            await c.create()
    assert len(scripted.calls["Create"]) == 1


@pytest.mark.asyncio
async def test_delete_retry_after_lost_answer_is_success(scripted) -> None:
    scripted.script["Delete"] = ["unavailable", "not_found"]
    async with AsyncSandboxClient(scripted.address, "k", retries=3, backoff_s=0.001) as c:
        await c.delete("sb-x")  # the first attempt may have deleted it
        scripted.script["Delete"] = ["not_found"]
        with pytest.raises(E.NotFound):
            await c.delete("sb-x")


@pytest.mark.asyncio
async def test_unreachable_server() -> None:
    async with AsyncSandboxClient("127.0.0.1:1", "k", retries=1, backoff_s=0.001, timeout=10) as c:
        with pytest.raises(E.BackendUnavailable):
            await c.health()


def test_client_arguments() -> None:
    with pytest.raises(E.InvalidRequest):
        AsyncSandboxClient("", "k")
    with pytest.raises(E.InvalidRequest):
        AsyncSandboxClient("x:1", "k", timeout=0)


# -- the Sandbox interface over the real server ------------------------------------------------


@pytest.mark.asyncio
async def test_remote_sandbox_is_a_sandbox(client: AsyncSandboxClient) -> None:
    async with client.sandbox(labels={"ctx": "1"}) as sb:
        assert isinstance(sb, RemoteSandbox) and isinstance(sb, SandboxBase)
        r = await sb.exec("echo $((6 * 7))")  # a str runs through /bin/sh -c
        assert r.stdout == b"42\n" and r.ok
        with pytest.raises(E.InvalidRequest):
            await sb.exec([])  # refused client-side, before the wire
        assert [s.id for s in await client.list({"ctx": "1"})] == [sb.id]
    assert await client.list({"ctx": "1"}) == []


@pytest.mark.asyncio
async def test_health_reports_pools(server, client: AsyncSandboxClient) -> None:
    h = await client.health()
    assert h["status"] == "serving"
    assert "default" in h["pools"] and "warm" in h["pools"]["default"]
    sb = await client.create()
    assert (await client.health())["sandboxes"] == 1
    await sb.close()


@pytest.mark.asyncio
async def test_api_key_from_environment(server, monkeypatch) -> None:
    monkeypatch.setenv("SANDBOXES_API_KEY", KEY_A)
    async with AsyncSandboxClient(server.address) as c:
        assert await c.list() == []


def test_the_client_imports_nothing_of_the_server() -> None:
    import subprocess
    import sys

    code = "import sys, sandboxes.client; print(sorted(m for m in sys.modules if m.startswith('sandboxes.server')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
