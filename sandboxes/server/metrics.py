"""Prometheus metrics of the server, served on their own port.

Each server owns a `CollectorRegistry` (several servers can live in one process, e.g. in tests).
Pool gauges are read from `pool.stats()` at scrape time, on the event loop that owns the pool (the
HTTP exporter runs in its own thread), so they are never stale and never race the pool.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import threading
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

__all__ = ["Metrics"]

log = logging.getLogger("sandboxes.server.metrics")

_LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)


def _metric_name(key: str) -> str:
    name = re.sub(r"[^a-zA-Z0-9_]", "_", str(key)).strip("_").lower()
    return name or "value"


class _PoolCollector:
    """Families from `pool.stats()[template]`: a number is a gauge `sandboxes_pool_<field>{template}`
    (a counter when the field ends in `_total`), a `{"buckets", "sum"}` snapshot a histogram."""

    def __init__(self, stats: Callable[[], dict], loop: asyncio.AbstractEventLoop | None) -> None:
        self._stats = stats
        self._loop = loop

    def _snapshot(self) -> dict:
        loop = self._loop
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if loop is None or on_loop or not loop.is_running():
            return self._stats()

        async def read() -> dict:
            return self._stats()

        try:
            return asyncio.run_coroutine_threadsafe(read(), loop).result(timeout=5.0)
        except Exception as e:  # noqa: BLE001 (a scrape must never fail the exporter)
            log.warning("pool stats unavailable for a scrape: %s", e)
            return {}

    def collect(self):
        families: dict[str, Any] = {}

        def family(kind: type, name: str, doc: str) -> Any:
            fam = families.get(name)
            if fam is None:
                fam = families[name] = kind(name, doc, labels=["template"])
            return fam

        try:
            stats = self._snapshot() or {}
        except Exception as e:  # noqa: BLE001
            log.warning("pool stats failed: %s", e)
            stats = {}
        for template, fields in stats.items():
            if not isinstance(fields, dict):
                continue
            labels = [str(template)]
            for key, value in fields.items():
                name = _metric_name(key)
                if isinstance(value, dict) and "buckets" in value:  # a histogram snapshot
                    try:
                        buckets = [(str(le), float(n)) for le, n in value["buckets"].items()]
                        family(HistogramMetricFamily, f"sandboxes_pool_{name}", f"pool {key}").add_metric(
                            labels, buckets=buckets, sum_value=float(value.get("sum", 0.0))
                        )
                    except (TypeError, ValueError):
                        pass
                    continue
                if isinstance(value, bool):
                    value = int(value)
                if not isinstance(value, (int, float)) or math.isnan(value):
                    continue
                if name.endswith("_total"):
                    fam = family(CounterMetricFamily, f"sandboxes_pool_{name[:-6]}", f"pool {key}")
                else:
                    fam = family(GaugeMetricFamily, f"sandboxes_pool_{name}", f"pool {key} per template")
                fam.add_metric(labels, float(value))
        yield from families.values()

    def describe(self):
        return []  # dynamic families: do not collect at registration time


class Metrics:
    """The server's metrics. `bind_pool` before serving; `start_http(port)` to expose them."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.claims = Counter(
            "sandboxes_claims", "sandboxes created (claimed from a pool)", ["template"], registry=r
        )
        self.deletes = Counter("sandboxes_deletes", "sandboxes deleted", ["reason"], registry=r)
        self.create_latency = Histogram(
            "sandboxes_create_seconds",
            "latency of Create until the sandbox is ready",
            ["template"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.exec_latency = Histogram(
            "sandboxes_exec_seconds",
            "latency of Exec, ExecStream and RunTests",
            ["method"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.verdicts = Counter(
            "sandboxes_run_tests_verdicts",
            "test cases judged by RunTests, by verdict",
            ["language", "verdict"],
            registry=r,
        )
        self.errors = Counter(
            "sandboxes_errors", "calls that failed, by error kind", ["method", "kind"], registry=r
        )
        self.inflight_execs = Gauge("sandboxes_inflight_execs", "executions in flight", registry=r)
        self.live_sandboxes = Gauge("sandboxes_live", "claimed sandboxes held by clients", registry=r)
        self.criu_ok = Gauge(
            "sandboxes_criu_ok",
            "1 when the host's CRIU, which memory snapshots need, is 4.1 or later and passes its check",
            registry=r,
        )
        self._http: Any = None
        self._http_thread: threading.Thread | None = None
        self.port: int | None = None

    def bind_pool(self, stats: Callable[[], dict], loop: asyncio.AbstractEventLoop | None = None) -> None:
        loop = loop or asyncio.get_running_loop()
        self.registry.register(_PoolCollector(stats, loop))

    def start_http(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve /metrics on `port` (0: any free port); returns the port."""
        from prometheus_client import start_http_server

        server, thread = start_http_server(port, addr=host, registry=self.registry)
        self._http, self._http_thread = server, thread
        self.port = server.server_port
        return self.port

    def stop_http(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
