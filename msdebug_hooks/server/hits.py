"""Watchpoints the server set, and the hits a training reports (``WatchpointHit``) as plain objects.

A hit names the watch node that matched (its full name as the server sent it), the output slot, the watchpoint id,
an ``error_code`` (bits: 1 NaN, 2 Inf, 4 no previous value) and every parameter echoed with ``hit`` and
``actual_value``. It carries no step: the step is the one the training reports in the ``WaitCMD`` that follows.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.conditions import Condition, TensorOverflowCondition, error_list
from msdebug_hooks.server.graph import Node

__all__ = ["ServerWatchpoint", "Hit", "HitParam", "hit_from_proto"]


@dataclass(frozen=True)
class ServerWatchpoint:
    """A watchpoint of one job: ``nodes`` are what the training was told to watch."""

    id: int
    condition: Condition
    nodes: tuple[Node, ...]
    label: str = ""                  # how it was asked for, e.g. "weight_overflow"
    # the nodes as asked for (None, a pattern or category, or names): what a script's next training is given again
    # (``script_trainings.py``)
    asked_nodes: Union[None, str, tuple[str, ...]] = None

    def __str__(self) -> str:
        return f"#{self.id} {self.label or self.condition!r} on {len(self.nodes)} node(s)"


@dataclass(frozen=True)
class HitParam:
    name: str
    value: float
    hit: bool
    actual_value: float


@dataclass
class Hit:
    """One (tensor, watchpoint) pair a training reported at ``step``."""

    node: Node
    slot: int
    watchpoint: ServerWatchpoint
    error_code: int
    params: tuple[HitParam, ...]
    step: int = -1
    rank: int = 0
    job_id: int = 0

    @property
    def condition(self) -> Condition:
        return self.watchpoint.condition

    @property
    def errors(self) -> list[str]:
        """``["nan", "inf"]`` for error_code 3 (the value could not be judged), as MindInsight lists them."""
        return error_list(self.error_code)

    @property
    def actual_value(self) -> Optional[float]:
        """The statistic of the first parameter that hit (e.g. max for ``max_gt``); None without one (overflow)."""
        for param in self.params:
            if param.hit:
                return param.actual_value
        return None

    def describe(self) -> str:
        if self.error_code:
            return "error: " + ", ".join(self.errors)
        hit = [f"{p.name}: {p.actual_value:.6g} (limit {p.value:g})" for p in self.params if p.hit]
        if hit:
            return "; ".join(hit)
        return "NaN or Inf in the value" if isinstance(self.condition, TensorOverflowCondition) else "hit"


def hit_from_proto(message: pb.WatchpointHit, node: Node, watchpoint: ServerWatchpoint) -> Hit:
    slot = int(message.tensor.slot) if message.tensor.slot.isdigit() else 0
    params = tuple(HitParam(p.name, float(p.value), bool(p.hit), float(p.actual_value))
                   for p in message.watch_condition.params if not p.disabled)
    return Hit(node, slot, watchpoint, int(message.error_code), params)
