"""Run a training script as ``__main__`` the way ``python train.py`` does, for ``msdebug run``: the same exit status,
and an exception the script raises printed as ``python`` would print it, with the script's frames only.

Why: the script runs inside ``msdebug run`` (``runpy``), so a plain traceback would start with our command's frames
and ``<frozen runpy>``'s, lines the person did not write and has nothing to do with.
"""
from __future__ import annotations

import os
import runpy
import sys
import traceback
from types import TracebackType
from typing import Optional

__all__ = ["run_script", "user_traceback"]


def run_script(path: str) -> int:
    """Run ``path`` as ``__main__``; its exit status: ``sys.exit``'s code, 1 after an uncaught exception (printed
    with ``user_traceback``), 130 after Ctrl-C, else 0.

    An exception that ends the script, and a ``sys.exit`` with a non-zero status, is left in ``sys.last_type`` /
    ``last_value`` / ``last_traceback`` as the interpreter leaves an uncaught one, so what runs at exit (the debugger
    closing a hand-written loop's training) knows the script did not end cleanly.
    """
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code is None or code == 0:
            return 0
        _note_unhandled(exc)
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        _note_unhandled(exc)
        sys.stderr.write(user_traceback(exc, path))
        return 130
    except Exception as exc:        # noqa: BLE001 - whatever the script raises is the script's, shown as python shows it
        _note_unhandled(exc)
        sys.stderr.write(user_traceback(exc, path))
        return 1
    return 0


def _note_unhandled(exc: BaseException) -> None:
    sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, exc.__traceback__


def user_traceback(exc: BaseException, script: str) -> str:
    """The traceback text of ``exc`` from the first frame in ``script`` on (frames that ran the script are left
    out). A ``SyntaxError`` in the script names its own file and line; it gets no frames at all."""
    return "".join(traceback.format_exception(type(exc), exc, _from_script(exc, script)))


def _from_script(exc: BaseException, script: str) -> Optional[TracebackType]:
    if isinstance(exc, SyntaxError):
        return None
    target = os.path.realpath(script)
    walk = exc.__traceback__
    while walk is not None:
        if os.path.realpath(walk.tb_frame.f_code.co_filename) == target:
            return walk
        walk = walk.tb_next
    return exc.__traceback__     # not raised by the script's code (e.g. it could not be read): the whole story
