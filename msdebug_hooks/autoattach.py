"""Attach callbacks to every ``Model.train`` / ``Model.fit`` of an unmodified training script, and the debugger to
its hand-written training loops.

This is how ``ENABLE_MS_DEBUGGER=1 python train.py`` gets the debugger without an import in the script: a ``.pth``
file installed with the package runs one line at interpreter start-up. With the variable unset that line is a single
environment lookup and nothing else; with it set, :func:`install_from_env` registers the debugger and installs an
import hook that patches ``mindspore.train.model.Model`` the moment the script imports it. MindSpore itself is never
imported early, so its own environment settings keep working.

``Model.train`` and ``Model.fit`` both funnel into ``Model._train(epoch, dataset, callbacks=..., ...)``; wrapping that
one method adds our callbacks to both, after ``Model.train``'s legacy-hook check (ours use only ``on_train_*`` hooks).
Ours go *before* the script's own callbacks: the debugger must see a step before, say, MindSpore's ``LossMonitor``
raises on a NaN loss in the same step end, or the hit would never reach the UI.

A loop that never calls ``Model.train`` (``value_and_grad`` + an optimizer, ``@mindspore.jit``, a
``TrainOneStepCell`` called by hand) is reached by ``debugger.functional_loop``: the same import hook runs the
look-outs of ``debugger.loop_hooks`` right after their MindSpore modules load (``after_import``).

A bad ``ENABLE_MS_DEBUGGER`` / ``MS_DEBUGGER_*`` value stops the script at ``Model.train`` (or where the loop's
debugger attaches) with one line naming the variable, the value and what is allowed, and exit status 2
(``SystemExit``, so no traceback through the script, and the script's own ``except Exception`` does not swallow it).
"""
from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import os
import sys
import threading
from types import ModuleType
from typing import Any, Callable, Dict, List, NoReturn, Optional, Sequence

from msdebug_hooks.config import debugger_env

CallbackFactory = Callable[[], Sequence[Any]]

_TARGET_MODULE = "mindspore.train.model"
_PATCHED_FLAG = "_msdebug_hooks_patched"
_factories: List[CallbackFactory] = []
_lock = threading.Lock()
_after_import: Dict[str, List[Callable[[ModuleType], None]]] = {}    # module name -> patches run once it loaded
_driver: Any = None                                                   # the functional-loop driver, once installed


def register(factory: CallbackFactory) -> None:
    """Call ``factory()`` at the start of every ``Model.train`` / ``Model.fit``; add the callbacks it returns.

    The factory runs once per training call, so each call gets fresh callbacks (a callback keeps per-run state).
    Installs the import hook on first use; patches at once if MindSpore's ``Model`` is already imported.
    """
    with _lock:
        if factory not in _factories:
            _factories.append(factory)
        _install_hook()


def unregister(factory: CallbackFactory) -> None:
    with _lock:
        if factory in _factories:
            _factories.remove(factory)


def extra_callbacks() -> list:
    """The callbacks every registered factory contributes now (what a training call will get)."""
    callbacks: list = []
    for factory in list(_factories):
        callbacks.extend(factory())
    return callbacks


def install_from_env() -> None:
    """Entry point of the ``.pth`` line: register the online debugger, configured from ``MS_DEBUGGER_*``.

    Nothing is validated here (a ``.pth`` line cannot report errors well; it calls this for any ``ENABLE_MS_DEBUGGER``
    other than unset, 0 or false, so that ``yes`` is refused rather than ignored): the first ``Model.train`` checks
    the environment and stops the script with one line naming the variable (exit status 2).
    ``MS_DEBUGGER_SOURCE=dump`` also sets MindSpore's dump up now, before anything compiles (``dump_scratch``).
    """
    register(_debugger_from_env)
    install_functional_loop()
    if os.environ.get(debugger_env.SOURCE, "").strip().lower() == "dump":
        from msdebug_hooks.debugger.dump_scratch import configure_early

        configure_early()


