"""One place that checks the numbers a user hands us, so every refusal reads the same way.

Each check returns the value as the type the caller stores (``int`` or ``float``) or raises ``ConfigError`` naming
the field, the value and what is allowed. ``bool`` is refused everywhere: ``True`` is an int to Python, but a user
who passes it for a step count has made a mistake we should name, not a step count of 1.
"""
from __future__ import annotations

import math
from typing import Any, Optional

from msdebug_hooks.errors import ConfigError

__all__ = ["whole_number", "real_number", "optional_whole_number"]


def _range_words(minimum: Optional[float], maximum: Optional[float], *, above: Optional[float]) -> str:
    if above is not None:
        return f"> {above:g}" if maximum is None else f"> {above:g} and <= {maximum:g}"
    if minimum is not None and maximum is not None:
        return f"{minimum:g}..{maximum:g}"
    if minimum is not None:
        return f">= {minimum:g}"
    if maximum is not None:
        return f"<= {maximum:g}"
    return ""


def whole_number(field: str, value: Any, *, minimum: Optional[int] = None, maximum: Optional[int] = None,
                 allowed: Optional[str] = None) -> int:
    """``value`` as an int within ``minimum..maximum`` (either end may be open); ``allowed`` replaces the wording."""
    words = allowed or " ".join(filter(None, ("an int", _range_words(minimum, maximum, above=None))))
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(field, value, words)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ConfigError(field, value, words)
    return int(value)


def optional_whole_number(field: str, value: Any, *, minimum: Optional[int] = None,
                          maximum: Optional[int] = None, allowed: Optional[str] = None) -> Optional[int]:
    """Like ``whole_number``, with ``None`` passed through (an unset limit)."""
    if value is None:
        return None
    return whole_number(field, value, minimum=minimum, maximum=maximum, allowed=allowed)


def real_number(field: str, value: Any, *, minimum: Optional[float] = None, maximum: Optional[float] = None,
                above: Optional[float] = None, allowed: Optional[str] = None) -> float:
    """``value`` (int or float, finite) as a float; ``above`` is an open lower bound (``> 0``), ``minimum`` a closed one."""
    words = allowed or " ".join(filter(None, ("a number", _range_words(minimum, maximum, above=above))))
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(field, value, words)
    if (above is not None and not value > above) or (minimum is not None and value < minimum) or \
            (maximum is not None and value > maximum):
        raise ConfigError(field, value, words)
    return float(value)
