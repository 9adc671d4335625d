"""Running ``python -m msdebug_hooks`` the way a user does, for tests of the commands that start trainings."""
from __future__ import annotations

import os
import subprocess
import sys

from project import EXAMPLES, ROOT, fresh_env


def cli_env() -> dict:
    """A clean environment that finds the examples and this tree, with no debugger activation inherited."""
    env = fresh_env()
    env["PYTHONPATH"] = os.pathsep.join([str(EXAMPLES), str(ROOT)])
    env.pop("ENABLE_MS_DEBUGGER", None)
    return env


def run_msdebug(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "msdebug_hooks", *args], env=cli_env(), capture_output=True,
                          text=True, timeout=timeout)
