"""The watchpoints a debugger server set on this client: set / delete, what to evaluate when, and the hits.

MindSpore evaluated watchpoints at step ends and on recheck; change conditions (``needs_previous``) compare with the
value at the previous suspension point, which the tensor source keeps for watched parameters only. A hit echoes every
parameter the server sent, with ``hit`` and ``actual_value`` where evaluated (docs/debugger-protocol.md 2.2-2.4).
Capturing sources (``TensorSource.capturable``) are told which nodes are watched or viewed, so only those cost.

Why batches: a UI watchpoint watches every weight, so a step checks tens to hundreds of tensors against the same
condition list. The tensors that share one list are evaluated in one ``find_hits`` call (batched statistics, judged
as arrays; only reportable pairs become results), whose cost is about one pass over their bytes plus a constant,
instead of a constant per tensor. A step end's check also copies the watched parameters for the next step's change
conditions in that same pass (``TensorSource.keep_targets``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

import numpy as np

from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.wire import ms_graph_pb2 as graph_pb
from msdebug_hooks.conditions import Condition, ConditionResult, find_hits, should_evaluate, warm_up_statistics
from msdebug_hooks.conditions.protocol import from_protocol
from msdebug_hooks.debugger.graph import DebugGraph
from msdebug_hooks.debugger.sources import TensorSource

__all__ = ["ReceivedWatchpoint", "WatchpointTable", "prepare_engine"]


Entries = list[tuple["ReceivedWatchpoint", str]]   # (watchpoint, watch-node name) pairs that watch one tensor


@dataclass
class _Batch:
    """Tensors watched by the same watchpoints in the same order: one ``find_hits`` call evaluates them all.
    ``tensors`` holds (order of the tensor among all watched ones, tensor name, its entries)."""

    conditions: list[Condition]
    tensors: list[tuple[int, str, Entries]]
    names: list[str] = field(default_factory=list)   # the tensor names, in the order of ``tensors``


@dataclass
class ReceivedWatchpoint:
    """A watchpoint as the server set it on this client: ``nodes`` are the watch-node names a hit must echo,
    ``protocol`` the received condition, whose every parameter a hit echoes too. (Not the offline
    ``msdebug_hooks.Watchpoint`` of the dump analyzer, nor the server's ``server.hits.ServerWatchpoint``.)"""

    id: int
    condition: Condition
    nodes: tuple[str, ...]
    protocol: pb.WatchCondition

    @property
    def label(self) -> str:
        return f"watchpoint {self.id} ({condition_name(self.protocol.condition)})"


class WatchpointTable:
    """The live watchpoints of one session and what they need from the tensor source.

    Args:
        graph: the graph sent to the server (which tensors are parameters).
        source: where values come from.
        warn_once: ``(key, message)`` logger that says each key once per session.
    """

    def __init__(self, graph: DebugGraph, source: TensorSource, warn_once: Callable[[str, str], None]) -> None:
        self.graph = graph
        self.source = source
        self._warn_once = warn_once
        self.by_id: dict[int, ReceivedWatchpoint] = {}
        self.viewed: set[str] = set()              # op outputs / gradients the UI asked to see: kept every step
        self._watched: Optional[set[str]] = None   # parameters some watchpoint needs; None = recompute
        self._group_cache: dict[tuple[bool, bool], list[_Batch]] = {}

    # -- set / delete / start over ------------------------------------------------------------------------------
    def apply(self, cmd: pb.SetCMD) -> None:
        """Create, replace or delete a watchpoint. Raises ``ConfigError`` / ``ValueError`` / ``TypeError`` for a
        condition this client refuses (the table is unchanged then, except for a delete)."""
        self._changed()
        if cmd.delete:
            self.by_id.pop(cmd.id, None)
            self.update_wanted()
            return
        condition = from_protocol(cmd.watch_condition.condition, cmd.watch_condition.params)
        received = pb.WatchCondition()
        received.CopyFrom(cmd.watch_condition)
        wp = ReceivedWatchpoint(cmd.id, condition, tuple(n.node_name for n in cmd.watch_nodes), received)
        self.by_id[cmd.id] = wp
        self._report_unevaluable(wp)
        self.update_wanted()

    def clear(self) -> None:
        """A new server session (reconnect): no watchpoints, nothing viewed."""
        self.by_id.clear()
        self.viewed.clear()
        self._changed()
        self.update_wanted()

    def _changed(self) -> None:
        self._watched = None
        self._group_cache.clear()

    # -- what the source must keep ------------------------------------------------------------------------------
    def watched_parameters(self) -> set[str]:
        """Parameters whose previous-step copy a change condition may need."""
        if self._watched is None:
            self._watched = {t for wp in self.by_id.values() for n in wp.nodes
                             if (t := self.source.tensor_name(n)) is not None and t in self.graph.parameters}
        return self._watched

    def update_wanted(self) -> None:
        """Tell a capturing source which op outputs / gradients to keep: the watched ones and the viewed ones."""
        capturable = self.source.capturable
        watched = {t for wp in self.by_id.values() for n in wp.nodes
                   if (t := self.source.tensor_name(n)) is not None and t in capturable}
        self.source.want(watched | self.viewed)

    def note_viewed(self, names: Iterable[str]) -> list[str]:
        """Capturable nodes asked for but not captured in this step: keep them from the next step on. Returns the
        newly kept ones."""
        new = {n for n in names if n in self.source.capturable and n not in self.viewed}
        if new:
            self.viewed |= new
            self.update_wanted()
        return sorted(new)

    def _report_unevaluable(self, wp: ReceivedWatchpoint) -> None:
        """Say once per watchpoint, naming it, when some of its nodes have no value this client can check."""
        if not wp.nodes:
            self._warn_once(f"unevaluable-{wp.id}", f"debugger: {wp.label} watches no node (the server selected "
                                                     "none for this graph); it can never hit")
            return
        missing = [n for n in wp.nodes if self.source.tensor_name(n) is None]
        if missing:
            self._warn_once(f"unevaluable-{wp.id}", f"debugger: {wp.label}: {len(missing)} of {len(wp.nodes)} "
                                                     f"watched node(s) cannot be checked and will never hit, e.g. "
                                                     f"{missing[0][:200]!r}: {self.source.why_not(missing[0])}")

    # -- evaluation ---------------------------------------------------------------------------------------------
    def check(self, *, initial: bool, step_end: bool, keep: bool = False) -> list[pb.WatchpointHit]:
        """Evaluate every live watchpoint on every tensor it watches that the source holds, the tensors sharing a
        condition list together. Returns the hits to report (hit, or NaN/Inf/no-previous errors, as MindSpore
        reported), in the order of the tensors as the watchpoints name them.

        ``keep=True`` (a step end's check): the watched parameters' values are copied into the source's
        ``keep_targets`` buffers in the same pass that reads them, so that ``keep_previous`` at the end of the
        suspension need not read them again."""
        if not self.by_id:
            return []
        found: list[tuple[int, list[pb.WatchpointHit]]] = []
        source = self.source
        kept_parameters = self.watched_parameters() if keep else ()
        for batch in self._batches(initial, step_end):
            step_values = source.step_values(batch.names)
            if not step_values:
                continue
            indices, slots, values = zip(*step_values)
            tensors = [batch.names[index] for index in indices]
            targets = source.keep_targets(tensors, values, slots, kept_parameters) if keep else None
            hits = find_hits(batch.conditions, values, source.previous_values(tensors, slots), keep_into=targets)
            if targets is not None:
                source.kept_in_pass(tensor for tensor, target in zip(tensors, targets) if target is not None)
            per_item: dict[int, list[pb.WatchpointHit]] = {}
            for item, condition_index, result in hits:
                order, _, entries = batch.tensors[indices[item]]
                wp, node = entries[condition_index]
                per_item.setdefault(order, []).append(_hit(wp, node, result, slots[item]))
            found += per_item.items()
        found.sort(key=lambda pair: pair[0])     # stable: a tensor's slots keep their order
        return [hit for _, hits in found for hit in hits]

    def _batches(self, initial: bool, step_end: bool) -> list[_Batch]:
        """The tensors to evaluate now, grouped by the watchpoints that watch them; cached until watchpoints
        change."""
        key = (initial, step_end)
        cached = self._group_cache.get(key)
        if cached is not None:
            return cached
        by_tensor: dict[str, Entries] = {}
        for wp in self.by_id.values():
            if not should_evaluate(wp.condition, initial_suspension=initial, step_end=step_end):
                continue
            for node in wp.nodes:
                tensor = self.source.tensor_name(node)
                if tensor is not None:
                    by_tensor.setdefault(tensor, []).append((wp, node))
        batches: dict[tuple[int, ...], _Batch] = {}
        for order, (tensor, entries) in enumerate(by_tensor.items()):
            ids = tuple(wp.id for wp, _ in entries)
            batch = batches.get(ids)
            if batch is None:
                batch = batches[ids] = _Batch([wp.condition for wp, _ in entries], [])
            batch.tensors.append((order, tensor, entries))
            batch.names.append(tensor)
        result = list(batches.values())
        self._group_cache[key] = result
        return result


def prepare_engine() -> None:
    """Have the statistics engine ready before the first training step (the session calls it when it connects):
    compiling or loading its kernels happens while training waits at attach time, not in a step."""
    warm_up_statistics()


def condition_name(condition: int) -> str:
    try:
        return pb.WatchCondition.Condition.Name(condition)
    except ValueError:
        return f"condition {condition}"


def _hit(wp: ReceivedWatchpoint, node: str, result: ConditionResult, slot: str = "0") -> pb.WatchpointHit:
    """A hit echoing every parameter the server sent, with ``hit`` and ``actual_value`` where evaluated."""
    evaluated = {p.name: p for p in result.params}
    condition = pb.WatchCondition(condition=wp.protocol.condition, value=wp.protocol.value)
    for sent in wp.protocol.params:
        param = condition.params.add(name=sent.name, disabled=sent.disabled, value=sent.value)
        outcome = evaluated.get(sent.name)
        if outcome is not None:
            param.hit = bool(outcome.hit)
            if outcome.actual_value is not None and np.isfinite(outcome.actual_value):
                param.actual_value = float(outcome.actual_value)
    return pb.WatchpointHit(id=wp.id, error_code=result.error_code, watch_condition=condition,
                            tensor=graph_pb.TensorProto(node_name=node, slot=slot, finished=True))
