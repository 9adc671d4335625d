"""``LayerRecorder``: the output of every layer of a MindSpore network, in execution order, for chosen steps.

Works in GRAPH_MODE and PyNative, from ``Model.train`` (it is a ``Callback``) and from a custom loop
(``with recorder.step(n): ...``). It writes the layer-capture format of :mod:`msdebug_hooks.compare.layer_capture`.

How values leave a compiled graph: a forward hook (``Cell.register_forward_hook``) is compiled into the graph. Our
hook passes the layer's output to :func:`_deliver`, a function of this package, and returns the output unchanged.
MindSpore's graph compiler runs functions of modules named in ``MS_JIT_IGNORE_MODULES`` as real Python at every
execution (JIT fallback) instead of compiling them, so the recorder adds ``msdebug_hooks`` to that variable when it is
created (before the network is first compiled): :func:`_deliver` then runs in Python at every step, in both modes,
and reads the recorder's live state (whether this step is captured). On a step that is not captured it returns at
once; the hook's round trip into Python is the cost left (``benchmarks/layer_recorder_overhead.py`` measures it).

What is captured:

* forward outputs of every leaf cell (and of the container cells named in ``containers``), each call of a cell used
  twice recorded separately (``relu``, ``relu#1``); tuple outputs as ``name.0``, ``name.1``;
* parameter values at the start of a captured step (``record_parameters=True``);
* parameter gradients: in a custom loop from the gradients you pass to :meth:`record_gradients` (e.g. those
  ``value_and_grad`` returned), in any mode; under ``Model.train`` from the step's outputs when the train network
  is ``nn.TrainOneStepCell(..., return_grad=True)`` (any mode), else in PyNative from the optimizer's input (a
  forward pre-hook on the optimizer). Otherwise not under ``Model.train`` in GRAPH_MODE: a hook on the optimizer
  cannot be compiled there (MindSpore 2.10 reports a graph cycle), so gradients are not recorded and the recorder
  says so once in a warning.
"""
from __future__ import annotations

import itertools
import os
import warnings
from typing import Any, Iterable, Optional, Sequence

import mindspore as ms
import numpy as np
from mindspore.train import Callback

from msdebug_hooks.compare.layer_capture import (PARAMETER, PARAMETER_GRADIENT, FrameworkRecorder, PathLike,
                                                 StepRecorder)

_JIT_IGNORE_VARIABLE = "MS_JIT_IGNORE_MODULES"
_PACKAGE = __name__.split(".")[0]

# recorder id -> recorder; the compiled hooks know only the id
_RECORDERS: dict[int, "LayerRecorder"] = {}
_NEXT_ID = itertools.count(1)


def _run_hooks_in_python() -> None:
    """Make MindSpore's graph compiler call this package's functions as Python (read at every compile)."""
    names = [name for name in os.environ.get(_JIT_IGNORE_VARIABLE, "").split(",") if name]
    if _PACKAGE not in names:
        os.environ[_JIT_IGNORE_VARIABLE] = ",".join(names + [_PACKAGE])


def _deliver(recorder_id: int, name: str, output: Any) -> int:
    """Runs in Python for every hooked call, in both modes: hand ``output`` to the recorder if it is capturing."""
    recorder = _RECORDERS.get(recorder_id)
    if recorder is not None and recorder.session.capturing:
        recorder.record_output(name, output)
    return 0


def _deliver_gradients(recorder_id: int, gradients: Any) -> int:
    recorder = _RECORDERS.get(recorder_id)
    if recorder is not None and recorder.session.capturing:
        recorder.record_gradients(gradients)
    return 0


def _make_forward_hook(recorder_id: int, name: str):
    deliver = _deliver  # a closure variable: found by the graph compiler whatever module it reads globals from

    def forward_hook(cell, inputs, output):
        deliver(recorder_id, name, output)
        return output  # returning the output keeps the call in the compiled graph's data flow
    # compiled by MindSpore as user code (only ``deliver`` runs as Python): the output keeps its graph type
    forward_hook.__module__ = "__main__"
    return forward_hook


def _make_optimizer_hook(recorder_id: int):
    def optimizer_pre_hook(cell, inputs):
        _deliver_gradients(recorder_id, inputs[0])
        return inputs
    return optimizer_pre_hook


