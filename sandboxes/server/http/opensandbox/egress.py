"""The egress sidecar's policy routes (the SDK's `get_egress_policy`, `patch_egress_rules`,
`delete_egress_rules`), on the sandbox's egress policy (`ServerCore.network_of` / `set_network`).

```
GET    /policy    {status, mode, policy: {defaultAction, egress: [{action, target}]}}
PATCH  /policy    [{action, target}]: merged in (a rule replaces the one of its target)
DELETE /policy    [target]: those rules removed
```

A policy here is an allow-list (`defaultAction` deny, its `allow` rules) or a deny-list
(`defaultAction` allow, its `deny` rules); a rule of the default's own action is a no-op and is
not kept. The credential vault is refused (501, `NOT_SUPPORTED`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sandboxes import errors as E
from sandboxes.egress import EgressPolicy
from sandboxes.server.http.endpoint import Refused

if TYPE_CHECKING:
    from sandboxes.server.http.opensandbox.execd import Execd
    from sandboxes.server.http.opensandbox.state import OpenSandbox
    from sandboxes.server.registry import Record

__all__ = ["Egress", "policy_json"]


def policy_json(policy: EgressPolicy | bool) -> dict[str, Any]:
    """The sidecar's `NetworkPolicy` of a sandbox's policy (a template's fixed False: nothing
    out; True: everything)."""
    if isinstance(policy, bool):
        return {"defaultAction": "allow" if policy else "deny", "egress": []}
    action = "deny" if policy.deny else "allow"
    return {
        "defaultAction": "allow" if policy.deny else "deny",
        "egress": [{"action": action, "target": t} for t in policy.rules],
    }


def _rules(policy: EgressPolicy | bool) -> tuple[str, dict[str, str]]:
    body = policy_json(policy)
    return body["defaultAction"], {r["target"]: r["action"] for r in body["egress"]}


class Egress:
    """The egress routes (`execd` routes them to a sandbox, at its egress endpoint)."""

    def __init__(self, execd: Execd) -> None:
        self.execd = execd
        self.core = execd.core

    def routes(self) -> list[tuple[str, Any, str]]:
        return [
            ("/policy", self.get, "GET"),
            ("/policy", self.patch, "PATCH"),
            ("/policy", self.delete, "DELETE"),
        ]

    def _answer(self, rec: Record) -> Response:
        policy = self.core.network_of(rec)
        body = policy_json(policy)
        mode = "allow_all" if body["defaultAction"] == "allow" and not body["egress"] else "enforcing"
        if body["defaultAction"] == "deny" and not body["egress"]:
            mode = "deny_all"
        return JSONResponse({"status": "ok", "mode": mode, "policy": body})

    async def get(self, request: Request, rec: Record, sb: OpenSandbox) -> Response:
        return self._answer(rec)

    async def _set(self, rec: Record, default: str, rules: dict[str, str]) -> Response:
        kept = [t for t, action in rules.items() if action != default]
        try:
            policy = EgressPolicy.of(allow=kept) if default == "deny" else EgressPolicy.of(deny=kept)
            await self.core.set_network(rec, policy)
        except E.InvalidRequest as e:
            raise Refused(400, e.message, fields={"code": "INVALID_REQUEST_BODY"}) from None
        return self._answer(rec)

    async def patch(self, request: Request, rec: Record, sb: OpenSandbox) -> Response:
        body = await self.execd.body(request)
        if not isinstance(body, list) or not all(
            isinstance(r, dict) and r.get("action") in ("allow", "deny") and isinstance(r.get("target"), str)
            for r in body
        ):
            raise Refused(
                400, "expected [{action: allow|deny, target}]", fields={"code": "INVALID_REQUEST_BODY"}
            )
        default, rules = _rules(self.core.network_of(rec))
        patch: dict[str, str] = {}
        for r in body:
            patch.setdefault(r["target"].strip(), r["action"])  # the first rule of a target wins
        return await self._set(rec, default, {**rules, **patch})

    async def delete(self, request: Request, rec: Record, sb: OpenSandbox) -> Response:
        body = await self.execd.body(request)
        if not isinstance(body, list) or not all(isinstance(t, str) for t in body):
            raise Refused(400, "expected [target]", fields={"code": "INVALID_REQUEST_BODY"})
        default, rules = _rules(self.core.network_of(rec))
        gone = {t.strip() for t in body}
        return await self._set(rec, default, {t: a for t, a in rules.items() if t not in gone})
