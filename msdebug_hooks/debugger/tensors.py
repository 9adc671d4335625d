"""Tensor values for the debugger session, read from the live network (the "light" tensor source).

Parameters (weights and optimizer states) are read from their MindSpore ``Parameter`` when the session asks, which
is at most once per suspension point and only for tensors that are watched or viewed. The loss is the value the
caller recorded for the step that just ended; the ``data`` / ``label`` inputs are the step's batch; an optimizer node
(``Apply<Optimizer>``) shows the weight it updated. Cell outputs (activations) and weight gradients come from a
``CellCapture`` (``capture.py``), which keeps them only for the nodes the session asks it to ``want``.
"""
from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence

import numpy as np

from msdebug_hooks.parameter_views import ParameterViews
from msdebug_hooks.training_loop import loss_value
from msdebug_hooks.debugger.capture import CellCapture, to_numpy
from msdebug_hooks.debugger.graph import DATA_INPUT, LABEL_INPUT, DebugGraph
from msdebug_hooks.debugger.sources import GraphTensorSource

__all__ = ["NetworkTensors"]


class NetworkTensors(GraphTensorSource):
    """The light ``TensorSource`` over a ``DebugGraph``: bare parameter names and op node full names."""

    def __init__(self, graph: DebugGraph, capture: Optional[CellCapture] = None) -> None:
        super().__init__(graph)
        self.capture = capture if capture is not None else CellCapture(graph, enabled=False)
        self._loss: Optional[float] = None
        self._outputs: Any = None
        self._inputs: Any = ()                 # the step's batch as MindSpore gave it (a list or tuple)
        self._params: Any = None               # the run context's parameters, read only when asked (set_step)
        self._views = ParameterViews(read=to_numpy)   # parameter values without an asnumpy per read and step
        self._parameter_lists: dict[tuple[str, ...], Optional[list[Any]]] = {}   # see ``step_values``

    @property
    def loss(self) -> Optional[float]:
        self._take_params()
        if self._outputs is not None:          # read from the device only when someone asks
            self._loss, self._outputs = loss_value(self._outputs), None
        return self._loss

    def set_outputs(self, net_outputs: Any, inputs: Any = None) -> None:
        """The train cell's outputs (and the batch) of the step that just ended; read only when needed (this
        runs at every step end, watched or not)."""
        self._loss, self._outputs, self._params = None, net_outputs, None
        self._inputs = inputs

    def set_step(self, params: Any) -> None:
        """The run context's parameters (``run_context.original_args()``) at a step end: outputs and batch are taken
        from them only when asked. Holding them, not the step's tensors, leaves the release of the last step's
        tensors (tens of microseconds) where MindSpore does it, outside the debugger's step end."""
        self._loss, self._outputs, self._inputs, self._params = None, None, (), params

    def _take_params(self) -> None:
        params, self._params = self._params, None
        if params is not None:
            self._outputs = getattr(params, "net_outputs", None)
            self._inputs = getattr(params, "train_dataset_element", None)

    # -- what the session asks besides values -------------------------------------------------------------------
    @property
    def capturable(self) -> frozenset[str]:
        """Op nodes whose value exists only while a step runs (cells, gradients): they must be ``want``-ed first."""
        return self.capture.capturable

    def holds(self, name: str) -> bool:
        """Whether ``name`` (a bare parameter name or an op full name) can have a value."""
        param = self.graph.parameters.get(name)
        if param is not None:
            return param.source is not None or param.name in (DATA_INPUT, LABEL_INPUT)
        return name == self.graph.loss_node or name in self.graph.updates or name in self.capture.capturable

    def why_not(self, name: str) -> str:
        """Why a watched node has no value here (for the session's one warning per watchpoint)."""
        if name in self.capture.failed:
            return f"capturing it failed ({self.capture.failed[name][:200]}) and was switched off"
        if name in self.graph.cells or name in self.graph.gradients:
            return ("cell outputs and gradients are captured in PyNative mode only (in GRAPH_MODE a hook would cost "
                    "a host round trip every step); for operator values train in PyNative mode while debugging, or "
                    "use the dump source (MS_DEBUGGER_SOURCE=dump, msdebug debug --source dump; Model.train only)")
        return "the light source has no value for this node"

    def want(self, names: Iterable[str]) -> None:
        self.capture.want(names)

    def new_step(self) -> None:
        """A step starts: the captured values of the last one are stale."""
        self.capture.begin_step()

    def close(self) -> None:
        self.capture.close()

    def step_values(self, tensors: Sequence[str]) -> list[tuple[int, str, np.ndarray]]:
        """Watched tensors that are all plain parameters (the usual watchpoints on weights) are read in bulk:
        one storage address per parameter (``ParameterViews.values``), not a chain of lookups per tensor."""
        key = tuple(tensors)
        params = self._parameter_lists.get(key, False)
        if params is False:
            params = self._parameter_lists[key] = self._plain_parameters(key)
        if params is None:
            return super().step_values(tensors)
        values = self._views.values(params)
        self._current.update(zip(key, values))
        return [(index, "0", value) for index, value in enumerate(values)]

    def _plain_parameters(self, tensors: tuple[str, ...]) -> Optional[list[Any]]:
        """The MindSpore parameters behind ``tensors`` when each is a parameter read straight from its storage,
        else None. The graph does not change during a session; this is worked out once per list."""
        graph, special = self.graph, {self.graph.loss_node, DATA_INPUT, LABEL_INPUT}
        params = []
        for name in tensors:
            param = graph.parameters.get(name)
            if (param is None or param.source is None or name in special or name in graph.updates
                    or name in self.capture.capturable):
                return None
            params.append(param.source)
        return params

    def value_of(self, name: str) -> Optional[np.ndarray]:
        if name == self.graph.loss_node:
            loss = self.loss
            return None if loss is None else np.asarray(loss, dtype=np.float32)
        if name in self.graph.updates:
            name = self.graph.updates[name]
        if name in self.capture.capturable:
            return self.capture.values.get(name)
        if name in (DATA_INPUT, LABEL_INPUT):
            self._take_params()
            index = 0 if name == DATA_INPUT else 1
            inputs = self._inputs if isinstance(self._inputs, (tuple, list)) else ()
            return to_numpy(inputs[index]) if len(inputs) > index else None
        param = self.graph.parameters.get(name)
        if param is None or param.source is None:
            return None
        return self._views.value(param.source)
