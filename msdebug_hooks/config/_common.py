"""Small pieces the env-config modules share: name suggestions, the warning category, strict integer parsing."""
from __future__ import annotations

import difflib
import shlex
from typing import Any, Iterable, Mapping, Optional

from msdebug_hooks.validation import whole_number


class ConfigWarning(UserWarning):
    """A setting MindSpore accepts but that does not do what it looks like (ignored, remapped, no effect)."""


def closest_name(name: str, known: Iterable[str]) -> Optional[str]:
    """The known name nearest to ``name`` (case-insensitive), or None when nothing is close."""
    known = list(known)
    by_upper = {k.upper(): k for k in known}
    if name.upper() in by_upper:
        return by_upper[name.upper()]
    match = difflib.get_close_matches(name.upper(), list(by_upper), n=1, cutoff=0.6)
    return by_upper[match[0]] if match else None


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"did you mean 'PARSER'?"`` or an empty string."""
    guess = closest_name(name, known)
    return f"did you mean {guess!r}?" if guess else ""


def strict_int(field: str, value: Any, *, minimum: int, allowed: str) -> int:
    """An int (or a string of decimal digits: values come from the environment too) that is at least ``minimum``;
    bools are rejected (True is not 1 here). The check is ``validation.whole_number``'s."""
    return whole_number(field, value, minimum=minimum, allowed=allowed, digits=True)


def export_lines(env: Mapping[str, str], unset: Iterable[str] = ()) -> str:
    """``export NAME=value`` lines (values shell-quoted) that ``eval "$(msdebug ...)"`` applies; ``unset`` first."""
    lines = [f"unset {name}" for name in unset]
    lines += [f"export {name}={shlex.quote(str(value))}" for name, value in env.items()]
    return "\n".join(lines) + ("\n" if lines else "")
