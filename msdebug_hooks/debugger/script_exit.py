"""How a script that ran a hand-written training loop ended, as its exit hook can tell (``functional_loop.py``).

At the interpreter's exit the exception that ended the script is in ``sys.last_type`` / ``last_value`` /
``last_traceback`` (the interpreter sets them before it prints an uncaught exception, so before ``atexit`` runs;
``msdebug run`` sets them the same way for the script it runs, ``cli/_script.py``). The exit status is not readable
there: ``sys.exit(1)`` after a loop that ended cleanly leaves no trace. So, where the debugger attaches from the
environment, ``sys.exit`` is wrapped to note a non-zero status before it raises (a text status counts as 1, the
status Python exits with); the training-done message carries it (``wire/client_facts.py``) for a server that cannot
see the process's exit code. A ``raise SystemExit(1)`` of the script's own is not seen this way (``msdebug run`` sees
every one), and a status given to a ``sys.exit`` whose ``SystemExit`` the script caught and went on from is still
noted.
"""
from __future__ import annotations

import functools
import sys
from typing import Any, NoReturn, Optional

__all__ = ["unhandled_exception", "note_exit_status", "noted_status"]

_STATUS: list = [None]               # the last non-zero status the script gave sys.exit
_NOTING = "_msdebug_notes_status"


def unhandled_exception() -> tuple:
    """``(type, value, traceback)`` of the exception that ended the script, or ``(None, None, None)``."""
    value = getattr(sys, "last_value", None)
    if not isinstance(value, BaseException):
        return None, None, None
    return type(value), value, getattr(sys, "last_traceback", None)


def note_exit_status() -> None:
    """Wrap ``sys.exit`` (once) so that a non-zero status is noted before it raises."""
    if getattr(sys.exit, _NOTING, False):
        return
    original = sys.exit

    @functools.wraps(original)
    def exit(status: Any = None) -> NoReturn:
        if status is not None and status != 0:
            _STATUS[0] = status if isinstance(status, int) else 1
        original(status)
        raise SystemExit(status)       # not reached: the original raises

    setattr(exit, _NOTING, True)
    sys.exit = exit


def noted_status() -> Optional[int]:
    """The last non-zero status the script gave ``sys.exit``; None when it gave none."""
    return _STATUS[0]
