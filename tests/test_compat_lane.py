"""The compatibility lane: a representative subset of this suite, run on the oldest supported MindSpore (2.7.2).

The full suite runs on MindSpore 2.10 (the project venv). This test runs ``python -m pytest`` on the subset below
with the interpreter of ``.venv-ms27`` (MindSpore 2.7.2, built once: ``tests/helpers/compat_venv.py``) and fails
with that run's output when it fails, so the README's test command covers both versions and CI needs no second job.
The subset covers each part that touches MindSpore: the callbacks under ``Model.train`` and a custom loop,
dump-config validation against 2.7.2's own parser (its recorded corpus verdicts, and live dumps), offline dump
analysis of a 2.7.2 dump, the online debugger driven by our server and by MindInsight, LayerRecorder against
PyTorch, compare-dumps and the per-version facts. (A 2.7.2 dump against a 2.10 dump of the same training is
``compare/test_compare_versions.py``, in the main
suite: it needs both interpreters.)
"""
from __future__ import annotations

import os
import re
import subprocess
import time

import pytest

from compat_venv import COMPAT_MINDSPORE, ensure_compat_venv
from project import ROOT, fresh_env

pytestmark = [pytest.mark.compat, pytest.mark.mindspore, pytest.mark.timeout(1500)]

SUBSET = (
    "tests/callbacks/test_stop_at_step.py",
    "tests/callbacks/test_loss_guard.py",
    "tests/callbacks/test_custom_loop.py",
    "tests/config/test_dump_config_mindspore.py",
    "tests/dump/test_dump_analyzer.py",
    "tests/server/test_server_acceptance.py",
    "tests/debugger/test_debugger_mindinsight_e2e.py",
    "tests/compare/test_compare_layers_mindspore.py",
    "tests/compare/test_layer_layouts.py",
    "tests/compare/test_compare_dumps.py",
    "tests/compare/test_compare_versions.py",
    "tests/test_mindspore_versions.py",
)
#: what the lane leaves out inside those files: multi-rank jobs and PyPI installs have lanes of their own
INNER_MARKERS = "not compat and not pypi and not msrun and not slow"


def test_subset_passes_on_the_oldest_supported_mindspore(capsys):
    python, created = ensure_compat_venv()
    env = fresh_env()
    env.pop("PYTHONPATH", None)
    started = time.monotonic()
    proc = subprocess.run([str(python), "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-m", INNER_MARKERS,
                           *SUBSET], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1400)
    seconds = time.monotonic() - started
    output = proc.stdout + proc.stderr
    summary = output.strip().splitlines()[-1] if output.strip() else "(no output)"
    with capsys.disabled():
        made = f"venv created in {created:.0f} s, " if created else "venv reused, "
        print(f"\ncompat lane on MindSpore {COMPAT_MINDSPORE}: {made}subset ran in {seconds:.0f} s: {summary}")
    assert proc.returncode == 0, f"the subset failed on MindSpore {COMPAT_MINDSPORE}:\n{output[-20000:]}"
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) >= 60, f"too few tests ran on MindSpore {COMPAT_MINDSPORE}: {summary}"
    skipped_ok = " skipped" not in summary or os.environ.get("MSDEBUG_OFFLINE")
    assert skipped_ok, f"tests skipped in the lane:\n{output[-6000:]}"
