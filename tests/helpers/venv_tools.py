"""Throwaway and cached virtual environments for tests that need other package versions than the project venv.

Creating one needs PyPI. Offline, such tests skip with the reason; in CI (``CI`` set) they never skip, so a
broken install fails the run instead of hiding.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import venv
from pathlib import Path
from typing import Sequence

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _pypi_reachable(timeout: float = 3.0) -> bool:
    try:
        with socket.create_connection(("pypi.org", 443), timeout=timeout):
            return True
    except OSError:
        return False


def require_pypi() -> None:
    """Skip the calling test when package installs cannot work here (never in CI)."""
    if os.environ.get("CI"):
        return
    if os.environ.get("MSDEBUG_OFFLINE"):
        pytest.skip("MSDEBUG_OFFLINE is set: this test installs packages from PyPI into a separate venv")
    if not _pypi_reachable():
        pytest.skip("pypi.org:443 is unreachable: this test installs packages from PyPI into a separate venv "
                    "(it always runs in CI)")


def venv_python(env_dir: Path) -> Path:
    return env_dir / "bin" / "python"


def create_venv(env_dir: Path, requirements: Sequence[str], *, timeout: float = 600) -> float:
    """Create ``env_dir`` with ``requirements`` installed; return the seconds it took."""
    start = time.monotonic()
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    subprocess.run([str(venv_python(env_dir)), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    *requirements], check=True, timeout=timeout, stdout=subprocess.DEVNULL)
    return time.monotonic() - start


def ensure_venv(env_dir: Path, requirements: Sequence[str], *, timeout: float = 600) -> float | None:
    """Create ``env_dir`` unless a complete one with the same requirements exists.

    Returns the creation time in seconds, or None when the existing venv was reused. A stamp file written last
    marks a venv as complete, so an interrupted creation is redone rather than trusted.
    """
    stamp = env_dir / ".msdebug-requirements"
    wanted = "\n".join(requirements) + "\n"
    if stamp.is_file() and stamp.read_text() == wanted and venv_python(env_dir).exists():
        return None
    require_pypi()
    if env_dir.exists():
        shutil.rmtree(env_dir)
    seconds = create_venv(env_dir, requirements, timeout=timeout)
    stamp.write_text(wanted)
    sys.stderr.write(f"\n[venv] created {env_dir} ({' '.join(requirements)}) in {seconds:.1f} s\n")
    return seconds
