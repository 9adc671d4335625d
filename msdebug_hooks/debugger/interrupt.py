"""Ctrl-C while training is paused in the debugger raises ``KeyboardInterrupt`` in the training thread.

Why: MindSpore's dataset engine registers C++ signal handlers in the main process when a ``GeneratorDataset`` runs
its worker as a thread (``cde.register_worker_handlers``); Ctrl-C then ends the process with SIGTERM, so nothing of
Python's clean-up runs and the debugger server is never told that training ended. While we block in ``WaitCMD`` we
put Python's own handler in place (gRPC's blocking call checks for signals every 200 ms, so the interrupt arrives
promptly), and afterwards restore the exact previous C-level handler, so MindSpore's behaviour outside our waits is
unchanged. The previous ``struct sigaction`` is saved and restored as opaque bytes through libc, which Python's
``signal`` module cannot do (it only knows handlers it installed itself).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import _signal
import signal
import threading
from typing import Optional

__all__ = ["sigint_raises"]

_SIGACTION_BYTES = 256          # >= sizeof(struct sigaction) on every Linux ABI (152 on x86-64 and aarch64)
_libc: Optional[ctypes.CDLL] = None
_unavailable = False
_SIGINT = int(signal.SIGINT)
_MAIN_THREAD = threading.main_thread()


def _load_libc() -> Optional[ctypes.CDLL]:
    global _libc, _unavailable
    if _libc is None and not _unavailable:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            _libc.sigaction   # noqa: B018  (raises AttributeError where there is none)
        except (OSError, AttributeError):
            _unavailable = True
            _libc = None
    return _libc


class _SigintRaises:
    """The context manager behind ``sigint_raises``; a class rather than a generator, and ``_signal`` rather than
    ``signal`` (no enum conversions): it runs at every step end, so its few microseconds count."""

    __slots__ = ("_saved", "_previous", "_active", "_depth")

    def __init__(self) -> None:
        self._saved = ctypes.create_string_buffer(_SIGACTION_BYTES)
        self._previous = None
        self._active = False
        self._depth = 0

    def __enter__(self) -> None:
        libc = _libc if _libc is not None else _load_libc()
        if libc is None or threading.current_thread() is not _MAIN_THREAD:
            return
        self._depth += 1
        if self._depth > 1:          # nested: the outer block's handler is in place already
            return
        if libc.sigaction(_SIGINT, None, self._saved) != 0:
            return
        self._previous = _signal.getsignal(_SIGINT)
        _signal.signal(_SIGINT, _signal.default_int_handler)
        self._active = True

    def __exit__(self, *exc_info) -> None:
        if threading.current_thread() is not _MAIN_THREAD or _libc is None:
            return
        self._depth -= 1
        if self._depth > 0 or not self._active:
            return
        self._active = False
        try:
            _signal.signal(_SIGINT, self._previous if self._previous is not None else _signal.SIG_DFL)
        except (TypeError, ValueError):   # pragma: no cover - a handler Python cannot re-install
            pass
        _libc.sigaction(_SIGINT, self._saved, None)   # the exact C-level handler, e.g. MindSpore's


def sigint_raises() -> _SigintRaises:
    """Within the block, SIGINT raises ``KeyboardInterrupt`` in the main thread; the previous handler (Python's or
    a C library's) is restored on exit. A no-op outside the main thread or without libc ``sigaction``; a
    nested block leaves the outer one's handler in place."""
    return _SIGINT_RAISES


_SIGINT_RAISES = _SigintRaises()
