"""The Prometheus endpoint of the real server: pool gauges per template, claims, latencies, errors."""

from __future__ import annotations

import asyncio
import re
import urllib.request

import pytest
from server_helpers import KEY_A, wait_for

from sandboxes import errors as E
from sandboxes.client import AsyncSandboxClient
from sandboxes.server.criu import probe


async def scrape(port: int) -> str:
    # Off the event loop: the pool gauges are read on the loop during the scrape.
    def get() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
            return r.read().decode()

    return await asyncio.to_thread(get)


def value(text: str, name: str, **labels: str) -> float | None:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = ",".join(sorted((m.group(2) or "{}")[1:-1].split(","))) if m.group(2) else ""
        if got == want:
            return float(m.group(3))
    return None


async def test_metrics_endpoint_serves_pool_gauges(make_server) -> None:
    server = await make_server(warm=1, metrics_port=0)
    assert server.metrics_port
    await wait_for(lambda: server.pool.stats()["default"]["warm"] >= 1, "warm sandbox")
    text = await scrape(server.metrics_port)
    assert value(text, "sandboxes_pool_warm", template="default") >= 1
    assert value(text, "sandboxes_pool_warm_target", template="default") == 1
    assert value(text, "sandboxes_pool_claimed", template="default") == 0

    async with AsyncSandboxClient(server.address, KEY_A, timeout=60) as client:
        sb = await client.create()
        await sb.exec(["true"])
        with pytest.raises(E.NotFound):
            await client.get("sb-nope")
        text = await scrape(server.metrics_port)
        assert value(text, "sandboxes_pool_claimed", template="default") == 1
        assert value(text, "sandboxes_claims_total", template="default") == 1
        assert value(text, "sandboxes_create_seconds_count", template="default") == 1
        assert value(text, "sandboxes_exec_seconds_count", method="Exec") == 1
        assert value(text, "sandboxes_errors_total", method="Get", kind="not_found") == 1
        assert value(text, "sandboxes_inflight_execs") == 0
        assert value(text, "sandboxes_live") == 1
        assert value(text, "sandboxes_criu_ok") == (1 if probe().ok else 0)
        assert value(text, "sandboxes_pool_claim_wait_seconds_count", template="default") == 1
        await sb.close()
        text = await scrape(server.metrics_port)
        assert value(text, "sandboxes_pool_claimed", template="default") == 0
        assert value(text, "sandboxes_deletes_total", reason="delete") == 1
