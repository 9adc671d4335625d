"""Run one callback's step end (the debugger's, ``LossGuard``'s) before every other callback's, wherever it sits.

MindSpore calls the callbacks' ``on_train_step_end`` in list order, and an earlier one may end the job in that same
step end: ``LossMonitor`` raises ``ValueError`` on a NaN/Inf loss, a user callback may raise on its own checks. Then
the debugger (or ``LossGuard``: ``callbacks/guard_first.py``), further down the list, never sees the step: a
watchpoint hit at the step that went wrong never reaches the UI. Env activation puts the debugger first; a
``DebuggerCallback`` the script lists after others is made first here: at ``on_train_begin`` the step-end hook of
each callback listed before it is wrapped (on that instance only, undone at the end of training) so that it runs the
debugger's step end first. The debugger's step end runs once per step, whichever hook gets there first.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

__all__ = ["OncePerStep", "run_first", "restore", "user_callback_names"]

_MARK = "_msdebug_runs_first"      # on a wrapper: its _Front


class OncePerStep:
    """``hook(run_context)`` at most once per training step (keyed on ``cur_step_num``)."""

    def __init__(self, hook: Callable[[Any], None]) -> None:
        self._hook = hook
        self._done_step: Any = None

    def reset(self) -> None:
        self._done_step = None

    def __call__(self, run_context: Any) -> None:
        step = getattr(run_context.original_args(), "cur_step_num", None)
        if step is not None and step == self._done_step:
            return
        self._done_step = step
        self._hook(run_context)


class _Front:
    """The hooks put in front of one callback's own step end, in ``rank`` order (lower first), each with its
    ``skip``: one wrapper per callback, however many owners run first (the debugger, then ``LossGuard``)."""

    def __init__(self, callback: Any, inner: Callable[[Any], Any]) -> None:
        self.callback, self.inner = callback, inner
        self.hooks: list[tuple[int, Callable[[Any], None], Optional[Callable[[Any, Any], bool]]]] = []

    def __call__(self, run_context: Any) -> Any:
        for _, hook, _ in self.hooks:
            hook(run_context)
        if any(skip is not None and skip(self.callback, run_context) for _, _, skip in self.hooks):
            return None
        return self.inner(run_context)


def run_first(callbacks: Sequence[Any], owner: Any, hook: Callable[[Any], None], *, rank: int = 0,
              also: Sequence[Any] = (), skip: Optional[Callable[[Any, Any], bool]] = None) -> list[Any]:
    """Make every callback listed before ``owner`` (and those in ``also``, wherever they are) call ``hook`` at the
    start of its ``on_train_step_end``; ``hook`` must do its work once per step (``OncePerStep``). With ``skip``, a
    wrapped callback's own step end is left out of a step where ``skip(callback, run_context)`` is true.

    ``rank`` orders owners that both run first: a callback whose class says ``step_end_rank`` lower than ``rank``
    is not wrapped (the debugger, 0, stays ahead of ``LossGuard``, 1), and on a callback both wrap, the lower
    rank's hook runs first, whichever wrapped it first.

    Returns the wrapped callbacks (for ``restore``). MindSpore's own framework callbacks, which it inserts at the
    front of the list, are wrapped too; they never stop a job, but wrapping them costs nothing and keeps it simple.
    """
    position = next((i for i, cb in enumerate(callbacks) if cb is owner), None)
    targets = list(callbacks)[:position or 0]
    targets += [cb for cb in also if cb is not owner and not any(cb is t for t in targets)]
    wrapped = []
    for callback in targets:
        ahead = getattr(type(callback), "step_end_rank", None)
        if ahead is not None and ahead < rank:
            continue
        front = getattr(callback.__dict__.get("on_train_step_end"), _MARK, None)
        if front is None:
            front = _Front(callback, callback.on_train_step_end)

            def on_train_step_end(run_context: Any, _front: _Front = front) -> Any:
                return _front(run_context)

            setattr(on_train_step_end, _MARK, front)
            try:
                callback.on_train_step_end = on_train_step_end
            except AttributeError:     # a callback with __slots__ or a read-only hook: it keeps its place
                continue
        front.hooks.append((rank, hook, skip))
        front.hooks.sort(key=lambda entry: entry[0])
        wrapped.append(callback)
    return wrapped


def restore(callbacks: Sequence[Any], hook: Optional[Callable[[Any], None]] = None) -> None:
    """Undo ``run_first`` of ``hook`` (every hook when None) on these callbacks (a later training with another list
    must not call the old hook)."""
    for callback in callbacks:
        front = getattr(callback.__dict__.get("on_train_step_end"), _MARK, None)
        if front is None:
            continue
        front.hooks = [entry for entry in front.hooks if hook is not None and entry[1] != hook]
        if not front.hooks:
            del callback.__dict__["on_train_step_end"]


def user_callback_names(callbacks: Sequence[Any]) -> list[str]:
    """Class names of the callbacks that are not MindSpore's internal ones (for the log line)."""
    return [type(cb).__name__ for cb in callbacks if not type(cb).__name__.startswith("_")]
