"""Regenerate the Python stubs of proto/*.proto: `python -m sandboxes._proto.generate`.

The stubs are checked in; run this after editing the proto. grpcio-tools writes absolute imports
(`import service_pb2`, `import common_pb2`); they are rewritten to package-relative ones.
"""

from __future__ import annotations

import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
# (proto, how): "grpc" ours with services served by grpcio, "plain" ours (messages only, in the
# default pool: service.proto imports it), "private" another platform's (a pool of its own).
PROTOS = [
    ("common.proto", "plain"),
    ("service.proto", "grpc"),
    ("command_session.proto", "private"),
    ("envd_process.proto", "private"),
    ("envd_filesystem.proto", "private"),
]
OURS = ("common", "service")
# Well-known protos the private pools need before a file that imports them.
_WELL_KNOWN = {"google/protobuf/timestamp.proto": "timestamp_pb2"}


def main() -> int:
    try:
        import grpc_tools
        from grpc_tools import protoc
    except ImportError:
        print("grpcio-tools is not installed: pip install grpcio-tools", file=sys.stderr)
        return 1
    include = pathlib.Path(grpc_tools.__file__).parent / "_proto"
    for proto, how in PROTOS:
        grpc_stubs = how == "grpc"
        args = [
            "grpc_tools.protoc",
            f"-I{ROOT / 'proto'}",
            f"-I{include}",
            f"--python_out={HERE}",
            f"--pyi_out={HERE}",
            *([f"--grpc_python_out={HERE}"] if grpc_stubs else []),
            str(ROOT / "proto" / proto),
        ]
        if protoc.main(args) != 0:
            print(f"protoc failed on {proto}", file=sys.stderr)
            return 1
        stem = proto.removesuffix(".proto")
        if how != "private":
            for generated in [f"{stem}_pb2.py", f"{stem}_pb2.pyi", *([f"{stem}_pb2_grpc.py"] if grpc_stubs else [])]:
                module = HERE / generated
                text = module.read_text()
                for dep in OURS:
                    text = re.sub(rf"^import {dep}_pb2 as ", f"from . import {dep}_pb2 as ", text, flags=re.MULTILINE)
                module.write_text(text)
            continue
        # A wire protocol of another platform: its clients' own generated modules register the
        # same proto file name in the default descriptor pool, and one process may hold both (the
        # SDK and this server, e.g. in tests). Ours lives in a pool of its own.
        module = HERE / f"{stem}_pb2.py"
        text = module.read_text()
        deps = "".join(
            f"from google.protobuf import {mod} as _{mod}\n_POOL.AddSerializedFile(_{mod}.DESCRIPTOR.serialized_pb)\n"
            for name, mod in _WELL_KNOWN.items()
            if f'import "{name}"' in (ROOT / "proto" / proto).read_text()
        )
        text = text.replace(
            "DESCRIPTOR = _descriptor_pool.Default().AddSerializedFile(",
            "_POOL = _descriptor_pool.DescriptorPool()\n" + deps + "DESCRIPTOR = _POOL.AddSerializedFile(",
        )
        module.write_text(text)
    print(f"generated stubs in {HERE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
