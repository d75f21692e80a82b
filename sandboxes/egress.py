"""Egress policies: what a sandbox whose network is a policy may reach (docs/sandbox.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import _bridge
from .errors import InvalidRequest

__all__ = ["MAX_EGRESS_RULES", "EgressPolicy", "check_rules"]

MAX_EGRESS_RULES = 256
MAX_RULE_BYTES = 260


def check_rules(rules: Any, what: str = "an allow-list") -> tuple[str, ...]:
    """`rules` as a tuple of valid rules, or InvalidRequest with the agent's own reason."""
    if isinstance(rules, str) or not isinstance(rules, (list, tuple)) or len(rules) > MAX_EGRESS_RULES:
        raise InvalidRequest(f"{what} is a list of at most {MAX_EGRESS_RULES} rules, got {rules!r}")
    for rule in rules:
        if (
            not isinstance(rule, str)
            or not rule
            or len(rule) > MAX_RULE_BYTES
            or any(c.isspace() or c == "\0" for c in rule)
        ):
            raise InvalidRequest(
                f"a rule of {what} is a host, *.domain, address or network with an optional :port, got {rule!r}"
            )
    try:  # the agent's own parser: its reason for a bad rule
        _bridge.native().egress_rules(list(rules))
    except ValueError as e:
        raise InvalidRequest(str(e)) from None
    return tuple(rules)


@dataclass(frozen=True)
class EgressPolicy:
    """An allow-list (only what `rules` names is reached) or, with `deny`, a deny-list (every
    public destination but what `rules` names; an empty one: the public internet)."""

    rules: tuple[str, ...] = ()
    deny: bool = False

    @classmethod
    def checked(cls, rules: Any, deny: bool = False) -> EgressPolicy:
        """The policy of `rules`, checked (InvalidRequest with the agent's reason)."""
        return cls(check_rules(rules, "a deny-list" if deny else "an allow-list"), deny=deny)

    @classmethod
    def of(cls, allow: Sequence[str] | None = None, deny: Sequence[str] | None = None) -> EgressPolicy:
        """The policy of exactly one of `allow` and `deny`."""
        if (allow is None) == (deny is None):
            raise InvalidRequest("give exactly one of allow (an allow-list) and deny (a deny-list)")
        return cls.checked(deny, deny=True) if deny is not None else cls.checked(allow)
