"""Generates the Python code for proto/ into the source tree (or another root).

Usage: python scripts/gen_proto.py [OUT_ROOT]

The generated modules land in clockwork_svc/api/v1/ because the .proto files live
under proto/clockwork_svc/api/v1/; their import paths therefore match the package.
tests/unit/test_generated_code.py regenerates into a temporary root and compares.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from google.api import annotations_pb2
from grpc_tools import protoc

REPO = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO / "proto"


def generate(out_root: Path) -> list[Path]:
    # protoc finds the mypy plugins (protoc-gen-mypy*) on PATH, next to this interpreter.
    bin_dir = str(Path(sys.executable).parent)
    os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    protos = sorted(PROTO_ROOT.rglob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    # google/api/annotations.proto and http.proto ship in googleapis-common-protos.
    googleapis = Path(annotations_pb2.__file__).parent.parent.parent
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"-I{googleapis}",
        f"--python_out={out_root}",
        f"--grpc_python_out={out_root}",
        f"--mypy_out={out_root}",
        f"--mypy_grpc_out={out_root}",
        *[str(p) for p in protos],
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    for proto in protos:
        package_dir = out_root / proto.parent.relative_to(PROTO_ROOT)
        for parent in [package_dir, *package_dir.parents]:
            if parent == out_root or out_root not in parent.parents:
                break
            (parent / "__init__.py").touch(exist_ok=True)
    return sorted((out_root / "clockwork_svc" / "api").rglob("*_pb2*"))


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO
    for path in generate(root):
        print(path.relative_to(root))
