"""Regenerate the protocol's Python code from the .proto files beside this script: the messages into
msdebug_hooks/wire/, the gRPC stub and servicer (``debug_grpc_pb2_grpc.py``) into tests/helpers/, the only code
that uses them (the client and our server call the nine RPCs by path, without the generated stub).

Usage (from anywhere; see protos/README.md):

    python protos/generate.py           # rewrite msdebug_hooks/wire/*_pb2.py(i), tests/helpers/debug_grpc_pb2_grpc.py
    python protos/generate.py --check   # exit 1 if the committed code differs from a fresh generation

Why a script and not a bare ``grpc_tools.protoc`` call:

* The generated modules must import each other inside the package (``from msdebug_hooks.wire import
  ms_graph_pb2``), and protoc derives that import from the path a .proto file is compiled under. So the files are
  copied into a temporary tree laid out as ``msdebug_hooks/wire/`` and the ``import`` line is rewritten to match.
  The stub written into tests/helpers/ imports the messages from ``msdebug_hooks.wire`` the same way; only the path its
  version error names is rewritten to where it lies.
* Generated code refuses to load on a protobuf runtime older than the protoc that generated it. The project
  supports protobuf >= 7.34.1 (MindSpore 2.10's floor), but every grpcio-tools release that targets protobuf 7
  bundles protoc 35.x (gencode 7.35.1). So generation is pinned to grpcio-tools GRPC_TOOLS_VERSION, whose protoc
  emits gencode 6.31.1, which loads on every protobuf from 6.31.1 to 7.x. When the running interpreter does not
  have exactly that grpcio-tools, the script makes a throwaway venv with it (PyPI access needed, a few seconds).
"""
from __future__ import annotations

import argparse
import filecmp
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

GRPC_TOOLS_VERSION = "1.80.0"   # bundled protoc 31.1 -> gencode protobuf 6.31.1
PROTO_FILES = ("ms_graph.proto", "debug_grpc.proto")
PACKAGE_DIR = Path("msdebug_hooks") / "wire"
TESTS_DIR = Path("tests") / "helpers"
GENERATED = ("ms_graph_pb2.py", "ms_graph_pb2.pyi", "debug_grpc_pb2.py", "debug_grpc_pb2.pyi")   # into PACKAGE_DIR
STUB = "debug_grpc_pb2_grpc.py"                                                                 # into TESTS_DIR

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _installed_grpc_tools(python: str) -> str | None:
    """Version of grpcio-tools importable by ``python``, or None."""
    proc = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('grpcio-tools'))"],
                          capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def _protoc_python(workdir: Path) -> str:
    """An interpreter with grpcio-tools == GRPC_TOOLS_VERSION (this one, or a fresh venv in ``workdir``)."""
    if _installed_grpc_tools(sys.executable) == GRPC_TOOLS_VERSION:
        return sys.executable
    env_dir = workdir / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = str(env_dir / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    f"grpcio-tools=={GRPC_TOOLS_VERSION}"], check=True)
    return python


def _layout_sources(workdir: Path) -> Path:
    """Copy the .proto files under ``workdir/src/msdebug_hooks/wire/`` with package-relative imports."""
    src_root = workdir / "src"
    target = src_root / PACKAGE_DIR
    target.mkdir(parents=True)
    for name in PROTO_FILES:
        text = (HERE / name).read_text()
        for other in PROTO_FILES:
            text = text.replace(f'import "{other}";', f'import "{PACKAGE_DIR.as_posix()}/{other}";')
        (target / name).write_text(text)
    return src_root


def generate(out_dir: Path, stub_dir: Path) -> None:
    """Generate the Python modules for PROTO_FILES into ``out_dir`` (a directory standing for the package) and the
    gRPC stub into ``stub_dir`` (standing for tests/helpers/)."""
    with tempfile.TemporaryDirectory(prefix="msdebug-protoc-") as tmp:
        workdir = Path(tmp)
        python = _protoc_python(workdir)
        src_root = _layout_sources(workdir)
        gen_root = workdir / "gen"
        gen_root.mkdir()
        sources = [(PACKAGE_DIR / name).as_posix() for name in PROTO_FILES]
        subprocess.run([python, "-m", "grpc_tools.protoc", f"-I{src_root}", f"--python_out={gen_root}",
                        f"--pyi_out={gen_root}", f"--grpc_python_out={gen_root}", *sources],
                       check=True, cwd=src_root)
        out_dir.mkdir(parents=True, exist_ok=True)
        for name in GENERATED:
            shutil.copyfile(gen_root / PACKAGE_DIR / name, out_dir / name)
        stub = (gen_root / PACKAGE_DIR / STUB).read_text()
        stub_dir.mkdir(parents=True, exist_ok=True)
        (stub_dir / STUB).write_text(stub.replace(f"{PACKAGE_DIR.as_posix()}/{STUB}", f"{TESTS_DIR.as_posix()}/{STUB}"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="compare a fresh generation with the committed modules instead of writing them")
    args = parser.parse_args(argv)
    package, tests = ROOT / PACKAGE_DIR, ROOT / TESTS_DIR
    if not args.check:
        generate(package, tests)
        print(f"generated {', '.join(GENERATED)} in {package} and {STUB} in {tests} with grpcio-tools "
              f"{GRPC_TOOLS_VERSION}")
        return 0
    with tempfile.TemporaryDirectory(prefix="msdebug-protoc-check-") as tmp:
        fresh = Path(tmp)
        generate(fresh / PACKAGE_DIR, fresh / TESTS_DIR)
        stale = [path.as_posix() for path in [PACKAGE_DIR / name for name in GENERATED] + [TESTS_DIR / STUB]
                 if not (ROOT / path).exists() or not filecmp.cmp(fresh / path, ROOT / path, shallow=False)]
    if stale:
        print(f"out of date: {', '.join(stale)}; run: python protos/generate.py")
        return 1
    print(f"{package} and {tests / STUB} match {', '.join(PROTO_FILES)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
