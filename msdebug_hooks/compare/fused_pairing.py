"""One tensor holding the tensors of several sibling layers of the other model, concatenated along one axis: timm's
fused ``qkv`` Linear (``[3C, C]``, bias ``[3C]``) against a port's three Dense layers ``q``, ``k``, ``v``
(``[C, C]``, ``[C]`` each), or the reverse (one fused port tensor against split reference tensors).

The rule, by structure and shapes alone (no names), for tensors the structure pairing left over on both sides:

* a **group** is k >= 2 left-over tensors of one side that sit in sibling layers: the same parent module, the same
  layer class, the same attribute inside the layer (``weight`` with ``weight``), in creation order;
* its **fused partner** is one left-over tensor of the other side whose shape equals each part's on every axis but
  one, where its size is the sum of the parts' sizes (the axis must be unique);
* among several such tensors the one nearest the partners of the group's parent wins (the most leading path parts
  shared with a partner of a tensor already paired under that parent: ``blocks.0.attn.proj`` pairs
  ``layers.0.attn.proj``, so ``blocks.0.attn.q``, ``k``, ``v`` take ``layers.0.attn.qkv``, not
  ``layers.1.attn.qkv``), then the same attribute (``weight``/``bias``), then creation order.

Each such pair is said in the report, naming both sides and the axis; the copy splits the fused values into the
parts (or concatenates the parts into the fused tensor), and the layer comparison splits the fused layer's records
along the axis its outputs concatenate on (:mod:`.fused_records`). Nothing else is split: a group whose parts do not
add up to a left-over tensor stays unpaired and the error line says what is left on each side.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

import numpy as np

from msdebug_hooks.compare.layouts import pytorch_style_name


@dataclass(frozen=True)
class FusedPair:
    """k MindSpore tensors split from one PyTorch tensor, or one MindSpore tensor concatenated from k PyTorch ones."""

    mindspore: tuple     # MindSpore parameter names (k parts in order, or the one fused tensor)
    torch: tuple         # PyTorch names (the one fused tensor, or k parts in order)
    axis: int            # the axis the parts are concatenated along
    sizes: tuple         # each part's size along ``axis``
    fused_shape: tuple
    ms_layers: tuple     # the MindSpore layers holding ``mindspore`` (cell paths), same order
    torch_layers: tuple  # the PyTorch modules holding ``torch``

    @property
    def split_reference(self) -> bool:
        """True: the PyTorch tensor is the fused one (the port splits it); False: the port's is."""
        return len(self.torch) == 1

    def bounds(self) -> list:
        """``[(start, stop)]`` of each part along the axis."""
        stops = np.cumsum(self.sizes).tolist()
        return [(stop - size, stop) for size, stop in zip(self.sizes, stops)]

    def describe(self) -> str:
        parts, whole = (self.mindspore, self.torch[0]) if self.split_reference else (self.torch, self.mindspore[0])
        side = "MindSpore" if self.split_reference else "PyTorch"
        verb = "split from PyTorch's" if self.split_reference else "concatenated into MindSpore's"
        return (f"{side} {', '.join(parts)} {verb} {whole} {list(self.fused_shape)} along axis {self.axis} "
                f"({' + '.join(str(s) for s in self.sizes)})")

    def reference_names(self) -> list:
        """How each MindSpore tensor's PyTorch values are named in reports: ``attn.qkv.weight[0:96]`` (a slice of
        the fused tensor), or ``q.weight+k.weight+v.weight`` (the parts concatenated)."""
        if self.split_reference:
            return [f"{self.torch[0]}[{start}:{stop}]" for start, stop in self.bounds()]
        return ["+".join(self.torch)]

    def mindspore_values(self, torch_values: Mapping[str, Any]) -> dict:
        """``{MindSpore name: array}`` from PyTorch's values (``torch_values``: PyTorch name -> array)."""
        if self.split_reference:
            whole = np.asarray(torch_values[self.torch[0]])
            return {name: whole[_slice(self.axis, start, stop, whole.ndim)]
                    for name, (start, stop) in zip(self.mindspore, self.bounds())}
        return {self.mindspore[0]: np.concatenate([np.asarray(torch_values[name]) for name in self.torch],
                                                  axis=self.axis)}


def _slice(axis: int, start: int, stop: int, ndim: int) -> tuple:
    return tuple(slice(start, stop) if k == axis else slice(None) for k in range(ndim))


