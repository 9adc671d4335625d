"""What the debugger session asks of a tensor source: the tensor behind a node, its slots, its current and previous
value.

Two sources implement it: the light one (``tensors.NetworkTensors``: parameters, the loss, the batch and, in
PyNative mode, captured cell outputs and gradients) and the dump one (``dump_source.DumpTensorSource``: every
operator's outputs, every slot). A plain function ``name -> array | None`` (handy in tests and benchmarks) becomes a
light source over the graph's parameters and loss through ``as_source``.

Values are read lazily, at most once per suspension point (``current`` caches them until ``forget_current``).
Previous-step copies are kept only for the tensors the session names in ``keep_previous`` (the watched parameters,
as MindSpore did), on output slot 0 only. Each such tensor has two buffers that take turns: one holds the value at
the last suspension point (``previous``), the other receives the current value during the step end's check, which
copies a tensor while it reads it (``keep_targets``, ``find_hits(keep_into=...)``): a watched parameter is read once
per step and copied in the same pass. The previous value stays intact until the suspension ends, so a recheck in
the suspension still compares with the last step; ``keep_previous`` then swaps the buffers of the tensors kept in
the pass (parameters cannot change while training is suspended) and copies the others (e.g. tensors a watchpoint
set during the suspension watches, or the initial suspension's). The buffers are allocated once and reused.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, Collection, Iterable, Optional, Sequence, Union

import numpy as np

from msdebug_hooks.debugger.graph import DebugGraph

__all__ = ["TensorSource", "GraphTensorSource", "ValuesByName", "TensorProvider", "as_source"]

TensorProvider = Callable[[str], Optional[np.ndarray]]


class TensorSource(ABC):
    """Tensor values for the debugger session; subclasses say which nodes have a value and read it."""

    #: op nodes whose value exists only while a step runs: they must be ``want``-ed before a step to be read after
    capturable: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self._current: dict[str, Optional[np.ndarray]] = {}
        self._previous: dict[str, np.ndarray] = {}
        self._spare: dict[str, np.ndarray] = {}   # the other buffer of each kept tensor: next step's previous value
        self._kept_now: set[str] = set()          # tensors whose spare buffer holds their value at this point

    # -- what a source says about itself ------------------------------------------------------------------------
    @abstractmethod
    def tensor_name(self, node_name: str) -> Optional[str]:
        """The tensor behind a watch-node / requested node name, or None when this source has no value for it."""

    @abstractmethod
    def read(self, tensor: str, slot: str) -> Optional[np.ndarray]:
        """The value of ``tensor``'s output ``slot`` now (uncached), or None."""

    def slots(self, tensor: str) -> tuple[str, ...]:
        """The output slots of ``tensor`` that can have a value."""
        return ("0",)

    def why_not(self, node_name: str) -> str:
        """Why a watched node has no value here (for the session's one warning per watchpoint)."""
        return "this client holds no value for it"

    def want(self, names: Iterable[str]) -> None:
        """Keep exactly these capturable nodes from the next step on (a source that captures nothing ignores it)."""
        return None

    # -- values, as the session asks for them -------------------------------------------------------------------
    def current(self, tensor: str, slot: str = "0") -> Optional[np.ndarray]:
        """The value at this suspension point, read once."""
        key = tensor if slot == "0" else f"{tensor}:{slot}"
        if key not in self._current:
            self._current[key] = self.read(tensor, slot)
        return self._current[key]

    def step_values(self, tensors: Sequence[str]) -> list[tuple[int, str, np.ndarray]]:
        """(index in ``tensors``, slot, value) of every slot of ``tensors`` that has a value at this suspension
        point, in order: ``current`` for each slot (a source may read them in bulk, as the light one does
        parameters)."""
        found = []
        for index, tensor in enumerate(tensors):
            for slot in self.slots(tensor):
                value = self.current(tensor, slot)
                if value is not None:
                    found.append((index, slot, value))
        return found

    def previous(self, tensor: str, slot: str = "0") -> Optional[np.ndarray]:
        """The value at the last suspension point, for the tensors named in ``keep_previous``."""
        return self._previous.get(tensor) if slot == "0" else None

    def previous_values(self, tensors: Sequence[str], slots: Sequence[str]) -> list[Optional[np.ndarray]]:
        """``previous`` of each (tensor, slot) pair, in one pass (a step's check asks for hundreds)."""
        found = list(map(self._previous.get, tensors))
        if any(slot != "0" for slot in slots):
            found = [value if slot == "0" else None for value, slot in zip(found, slots)]
        return found

    def keep_targets(self, tensors: Sequence[str], values: Sequence[Any], slots: Sequence[str],
                     kept: Collection[str]) -> Optional[list[Optional[np.ndarray]]]:
        """Buffers for a check to copy each value (the tensor's current value) into while it reads it: an entry
        for each tensor in ``kept`` whose value is an array, on slot 0 (other slots have no previous value), else
        None; None instead of a list without a buffer. A buffer becomes the previous value when the suspension
        ends, once ``kept_in_pass`` names the tensor."""
        targets: list[Optional[np.ndarray]] = []
        spare = self._spare
        for tensor, value, slot, buffer in zip(tensors, values, slots, map(spare.get, tensors)):
            if slot != "0" or tensor not in kept or not isinstance(value, np.ndarray):
                targets.append(None)
                continue
            if buffer is None or buffer.shape != value.shape or buffer.dtype != value.dtype:
                buffer = spare[tensor] = np.empty(value.shape, value.dtype)
            targets.append(buffer)
        return targets if any(target is not None for target in targets) else None

    def kept_in_pass(self, tensors: Iterable[str]) -> None:
        """These tensors' ``keep_targets`` buffers now hold their current values (the check copied them)."""
        self._kept_now.update(tensors)

    def keep_previous(self, tensors: Iterable[str]) -> None:
        """A suspension ends: these tensors' current values become the previous-step values (the buffers filled
        by this step's check are taken as they are, the others copied), the rest are forgotten."""
        kept: dict[str, np.ndarray] = {}
        for name in tensors:
            value = self.current(name)
            if value is None:
                continue
            buffer = self._spare.pop(name, None)
            if name not in self._kept_now or buffer is None:
                value = np.asarray(value)
                if buffer is None or buffer.shape != value.shape or buffer.dtype != value.dtype:
                    buffer = np.empty(value.shape, value.dtype)
                np.copyto(buffer, value)
            kept[name] = buffer
        # last step's buffers of the tensors still kept receive the next step's values
        self._spare = {name: old for name, old in self._previous.items() if name in kept}
        self._previous = kept
        self._kept_now.clear()
        self._current.clear()

    def forget_current(self) -> None:
        """The values read so far are stale (a step ran, or a view must read again)."""
        self._current.clear()
        self._kept_now.clear()

    def start_over(self) -> None:
        """A new session, or the session starts over (a reconnect): no values held, no previous-step copies."""
        self._previous = {}
        self._spare = {}
        self._kept_now.clear()
        self._current.clear()


