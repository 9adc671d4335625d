"""Check every server reply before the session obeys it: a broken or hostile server is refused, never obeyed.

The server is trusted to drive the debugger (pause, step, watchpoints, views), not to harm training. So a reply is
checked against the protocol (docs/debugger-protocol.md 1.4-1.7) and against limits that keep our work
bounded, before any handler sees it: unknown status or run level, out-of-range ids and step counts, non-finite or
too many condition parameters, absurd numbers or lengths of names. Whether a condition id and its parameter names
exist is checked when the watchpoint is built (``conditions.protocol.from_protocol``); whether a view's total
answer fits ``max_view_bytes`` is checked by ``viewing.TensorViewer`` once it knows the tensors' sizes.

``check_reply`` returns None for an acceptable reply or a short reason; ``RateLimitedLog`` keeps a flood of refused
replies from flooding the training log.
"""
from __future__ import annotations

import logging
import math
import time
from typing import Optional

from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.wire.protocol import PREVIOUS_STEP, RUN_LEVELS, STATUSES, VIEW_LEVELS

__all__ = ["check_reply", "RateLimitedLog", "MAX_VIEW_TENSORS", "MAX_WATCH_NODES", "MAX_NAME_CHARS",
           "MAX_CONDITION_PARAMS", "MAX_VIEW_BYTES"]

MAX_VIEW_TENSORS = 10_000        # MindInsight asks for one tensor, or a node's inputs and outputs (tens)
MAX_WATCH_NODES = 200_000        # leaf nodes of a big network
MAX_NAME_CHARS = 4096
MAX_CONDITION_PARAMS = 32        # the largest condition has 6
MAX_INT32 = 2 ** 31 - 1
MAX_VIEW_BYTES = 1024 ** 3       # MindInsight drops a single tensor of 1 GiB or more anyway


def _name_problem(what: str, name: object) -> Optional[str]:
    if not isinstance(name, str):   # proto2 strings (TensorProto) are not UTF-8-checked: invalid ones come as bytes
        return f"{what} is not valid UTF-8"
    if len(name) > MAX_NAME_CHARS:
        return f"{what} of {len(name)} characters (allowed <= {MAX_NAME_CHARS})"
    return None


def _check_run(cmd: pb.RunCMD) -> Optional[str]:
    if cmd.run_level not in RUN_LEVELS:
        return f"run_cmd.run_level={cmd.run_level[:40]!r} (allowed: {', '.join(RUN_LEVELS)})"
    if cmd.run_steps < -1:   # -1 = until pause; the client runs one step per command anyway
        return f"run_cmd.run_steps={cmd.run_steps} (allowed: -1 or 0..{MAX_INT32})"
    return _name_problem("run_cmd.node_name", cmd.node_name)


def _check_set(cmd: pb.SetCMD) -> Optional[str]:
    if not 0 < cmd.id <= MAX_INT32:
        return f"set_cmd.id={cmd.id} (allowed: 1..{MAX_INT32}; MindInsight numbers watchpoints from 1)"
    if cmd.delete:
        return None
    if len(cmd.watch_nodes) > MAX_WATCH_NODES:
        return f"set_cmd with {len(cmd.watch_nodes)} watch_nodes (allowed <= {MAX_WATCH_NODES})"
    for node in cmd.watch_nodes:
        if not node.node_name:
            return "set_cmd.watch_nodes[].node_name is empty"
        problem = _name_problem("set_cmd.watch_nodes[].node_name", node.node_name)
        if problem:
            return problem
    condition = cmd.watch_condition
    if len(condition.params) > MAX_CONDITION_PARAMS:
        return f"watch_condition with {len(condition.params)} params (allowed <= {MAX_CONDITION_PARAMS})"
    for param in condition.params:
        if len(param.name) > 64:
            return f"watch_condition.params[].name of {len(param.name)} characters (allowed <= 64)"
        if not param.disabled and not math.isfinite(param.value):
            return f"watch_condition.params[{param.name[:40]!r}].value={param.value} (allowed: a finite number)"
    return None


def _check_view(cmd: pb.ViewCMD) -> Optional[str]:
    if cmd.level not in VIEW_LEVELS.values():
        return f"view_cmd.level={cmd.level} (allowed: 0 value, 1 statistics, 2 base)"
    if len(cmd.tensors) > MAX_VIEW_TENSORS:
        return f"view_cmd with {len(cmd.tensors)} tensors (allowed <= {MAX_VIEW_TENSORS})"
    for tensor in cmd.tensors:
        if not tensor.node_name:
            return "view_cmd.tensors[].node_name is empty"
        problem = _name_problem("view_cmd.tensors[].node_name", tensor.node_name)
        if problem:
            return problem
        if not isinstance(tensor.slot, str) or (tensor.slot and not (tensor.slot.isdigit() and len(tensor.slot) <= 6)):
            return f"view_cmd.tensors[].slot={tensor.slot[:40]!r} (allowed: a small decimal number)"
        if not isinstance(tensor.iter, str) or tensor.iter not in ("", PREVIOUS_STEP):
            return f"view_cmd.tensors[].iter={tensor.iter[:40]!r} (allowed: '' or {PREVIOUS_STEP!r})"
    return None


def check_reply(reply: pb.EventReply) -> Optional[str]:
    """None when ``reply`` may be obeyed; otherwise why it is refused (for the log)."""
    if reply.status not in STATUSES:
        return f"status={reply.status} (allowed: 0 OK, 1 FAILED)"
    kind = reply.WhichOneof("cmd")
    if kind == "run_cmd":
        return _check_run(reply.run_cmd)
    if kind == "set_cmd":
        return _check_set(reply.set_cmd)
    if kind == "view_cmd":
        return _check_view(reply.view_cmd)
    if kind == "exit" and not reply.exit:
        return "exit=false (MindInsight only sends exit=true)"
    if kind == "version_matched":
        return "version_matched outside the version check"
    return None


class RateLimitedLog:
    """Log WARNING lines at most once per ``interval`` seconds per key, saying how many were held back."""

    def __init__(self, logger: logging.Logger, interval: float = 10.0) -> None:
        self._logger = logger
        self.interval = interval
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}
        self.count = 0

    def warning(self, key: str, message: str) -> None:
        self.count += 1
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            self._held[key] = self._held.get(key, 0) + 1
            return
        held = self._held.pop(key, 0)
        self._last[key] = now
        self._logger.warning("%s%s", message, f" ({held} more like it not logged)" if held else "")
