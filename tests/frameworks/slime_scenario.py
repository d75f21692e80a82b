"""slime's own E2B sandbox code (`slime/agent/sandbox.py`, unmodified, from the archive in
../shared/frameworks) against a real `sandboxes serve`, run by tests/test_frameworks.py in the
e2b client's venv with slime's source on PYTHONPATH:

    python slime_scenario.py IMAGE    (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY and
                                       SLIME_AGENT_SANDBOX_IMAGE_METADATA_KEY set)

Does what slime's agent rollouts do: a sandbox of the task's image chosen by a metadata key, the
`agent` user made by `ensure_agent_user`, the agent's files written and its commands run as that
user (detached, through `exec_and_wait`), the result read back. Prints one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from slime.agent.sandbox import E2BSandbox, ensure_agent_user, exec_and_wait


async def main(image: str) -> None:
    out: dict = {}
    workdir = "/testbed"
    async with E2BSandbox(image, timeout=600) as sb:
        out["sandbox_id"] = sb.sandbox_id
        made = await sb.exec(
            f"mkdir -p {workdir} && cd {workdir} && git init -q && printf 'x = 1\\n' > app.py"
            " && git add app.py && git -c user.email=t@t -c user.name=t commit -qm base",
            check=True,
        )
        out["repo"] = made[0]
        await ensure_agent_user(sb, workdir)
        out["agent"] = (await sb.exec("id -un; echo $HOME; id -Gn", user="agent"))[1].split()
        await sb.write_file(f"{workdir}/app.py", "x = 2\nprint(x * 21)\n", user="agent")
        out["owner"] = (await sb.exec(f"stat -c %U:%G {workdir}/app.py"))[1].strip()
        out["run"] = await exec_and_wait(
            sb,
            cmd="python3 app.py && git diff --stat",
            time_budget_sec=120,
            tag="run1",
            user="agent",
            workdir=workdir,
            want_output=True,
        )
        out["read"] = await sb.read_file(f"{workdir}/app.py", user="agent")
        out["root_only"] = (await sb.exec("touch /root/x", user="agent"))[0]
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
    os._exit(0)
