"""An allow-list template's pods: what the agent needs to enforce the list in the pod, and the
NetworkPolicy that fences the pods of one list from outside (the cluster's enforcement, under
the agent's).

The agent moves itself and the programs to a network namespace of their own with only `lo`
(its proxy, DNS and forwarders there; `CAP_SYS_ADMIN` to make the namespace, `CAP_NET_ADMIN` to
bring up its `lo`, `CAP_NET_BIND_SERVICE` for the DNS port); its helper, which stays in the pod's
namespace, opens the connections the list allows. The NetworkPolicy lets the pods reach what the
list's address rules name (their ports), the public internet on the ports of its name rules (a
NetworkPolicy cannot name hosts: the agent checks the names), and the cluster's DNS, which the
helper resolves names with. Policies are additive: the chart's deny-all for sandbox pods stays,
and this one opens only what the list needs."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from ... import _bridge
from .config import LABEL_COMPONENT, LABEL_NAME, LABEL_POOL, KubeConfig

# The label naming the NetworkPolicy (by its digest) that selects a pod of an allow-list template.
LABEL_EGRESS_POLICY = "sandboxes.io/egress-policy"
EGRESS_CAPABILITIES = ("SYS_ADMIN", "NET_ADMIN", "NET_BIND_SERVICE")


def policy_digest(rules: tuple[str, ...], deny: bool = False) -> str:
    """Names an allow- or deny-list: the same list, the same NetworkPolicy, whichever replica
    made it."""
    key = ("deny\0" if deny else "") + "\0".join(rules)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def policy_name(cfg: KubeConfig, rules: tuple[str, ...], deny: bool = False) -> str:
    """A DNS-1123 name: the pool's label value made one, and the list's digest."""
    pool = re.sub(r"[^a-z0-9-]+", "-", cfg.pool.lower())[:40].strip("-") or "sandboxes"
    return f"{pool}-egress-{policy_digest(rules, deny)}"


def _ports(ports: list[int | None]) -> list[dict[str, Any]] | None:
    """NetworkPolicy ports for these rule ports (None: every port)."""
    if not ports or None in ports:
        return None
    return [{"port": p, "protocol": "TCP"} for p in sorted({p for p in ports if p is not None})]


def policy_manifest(cfg: KubeConfig, rules: tuple[str, ...], deny: bool = False) -> dict[str, Any]:
    """The NetworkPolicy of the pods of allow-list `rules`, or of deny-list `rules` (`deny`:
    every public destination on every port, the agent refusing what the rules name; a
    NetworkPolicy can only add what a pod may reach) (pure: no API call)."""
    parsed = _bridge.native().egress_rules(list(rules))
    egress: list[dict[str, Any]] = []
    if deny:
        parsed = [("name", "*", None)]
    for kind, target, port in parsed:
        if kind == "net":
            rule: dict[str, Any] = {"to": [{"ipBlock": {"cidr": target}}]}
            if port is not None:
                rule["ports"] = [{"port": port, "protocol": "TCP"}]
            egress.append(rule)
    name_ports = [port for kind, _, port in parsed if kind != "net"]
    if name_ports:
        private = _bridge.native().non_public_networks()
        public = [
            {"ipBlock": {"cidr": everything, "except": [n for n in private if (":" in n) == v6]}}
            for everything, v6 in (("0.0.0.0/0", False), ("::/0", True))
        ]
        rule = {"to": public}
        ports = _ports(name_ports)
        if ports is not None:
            rule["ports"] = ports
        egress.append(rule)
        egress.append(
            {
                "to": [
                    {
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                    }
                ],
                "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
            }
        )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": policy_name(cfg, rules, deny),
            "namespace": cfg.namespace,
            "labels": {LABEL_NAME: "sandboxes", LABEL_COMPONENT: "sandbox-egress", LABEL_POOL: cfg.pool},
        },
        "spec": {
            "podSelector": {
                "matchLabels": {LABEL_POOL: cfg.pool, LABEL_EGRESS_POLICY: policy_digest(rules, deny)}
            },
            "policyTypes": ["Egress"],
            "egress": egress,
        },
    }
