"""An EMULATED Kubernetes control plane for tests and benchmarks of the kubernetes backend.

Nothing here is a real cluster. Two pieces:

- `EmulatedApiServer`: PyPI `kmock`'s `KubernetesEmulator` (an in-memory object store served over
  HTTP with list / watch / create / patch / delete), extended with what the backend relies on:
  label selectors on list and watch, `uid` / `resourceVersion` / `creationTimestamp` on created
  objects, `status.phase: Pending` on new pods, garbage collection of Secrets owned by a deleted
  object (the real GC controller's job), a watch that cannot miss events between its initial list
  and its stream, optimistic concurrency (an update naming a `metadata.resourceVersion` other
  than the object's is refused with 409 Conflict, as the real server does), optional injected per-request latency (`latency_s=(lo, hi)`, uniform), and a
  count of every request served (`request_count()`).
- `FakeKubelet`: plays the kubelet for the emulated server. It watches pods (and Secrets, for the
  token volume) over HTTP like a real kubelet. For each sandbox pod it runs the **real agent
  binary** on this machine with the pod's own command line, rewritten for the host: `--listen`
  becomes `tcp:127.0.0.1:<free port>`, the token file and work dir become per-pod temp paths,
  and `--ready-fd` pushes readiness. Once the agent serves, it patches the pod's status (phase
  Running, Ready, podIP 127.0.0.1) together with the annotation `sandboxes.io/agent-port`
  (all emulated pods share 127.0.0.1, so the backend is configured with
  `port_from_annotation=True` to read the port per pod - emulator only). When the agent exits,
  the pod turns Succeeded / Failed; when the pod is deleted, the agent is killed.

  Failure injection by image name: `IMAGE_PULL_ERROR` (waiting: ImagePullBackOff),
  `IMAGE_CRASH` (the container exits 1 at once: phase Failed), `IMAGE_UNSCHEDULABLE` (PodScheduled
  False, forever). `vanish(pod)` kills the agent and deletes the pod (node loss + pod GC).

  With `user_namespaces=True`, a pod that asks for `hostUsers: false` runs as a runtime runs
  such a pod instead (`userns_pod`: its image, unpacked from the local Docker engine, as its
  root file system, idmapped into a user namespace of a host id range of its own; its command
  as the pod's root there; its volumes at their paths; a masked /proc unless `procMount:
  Unmasked`). Only `--listen` and `--ready-fd` are rewritten then. An image of a registry
  (`host:port/...`) the local engine lacks is pulled first, as a node does.

  With `nodes=N` (`emulated_cluster`), N kubelets play N nodes: the API server binds each new pod
  to one of them in turn (a scheduler's part, `spec.nodeName`), and each kubelet runs only its
  node's pods. A node pulls a registry image from the registry the first time one of its pods
  needs it (`FakeKubelet.pulled`), whatever the engine they share already has.

  For scale (benchmarks), `shared_agents=N` points every pod at one of N real agents started with
  one `shared_token` (the backend then needs the same fixed token) instead of one agent per pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import random
import shutil
import signal
import socket
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, Self

import aiohttp
import attrs
import kmock

from sandboxes import _bridge

__all__ = [
    "IMAGE_CRASH",
    "IMAGE_PULL_ERROR",
    "IMAGE_UNSCHEDULABLE",
    "EmulatedApiServer",
    "FakeKubelet",
    "emulated_cluster",
    "match_selector",
]

IMAGE_PULL_ERROR = "emulator.invalid/pull-error:latest"
IMAGE_CRASH = "emulator.invalid/crash:latest"
IMAGE_UNSCHEDULABLE = "emulator.invalid/unschedulable:latest"
# The image the settings `--write-config` writes name (the kubelet runs this machine's agent).
EMULATED_IMAGE = "sandboxes-sandbox:latest"

ANN_AGENT_PORT = "sandboxes.io/agent-port"


CONFLICT = "the object has been modified; please apply your changes to the latest version and try again"


def _now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- label selectors ---------------------------------------------------------------------------------


def _split_selector(sel: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in sel:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def match_selector(selector: str | None, labels: Mapping[str, str] | None) -> bool:
    """Kubernetes label selector semantics: `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`,
    `k notin (a,b)`, comma = and. (EMULATOR helper.)"""
    labels = labels or {}
    for req in _split_selector(selector or ""):
        if " notin " in req:
            k, vals = req.split(" notin ", 1)
            if labels.get(k.strip()) in {v.strip() for v in vals.strip()[1:-1].split(",")}:
                return False
        elif " in " in req:
            k, vals = req.split(" in ", 1)
            if labels.get(k.strip()) not in {v.strip() for v in vals.strip()[1:-1].split(",")}:
                return False
        elif "!=" in req:
            k, v = req.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in req:
            k, v = req.replace("==", "=").split("=", 1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif req.startswith("!"):
            if req[1:].strip() in labels:
                return False
        elif req not in labels:
            return False
    return True


# --- the API server -----------------------------------------------------------------------------------


@attrs.define(kw_only=True)
class EmulatedApiServer(kmock.KubernetesEmulator):
    """EMULATOR of the Kubernetes API server (kmock + the extensions in the module docstring)."""

    latency_s: tuple[float, float] = (0.0, 0.0)
    # Every watch event reaches its watchers this much after it happened (a watch cache that
    # lags the API server's writes, as a real one may under load); settable at any time.
    watch_lag_s: float = 0.0
    _rv: int = attrs.field(default=0, init=False)
    _log: list[str] = attrs.field(factory=list, init=False)
    _updates: asyncio.Lock = attrs.field(factory=asyncio.Lock, init=False)
    # The nodes new pods are bound to in turn (none: pods are bound to no node).
    nodes: tuple[str, ...] = ()
    _bound: int = attrs.field(default=0, init=False)
    # The nodes' kubelets, by node (`emulated_cluster` fills it).
    kubelets: dict[str, Any] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        # The same handlers as kmock's fallbacks, registered ahead of its discovery reactions:
        # matching a request against kmock's filters is costly (~50 ms per request with every
        # fallback tried in turn), and this server sees thousands of them in benchmarks.
        for act, fn in (
            (kmock.action.WATCH, self._serve_watch),
            (kmock.action.LIST, self._serve_list),
            (kmock.action.CREATE, self._serve_create),
            (kmock.action.UPDATE, self._serve_update),
            (kmock.action.DELETE, self._serve_delete),
            (kmock.action.FETCH, self._serve_fetch),
        ):
            self[act] << fn

    def request_count(self) -> int:
        """Requests served so far (every kind: list, watch, create, patch, delete, get)."""
        return len(self._log)

    def requests_since(self, n: int) -> list[str]:
        """'METHOD path' of the requests after the first `n` (for assertions and reports)."""
        return self._log[n:]

    def objects_of(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Live objects of a resource (in-process view, no request)."""
        out = []
        for (res, ns, _name), obj in list(self._objects.items()):
            if res.plural == plural and (namespace is None or ns == namespace) and not obj.deleted:
                out.append(obj.raw)
        return out

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        self._log.append(f"{raw_request.method} {raw_request.path}")
        lo, hi = self.latency_s
        if hi > 0:
            await asyncio.sleep(random.uniform(lo, hi))  # emulated API server latency
        try:
            return await super().__call__(raw_request)
        finally:
            # kmock keeps every request for assertions and matches each new one by scanning them
            # all (quadratic); keep only those in flight, and our own log of the rest.
            self._requests[:] = [r for r in self._requests if r._raw_request is not raw_request]

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        if request.action != kmock.action.UPDATE or request.resource is None or not request.name:
            return await self._handle_one(request)
        # Updates one at a time: the precondition check and the write are one step.
        async with self._updates:
            wanted = (request.data or {}).get("metadata", {}).get("resourceVersion")
            if wanted is not None:
                key = (request.resource, request.namespace, request.name)
                current = self._objects[key] if key in self._objects else None  # noqa: SIM401 (no .get)
                if current is not None and not current.deleted:
                    have = current.raw.get("metadata", {}).get("resourceVersion")
                    if str(wanted) != str(have):
                        return aiohttp.web.json_response(
                            {
                                "apiVersion": "v1",
                                "kind": "Status",
                                "status": "Failure",
                                "code": 409,
                                "reason": "Conflict",
                                "message": (
                                    f"Operation cannot be fulfilled on {request.resource.plural} "
                                    f'"{request.name}": {CONFLICT}'
                                ),
                            },
                            status=409,
                        )
            return await self._handle_one(request)

    async def _handle_one(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        pod_uid = None
        if request.resource is not None and isinstance(request.data, dict):
            if request.action == kmock.action.CREATE:
                meta = request.data.setdefault("metadata", {})
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("creationTimestamp", _now())
                meta["resourceVersion"] = self._next_rv()
                if request.resource.plural == "pods":
                    request.data.setdefault("status", {"phase": "Pending"})
                    spec = request.data.setdefault("spec", {})
                    if self.nodes and not spec.get("nodeName"):
                        spec["nodeName"] = self.nodes[self._bound % len(self.nodes)]
                        self._bound += 1
            elif request.action == kmock.action.UPDATE:
                request.data.setdefault("metadata", {})["resourceVersion"] = self._next_rv()
        if (
            request.action == kmock.action.DELETE
            and request.resource is not None
            and request.resource.plural == "pods"
            and request.name
        ):
            for (res, ns, name), obj in list(self._objects.items()):
                if (
                    res == request.resource
                    and ns == request.namespace
                    and name == request.name
                    and not obj.deleted
                ):
                    pod_uid = obj.raw.get("metadata", {}).get("uid")
        response = await super()._handle(request)
        if pod_uid:
            await self._collect_owned(pod_uid)
        return response

    async def _collect_owned(self, owner_uid: str) -> None:
        """The garbage collector's part: delete objects owned by a deleted object."""
        async with self._lock:
            for (res, _ns, _name), obj in list(self._objects.items()):
                if obj.deleted:
                    continue
                refs = obj.raw.get("metadata", {}).get("ownerReferences") or []
                if any(r.get("uid") == owner_uid for r in refs):
                    raw = obj.raw
                    obj.delete()
                    await self._buses[res].put({"type": "DELETED", "object": raw})

    def _matching(self, request: kmock.Request) -> list[dict[str, Any]]:
        selector = request.params.get("labelSelector")
        out = []
        for (res, ns, _name), obj in self._objects.items():
            if res != request.resource or obj.deleted:
                continue
            if request.namespace is not None and ns != request.namespace:
                continue
            raw = obj.raw
            if match_selector(selector, raw.get("metadata", {}).get("labels")):
                out.append(raw)
        return out

    async def _serve_list(self, request: kmock.Request) -> kmock.Payload:
        async with self._lock:
            items = self._matching(request)
            rv = str(self._rv)
        return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": rv}, "items": items}

    async def _serve_watch(self, request: kmock.Request) -> AsyncIterator[kmock.Payload]:
        yield b""
        assert request.resource is not None
        selector = request.params.get("labelSelector")
        bus = self._buses[request.resource]
        async with self._lock:  # snapshot and mark atomically: no event falls in between
            marker = await bus.mark()
            initial = self._matching(request)
        try:
            for obj in initial:
                yield {"type": "ADDED", "object": obj}
            async for event in self._lagged(bus.stream(since=marker)):
                obj = event.get("object", {})
                meta = obj.get("metadata", {})
                if request.namespace is not None and meta.get("namespace") != request.namespace:
                    continue
                if match_selector(selector, meta.get("labels")):
                    yield event
        finally:
            with contextlib.suppress(Exception):
                await bus.unmark(marker)

    async def _lagged(self, events: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """`events` in order, each no sooner than `watch_lag_s` after the bus had it."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, Any]] = asyncio.Queue()
        end = object()

        async def pump() -> None:
            try:
                async for event in events:
                    queue.put_nowait((loop.time(), event))
            finally:
                queue.put_nowait((loop.time(), end))

        task = asyncio.create_task(pump())
        try:
            while True:
                at, event = await queue.get()
                if event is end:
                    await task  # the stream's own error, if it ended with one
                    return
                # In short steps: a lag set lower meanwhile releases what waits at once.
                while (wait := at + self.watch_lag_s - loop.time()) > 0:
                    await asyncio.sleep(min(wait, 0.05))
                yield event
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


# --- the kubelet -----------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(eq=False)
class _Agent:
    proc: asyncio.subprocess.Process
    port: int
    dir: str
    stopping: bool = False
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    id_base: int | None = None  # a user-namespaced pod's host id range (released when it ends)


class FakeKubelet:
    """EMULATOR of a kubelet: runs each sandbox pod's agent as a real process on this machine and
    reports its status to the emulated API server (see the module docstring)."""

    def __init__(
        self,
        api_url: str,
        *,
        namespace: str | None = None,
        agent_bin: str | None = None,
        shared_agents: int = 0,
        shared_token: str | None = None,
        user_namespaces: bool = False,
        node_name: str | None = None,
    ) -> None:
        self.api_url = str(api_url).rstrip("/")
        self.node_name = node_name
        # Registry images this node pulled from their registry, in order.
        self.pulled: list[str] = []
        self.namespace = namespace
        self.agent_bin = agent_bin or _bridge.agent_path()
        self.shared_agents = shared_agents
        self.shared_token = shared_token
        self.user_namespaces = user_namespaces
        self.root = tempfile.mkdtemp(prefix="fake-kubelet-")
        os.chmod(self.root, 0o755)
        self.agents: dict[str, _Agent] = {}  # pod name -> its agent (per-pod mode)
        self._started: list[_Agent] = []  # every agent started, for `stop` (a kill may be under way)
        self._shared: list[_Agent] = []
        self._next_shared = 0
        self._pods: dict[str, dict[str, Any]] = {}  # waiting for their token secret
        self._secrets: dict[str, dict[str, Any]] = {}
        self._handled: set[str] = set()
        self._gone: set[str] = set()  # pods deleted (an agent started for one is killed at once)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._session: aiohttp.ClientSession | None = None
        self._watching = 0
        self._watch_up = asyncio.Event()
        self.started_pods = 0
        # The cluster's storage for PersistentVolumeClaims (user-namespace mode): an ext4 image
        # per claim, of the size it asks for, made at its first use (as a provisioner binds one).
        self._claims: dict[str, str] = {}  # claim name -> its mounted directory
        self._claim_lock = asyncio.Lock()

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> Self:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        for i in range(self.shared_agents):
            assert self.shared_token, "shared agents need shared_token"
            self._shared.append(await self._spawn(f"shared-{i}", self._shared_argv(), self.shared_token))
        self._spawn_task(self._watch("pods", self._on_pod))
        self._spawn_task(self._watch("secrets", self._on_secret))
        await self._watch_up.wait()
        return self

    async def stop(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        # Every agent, those whose pod was deleted too: a kill cancelled above may have left one
        # running, or its directory and id range behind (`_kill` of an ended one only forgets it).
        await asyncio.gather(*(self._kill(a) for a in self._started))
        self.agents.clear()
        self._shared.clear()
        if self._session is not None:
            await self._session.close()
        if self._claims:
            await asyncio.to_thread(self._free_claims)
        shutil.rmtree(self.root, ignore_errors=True)

    def _storage(self) -> Any:
        from sandboxes.state.volumes import VolumeStore

        return VolumeStore(Path(self.root, "claims"))

    def _free_claims(self) -> None:
        storage = self._storage()
        for v in storage.list():
            storage.release(v.id)
        storage.close()
        self._claims.clear()

    async def _claim_dirs(self, pod: Mapping[str, Any]) -> dict[str, str]:
        """The directory of each PersistentVolumeClaim the pod mounts, provisioned at its first
        use: an ext4 image of the size the claim asks for (`sandboxes.state.volumes`: ENOSPC past it).
        Plain binds, not idmapped as a runtime maps a user-namespaced pod's volumes: a file is
        owned by the host id of the pod that made it, so another pod's root reads but cannot
        change it (EMULATOR limitation)."""
        out: dict[str, str] = {}
        ns = pod["metadata"].get("namespace", "default")
        for v in pod["spec"].get("volumes") or ():
            name = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if not name:
                continue
            async with self._claim_lock:
                if name not in self._claims:
                    async with self._api(
                        "GET", f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}"
                    ) as r:
                        if r.status != 200:
                            raise RuntimeError(f"persistentvolumeclaim {name!r} not found")
                        claim = await r.json()
                    size = int(claim["spec"]["resources"]["requests"]["storage"])
                    storage = self._storage()
                    vol = await asyncio.to_thread(storage.create, name, size_bytes=size)
                    self._claims[name] = await asyncio.to_thread(storage.acquire, vol.id)
                    for d in (storage.root, Path(self._claims[name]).parent):
                        os.chmod(d, 0o755)  # reached by the pod's launcher in its user namespace
            out[name] = self._claims[name]
        return out

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _spawn_task(self, coro: Any) -> asyncio.Task[Any]:
        t = asyncio.ensure_future(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)
        return t

    # --- test controls -------------------------------------------------------------------------

    def agent_pid(self, pod: str) -> int | None:
        a = self.agents.get(pod)
        return a.proc.pid if a else None

    async def kill_agent(self, pod: str) -> None:
        """SIGKILL the pod's agent (the container dies): the pod turns Failed."""
        a = self.agents.get(pod)
        if a is not None:
            with contextlib.suppress(ProcessLookupError):
                a.proc.kill()
            await a.exited.wait()

    async def vanish(self, pod: str, namespace: str = "default") -> None:
        """Node loss: the agent dies and the pod object is deleted (pod GC / eviction)."""
        a = self.agents.get(pod)
        if a is not None:
            a.stopping = True
        await self.kill_agent(pod)
        async with self._api("DELETE", f"/api/v1/namespaces/{namespace}/pods/{pod}") as r:
            assert r.status in (200, 404), await r.text()

    # --- API plumbing --------------------------------------------------------------------------

    def _api(self, method: str, path: str, **kw: Any) -> Any:
        assert self._session is not None
        return self._session.request(method, self.api_url + path, **kw)

    async def _patch_status(self, pod: Mapping[str, Any], patch: dict[str, Any]) -> None:
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status"
        async with self._api(
            "PATCH", path, data=json.dumps(patch), headers={"Content-Type": "application/merge-patch+json"}
        ) as r:
            await r.read()  # 404: the pod was deleted meanwhile

    async def _watch(self, plural: str, handler: Any) -> None:
        base = f"/api/v1/namespaces/{self.namespace}/{plural}" if self.namespace else f"/api/v1/{plural}"
        while True:
            try:
                async with self._api("GET", base, params={"watch": "true"}) as r:
                    self._watching += 1
                    if self._watching >= 2:
                        self._watch_up.set()
                    async for line in r.content:
                        if line.strip():
                            ev = json.loads(line)
                            handler(ev.get("type"), ev.get("object") or {})
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - reconnect like a kubelet would
                await asyncio.sleep(0.1)

    # --- events --------------------------------------------------------------------------------

    def _on_secret(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata", {})
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if kind == "DELETED":
            self._secrets.pop(key, None)
            return
        self._secrets[key] = obj
        for name, pod in list(self._pods.items()):
            self._maybe_start(name, pod)

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata", {})
        name = meta.get("name")
        labels = meta.get("labels") or {}
        if labels.get("app.kubernetes.io/component") != "sandbox":
            return  # not a sandbox pod (e.g. an emulated manager pod): nothing to run
        if self.node_name is not None and pod.get("spec", {}).get("nodeName") != self.node_name:
            return  # another node's
        if kind == "DELETED" or meta.get("deletionTimestamp"):
            self._gone.add(name)
            self._pods.pop(name, None)
            a = self.agents.pop(name, None)
            if a is not None:
                a.stopping = True
                self._spawn_task(self._kill(a))
            return
        if name in self._handled:
            return
        self._maybe_start(name, pod)

    def _token_secret(self, pod: Mapping[str, Any]) -> str | None:
        for v in pod.get("spec", {}).get("volumes") or ():
            if "secret" in v:
                return f"{pod['metadata']['namespace']}/{v['secret']['secretName']}"
        return None

    def _maybe_start(self, name: str, pod: dict[str, Any]) -> None:
        if name in self._handled:
            return
        secret_key = self._token_secret(pod)
        if secret_key is not None and secret_key not in self._secrets:
            self._pods[name] = pod  # the volume cannot be mounted yet: wait for the secret
            return
        self._pods.pop(name, None)
        self._handled.add(name)
        token = None
        if secret_key is not None:
            import base64

            token = base64.b64decode(self._secrets[secret_key]["data"]["token"]).decode()
        self._spawn_task(self._run_pod(pod, token))

    # --- running pods ---------------------------------------------------------------------------

    def _shared_argv(self) -> list[str]:
        return ["--lease-ttl", "0"]

    async def _run_pod(self, pod: dict[str, Any], token: str | None) -> None:
        spec = pod.get("spec", {})
        container = spec["containers"][0]
        image = container.get("image", "")
        if image == IMAGE_UNSCHEDULABLE:
            await self._patch_status(
                pod,
                {
                    "status": {
                        "phase": "Pending",
                        "conditions": [
                            {
                                "type": "PodScheduled",
                                "status": "False",
                                "reason": "Unschedulable",
                                "message": "0/1 nodes are available: emulated insufficient cpu.",
                            }
                        ],
                    }
                },
            )
            return
        if image == IMAGE_PULL_ERROR:
            await self._patch_status(
                pod,
                {
                    "status": {
                        "phase": "Pending",
                        "containerStatuses": [
                            {
                                "name": container["name"],
                                "ready": False,
                                "restartCount": 0,
                                "image": image,
                                "state": {
                                    "waiting": {
                                        "reason": "ImagePullBackOff",
                                        "message": f'Back-off pulling image "{image}"',
                                    }
                                },
                            }
                        ],
                    }
                },
            )
            return
        if image == IMAGE_CRASH:
            await self._patch_status(
                pod,
                {
                    "status": {
                        "phase": "Failed",
                        "containerStatuses": [
                            {
                                "name": container["name"],
                                "ready": False,
                                "restartCount": 0,
                                "image": image,
                                "state": {
                                    "terminated": {
                                        "exitCode": 1,
                                        "reason": "Error",
                                        "message": "emulated crash at start",
                                    }
                                },
                            }
                        ],
                    }
                },
            )
            return
        if self._shared:
            agent = self._shared[self._next_shared % len(self._shared)]
            self._next_shared += 1
        else:
            if token is None:
                env_token = next(
                    (
                        e.get("value")
                        for e in container.get("env") or ()
                        if e.get("name") == "SANDBOX_AGENT_TOKEN"
                    ),
                    None,
                )
                token = env_token
            if token is None:
                await self._fail(pod, "no token in the pod spec")
                return
            argv = self._host_argv(list(container.get("args") or []))
            try:
                if self.user_namespaces and spec.get("hostUsers") is False:
                    agent = await self._spawn_in_userns(pod, token)
                else:
                    agent = await self._spawn(pod["metadata"]["name"], argv, token)
            except Exception as e:  # noqa: BLE001
                await self._fail(pod, f"agent did not start: {e}")
                return
            if pod["metadata"]["name"] in self._gone:
                await self._kill(agent)
                return
            self.agents[pod["metadata"]["name"]] = agent
            self._spawn_task(self._wait_exit(pod, agent))
        self.started_pods += 1
        now = _now()
        await self._patch_status(
            pod,
            {
                "metadata": {"annotations": {ANN_AGENT_PORT: str(agent.port)}},
                "status": {
                    "phase": "Running",
                    "podIP": "127.0.0.1",
                    "podIPs": [{"ip": "127.0.0.1"}],
                    "hostIP": "127.0.0.1",
                    "startTime": now,
                    "conditions": [
                        {"type": t, "status": "True", "lastTransitionTime": now}
                        for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
                    ],
                    "containerStatuses": [
                        {
                            "name": container["name"],
                            "ready": True,
                            "started": True,
                            "restartCount": 0,
                            "image": image,
                            "state": {"running": {"startedAt": now}},
                        }
                    ],
                },
            },
        )

    def _host_argv(self, args: list[str]) -> list[str]:
        """The pod's agent arguments with pod paths and the listen address made host-local."""
        out: list[str] = []
        i = 0
        while i < len(args):
            a = args[i]
            if a in ("--listen", "--token-file", "--work-dir") and i + 1 < len(args):
                i += 2  # replaced per pod in _spawn
                continue
            out.append(a)
            i += 1
        return out

    async def _spawn(self, name: str, argv: list[str], token: str) -> _Agent:
        d = os.path.join(self.root, name)
        os.makedirs(d, exist_ok=True)
        work, tmp = os.path.join(d, "work"), os.path.join(d, "tmp")
        os.makedirs(work, exist_ok=True)
        os.makedirs(tmp, exist_ok=True)
        os.chmod(work, 0o777)  # like an emptyDir
        os.chmod(tmp, 0o1777)
        token_file = os.path.join(d, "token")
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o400)
        with os.fdopen(fd, "w") as f:
            f.write(token)
        port = free_port()
        r, w = os.pipe()
        # --no-cgroups: a real unprivileged pod has no writable cgroups either, and an agent the
        # kubelet kills must not leave exec cgroups behind on this host.
        cmd = [
            self.agent_bin,
            "--listen",
            f"tcp:127.0.0.1:{port}",
            "--token-file",
            token_file,
            "--work-dir",
            work,
            "--ready-fd",
            str(w),
            "--no-cgroups",
            *argv,
        ]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TMPDIR": tmp}
        proc = await _start(cmd, env, d, w)
        ready = await _read_ready(r)
        agent = _Agent(proc, port, d)
        self._started.append(agent)
        if ready != b"R":
            await self._not_serving(agent)
        return agent

    async def _spawn_in_userns(self, pod: dict[str, Any], token: str) -> _Agent:
        """The pod's container as a runtime runs a user-namespaced one (`userns_pod`)."""
        from sandboxes.backends import ids, images

        name = pod["metadata"]["name"]
        spec, container = pod["spec"], pod["spec"]["containers"][0]
        d = os.path.join(self.root, name)
        os.makedirs(d, exist_ok=True)
        if container["image"] not in self.pulled and await asyncio.to_thread(_pull, container["image"]):
            self.pulled.append(container["image"])
        image = await asyncio.to_thread(images.resolve, container["image"])
        base = ids.claim(f"emulated-pod-{name}")
        try:
            volumes = self._volumes(spec, container, d, base, token, await self._claim_dirs(pod))
            port = free_port()
            r, w = os.pipe()
            args = list(container.get("args") or [])
            for i, a in enumerate(args[:-1]):
                if a == "--listen":
                    args[i + 1] = f"tcp:127.0.0.1:{port}"
            security = container.get("securityContext") or {}
            launch = {
                "image": str(image),
                "upper": os.path.join(d, "rootfs"),
                "base": base,
                "volumes": volumes,
                "unmasked": security.get("procMount") == "Unmasked",
                "capabilities": list((security.get("capabilities") or {}).get("add") or ()),
                "argv": [*container["command"], *args, "--ready-fd", str(w), "--no-cgroups"],
                "env": {
                    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    **{e["name"]: e.get("value", "") for e in container.get("env") or ()},
                },
            }
            launcher = [sys.executable, "-m", "sandboxes_testing.userns_pod", json.dumps(launch)]
            proc = await _start(launcher, None, d, w)
            agent = _Agent(proc, port, d, id_base=base)
            self._started.append(agent)
            ready = await _read_ready(r)
        except BaseException:
            ids.release(base, f"emulated-pod-{name}")
            raise
        if ready != b"R":
            await self._not_serving(agent)
        return agent

    async def _not_serving(self, agent: _Agent) -> NoReturn:
        """Ends a pod whose agent exited before serving; its log's end is the reason (as a
        container's termination message is, with FallbackToLogsOnError)."""
        log = Path(agent.dir, "log").read_text(errors="replace")[-2000:].strip()
        await self._kill(agent)
        raise RuntimeError(f"agent exited before serving (code {agent.proc.returncode}): {log}")

    @staticmethod
    def _volumes(
        spec: Mapping[str, Any],
        container: Mapping[str, Any],
        d: str,
        base: int,
        token: str,
        claims: Mapping[str, str],
    ) -> list[tuple[str, str, bool]]:
        """The pod's emptyDirs and its token Secret as directories of this machine, owned by the
        pod's root (as a user-namespaced pod's volumes are), and its claims' directories (`claims`):
        (directory, mount path, read-only)."""
        by_name = {v["name"]: v for v in spec.get("volumes") or ()}
        out = []
        for m in container.get("volumeMounts") or ():
            v = by_name[m["name"]]
            if "persistentVolumeClaim" in v:
                ro = bool(m.get("readOnly") or v["persistentVolumeClaim"].get("readOnly"))
                out.append((claims[v["persistentVolumeClaim"]["claimName"]], m["mountPath"], ro))
                continue
            host = os.path.join(d, "volumes", m["name"])
            os.makedirs(host)
            if "secret" in v:
                for item in v["secret"].get("items") or ():
                    f = os.path.join(host, item["path"])
                    with open(f, "w") as out_file:
                        out_file.write(token)
                    os.chown(f, base, base)
                    os.chmod(f, item.get("mode", v["secret"].get("defaultMode", 0o644)))
                os.chmod(host, 0o755)
            else:
                os.chmod(host, 0o777)
            os.chown(host, base, base)
            out.append((host, m["mountPath"], bool(m.get("readOnly"))))
        return out

    async def _wait_exit(self, pod: dict[str, Any], agent: _Agent) -> None:
        code = await agent.proc.wait()
        agent.exited.set()
        if agent.stopping:
            return
        name = pod["metadata"]["name"]
        self.agents.pop(name, None)
        _forget(agent)
        phase = "Succeeded" if code == 0 else "Failed"
        reason = "Completed" if code == 0 else "Error"
        await self._patch_status(
            pod,
            {
                "status": {
                    "phase": phase,
                    "conditions": [
                        {"type": "Ready", "status": "False", "reason": "PodCompleted"},
                        {"type": "ContainersReady", "status": "False", "reason": "PodCompleted"},
                    ],
                    "containerStatuses": [
                        {
                            "name": "agent",
                            "ready": False,
                            "started": False,
                            "restartCount": 0,
                            "state": {
                                "terminated": {
                                    "exitCode": code if code >= 0 else 128 - code,
                                    "reason": reason,
                                }
                            },
                        }
                    ],
                }
            },
        )

    async def _fail(self, pod: dict[str, Any], message: str) -> None:
        await self._patch_status(
            pod, {"status": {"phase": "Failed", "message": message, "reason": "EmulatedKubeletError"}}
        )

    async def _kill(self, agent: _Agent) -> None:
        agent.stopping = True
        if agent.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                agent.proc.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(5.0):
                    await agent.proc.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    agent.proc.kill()
                await agent.proc.wait()
        agent.exited.set()
        _forget(agent)


def _pull(image: str) -> bool:
    """An image of a registry (`host:port/...`) is pulled from it into the local engine, as a node
    pulls a pod's image it does not have yet; others are the engine's own already. True when it
    was pulled."""
    first = image.split("/", 1)[0]
    if "/" not in image or not (":" in first or "." in first):
        return False
    import docker

    client = docker.from_env(timeout=600)
    try:
        client.images.pull(image)
        return True
    finally:
        client.close()


def _forget(agent: _Agent) -> None:
    """Removes what the kubelet made for a pod whose processes are gone."""
    shutil.rmtree(agent.dir, ignore_errors=True)
    if agent.id_base is not None:
        from sandboxes.backends import ids

        ids.release(agent.id_base, f"emulated-pod-{os.path.basename(agent.dir)}")
        agent.id_base = None


async def _start(
    argv: list[str], env: dict[str, str] | None, d: str, ready_w: int
) -> asyncio.subprocess.Process:
    """Starts a pod's process in a session of its own, its stderr in `d`/log (the pod's log), the
    write end of its readiness pipe passed on (and closed here)."""
    log = os.open(os.path.join(d, "log"), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        return await asyncio.create_subprocess_exec(
            *argv,
            pass_fds=(ready_w,),
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
        )
    finally:
        os.close(ready_w)
        os.close(log)


async def _read_ready(r: int) -> bytes:
    """The one byte an agent writes on its --ready-fd once it serves (b"" if it exits first)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(r, "rb")
    )
    try:
        return await reader.read(1)
    finally:
        transport.close()


@contextlib.asynccontextmanager
async def emulated_cluster(
    **kubelet_kwargs: Any,
) -> AsyncIterator[tuple[EmulatedApiServer, FakeKubelet, str]]:
    """`async with emulated_cluster() as (api, kubelet, url):` an EMULATED API server on a free
    local port and a fake kubelet attached to it (with `nodes=N`, N kubelets, one per node:
    `api.kubelets`; the first is yielded). `latency_s=(lo, hi)` goes to the API server."""
    latency = kubelet_kwargs.pop("latency_s", (0.0, 0.0))
    nodes = tuple(f"node-{i}" for i in range(kubelet_kwargs.pop("nodes", 0)))
    async with EmulatedApiServer(latency_s=latency, nodes=nodes) as api, kmock.Server(api) as server:
        url = str(server.url).rstrip("/")
        try:
            for node in nodes or (None,):
                kubelet = FakeKubelet(url, node_name=node, **kubelet_kwargs)
                api.kubelets[node or ""] = kubelet
                await kubelet.start()
            yield api, next(iter(api.kubelets.values())), url
        finally:
            for kubelet in api.kubelets.values():
                await kubelet.stop()


async def _serve_forever(args: Any) -> None:
    latency = (args.latency_ms[0] / 1000, args.latency_ms[1] / 1000)
    async with EmulatedApiServer(latency_s=latency) as api, kmock.Server(api, port=args.port) as server:
        # Out-of-band statistics for benchmarks (this request is counted too: subtract it).
        api["get /_emulator/stats"] << (lambda: {"requests": api.request_count()})
        kubelet = FakeKubelet(
            str(server.url), shared_agents=args.shared_agents, shared_token=args.shared_token or None
        )
        await kubelet.start()
        url = str(server.url).rstrip("/")
        if args.write_config:
            # What `sandboxes serve --backend kubernetes --kube-config PATH` needs to use it.
            config = {"api_url": url, "image": EMULATED_IMAGE, "port_from_annotation": True}
            await asyncio.to_thread(Path(args.write_config).write_text, json.dumps(config))
            print(
                f"serve on it: sandboxes serve --backend kubernetes --kube-config {args.write_config}",
                flush=True,
            )
        print(f"ready {url}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            await kubelet.stop()


def main(argv: list[str] | None = None) -> int:
    """`python -m sandboxes_testing.kube_emulator`: an EMULATED API server plus fake kubelet in a
    process of its own (benchmarks: the emulator's CPU does not share the manager's event loop;
    a person trying the kubernetes backend without a cluster: `--write-config kube.json`, then
    `sandboxes serve --backend kubernetes --kube-config kube.json`). Prints `ready URL` once
    serving; stops on SIGTERM or SIGINT."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m sandboxes_testing.kube_emulator")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--latency-ms", type=float, nargs=2, default=(0.0, 0.0), metavar=("LO", "HI"))
    ap.add_argument("--shared-agents", type=int, default=0)
    ap.add_argument("--shared-token", default="")
    ap.add_argument(
        "--write-config",
        metavar="PATH",
        help="write the kubernetes backend's settings for this emulator (a --kube-config file) to PATH",
    )
    args = ap.parse_args(argv)
    asyncio.run(_serve_forever(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
