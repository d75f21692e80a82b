"""The E2B API's network configuration (`network` at create, `PUT /sandboxes/{id}/network`) as
the sandbox's egress policy (`sandboxes.egress`).

E2B's firewall lets everything out unless `denyOut` says otherwise, and `allowOut` wins over
`denyOut`: `denyOut` holding all traffic (`0.0.0.0/0`, the SDK's `ALL_TRAFFIC`) with `allowOut`
is an allow-list; `denyOut` without it is a deny-list (every public destination but those);
`allow_internet_access: false` denies all traffic. Per-host transform `rules` and an
`egressProxy` cannot be served here (400); `dnsServers` only opens the platform's firewall to
them, and a sandbox here resolves names through its agent's DNS, so they are accepted and have
no effect."""

from __future__ import annotations

from typing import Any

from sandboxes import errors as E
from sandboxes.egress import EgressPolicy
from sandboxes.server.http.endpoint import Refused

__all__ = ["ALL_TRAFFIC", "network_json", "parse_network"]

ALL_TRAFFIC = "0.0.0.0/0"


def _list(v: Any, what: str) -> list[str]:
    if v is None:
        return []
    if not isinstance(v, list) or not all(isinstance(e, str) for e in v):
        raise Refused(400, f"{what} must be a list of strings")
    return [e.strip() for e in v]


def parse_network(network: Any, allow_internet_access: Any = None) -> EgressPolicy | None:
    """The policy a create or update asks for; None: it asks for none (its template's)."""
    if network is None:
        network = {}
    if not isinstance(network, dict):
        raise Refused(400, "network must be an object")
    for key, what in (("rules", "per-host transform rules"), ("egressProxy", "an egress proxy")):
        if network.get(key):
            raise Refused(400, f"{what} (network.{key}) is not supported by this server")
    if allow_internet_access is not None and not isinstance(allow_internet_access, bool):
        raise Refused(400, "allow_internet_access must be a boolean")
    allow = _list(network.get("allowOut"), "allowOut")
    deny = _list(network.get("denyOut"), "denyOut")
    if not allow and not deny and allow_internet_access is None:
        return None
    try:
        if ALL_TRAFFIC in deny or allow_internet_access is False:
            return EgressPolicy.of(allow=allow)
        return EgressPolicy.of(deny=deny)
    except E.InvalidRequest as e:
        raise Refused(400, e.message) from None


def network_json(policy: EgressPolicy) -> dict[str, Any]:
    """The `network` of a sandbox's detail (`SandboxNetworkConfig`)."""
    if policy.deny:
        return {"allowOut": [], "denyOut": list(policy.rules)}
    return {"allowOut": list(policy.rules), "denyOut": [ALL_TRAFFIC]}
