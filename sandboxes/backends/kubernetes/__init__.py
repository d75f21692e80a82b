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
root: user programs (uid 65534) cannot read it. A template whose network is an allow-list adds
`EGRESS_CAPABILITIES` and a NetworkPolicy of its list (`egress`); a root template's pod adds
`manifests.ROOT_CAPABILITIES` and `ROOT_SECURITY` and needs `hostUsers: false`.

For tests and benchmarks only: `KubeConfig.port_from_annotation` lets the (emulated) kubelet tell
the agent port per pod in the annotation `sandboxes.io/agent-port`, because all emulated pods share
the address 127.0.0.1. Real clusters use the fixed `agent_port`.
"""

from __future__ import annotations

from .backend import KubernetesBackend, create_backend
from .config import AGENT_CAPABILITIES, LABEL_OWNER, LABEL_POOL, LABEL_TEMPLATE, KubeConfig
from .egress import EGRESS_CAPABILITIES
from .pods import PodRef, pod_readiness

__all__ = [
    "AGENT_CAPABILITIES",
    "EGRESS_CAPABILITIES",
    "LABEL_OWNER",
    "LABEL_POOL",
    "LABEL_TEMPLATE",
    "KubeConfig",
    "KubernetesBackend",
    "PodRef",
    "create_backend",
    "pod_readiness",
]
