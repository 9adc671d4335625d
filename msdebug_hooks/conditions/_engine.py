"""Which statistics engine runs: the compiled numba pass, or numpy's chunked pass.

Why a separate module: importing numba and loading its cached kernels is slow next to ``import msdebug_hooks``,
which must stay light, so the kernels are imported here on first use, or ahead of time by ``warm_up_statistics()``
(call it when a debugger or monitor attaches, so that no training step waits for it). numpy stays as the fallback
when numba cannot be imported or compiled; it is said once, as a warning. ``MSDEBUG_STATISTICS_ENGINE=numpy``
chooses the fallback on purpose. ``statistics_engine.current_engine()`` turns the choice into the engine every
caller goes through.
"""
from __future__ import annotations

import logging
import os
import threading
from contextlib import contextmanager
from types import ModuleType
from typing import Iterator

import numpy as np

from msdebug_hooks._log import get_logger

ENGINE_VARIABLE = "MSDEBUG_STATISTICS_ENGINE"
COMPILE_NOTICE_AFTER = 3.0   # seconds of loading after which the kernels are being compiled, not loaded: say so

_log = logging.getLogger("msdebug_hooks.conditions")
_lock = threading.Lock()
_kernels: ModuleType | None = None
_resolved = False
_forced: str | None = None  # tests: "numpy" or "compiled" for a block of code


def kernels() -> ModuleType | None:
    """The compiled kernels module, or None when the numpy fallback runs (numba missing or failing, or chosen)."""
    global _kernels, _resolved
    if _forced == "numpy":
        return None
    if not _resolved:
        with _lock:
            if not _resolved:
                _kernels = _load()
                _resolved = True
    if _kernels is None and _forced == "compiled":
        raise RuntimeError("the compiled statistics engine was required but numba is not available")
    return _kernels


def _load() -> ModuleType | None:
    choice = os.environ.get(ENGINE_VARIABLE, "").strip().lower()
    if choice == "numpy":
        _log.debug("watchpoint statistics: numpy's chunked pass (%s=numpy)", ENGINE_VARIABLE)
        return None
    # compiling (the first time on a machine, or after an upgrade) takes far longer than loading: say so when it
    # takes long, rather than leave a training script silent at the attach
    slow = threading.Timer(COMPILE_NOTICE_AFTER, _compile_notice)
    slow.daemon = True
    slow.start()
    try:
        from msdebug_hooks.conditions import _step_kernels as compiled   # the pass and the one-call kernels
    except Exception as exc:  # ImportError, or numba failing to compile / load on this platform
        _log.warning("watchpoint statistics run on numpy's chunked pass, several times slower on large tensors: the "
                     "compiled engine is not available (%s: %s); install numba>=0.60 to get it", type(exc).__name__,
                     exc)
        return None
    finally:
        slow.cancel()
    import numba
    _log.debug("watchpoint statistics: compiled single-pass kernels (numba %s)", numba.__version__)
    return compiled


def _compile_notice() -> None:
    """Said through the project's logger, which reaches stderr even without a logging configuration."""
    get_logger("statistics").info("compiling the watchpoint statistics kernels for this machine (numba, once; "
                                  "later runs load them from its disk cache)")


def engine_name() -> str:
    """"numba" or "numpy": the engine ``compute_statistics`` uses now."""
    return "numba" if kernels() is not None else "numpy"


def warm_up_statistics() -> str:
    """Compile, or load from numba's disk cache, every statistics kernel, so that no training step pays for it.

    Call it when a debugger, monitor or analyzer attaches (loading from numba's disk cache; compiling the very first
    time on a machine, which takes much longer). Cheap once done (a flag check). Returns the engine that runs:
    "numba" or "numpy".
    """
    return engine_name()


@contextmanager
def forced_engine(name: str) -> Iterator[None]:
    """Run a block with "numpy" or "compiled" statistics (for tests comparing the two; not thread-safe)."""
    global _forced
    if name not in ("numpy", "compiled"):
        raise ValueError(f"engine={name!r}: expected 'numpy' or 'compiled'")
    before, _forced = _forced, name
    try:
        yield
    finally:
        _forced = before


def array_address(a: np.ndarray) -> int:
    """Where ``a``'s data starts: what the kernels that take arrays by address read, and what a parameter's storage
    address is compared with."""
    return a.__array_interface__["data"][0]
