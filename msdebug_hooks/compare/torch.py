"""The PyTorch side of a precision comparison: ``TorchLayerRecorder`` writes the same layer-capture format as the
MindSpore ``LayerRecorder``, so ``msdebug compare-layers`` can put the two side by side.

PyTorch is imported when a recorder is created, not when this module is imported (``pip install
"msdebug-hooks[torch]"``)::

    recorder = TorchLayerRecorder(model, "capture_torch", steps=[3])
    for step, (x, y) in enumerate(batches, start=1):
        with recorder.step(step):          # forward outputs of every leaf module, as they run
            loss = loss_fn(model(x), y)
            loss.backward()                # parameter gradients are read when the block ends
        optimizer.step(); optimizer.zero_grad()
"""
from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence

import numpy as np

from msdebug_hooks.compare.layer_capture import PARAMETER, PARAMETER_GRADIENT, FrameworkRecorder, PathLike, StepRecorder
from msdebug_hooks.compare.layer_selection import select_layers
from msdebug_hooks.errors import MissingExtraError

TORCH_EXTRA_HINT = 'PyTorch is not installed: pip install "msdebug-hooks[torch]"'
_NUMPY_FLOATS = ("float16", "float32", "float64")


def import_torch():
    """``torch``, or ``MissingExtraError`` (an ``ImportError``) naming the extra to install."""
    try:
        import torch
    except ImportError as exc:
        raise MissingExtraError(TORCH_EXTRA_HINT) from exc
    return torch


class TorchLayerRecorder(FrameworkRecorder):
    """Record the forward outputs, parameter gradients (and optionally parameters) of ``module``'s layers for the
    steps in ``steps`` (``None``: every step) into a layer-capture directory.

    Leaf modules are recorded, plus the container modules named in ``containers``; ``nn.MultiheadAttention`` is
    recorded as one layer (its ``out_proj`` is never called; ``inner_cells=True`` hooks it anyway). A module called
    twice in a step gives ``name`` and ``name#1``; tuple outputs ``name.0``, ``name.1``. Gradients are read from
    ``param.grad`` at the end of a captured step (``record_gradients=False`` to skip); parameters at its start when
    ``record_parameters`` is set; each call's tensor inputs (``name.in0``, ...) before its output when
    ``record_inputs`` is set. bfloat16 tensors (``torch.autocast``) are written as float32, exactly, with
    ``source_dtype`` ``bfloat16``.
    """

    def __init__(self, module: Any, directory: PathLike, *, steps: Optional[Iterable[int]] = None,
                 containers: Sequence[str] = (), record_gradients: bool = True,
                 record_parameters: bool = False, record_inputs: bool = False, inner_cells: bool = False) -> None:
        import_torch()
        self.module = module
        self.session = StepRecorder(directory, "pytorch", steps)
        self.record_gradients_at_end = record_gradients
        self.record_parameters = record_parameters
        self.record_inputs = record_inputs
        modules = dict(module.named_modules())
        unknown = [name for name in containers if name not in modules]
        if unknown:
            raise ValueError(f"containers={list(unknown)!r} is not allowed: names of modules of the model "
                             f"(e.g. {', '.join(n for n in list(modules)[1:6])})")
        self.layer_names = select_layers(modules.items(), "pytorch", containers, inner_cells)
        self.session.writer.layer_types.update({name: type(sub).__name__ for name, sub in modules.items() if name})
        self._pending: dict = {}   # layer name -> the inputs copied as each call began (a stack: calls nest)
        self._handles = []
        for name in self.layer_names:
            if record_inputs:
                self._handles.append(modules[name].register_forward_pre_hook(self._pre_hook_for(name)))
            self._handles.append(modules[name].register_forward_hook(self._hook_for(name)))

    def _pre_hook_for(self, name: str):
        """Copy the inputs before the layer runs: an in-place layer (``nn.ReLU(inplace=True)``, a forward that does
        ``x += ...``) overwrites them, and the forward hook would record its output as its input."""
        def pre_hook(_module, inputs):
            if self.session.capturing:
                self._pending.setdefault(name, []).append(copied_tensors(inputs))
        return pre_hook

    def _hook_for(self, name: str):
        def forward_hook(_module, inputs, output):
            if self.session.capturing:
                stack = self._pending.get(name)
                self.record_call(name, stack.pop() if stack else inputs, output)
        return forward_hook

    @staticmethod
    def convert(value: Any) -> tuple[np.ndarray, str]:
        """(numpy array, torch dtype name); floats numpy lacks (bfloat16, float8) become float32, exactly."""
        if not hasattr(value, "detach"):
            array = np.asarray(value)
            return array, array.dtype.name
        tensor = value.detach()
        source_dtype = str(tensor.dtype).rpartition(".")[2]
        if tensor.is_floating_point() and source_dtype not in _NUMPY_FLOATS:
            tensor = tensor.float()
        return tensor.to("cpu").numpy(), source_dtype

    def begin_step(self, step: int) -> bool:
        capturing = self.session.begin_step(step)
        if capturing and self.record_parameters:
            for name, param in self.module.named_parameters():
                self.add_value(name, PARAMETER, param)
        return capturing

    def end_step(self) -> None:
        if self.session.capturing and self.record_gradients_at_end:
            for name, param in self.module.named_parameters():
                if param.grad is not None:
                    self.add_value(name, PARAMETER_GRADIENT, param.grad)
        self._pending.clear()   # a call that raised left its inputs
        self.session.end_step()

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


