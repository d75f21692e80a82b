"""The kubernetes backend's settings (`KubeConfig`, from JSON or the chart's values), the labels
and annotations it puts on pods, and the checks of what a pod may hold."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...errors import InvalidRequest

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
ANN_CLAIM = "sandboxes.io/claim"  # the claimed sandbox's record (JSON; `claims.py`)
ANN_REPLICA_LEASE = "sandboxes.io/replica-lease"  # the Lease of the replica that made the pod
LABEL_CLAIMED = "sandboxes.io/claimed"  # "true" once a claim's record is on the pod

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

    Replicas: `shared` (what `sandboxes serve` turns on) keeps every claimed sandbox's record on
    its pod, so any replica of the release serves any sandbox, and a replica Lease per manager;
    `replica_lease_s` is how long a replica that stopped renewing its Lease counts as alive,
    after which another replica adopts its claimed sandboxes (`claims.py`, `docs/kubernetes.md`).

    Checkpoints: `registry_url` (`http://host:port` for a registry on loopback or a trusted
    network, else `https://`) is the cluster's registry, which holds the templates' images: a
    sandbox made from a checkpoint (or a built template) runs that template's image with the
    checkpoint's layers on top, pushed there once (`layered.py`). None: no checkpoints.

    Volumes: a PersistentVolumeClaim each (`volume_claims.py`) of `volume_storage_class` (None:
    the cluster's default) with `volume_access_mode`.

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
    shared: bool = False
    replica_lease_s: float = 10.0
    registry_url: str | None = None
    volume_access_mode: str = "ReadWriteMany"
    volume_storage_class: str | None = None

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
        if self.registry_url is not None and (
            not isinstance(self.registry_url, str)
            or not re.fullmatch(r"https?://[A-Za-z0-9.-]+(:[0-9]+)?", self.registry_url)
        ):
            raise InvalidRequest(f"registry_url must be http(s)://host[:port], got {self.registry_url!r}")
        if self.volume_access_mode not in ("ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"):
            raise InvalidRequest(
                "volume_access_mode must be ReadWriteMany, ReadWriteOnce or ReadWriteOncePod"
            )
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
        for name in ("ready_timeout_s", "api_timeout_s", "replica_lease_s"):
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
