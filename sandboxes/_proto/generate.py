"""Regenerate the Python stubs of proto/*.proto: `python -m sandboxes._proto.generate`.

The stubs are checked in; run this after editing the proto. grpcio-tools writes an absolute import
(`import service_pb2`) into the gRPC module; it is rewritten to a package-relative one.
"""

from __future__ import annotations

import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
# (proto, has gRPC services served by grpcio)
PROTOS = [
    ("service.proto", True),
    ("command_session.proto", False),
    ("envd_process.proto", False),
    ("envd_filesystem.proto", False),
]
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
    for proto, grpc_stubs in PROTOS:
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
        if not grpc_stubs:
            # A wire protocol of another platform: its clients' own generated modules register the
            # same proto file name in the default descriptor pool, and one process may hold both
            # (the SDK and this server, e.g. in tests). Ours lives in a pool of its own.
            module = HERE / f"{proto.removesuffix('.proto')}_pb2.py"
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
            continue
        stem = proto.removesuffix(".proto")
        grpc_module = HERE / f"{stem}_pb2_grpc.py"
        text = grpc_module.read_text()
        text = re.sub(rf"^import {stem}_pb2 as ", f"from . import {stem}_pb2 as ", text, flags=re.MULTILINE)
        grpc_module.write_text(text)
    print(f"generated stubs in {HERE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
