"""Shared test helpers: the examples' LeNet on sys.path, and running Python in a fresh process.

MindSpore reads its diagnostic environment (dump config, GLOG) once per process, so every test that applies such a
setting trains in a subprocess of its own.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Mapping, Optional

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# `import mindspore` in the test process (in-process training tests) writes these into os.environ; a child process
# that inherited them would not behave like a fresh one (e.g. MindSpore logs the protobuf switch only when it makes it).
_MINDSPORE_WRITES = ("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "LD_LIBRARY_PATH", "HCCL_CONNECT_TIMEOUT")
_PRISTINE = {name: os.environ.get(name) for name in _MINDSPORE_WRITES}


def fresh_env() -> dict:
    """``os.environ`` as a new interpreter should inherit it: without what importing MindSpore here added."""
    env = dict(os.environ)
    for name, value in _PRISTINE.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env
sys.path.insert(0, str(EXAMPLES))


def run_python(code: str, *, env: Optional[Mapping[str, str]] = None, cwd: Optional[Path] = None,
               timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``code`` (dedented) in a new interpreter with the examples importable; return the completed process."""
    full_env = fresh_env()
    full_env["PYTHONPATH"] = os.pathsep.join([str(EXAMPLES), str(ROOT), full_env.get("PYTHONPATH", "")])
    if env:
        full_env.update(env)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"subprocess failed ({proc.returncode})\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


@pytest.fixture
def python_runner():
    return run_python


# A real MindInsight 2.3.1 server (own venv, free ports, always stopped): fixtures for every test module.
from mindinsight_server import mindinsight_server, mindinsight_venv  # noqa: E402,F401

# Real MindSpore sync dumps (LeNet; LeNet with a NaN-making layer), trained once per session.
from dump_fixtures import lenet_dump, nan_dump  # noqa: E402,F401

# Real runs and dumps for the precision-comparison tests (two LeNet runs that part; identical and shifted dumps).
from compare_fixtures import lenet_dump_rerun, lenet_dump_shifted, two_runs_example  # noqa: E402,F401


@pytest.fixture(autouse=True)
def _isolated_environ():
    """Whatever a test sets in os.environ (``DumpConfig.apply()``, ``LogConfig.apply()``, ...) ends with it, so no
    later test, nor the processes it starts, inherits a dump config or log level it did not ask for."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)
