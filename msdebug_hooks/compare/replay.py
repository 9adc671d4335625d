"""Replay one layer: run a sub-module (PyTorch) or sub-cell (MindSpore) once on inputs taken from a capture.

When ``compare-layers`` names a diverging layer, two causes look alike: the layer computes differently, or its input
already differed. Replaying the run-under-test's layer on the *reference's* captured inputs separates them: if the
replayed output matches the reference's output, the layer itself is right and the difference was inherited.

* :func:`layer_inputs` reads the inputs of one recorded call from a capture made with ``record_inputs=True``.
* :func:`replay_layer` finds the layer by its recorded name (a ``#k`` call suffix, a ``.0`` tuple-output index or a
  ``.in0`` input suffix is stripped), runs it once in its model's framework and returns its outputs as numpy
  arrays, flattened as the recorders flatten them (``name.0``, ``name.1``, ...).

The run: float inputs are cast to the dtype of the layer's first floating parameter (the model's when the layer has
none; as given when neither has one), the layer keeps its own training/eval state. PyTorch: under
``torch.no_grad()`` on the parameters' device. MindSpore: a PyNative call of the cell (GRAPH_MODE is switched to
PyNative for the call and back). Call it outside a captured step, or the recorder records the replayed call too.
PyTorch and MindSpore are imported only when a model of theirs is replayed.
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Optional, Sequence, Union

import numpy as np

from msdebug_hooks.compare.layer_capture import FORWARD_INPUT, Capture, PathLike, flatten_tensors, read_capture
from msdebug_hooks.errors import ConfigError

PYTORCH = "pytorch"
MINDSPORE = "mindspore"
FRAMEWORKS = (PYTORCH, MINDSPORE)
_CALL = re.compile(r"(?P<base>.+?)#(?P<call>\d+)")
_SUFFIX = re.compile(r"(?P<head>.+)\.(?:in)?\d+")
_INPUT = re.compile(r"\.in(?P<index>\d+)(?P<nested>(?:\.\d+)+)?(?:#(?P<call>\d+))?")


def split_call(name: str) -> tuple[str, int]:
    """``relu#2`` -> (``relu``, 2); a name without a call suffix is call 0."""
    match = _CALL.fullmatch(name)
    return (match["base"], int(match["call"])) if match else (name, 0)


def layer_candidates(name: str) -> list[str]:
    """The layer names a record name may stand for, most specific first: ``lstm.0#1`` -> ``lstm.0``, ``lstm``
    (``.0`` may be a child's name or a tuple output's index; ``.in0`` an input's)."""
    base, _ = split_call(name)
    found = [base]
    while (match := _SUFFIX.fullmatch(found[-1])) is not None:
        found.append(match["head"])
    return found


def framework_of(model: Any) -> str:
    """``pytorch`` for a ``torch.nn.Module``, ``mindspore`` for a ``mindspore.nn.Cell`` (from the class's origin,
    so neither framework is imported to tell)."""
    for cls in type(model).__mro__:
        root = cls.__module__.partition(".")[0]
        if root == "torch":
            return PYTORCH
        if root == "mindspore":
            return MINDSPORE
    raise ConfigError("model", type(model).__name__, "a torch.nn.Module or a mindspore.nn.Cell")


def _find_layer(named: dict, layer_name: str) -> Any:
    for candidate in layer_candidates(layer_name):
        if candidate in named:
            return named[candidate]
    examples = ", ".join(name for name in list(named)[1:6] if name)
    raise ConfigError("layer_name", layer_name, f"the name of a layer of the model (e.g. {examples})")


def _first_float_dtype(*parameter_lists: Iterable[Any]) -> Optional[Any]:
    for parameters in parameter_lists:
        for param in parameters:
            if "float" in str(param.dtype).lower():
                return param.dtype
    return None


def replay_layer(model: Any, layer_name: str, inputs: Sequence[np.ndarray], *,
                 framework: Optional[str] = None) -> list[np.ndarray]:
    """Run ``model``'s layer ``layer_name`` once on ``inputs`` (positional arguments, e.g. from
    :func:`layer_inputs`) and return its outputs as numpy arrays (tuple outputs flattened; bfloat16 as float32).

    ``framework``: ``pytorch`` or ``mindspore``; default: told from ``model``'s class. ``ConfigError`` for an
    unknown layer name or framework."""
    if framework is None:
        framework = framework_of(model)
    elif framework not in FRAMEWORKS:
        raise ConfigError("framework", framework, f"one of {', '.join(FRAMEWORKS)} (or None: from the model)")
    arrays = [np.asarray(value) for value in inputs]
    run = _replay_torch if framework == PYTORCH else _replay_mindspore
    return run(model, layer_name, arrays)