class GraphTensorSource(TensorSource):
    """A light source over a ``DebugGraph``: parameters by their bare name, the loss node by its full name, and
    whatever else ``holds`` says has a value (by full name); output slot 0 only."""

    def __init__(self, graph: DebugGraph) -> None:
        super().__init__()
        self.graph = graph

    def holds(self, name: str) -> bool:
        """Whether a node other than a readable parameter or the loss has a value (none, for this base)."""
        return False

    @abstractmethod
    def value_of(self, name: str) -> Optional[np.ndarray]:
        """The value of a known tensor (a bare parameter name, or a full node name)."""

    def tensor_name(self, node_name: str) -> Optional[str]:
        """Parameters by their last name component (MindInsight may group them under ``Parameter[N]_k/``), the
        loss and held nodes by their full name."""
        last = node_name.rsplit("/", 1)[-1]
        param = self.graph.parameters.get(last)
        if param is not None and (param.source is not None or self.holds(last)):
            return last
        if node_name == self.graph.loss_node or self.holds(node_name):
            return node_name
        return None

    def read(self, tensor: str, slot: str) -> Optional[np.ndarray]:
        if slot != "0":
            return None
        known = tensor in self.graph.parameters or tensor == self.graph.loss_node or self.holds(tensor)
        return self.value_of(tensor) if known else None


class ValuesByName(GraphTensorSource):
    """A plain function ``name -> array | None`` as a light source (parameters and the loss of ``graph``)."""

    def __init__(self, graph: DebugGraph, values: TensorProvider) -> None:
        super().__init__(graph)
        self.values = values

    def value_of(self, name: str) -> Optional[np.ndarray]:
        return self.values(name)


def as_source(graph: DebugGraph, provider: Union[TensorSource, TensorProvider]) -> TensorSource:
    """``provider`` itself when it is a ``TensorSource``, else the function wrapped in ``ValuesByName``."""
    return provider if isinstance(provider, TensorSource) else ValuesByName(graph, provider)
