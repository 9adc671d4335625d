"""What ``msdebug port-check`` is given on the command line, turned into Python objects: models from import paths
and the batch from a file or a generator.

* An **import path** is ``package.module:name`` (the module is imported; the current directory is importable, as
  with ``python -m``) or ``path/to/file.py:name`` (the file is loaded). ``name`` may be dotted (``Model.build``).
  A class or a function is called with no arguments (a factory); anything else is used as it is.
* A **batch file**: ``.npy`` holds one input and no target; ``.npz`` holds the inputs in the order they were saved,
  and the target under one of the names ``target``, ``targets``, ``label``, ``labels``, ``y``.
* A **generator** (an import path) returns an array (one input), a dict (named as in a ``.npz``) or a pair
  ``(inputs, target)`` whose inputs are an array or a sequence of arrays.

Every problem is a ``ConfigError`` naming the option, the value and what is allowed.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from msdebug_hooks.compare.port_run import Batch
from msdebug_hooks.errors import ConfigError

TARGET_NAMES = ("target", "targets", "label", "labels", "y")
_FORM = "'package.module:name' or 'path/to/file.py:name'"


def load_object(spec: str, option: str) -> Any:
    """The object an import path names (not called)."""
    module_part, sep, attribute = spec.partition(":")
    if not sep or not module_part or not attribute:
        raise ConfigError(option, spec, _FORM)
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        if module_part.endswith(".py") or os.sep in module_part:
            path = Path(module_part).expanduser()
            if not path.is_file():
                raise ConfigError(option, spec, _FORM, detail=f"{path} is not a file")
            name = f"_msdebug_port_{path.stem}"
            module_spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_part)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's module failed to import: say which and why, in one line
        raise ConfigError(option, spec, f"an importable module ({_FORM})",
                          detail=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise ConfigError(option, spec, f"a name defined in {module_part}", detail=f"no {part!r} there")
        found = getattr(found, part)
    return found


def build(spec: str, option: str) -> Any:
    """The object an import path names, called with no arguments when it is a class or a function."""
    found = load_object(spec, option)
    if inspect.isclass(found) or inspect.isfunction(found) or inspect.ismethod(found):
        try:
            return found()
        except Exception as exc:  # noqa: BLE001 - the user's factory failed: one line, no traceback
            raise ConfigError(option, spec, "a factory that builds the model with no arguments",
                              detail=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") \
                from None
    return found


def _from_mapping(arrays: Mapping[str, Any], option: str, value: str) -> Batch:
    names = list(arrays)
    targets = [name for name in names if name in TARGET_NAMES]
    if len(targets) > 1:
        raise ConfigError(option, value, f"at most one target array (named one of {', '.join(TARGET_NAMES)})",
                          detail=f"found {', '.join(targets)}")
    inputs = tuple(np.asarray(arrays[name]) for name in names if name not in targets)
    if not inputs:
        raise ConfigError(option, value, "at least one input array besides the target")
    return Batch(inputs, np.asarray(arrays[targets[0]]) if targets else None)


def read_batch(path: str) -> Batch:
    """A batch from a ``.npy`` or ``.npz`` file."""
    target = Path(path).expanduser()
    if target.suffix not in (".npy", ".npz"):
        raise ConfigError("--batch", path, "a .npy (one input) or .npz (inputs and a target) file")
    if not target.is_file():
        raise ConfigError("--batch", path, "an existing .npy or .npz file", detail="no such file")
    try:
        loaded = np.load(target, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ConfigError("--batch", path, "a .npy or .npz file numpy reads (no pickled objects)",
                          detail=str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    if isinstance(loaded, np.ndarray):
        return Batch((loaded,))
    with loaded:
        return _from_mapping({name: loaded[name] for name in loaded.files}, "--batch", path)


def generate_batch(spec: str) -> Batch:
    """A batch from a generator named by an import path."""
    made = build(spec, "--batch-fn")
    if isinstance(made, np.ndarray):
        return Batch((made,))
    if isinstance(made, Mapping):
        return _from_mapping(made, "--batch-fn", spec)
    if isinstance(made, (tuple, list)) and len(made) == 2:
        inputs, target = made
        inputs = (inputs,) if isinstance(inputs, np.ndarray) else tuple(inputs)
        if all(isinstance(item, np.ndarray) for item in inputs) and (target is None or isinstance(target,
                                                                                               np.ndarray)):
            return Batch(inputs, target)
    raise ConfigError("--batch-fn", spec, "a function returning an array, a dict of arrays or a pair "
                      "(inputs, target) of numpy arrays", detail=f"it returned a {type(made).__name__}")
