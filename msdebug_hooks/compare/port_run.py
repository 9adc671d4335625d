"""One training step, the same on both sides: forward, loss, backward, a plain SGD update, each side recorded.

The port check (:mod:`msdebug_hooks.compare.port_check`) runs this on the PyTorch module and on the MindSpore cell
with the same batch, learning rate and loss. Step 1 is captured by each framework's layer recorder with the layers'
inputs (for replay), the parameters at the start of the step and the parameter gradients; the parameters and
buffers (BatchNorm running statistics) are read before and after the update. Further steps (``steps > 1``) run on
the same batch and give the loss curves only; :func:`restore_torch` / :func:`restore_mindspore` put the state of the
start of step 1 back afterwards (replay must run the layer with the weights it had in the captured step).

Losses, by name (both frameworks' own functions; ``auto`` picks one from the target):

* ``cross_entropy``: softmax cross entropy of 2-D logits against integer class labels, averaged over the batch
  (``torch.nn.functional.cross_entropy``; MindSpore's ``nn.SoftmaxCrossEntropyWithLogits(sparse=True,
  reduction="mean")``);
* ``mse``: the mean squared error against a float target of the output's shape;
* ``mean`` / ``sum``: of the (first) output, for a batch without a target;
* ``auto``: ``cross_entropy`` for integer labels and 2-D output, ``mse`` for a float target, ``mean`` without one.

A pair of callables ``(torch_loss, mindspore_loss)``, each ``loss(output, target)`` (``loss(output)`` without a
target), replaces them. The MindSpore step runs in PyNative mode (switched for the check and back), with
``mindspore.value_and_grad`` and ``nn.SGD``; PyTorch's with ``torch.optim.SGD``, ``model.train()``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

from msdebug_hooks.errors import ConfigError

LOSSES = ("auto", "cross_entropy", "mse", "mean", "sum")
LossSpec = Union[str, Sequence[Callable]]


@dataclass
class Batch:
    """The inputs (positional arguments of the model) and the target of the loss (None: a loss of the output)."""

    inputs: tuple
    target: Optional[np.ndarray] = None

    def describe(self) -> str:
        parts = [f"input {i} {a.dtype}{list(a.shape)}" for i, a in enumerate(self.inputs)]
        if self.target is not None:
            parts.append(f"target {self.target.dtype}{list(self.target.shape)}")
        return ", ".join(parts)


@dataclass
class SideRun:
    """What one side's step gave: its losses per step and its state (parameters and buffers) around update 1."""

    losses: list = field(default_factory=list)
    before: dict = field(default_factory=dict)
    after: dict = field(default_factory=dict)
    trainable: set = field(default_factory=set)


def resolve_loss(loss: LossSpec, batch: Batch) -> str:
    """The loss name ``auto`` stands for (or the name given, checked); callables pass as ``"custom"``."""
    if not isinstance(loss, str):
        if len(loss) != 2 or not all(callable(fn) for fn in loss):
            raise ConfigError("loss", loss, f"one of {', '.join(LOSSES)} or a pair (torch_loss, mindspore_loss) "
                              f"of callables")
        return "custom"
    if loss not in LOSSES:
        raise ConfigError("loss", loss, f"one of {', '.join(LOSSES)} or a pair (torch_loss, mindspore_loss)")
    target = batch.target
    if loss == "auto":
        if target is None:
            return "mean"
        return "cross_entropy" if target.dtype.kind in "iu" else "mse"
    if loss in ("cross_entropy", "mse") and target is None:
        raise ConfigError("loss", loss, "a batch with a target for this loss (or loss='mean' / 'sum')")
    if loss == "cross_entropy" and target.dtype.kind not in "iu":
        raise ConfigError("loss", loss, "integer class labels as the target", detail=f"the target is {target.dtype}")
    return loss


def _check_logits(loss: str, ndim: int) -> None:
    if loss == "cross_entropy" and ndim != 2:
        raise ConfigError("loss", loss, "2-D logits [batch, classes] for cross_entropy (or pass a loss of your own)",
                          detail=f"the model's output has {ndim} dimensions")


def _first(output: Any) -> Any:
    return output[0] if isinstance(output, (tuple, list)) else output


def _float_dtype(parameters: Any) -> Any:
    for param in parameters:
        if "float" in str(param.dtype).lower():
            return param.dtype
    return None


# --- PyTorch ----------------------------------------------------------------------------------------------------
def _torch_loss(name: str, custom: Optional[Callable]) -> Callable:
    import torch.nn.functional as F

    if custom is not None:
        return custom
    return {"cross_entropy": lambda out, y: F.cross_entropy(out, y.long()),
            "mse": lambda out, y: F.mse_loss(out, y.to(out.dtype)),
            "mean": lambda out, y=None: out.float().mean(), "sum": lambda out, y=None: out.float().sum()}[name]


def _torch_state(module: Any) -> dict:
    """``{name: numpy array}`` of the state dict (bfloat16 as float32; other dtypes as they are)."""
    import torch

    return {name: (value.detach().cpu().float() if value.dtype == torch.bfloat16 else value.detach().cpu())
            .numpy().copy() for name, value in module.state_dict().items()}


def restore_torch(module: Any, state: dict) -> None:
    """Put ``state`` (from :func:`_torch_state`) back into ``module``, in its own dtypes."""
    import torch

    current = module.state_dict()
    module.load_state_dict({name: torch.from_numpy(value).to(current[name].dtype) for name, value in state.items()})


