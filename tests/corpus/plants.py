"""How a case plants a bug in a port, in one place for every architecture.

Two kinds of plants:

* **port options**, read by an architecture's ``build_mindspore`` while it builds the port: per-layer overrides
  (``eps``, ``activation``, ``pad_mode``: ``{layer name: value}``) and network-wide options (``bn_momentum``,
  ``attention_scale``, ``dropout``, ``renamed``). Every per-layer override must be read by the builder, so a typo in
  a case's layer name fails the run instead of silently making a "bug" case clean.
* **weight plants**, applied to the PyTorch state before it is converted (a converter's mistake): ``transpose``
  (names whose value is loaded transposed), ``swap`` (pairs of names whose values are exchanged) and ``gates``
  (``{"names": [...], "order": [0, 2, 1, 3]}``: the gate blocks stacked along axis 0 of each named recurrent tensor
  put in another order, as a hand-written converter does that reorders PyTorch's LSTM gates i, f, g, o into i, g, f,
  o -- the order of MindSpore's Ascend kernel, which its CPU/GPU kernels and checkpoints do not use).
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

LAYER_OPTIONS = ("eps", "activation", "pad_mode")
NET_OPTIONS = ("bn_momentum", "attention_scale", "dropout", "renamed")
WEIGHT_PLANTS = ("transpose", "swap", "gates")
KNOWN = LAYER_OPTIONS + NET_OPTIONS + WEIGHT_PLANTS


class PortPlants:
    """The port options of one side, read by an architecture's MindSpore builder."""

    def __init__(self, plants: Mapping[str, Any]) -> None:
        unknown = sorted(set(plants) - set(KNOWN))
        if unknown:
            raise ValueError(f"plants: unknown key(s) {unknown}; known: {', '.join(KNOWN)}")
        self._plants = dict(plants)
        self._read: set = set()

    def layer(self, option: str, name: str, default: Any) -> Any:
        """The value of a per-layer ``option`` for layer ``name`` (``default`` where no case overrides it)."""
        overrides = self._plants.get(option) or {}
        if name in overrides:
            self._read.add((option, name))
            return overrides[name]
        return default

    def option(self, option: str, default: Any) -> Any:
        """A network-wide option."""
        return self._plants.get(option, default)

    def check_all_read(self) -> None:
        """Raise when a per-layer override named a layer the builder never built."""
        missed = [(option, name) for option in LAYER_OPTIONS for name in (self._plants.get(option) or {})
                  if (option, name) not in self._read]
        if missed:
            raise ValueError(f"plants name layers the port does not have: {missed}")


def plant_weights(state: Mapping[str, np.ndarray], plants: Mapping[str, Any]) -> dict:
    """``state`` (PyTorch names -> numpy arrays) with the weight plants applied: what a wrong converter loads."""
    planted = {name: np.array(value) for name, value in state.items()}
    for name in plants.get("transpose", ()):
        value = planted[name]
        if value.ndim != 2 or value.shape[0] != value.shape[1]:
            raise ValueError(f"transpose: {name} {list(value.shape)} is not a square matrix (the port would not load)")
        planted[name] = np.ascontiguousarray(value.T)
    for first, second in plants.get("swap", ()):
        if planted[first].shape != planted[second].shape:
            raise ValueError(f"swap: {first} and {second} differ in shape")
        planted[first], planted[second] = planted[second], planted[first]
    gates = plants.get("gates") or {}
    for name in gates.get("names", ()):
        planted[name] = reorder_blocks(planted[name], gates["order"])
    return planted


def reorder_blocks(value: np.ndarray, order: list) -> np.ndarray:
    """``value`` with its ``len(order)`` equal blocks along axis 0 put in ``order`` (block ``i`` of the result is
    block ``order[i]`` of ``value``)."""
    if value.shape[0] % len(order) or sorted(order) != list(range(len(order))):
        raise ValueError(f"gates: order {order} is not a permutation of the {len(order)} blocks of {list(value.shape)}")
    blocks = np.split(value, len(order), axis=0)
    return np.ascontiguousarray(np.concatenate([blocks[index] for index in order], axis=0))


def renamed(name: str, renames: tuple) -> str:
    """``name`` with every ``(reference fragment, port fragment)`` of ``renames`` applied, dotted parts only."""
    parts = name.split(".")
    rules = dict(renames)
    return ".".join(rules.get(part, part) for part in parts)


def reference_name(name: str, renames: tuple) -> str:
    """The reverse of :func:`renamed`: a port name back in the reference's words."""
    return renamed(name, tuple((port, ref) for ref, port in renames))
