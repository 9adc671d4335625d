"""The architectures of the corpus, by name. A new one is a module with the interface described in
``corpus/__init__.py`` and one entry here; cases then name it in their ``arch`` field."""
from __future__ import annotations

import importlib
from types import ModuleType

ARCHITECTURES = {
    "cnn": "corpus.cnn",
    "transformer": "corpus.transformer",
    "audio": "corpus.audio",
}


def architecture(name: str) -> ModuleType:
    """The module of architecture ``name``."""
    if name not in ARCHITECTURES:
        raise ValueError(f"arch={name!r} is not allowed: one of {', '.join(ARCHITECTURES)}")
    return importlib.import_module(ARCHITECTURES[name])


def first_line(exc: BaseException, limit: int = 160) -> str:
    """``Type: first line of the message``, short enough for a table cell (side.json keeps the traceback)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:limit]
