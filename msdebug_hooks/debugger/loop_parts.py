"""Find what a hand-written training loop trains, from its optimizer alone: the network and the loss cell.

A functional loop hands the debugger nothing: ``grad_fn = mindspore.value_and_grad(forward_fn, None,
optimizer.parameters, has_aux=True)`` names neither the network nor the loss. The optimizer is known (every
``nn.Optimizer`` is recorded when it is made, ``loop_hooks``); the cells are found among the live objects once, when
the debugger attaches: the network is the outermost cell holding the optimizer's parameters (a
``TrainOneStepCell`` built by hand holds the optimizer too and is preferred, then a cell that holds a loss cell, then
the one holding the most of the optimizer's parameters), and the loss cells (``nn.LossBase``) are those outside it.

``model_optimizers`` tells the optimizers of ``mindspore.train.Model`` objects apart: ``Model.train`` reaches the
debugger through its callbacks, so those optimizers never start a functional session.
"""
from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LoopParts", "find_parts", "model_optimizers"]


@dataclass
class LoopParts:
    """``network``: the cell to describe (None when no cell holds the optimizer's parameters); ``loss_cells``: loss
    cells outside it (the first is shown as the graph's loss node); ``network_has_loss``: a loss cell is inside."""

    network: Any = None
    loss_cells: list = field(default_factory=list)
    network_has_loss: bool = False

    @property
    def loss_fn(self) -> Any:
        return self.loss_cells[0] if self.loss_cells else None


def model_optimizers() -> list:
    """The optimizers held by live ``mindspore.train.Model`` objects."""
    from mindspore.train import Model

    found = []
    for obj in gc.get_objects():
        if issubclass(type(obj), Model):         # type(): isinstance on a dead weak proxy raises
            optimizer = getattr(obj, "_optimizer", None)
            if optimizer is not None:
                found.append(optimizer)
    return found


def find_parts(optimizer: Any) -> LoopParts:
    """The network and loss cells that go with ``optimizer`` (see the module docstring)."""
    from mindspore import nn

    wanted = {id(p) for p in optimizer.parameters}
    holders: list = []
    losses: list = []
    for obj in gc.get_objects():
        kind = type(obj)                         # not isinstance: that raises on a dead weak proxy
        if not issubclass(kind, nn.Cell) or issubclass(kind, nn.Optimizer):
            continue
        if issubclass(kind, nn.LossBase):
            losses.append(obj)
        elif any(id(p) in wanted for p in obj.get_parameters()) or _holds(obj, optimizer):
            holders.append(obj)
    inner = {id(child) for cell in holders for child in cell.name_cells().values()}
    outermost = [cell for cell in holders if id(cell) not in inner]
    network = max(outermost, key=lambda cell: _rank(cell, optimizer, wanted), default=None)
    if network is None:
        return LoopParts(loss_cells=losses)
    members = {id(cell) for _, cell in network.cells_and_names()}
    return LoopParts(network, [cell for cell in losses if id(cell) not in members],
                     any(id(cell) in members for cell in losses))


def _holds(cell: Any, optimizer: Any) -> bool:
    return any(child is optimizer for child in cell.name_cells().values())


def _rank(cell: Any, optimizer: Any, wanted: set) -> tuple:
    from mindspore import nn

    cells = [c for _, c in cell.cells_and_names()]
    held = sum(1 for p in cell.get_parameters() if id(p) in wanted)
    return (any(c is optimizer for c in cells), any(isinstance(c, nn.LossBase) for c in cells), held, len(cells))

