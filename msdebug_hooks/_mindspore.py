"""What we can know about MindSpore without importing it (importing it would freeze its env settings)."""
from __future__ import annotations

import functools
import re
import sys
from typing import Optional, Tuple

Version = Tuple[int, ...]


def parse_version(text: str) -> Version:
    """``"2.10.0rc1"`` -> ``(2, 10, 0)``: numeric comparison, never string comparison ("2.10" > "2.7")."""
    parts = []
    for piece in text.split(".")[:3]:
        match = re.match(r"\d+", piece)
        if not match:
            break
        parts.append(int(match.group()))
    return tuple(parts)


@functools.lru_cache(maxsize=1)
def installed_version_string() -> Optional[str]:
    """The installed MindSpore's version, from package metadata (no import), or None if it is not installed."""
    import importlib.metadata   # here: importing it is slow, and most users of this module never ask

    for dist in ("mindspore", "mindspore-gpu", "mindspore-ascend"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def installed_version() -> Optional[Version]:
    text = installed_version_string()
    return parse_version(text) if text else None


def is_imported() -> bool:
    """True once this process has imported MindSpore (GLOG variables are read at that moment)."""
    return "mindspore" in sys.modules
