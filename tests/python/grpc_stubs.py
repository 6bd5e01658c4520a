"""For the Python tests that speak gRPC from the proto alone: stubs
generated at run time with protoc and grpc_python_plugin (Debian's
protobuf-compiler-grpc), and the example of docs/write-your-own-client.md."""
import importlib.util
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROTO = os.path.join(ROOT, "proto")
DOC = os.path.join(ROOT, "docs", "write-your-own-client.md")
SKIP = 77  # CTest's SKIP_RETURN_CODE


def require(*modules):
    """Exits 77 (skip) when protoc, grpc_python_plugin, python3-grpcio or one
    of `modules` is absent."""
    missing = [t for t in ("protoc", "grpc_python_plugin") if shutil.which(t) is None]
    missing += [m for m in ("grpc", *modules) if importlib.util.find_spec(m) is None]
    if missing:
        print(f"skipped: {', '.join(missing)} not installed")
        sys.exit(SKIP)


def generate(out, *protos):
    """Python modules of proto/zerostate/v1/<protos> in `out`, importable."""
    os.makedirs(out, exist_ok=True)
    subprocess.run([shutil.which("protoc"), f"--proto_path={PROTO}", f"--python_out={out}",
                    f"--grpc_out={out}",
                    f"--plugin=protoc-gen-grpc={shutil.which('grpc_python_plugin')}",
                    *[os.path.join(PROTO, "zerostate", "v1", p) for p in protos]], check=True)
    # Regular packages, found before python/zerostate (zs_servers puts it on
    # the path), which a namespace package would not be.
    for package in ("zerostate", os.path.join("zerostate", "v1")):
        open(os.path.join(out, package, "__init__.py"), "a").close()
    sys.path.insert(0, out)


def example_source():
    """The Python block of docs/write-your-own-client.md."""
    with open(DOC) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    if len(blocks) != 1:
        raise AssertionError(f"{DOC} holds {len(blocks)} python blocks, not 1")
    return blocks[0]
