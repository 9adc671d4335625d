"""Where the project is, and how a test starts a fresh Python: what test modules and helpers import (never from
``conftest``, which pytest loads once per folder under one module name).

MindSpore reads its diagnostic environment (dump config, GLOG) once per process, so every test that applies such a
setting trains in a subprocess of its own, started from ``fresh_env()``.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Mapping, Optional

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
TESTS = ROOT / "tests"
FAST_LANE_GUARD = TESTS / "fast_lane_guard"

# `import mindspore` in the test process (in-process training tests) writes these into os.environ; a child process
# that inherited them would not behave like a fresh one (e.g. MindSpore logs the protobuf switch only when it makes it).
# Read when tests/conftest.py first imports this module, before any test imports MindSpore.
_MINDSPORE_WRITES = ("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "LD_LIBRARY_PATH", "HCCL_CONNECT_TIMEOUT")
_PRISTINE = {name: os.environ.get(name) for name in _MINDSPORE_WRITES}

# What a child needs to be guarded against importing MindSpore: filled by tests/conftest.py in the fast lane only.
GUARD_ENV: dict = {}


def fresh_env() -> dict:
    """``os.environ`` as a new interpreter should inherit it: without what importing MindSpore here added."""
    env = dict(os.environ)
    for name, value in _PRISTINE.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def guarded(env: dict) -> dict:
    """``env`` for a child process whose environment a test builds from scratch (own PYTHONPATH): in the fast lane,
    with the MindSpore guard added back; elsewhere unchanged."""
    if not GUARD_ENV:
        return env
    paths = [GUARD_ENV["PYTHONPATH"], env.get("PYTHONPATH", "")]
    return {**env, "MSDEBUG_TESTS_MINDSPORE_LOG": GUARD_ENV["MSDEBUG_TESTS_MINDSPORE_LOG"],
            "PYTHONPATH": os.pathsep.join(filter(None, paths))}


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
