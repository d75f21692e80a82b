"""A Python kernel of the code interpreter, run inside a sandbox as `python3 -u -c <this file>`.

Not imported by the server: its source is the program. It reads one JSON request per line on
stdin (`{"code": ..., "env": {...} | null}`), runs the code in one namespace kept across
requests, and writes JSON events, one per line, on its original stdout: `number_of_executions`,
`stdout` / `stderr` chunks (everything written to file descriptors 1 and 2 while the cell runs,
by Python or by a program it starts), `result` (the last expression's value, as a notebook shows
it), `error` (name, value, traceback), then `end`. SIGINT interrupts the running cell
(`KeyboardInterrupt`, reported as its error); the namespace survives it.
"""

import ast
import codecs
import datetime
import json
import os
import signal
import sys
import threading
import traceback

SENTINEL = b"\x00\x1b-cell-end-\x1b\x00"
PROTOCOL = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
REQUESTS = os.fdopen(os.dup(0), "r", encoding="utf-8")
LOCK = threading.Lock()
RUNNING = False


def emit(event):
    line = json.dumps(event)
    with LOCK:
        PROTOCOL.write(line + "\n")
        PROTOCOL.flush()


def now():
    # timezone.utc: the sandbox's python3 may predate 3.11 (datetime.UTC)
    return datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z")  # noqa: UP017


class Capture:
    """A pipe in place of file descriptor `fd`; a thread turns what arrives into events."""

    def __init__(self, fd, kind):
        self.kind = kind
        self.drained = threading.Event()
        read_end, write_end = os.pipe()
        os.dup2(write_end, fd)
        os.close(write_end)
        self.read_end = read_end
        threading.Thread(target=self.pump, daemon=True).start()

    def pump(self):
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        pending = b""
        while True:
            chunk = os.read(self.read_end, 65536)
            if not chunk:
                return
            pending += chunk
            while True:
                at = pending.find(SENTINEL)
                if at < 0:
                    break
                self.send(decoder.decode(pending[:at]))
                pending = pending[at + len(SENTINEL) :]
                self.drained.set()
            keep = len(SENTINEL) - 1
            if len(pending) > keep:
                self.send(decoder.decode(pending[:-keep]))
                pending = pending[-keep:]

    def send(self, text):
        if text:
            emit({"type": self.kind, "text": text, "timestamp": now()})


def main_text(value):
    text = repr(value)
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    return text


def run(code, namespace):
    tree = ast.parse(code, "<cell>")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, "<cell>", "exec"), namespace)  # noqa: S102 - running the cell is the job
    if last is not None:
        value = eval(compile(last, "<cell>", "eval"), namespace)
        if value is not None:
            namespace["_"] = value
            return {"type": "result", "text": main_text(value), "is_main_result": True}
    return None


def error_event(e):
    frames = traceback.extract_tb(e.__traceback__)
    skip = next((i for i, f in enumerate(frames) if f.filename == "<cell>"), len(frames))
    tb = e.__traceback__
    for _ in range(skip):
        tb = tb.tb_next if tb is not None else None
    text = "".join(traceback.format_exception(type(e), e, tb if skip < len(frames) else None))
    return {"type": "error", "name": type(e).__name__, "value": str(e), "traceback": text}


def interrupt(signo, frame):
    if RUNNING:
        raise KeyboardInterrupt


def main():
    global RUNNING
    signal.signal(signal.SIGINT, interrupt)
    # A cell reads nothing of the protocol: its stdin is empty.
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - the kernel's stdin for its lifetime
    captures = [Capture(1, "stdout"), Capture(2, "stderr")]
    sys.stdout = os.fdopen(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    emit({"type": "ready"})
    for count, line in enumerate(REQUESTS, 1):
        request = json.loads(line)
        emit({"type": "number_of_executions", "execution_count": count})
        saved = {}
        result = None
        try:
            for k, v in (request.get("env") or {}).items():
                saved[k] = os.environ.get(k)
                os.environ[k] = v
            RUNNING = True
            result = run(request["code"], namespace)
        except BaseException as e:  # noqa: BLE001 - the cell's failure is its result
            result = error_event(e)
        finally:
            RUNNING = False
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            for c in captures:
                c.drained.clear()
            os.write(1, SENTINEL)
            os.write(2, SENTINEL)
            for c in captures:
                c.drained.wait(5.0)
        except KeyboardInterrupt:
            pass
        if result is not None:
            emit(result)
        emit({"type": "end"})


if __name__ == "__main__":
    main()
