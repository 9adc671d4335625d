"""Cell outputs (activations) and weight gradients for the light tensor source, captured only while needed.

The light source reads parameters between steps; activations and gradients exist only inside a step. In PyNative
mode (MindSpore's default) a forward hook on a leaf cell sees its output, and a forward pre-hook on the optimizer sees
the gradients it is about to apply, in the order of ``optimizer.parameters``. Hooks are registered only for the nodes
a watchpoint or a view needs and removed when nothing needs them, so training without such a watchpoint pays
nothing. A node first asked for while paused has a value from the next step on.

``@mindspore.jit`` functions in PyNative mode (the tutorials' ``train_step``): the hooks go through ``hook_guard``,
which keeps them out of every compiled graph and, while one of them is live, runs the script's ``@jit`` functions
as plain PyNative code (MindSpore's own ``MS_JIT=0`` behaviour), so gradients and cell outputs are captured there
too, at eager speed for the steps that need them. A hook that fails (a value that cannot be read) is taken off with
one warning naming the node; the training goes on.

GRAPH_MODE: a hook registered after the first compile never runs (the compiled graph is reused), and a hook compiled
in from the start hands values out only through a host round trip on every step, whether anything needs them or not
(a multiple of a small network's step time). The light source therefore offers no activations or gradients in
GRAPH_MODE; ``MS_DEBUGGER_SOURCE=dump`` serves every operator's outputs there.

A cell called several times in one step (LeNet's shared ``relu``) keeps its last output.
"""
from __future__ import annotations

from typing import Any, Iterable, Optional

import numpy as np

from msdebug_hooks._log import get_logger
from msdebug_hooks.debugger import hook_guard
from msdebug_hooks.debugger.graph import DebugGraph

__all__ = ["CellCapture", "to_numpy"]

_LOG = get_logger("debugger")


def _first_tensor(value: Any) -> Any:
    while isinstance(value, (tuple, list)):
        if not value:
            return None
        value = value[0]
    return value


def to_numpy(tensor: Any) -> Optional[np.ndarray]:
    """A MindSpore tensor's value (float32 where NumPy has no equivalent, e.g. bfloat16); None for a non-tensor."""
    try:
        return tensor.asnumpy()
    except (TypeError, RuntimeError):      # e.g. bfloat16 without a NumPy equivalent
        return tensor.float().asnumpy()
    except AttributeError:                 # not a tensor
        return None


class CellCapture:
    """Hooks that keep the outputs of the cells and the gradients asked for by node full name.

    Args:
        graph: the light graph (``graph.cells``, ``graph.gradients``, ``graph.optimizers``).
        enabled: False in GRAPH_MODE (see the module docstring): nothing is capturable.
    """

    def __init__(self, graph: DebugGraph, *, enabled: bool = True) -> None:
        self.graph = graph
        self.enabled = enabled
        self.capturable = frozenset(graph.cells) | frozenset(graph.gradients) if enabled else frozenset()
        self.values: dict[str, np.ndarray] = {}
        self._wanted: frozenset[str] = frozenset()
        self._handles: dict[Any, Any] = {}        # cell node name or optimizer id -> hook_guard.GuardedHook
        self.failed: dict[str, str] = {}           # node or optimizer -> why its capture was switched off

    @property
    def wanted(self) -> frozenset[str]:
        return self._wanted

    def want(self, names: Iterable[str]) -> None:
        """Capture exactly these nodes (the capturable ones among them) from the next step on."""
        wanted = frozenset(names) & self.capturable - frozenset(self.failed)
        if wanted == self._wanted:
            return
        self._wanted = wanted
        for name in [n for n in self._handles if isinstance(n, str) and n not in wanted]:
            self._handles.pop(name).remove()
        for name in wanted & frozenset(self.graph.cells):
            if name not in self._handles:
                self._handles[name] = hook_guard.forward_hook(self.graph.cells[name], self._cell_hook(name))
        gradients = wanted & frozenset(self.graph.gradients)
        for optimizer, weights in self.graph.optimizers:
            key = id(optimizer)
            if gradients and key not in self._handles:
                self._handles[key] = hook_guard.forward_pre_hook(optimizer, self._gradient_hook(weights, key))
            elif not gradients and key in self._handles:
                self._handles.pop(key).remove()
        for name in list(self.values):
            if name not in wanted:
                del self.values[name]

    def begin_step(self) -> None:
        """A new step starts: last step's values are stale."""
        self.values.clear()

    def close(self) -> None:
        for handle in self._handles.values():
            handle.remove()
        self._handles.clear()
        self._wanted = frozenset()
        self.values.clear()

    def _cell_hook(self, name: str):
        def keep_output(cell, inputs, output) -> None:
            try:
                value = to_numpy(_first_tensor(output))
            except Exception as exc:      # noqa: BLE001 - a capture problem must never end the training
                self._give_up(name, name, exc)
                return
            if value is not None:
                self.values[name] = value
        return keep_output

    def _gradient_hook(self, weights: list[str], key: Any):
        nodes = {weight: node for node, weight in self.graph.gradients.items()}

        def keep_gradients(cell, inputs) -> None:
            gradients = inputs[0] if inputs else ()
            try:
                for weight, gradient in zip(weights, gradients):
                    node = nodes.get(weight)
                    if node is not None and node in self._wanted:
                        value = to_numpy(gradient)
                        if value is not None:
                            self.values[node] = value
            except Exception as exc:      # noqa: BLE001 - a capture problem must never end the training
                self._give_up(key, f"the gradients of {type(cell).__name__}", exc)
        return keep_gradients

    def _give_up(self, key: Any, what: str, exc: BaseException) -> None:
        """Take the failing hook off for good, with one warning; watchpoints on it then see no value."""
        handle = self._handles.pop(key, None)
        if handle is not None:
            handle.remove()
        names = [key] if isinstance(key, str) else sorted(n for n in self._wanted if n in self.graph.gradients)
        for name in names:
            self.failed[name] = f"{type(exc).__name__}: {exc}"
            self.values.pop(name, None)
        self._wanted = self._wanted - frozenset(names)
        _LOG.warning("debugger: capturing %s failed (%s: %s); that capture is off for the rest of the training "
                     "and its watchpoints see no value", what, type(exc).__name__, str(exc)[:200])
