"""Answering a server's ``ViewCMD``: look the requested tensors up, keep a view within its byte budget, send.

The answers themselves are built by ``views`` (pure functions); this module decides which value each request gets.
A capturable node (a cell output or gradient of the light source) asked for but not captured in this step is kept
from the next step on, and the log says so.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from msdebug_hooks._log import get_logger
from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.wire import ms_graph_pb2 as graph_pb
from msdebug_hooks.debugger.sources import TensorSource
from msdebug_hooks.debugger.transport import Transport
from msdebug_hooks.debugger.transport_errors import TransportError
from msdebug_hooks.debugger.validate import RateLimitedLog
from msdebug_hooks.debugger.views import base_answer, lookup_key, stats_answer, tensor_value_answer
from msdebug_hooks.debugger.watchpoints import WatchpointTable

__all__ = ["TensorViewer"]

_LOG = get_logger("debugger")


class TensorViewer:
    """Answers view commands from ``source``; ``max_view_bytes`` of values and statistics per view (the rest is
    answered as not found and logged through ``refusals``)."""

    def __init__(self, transport: Transport, source: TensorSource, table: WatchpointTable, *, max_view_bytes: int,
                 refusals: RateLimitedLog) -> None:
        self.transport = transport
        self.source = source
        self.table = table
        self.max_view_bytes = max_view_bytes
        self._refusals = refusals

    def answer(self, cmd: pb.ViewCMD, step: int) -> int:
        """Send the answer to ``cmd`` at ``step``; returns how many requests were refused for the budget."""
        requests = list(cmd.tensors)
        values = [self._value(r, step) for r in requests]
        self._capture_viewed([lookup_key(r)[0] for r, v in zip(requests, values) if v is None])
        refused = 0
        if cmd.level != pb.ViewCMD.base:
            budget = self.max_view_bytes
            for i, value in enumerate(values):
                size = int(getattr(value, "nbytes", 0))   # a provider may hand back a plain number
                if size > budget:
                    values[i] = None
                    refused += 1
                    self._refusals.warning("view", f"debugger: a view asked for more than {self.max_view_bytes} "
                                                   f"bytes of tensors; {requests[i].node_name[:200]!r} answered "
                                                   "as not found")
                else:
                    budget -= size
        try:
            if cmd.level == pb.ViewCMD.base:
                self.transport.send_tensor_bases([base_answer(v) for v in values])
            elif cmd.level == pb.ViewCMD.statistics:
                self.transport.send_tensor_stats([stats_answer(v) for v in values])
            else:
                self.transport.send_tensor_values(tensor_value_answer(r, v) for r, v in zip(requests, values))
        except TransportError as exc:   # the UI asks again; keep obeying commands
            self._refusals.warning("view-send", f"debugger: could not send the requested tensors: {exc}")
        return refused

    def _value(self, request: graph_pb.TensorProto, step: int) -> Optional[np.ndarray]:
        """A requested tensor's value now, or (``iter="prev"``) at the last suspension point."""
        name, slot, previous = lookup_key(request)
        tensor = self.source.tensor_name(name) or name
        if previous:   # kept for watched parameters only, as MindSpore did
            return self.source.previous(tensor, slot) if step > 0 else None
        return self.source.current(tensor, slot)

    def _capture_viewed(self, names: list[str]) -> None:
        """Op outputs / gradients asked for but not captured in this step: keep them from the next step on."""
        for name in self.table.note_viewed(names):
            _LOG.info("debugger: %s is an output kept only while something needs it; it has a value from the next "
                      "step on (continue one step to see it)", name[:200])