class LayerRecorder(Callback, FrameworkRecorder):
    """Record the forward outputs (and, where MindSpore allows, parameter gradients) of ``network``'s layers into a
    layer-capture directory, for the steps in ``steps`` (``None``: every step).

    Create it before the network is first run (hooks must be in place when the graph is compiled). Under
    ``Model.train`` pass it as a callback: steps are ``cur_step_num`` (1-based). In a custom loop::

        with recorder.step(3):
            loss, grads = grad_fn(x, y)
            recorder.record_gradients(grads)   # optional
            optimizer(grads)

    ``containers``: names of non-leaf cells whose outputs to record too. ``optimizer``: in PyNative, record the
    gradients it receives (``Model.train`` supplies it on its own).

    A cell used at several places (one ``ReLU`` for every layer) runs its hook once per place in PyNative, but in a
    compiled graph MindSpore 2.10 runs it once per place *at every place*, with equal values; the recorder keeps
    the first of consecutive equal outputs of one cell. So a cell applied twice in a row with an unchanged result
    (``relu(relu(x))``) is recorded once.
    """

    def __init__(self, network: "ms.nn.Cell", directory: PathLike, *, steps: Optional[Iterable[int]] = None,
                 containers: Sequence[str] = (), record_parameters: bool = False,
                 optimizer: Optional["ms.nn.Cell"] = None) -> None:
        super().__init__()
        _run_hooks_in_python()
        self.network = network
        self.session = StepRecorder(directory, "mindspore", steps)
        self.record_parameters = record_parameters
        self._id = next(_NEXT_ID)
        _RECORDERS[self._id] = self
        self._handles: list = []
        self._parameters = list(network.trainable_params())
        self._hooked_optimizer = False
        self._last_output: Optional[tuple] = None
        cells = dict(network.cells_and_names())
        unknown = [name for name in containers if name not in cells]
        if unknown:
            raise ValueError(f"containers={list(unknown)!r} is not allowed: names of cells of the network "
                             f"(e.g. {', '.join(n for n in list(cells)[1:6])})")
        self.layer_names = [name for name, cell in cells.items()
                            if name and (not cell.name_cells() or name in containers)]
        for name in self.layer_names:
            self._handles.append(cells[name].register_forward_hook(_make_forward_hook(self._id, name)))
        if optimizer is not None:
            self.hook_optimizer(optimizer)

    # --- the step ---------------------------------------------------------------------------------------------
    def begin_step(self, step: int) -> bool:
        """Start ``step``; True when it is captured (parameters are recorded now if asked)."""
        capturing = self.session.begin_step(step)
        self._last_output = None
        if capturing and self.record_parameters:
            for param in self._parameters:
                self.session.add(param.name, PARAMETER, param.asnumpy())
        return capturing

    def end_step(self) -> None:
        self.session.end_step()

    def record_gradients(self, gradients: Sequence[Any], parameters: Optional[Sequence[Any]] = None) -> None:
        """Record ``gradients`` (in the order of ``parameters``, default the network's trainable parameters)."""
        if not self.session.capturing:
            return
        parameters = self._parameters if parameters is None else list(parameters)
        if len(gradients) != len(parameters):
            raise ValueError(f"gradients: {len(gradients)} given for {len(parameters)} parameters; pass "
                             f"parameters= in the gradients' order")
        for param, grad in zip(parameters, gradients):
            self.session.add(param.name, PARAMETER_GRADIENT, self.to_numpy(grad))

    def hook_optimizer(self, optimizer: "ms.nn.Cell") -> bool:
        """Record the gradients ``optimizer`` receives (PyNative only); False, with a warning, in GRAPH_MODE."""
        if self._hooked_optimizer:
            return True
        if ms.get_context("mode") == ms.GRAPH_MODE:
            warnings.warn("LayerRecorder: parameter gradients are not recorded under Model.train in GRAPH_MODE "
                          "(a hook on the optimizer cannot be compiled); to record them, train "
                          "Model(nn.TrainOneStepCell(..., return_grad=True)), or use a custom loop with "
                          "record_gradients()", RuntimeWarning, stacklevel=2)
            return False
        self._parameters = list(optimizer.parameters)
        self._handles.append(optimizer.register_forward_pre_hook(_make_optimizer_hook(self._id)))
        self._hooked_optimizer = True
        return True

    @staticmethod
    def to_numpy(value: Any) -> np.ndarray:
        return value.asnumpy() if hasattr(value, "asnumpy") else np.asarray(value)

    def add_output(self, name: str, array: np.ndarray) -> None:
        last = self._last_output
        if last is not None and last[0] == name and last[1].shape == array.shape and np.array_equal(last[1], array):
            return  # the same call seen again (see the class docstring)
        self._last_output = (name, array)
        super().add_output(name, array)

    def remove(self) -> None:
        """Remove the hooks (the network then runs as if never recorded, after its next compile)."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        _RECORDERS.pop(self._id, None)

    # --- Model.train --------------------------------------------------------------------------------------------
    def on_train_begin(self, run_context) -> None:
        cb_params = run_context.original_args()
        if getattr(getattr(cb_params, "train_network", None), "return_grad", False):
            return  # the gradients come with each step's outputs
        optimizer = getattr(cb_params, "optimizer", None)
        if optimizer is not None:
            self.hook_optimizer(optimizer)

    def on_train_step_begin(self, run_context) -> None:
        self.begin_step(run_context.original_args().cur_step_num)

    def on_train_step_end(self, run_context) -> None:
        outputs = getattr(run_context.original_args(), "net_outputs", None)
        if self.session.capturing and isinstance(outputs, (tuple, list)) and len(outputs) == 2 \
                and isinstance(outputs[1], dict):  # TrainOneStepCell(return_grad=True): (loss, {name: gradient})
            for name, gradient in outputs[1].items():
                self.session.add(name, PARAMETER_GRADIENT, self.to_numpy(gradient))
        self.end_step()

    def on_train_end(self, run_context) -> None:
        self.end_step()
