"""The debugger's hooks on the user's cells, kept out of compiled graphs; and a look at every ``@jit`` call.

A forward (pre-)hook is plain Python. In PyNative mode MindSpore runs it around the cell's call; but when that cell
is called inside a ``@mindspore.jit`` function, MindSpore compiles the hook into the function's graph the first time
the function compiles with the hook present. A hook that keeps values for the debugger cannot be compiled: it reads
``asnumpy()`` and writes into a dict (``TypeError: 'self.values' should be initialized in the '__init__' function
before subscript``), and a graph-safe copy into a spare ``Parameter`` makes MindSpore 2.10 report a graph cycle. A
hook registered after the first compile is never run, and a recompile (a new input shape, e.g. the smaller last
batch of an epoch) would compile it in.

So every hook the debugger puts on a user's cell goes through this module (``forward_hook`` / ``forward_pre_hook``),
and every top-level call of a ``@jit`` function goes through ``_call`` (MindSpore's ``_JitExecutor.__call__`` is
wrapped once, the first time a hook is added or an observer set):

* while no hook that *captures* values (cell outputs, gradients) is live, the compiled function runs as usual, with
  the debugger's hooks taken off for the length of the call and put back after it, so no graph ever contains them;
* while such a hook is live, a ``@jit`` function of the script (not one of MindSpore's own, such as an optimizer's
  ``construct``) runs as plain PyNative code, exactly what MindSpore does with ``MS_JIT=0``, so the hooks run and
  see the values. Only steps that something watches or views pay the eager speed; the compiled graph is kept and
  used again once nothing needs the values.

An observer (``functional_loop``) is told about every top-level ``@jit`` call, before and after, which is how a
tutorial-style ``@mindspore.jit`` training step is seen without an edit to the script.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Optional, Protocol

from msdebug_hooks._log import get_logger

__all__ = ["GuardedHook", "forward_hook", "forward_pre_hook", "set_observer", "install", "installed",
           "capturing", "JitObserver"]

_LOG = get_logger("debugger")
_PATCHED = "_msdebug_hooks_guard"


class JitObserver(Protocol):
    """What the functional loop is told about each top-level ``@jit`` call (``executor.fn`` is the function,
    ``executor.obj`` the cell when it is a cell's method)."""

    def before_jit(self, executor: Any) -> None: ...

    def after_jit(self, executor: Any, output: Any) -> None: ...


class GuardedHook:
    """One hook of the debugger on one cell; ``remove()`` takes it off for good.

    ``captures``: the hook keeps values a watchpoint or view needs, so a script's ``@jit`` function runs eagerly
    while it is live (see the module docstring); bookkeeping hooks (the loss of a hand-written loop) do not.
    """

    def __init__(self, cell: Any, kind: str, fn: Callable[..., Any], *, captures: bool) -> None:
        self.cell, self.kind, self.fn, self.captures = cell, kind, fn, captures
        self._handle: Any = None

    def _attach(self) -> None:
        if self._handle is None:
            register = self.cell.register_forward_hook if self.kind == "forward" else \
                self.cell.register_forward_pre_hook
            self._handle = register(self.fn)

    def _detach(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.remove()

    def remove(self) -> None:
        with _LOCK:
            _LIVE.pop(id(self), None)
            self._detach()


_LOCK = threading.RLock()
_LIVE: dict[int, GuardedHook] = {}
_STATE = threading.local()          # depth: nesting of @jit calls on this thread; off: hooks taken off
_observer: Optional[JitObserver] = None
_installed: Optional[bool] = None   # None: not tried; False: MindSpore has no _JitExecutor to wrap


def forward_hook(cell: Any, fn: Callable[..., Any], *, captures: bool = True) -> GuardedHook:
    """``cell.register_forward_hook(fn)``, kept out of compiled graphs."""
    return _add(GuardedHook(cell, "forward", fn, captures=captures))


def forward_pre_hook(cell: Any, fn: Callable[..., Any], *, captures: bool = True) -> GuardedHook:
    """``cell.register_forward_pre_hook(fn)``, kept out of compiled graphs."""
    return _add(GuardedHook(cell, "forward_pre", fn, captures=captures))


def _add(hook: GuardedHook) -> GuardedHook:
    install()
    with _LOCK:
        _LIVE[id(hook)] = hook
        if not getattr(_STATE, "off", False):
            hook._attach()
    return hook


def capturing() -> bool:
    """Whether a capturing hook is live (the script's ``@jit`` functions then run eagerly)."""
    return any(hook.captures for hook in list(_LIVE.values()))


def set_observer(observer: Optional[JitObserver]) -> None:
    """Tell ``observer`` about every top-level ``@jit`` call from now on (None: nobody)."""
    global _observer
    install()
    _observer = observer


def installed() -> bool:
    """Whether ``@jit`` calls are seen (False when this MindSpore has no ``_JitExecutor.__call__`` to wrap)."""
    return bool(_installed)


def install() -> bool:
    """Wrap MindSpore's ``_JitExecutor.__call__`` once. False, with one warning, when it is not there."""
    global _installed
    if _installed is not None:
        return _installed
    try:
        from mindspore.graph import api
        executor = api._JitExecutor
        original = executor.__call__
    except (ImportError, AttributeError) as exc:
        _installed = False
        _LOG.warning("debugger: this MindSpore has no mindspore.graph.api._JitExecutor (%s); @jit functions are "
                     "not seen, and a cell-output or gradient watchpoint on a cell called inside one may fail "
                     "to compile; drop @jit while debugging or use MS_DEBUGGER_SOURCE=dump", exc)
        return False
    if not getattr(original, _PATCHED, False):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return _call(original, self, args, kwargs)

        setattr(__call__, _PATCHED, True)
        executor.__call__ = __call__
    _installed = True
    return True


def _is_users(fn: Any) -> bool:
    module = getattr(fn, "__module__", None) or ""
    return not (module == "mindspore" or module.startswith("mindspore."))


def _call(original: Callable[..., Any], executor: Any, args: tuple, kwargs: dict) -> Any:
    depth = getattr(_STATE, "depth", 0)
    observer = _observer if depth == 0 else None
    if observer is not None:
        observer.before_jit(executor)
    eager = _LIVE and _is_users(executor.fn) and capturing()
    _STATE.depth = depth + 1
    try:
        if eager:
            output = executor.fn(*args, **kwargs)        # as MindSpore itself does under MS_JIT=0
        else:
            output = _compiled(original, executor, args, kwargs)
    finally:
        _STATE.depth = depth
    if observer is not None:
        observer.after_jit(executor, output)
    return output


def _compiled(original: Callable[..., Any], executor: Any, args: tuple, kwargs: dict) -> Any:
    """The compiled call, with every hook of ours off the cells while it runs (and compiles)."""
    if not _LIVE or getattr(_STATE, "off", False):
        return original(executor, *args, **kwargs)
    with _LOCK:
        hooks = list(_LIVE.values())
        for hook in hooks:
            hook._detach()
        _STATE.off = True
    try:
        return original(executor, *args, **kwargs)
    finally:
        with _LOCK:
            _STATE.off = False
            for hook in list(_LIVE.values()):
                hook._attach()
