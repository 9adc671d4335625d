"""One place that checks the numbers a user hands us, so every refusal reads the same way.

Each check returns the value as the type the caller stores (``int`` or ``float``) or raises ``ConfigError`` naming
the field, the value and what is allowed. ``bool`` is refused everywhere: ``True`` is an int to Python, but a user
who passes it for a step count has made a mistake we should name, not a step count of 1.

``allowed`` replaces the generated wording (``"an int >= 1"``) where a caller has a better sentence for its users
(the unit, where the range comes from); the check itself stays the one written here.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Optional

from msdebug_hooks.errors import ConfigError, ConfigErrors

__all__ = ["whole_number", "optional_whole_number", "real_number", "optional_real_number", "raise_all"]


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


def _decimal(text: str) -> Optional[int]:
    """The int a string of decimal digits (spaces around allowed) spells, else None (signs, "1.0", "²")."""
    text = text.strip()
    if not text.isdecimal():
        return None
    try:
        return int(text)
    except ValueError:
        return None


def whole_number(field: str, value: Any, *, minimum: Optional[int] = None, maximum: Optional[int] = None,
                 allowed: Optional[str] = None, digits: bool = False) -> int:
    """``value`` as an int within ``minimum..maximum`` (either end may be open).

    ``digits``: a string of decimal digits is read as its number too (an environment variable, a value from a
    file of strings); the error then names the string as it was given.
    """
    words = allowed or " ".join(filter(None, ("an int", _range_words(minimum, maximum, above=None))))
    number = _decimal(value) if digits and isinstance(value, str) else value
    if isinstance(number, bool) or not isinstance(number, int):
        raise ConfigError(field, value, words)
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        raise ConfigError(field, value, words)
    return int(number)


def optional_whole_number(field: str, value: Any, *, minimum: Optional[int] = None,
                          maximum: Optional[int] = None, allowed: Optional[str] = None,
                          digits: bool = False) -> Optional[int]:
    """Like ``whole_number``, with ``None`` passed through (an unset limit)."""
    if value is None:
        return None
    return whole_number(field, value, minimum=minimum, maximum=maximum, allowed=allowed, digits=digits)


def real_number(field: str, value: Any, *, minimum: Optional[float] = None, maximum: Optional[float] = None,
                above: Optional[float] = None, allowed: Optional[str] = None, finite: bool = True) -> float:
    """``value`` (int or float, finite) as a float; ``above`` is an open lower bound (``> 0``), ``minimum`` a
    closed one.

    ``finite=False`` lets an infinity through where it means "for ever" (a wait, a window); NaN is never a number.
    """
    words = allowed or " ".join(filter(None, ("a number", _range_words(minimum, maximum, above=above))))
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or \
            (finite and math.isinf(value)):
        raise ConfigError(field, value, words)
    if (above is not None and not value > above) or (minimum is not None and value < minimum) or \
            (maximum is not None and value > maximum):
        raise ConfigError(field, value, words)
    return float(value)


def optional_real_number(field: str, value: Any, *, minimum: Optional[float] = None,
                         maximum: Optional[float] = None, above: Optional[float] = None,
                         allowed: Optional[str] = None, finite: bool = True) -> Optional[float]:
    """Like ``real_number``, with ``None`` passed through (a check that is off)."""
    if value is None:
        return None
    return real_number(field, value, minimum=minimum, maximum=maximum, above=above, allowed=allowed, finite=finite)


def raise_all(errors: Iterable[ConfigError]) -> None:
    """Report every problem found at once: nothing when there is none, the one ``ConfigError`` itself, or one
    ``ConfigErrors`` holding several (MindSpore reports one per run; a user fixes them all in one go)."""
    found = list(errors)
    if len(found) == 1:
        raise found[0]
    if found:
        raise ConfigErrors(found)
