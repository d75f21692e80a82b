"""The `sandboxes` command: serve, exec, ls, rm, checkpoint, fork, volume, pause, resume, health,
eval, bench.

```
sandboxes serve --port 50051 --warm 8 --api-keys-file keys.txt --metrics-port 9464
sandboxes serve --insecure --http-port 8080              # + SandboxFusion-compatible POST /run_code
sandboxes exec -- python3 -c 'print(1)'                 # embedded: a local pool in this process
sandboxes exec --address host:50051 -- python3 -V       # remote (key from --api-key / $SANDBOXES_API_KEY)
sandboxes ls --address host:50051 --label run=42
sandboxes rm --address host:50051 --label run=42
sandboxes checkpoint create SANDBOX_ID --address host:50051 # then: exec --checkpoint ID, fork
sandboxes volume create cache --address host:50051          # then: exec --volume /cache=cache
sandboxes pause SANDBOX_ID --address host:50051             # and: resume
sandboxes eval humaneval --solutions canonical --workers 4 --output report.json
```

`exec` prints the program's stdout / stderr and exits with its exit code (128+signal when killed,
124 on timeout); an infrastructure failure exits with 125.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from sandboxes import cli_checkpoints, cli_volumes
from sandboxes.cli_remote import EXIT_INFRA, EXIT_TIMEOUT, err, need_address, run

__all__ = ["build_parser", "load_templates", "main"]


# -- helpers ---------------------------------------------------------------------------------


def _pairs(values: Sequence[str] | None, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values or ():
        k, sep, val = v.partition("=")
        if not sep or not k:
            raise SystemExit(f"sandboxes: {what} must be KEY=VALUE, got {v!r}")
        out[k] = val
    return out


def _files(values: Sequence[str] | None) -> dict[str, bytes]:
    """LOCAL[:REMOTE] -> {remote: content}; REMOTE defaults to the local file's name."""
    out: dict[str, bytes] = {}
    for v in values or ():
        local, sep, remote = v.partition(":")
        try:
            with open(local, "rb") as f:
                out[remote if sep and remote else os.path.basename(local)] = f.read()
        except OSError as e:
            raise SystemExit(f"sandboxes: cannot read {local}: {e.strerror}")
    return out


def load_templates(path: str, default_backend: str = "local") -> dict[str, Any]:
    """A JSON file of templates: `{"name": {Template fields}}` or `[{"name": ..., ...}]`.

    Templates that name no `backend` get `default_backend`.

    `limits` may be an object of `Limits` fields.
    """
    from sandboxes.templates import Template
    from sandboxes.types import Limits

    try:
        with open(path) as f:
            raw = json.load(f)
    except OSError as e:
        raise SystemExit(f"sandboxes: cannot read template file {path}: {e.strerror}")
    except json.JSONDecodeError as e:
        raise SystemExit(f"sandboxes: template file {path} is not valid JSON: {e}")
    if isinstance(raw, dict):
        items = [{"name": name, **fields} for name, fields in raw.items()]
    elif isinstance(raw, list):
        items = raw
    else:
        raise SystemExit(f"sandboxes: template file {path} must hold an object or a list")
    templates = {}
    for item in items:
        if not isinstance(item, dict):
            raise SystemExit(f"sandboxes: template entries must be objects, got {item!r}")
        fields = {"backend": default_backend, **item}
        if isinstance(fields.get("limits"), dict):
            fields["limits"] = Limits(**fields["limits"])
        if "ro_binds" in fields:
            fields["ro_binds"] = tuple(fields["ro_binds"])
        try:
            t = Template(**fields)
        except TypeError as e:
            raise SystemExit(f"sandboxes: bad template {fields.get('name')!r}: {e}")
        templates[t.name] = t
    return templates


def _kube_config(path: str | None) -> Any:
    """The kubernetes backend's settings: a JSON file (`--kube-config`, else $SANDBOXES_KUBE_CONFIG)."""
    from sandboxes.backends.kubernetes import KubeConfig

    path = path or os.environ.get("SANDBOXES_KUBE_CONFIG")
    return KubeConfig.from_file(path) if path else KubeConfig()


@contextlib.contextmanager
def _status(message: str):
    """A spinner on stderr while something slow happens (only on a terminal)."""
    if not sys.stderr.isatty():
        yield
        return
    try:
        from rich.console import Console
    except ImportError:
        yield
        return
    with Console(stderr=True).status(message):
        yield


def _exit_code(result: Any) -> int:
    if result.timed_out:
        return EXIT_TIMEOUT
    if result.signal:
        return 128 + result.signal
    return result.exit_code & 0xFF if result.exit_code >= 0 else 1