def install_functional_loop(make_callbacks: Optional[CallbackFactory] = None) -> None:
    """Reach hand-written training loops too (``debugger.functional_loop``); idempotent. No MindSpore import.

    ``make_callbacks``: the callbacks the loop's session runs (default: the env's debugger; ``first-nan`` passes its
    probe). One driver per process: the first call decides."""
    global _driver
    from msdebug_hooks.debugger import functional_loop, loop_hooks

    with _lock:
        if _driver is not None:
            return
        _driver = functional_loop.FunctionalLoop(make_callbacks or _debugger_from_env, _exit_on_config_error)
    _driver.install_exit_hooks()
    for module_name, patch in loop_hooks.patches(_driver).items():
        after_import(module_name, patch)


def after_import(module_name: str, patch: Callable[[ModuleType], None]) -> None:
    """Run ``patch(module)`` right after ``module_name`` is first imported (at once if it already is)."""
    with _lock:
        _after_import.setdefault(module_name, []).append(patch)
    if module_name in sys.modules:
        patch(sys.modules[module_name])
    elif not any(isinstance(finder, _ModelImportHook) for finder in sys.meta_path):
        sys.meta_path.insert(0, _ModelImportHook())


def _exit_on_config_error(exc: Exception) -> NoReturn:
    """A bad debugger variable: one line per problem on stderr, then ``SystemExit(2)``."""
    if _driver is not None:
        _driver.done = True          # the script ends here: nothing more to say at its exit
    for line in str(exc).splitlines():
        print(f"msdebug-hooks: {line}", file=sys.stderr)
    print("msdebug-hooks: the training did not start; fix the setting above", file=sys.stderr, flush=True)
    raise SystemExit(2) from None


def _debugger_from_env() -> Sequence[Any]:
    from msdebug_hooks.rank import world_size

    if world_size() > 1:   # msrun job: rank 0 connects, the other ranks follow (MindInsight serves one device)
        from msdebug_hooks.debugger.distributed import DistributedDebugger

        return [DistributedDebugger.from_env()]
    from msdebug_hooks.debugger.callback import DebuggerCallback  # imports mindspore: only at training time

    return [DebuggerCallback.from_env()]


def _merge_callbacks(callbacks: Any) -> list:
    if callbacks is None:
        merged: list = []
    elif isinstance(callbacks, (list, tuple)):
        merged = list(callbacks)
    else:
        merged = [callbacks]
    # a callback the user already passed explicitly is not added twice: same class, or same ``autoattach_role``
    # (DebuggerCallback and DistributedDebugger are both "the debugger")
    present = {_role(cb) for cb in merged}
    return [cb for cb in extra_callbacks() if _role(cb) not in present] + merged


def _callbacks_or_exit(callbacks: Any) -> list:
    """``_merge_callbacks``, or, when a setting is bad, its one-line explanation on stderr and ``SystemExit(2)``."""
    from msdebug_hooks.errors import ConfigError

    try:
        return _merge_callbacks(callbacks)
    except ConfigError as exc:
        _exit_on_config_error(exc)


def _role(callback: Any) -> Any:
    return getattr(callback, "autoattach_role", None) or type(callback)


def patch_model_class(model_module: ModuleType) -> None:
    """Wrap ``Model._train`` in ``model_module`` (idempotent)."""
    model_cls = getattr(model_module, "Model", None)
    original = getattr(model_cls, "_train", None)
    if original is None or getattr(original, _PATCHED_FLAG, False):
        return

    @functools.wraps(original)
    def _train(self, epoch, train_dataset, *args: Any, callbacks: Any = None, **kwargs: Any):
        return original(self, epoch, train_dataset, *args, callbacks=_callbacks_or_exit(callbacks), **kwargs)

    setattr(_train, _PATCHED_FLAG, True)
    model_cls._train = _train


class _PatchingLoader(importlib.abc.Loader):
    """Delegates to the real loader, then patches the freshly executed module."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        if module.__name__ == _TARGET_MODULE:
            patch_model_class(module)
        for patch in list(_after_import.get(module.__name__, ())):
            patch(module)


class _ModelImportHook(importlib.abc.MetaPathFinder):
    """Finds ``mindspore.train.model`` (and the modules ``after_import`` names) through the other finders and wraps
    their loaders."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname != _TARGET_MODULE and fullname not in _after_import:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None


def _install_hook() -> None:
    if _TARGET_MODULE in sys.modules:
        patch_model_class(sys.modules[_TARGET_MODULE])
        return
    if not any(isinstance(finder, _ModelImportHook) for finder in sys.meta_path):
        sys.meta_path.insert(0, _ModelImportHook())
