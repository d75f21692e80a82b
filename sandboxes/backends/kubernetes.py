"""Kubernetes backend: each sandbox is a pod running the agent; the manager talks to it directly.

Control plane only: the Kubernetes API is used to create, watch and delete pods (and one Secret
per pod holding its agent token). The data plane never touches the API server: execs, files,
tests and lease renewals go straight to `http://<podIP>:<agent port>` through the native gRPC
client, so 1,000 execs on warm pods cost zero API requests (measured in
`tests/test_kubernetes_backend.py`).

```
 create(template, id)          one POST pod, one POST secret (owned by the pod: deleted with it)
   readiness                   one shared watch on this manager's pods (label selector on owner);
                               ready = phase Running + condition Ready + podIP, then the agent
                               itself answers an Info call ("ready means ready")
 destroy(handle)               one DELETE pod (the secret goes with it, garbage collected)
 a pod vanishes                DELETED / deletionTimestamp / terminal phase / Ready=False seen on
                               the watch -> the sandbox is marked lost, the pool replaces a warm one
                               and in-flight calls fail with SandboxLost (the connection drops)
 manager dies                  agents stop renewing -> lease lapses -> agent exits -> the pod ends
                               (restartPolicy Never); the next manager start reaps leftovers
```

Ownership (labels on every pod):

- `sandboxes.io/pool`: the deployment-wide pool name (shared by all manager replicas);
- `sandboxes.io/manager`: this manager's identity (`KubeConfig.identity`, default: `$POD_NAME`,
  else the host name) - unique among the live managers of a pool;
- `sandboxes.io/owner`: `<identity>-<pool id>`, unique per manager process. The watch selects on it,
  so replicas side by side never see, let alone touch, each other's pods.

`reap_orphans` (at pool start) deletes pods of this pool whose manager is gone: pods with this
manager's identity but another owner (a previous incarnation: a restarted container, or the same
host), and pods whose annotated manager pod (`sandboxes.io/manager-pod`, `.../manager-uid`, set when
the manager runs in a pod) no longer exists or has another uid. Anything else is left alone: its
agent's lease ends it.

Pod security (see docs/kubernetes.md for the reasoning): the agent runs as root *inside the
container* because it must drop user programs to uid 65534 (setresuid needs CAP_SETUID, which a
non-root container cannot get: Kubernetes grants no ambient capabilities to non-root users, and
`allowPrivilegeEscalation: false` blocks file capabilities). By default the pod is user-namespaced
(`hostUsers: false`), so that root is an unprivileged uid on the node. All capabilities are dropped
except `AGENT_CAPABILITIES`; seccomp RuntimeDefault; no service-account token; read-only root with
emptyDir work dir and /tmp; no privilege escalation. The token is a Secret file mode 0400 owned by
root: user programs (uid 65534) cannot read it.

For tests and benchmarks only: `KubeConfig.port_from_annotation` lets the (emulated) kubelet tell
the agent port per pod in the annotation `sandboxes.io/agent-port`, because all emulated pods share
the address 127.0.0.1. Real clusters use the fixed `agent_port`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import re
import secrets
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import _bridge
from ..errors import BackendUnavailable, InvalidRequest, LaunchError, SandboxError, SandboxLost
from ..templates import Template
from .base import SandboxHandle

__all__ = [
    "AGENT_CAPABILITIES",
    "KubeConfig",
    "KubernetesBackend",
    "create_backend",
]

log = logging.getLogger(__name__)

CONFIG_ENV = "SANDBOXES_KUBE_CONFIG"  # path of a JSON file of KubeConfig fields

LABEL_POOL = "sandboxes.io/pool"
LABEL_MANAGER = "sandboxes.io/manager"
LABEL_OWNER = "sandboxes.io/owner"
LABEL_TEMPLATE = "sandboxes.io/template"
LABEL_EGRESS = "sandboxes.io/egress"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_NAME = "app.kubernetes.io/name"
ANN_SANDBOX = "sandboxes.io/sandbox-id"
ANN_MANAGER_POD = "sandboxes.io/manager-pod"  # "<namespace>/<name>" of the manager's pod
ANN_MANAGER_UID = "sandboxes.io/manager-uid"
ANN_AGENT_PORT = "sandboxes.io/agent-port"  # emulator only (see port_from_annotation)

TOKEN_DIR = "/var/run/sandboxes"
TOKEN_KEY = "token"
CONTAINER = "agent"

# What the agent needs inside the pod, and why (everything else is dropped):
AGENT_CAPABILITIES = (
    "SETUID",  # setresuid(65534) before exec of a user program
    "SETGID",  # setgroups / setresgid(65534)
    "CHOWN",  # files written by WriteFiles belong to the sandbox uid, so programs can change them
    "DAC_OVERRIDE",  # read/write files and dirs that user programs created with private modes
    "FOWNER",  # chmod / utime on files owned by the sandbox uid
    "KILL",  # signal and kill user programs (another uid) at timeouts and cancellation
)

# Waiting reasons that will not heal within a create's budget: fail fast.
FATAL_WAITING = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "CrashLoopBackOff",
        "ContainerCannotRun",
    }
)

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_QUANTITY = re.compile(r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE])?$")
_IMAGE = re.compile(r"^[^\s]+$")


def _label_value(s: str, limit: int = 63) -> str:
    """`s` made into a valid label value (lower case, allowed characters, alnum ends)."""
    s = re.sub(r"[^a-z0-9-_.]", "-", s.lower())[:limit]
    s = re.sub(r"^[^a-z0-9]+|[^a-z0-9]+$", "", s)
    return s or "x"


def _check_labels(what: str, labels: Mapping[str, str]) -> None:
    for k, v in labels.items():
        if not isinstance(k, str) or len(k) > 316 or not _LABEL_KEY.match(k):
            raise InvalidRequest(f"{what}: invalid label key {k!r}")
        if not isinstance(v, str) or len(v) > 63 or not _LABEL_VALUE.match(v):
            raise InvalidRequest(f"{what}: invalid label value {v!r} for {k}")


def _check_resources(what: str, res: Mapping[str, Any]) -> None:
    if not isinstance(res, Mapping):
        raise InvalidRequest(f"{what} must be an object with 'requests' / 'limits'")
    for part, values in res.items():
        if part not in ("requests", "limits"):
            raise InvalidRequest(f"{what}: unknown key {part!r} (requests, limits)")
        if not isinstance(values, Mapping):
            raise InvalidRequest(f"{what}.{part} must map resource names to quantities")
        for name, q in values.items():
            if not isinstance(q, (str, int)) or isinstance(q, bool) or not _QUANTITY.match(str(q)):
                raise InvalidRequest(f"{what}.{part}.{name}: invalid quantity {q!r}")


@dataclass
class KubeConfig:
    """How the backend reaches the cluster and what its sandbox pods look like.

    Cluster access: `api_url` (plain URL, no auth: `kubectl proxy` or the test emulator), else
    in-cluster config when `$KUBERNETES_SERVICE_HOST` is set, else `kubeconfig` / `context`
    (default `$KUBECONFIG` or ~/.kube/config).

    Pod template: `image` is the default for templates without one (it must hold the agent at
    `agent_command[0]` plus the interpreters / compilers the sandboxes run); `resources`
    (`{"requests": {...}, "limits": {...}}`) are defaults, a template's `memory_bytes` /
    `cpu_quota` set the limits; `runtime_class_name` (e.g. "gvisor"), `node_selector`,
    `tolerations`, `affinity`, `priority_class_name`, extra `labels` / `annotations`;
    `host_users` False asks for a user-namespaced pod (`hostUsers: false`), None leaves it out.
    `node_loss_toleration_s` adds NoExecute tolerations of that many seconds for unreachable /
    not-ready nodes (the defaults are 300 s) so pods of a lost node are evicted - and replaced -
    sooner; None adds none.

    Scale: `create_concurrency` is the pool's hint for creates in flight (pod starts are
    slow, API calls are cheap), `api_concurrency` caps concurrent API requests, `api_qps` (0: no
    cap) rate-limits them. `ready_timeout_s` bounds the wait for a pod to become ready (the
    template's `create_timeout_s` bounds it too).

    Ownership: `pool` (label shared by every replica), `identity` (this manager; default
    `$SANDBOXES_MANAGER_ID`, `$POD_NAME`, host name), `manager_pod` / `manager_uid` (default
    `$POD_NAMESPACE/$POD_NAME`, `$POD_UID`: lets other replicas reap this manager's pods after it
    is gone).

    `token_mode`: "secret" (default; a Secret per pod, mounted 0400 root) or "env" (the token in the
    pod spec's env: one API call fewer per sandbox, but readable by anyone who may read pods).
    """

    namespace: str = "default"
    api_url: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    image: str | None = None
    image_pull_policy: str = "IfNotPresent"
    image_pull_secrets: list[str] = field(default_factory=list)
    agent_command: list[str] = field(default_factory=lambda: ["/usr/local/bin/sandbox-agent"])
    agent_port: int = 7000
    runtime_class_name: str | None = None
    resources: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}}
    )
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    affinity: dict[str, Any] | None = None
    priority_class_name: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    host_users: bool | None = False
    node_loss_toleration_s: int | None = 30
    termination_grace_s: int = 5
    work_size_limit: str | None = "1Gi"
    tmp_size_limit: str | None = "512Mi"
    pool: str = "sandboxes"
    identity: str | None = None
    manager_pod: str | None = None
    manager_uid: str | None = None
    token_mode: str = "secret"
    ready_timeout_s: float = 120.0
    create_concurrency: int = 200
    api_concurrency: int = 32
    api_qps: float = 0.0
    api_timeout_s: float = 30.0
    port_from_annotation: bool = False

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> KubeConfig:
        """Fields from a dict (camelCase keys are accepted too); unknown keys are an error."""
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for k, v in data.items():
            key = re.sub(r"(?<!^)(?=[A-Z])", "_", k).lower() if k not in names else k
            if key not in names:
                raise InvalidRequest(f"unknown kubernetes backend setting {k!r}")
            kwargs[key] = v
        cfg = cls(**kwargs)
        cfg.validate()
        return cfg

    @classmethod
    def from_file(cls, path: str) -> KubeConfig:
        try:
            with open(path) as f:
                data = json.load(f)
        except OSError as e:
            raise InvalidRequest(f"cannot read kubernetes backend config {path}: {e.strerror}") from e
        except json.JSONDecodeError as e:
            raise InvalidRequest(f"kubernetes backend config {path} is not valid JSON: {e}") from e
        if not isinstance(data, dict):
            raise InvalidRequest(f"kubernetes backend config {path} must hold an object")
        return cls.from_mapping(data)

    def validate(self) -> None:
        """Raise `InvalidRequest` on a value the API server would reject later, or worse."""
        if not isinstance(self.namespace, str) or not _DNS_LABEL.match(self.namespace):
            raise InvalidRequest(f"invalid namespace {self.namespace!r}")
        if self.image is not None and (not isinstance(self.image, str) or not _IMAGE.match(self.image)):
            raise InvalidRequest(f"invalid image {self.image!r}")
        if self.image_pull_policy not in ("Always", "IfNotPresent", "Never"):
            raise InvalidRequest("image_pull_policy must be Always, IfNotPresent or Never")
        if not self.agent_command or not all(isinstance(a, str) and a for a in self.agent_command):
            raise InvalidRequest("agent_command must be a non-empty list of strings")
        if (
            isinstance(self.agent_port, bool)
            or not isinstance(self.agent_port, int)
            or not 1 <= self.agent_port <= 65535
        ):
            raise InvalidRequest(f"agent_port must be in 1..65535, got {self.agent_port!r}")
        if self.runtime_class_name is not None and not _DNS_LABEL.match(str(self.runtime_class_name)):
            raise InvalidRequest(f"invalid runtime_class_name {self.runtime_class_name!r}")
        _check_resources("resources", self.resources)
        _check_labels("node_selector", self.node_selector)
        _check_labels("labels", self.labels)
        for k in self.labels:
            if k.startswith("sandboxes.io/"):
                raise InvalidRequest(f"label {k} is reserved for the backend")
        if not isinstance(self.annotations, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.annotations.items()
        ):
            raise InvalidRequest("annotations must map str to str")
        if not isinstance(self.tolerations, list) or not all(
            isinstance(t, Mapping) for t in self.tolerations
        ):
            raise InvalidRequest("tolerations must be a list of objects")
        for t in self.tolerations:
            unknown = set(t) - {"key", "operator", "value", "effect", "tolerationSeconds"}
            if unknown:
                raise InvalidRequest(f"toleration has unknown fields {sorted(unknown)}")
        if self.affinity is not None and not isinstance(self.affinity, Mapping):
            raise InvalidRequest("affinity must be an object")
        if self.host_users not in (None, True, False):
            raise InvalidRequest("host_users must be true, false or null")
        for name in ("work_size_limit", "tmp_size_limit"):
            v = getattr(self, name)
            if v is not None and not _QUANTITY.match(str(v)):
                raise InvalidRequest(f"{name}: invalid quantity {v!r}")
        if not _LABEL_VALUE.match(self.pool) or not self.pool:
            raise InvalidRequest(f"pool must be a valid label value, got {self.pool!r}")
        if self.token_mode not in ("secret", "env"):
            raise InvalidRequest("token_mode must be 'secret' or 'env'")
        for name in ("ready_timeout_s", "api_timeout_s"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not 0 < v <= 3600:
                raise InvalidRequest(f"{name} must be in (0, 3600], got {v!r}")
        for name in ("create_concurrency", "api_concurrency"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 10_000:
                raise InvalidRequest(f"{name} must be an int in 1..10000, got {v!r}")
        if not isinstance(self.api_qps, (int, float)) or self.api_qps < 0:
            raise InvalidRequest("api_qps must be >= 0")
        if self.node_loss_toleration_s is not None and (
            not isinstance(self.node_loss_toleration_s, int) or self.node_loss_toleration_s < 0
        ):
            raise InvalidRequest("node_loss_toleration_s must be an int >= 0 or null")


def create_backend(
    pool_id: str | None = None, config: KubeConfig | Mapping[str, Any] | None = None, **overrides: Any
) -> KubernetesBackend:
    """Factory used by `sandboxes.backends.get_backend`: config from `config`, else the JSON file
    named by `$SANDBOXES_KUBE_CONFIG`, else defaults; `overrides` replace single fields."""
    if config is None:
        path = os.environ.get(CONFIG_ENV)
        cfg = KubeConfig.from_file(path) if path else KubeConfig()
    elif isinstance(config, KubeConfig):
        cfg = config
    else:
        cfg = KubeConfig.from_mapping(config)
    if overrides:
        cfg = dataclasses.replace(cfg, **overrides)
        cfg.validate()
    return KubernetesBackend(cfg, pool_id=pool_id)


# --- API access ------------------------------------------------------------------------------------


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


# --- pods ------------------------------------------------------------------------------------------


@dataclass(eq=False)
class PodRef:
    """`SandboxHandle.backend_data` of a kubernetes sandbox: its pod, and whether it was lost."""

    name: str
    namespace: str
    uid: str
    sandbox_id: str
    ip: str
    port: int
    lost_reason: str | None = None

    def alive(self) -> bool:
        """False once the watch saw the pod go (deleted, evicted, ended, node lost)."""
        return self.lost_reason is None


@dataclass(eq=False)
class _Starting:
    future: asyncio.Future[tuple[str, int]]
    last_status: str = "pod created, not scheduled yet"


def _condition(pod: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for c in pod.get("status", {}).get("conditions") or ():
        if c.get("type") == kind:
            return c
    return None


def _container_status(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for cs in pod.get("status", {}).get("containerStatuses") or ():
        if cs.get("name") == CONTAINER:
            return cs
    return None


def _describe_terminated(pod: Mapping[str, Any]) -> str:
    cs = _container_status(pod) or {}
    term = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")
    phase = pod.get("status", {}).get("phase", "?")
    if term:
        msg = (term.get("message") or "").strip()
        return (
            f"pod {phase}: container {term.get('reason') or 'terminated'} "
            f"(exit code {term.get('exitCode')}){': ' + msg[:300] if msg else ''}"
        )
    reason = pod.get("status", {}).get("reason") or ""
    message = pod.get("status", {}).get("message") or ""
    return f"pod {phase}" + (f": {reason}" if reason else "") + (f": {message[:300]}" if message else "")


def pod_readiness(pod: Mapping[str, Any] | None) -> tuple[str, str]:
    """("ready", ip) | ("pending", what it waits for) | ("failed", why) | ("gone", why)."""
    if pod is None:
        return "gone", "pod was deleted"
    meta = pod.get("metadata", {})
    if meta.get("deletionTimestamp"):
        return "gone", "pod is being deleted"
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    if phase in ("Succeeded", "Failed"):
        return "failed", _describe_terminated(pod)
    cs = _container_status(pod)
    if cs:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason") in FATAL_WAITING:
            msg = (waiting.get("message") or "").strip()
            return "failed", f"container {waiting['reason']}" + (f": {msg[:300]}" if msg else "")
        if (cs.get("state") or {}).get("terminated"):
            return "failed", _describe_terminated(pod)
    ready = _condition(pod, "Ready")
    ip = status.get("podIP")
    if phase == "Running" and ready is not None and ready.get("status") == "True" and ip:
        return "ready", ip
    sched = _condition(pod, "PodScheduled")
    if sched is not None and sched.get("status") == "False":
        return "pending", f"not scheduled: {sched.get('reason', '')} {sched.get('message', '')}".strip()
    if cs and (cs.get("state") or {}).get("waiting"):
        w = cs["state"]["waiting"]
        return "pending", f"container waiting: {w.get('reason', '')} {w.get('message', '')}".strip()
    return "pending", f"phase {phase}" + (", no pod IP yet" if not ip else ", not Ready yet")


class KubernetesBackend:
    """Sandboxes as pods; see the module docstring. One watch per backend, direct gRPC to pods."""

    name = "kubernetes"

    def __init__(
        self,
        config: KubeConfig | None = None,
        pool_id: str | None = None,
        *,
        token_factory: Callable[[], str] | None = None,
    ) -> None:
        cfg = config or KubeConfig()
        cfg.validate()
        self.cfg = cfg
        self.pool_id = pool_id or secrets.token_hex(6)
        ident = (
            cfg.identity
            or os.environ.get("SANDBOXES_MANAGER_ID")
            or os.environ.get("POD_NAME")
            or socket.gethostname()
        )
        self.identity = _label_value(ident, 50)
        self.owner = _label_value(f"{self.identity}-{self.pool_id}")
        pod_ns, pod_name = os.environ.get("POD_NAMESPACE"), os.environ.get("POD_NAME")
        self.manager_pod = cfg.manager_pod or (f"{pod_ns}/{pod_name}" if pod_ns and pod_name else None)
        self.manager_uid = cfg.manager_uid or os.environ.get("POD_UID")
        self.create_concurrency = cfg.create_concurrency  # hint read by the pool
        # Tests / benchmarks may fix the token (shared emulated agents); secrets.token_urlsafe otherwise.
        self._token_factory = token_factory or (lambda: secrets.token_urlsafe(32))
        self.api = _Api(cfg)
        self._pods: dict[str, dict[str, Any]] = {}  # pod name -> last seen object (this owner's)
        self._starting: dict[str, _Starting] = {}
        self._live: dict[str, PodRef] = {}  # pod name -> live sandbox
        self._watch_task: asyncio.Task[None] | None = None
        self._synced: asyncio.Event | None = None
        self._watch_error: BaseException | None = None
        self._bg: set[asyncio.Task[Any]] = set()
        self._lost_listener: Callable[[str, str], None] | None = None
        self._closing = False
        self.watch_restarts = 0

    def __repr__(self) -> str:
        return f"kubernetes(namespace={self.cfg.namespace}, owner={self.owner})"

    # --- wiring ----------------------------------------------------------------------------------

    @property
    def pods_path(self) -> str:
        return f"/api/v1/namespaces/{self.cfg.namespace}/pods"

    @property
    def owner_selector(self) -> str:
        return f"{LABEL_POOL}={self.cfg.pool},{LABEL_OWNER}={self.owner}"

    def set_lost_listener(self, fn: Callable[[str, str], None] | None) -> None:
        """`fn(sandbox_id, reason)` is called (on the loop) when a live sandbox's pod goes away."""
        self._lost_listener = fn

    @property
    def api_requests(self) -> int:
        """API requests this backend sent so far (the watch counts once per (re)connection)."""
        return self.api.requests

    def live_pods(self) -> list[str]:
        return sorted(self._live)

    # --- Backend protocol ------------------------------------------------------------------------

    async def create(self, template: Template, sandbox_id: str) -> SandboxHandle:
        """Create the pod (and its token Secret), wait for the watch to report it ready, then for
        its agent to answer. On any failure or cancellation the pod is deleted."""
        if template.user != "sandbox":
            raise InvalidRequest(
                f"user={template.user!r} is not available on the kubernetes backend: it runs programs "
                "as the template's unprivileged uid (root inside a sandbox's own user namespace is "
                "a local and docker backend feature)"
            )
        if template.egress_allow:
            raise InvalidRequest(
                "an egress allow-list is not available on the kubernetes backend: its network is "
                "none or the cluster's (network=True, a NetworkPolicy's to restrict)"
            )
        pod_name = sandbox_id.lower()
        if len(pod_name) > 63 or not _DNS_LABEL.match(pod_name):
            raise InvalidRequest(f"sandbox id {sandbox_id!r} is not a valid pod name")
        token = self._token_factory()
        manifest = self.pod_manifest(template, pod_name, sandbox_id, token)
        await self._ensure_watch()
        loop = asyncio.get_running_loop()
        starting = _Starting(loop.create_future())
        self._starting[pod_name] = starting
        budget = max(0.001, min(self.cfg.ready_timeout_s, template.create_timeout_s * 0.95))
        deadline = loop.time() + budget
        maybe_created = False
        uid = ""
        try:
            try:
                async with asyncio.timeout(budget):
                    maybe_created = True
                    try:
                        obj = await self.api.request("POST", self.pods_path, body=manifest)
                    except _ApiError:
                        maybe_created = False  # refused (a 409 is someone else's pod: leave it)
                        raise
                    uid = obj.get("metadata", {}).get("uid", "")
                    if self.cfg.token_mode == "secret":
                        await self.api.request(
                            "POST",
                            f"/api/v1/namespaces/{self.cfg.namespace}/secrets",
                            body=self._secret_manifest(pod_name, uid, token),
                        )
                    self._evaluate(pod_name)  # the watch may have been faster than our POST
                    ip, port = await starting.future
                    endpoint = f"http://{ip}:{port}"
                    await self._confirm_agent(endpoint, token, deadline)
            except TimeoutError as e:
                if isinstance(e, SandboxError):
                    raise
                raise LaunchError(
                    f"pod {pod_name} was not ready within {budget:.1f}s ({starting.last_status})",
                    step="ready_timeout",
                ) from e
            except _ApiError as e:
                raise _api_failure(e, f"creating pod {pod_name}") from e
        except BaseException:
            self._starting.pop(pod_name, None)
            if maybe_created:
                self._delete_soon(pod_name)
            raise
        self._starting.pop(pod_name, None)
        ref = PodRef(pod_name, self.cfg.namespace, uid, sandbox_id, ip, port)
        self._live[pod_name] = ref
        state, why = pod_readiness(self._pods.get(pod_name))
        if state != "ready":  # went away between the agent's answer and now
            self._mark_lost(ref, why)
        return SandboxHandle(id=sandbox_id, endpoint=endpoint, token=token, backend_data=ref)

    async def destroy(self, handle: SandboxHandle) -> None:
        """Delete the pod (its Secret is garbage collected with it). Idempotent."""
        ref = handle.backend_data
        name = ref.name if isinstance(ref, PodRef) else handle.id.lower()
        self._live.pop(name, None)
        await self._delete_pod(name)

    async def reap_orphans(self) -> int:
        """Delete this pool's pods whose manager is gone (see the module docstring)."""
        try:
            data = await self.api.request(
                "GET",
                self.pods_path,
                query=[("labelSelector", f"{LABEL_POOL}={self.cfg.pool},{LABEL_MANAGER}")],
            )
        except _ApiError as e:
            raise _api_failure(e, "listing pods to reap") from e
        alive_cache: dict[str, bool] = {}
        victims: list[str] = []
        for pod in data.get("items") or ():
            meta = pod.get("metadata", {})
            labels = meta.get("labels") or {}
            if labels.get(LABEL_OWNER) == self.owner:
                continue
            if labels.get(LABEL_MANAGER) == self.identity:
                victims.append(meta["name"])
                continue
            ann = meta.get("annotations") or {}
            mpod, muid = ann.get(ANN_MANAGER_POD), ann.get(ANN_MANAGER_UID)
            if not mpod or not muid:
                continue  # manager outside the cluster: its agents' leases end its pods
            key = f"{mpod}#{muid}"
            if key not in alive_cache:
                alive_cache[key] = await self._manager_alive(mpod, muid)
            if not alive_cache[key]:
                victims.append(meta["name"])
        results = await asyncio.gather(*(self._delete_pod(n) for n in victims), return_exceptions=True)
        for n, r in zip(victims, results):
            if isinstance(r, BaseException):
                log.warning("reaping orphaned pod %s failed: %s", n, r)
            else:
                log.info("reaped orphaned sandbox pod %s", n)
        return sum(1 for r in results if not isinstance(r, BaseException))

    async def close(self) -> None:
        """Stop the watch, delete pods still live (normally none), close the API client."""
        self._closing = True
        leftovers = list(self._live)
        self._live.clear()
        if leftovers:
            log.warning("kubernetes backend closing with %d live pods; deleting them", len(leftovers))
            await asyncio.gather(*(self._delete_pod(n) for n in leftovers), return_exceptions=True)
        if self._bg:
            await asyncio.gather(*list(self._bg), return_exceptions=True)
        if self._watch_task is not None:
            self._watch_task.cancel()
            with contextlib.suppress(BaseException):
                await self._watch_task
            self._watch_task = None
        for s in self._starting.values():
            if not s.future.done():
                s.future.set_exception(LaunchError("backend closed", step="closed"))
        await self.api.close()

    # --- manifests -------------------------------------------------------------------------------

    def _check_template(self, t: Template) -> str:
        image = t.image or self.cfg.image
        if not image:
            raise InvalidRequest(
                f"template {t.name!r} has no image and the kubernetes backend has no default image"
            )
        if not _IMAGE.match(image):
            raise InvalidRequest(f"template {t.name!r}: invalid image {image!r}")
        if t.ro_binds:
            raise InvalidRequest(f"template {t.name!r}: ro_binds are not supported by the kubernetes backend")
        if getattr(t, "agent_mount", False):
            raise InvalidRequest(
                f"template {t.name!r}: agent_mount is a docker feature; the pod's image must hold the agent"
            )
        if t.work_dir in ("/", TOKEN_DIR, "/tmp") or t.work_dir.startswith(TOKEN_DIR + "/"):
            raise InvalidRequest(f"template {t.name!r}: work_dir {t.work_dir!r} cannot be used in a pod")
        return image

    def pod_manifest(self, t: Template, pod_name: str, sandbox_id: str, token: str) -> dict[str, Any]:
        """The pod of one sandbox of template `t` (pure: no API call; raises `InvalidRequest`)."""
        cfg = self.cfg
        image = self._check_template(t)
        port = cfg.agent_port
        args = [
            "--listen",
            f"tcp:0.0.0.0:{port}",
            "--lease-ttl",
            f"{t.lease_ttl_s:g}",
            "--work-dir",
            t.work_dir,
            "--uid",
            str(t.uid),
            "--gid",
            str(t.gid),
            "--python-zygote",
            t.python_zygote,
            "--file-root",
            "/tmp",
        ]  # the pod's own emptyDir (below)
        env: list[dict[str, Any]] = []
        if cfg.token_mode == "secret":
            args += ["--token-file", f"{TOKEN_DIR}/{TOKEN_KEY}"]
        else:
            env.append({"name": "SANDBOX_AGENT_TOKEN", "value": token})
        if not t.seccomp:
            args.append("--no-seccomp")
        if not t.cgroups:
            args.append("--no-cgroups")
        for k, v in sorted(t.env.items()):
            args += ["--env", f"{k}={v}"]

        resources: dict[str, dict[str, Any]] = {k: dict(v) for k, v in cfg.resources.items()}
        limits = resources.setdefault("limits", {})
        requests = resources.setdefault("requests", {})
        if t.memory_bytes:
            limits["memory"] = str(t.memory_bytes)
            if "memory" in requests and _quantity_bytes(requests["memory"]) > t.memory_bytes:
                requests["memory"] = str(t.memory_bytes)
        if t.cpu_quota:
            milli = max(1, round(t.cpu_quota * 1000))
            limits["cpu"] = f"{milli}m"
            if "cpu" in requests and _quantity_milli(requests["cpu"]) > milli:
                requests["cpu"] = f"{milli}m"
        resources = {k: v for k, v in resources.items() if v}

        def empty_dir(limit_bytes: int, default: str | None) -> dict[str, Any]:
            if limit_bytes:
                return {"sizeLimit": str(limit_bytes)}
            return {"sizeLimit": default} if default else {}

        mounts: list[dict[str, Any]] = [
            {"name": "work", "mountPath": t.work_dir},
            {"name": "tmp", "mountPath": "/tmp"},
        ]
        volumes: list[dict[str, Any]] = [
            {"name": "work", "emptyDir": empty_dir(t.work_size_bytes, cfg.work_size_limit)},
            {"name": "tmp", "emptyDir": empty_dir(t.tmp_size_bytes, cfg.tmp_size_limit)},
        ]
        if cfg.token_mode == "secret":
            mounts.append({"name": "token", "mountPath": TOKEN_DIR, "readOnly": True})
            volumes.append(
                {
                    "name": "token",
                    "secret": {
                        "secretName": f"{pod_name}-token",
                        "defaultMode": 0o400,
                        "items": [{"key": TOKEN_KEY, "path": TOKEN_KEY, "mode": 0o400}],
                    },
                }
            )
        container: dict[str, Any] = {
            "name": CONTAINER,
            "image": image,
            "imagePullPolicy": cfg.image_pull_policy,
            "command": list(cfg.agent_command),
            "args": args,
            "ports": [{"name": "agent", "containerPort": port, "protocol": "TCP"}],
            "securityContext": {
                "runAsUser": 0,
                "runAsGroup": 0,
                "runAsNonRoot": False,
                "privileged": False,
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "capabilities": {"drop": ["ALL"], "add": list(AGENT_CAPABILITIES)},
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "volumeMounts": mounts,
            "terminationMessagePolicy": "FallbackToLogsOnError",
        }
        if env:
            container["env"] = env
        if resources:
            container["resources"] = resources

        labels = {
            **cfg.labels,
            LABEL_NAME: "sandboxes",
            LABEL_COMPONENT: "sandbox",
            LABEL_POOL: cfg.pool,
            LABEL_MANAGER: self.identity,
            LABEL_OWNER: self.owner,
            LABEL_TEMPLATE: _label_value(t.name),
        }
        if t.network:
            labels[LABEL_EGRESS] = "allowed"
        annotations = {**cfg.annotations, ANN_SANDBOX: sandbox_id}
        if self.manager_pod and self.manager_uid:
            annotations[ANN_MANAGER_POD] = self.manager_pod
            annotations[ANN_MANAGER_UID] = self.manager_uid

        tolerations = [dict(x) for x in cfg.tolerations]
        if cfg.node_loss_toleration_s is not None:
            have = {x.get("key") for x in tolerations}
            for key in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"):
                if key not in have:
                    tolerations.append(
                        {
                            "key": key,
                            "operator": "Exists",
                            "effect": "NoExecute",
                            "tolerationSeconds": cfg.node_loss_toleration_s,
                        }
                    )
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": cfg.termination_grace_s,
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [container],
            "volumes": volumes,
        }
        if cfg.host_users is not None:
            spec["hostUsers"] = cfg.host_users
        if cfg.runtime_class_name:
            spec["runtimeClassName"] = cfg.runtime_class_name
        if cfg.node_selector:
            spec["nodeSelector"] = dict(cfg.node_selector)
        if tolerations:
            spec["tolerations"] = tolerations
        if cfg.affinity:
            spec["affinity"] = dict(cfg.affinity)
        if cfg.priority_class_name:
            spec["priorityClassName"] = cfg.priority_class_name
        if cfg.image_pull_secrets:
            spec["imagePullSecrets"] = [{"name": n} for n in cfg.image_pull_secrets]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "namespace": cfg.namespace,
                "labels": labels,
                "annotations": annotations,
            },
            "spec": spec,
        }

    def _secret_manifest(self, pod_name: str, pod_uid: str, token: str) -> dict[str, Any]:
        import base64

        meta: dict[str, Any] = {
            "name": f"{pod_name}-token",
            "namespace": self.cfg.namespace,
            "labels": {
                LABEL_NAME: "sandboxes",
                LABEL_COMPONENT: "sandbox-token",
                LABEL_POOL: self.cfg.pool,
                LABEL_MANAGER: self.identity,
                LABEL_OWNER: self.owner,
            },
        }
        if pod_uid:  # garbage collected with its pod
            meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod_uid}]
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "immutable": True,
            "metadata": meta,
            "data": {TOKEN_KEY: base64.b64encode(token.encode()).decode()},
        }

    # --- readiness -------------------------------------------------------------------------------

    async def _confirm_agent(self, endpoint: str, token: str, deadline: float) -> None:
        """The agent answers Info: ready means ready. The container may be Running a few ms
        before the agent listens, so a refused connection is retried (bounded by the deadline)."""
        client = _bridge.api().AgentClient(endpoint, token, connect_timeout_s=2.0)
        loop = asyncio.get_running_loop()
        delay = 0.01
        try:
            while True:
                try:
                    await client.info()
                    return
                except SandboxLost:
                    if loop.time() + delay >= deadline:
                        raise
                    await asyncio.sleep(delay)  # the agent is starting: retry with backoff
                    delay = min(0.2, delay * 2)
        finally:
            with contextlib.suppress(Exception):
                client.close()

    async def _ensure_watch(self) -> None:
        if self._closing:
            raise LaunchError("backend closed", step="closed")
        if self._watch_task is None or self._watch_task.done():
            self._synced = asyncio.Event()
            self._watch_task = asyncio.create_task(self._watch_loop(), name="kube-watch")
        assert self._synced is not None
        if not self._synced.is_set():
            try:
                async with asyncio.timeout(self.cfg.api_timeout_s):
                    await self._synced.wait()
            except TimeoutError as e:
                err = self._watch_error
                raise BackendUnavailable(f"cannot list pods: {err or 'no answer'}") from e

    async def _watch_loop(self) -> None:
        """List this owner's pods, then watch from that version; on any failure, back off and
        list again (the list catches what the gap hid: deletions included)."""
        backoff = 0.1
        path = self.pods_path
        while not self._closing:
            try:
                lst = await self.api.request("GET", path, query=[("labelSelector", self.owner_selector)])
                rv = str(lst.get("metadata", {}).get("resourceVersion") or "")
                self._sync(lst.get("items") or [])
                assert self._synced is not None
                self._synced.set()
                self._watch_error = None
                while not self._closing:
                    query = [
                        ("labelSelector", self.owner_selector),
                        ("watch", "true"),
                        ("allowWatchBookmarks", "true"),
                        ("timeoutSeconds", str(240 + secrets.randbelow(120))),
                    ]
                    if rv and rv.isdigit():
                        query.append(("resourceVersion", rv))
                    resp = await self.api.stream(path, query)
                    try:
                        async for line in resp.content:
                            if not line.strip():
                                continue
                            ev = json.loads(line)
                            kind, obj = ev.get("type"), ev.get("object") or {}
                            if kind == "ERROR":
                                raise _ApiError(
                                    int(obj.get("code") or 500),
                                    str(obj.get("reason")),
                                    str(obj.get("message")),
                                )
                            new_rv = obj.get("metadata", {}).get("resourceVersion")
                            if new_rv:
                                rv = str(new_rv)
                            if kind == "BOOKMARK":
                                continue
                            self._apply(kind, obj)
                            backoff = 0.1
                    finally:
                        resp.release()
                    # The server ended the watch (timeoutSeconds): go on from `rv`.
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the watch must survive anything
                if self._closing:
                    return
                self._watch_error = e
                self.watch_restarts += 1
                log.warning("pod watch failed (%s); listing again in %.1fs", e, backoff)
                await asyncio.sleep(backoff)  # retry backoff after a failure, not condition polling
                backoff = min(5.0, backoff * 2)

    def _sync(self, items: list[dict[str, Any]]) -> None:
        seen = {}
        for pod in items:
            name = pod.get("metadata", {}).get("name")
            if name:
                seen[name] = pod
        for name in list(self._pods):
            if name not in seen:
                self._apply("DELETED", self._pods[name])
        for pod in seen.values():
            self._apply("MODIFIED", pod)

    def _apply(self, kind: str | None, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata", {})
        name = meta.get("name")
        if not name or (meta.get("labels") or {}).get(LABEL_OWNER) != self.owner:
            return  # not ours (an emulator without label selectors, or a relabelled pod)
        if kind == "DELETED":
            self._pods.pop(name, None)
        else:
            self._pods[name] = pod
        self._evaluate(name)

    def _pod_port(self, pod: Mapping[str, Any]) -> int:
        if self.cfg.port_from_annotation:
            raw = (pod.get("metadata", {}).get("annotations") or {}).get(ANN_AGENT_PORT)
            if raw and str(raw).isdigit():
                return int(raw)
        return self.cfg.agent_port

    def _evaluate(self, name: str) -> None:
        pod = self._pods.get(name)
        state, info = pod_readiness(pod)
        starting = self._starting.get(name)
        if starting is not None and not starting.future.done():
            if state == "ready":
                assert pod is not None
                starting.future.set_result((info, self._pod_port(pod)))
            elif state in ("failed", "gone"):
                starting.future.set_exception(
                    LaunchError(f"pod {name} did not start: {info}", detail=info, step="pod")
                )
            else:
                starting.last_status = info
        ref = self._live.get(name)
        if ref is not None and ref.alive() and state != "ready":
            self._mark_lost(ref, info)

    def _mark_lost(self, ref: PodRef, why: str) -> None:
        if ref.lost_reason is not None:
            return
        ref.lost_reason = why
        log.warning("sandbox %s lost: pod %s: %s", ref.sandbox_id, ref.name, why)
        if self._lost_listener is not None:
            try:
                self._lost_listener(ref.sandbox_id, why)
            except Exception:
                log.exception("lost listener failed")

    # --- deletion --------------------------------------------------------------------------------

    async def _delete_pod(self, name: str, attempts: int = 3) -> None:
        """DELETE the pod (404 is fine); retried a few times on API failures."""
        delay = 0.2
        for i in range(attempts):
            try:
                await self.api.request("DELETE", f"{self.pods_path}/{name}")
                return
            except _ApiError as e:
                if e.status == 404:
                    return
                if e.status < 500 and e.status != 429 or i == attempts - 1:
                    raise _api_failure(e, f"deleting pod {name}") from e
            except BackendUnavailable:
                if i == attempts - 1:
                    raise
            await asyncio.sleep(delay)
            delay *= 2

    def _delete_soon(self, name: str) -> None:
        """Delete in a task of its own, so a cancelled create never leaves its pod behind."""

        async def run() -> None:
            try:
                await self._delete_pod(name)
            except Exception as e:  # noqa: BLE001
                log.warning("deleting pod %s failed: %s (the agent's lease ends it)", name, e)

        task = asyncio.ensure_future(run())
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    async def _manager_alive(self, manager_pod: str, uid: str) -> bool:
        ns, _, name = manager_pod.partition("/")
        if not ns or not name:
            return True
        try:
            pod = await self.api.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        except _ApiError as e:
            if e.status == 404:
                return False
            log.warning("cannot check manager pod %s: %s; leaving its sandboxes", manager_pod, e)
            return True
        except BackendUnavailable as e:
            log.warning("cannot check manager pod %s: %s; leaving its sandboxes", manager_pod, e)
            return True
        if pod.get("metadata", {}).get("uid") != uid:
            return False
        return pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")


_SUFFIX = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "m": 1e-3,
}


def _quantity_bytes(q: Any) -> float:
    m = re.match(r"^([0-9.]+)([A-Za-z]*)$", str(q))
    if not m or m.group(2) not in _SUFFIX:
        return 0.0
    return float(m.group(1)) * _SUFFIX[m.group(2)]


def _quantity_milli(q: Any) -> float:
    s = str(q)
    if s.endswith("m"):
        return float(s[:-1] or 0)
    return _quantity_bytes(s) * 1000