@dataclass(frozen=True)
class Tensor:
    """A left-over tensor: its name, its path in the model, the class of the layer holding it, its shape."""

    name: str
    path: str
    kind: str
    shape: tuple

    @property
    def layer(self) -> str:
        return self.path.rpartition(".")[0]

    @property
    def parent(self) -> str:
        return self.layer.rpartition(".")[0]

    @property
    def role(self) -> str:
        return pytorch_style_name(self.path).rpartition(".")[2]


def concat_axis(parts: list, whole: tuple) -> Optional[int]:
    """The one axis along which shapes ``parts`` concatenate into ``whole`` (every other axis equal), else None."""
    if len(parts) < 2 or any(len(part) != len(whole) for part in parts):
        return None
    axes = [axis for axis in range(len(whole))
            if sum(part[axis] for part in parts) == whole[axis]
            and all(part[k] == whole[k] for part in parts for k in range(len(whole)) if k != axis)]
    return axes[0] if len(axes) == 1 else None


def _groups(tensors: Iterable[Tensor]) -> list:
    """Sibling groups: k >= 2 tensors under one parent, in layers of one class, with one attribute, one per layer."""
    groups: dict = {}
    for tensor in tensors:
        groups.setdefault((tensor.parent, tensor.kind, tensor.path.rpartition(".")[2]), []).append(tensor)
    return [group for group in groups.values() if len(group) >= 2 and len({t.layer for t in group}) == len(group)]


def _closeness(path: str, parent: str, partner_paths: Mapping[str, str]) -> int:
    """How near ``path`` (a tensor of the other side) lies to the partners of ``parent``'s paired tensors: the most
    leading path parts it shares with one of them (0 when ``parent`` has none paired)."""
    parts = path.split(".")
    best = 0
    for own, partner in partner_paths.items():
        if own.startswith(f"{parent}."):
            other = partner.split(".")
            best = max(best, next((k for k, (x, y) in enumerate(zip(parts, other)) if x != y),
                                  min(len(parts), len(other))))
    return best


def find_fused(ms_left: list, torch_left: list, ms_to_torch: Mapping[str, str]) -> list:
    """The fused pairs among the left-over tensors (``Tensor`` lists in creation order); ``ms_to_torch``: the pairs
    made so far, MindSpore path -> PyTorch path (they tell which module partners which)."""
    torch_to_ms = {torch: ms for ms, torch in ms_to_torch.items()}
    found, used = [], set()
    for parts_side, wholes, partners, ms_parts in ((ms_left, torch_left, ms_to_torch, True),
                                                   (torch_left, ms_left, torch_to_ms, False)):
        for group in _groups(t for t in parts_side if t.name not in used):
            fits = [(index, whole, concat_axis([t.shape for t in group], whole.shape))
                    for index, whole in enumerate(wholes) if whole.name not in used]
            fits = [fit for fit in fits if fit[2] is not None]
            if not fits:
                continue
            index, whole, axis = max(fits, key=lambda fit: (
                _closeness(fit[1].path, group[0].parent, partners), fit[1].role == group[0].role, -fit[0]))
            parts = tuple(t.name for t in group)
            layers = tuple(t.layer for t in group)
            sizes = tuple(t.shape[axis] for t in group)
            found.append(FusedPair(parts, (whole.name,), axis, sizes, whole.shape, layers, (whole.layer,))
                         if ms_parts else
                         FusedPair((whole.name,), parts, axis, sizes, whole.shape, (whole.layer,), layers))
            used.update(parts + (whole.name,))
    return found


def fused_for(cell: Any, ms_names: list, state: Mapping[str, Any], torch_names: list, torch_module: Any,
              pairs: Mapping[str, str]) -> list:
    """:func:`find_fused` on a MindSpore cell and a PyTorch state dict: ``ms_names`` / ``torch_names`` are the
    tensors left over, ``pairs`` the MindSpore name -> PyTorch name pairs made so far."""
    cells = dict(cell.cells_and_names())
    params = [(path, param) for path, param in cell.parameters_and_names()]
    ms_paths = {param.name: path for path, param in params}
    wanted = set(ms_names)
    ms_left = [Tensor(param.name, path, type(cells.get(path.rpartition(".")[0])).__name__, tuple(param.shape))
               for path, param in params if param.name in wanted]
    modules = dict(torch_module.named_modules()) if torch_module is not None else {}
    wanted = set(torch_names)
    torch_left = [Tensor(name, name, type(modules[name.rpartition(".")[0]]).__name__
                         if name.rpartition(".")[0] in modules else "", tuple(np.shape(value)))
                  for name, value in state.items() if name in wanted]
    return find_fused(ms_left, torch_left, {ms_paths.get(ms, ms): torch for ms, torch in pairs.items()})
