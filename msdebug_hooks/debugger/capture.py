"""Cell outputs (activations) and weight gradients for the light tensor source, captured only while needed.

The light source reads parameters between steps; activations and gradients exist only inside a step. In PyNative
mode (MindSpore's default) a forward hook on a leaf cell sees its output, and a forward pre-hook on the optimizer sees
the gradients it is about to apply, in the order of ``optimizer.parameters``. Hooks are registered only for the nodes
a watchpoint or a view needs and removed when nothing needs them, so training without such a watchpoint pays
nothing. A node first asked for while paused has a value from the next step on.

GRAPH_MODE: a hook registered after the first compile never runs (the compiled graph is reused), and a hook compiled
in from the start hands values out only through a host round trip on every step, whether anything needs them or not
(LeNet-5 on the CPU: ~55 ms per step became ~120-150 ms). The light source therefore offers no activations or
gradients in GRAPH_MODE; ``MS_DEBUGGER_SOURCE=dump`` serves every operator's outputs there.

A cell called several times in one step (LeNet's shared ``relu``) keeps its last output.
"""
from __future__ import annotations

from typing import Any, Iterable, Optional

import numpy as np

from msdebug_hooks.debugger.graph import DebugGraph

__all__ = ["CellCapture", "to_numpy"]


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
        self._handles: dict[Any, Any] = {}        # cell node name or optimizer id -> hook handle

    @property
    def wanted(self) -> frozenset[str]:
        return self._wanted

    def want(self, names: Iterable[str]) -> None:
        """Capture exactly these nodes (the capturable ones among them) from the next step on."""
        wanted = frozenset(names) & self.capturable
        if wanted == self._wanted:
            return
        self._wanted = wanted
        for name in [n for n in self._handles if isinstance(n, str) and n not in wanted]:
            self._handles.pop(name).remove()
        for name in wanted & frozenset(self.graph.cells):
            if name not in self._handles:
                self._handles[name] = self.graph.cells[name].register_forward_hook(self._cell_hook(name))
        gradients = wanted & frozenset(self.graph.gradients)
        for optimizer, weights in self.graph.optimizers:
            key = id(optimizer)
            if gradients and key not in self._handles:
                self._handles[key] = optimizer.register_forward_pre_hook(self._gradient_hook(weights))
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
            value = to_numpy(_first_tensor(output))
            if value is not None:
                self.values[name] = value
        return keep_output

    def _gradient_hook(self, weights: list[str]):
        nodes = {weight: node for node, weight in self.graph.gradients.items()}

        def keep_gradients(cell, inputs) -> None:
            gradients = inputs[0] if inputs else ()
            for weight, gradient in zip(weights, gradients):
                node = nodes.get(weight)
                if node is not None and node in self._wanted:
                    value = to_numpy(gradient)
                    if value is not None:
                        self.values[node] = value
        return keep_gradients
