"""Attach the first-nan probe to an unmodified training from its environment (the runs of ``msdebug first-nan``).

* ``MSDEBUG_FIRST_NAN=<dir>``: where the probe writes ``probe_rank_<r>.json``;
* ``MSDEBUG_FIRST_NAN_CAPTURE=<N>``: the rerun: look at the operators of steps N-1 and N, stop after N;
* ``MSDEBUG_FIRST_NAN_STEPS=<S>``: stop after S steps (``--steps``).

Reached the way ``msdebug bisect`` reaches its runs (``compare.run_recording.write_shim``: a ``sitecustomize`` first on
``PYTHONPATH`` calls :func:`install_from_env`): ``Model.train`` / ``Model.fit`` through ``autoattach.register``, and
hand-written loops through the debugger's functional-loop driver (``autoattach.install_functional_loop``) with the
probe as its callback. Nothing imports MindSpore before the script does.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional, Sequence

from msdebug_hooks.validation import whole_number

DIRECTORY = "MSDEBUG_FIRST_NAN"
CAPTURE = "MSDEBUG_FIRST_NAN_CAPTURE"
STEPS = "MSDEBUG_FIRST_NAN_STEPS"

_installed = False


def _number(name: str) -> Optional[int]:
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    return whole_number(name, text, minimum=1, digits=True, allowed="an int >= 1 (a 1-based step)")


def _probe() -> Sequence[Any]:
    from msdebug_hooks.nan.probe import FirstNanProbe

    return [FirstNanProbe(Path(os.environ[DIRECTORY]), capture_step=_number(CAPTURE), steps=_number(STEPS))]


def install_from_env() -> bool:
    """Attach the probe when ``MSDEBUG_FIRST_NAN`` is set (idempotent); ``False`` when it is not."""
    global _installed
    if not os.environ.get(DIRECTORY, "").strip():
        return False
    if not _installed:
        from msdebug_hooks import autoattach

        autoattach.register(_probe)
        autoattach.install_functional_loop(_probe)
        _installed = True
    return True


def environment(directory: Path, *, capture: Optional[int], steps: Optional[int]) -> dict:
    """The variables a run needs (added to its environment)."""
    env = {DIRECTORY: str(directory)}
    if capture is not None:
        env[CAPTURE] = str(capture)
    if steps is not None:
        env[STEPS] = str(steps)
    return env
