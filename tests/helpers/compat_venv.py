"""The compatibility lane's venv: the oldest supported MindSpore (2.7.2) beside this project, built once.

``.venv-ms27`` at the project root holds MindSpore 2.7.2, the project's own dependencies and its whole test extra
(read from pyproject.toml, so they cannot drift; PyTorch for LayerRecorder against PyTorch, matplotlib for the loss
plot of the two-runs example). Like ``.venv-mindinsight`` it is created on first use and reused while its requirement
list is unchanged (``venv_tools.ensure_venv`` stamps a complete one); the project itself is installed into it with
``--no-deps`` at every session, so the lane always runs the working tree's code (about 5 s).

2.7.2 is the newest 2.7 patch and the first 2.7 release with wheels for CPython 3.12; 2.7.0 and 2.7.1 have them for
3.9-3.11 only. ``MSDEBUG_COMPAT_MINDSPORE=2.7.0`` runs the same lane on another release (its own venv).
"""
from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from pathlib import Path

from venv_tools import ROOT, ensure_venv, venv_python

COMPAT_MINDSPORE = os.environ.get("MSDEBUG_COMPAT_MINDSPORE", "2.7.2")


def compat_venv_dir(version: str = COMPAT_MINDSPORE) -> Path:
    return ROOT / (".venv-ms27" if version == "2.7.2" else f".venv-ms{version.replace('.', '')}")


def requirements(version: str = COMPAT_MINDSPORE) -> list[str]:
    """MindSpore ``version``, then the project's dependencies and test extra from pyproject.toml."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = [f"mindspore=={version}"]
    for spec in project["dependencies"] + project["optional-dependencies"]["test"]:
        if not re.match(r"mindspore\b", spec) and spec not in wanted:
            wanted.append(spec)
    return wanted


@functools.lru_cache(maxsize=None)
def ensure_compat_venv(version: str = COMPAT_MINDSPORE) -> tuple[Path, float | None]:
    """``(python, seconds it took to create the venv or None when reused)``, with the working tree installed (once
    per test session: the lane and the cross-version comparison share it)."""
    env_dir = compat_venv_dir(version)
    seconds = ensure_venv(env_dir, requirements(version), timeout=900)
    python = venv_python(env_dir)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                    "--force-reinstall", str(ROOT)], check=True, timeout=300, stdout=subprocess.DEVNULL)
    found = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('mindspore'))"],
                           capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    if found != version:
        raise AssertionError(f"{env_dir} holds MindSpore {found}, not {version}")
    sys.stderr.write(f"\n[compat] {env_dir.name}: MindSpore {found}\n")
    return python, seconds
