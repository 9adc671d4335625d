"""The linter runs with the tests: ruff, configured in pyproject.toml ([tool.ruff]), over the package, the tests, the
benchmarks, the examples and the proto generator. A finding fails the suite, so CI fails on it."""
from __future__ import annotations

import subprocess
import sys

from project import ROOT

LINTED = ["msdebug_hooks", "tests", "benchmarks", "examples", "protos"]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_ruff_finds_nothing_in_the_project():
    proc = _ruff("check", "--no-cache", "--output-format", "concise", *LINTED)
    assert proc.returncode == 0, f"ruff found (`ruff check --fix` mends the safe ones):\n{proc.stdout}{proc.stderr}"


def test_ruff_reads_the_projects_configuration_and_would_catch_a_mistake(tmp_path):
    """The check above can fail: the same configuration flags an undefined name and an unused import."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\n\ndef f():\n    return undefined_name\n")
    proc = _ruff("check", "--no-cache", "--output-format", "concise", "--config", str(ROOT / "pyproject.toml"),
                 str(bad))
    assert proc.returncode == 1
    assert "F401" in proc.stdout and "F821" in proc.stdout
