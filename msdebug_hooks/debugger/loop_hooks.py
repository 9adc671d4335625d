"""The look-outs env activation puts into MindSpore so a hand-written training loop is seen without an edit.

Each is installed the moment its MindSpore module is imported (``autoattach`` runs the patch after the module's
own code, before the script can use it), touches one class, and reports to the ``FunctionalLoop`` driver:

* ``mindspore.nn.optim.optimizer``: ``Optimizer.__init__`` reports every optimizer made;
* ``mindspore.dataset.engine.iterators``: ``Iterator.__next__`` (tuple and dict iterators, and ``for x in
  dataset``) reports each batch drawn, the end of the data, and may end the data early after a terminate;
* ``mindspore.graph.api``: ``hook_guard`` wraps ``_JitExecutor.__call__`` and tells the driver about every
  top-level ``@jit`` call.

Nothing here runs MindSpore code of its own; with the driver idle each look-out costs an attribute check or two.
"""
from __future__ import annotations

import functools
from types import ModuleType
from typing import Any, Callable

from msdebug_hooks.debugger import hook_guard
from msdebug_hooks.debugger.functional_loop import FunctionalLoop

__all__ = ["patches"]

_PATCHED = "_msdebug_hooks_loop"


def patches(driver: FunctionalLoop) -> dict[str, Callable[[ModuleType], None]]:
    """``{module name: patch(module)}`` for ``autoattach.after_import``."""
    return {
        "mindspore.nn.optim.optimizer": functools.partial(_patch_optimizer, driver),
        "mindspore.dataset.engine.iterators": functools.partial(_patch_iterator, driver),
        "mindspore.graph.api": functools.partial(_patch_jit, driver),
    }


def _patch_optimizer(driver: FunctionalLoop, module: ModuleType) -> None:
    optimizer_cls = getattr(module, "Optimizer", None)
    original = getattr(optimizer_cls, "__init__", None)
    if original is None or getattr(original, _PATCHED, False):
        return

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        driver.optimizer_made(self)

    setattr(__init__, _PATCHED, True)
    optimizer_cls.__init__ = __init__


def _patch_iterator(driver: FunctionalLoop, module: ModuleType) -> None:
    iterator_cls = getattr(module, "Iterator", None)
    original = getattr(iterator_cls, "__next__", None)
    if original is None or getattr(original, _PATCHED, False):
        return

    @functools.wraps(original)
    def __next__(self: Any) -> Any:
        driver.before_draw(self)
        try:
            batch = original(self)
        except StopIteration:
            driver.exhausted(self)
            raise
        driver.after_draw(self, batch)
        return batch

    setattr(__next__, _PATCHED, True)
    iterator_cls.__next__ = __next__


def _patch_jit(driver: FunctionalLoop, module: ModuleType) -> None:
    hook_guard.set_observer(driver)