# -- commands --------------------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    from sandboxes.errors import SandboxError
    from sandboxes.server.app import serve
    from sandboxes.server.auth import ApiKeys
    from sandboxes.server.logs import setup_logging
    from sandboxes.server.quota import QuotaLimits
    from sandboxes.server.service import ServiceConfig

    try:
        auth = ApiKeys.from_sources(args.api_keys_file, insecure=args.insecure)
    except SandboxError as e:
        err(e.message)
        return 2
    templates = load_templates(args.template_file, args.backend) if args.template_file else None
    backend: Any = args.backend
    if args.backend == "kubernetes":
        from sandboxes.backends.kubernetes import create_backend as kube_backend

        # A served release shares its claimed sandboxes: any replica serves any of them.
        overrides: dict[str, Any] = {"shared": True}
        if args.kube_namespace:
            overrides["namespace"] = args.kube_namespace
        try:
            backend = kube_backend(config=_kube_config(args.kube_config), **overrides)
        except SandboxError as e:
            err(e.message)
            return 2
    setup_logging(args.log_level)
    pool_kwargs: dict[str, Any] = {"claim_timeout": args.claim_timeout}
    if args.image and templates:  # templates of the file that name no image get this one
        templates = {n: t if t.image else t.replace(image=args.image) for n, t in templates.items()}
    elif args.image:
        pool_kwargs["image"] = args.image
    if args.max_size:
        pool_kwargs["max_size"] = args.max_size
    kwargs: dict[str, Any] = dict(  # noqa: C408
        host=args.host,
        port=args.port,
        backend=backend,
        warm=args.warm,
        templates=templates,
        pool_kwargs=pool_kwargs,
        auth=auth,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        quota=QuotaLimits(max_sandboxes=args.max_sandboxes_per_key, max_execs=args.max_execs_per_key),
        config=ServiceConfig(default_ttl_s=args.default_ttl),
        grace_s=args.grace,
        http_port=args.http_port,
        http_insecure=args.http_insecure,
        ports_port=args.ports_port,
        image_metadata_key=args.image_metadata_key,
    )
    try:
        run(lambda: serve(**kwargs))
    except SandboxError as e:
        err(f"{e.kind.value}: {e.message}")
        return EXIT_INFRA if e.retryable else 2
    except KeyboardInterrupt:
        pass
    return 0


def _volumes(args: argparse.Namespace) -> dict[str, str | tuple[str, bool]] | None:
    """`--volume PATH=VOLUME[:ro]` as mounts."""
    out: dict[str, str | tuple[str, bool]] = {}
    for spec in args.volume or ():
        path, _, ref = spec.partition("=")
        ro = ref.endswith(":ro")
        out[path] = (ref.removesuffix(":ro"), True) if ro else ref
    return out or None


async def _exec_embedded(args: argparse.Namespace, argv: Any, env: dict, files: dict, stdin: bytes) -> Any:
    from sandboxes.pool import Pool

    pool_kwargs: dict[str, Any] = {}
    if args.template_file:
        pool_kwargs["templates"] = load_templates(args.template_file)
    async with Pool(backend=args.backend, warm=0, **pool_kwargs) as pool:
        with _status("starting a sandbox…"):
            sb = await pool.claim(
                args.template,
                env=env or None,
                files=files or None,
                checkpoint=args.checkpoint,
                volumes=_volumes(args),
            )
        try:
            return await sb.exec(argv, timeout=args.timeout, stdin=stdin, cwd=args.cwd)
        finally:
            await sb.close()


async def _exec_remote(args: argparse.Namespace, argv: Any, env: dict, files: dict, stdin: bytes) -> Any:
    from sandboxes.client import AsyncSandboxClient

    async with AsyncSandboxClient(args.address, args.api_key) as client:
        with _status("creating a sandbox…"):
            sb = await client.create(
                args.template or "default",
                env=env or None,
                files=files or None,
                checkpoint=args.checkpoint,
                volumes=_volumes(args),
            )
        try:
            return await sb.exec(argv, timeout=args.timeout, stdin=stdin, cwd=args.cwd)
        finally:
            await sb.close()


def cmd_exec(args: argparse.Namespace) -> int:
    from sandboxes.errors import SandboxError

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if args.shell is not None:
        if command:
            err("give either -c COMMAND or a program with arguments, not both")
            return 2
        argv: Any = args.shell
    elif command:
        argv = command
    else:
        err("nothing to run: give a program (after --) or -c COMMAND")
        return 2
    env = _pairs(args.env, "--env")
    files = _files(args.file)
    stdin = sys.stdin.buffer.read() if args.stdin else b""
    execute = _exec_remote if args.address else _exec_embedded
    try:
        result = run(lambda: execute(args, argv, env, files, stdin))
    except SandboxError as e:
        err(f"{e.kind.value}: {e.message}")
        return EXIT_INFRA
    sys.stdout.buffer.write(result.stdout)
    sys.stdout.buffer.flush()
    sys.stderr.buffer.write(result.stderr)
    sys.stderr.buffer.flush()
    if result.timed_out:
        err(f"timed out after {args.timeout}s")
    return _exit_code(result)