def _replay_torch(model: Any, layer_name: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    from msdebug_hooks.compare.torch import TorchLayerRecorder, import_torch

    torch = import_torch()
    layer = _find_layer(dict(model.named_modules()), layer_name)
    dtype = _first_float_dtype(layer.parameters(), model.parameters())
    device = next(iter(model.parameters()), torch.empty(0)).device
    tensors = []
    for array in inputs:
        tensor = torch.from_numpy(np.array(array, copy=True)).to(device)   # a capture's arrays are read-only maps
        tensors.append(tensor.to(dtype) if dtype is not None and tensor.is_floating_point() else tensor)
    with torch.no_grad():
        output = layer(*tensors)
    return [TorchLayerRecorder.convert(value)[0] for _, value in flatten_tensors(layer_name, output)]


def _replay_mindspore(model: Any, layer_name: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    import mindspore as ms

    from msdebug_hooks.compare.mindspore_layers import LayerRecorder

    cell = _find_layer(dict(model.cells_and_names()), layer_name)
    dtype = _first_float_dtype(cell.get_parameters(), model.get_parameters())
    inputs = [np.array(array, copy=True) for array in inputs]   # a capture's arrays are read-only maps
    tensors = [ms.Tensor(array, dtype=dtype) if dtype is not None and array.dtype.kind == "f" else ms.Tensor(array)
               for array in inputs]
    mode = ms.get_context("mode")
    if mode != ms.PYNATIVE_MODE:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        output = cell(*tensors)
    finally:
        if mode != ms.PYNATIVE_MODE:
            ms.set_context(mode=mode)
    return [LayerRecorder.convert(value)[0] for _, value in flatten_tensors(layer_name, output)]


def layer_inputs(capture: Union[Capture, PathLike], step: int, layer_name: str) -> list[np.ndarray]:
    """The recorded inputs of one call of a layer (``relu#1``: the second call; an output record's name such as
    ``lstm.0`` works too), in argument order, from a capture made with ``record_inputs=True``.

    ``ConfigError`` (``CaptureError`` for an unreadable capture) when the step is not captured, the capture holds
    no inputs, or none for this layer, or an argument of the call was not a single tensor."""
    cap = capture if isinstance(capture, Capture) else read_capture(capture)
    if step not in cap.steps:
        raise ConfigError("step", step, f"a captured step of {cap.directory}: {cap.steps}")
    records = cap.step_records(step, (FORWARD_INPUT,))
    if not records:
        raise ConfigError("layer_name", layer_name, "a layer whose inputs the capture holds",
                          detail=f"step {step} of {cap.directory} has no inputs: capture with record_inputs=True")
    _, call = split_call(layer_name)
    for layer in layer_candidates(layer_name):
        found: dict[int, Any] = {}
        for record in records:
            match = _INPUT.fullmatch(record.name[len(layer):]) if record.name.startswith(f"{layer}.in") else None
            if match is None or int(match["call"] or 0) != call:
                continue
            index = int(match["index"])
            if match["nested"]:
                raise ConfigError("layer_name", layer_name, "a layer whose arguments are single tensors",
                                  detail=f"argument {index} is a tuple or list ({record.name}): replay it by hand")
            found[index] = record
        if found:
            missing = sorted(set(range(max(found) + 1)) - set(found))
            if missing:
                raise ConfigError("layer_name", layer_name, "a layer whose arguments are all tensors",
                                  detail=f"argument {missing[0]} of the call was not a tensor, so it is not "
                                         f"in the capture")
            return [cap.load(found[index]) for index in sorted(found)]
    layers = sorted({_INPUT.split(record.name)[0] for record in records})
    raise ConfigError("layer_name", layer_name, f"a layer with recorded inputs in step {step} of {cap.directory}",
                      detail=f"e.g. {', '.join(layers[:5])}")
