"""Loss recording (and a stop after a step) attached to an unmodified training script from its environment.

``msdebug bisect`` runs the user's two commands as they are; what it needs from each run reaches it through two
variables, read in the run's own process:

* ``MSDEBUG_RECORD_LOSS=<dir>``: every ``Model.train`` / ``Model.fit`` gets a :class:`LossRecorder` writing
  ``<dir>/loss_rank_<rank>.jsonl`` (each rank its own file, the rank known once MindSpore's communication started);
* ``MSDEBUG_STOP_AFTER_STEP=<N>``: and a :class:`StopAtStep` (``N`` 1-based, ``cur_step_num``), so a rerun that dumps
  step N ends right after it; in a multi-rank job the ranks agree on the stop, so they all stop after the same step.

The callbacks are added through :mod:`msdebug_hooks.autoattach` (the import hook the online debugger uses), so
nothing is imported before the script imports MindSpore. They carry their own ``autoattach_role``: a script that
already passes a ``LossRecorder`` or ``StopAtStep`` of its own keeps it, and ours runs beside it.

How the variables reach a process: :func:`write_shim` writes a ``sitecustomize.py`` that calls
:func:`install_from_env`; putting its directory first on ``PYTHONPATH`` makes every Python started with that
environment (the script, ``msrun``'s workers) attach at start-up, editable install or not. It runs the
``sitecustomize`` it hides, if there is one, after ours. A bad value stops the script at ``Model.train`` with one
line naming the variable and exit status 2 (autoattach's rule for settings).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Optional, Sequence

from msdebug_hooks.validation import whole_number

RECORD_LOSS = "MSDEBUG_RECORD_LOSS"
STOP_AFTER_STEP = "MSDEBUG_STOP_AFTER_STEP"
#: the role our callbacks claim in autoattach's de-duplication: never the role of a user's own recorder or stop
ROLE = "msdebug.bisect"
SHIM_NAME = "sitecustomize.py"

_installed = False


class RecordingSettings(NamedTuple):
    """What the environment asks of a run under bisect: where to record its losses, and the step to stop after
    (``None``: not asked)."""

    loss_dir: Optional[str]
    stop_after: Optional[int]


def settings(environ: Optional[Mapping[str, str]] = None) -> RecordingSettings:
    """The loss directory and the stop step from the environment; ``None`` where a variable is unset or empty.

    Raises :class:`ConfigError` naming the variable for a stop step that is not an int >= 1.
    """
    environ = os.environ if environ is None else environ
    directory = environ.get(RECORD_LOSS, "").strip() or None
    text = environ.get(STOP_AFTER_STEP, "").strip()
    if not text:
        return RecordingSettings(directory, None)
    return RecordingSettings(directory, whole_number(STOP_AFTER_STEP, text, minimum=1, digits=True,
                                                     allowed="an int >= 1: the 1-based step (cur_step_num) to stop "
                                                             "after"))


def _callbacks() -> Sequence[Any]:
    """autoattach's factory: fresh callbacks for each training call (imports MindSpore: only at training time)."""
    directory, stop = settings()
    made: list = []
    if directory:
        from msdebug_hooks.compare.loss_recorder import LossRecorder

        made.append(LossRecorder(directory))
    if stop is not None:
        from msdebug_hooks.callbacks.stop_at_step import StopAtStep

        made.append(StopAtStep(stop))   # after the recorder: the stopping step's loss is recorded first
    for callback in made:
        callback.autoattach_role = ROLE
    return made


def install_from_env() -> bool:
    """Register the callbacks the environment asks for with autoattach; ``False`` when it asks for none.

    Idempotent. Values are checked when the first training starts (a bad one ends the script there, exit 2).
    """
    global _installed
    environ = os.environ
    if not (environ.get(RECORD_LOSS, "").strip() or environ.get(STOP_AFTER_STEP, "").strip()):
        return False
    if not _installed:
        from msdebug_hooks import autoattach

        autoattach.register(_callbacks)
        _installed = True
    return True


_SHIM = '''\
"""Written by msdebug: attach {module}.{function} to this run; then the sitecustomize it hides."""
import os as _os
import sys as _sys


def _msdebug_attach():
    try:
        import importlib
        attach = importlib.import_module("{module}")
    except Exception as exc:  # another Python than the one msdebug-hooks is installed in
        _sys.stderr.write("msdebug: cannot look into this run: %s cannot import msdebug_hooks (%s)\\n"
                          % (_sys.executable, exc))
        return
    attach.{function}()


def _msdebug_chain():
    import importlib.machinery
    import importlib.util
    here = _os.path.dirname(_os.path.abspath(__file__))
    rest = [p for p in _sys.path if _os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_msdebug_attach()
_msdebug_chain()
'''


def write_shim(directory: Path, entry: str = f"{__name__}:install_from_env") -> Path:
    """Write the ``sitecustomize.py`` that calls ``entry`` (``module:function``, default: this module's loss
    recording) at start-up; put ``directory`` first on ``PYTHONPATH``."""
    from msdebug_hooks._files import atomic_write_text

    module, function = entry.split(":")
    return atomic_write_text(Path(directory) / SHIM_NAME, _SHIM.format(module=module, function=function),
                             mode=0o644)


def run_environment(base: Mapping[str, str], shim_dir: Path, loss_dir: Optional[Path],
                    stop_after: Optional[int] = None) -> dict:
    """``base`` plus what a run needs to be recorded: the shim first on ``PYTHONPATH`` and the two variables."""
    env = dict(base)
    paths = [str(shim_dir)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.pop(RECORD_LOSS, None)
    env.pop(STOP_AFTER_STEP, None)
    if loss_dir is not None:
        env[RECORD_LOSS] = str(loss_dir)
    if stop_after is not None:
        env[STOP_AFTER_STEP] = str(stop_after)
    return env
