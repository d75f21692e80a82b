"""Access to the Kubernetes API server: one client, a rate limiter, and API failures typed as
the pool expects (`BackendUnavailable`, `LaunchError`, ...)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from typing import Any

from ...errors import BackendUnavailable, InvalidRequest, LaunchError, SandboxError
from .config import KubeConfig

log = logging.getLogger(__name__)


class _ApiError(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class _RateLimiter:
    """Token bucket: at most `qps` requests a second on average, bursts of `burst`."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self.tokens = float(self.burst)
        self.last = time.monotonic()
        self.lock = asyncio.Lock()

    async def acquire(self) -> None:
        async with self.lock:
            while True:
                now = time.monotonic()
                self.tokens = min(self.burst, self.tokens + (now - self.last) * self.qps)
                self.last = now
                if self.tokens >= 1:
                    self.tokens -= 1
                    return
                await asyncio.sleep((1 - self.tokens) / self.qps)


class _Api:
    """Raw JSON access to the Kubernetes API through kubernetes_asyncio's configured client.

    kubernetes_asyncio supplies configuration loading (kubeconfig, in-cluster), TLS and token
    refresh; bodies are plain dicts both ways (no model (de)serialization: it is slow at scale).
    """

    def __init__(self, cfg: KubeConfig) -> None:
        self.cfg = cfg
        self.client: Any = None
        self._sem = asyncio.Semaphore(cfg.api_concurrency)
        self._rate = _RateLimiter(cfg.api_qps, cfg.api_concurrency) if cfg.api_qps > 0 else None
        self._open_lock = asyncio.Lock()
        self.requests = 0  # requests sent by this backend (all kinds), for metrics and tests

    async def open(self) -> None:
        async with self._open_lock:
            if self.client is not None:
                return
            try:
                from kubernetes_asyncio import client as kclient
                from kubernetes_asyncio import config as kconfig
            except ImportError as e:
                raise BackendUnavailable(
                    "the kubernetes backend needs kubernetes_asyncio: pip install 'sandboxes[kubernetes]'"
                ) from e
            conf = kclient.Configuration()
            try:
                if self.cfg.api_url:
                    conf.host = self.cfg.api_url.rstrip("/")
                elif os.environ.get("KUBERNETES_SERVICE_HOST") and not self.cfg.kubeconfig:
                    kconfig.load_incluster_config(client_configuration=conf)
                else:
                    await kconfig.load_kube_config(
                        config_file=self.cfg.kubeconfig, context=self.cfg.context, client_configuration=conf
                    )
            except Exception as e:
                raise BackendUnavailable(f"cannot load Kubernetes client configuration: {e}") from e
            conf.connection_pool_maxsize = self.cfg.api_concurrency + 4  # + the watch
            self.client = kclient.ApiClient(conf)

    async def close(self) -> None:
        if self.client is not None:
            client, self.client = self.client, None
            with contextlib.suppress(Exception):
                await client.close()

    async def _send(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None,
        body: Any,
        content_type: str | None,
        timeout: Any,
    ) -> Any:
        await self.open()
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        self.requests += 1
        try:
            return await self.client.call_api(
                path,
                method,
                query_params=query or [],
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout,
            )
        except (TimeoutError, OSError) as e:
            raise BackendUnavailable(f"Kubernetes API {method} {path}: {e!r}") from e
        except Exception as e:  # aiohttp.ClientError and friends
            if type(e).__module__.startswith("aiohttp"):
                raise BackendUnavailable(f"Kubernetes API {method} {path}: {e!r}") from e
            raise

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str | None = None,
    ) -> dict[str, Any]:
        """One API call; returns the JSON body; raises `_ApiError` on a non-2xx answer."""
        async with self._sem:
            if self._rate is not None:
                await self._rate.acquire()
            resp = await self._send(method, path, query, body, content_type, self.cfg.api_timeout_s)
            try:
                raw = await resp.read()
            except Exception as e:
                raise BackendUnavailable(f"Kubernetes API {method} {path}: {e!r}") from e
            finally:
                resp.release()
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            data = {"message": raw[:500].decode(errors="replace")}
        if not 200 <= resp.status < 300:
            raise _ApiError(
                resp.status, str(data.get("reason") or resp.reason), str(data.get("message") or data)
            )
        return data

    async def stream(self, path: str, query: list[tuple[str, str]]) -> Any:
        """A streaming GET (watch): the raw response, whose `.content` yields lines."""
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=None, sock_read=None, connect=self.cfg.api_timeout_s)
        resp = await self._send("GET", path, query, None, None, timeout)
        if resp.status != 200:
            try:
                raw = await resp.read()
            finally:
                resp.release()
            raise _ApiError(resp.status, str(resp.reason), raw[:500].decode(errors="replace"))
        return resp


def _api_failure(e: BaseException, what: str) -> SandboxError:
    """The `sandboxes.errors` exception for an API failure while doing `what`."""
    if isinstance(e, SandboxError):
        return e
    if isinstance(e, _ApiError):
        if e.status in (400, 422):
            return InvalidRequest(f"{what}: the API server rejected it: {e.message}", detail=str(e))
        if e.status in (401, 403):
            return BackendUnavailable(
                f"{what}: not allowed (check the manager's RBAC): {e.message}", detail=str(e)
            )
        if e.status == 409:
            return LaunchError(f"{what}: conflict: {e.message}", detail=str(e), step="conflict")
        return BackendUnavailable(f"{what}: {e}", detail=str(e))
    return BackendUnavailable(f"{what}: {e!r}")
