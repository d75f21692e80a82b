"""What one sandbox writes or caches reaches no other sandbox, alive beside it or made after it,
although sandboxes of a template share read-only views (the default template's /usr is a bind of
this host's; a root sandbox's writable root is an overlay of its own on the same lower layers):
files in every writable place, Python's bytecode caches, POSIX and System V shared memory,
abstract sockets, and files written into /usr by root inside."""

from __future__ import annotations

import asyncio
import glob
import os

import pytest

import sandboxes
from sandboxes import Template

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(300)]

TEMPLATES = {"default": Template(name="default"), "root": Template(name="root", user="root")}

# Left by the first sandbox: a file in each writable place, a POSIX shared memory segment (in
# /dev/shm), a System V one (its key), a bytecode cache of a module it imported (under /usr when root inside can write there, else under /tmp).
LEAVE = r"""
set -e
for d in /work /tmp /var/tmp /dev/shm; do { echo trace > $d/trace-of-a; } 2>/dev/null || true; done
ipcmk -M 4096 -p 0666 >/dev/null
python3 - <<'EOF'
import os, sys
from multiprocessing import shared_memory
shared_memory.SharedMemory(name="shm-of-a", create=True, size=4096)
lib = "/usr/lib/python3/dist-packages" if os.geteuid() == 0 else "/tmp"
os.makedirs(lib, exist_ok=True)
with open(f"{lib}/traceofa.py", "w") as f:
    f.write("X = 1\n")
sys.path.insert(0, lib)
import traceofa  # writes its __pycache__ beside it
EOF
"""

# Holds an abstract socket (the first sandbox's) until /work/stop appears, at most a minute.
HOLD = """
import os, socket, time
s = socket.socket(socket.AF_UNIX)
s.bind("\\0trace-of-a")
s.listen()
print("bound", flush=True)
for _ in range(600):
    if os.path.exists("/work/stop"):
        break
    time.sleep(0.1)
"""

# What another sandbox finds of those: each line a trace, none expected.
LOOK = r"""
for f in /work/trace-of-a /tmp/trace-of-a /var/tmp/trace-of-a /dev/shm/trace-of-a /dev/shm/shm-of-a \
         /usr/lib/python3/dist-packages/traceofa.py /tmp/traceofa.py; do
  test -e $f && echo "file $f"
done
ls -d /usr/lib/python3/dist-packages/__pycache__/traceofa* /tmp/__pycache__ 2>/dev/null | sed 's/^/cache /'
ipcs -m | awk 'NR > 3 && NF { print "sysv " $1 }'
python3 -c '
import socket
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("\0trace-of-a")
    print("abstract socket")
except OSError:
    pass
'
true
"""


async def run(sb: sandboxes.Sandbox, script: str) -> str:
    r = await sb.exec(["/bin/bash", "-c", script])
    assert r.exit_code == 0, r
    return r.stdout.decode()


@pytest.mark.parametrize("template", ["default", "root"])
async def test_what_one_sandbox_leaves_no_other_sees(make_pool, template: str) -> None:
    pool = await make_pool(warm=1, templates=TEMPLATES)
    host_before = set(glob.glob("/usr/lib/python3/dist-packages/*trace*"))
    async with pool.sandbox(template) as a:
        await run(a, LEAVE)
        holder = asyncio.create_task(a.exec(["python3", "-c", HOLD], timeout=120))
        # The traces are there for the sandbox that left them (the check sees what it must).
        mine = await run(a, LOOK)
        while "abstract socket" not in mine:
            assert not holder.done(), holder.result()
            await asyncio.sleep(0.05)
            mine = await run(a, LOOK)
        assert "file /work/trace-of-a" in mine and "file /dev/shm/shm-of-a" in mine
        assert "sysv" in mine and "cache" in mine
        async with pool.sandbox(template) as beside:
            assert await run(beside, LOOK) == ""
        await a.write_file("/work/stop", b"")
        assert (await holder).stdout == b"bound\n"
    async with pool.sandbox(template) as after:
        assert await run(after, LOOK) == ""
    # Nothing of it on this host's /usr either.
    assert set(glob.glob("/usr/lib/python3/dist-packages/*trace*")) == host_before
    assert not os.path.exists("/usr/lib/python3/dist-packages/__pycache__/traceofa.cpython-311.pyc")
