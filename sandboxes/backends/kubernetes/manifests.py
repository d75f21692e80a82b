"""The pod and the token Secret of one sandbox (pure functions: no API call)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import InvalidRequest
from ...templates import Template
from .config import (
    _IMAGE,
    AGENT_CAPABILITIES,
    ANN_MANAGER_POD,
    ANN_MANAGER_UID,
    ANN_REPLICA_LEASE,
    ANN_SANDBOX,
    CONTAINER,
    LABEL_COMPONENT,
    LABEL_EGRESS,
    LABEL_MANAGER,
    LABEL_NAME,
    LABEL_OWNER,
    LABEL_POOL,
    LABEL_TEMPLATE,
    TOKEN_DIR,
    TOKEN_KEY,
    KubeConfig,
    _label_value,
    _quantity_bytes,
    _quantity_milli,
)
from .egress import EGRESS_CAPABILITIES, LABEL_EGRESS_POLICY, policy_digest
from .layered import PLACES, VOLUME_LAYERS

# Where a root pod mounts its claims (`volume_claims.py`), for the agent to bind them in the root it
# builds (the pod's own root is not what its programs see).
VOLUMES_DIR = "/sandbox-volumes"

# What a root sandbox's agent needs beyond `AGENT_CAPABILITIES`: mounts (its root: an overlay, its
# disk, /proc) and entering the programs' user namespace; mapping the pod's uid 0 into that
# namespace (the kernel asks for SETFCAP to map a namespace's root).
ROOT_CAPABILITIES = ("SYS_ADMIN", "SETFCAP")
# And of its container: a /proc it can mount a fresh one beside (the runtime's masks over
# /proc forbid that), and no AppArmor profile that forbids mounts (the runtime's default does).
ROOT_SECURITY: dict[str, Any] = {"procMount": "Unmasked", "appArmorProfile": {"type": "Unconfined"}}


@dataclass(frozen=True)
class Owner:
    """Who owns the pods a manager makes (their labels and annotations)."""

    identity: str
    owner: str
    manager_pod: str | None
    manager_uid: str | None
    lease: str | None = None  # its replica Lease (replicas that share their sandboxes)


def check_template(cfg: KubeConfig, t: Template) -> str:
    """The image of template `t` in a pod; `InvalidRequest` for what a pod cannot hold."""
    image = t.image or cfg.image
    if not image:
        raise InvalidRequest(
            f"template {t.name!r} has no image and the kubernetes backend has no default image"
        )
    if not _IMAGE.match(image):
        raise InvalidRequest(f"template {t.name!r}: invalid image {image!r}")
    if t.ro_binds:
        raise InvalidRequest(f"template {t.name!r}: ro_binds are not supported by the kubernetes backend")
    if t.user == "root" and cfg.host_users is not False:
        raise InvalidRequest(
            f"template {t.name!r}: user='root' on kubernetes needs user-namespaced pods "
            "(host_users false): root inside is the pod's root, an unprivileged uid on the node"
        )
    if getattr(t, "agent_mount", False):
        raise InvalidRequest(
            f"template {t.name!r}: agent_mount is a docker feature; the pod's image must hold the agent"
        )
    if t.work_dir in ("/", TOKEN_DIR, "/tmp") or t.work_dir.startswith(TOKEN_DIR + "/"):
        raise InvalidRequest(f"template {t.name!r}: work_dir {t.work_dir!r} cannot be used in a pod")
    for _, path, _ in t.volumes:
        if path in ("/", "/tmp", t.work_dir, TOKEN_DIR) or path.startswith((TOKEN_DIR + "/", VOLUMES_DIR)):
            raise InvalidRequest(f"template {t.name!r}: a volume cannot be mounted at {path!r} in a pod")
    if t.layers and t.user != "root":
        raise InvalidRequest(
            f"template {t.name!r}: on kubernetes a sandbox is made from a checkpoint in a root template "
            "(its agent builds the root a checkpoint is taken of)"
        )
    if t.layered_volumes and t.user != "root":
        raise InvalidRequest(
            f"template {t.name!r}: on kubernetes versions of volumes are attached in a root template "
            "(its agent builds the root they are mounted in)"
        )
    for path, _, _ in t.layered_volumes:
        if path in ("/", "/tmp", t.work_dir, TOKEN_DIR) or path.startswith((TOKEN_DIR + "/", VOLUMES_DIR)):
            raise InvalidRequest(f"template {t.name!r}: a volume cannot be mounted at {path!r} in a pod")
    return image


def pod_manifest(
    cfg: KubeConfig,
    t: Template,
    pod_name: str,
    sandbox_id: str,
    token: str,
    owner: Owner,
) -> dict[str, Any]:
    """The pod of one sandbox of template `t` (pure: no API call; raises `InvalidRequest`)."""
    image = check_template(cfg, t)
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
    if t.has_egress:
        args += ["--egress", "allow"]
    for rule in t.egress_allow:
        args += ["--egress-rule", rule]
    if t.user == "root":
        # The sandbox's root: an overlay of the pod's own `/` and a disk of the sandbox's, built
        # by the agent in the pod's tmp emptyDir (--build-dir); the agent then takes an id no
        # program has (docs/sandbox.md).
        args += [
            "--user",
            "root",
            "--pod-ids",
            "--new-root",
            "--image-root",
            "/",
            "--root-size",
            str(t.root_size_bytes),
            "--work-size",
            str(t.work_size_bytes),
            "--tmp-size",
            str(t.tmp_size_bytes),
            *(["--outside-dns"] if t.network is True else []),  # the cluster's DNS
        ]
        for i, (_, path, ro) in enumerate(t.volumes):
            # The agent binds the pod's mount of the claim into the root it builds.
            args += ["--volume", f"{VOLUMES_DIR}/{i}:{path}{':ro' if ro else ''}"]
        if t.layers:
            # Its image holds the checkpoint: the root at its paths, the places the agent mounts
            # a disk of their own at (/tmp, the work dir) under PLACES (`layered.py`).
            args += ["--places-layer", PLACES]
        for i, (path, ro, dirs) in enumerate(t.layered_volumes):
            # Its image holds the version's layers, merged, under VOLUME_LAYERS/<i> (`layered.py`).
            lower = [f"{VOLUME_LAYERS}/{i}"] if dirs else []
            args += ["--layered-volume", ":".join(("ro" if ro else "rw", path, *lower))]

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
    for i, (claim, path, ro) in enumerate(t.volumes):  # the cluster's claims (`volume_claims.py`)
        at = f"{VOLUMES_DIR}/{i}" if t.user == "root" else path
        mounts.append({"name": f"volume-{i}", "mountPath": at, **({"readOnly": True} if ro else {})})
        volumes.append({"name": f"volume-{i}", "persistentVolumeClaim": {"claimName": claim, "readOnly": ro}})
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
    capabilities = list(AGENT_CAPABILITIES)
    for extra in (
        *(EGRESS_CAPABILITIES if t.has_egress else ()),
        *(ROOT_CAPABILITIES if t.user == "root" else ()),
    ):
        if extra not in capabilities:
            capabilities.append(extra)
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
            "capabilities": {"drop": ["ALL"], "add": capabilities},
            "seccompProfile": {"type": "RuntimeDefault"},
            **(ROOT_SECURITY if t.user == "root" else {}),
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
        LABEL_MANAGER: owner.identity,
        LABEL_OWNER: owner.owner,
        LABEL_TEMPLATE: _label_value(t.name),
    }
    if t.network is True:
        labels[LABEL_EGRESS] = "allowed"
    elif t.has_egress:  # selected by the list's own NetworkPolicy (`egress.policy_manifest`)
        labels[LABEL_EGRESS] = "allow-list"
        labels[LABEL_EGRESS_POLICY] = policy_digest(t.egress_allow)
    annotations = {**cfg.annotations, ANN_SANDBOX: sandbox_id}
    if owner.manager_pod and owner.manager_uid:
        annotations[ANN_MANAGER_POD] = owner.manager_pod
        annotations[ANN_MANAGER_UID] = owner.manager_uid
    if owner.lease:
        annotations[ANN_REPLICA_LEASE] = owner.lease

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


def secret_manifest(cfg: KubeConfig, pod_name: str, pod_uid: str, token: str, owner: Owner) -> dict[str, Any]:
    """The Secret holding one pod's agent token, garbage collected with the pod."""
    import base64

    meta: dict[str, Any] = {
        "name": f"{pod_name}-token",
        "namespace": cfg.namespace,
        "labels": {
            LABEL_NAME: "sandboxes",
            LABEL_COMPONENT: "sandbox-token",
            LABEL_POOL: cfg.pool,
            LABEL_MANAGER: owner.identity,
            LABEL_OWNER: owner.owner,
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
