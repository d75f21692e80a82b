"""`ChatHarness`: the model answers once, asked from this process through v1's interception
endpoint (which records the turn on the trace). Nothing runs or is installed in the runtime."""

from __future__ import annotations

from typing import Any

import httpx
import verifiers.v1 as vf
from verifiers.v1.dialects.chat import message_to_wire

__all__ = ["ChatHarness", "ChatHarnessConfig"]


class ChatHarnessConfig(vf.HarnessConfig):
    id: str = "sandboxes-code"
    max_tokens: int | None = None


class ChatHarness(vf.Harness[ChatHarnessConfig]):
    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(
        self, ctx: Any, trace: Any, runtime: Any, endpoint: str, secret: str, mcp_urls: Any, data: Any
    ) -> vf.ProgramResult:
        system, prompt = self.resolve_prompt(data)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        else:
            messages += [message_to_wire(m) for m in prompt or []]
        body: dict[str, Any] = {"model": ctx.model, "messages": messages}
        if self.config.max_tokens:
            body["max_tokens"] = self.config.max_tokens
        async with httpx.AsyncClient(timeout=httpx.Timeout(None, connect=30)) as http:
            r = await http.post(
                f"{endpoint.rstrip('/')}/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {secret}"},
            )
        if r.status_code >= 400:  # the provider's own error is on the trace; this marks the turn failed
            return vf.ProgramResult(exit_code=1, stdout="", stderr=r.text[-2000:])
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")
