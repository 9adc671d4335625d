"""Lazily resolved public names: a package lists ``name -> module`` and imports the module on first access.

Why: ``import msdebug_hooks`` (and ``msdebug_hooks.compare``, ``msdebug_hooks.server``) must not import MindSpore,
PyTorch or grpc; each public name pulls in only its own module, once, when it is first used.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, Iterable, Mapping


def lazy_exports(package: str, exports: Mapping[str, str], namespace: dict,
                 extra: Iterable[str] = ()) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package``: each name in ``exports`` resolves from its module and is
    then kept in ``namespace`` (the package's globals), so it resolves once."""
    names = sorted(exports) + list(extra)

    def __getattr__(name: str) -> Any:
        module_name = exports.get(name)
        if module_name is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module_name), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return names

    return __getattr__, __dir__, names