def restore_mindspore(cell: Any, state: dict) -> None:
    """Put ``state`` (from :func:`_mindspore_state`) back into ``cell``'s parameters, in their dtypes."""
    import mindspore as ms

    for param in cell.get_parameters():
        if param.name in state:
            param.set_data(ms.Tensor(state[param.name], dtype=param.dtype))


def torch_inputs(module: Any, batch: Batch) -> list:
    """The batch's inputs as tensors on the module's device, floats in its parameters' dtype."""
    import torch

    dtype = _float_dtype(module.parameters())
    device = next(iter(module.parameters()), torch.empty(0)).device
    tensors = []
    for array in batch.inputs:
        tensor = torch.from_numpy(np.ascontiguousarray(array)).to(device)
        tensors.append(tensor.to(dtype) if dtype is not None and tensor.is_floating_point() else tensor)
    return tensors


def run_torch(module: Any, batch: Batch, loss: str, lr: float, steps: int, capture: Path,
              custom: Optional[Callable] = None, set_modes: Optional[Callable] = None) -> SideRun:
    """PyTorch's side: ``steps`` SGD steps on ``batch``, step 1 recorded into ``capture``; ``set_modes`` runs
    after ``module.train()`` (layers that must run in eval mode)."""
    import torch

    from msdebug_hooks.compare.torch import TorchLayerRecorder

    tensors = torch_inputs(module, batch)
    device = next(iter(module.parameters()), torch.empty(0)).device
    target = None if batch.target is None else torch.from_numpy(np.ascontiguousarray(batch.target)).to(device)
    loss_fn = _torch_loss(loss, custom)
    recorder = TorchLayerRecorder(module, capture, steps=[1], record_inputs=True, record_parameters=True)
    optimizer = torch.optim.SGD([p for p in module.parameters() if p.requires_grad], lr=lr)
    run = SideRun(trainable={name for name, p in module.named_parameters() if p.requires_grad})
    module.train()
    if set_modes is not None:
        set_modes()
    try:
        for step in range(1, steps + 1):
            optimizer.zero_grad()
            if step == 1:
                run.before = _torch_state(module)  # before the forward: BatchNorm updates its statistics there
            with recorder.step(step):
                output = _first(module(*tensors))
                _check_logits(loss, output.ndim)
                value = loss_fn(output) if target is None else loss_fn(output, target)
                value.backward()
            optimizer.step()
            if step == 1:
                run.after = _torch_state(module)
            run.losses.append(float(value.detach()))
    finally:
        recorder.remove()
    return run


# --- MindSpore --------------------------------------------------------------------------------------------------
def _mindspore_loss(name: str, custom: Optional[Callable]) -> Callable:
    from mindspore import nn

    if custom is not None:
        return custom
    if name == "cross_entropy":
        cross_entropy = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        return lambda out, y: cross_entropy(out, y)
    if name == "mse":
        mse = nn.MSELoss()
        return lambda out, y: mse(out, y.astype(out.dtype))
    return {"mean": lambda out, y=None: out.mean(), "sum": lambda out, y=None: out.sum()}[name]


def _mindspore_state(cell: Any) -> dict:
    return {param.name: param.asnumpy().copy() for param in cell.get_parameters()}


def mindspore_inputs(cell: Any, batch: Batch) -> list:
    """The batch's inputs as MindSpore tensors, floats in the cell's parameters' dtype."""
    import mindspore as ms

    dtype = _float_dtype(cell.get_parameters())
    return [ms.Tensor(array, dtype=dtype) if dtype is not None and array.dtype.kind == "f" else ms.Tensor(array)
            for array in batch.inputs]


def run_mindspore(cell: Any, batch: Batch, loss: str, lr: float, steps: int, capture: Path,
                  custom: Optional[Callable] = None, set_modes: Optional[Callable] = None) -> SideRun:
    """MindSpore's side: ``steps`` SGD steps on ``batch`` in PyNative mode, step 1 recorded into ``capture``;
    ``set_modes`` runs after ``cell.set_train(True)``."""
    import mindspore as ms
    from mindspore import nn

    from msdebug_hooks.compare.mindspore_layers import LayerRecorder

    mode = ms.get_context("mode")
    if mode != ms.PYNATIVE_MODE:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        tensors = mindspore_inputs(cell, batch)
        target = batch.target
        if target is not None:
            target = ms.Tensor(target.astype(np.int32) if target.dtype.kind in "iu" and loss == "cross_entropy"
                               else target)
        loss_fn = _mindspore_loss(loss, custom)
        recorder = LayerRecorder(cell, capture, steps=[1], record_inputs=True, record_parameters=True)
        optimizer = nn.SGD(cell.trainable_params(), learning_rate=lr)

        def forward(*args):
            output = _first(cell(*args))
            _check_logits(loss, output.ndim)
            return loss_fn(output) if target is None else loss_fn(output, target)

        grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
        run = SideRun(trainable={param.name for param in cell.trainable_params()})
        cell.set_train(True)
        if set_modes is not None:
            set_modes()
        try:
            for step in range(1, steps + 1):
                if step == 1:
                    run.before = _mindspore_state(cell)
                with recorder.step(step):
                    value, grads = grad_fn(*tensors)
                    recorder.record_gradients(grads, optimizer.parameters)
                optimizer(grads)
                if step == 1:
                    run.after = _mindspore_state(cell)
                run.losses.append(float(value.asnumpy()))
        finally:
            recorder.remove()
        return run
    finally:
        if mode != ms.PYNATIVE_MODE:
            ms.set_context(mode=mode)

