"""The one registry of watchpoint error codes: the bits of an ``error_code``, their names and sentences.

A check that could not judge a tensor says why in bits, never as a clean result. 1, 2 and 4 are MindInsight's and
travel in the debugger protocol (set by the conditions); 8, 16 and 32 are MindInsight's offline debugger's (set by
``dump/watchpoints.py``); 64 is ours: the tensor's file (or its previous value's) could not be read.
"""
from __future__ import annotations

ERROR_NAN = 1
ERROR_INF = 2
ERROR_NO_PREVIOUS = 4
ERROR_MEMORY_LIMIT = 8
ERROR_NO_HISTORY = 16
ERROR_NO_VALUE = 32
ERROR_UNREADABLE = 64

#: bit -> (the MindInsight UI's name for it in ``error_list``, or None where the UI has none; the sentence)
ERROR_TEXTS: dict[int, tuple] = {
    ERROR_NAN: ("nan", "Tensor contains NaN."),
    ERROR_INF: ("inf", "A tensor contains +/-INF."),
    ERROR_NO_PREVIOUS: ("no_prev_tensor", "The previous step value cannot be found."),
    ERROR_MEMORY_LIMIT: (None, "The tensor size exceeds the memory limit."),
    ERROR_NO_HISTORY: (None, "Graph history file is not available."),
    ERROR_NO_VALUE: (None, "Tensor has no value."),
    ERROR_UNREADABLE: (None, "The tensor file cannot be read"),
}


def error_list(error_code: int) -> list[str]:
    """``3`` -> ``["nan", "inf"]``, as MindInsight shows it."""
    return [short for bit, (short, _) in ERROR_TEXTS.items() if short and error_code & bit]


def error_messages(error_code: int, reason: str = "") -> list[str]:
    """The sentence of every bit set, lowest first; ``reason`` completes the unreadable-file one."""
    messages = []
    for bit, (_, sentence) in ERROR_TEXTS.items():
        if error_code & bit:
            messages.append(f"{sentence}: {reason}." if bit == ERROR_UNREADABLE else sentence)
    return messages