def cmd_ls(args: argparse.Namespace) -> int:
    from sandboxes.client import AsyncSandboxClient
    from sandboxes.errors import SandboxError

    if (rc := need_address(args)) is not None:
        return rc
    labels = _pairs(args.label, "--label")

    async def go() -> list:
        async with AsyncSandboxClient(args.address, args.api_key) as client:
            return await client.list(labels or None)

    try:
        sandboxes = run(go)
    except SandboxError as e:
        err(f"{e.kind.value}: {e.message}")
        return EXIT_INFRA
    rows = [
        {
            "id": sb.id,
            "template": sb.template,
            "labels": sb.labels,
            "created_at": sb.created_at,
            "expires_at": sb.expires_at,
        }
        for sb in sandboxes
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        for r in rows:
            labels_s = ",".join(f"{k}={v}" for k, v in r["labels"].items())
            print(f"{r['id']}\t{r['template']}\t{labels_s}")
        return 0
    table = Table("ID", "TEMPLATE", "LABELS", "EXPIRES IN")
    import time

    now = time.time()
    for r in rows:
        expires = f"{max(0.0, r['expires_at'] - now):.0f}s" if r["expires_at"] else "-"
        table.add_row(r["id"], r["template"], ",".join(f"{k}={v}" for k, v in r["labels"].items()), expires)
    Console().print(table)
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    from sandboxes.client import AsyncSandboxClient
    from sandboxes.errors import SandboxError

    if (rc := need_address(args)) is not None:
        return rc
    labels = _pairs(args.label, "--label")
    if not args.ids and not labels:
        err("give sandbox ids and/or --label KEY=VALUE")
        return 2

    async def go() -> list[str]:
        async with AsyncSandboxClient(args.address, args.api_key) as client:
            return await client.bulk_delete(ids=args.ids or None, labels=labels or None)

    try:
        with _status("deleting…"):
            deleted = run(go)
    except SandboxError as e:
        err(f"{e.kind.value}: {e.message}")
        return EXIT_INFRA
    for sid in deleted:
        print(sid)
    missing = set(args.ids or ()) - set(deleted)
    if missing:
        err(f"not found: {', '.join(sorted(missing))}")
        return 1
    return 0


def cmd_health(args: argparse.Namespace) -> int:
    from sandboxes.client import AsyncSandboxClient
    from sandboxes.errors import SandboxError

    if (rc := need_address(args)) is not None:
        return rc

    async def go() -> dict:
        async with AsyncSandboxClient(args.address, args.api_key, retries=0) as client:
            return await client.health()

    try:
        print(json.dumps(run(go), indent=2))
    except SandboxError as e:
        err(f"{e.kind.value}: {e.message}")
        return EXIT_INFRA
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    """Grade a problem set (humaneval, stdio) through an embedded pool; see `sandboxes.evaluate`."""
    from sandboxes.evaluate import main as eval_main

    return eval_main(args, run=run)


def cmd_bench(args: argparse.Namespace) -> int:
    """Hand over to the benchmark harness: `bench.run:main`, else `bench.__main__:main`."""
    import importlib

    bench_main = None
    errors = []
    for module in ("bench.run", "bench.__main__"):
        try:
            bench_main = getattr(importlib.import_module(module), "main", None)
        except ImportError as e:
            errors.append(f"{module}: {e}")
            continue
        if bench_main is not None:
            break
    if bench_main is None:
        err(
            "the benchmark harness is not importable (it is the bench/ package of a source "
            "checkout; run from the repository root): " + "; ".join(errors)
        )
        return 2
    return int(bench_main(list(args.bench_args)) or 0)


# -- parser ----------------------------------------------------------------------------------


def _remote_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--address",
        default=os.environ.get("SANDBOXES_ADDRESS"),
        help="server host:port (default $SANDBOXES_ADDRESS)",
    )
    p.add_argument("--api-key", default=None, help="API key (default $SANDBOXES_API_KEY)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sandboxes", description="High-throughput code-execution sandboxes."
    )
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    p = sub.add_parser("serve", help="run the gRPC server over a warm pool")
    p.add_argument("--backend", default="local", help="sandbox backend (default: local)")
    p.add_argument(
        "--image", default=None, help="container image (docker backend; default sandboxes-sandbox:latest)"
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=50051)
    p.add_argument("--warm", type=int, default=4, help="ready sandboxes kept per template")
    p.add_argument("--max-size", type=int, default=None, help="cap of live sandboxes of the pool")
    p.add_argument(
        "--claim-timeout", type=float, default=30.0, help="default wait of a create for a free sandbox"
    )
    p.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus /metrics on this port")
    p.add_argument("--metrics-host", default="127.0.0.1")
    p.add_argument("--api-keys-file", default=None, help="file of API keys, one `name:key` or `key` a line")
    p.add_argument("--insecure", action="store_true", help="allow running without any API key (no auth)")
    p.add_argument("--template-file", default=None, help="JSON file of templates")
    p.add_argument("--max-sandboxes-per-key", type=int, default=None)
    p.add_argument("--max-execs-per-key", type=int, default=None)
    p.add_argument("--default-ttl", type=float, default=None, help="TTL (s) of sandboxes created without one")
    p.add_argument("--grace", type=float, default=10.0, help="seconds running calls get on shutdown")
    p.add_argument("--log-level", default="info")
    p.add_argument(
        "--http-port",
        type=int,
        default=None,
        help="also serve a SandboxFusion-compatible HTTP API (POST /run_code) on this port",
    )
    p.add_argument(
        "--ports-port",
        type=int,
        default=None,
        help="carry connections to ports programs listen on inside sandboxes on this port too "
        "(by Host {port}-{id}.domain, or by path /ports/{id}/{port}/{token}/), and name it to "
        "clients; the HTTP port carries them either way",
    )
    p.add_argument(
        "--image-metadata-key",
        default=None,
        metavar="KEY",
        help="E2B API: a create whose metadata has KEY runs the image or template its value names",
    )
    p.add_argument(
        "--http-insecure",
        action="store_true",
        help="no API key on the one-shot run endpoints (SandboxFusion's /run_code, Piston, /execute_batch), "
        "whose callers send none: they run as the owner 'anonymous', with its own quotas; the APIs "
        "that keep sandboxes stay keyed",
    )
    p.add_argument(
        "--kube-config",
        default=None,
        metavar="FILE",
        help="kubernetes backend: JSON file of its settings (pod template, namespace, ...)",
    )
    p.add_argument("--kube-namespace", default=None, help="kubernetes backend: namespace of the sandbox pods")
    p.set_defaults(fn=cmd_serve)

    p = sub.add_parser("exec", help="run one command in a fresh sandbox")
    _remote_args(p)
    p.add_argument("--backend", default="local", help="backend of the embedded pool")
    p.add_argument("--template", default=None)
    p.add_argument("--template-file", default=None, help="JSON file of templates (embedded)")
    p.add_argument("--timeout", type=float, default=None, help="wall-time limit of the program (s)")
    p.add_argument("--env", "-e", action="append", metavar="KEY=VALUE")
    p.add_argument("--file", "-f", action="append", metavar="LOCAL[:REMOTE]", help="copy a file in first")
    p.add_argument("--cwd", default=None)
    p.add_argument("--checkpoint", default=None, metavar="ID", help="make the sandbox from this checkpoint")
    p.add_argument(
        "--volume", action="append", metavar="PATH=VOLUME[:ro]", help="mount a volume of yours at PATH"
    )
    p.add_argument("--stdin", action="store_true", help="pass this process's stdin to the program")
    p.add_argument("-c", dest="shell", default=None, metavar="COMMAND", help="run COMMAND with /bin/sh -c")
    p.add_argument("command", nargs=argparse.REMAINDER, help="program and arguments (after --)")
    p.set_defaults(fn=cmd_exec)

    p = sub.add_parser("ls", help="list the sandboxes of your API key on a server")
    _remote_args(p)
    p.add_argument("--label", "-l", action="append", metavar="KEY=VALUE")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_ls)

    p = sub.add_parser("rm", help="delete sandboxes by id or label")
    _remote_args(p)
    p.add_argument("ids", nargs="*")
    p.add_argument("--label", "-l", action="append", metavar="KEY=VALUE")
    p.set_defaults(fn=cmd_rm)

    cli_checkpoints.add_parsers(sub, _remote_args)
    cli_volumes.add_parsers(sub, _remote_args)

    p = sub.add_parser("health", help="a server's health and pool sizes")
    _remote_args(p)
    p.set_defaults(fn=cmd_health)

    p = sub.add_parser("eval", help="grade a problem set (humaneval, stdio) in local sandboxes")
    from sandboxes.evaluate import add_arguments as eval_arguments

    eval_arguments(p)
    p.set_defaults(fn=cmd_eval)

    p = sub.add_parser("bench", help="run the benchmark harness (bench/)")
    p.add_argument("bench_args", nargs=argparse.REMAINDER)
    p.set_defaults(fn=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:
        # Everything after `bench` belongs to the harness, options included.
        return cmd_bench(argparse.Namespace(bench_args=argv[1:]))
    args = build_parser().parse_args(argv)
    return int(args.fn(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
