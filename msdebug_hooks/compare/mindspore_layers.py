"""``LayerRecorder``: the output of every layer of a MindSpore network, in execution order, for chosen steps.

Works in GRAPH_MODE and PyNative, from ``Model.train`` (it is a ``Callback``) and from a custom loop
(``with recorder.step(n): ...``). It writes the layer-capture format of :mod:`msdebug_hooks.compare.layer_capture`.

How values leave a compiled graph: a forward hook (``Cell.register_forward_hook``) is compiled into the graph. Our
hook passes the layer's output to :func:`_deliver`, a function of this package, and returns the output unchanged.
MindSpore's graph compiler runs functions of modules named in ``MS_JIT_IGNORE_MODULES`` as real Python at every
execution (JIT fallback) instead of compiling them, so the recorder adds ``msdebug_hooks`` to that variable when it is
created (before the network is first compiled): :func:`_deliver` then runs in Python at every step, in both modes,
and reads the recorder's live state (whether this step is captured).

Hooks only on the captured steps, in GRAPH_MODE: a compiled hook makes that round trip into Python at every call,
captured or not (x1.78 a step on the corpus transformer). So a GRAPH_MODE recorder with chosen ``steps`` registers
its hooks at the start of a captured step and removes them at its end. MindSpore 2.10 keys a compiled graph on its
arguments only, so a hook registered or removed after the first compile is silently ignored; with
``MS_DEV_JIT_AST_ENABLE_GUARD=1`` (the recorder sets it; 2.7 always does) the key also holds MindSpore's hook
version, a counter that every register and remove increments. The recorder labels the version of its hooked state
with its own tag and, when nobody else touched a hook in between, puts the counter back after removing them: the
hookless graph and the hooked graph are each compiled once and then reused from MindSpore's graph cache. (The counts
it steps back over only ever existed between its own register and remove calls, so no graph was compiled under them
and none can be taken for another state.) So the first captured step pays one compile of the hooked graph, about
twice a plain compile (that step, compile and capture, took 1.4 s against 0.76 s for the first plain step of LeNet,
27 s against 12 s for ``benchmarks/small_transformer.py``, at load 10 on 2 cores), later captured steps none; a
recorder created after the training's first compile adds one compile of the hookless graph at its first step (the
key gains the version). Steps not captured run the very graph plain training runs. PyNative, and ``steps=None``,
keep their hooks from creation to :meth:`~LayerRecorder.remove` (a PyNative hook that returns at once costs little).

What is captured:

* forward outputs of every leaf cell and built-in layer (``nn.LSTM`` as a whole, not its private inner cells), and
  of the container cells named in ``containers``, each call of a cell used twice recorded separately (``relu``,
  ``relu#1``); tuple outputs as ``name.0``, ``name.1``;
* parameter values at the start of a captured step (``record_parameters=True``);
* parameters and their gradients are named by their cell path (``parameters_and_names()``: ``stages.0.conv.weight``),
  not by ``Parameter.name``: MindSpore names the parameters of cells held in a ``CellList`` or ``SequentialCell``
  attribute without the attribute (``0.conv.weight``), so the name would not lie under the layer that holds it;
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
from mindspore.common import hook_handle
from mindspore.train import Callback

from msdebug_hooks.compare.layer_capture import (PARAMETER, PARAMETER_GRADIENT, FrameworkRecorder, PathLike,
                                                 StepRecorder)
from msdebug_hooks.compare.layer_selection import select_layers, sequential_containers

_JIT_IGNORE_VARIABLE = "MS_JIT_IGNORE_MODULES"
_HOOK_GUARD_VARIABLE = "MS_DEV_JIT_AST_ENABLE_GUARD"   # "1": a compiled graph's key holds the hook version
_PACKAGE = __name__.split(".")[0]

# recorder id -> recorder; the compiled hooks know only the id
_RECORDERS: dict[int, "LayerRecorder"] = {}
_NEXT_ID = itertools.count(1)


def _run_hooks_in_python() -> None:
    """Make MindSpore's graph compiler call this package's functions as Python (read at every compile)."""
    names = [name for name in os.environ.get(_JIT_IGNORE_VARIABLE, "").split(",") if name]
    if _PACKAGE not in names:
        os.environ[_JIT_IGNORE_VARIABLE] = ",".join(names + [_PACKAGE])


class _TaggedVersion(int):
    """MindSpore's hook version while a recorder's hooks are on: the count it had before them, and a name of its own
    (the graph key holds ``str`` of the version), so the hooked graph is cached apart from every other state."""

    def __new__(cls, base: int, recorder_id: int) -> "_TaggedVersion":
        tagged = super().__new__(cls, int(base))
        tagged.label = f"{base}+recorder{recorder_id}"
        return tagged

    def __str__(self) -> str:
        return self.label

    __repr__ = __str__


def _make_widen():
    """``widen(value)``: float16 tensors cast to float32 (exact), anything else as it is, tuples and lists element
    by element; ``halves(value)``: the same nesting, True where ``widen`` cast.

    Compiled into the hook: in a compiled graph on the CPU, MindSpore 2.10 cannot hand a float16 tensor to a Python
    call ("Invalid host tensor size ... for pyexecute", the training stops), a float32 one it can. Everything they
    use is a closure variable, as in the hook: the compiler reads their globals from ``__main__``."""
    tensor, float16, float32 = ms.Tensor, ms.float16, ms.float32

    def widen(value):
        if isinstance(value, (tuple, list)):
            return tuple([widen(item) for item in value])
        if isinstance(value, tensor):
            if value.dtype == float16:
                return value.astype(float32)
        return value

    def halves(value):
        if isinstance(value, (tuple, list)):
            return tuple([halves(item) for item in value])
        if isinstance(value, tensor):
            return value.dtype == float16
        return False

    widen.__module__ = halves.__module__ = "__main__"  # compiled as user code, not run as Python
    return widen, halves


def _narrow(value: Any, halves: Any) -> Any:
    """Undo ``widen`` (exact, see :func:`_make_widen`): the recorder writes float16 as float16."""
    if isinstance(value, (tuple, list)) and isinstance(halves, (tuple, list)):
        return tuple(_narrow(item, half) for item, half in zip(value, halves))
    return value.astype(ms.float16) if halves is True and hasattr(value, "astype") else value


def _deliver(recorder_id: int, name: str, output: Any, halves: Any = False, inputs: Any = None,
             input_halves: Any = False) -> int:
    """Runs in Python for every hooked call, in both modes: hand ``output`` (and ``inputs``, when the recorder
    records them) to the recorder if it is capturing."""
    recorder = _RECORDERS.get(recorder_id)
    if recorder is not None and recorder.session.capturing:
        recorder.record_call(name, None if inputs is None else _narrow(inputs, input_halves), _narrow(output, halves))
    return 0


def _deliver_gradients(recorder_id: int, gradients: Any) -> int:
    recorder = _RECORDERS.get(recorder_id)
    if recorder is not None and recorder.session.capturing:
        recorder.record_gradients(gradients)
    return 0


def _make_forward_hook(recorder_id: int, name: str, with_inputs: bool = False):
    deliver = _deliver  # a closure variable: found by the graph compiler whatever module it reads globals from
    widen, halves = _make_widen()

    if with_inputs:  # a separate function: without inputs the compiled call passes nothing it does not need
        def forward_hook(cell, inputs, output):
            deliver(recorder_id, name, widen(output), halves(output), widen(inputs), halves(inputs))
            return output
    else:
        def forward_hook(cell, inputs, output):
            deliver(recorder_id, name, widen(output), halves(output))
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

    Create it before the network is first run (in GRAPH_MODE a later one costs one more compile; with
    ``steps=None`` its hooks must be in place when the graph is compiled). Under
    ``Model.train`` pass it as a callback: steps are ``cur_step_num`` (1-based). In a custom loop::

        with recorder.step(3):
            loss, grads = grad_fn(x, y)
            recorder.record_gradients(grads)   # optional
            optimizer(grads)

    ``containers``: names of non-leaf cells whose outputs to record too. A built-in layer made of private inner
    cells (``nn.LSTM``, ``nn.GRU``, ``nn.RNN``, ``nn.BatchNorm3d``, ``nn.MultiheadAttention``) is recorded as one
    layer with its public output, as PyTorch records its module; ``inner_cells=True`` records its inner cells too
    (:mod:`msdebug_hooks.compare.layer_selection`). ``optimizer``: in PyNative, record the
    gradients it receives (``Model.train`` supplies it on its own). ``record_inputs``: record each call's tensor
    inputs too (``name.in0``, ...), before its output. bfloat16 tensors are written as float32 (exactly), with
    ``source_dtype`` ``bfloat16``; float16 as float16.

    A cell used at several places (one ``ReLU`` for every layer) runs its hook once per place in PyNative, but in a
    compiled graph MindSpore 2.10 runs it once per place *at every place*, with equal values; the recorder keeps
    the first of consecutive equal calls of one cell (inputs and outputs). So a cell applied twice in a row with an
    unchanged result (``relu(relu(x))``) is recorded once.
    """

    def __init__(self, network: "ms.nn.Cell", directory: PathLike, *, steps: Optional[Iterable[int]] = None,
                 containers: Sequence[str] = (), record_parameters: bool = False,
                 optimizer: Optional["ms.nn.Cell"] = None, record_inputs: bool = False,
                 inner_cells: bool = False) -> None:
        super().__init__()
        _run_hooks_in_python()
        self.network = network
        self.session = StepRecorder(directory, "mindspore", steps)
        self.record_parameters = record_parameters
        self.record_inputs = record_inputs
        self._id = next(_NEXT_ID)
        _RECORDERS[self._id] = self
        self._handles: list = []
        self._parameters = list(network.trainable_params())
        #: Parameter.name -> its cell path (see the module doc), only where the two differ
        self._paths = {param.name: path for path, param in network.parameters_and_names() if param.name != path}
        self._hooked_optimizer = False
        self._last_call: Optional[tuple] = None
        cells = dict(network.cells_and_names())
        unknown = [name for name in containers if name not in cells]
        if unknown:
            raise ValueError(f"containers={list(unknown)!r} is not allowed: names of cells of the network "
                             f"(e.g. {', '.join(n for n in list(cells)[1:6])})")
        self.layer_names = select_layers(cells.items(), "mindspore", containers, inner_cells)
        self.session.writer.layer_types.update({name: type(cell).__name__ for name, cell in cells.items() if name})
        containers_seen = sequential_containers(cells.items(), "mindspore", self.layer_names)
        self.session.writer.containers.update(containers_seen)
        self._hooks = [(cells[name], _make_forward_hook(self._id, name, record_inputs))
                       for name in [*self.layer_names, *containers_seen]]
        self._layer_handles: list = []
        self._base_version: Optional[tuple[int, _TaggedVersion]] = None
        #: hooks only on captured steps (see the module docstring); otherwise on from now until remove()
        self.hooks_per_step = self.session.steps is not None and ms.get_context("mode") == ms.GRAPH_MODE
        if self.hooks_per_step:
            os.environ[_HOOK_GUARD_VARIABLE] = "1"
        else:
            self._attach_hooks()
        if optimizer is not None:
            self.hook_optimizer(optimizer)

    # --- the hooks ------------------------------------------------------------------------------------------------
    def _attach_hooks(self) -> None:
        if self._layer_handles:
            return
        base = hook_handle._HOOK_VERSION
        self._layer_handles = [cell.register_forward_hook(hook) for cell, hook in self._hooks]
        if self.hooks_per_step:
            tagged = _TaggedVersion(base, self._id)
            hook_handle._HOOK_VERSION = tagged
            self._base_version = (base, tagged)

    def _detach_hooks(self) -> None:
        """Remove the layer hooks; the hook version goes back to what it was without them, unless someone else
        registered or removed a hook meanwhile (then the next call compiles a new graph, as MindSpore would)."""
        untouched = self._base_version is not None and hook_handle._HOOK_VERSION is self._base_version[1]
        for handle in self._layer_handles:
            handle.remove()
        self._layer_handles = []
        if untouched:
            hook_handle._HOOK_VERSION = self._base_version[0]
        self._base_version = None

    # --- the step ---------------------------------------------------------------------------------------------
    def begin_step(self, step: int) -> bool:
        """Start ``step``; True when it is captured (parameters are recorded now if asked). In GRAPH_MODE with
        chosen ``steps`` the layer hooks go on here for a captured step (the module docstring says what it costs)."""
        if self.hooks_per_step:
            self._detach_hooks()   # a step still open
        capturing = self.session.begin_step(step)
        self._last_call = None
        if capturing and self.hooks_per_step:
            self._attach_hooks()
        if capturing and self.record_parameters:
            for param in self._parameters:
                self.add_value(self.path_of(param.name), PARAMETER, param)
        return capturing

    def end_step(self) -> None:
        if self._layer_handles and self.hooks_per_step and self.session.capturing and self._last_call is None:
            warnings.warn(f"LayerRecorder: step {self.session.current_step} is captured but no layer output reached "
                          "the recorder: the network did not run inside the step, or this MindSpore did not "
                          "recompile the graph when the hooks went on (steps=None keeps them compiled in)",
                          RuntimeWarning, stacklevel=2)
        self.session.end_step()
        if self.hooks_per_step:
            self._detach_hooks()

    def record_gradients(self, gradients: Sequence[Any], parameters: Optional[Sequence[Any]] = None) -> None:
        """Record ``gradients`` (in the order of ``parameters``, default the network's trainable parameters)."""
        if not self.session.capturing:
            return
        parameters = self._parameters if parameters is None else list(parameters)
        if len(gradients) != len(parameters):
            raise ValueError(f"gradients: {len(gradients)} given for {len(parameters)} parameters; pass "
                             f"parameters= in the gradients' order")
        for param, grad in zip(parameters, gradients):
            self.add_value(self.path_of(param.name), PARAMETER_GRADIENT, grad)

    def path_of(self, name: str) -> str:
        """The record name of parameter ``name``: its cell path in the network (the module doc says why)."""
        return self._paths.get(name, name)

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
    def convert(value: Any) -> tuple[np.ndarray, str]:
        """(numpy array, MindSpore dtype as numpy names it); bfloat16 is cast to float32 in MindSpore first."""
        if not hasattr(value, "asnumpy"):
            array = np.asarray(value)
            return array, array.dtype.name
        if value.dtype == ms.bfloat16:
            return value.astype(ms.float32).asnumpy(), "bfloat16"
        array = value.asnumpy()
        return array, array.dtype.name

    def add_call(self, name: str, entries: list) -> None:
        last = self._last_call
        if last is not None and last[0] == name and len(last[1]) == len(entries) and all(
                a[0] == b[0] and a[2].shape == b[2].shape and np.array_equal(a[2], b[2])
                for a, b in zip(last[1], entries)):
            return  # the same call seen again (see the class docstring)
        self._last_call = (name, entries)
        super().add_call(name, entries)

    def remove(self) -> None:
        """Remove the hooks (the network then runs as if never recorded, after its next compile)."""
        self._detach_hooks()
        self.hooks_per_step = False
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
                self.add_value(self.path_of(name), PARAMETER_GRADIENT, gradient)
        self.end_step()

    def on_train_end(self, run_context) -> None:
        self.end_step()
