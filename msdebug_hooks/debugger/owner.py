"""Who drives the online debugger of this process right now: one training is debugged at a time.

A ``DebuggerCallback`` claims the debugger when its training begins (``Model.train`` with env activation, an explicit
callback, a ``DebugSession`` loop) and releases it when the training ends. The functional-loop driver
(``functional_loop``), which reaches hand-written loops without a callback, stands down while someone else holds
it, so a ``Model.train`` (whose dataset draws and optimizer calls the driver also sees) is never debugged twice.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Optional

__all__ = ["claim", "release", "holder", "on_claim", "ever_claimed"]

_lock = threading.Lock()
_holder: Optional[Any] = None
_ever = False
_listeners: list[Callable[[Any], None]] = []


def claim(callback: Any) -> None:
    """``callback`` drives the debugger from now on; the listeners hear of it (the functional driver stands down
    unless the callback is its own)."""
    global _holder, _ever
    with _lock:
        _holder, _ever = callback, True
        listeners = list(_listeners)
    for listener in listeners:
        listener(callback)


def release(callback: Any) -> None:
    """``callback``'s training ended (no-op when someone else holds the debugger now)."""
    global _holder
    with _lock:
        if _holder is callback:
            _holder = None


def holder() -> Optional[Any]:
    """The callback driving the debugger now, or None."""
    return _holder


def ever_claimed() -> bool:
    """Whether any training of this process reached the debugger (for the driver's line at exit)."""
    return _ever


def on_claim(listener: Callable[[Any], None]) -> None:
    """Call ``listener(callback)`` at every claim."""
    with _lock:
        if listener not in _listeners:
            _listeners.append(listener)
