"""Where a NaN/Inf came from: ``msdebug first-nan SCRIPT`` and :func:`first_nan`.

The first step whose loss (or, when no loss is seen, weights) holds NaN/Inf is found by a cheap check attached to the
unmodified training (``probe``); a rerun to that step looks at the operators of that step and the one before (a sync
dump where MindSpore compiles the step, line tracing of the user's code in PyNative mode), and the producer is the
first operator whose inputs are all finite and whose output is not (``dump_origin``, ``line_trace``). Importing this
package imports no MindSpore.
"""
from __future__ import annotations

from typing import Any

__all__ = ["first_nan", "FirstNanResult", "Origin"]


def __getattr__(name: str) -> Any:
    if name == "first_nan":
        from msdebug_hooks.nan.runner import first_nan

        return first_nan
    if name in ("FirstNanResult", "Origin"):
        from msdebug_hooks.nan import result

        return getattr(result, name)
    raise AttributeError(name)
