"""The server process: a Pool, the gRPC service on top of it, metrics, graceful shutdown.

`Server` is the embeddable unit (tests start it on port 0 in their own event loop); `serve()` runs
one until SIGTERM / SIGINT: stop accepting calls, let running ones finish within the grace period,
destroy every claimed sandbox, then close the pool (which destroys the warm ones).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Self

import grpc

from sandboxes.server import criu
from sandboxes.server.auth import ApiKeys
from sandboxes.server.core import ServerCore
from sandboxes.server.metrics import Metrics
from sandboxes.server.quota import QuotaLimits, Quotas
from sandboxes.server.service import SandboxService, ServiceConfig

if TYPE_CHECKING:
    from sandboxes.server.http.surface import Surface

__all__ = ["MAX_MESSAGE_BYTES", "Server", "serve"]

log = logging.getLogger("sandboxes.server")

MAX_MESSAGE_BYTES = 64 << 20


def _version() -> str:
    try:
        import sandboxes

        v = getattr(sandboxes, "__version__", None)
        if v:
            return str(v)
        from importlib.metadata import version

        return version("sandboxes")
    except Exception:  # noqa: BLE001 (a missing version must not stop the server)
        return "0+unknown"


class Server:
    """One server: `await start()` (returns self, `port` is bound), `await stop()`.

    Give either `pool` (already started; the server closes it on stop unless `own_pool=False`) or
    the pool's arguments (`backend`, `warm`, `templates`, `pool_kwargs`).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 50051,
        auth: ApiKeys | None = None,
        insecure: bool = False,
        api_keys_file: str | None = None,
        backend: str = "local",
        warm: int = 1,
        templates: Mapping[str, Any] | None = None,
        pool_kwargs: Mapping[str, Any] | None = None,
        pool: Any = None,
        own_pool: bool = True,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
        quota: QuotaLimits | None = None,
        config: ServiceConfig | None = None,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        grace_s: float = 10.0,
        http_port: int | None = None,
        http_insecure: bool = False,
        ports_port: int | None = None,
        image_metadata_key: str | None = None,
    ) -> None:
        # Fail on a missing key configuration before building anything.
        self.auth = auth or ApiKeys.from_sources(api_keys_file, insecure=insecure)
        self.host = host
        self.requested_port = port
        self.backend = backend
        self.warm = warm
        self.templates = templates
        self.pool_kwargs = dict(pool_kwargs or {})
        self.pool = pool
        self.own_pool = own_pool if pool is not None else True
        self.metrics_port_requested = metrics_port
        self.metrics_host = metrics_host
        self.quotas = Quotas(quota or QuotaLimits())
        self.config = config or ServiceConfig()
        self.max_message_bytes = max_message_bytes
        self.grace_s = grace_s
        self.metrics = Metrics()
        self.core: ServerCore | None = None
        self.service: SandboxService | None = None
        self.grpc: grpc.aio.Server | None = None
        self.port: int | None = None
        self.metrics_port: int | None = None
        self._stopped = asyncio.Event()
        self._stopping: asyncio.Task | None = None
        # The HTTP-compatible APIs (`http/`: SandboxFusion, Piston, Prime, E2B), on the same host, when asked.
        self.http_port_requested = http_port
        self.http_insecure = http_insecure
        # A metadata key whose value, at an E2B create, names the image or template to run.
        self.image_metadata_key = image_metadata_key
        self.http: Any = None
        self.surfaces: list[Surface] = []  # the APIs on the HTTP port, in the order they are matched
        self.http_port: int | None = None
        # Sandboxes' ports reached from outside (`ports.py`): on the HTTP port, and on a listener
        # of their own when asked.
        self.ports_port_requested = ports_port
        self.ports: Any = None
        self.ports_port: int | None = None

    @property
    def address(self) -> str:
        host = self.host if self.host not in ("0.0.0.0", "::", "[::]") else "127.0.0.1"
        return f"{host}:{self.port}"

    async def start(self) -> Self:
        # The host's CRIU is probed (once per process, in a thread: it runs `criu`) while the rest
        # starts; start() returns with its answer in Health, the metrics and the start's log line.
        probing = asyncio.ensure_future(asyncio.to_thread(criu.probe))
        if self.pool is None:
            from sandboxes.pool import Pool

            kwargs = dict(self.pool_kwargs)
            if self.templates is not None:
                kwargs["templates"] = dict(self.templates)
            elif (
                self.http_port_requested is not None
                and isinstance(self.backend, str)
                and not ({"template", "image"} & set(kwargs))
            ):
                from sandboxes.server.image_templates import default_templates

                if (agent_ready := default_templates(self.backend)) is not None:
                    kwargs["templates"] = agent_ready
            self.pool = Pool(backend=self.backend, warm=self.warm, **kwargs)
            await self.pool.__aenter__()
        try:
            self.core = ServerCore(
                self.pool,
                quotas=self.quotas,
                metrics=self.metrics,
                bounds=self.config.bounds,
                default_claim_timeout_s=self.config.default_claim_timeout_s,
            )
            self.service = SandboxService(self.core, self.auth, config=self.config, version=_version())
            await self.core.join_cluster()
            self.metrics.bind_pool(self.pool.stats)
            if self.metrics_port_requested is not None:
                self.metrics_port = self.metrics.start_http(self.metrics_port_requested, self.metrics_host)
            options = [
                ("grpc.max_receive_message_length", self.max_message_bytes),
                ("grpc.max_send_message_length", self.max_message_bytes),
                ("grpc.so_reuseport", 0),
                ("grpc.keepalive_time_ms", 60_000),
                ("grpc.http2.max_pings_without_data", 0),
                ("grpc.keepalive_permit_without_calls", 1),
            ]
            self.grpc = grpc.aio.server(options=options)
            self.grpc.add_generic_rpc_handlers((self.service.handler(),))
            self.port = self.grpc.add_insecure_port(f"{self.host}:{self.requested_port}")
            if not self.port:
                raise OSError(f"cannot bind {self.host}:{self.requested_port}")
            await self.grpc.start()
            self.core.start()
            host = self.host if self.host not in ("0.0.0.0", "::", "[::]") else "127.0.0.1"
            if self.ports_port_requested is not None or self.http_port_requested is not None:
                from sandboxes.server.http.e2b import IN_SANDBOX_PORTS
                from sandboxes.server.ports import PortProxy

                self.ports = PortProxy(self.core, reserved=IN_SANDBOX_PORTS)
                self.core.ports = self.ports
                self.core.ports_bind = (self.host, host)
            if self.ports_port_requested is not None:
                self.ports_port = await self.ports.start(self.host, self.ports_port_requested)
                self.core.ports_base = f"{host}:{self.ports_port}"
            if self.http_port_requested is not None:
                from sandboxes.server.http import HttpServer
                from sandboxes.server.http.daytona import DaytonaApi
                from sandboxes.server.http.e2b import E2bApi
                from sandboxes.server.http.fusion import FusionApi
                from sandboxes.server.http.openhands import OpenHandsApi
                from sandboxes.server.http.opensandbox import OpenSandboxApi
                from sandboxes.server.http.piston import PistonApi
                from sandboxes.server.http.prime import PrimeApi

                core = self.core
                self.surfaces = [
                    FusionApi(core, self.auth, insecure=self.http_insecure),
                    PistonApi(core, self.auth, insecure=self.http_insecure),
                    PrimeApi(core, self.auth),
                    E2bApi(core, self.auth, image_key=self.image_metadata_key),
                    DaytonaApi(core, self.auth),
                    OpenSandboxApi(core, self.auth),
                    OpenHandsApi(core, self.auth),
                ]
                self.http = HttpServer(self.surfaces, ports=self.ports, grace_s=self.grace_s)
                self.http_port = await self.http.start(self.host, self.http_port_requested)
                if self.ports_port is None:  # sandboxes' ports are reached on the HTTP port
                    self.core.ports_base = f"{host}:{self.http_port}"
            host_criu = await probing
            self.metrics.criu_ok.set(1 if host_criu.ok else 0)
        except BaseException:
            probing.cancel()
            await self._teardown(grace=0)
            raise
        log.info(
            "server started",
            extra={
                "address": self.address,
                "backend": self.backend,
                "metrics_port": self.metrics_port,
                "http_port": self.http_port,
                "ports_port": self.ports_port,
                "auth": "api-key" if self.auth.enabled else "insecure",
                "criu": dataclasses.asdict(host_criu),
            },
        )
        return self

    async def stop(self, grace: float | None = None) -> None:
        """Graceful stop; idempotent and safe to call concurrently."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._teardown(self.grace_s if grace is None else grace))
        await asyncio.shield(self._stopping)

    async def _teardown(self, grace: float) -> None:
        log.info("server stopping", extra={"grace_s": grace})
        if self.core is not None:
            self.core.draining = True
        if self.http is not None:
            try:
                await self.http.stop()
            except Exception:
                log.exception("stopping the HTTP endpoint failed")
        if self.ports is not None:
            try:
                await self.ports.stop()
            except Exception:
                log.exception("stopping the ports listener failed")
        if self.grpc is not None:
            try:
                if self.core is not None:
                    # New calls are refused as `Draining` (clients resend them elsewhere) while
                    # the running ones finish; then the transport goes.
                    await self.core.drain(grace)
                await self.grpc.stop(min(grace, 1.0))
            except Exception:
                log.exception("stopping the gRPC server failed")
        if self.core is not None:
            await self.core.close()
        if self.pool is not None and self.own_pool:
            try:
                await self.pool.close()
            except Exception:
                log.exception("closing the pool failed")
        self.metrics.stop_http()
        self._stopped.set()
        log.info("server stopped")

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def serve(
    *,
    stop: asyncio.Event | None = None,
    handle_signals: bool = True,
    **server_kwargs: Any,
) -> None:
    """Run a server until SIGTERM / SIGINT (or until `stop` is set), then stop it gracefully."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed = []
    if handle_signals:
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, stop.set)
                installed.append(sig)
            except (NotImplementedError, RuntimeError):
                pass
    server = Server(**server_kwargs)
    try:
        await server.start()
        await stop.wait()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        await server.stop()