def copied_tensors(value: Any) -> Any:
    """``value`` with every tensor in it (tuples and lists followed) detached and copied."""
    if hasattr(value, "detach") and hasattr(value, "clone"):
        return value.detach().clone()
    if isinstance(value, (tuple, list)):
        items = [copied_tensors(item) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    return value


LayerRecorder = TorchLayerRecorder


def load_state_dict(path: PathLike) -> dict:
    """The tensors of a ``.pth``/``.pt`` file as ``{name: numpy array}``.

    Accepts a state dict or a training checkpoint holding one under ``state_dict``, ``model_state_dict`` or
    ``model``. Loads with ``weights_only=True``, so no code from the file runs; a whole pickled module is refused
    (save its ``state_dict()`` instead). Raises ``ImportError`` naming the extra when PyTorch is missing.
    """
    import re
    from pathlib import Path

    from msdebug_hooks.errors import ConfigError

    torch = import_torch()
    target = Path(path).expanduser()
    if not target.is_file():
        raise FileNotFoundError(f"checkpoint={str(path)!r} does not exist")
    try:
        loaded = torch.load(str(target), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many types for a bad file; all are "not readable"
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))  # torch colours its messages
        if "Weights only load failed" in text:
            detail = "it holds pickled Python objects (e.g. a whole module): save model.state_dict() instead"
        elif isinstance(exc, EOFError):
            detail = "the file is empty or cut short"
        else:
            detail = (text.splitlines() or [type(exc).__name__])[0][:200]
        raise ConfigError("checkpoint", str(path), "a PyTorch .pth file torch.load can read (weights only)",
                          detail=detail) from None
    if isinstance(loaded, dict):
        for key in ("state_dict", "model_state_dict", "model"):
            if isinstance(loaded.get(key), dict):
                loaded = loaded[key]
                break
    if not isinstance(loaded, dict):
        raise ConfigError("checkpoint", str(path), "a PyTorch state dict (name -> tensor)",
                          detail=f"it holds a {type(loaded).__name__}")
    arrays = {}
    for name, value in loaded.items():
        if hasattr(value, "detach"):
            value = value.detach().cpu()
            if str(value.dtype) == "torch.bfloat16":
                value = value.float()
            arrays[str(name)] = value.numpy()
    if not arrays:
        raise ConfigError("checkpoint", str(path), "a PyTorch state dict holding tensors", detail="no tensors in it")
    return arrays
