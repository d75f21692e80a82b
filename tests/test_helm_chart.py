"""The Helm chart `deploy/helm/sandboxes`: lint and render it (helm-python-sdk bundles the Helm
library: no helm binary needed) for the default values and every `deploy/helm/ci/*.yaml`, validate
every rendered manifest against the Kubernetes schemas (kubernetes-validate), and check that what
the chart hands the manager (args, kube.json, templates.json) is accepted by the code.

`make helm-test` runs this file alone; `make test` runs it with everything else.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate as kv
import pytest
import yaml
from helm_chart import CHART, NAMESPACE, ROOT, by_kind, render

CI_VALUES = sorted((ROOT / "deploy" / "helm" / "ci").glob("*.yaml"))
# A recent release and the oldest the chart supports (kubeVersion >= 1.27; hostUsers is in 1.30+).
KUBE_VERSIONS = ["1.30.0", "1.33.0"]


def _values(path: Path | None) -> dict[str, Any]:
    return {} if path is None else yaml.safe_load(path.read_text()) or {}


CASES = [pytest.param(None, id="defaults")] + [pytest.param(p, id=p.stem) for p in CI_VALUES]


def test_there_are_non_default_value_files() -> None:
    assert len(CI_VALUES) >= 3


@pytest.mark.parametrize("values_file", CASES)
def test_lint(values_file: Path | None) -> None:
    report = helm.lint(
        str(CHART), _values(values_file), strict=True, namespace=NAMESPACE, kube_version="v1.33.0"
    )
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # 2 warning, 3 error
    assert not report["errors"] and not problems, report


@pytest.mark.parametrize("values_file", CASES)
def test_render_and_validate(values_file: Path | None) -> None:
    docs = render(_values(values_file))
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "Service", "ServiceAccount", "Role", "RoleBinding", "ConfigMap"} <= kinds
    for doc in docs:
        path = doc.pop("__path")
        for version in KUBE_VERSIONS:
            try:
                kv.validate(doc, version, strict=True)
            except kv.SchemaNotFoundError:
                # CRDs have no schema in kubernetes-validate; check the one we render by hand.
                assert doc["kind"] == "ServiceMonitor" and doc["apiVersion"] == "monitoring.coreos.com/v1", (
                    path
                )
                assert doc["spec"]["endpoints"][0]["port"] == "metrics"
            except kv.ValidationError as e:
                raise AssertionError(
                    f"{path} ({doc['kind']}) is invalid for Kubernetes {version}: {e}"
                ) from e


@pytest.mark.parametrize("values_file", CASES)
def test_the_manager_accepts_what_the_chart_gives_it(values_file: Path | None, tmp_path: Path) -> None:
    from sandboxes.backends.kubernetes import KubeConfig, KubernetesBackend
    from sandboxes.cli import build_parser, load_templates

    docs = render(_values(values_file))
    deploy = by_kind(docs, "Deployment")[0]
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    args = build_parser().parse_args(container["args"])
    assert args.backend == "kubernetes" and args.host == "0.0.0.0"
    cm = by_kind(docs, "ConfigMap")[0]["data"]
    cfg = KubeConfig.from_mapping(json.loads(cm["kube.json"]))
    # Records that outlive sandboxes live on the state volume: each replica's, or one claim shared.
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SANDBOXES_CHECKPOINT_DIR"].startswith("/var/lib/sandboxes/")
    assert {"name": "state", "mountPath": "/var/lib/sandboxes"} in container["volumeMounts"]
    (state,) = [v for v in deploy["spec"]["template"]["spec"]["volumes"] if v["name"] == "state"]
    claim = _values(values_file).get("manager", {}).get("state", {}).get("existingClaim")
    assert state.get("persistentVolumeClaim", {}).get("claimName") == claim if claim else "emptyDir" in state
    sandbox = _values(values_file).get("sandbox", {})
    assert cfg.registry_url == (sandbox.get("registryUrl") or None)
    assert cfg.volume_storage_class == (sandbox.get("volumeStorageClass") or None)
    (tmp_path / "templates.json").write_text(cm["templates.json"])
    templates = load_templates(str(tmp_path / "templates.json"), "kubernetes")
    # Every template renders a pod that validates against the Kubernetes schema.
    be = KubernetesBackend(cfg, pool_id="p1")
    for t in templates.values():
        pod = be.pod_manifest(t, "sb-0123456789ab", "sb-0123456789ab", "t" * 32)
        kv.validate(pod, KUBE_VERSIONS[-1], strict=True)
        assert pod["metadata"]["labels"]["sandboxes.io/pool"] == cfg.pool
    # The sandbox NetworkPolicy selects exactly the pods the backend labels.
    nps = {d["metadata"]["name"]: d for d in by_kind(docs, "NetworkPolicy")}
    sandbox_np = next((d for n, d in nps.items() if n.endswith("-sandbox")), None)
    if sandbox_np is not None:
        assert sandbox_np["spec"]["podSelector"]["matchLabels"] == {"sandboxes.io/pool": cfg.pool}
        assert sandbox_np["metadata"]["namespace"] == cfg.namespace
        assert sandbox_np["spec"]["egress"] == []
        port = sandbox_np["spec"]["ingress"][0]["ports"][0]["port"]
        assert port == cfg.agent_port


def test_secure_defaults() -> None:
    docs = render({})
    pod = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]
    sc = pod["containers"][0]["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    probes = pod["containers"][0]
    assert probes["livenessProbe"] and probes["readinessProbe"] and pod["terminationGracePeriodSeconds"] > 10
    # RBAC: pods, the token / claim Secrets and Leases, the allow-lists' NetworkPolicies (made,
    # never changed), namespaced, nothing cluster-wide; no update (only merge patches), no
    # deletecollection.
    assert not by_kind(docs, "ClusterRole") and not by_kind(docs, "ClusterRoleBinding")
    rules = by_kind(docs, "Role")[0]["rules"]
    assert {r["resources"][0]: set(r["verbs"]) for r in rules} == {
        "pods": {"get", "list", "watch", "create", "patch", "delete"},
        "secrets": {"get", "list", "watch", "create", "patch"},
        "leases": {"get", "list", "watch", "create", "patch", "delete"},
        "networkpolicies": {"create"},
        "persistentvolumeclaims": {"create", "delete"},
    }
    assert not any("exec" in res or "proxy" in res for r in rules for res in r["resources"])
    # NetworkPolicies and a PDB by default; no ServiceMonitor unless asked.
    assert len(by_kind(docs, "NetworkPolicy")) == 3
    assert by_kind(docs, "PodDisruptionBudget")[0]["spec"]["maxUnavailable"] == 1
    assert not by_kind(docs, "ServiceMonitor")
    # An API key is generated when none is given.
    secret = by_kind(docs, "Secret")[0]
    assert secret["data"]["api-keys"]
    kube = json.loads(by_kind(docs, "ConfigMap")[0]["data"]["kube.json"])
    assert kube["host_users"] is False and kube["token_mode"] == "secret"


def test_replicas_behind_the_service() -> None:
    """Every surface's port on the Service; replicas > 1 with a PDB and a preStop wait by
    default; an HPA, when enabled, owns the replica count."""
    docs = render({})
    deploy = by_kind(docs, "Deployment")[0]
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["port"] for p in by_kind(docs, "Service")[0]["spec"]["ports"]}
    assert ports == {"grpc": 50051, "metrics": 9090, "http": 8080}
    assert {p["name"] for p in container["ports"]} == set(ports)
    assert "--http-port=8080" in container["args"]
    assert deploy["spec"]["replicas"] == 2 and by_kind(docs, "PodDisruptionBudget")
    assert container["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "5"]
    kube = json.loads(by_kind(docs, "ConfigMap")[0]["data"]["kube.json"])
    assert kube["replica_lease_s"] == 10
    assert not by_kind(docs, "HorizontalPodAutoscaler")
    docs = render({"autoscaling": {"enabled": True, "minReplicas": 3}, "service": {"httpPort": None}})
    hpa = by_kind(docs, "HorizontalPodAutoscaler")[0]["spec"]
    assert hpa["scaleTargetRef"]["name"] == by_kind(docs, "Deployment")[0]["metadata"]["name"]
    assert hpa["minReplicas"] == 3 and "replicas" not in by_kind(docs, "Deployment")[0]["spec"]
    assert "http" not in {p["name"] for p in by_kind(docs, "Service")[0]["spec"]["ports"]}


def test_separate_sandbox_namespace_gets_its_own_rbac() -> None:
    docs = render({"sandbox": {"namespace": "runs"}})
    roles = {(r["metadata"]["namespace"], r["metadata"]["name"]) for r in by_kind(docs, "Role")}
    assert roles == {("runs", "rel-sandboxes"), (NAMESPACE, "rel-sandboxes-peers")}
    np = next(d for d in by_kind(docs, "NetworkPolicy") if d["metadata"]["name"] == "rel-sandboxes-sandbox")
    peer = np["spec"]["ingress"][0]["from"][0]
    assert np["metadata"]["namespace"] == "runs"
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": NAMESPACE}


def test_schema_rejects_bad_values() -> None:
    with helm.Chart.load(str(CHART)) as chart:
        for bad in (
            {"manager": {"replicas": "three"}},
            {"sandbox": {"tokenMode": "file"}},
            {"sandbox": {"resources": {"limits": {"memory": "lots"}}}},
            {"unknownTopLevel": 1},
            {"apiKeys": {"keys": [{"name": "a", "key": "short"}]}},
        ):
            with pytest.raises(Exception):  # noqa: B017 - helm raises its own HelmValuesError
                chart.validate_schema(bad)
