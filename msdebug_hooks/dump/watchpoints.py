"""Watchpoints over dumped tensors: ``Watchpoint``, ``WatchpointHit`` and the bounded, batched checker.

Each tensor is read once however many watchpoints name it, through one open file (``npy.read_array``). Tensors under
1 MiB, the many activations and weights of a step, are checked in batches of up to 32 MB: one call of the engine's
``check_tensors`` per batch (and per set of watchpoints) instead of one per file, so a dump of thousands of small
files does not pay the engine's fixed cost thousands of times. Larger tensors are checked one at a time, in worker
threads (numpy releases the GIL in its reductions, so threads use both cores without copying between
processes). Reading the next files in a thread while a batch is checked measured no faster here, so this thread reads
them. Memory stays bounded whatever the dump's size: one batch, plus one large tensor per worker thread (each
with its previous-iteration value when a change condition needs it).

Error codes (``conditions/error_codes.py``) follow MindInsight: 1 NaN, 2 +/-Inf, 4 no previous tensor, 8 tensor
larger than ``mem_limit``, 32 tensor has no value (only reported with ``error_on_no_value=True``); and ours, 64: the
tensor's file (or its previous value's) could not be read (truncated, corrupt, unreadable): one such record per
watchpoint, with the reason in ``error_msg``, and the check goes on with the other tensors.
"""
from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable, Optional, Sequence

from msdebug_hooks._files import os_error_text
from msdebug_hooks.conditions.conditions import ConditionResult
from msdebug_hooks.conditions.error_codes import ERROR_MEMORY_LIMIT, ERROR_NO_VALUE, ERROR_UNREADABLE, error_messages
from msdebug_hooks.dump import npy
from msdebug_hooks.dump.nodes import DebuggerTensor
from msdebug_hooks.errors import ConfigError, DumpError

PARALLEL_MIN_BYTES = 1 << 20   # tensors from 1 MiB up are checked alone, in worker threads
BATCH_BYTES = 32 << 20         # smaller tensors are read ahead and checked together up to this many bytes


class Watchpoint:
    """Check ``condition`` on every tensor in ``tensors`` (from ``DumpAnalyzer.select_tensors``)."""

    def __init__(self, tensors: Iterable[DebuggerTensor], condition: Any) -> None:
        tensors = list(tensors)
        for position, tensor in enumerate(tensors):
            if not isinstance(tensor, DebuggerTensor):
                raise ConfigError(f"tensors[{position}]", type(tensor).__name__,
                                  "DebuggerTensor objects from DumpAnalyzer.select_tensors()")
        if not callable(getattr(condition, "check", None)):
            raise ConfigError("condition", type(condition).__name__,
                              "a condition from msdebug_hooks.conditions (e.g. TensorTooLargeCondition(abs_mean_gt=1))")
        self._tensors = tensors
        self._condition = condition

    @property
    def tensors(self) -> list[DebuggerTensor]:
        return list(self._tensors)

    @property
    def condition(self) -> Any:
        return self._condition

    def __repr__(self) -> str:
        return f"Watchpoint({len(self._tensors)} tensors, {_condition_name(self._condition)})"


def _condition_name(condition: Any) -> str:
    """MindInsight's printed name (``TensorTooLarge``)."""
    return str(getattr(condition, "api_name", None) or getattr(condition, "name", type(condition).__name__))


def _param_dict(condition: Any) -> dict:
    return dict(getattr(condition, "params", None) or getattr(condition, "param_dict", None) or {})


def _plain(value: Any) -> Any:
    """JSON-ready: numpy scalars become Python numbers."""
    return value.item() if hasattr(value, "item") else value


class HitDetail:
    """The condition as the tensor met it: each parameter with the value set and the value measured."""

    def __init__(self, params: Sequence[Any], condition: Any) -> None:
        self._params = tuple(params)
        self._condition = condition

    @property
    def name(self) -> str:
        return _condition_name(self._condition)

    @property
    def condition_id(self) -> int:
        return getattr(self._condition, "condition_id", -1)

    @property
    def param_dict(self) -> tuple:
        """Every parameter result (``name``, ``value``, ``hit``, ``actual_value``)."""
        return self._params

    def __str__(self) -> str:
        hit = [p for p in self._params if p.hit and p.actual_value is not None]
        if not hit or not _param_dict(self._condition) or self.condition_id == 20:   # 20: tensor_not_changed
            return "None."
        setting = ", ".join(f"{p.name} = {p.value}" for p in hit)
        actual = ", ".join(f"{p.name} = {p.actual_value}" for p in hit)
        return f"The setting for watchpoint is {setting}. The actual value of the tensor is {actual}."


class WatchpointHit:
    """A tensor that met a watchpoint's condition, or could not be checked (``error_code`` != 0)."""

    def __init__(self, tensor: DebuggerTensor, watchpoint: Watchpoint, result: ConditionResult) -> None:
        self._tensor = tensor
        self._watchpoint = watchpoint
        self._result = result

    @property
    def tensor(self) -> DebuggerTensor:
        return self._tensor

    @property
    def watchpoint(self) -> Watchpoint:
        return self._watchpoint

    @property
    def error_code(self) -> int:
        return self._result.error_code

    @property
    def error_msg(self) -> list[str]:
        return error_messages(self._result.error_code, self._result.note)

    def get_threshold(self) -> Any:
        """The condition as the user set it."""
        return self._watchpoint.condition

    def get_hit_detail(self) -> Optional[HitDetail]:
        """Measured values of the parameters that hit; ``None`` when ``error_code`` is not 0."""
        if self.error_code:
            return None
        return HitDetail(self._result.params, self._watchpoint.condition)

    @property
    def params(self) -> tuple:
        """Every parameter result, hit or not (``name``, ``value``, ``hit``, ``actual_value``)."""
        return self._result.params

    def to_dict(self) -> dict:
        tensor, node = self._tensor, self._tensor.node
        return {
            "condition": _condition_name(self._watchpoint.condition),
            "threshold": _param_dict(self._watchpoint.condition),
            "iteration": tensor.iteration, "rank": tensor.rank, "graph_name": node.graph_name,
            "node_name": node.name, "slot": tensor.slot, "error_code": self.error_code,
            "error_msg": self.error_msg,
            "params": [{"name": p.name, "value": _plain(p.value), "hit": bool(p.hit),
                        "actual_value": _plain(p.actual_value)} for p in self.params],
            "source": [f"{f['file_path']}:{f['line_no']}" for f in node.source_lines()],
        }

    def __repr__(self) -> str:
        return (f"WatchpointHit({_condition_name(self._watchpoint.condition)}, {self._tensor.node.name!r}, "
                f"iteration={self._tensor.iteration}, slot={self._tensor.slot}, error_code={self.error_code})")

    def __str__(self) -> str:
        name = _condition_name(self._watchpoint.condition)
        threshold = _param_dict(self._watchpoint.condition)
        if self.error_code:
            return (f"Watchpoint {name} check failed on tensor:\n{self._tensor}\nThreshold: {threshold}\n"
                    f"Error detail: {self.error_msg}")
        return (f"Watchpoint {name} triggered on tensor:\n{self._tensor}\nThreshold: {threshold}\n"
                f"Hit detail: {self.get_hit_detail()}")


def _unreadable(exc: BaseException, count: int) -> list[Optional[ConditionResult]]:
    reason = os_error_text(exc) if isinstance(exc, OSError) else str(exc)
    return [ConditionResult(False, ERROR_UNREADABLE, (), reason) for _ in range(count)]


def _read_values(tensor: DebuggerTensor, path: Any, wants_previous: bool, mem_limit_bytes: int,
                 largest: Optional[int]) -> tuple[Any, Any, Optional[int]]:
    """(value, previous, error code) of a tensor to check; the value is None (and no error given) when it holds more
    than ``largest`` bytes: then nothing was read but its header. ``DumpError`` / ``OSError`` / ``ValueError`` for a
    file that cannot be read."""
    _, value = npy.read_array(path, max_bytes=largest)
    if value is None:
        return None, None, None
    previous = None
    if wants_previous:
        before = tensor.previous()
        previous_path = before.file if before is not None else None
        if previous_path is not None:
            budget = mem_limit_bytes - value.nbytes if mem_limit_bytes else None
            _, previous = npy.read_array(previous_path, max_bytes=budget)
            if previous is None:
                return value, None, ERROR_MEMORY_LIMIT
    return value, previous, None


def _check_one(tensor: DebuggerTensor, conditions: list, mem_limit_bytes: int) -> list[Optional[ConditionResult]]:
    """The engine's result of every condition on one large tensor with a file (``None`` = nothing to report); a
    tensor that could not be read is a result with its error code (and, for an unreadable file, the reason as its
    ``note``)."""
    from msdebug_hooks.conditions import check_many

    wants_previous = any(getattr(c, "needs_previous", False) for c in conditions)
    try:
        value, previous, error = _read_values(tensor, tensor.file, wants_previous, mem_limit_bytes,
                                              mem_limit_bytes or None)
    except (DumpError, OSError, ValueError) as exc:   # one bad file is one record, not the end of the check
        return _unreadable(exc, len(conditions))
    if value is None or error is not None:
        return [ConditionResult(False, ERROR_MEMORY_LIMIT, ()) for _ in conditions]
    # one statistics pass for all
    return [result if result.reportable else None for result in check_many(conditions, value, previous)]


class _Batch:
    """Small tensors read ahead, checked together: one ``check_tensors`` call per set of conditions."""

    def __init__(self) -> None:
        self.entries: dict[tuple[int, ...], list[tuple[int, Any, Any]]] = {}   # indices -> (position, value, prev)
        self.nbytes = 0

    def add(self, indices: tuple[int, ...], position: int, value: Any, previous: Any) -> None:
        self.entries.setdefault(indices, []).append((position, value, previous))
        self.nbytes += value.nbytes + (previous.nbytes if previous is not None else 0)

    def check(self, watchpoints: Sequence[Watchpoint]) -> list[tuple[int, list[Optional[ConditionResult]]]]:
        """(position, outcome per condition) of every tensor held; empties the batch."""
        from msdebug_hooks.conditions import check_tensors

        checked = []
        for indices, entries in self.entries.items():
            conditions = [watchpoints[i].condition for i in indices]
            verdicts = check_tensors(conditions, [value for _, value, _ in entries],
                                     [previous for _, _, previous in entries])
            checked += [(position, [r if r.reportable else None for r in results])
                        for (position, _, _), results in zip(entries, verdicts)]
        self.entries, self.nbytes = {}, 0
        return checked


def check_watchpoints(watchpoints: Sequence[Watchpoint], order_key, *, error_on_no_value: bool = False,
                      mem_limit_mb: Optional[int] = None, workers: Optional[int] = None) -> list[WatchpointHit]:
    """Check every watchpoint; hits sorted by ``order_key(tensor)`` (iteration, then execution order)."""
    plan: dict[DebuggerTensor, list[int]] = {}
    for wp_index, watchpoint in enumerate(watchpoints):
        if not isinstance(watchpoint, Watchpoint):
            raise ConfigError(f"watchpoints[{wp_index}]", type(watchpoint).__name__, "Watchpoint objects")
        for tensor in watchpoint.tensors:
            indices = plan.setdefault(tensor, [])
            if wp_index not in indices:
                indices.append(wp_index)
    tensors = sorted(plan, key=order_key)
    limit = int(mem_limit_mb) * 1024 * 1024 if mem_limit_mb else 0
    workers = workers or min(2, os.cpu_count() or 1)
    needs_previous = [getattr(w.condition, "needs_previous", False) for w in watchpoints]
    largest_small = min(PARALLEL_MIN_BYTES - 1, limit) if limit else PARALLEL_MIN_BYTES - 1

    results: list[list[WatchpointHit]] = [[] for _ in tensors]

    def record(position: int, outcomes: list[Optional[ConditionResult]]) -> None:
        tensor = tensors[position]
        results[position] = [WatchpointHit(tensor, watchpoints[i], outcome)
                             for i, outcome in zip(plan[tensor], outcomes) if outcome is not None]

    def run_alone(position: int) -> None:     # a large tensor: read, checked, dropped
        tensor = tensors[position]
        indices = plan[tensor]
        record(position, _check_one(tensor, [watchpoints[i].condition for i in indices], limit))

    def read(position: int) -> tuple[Any, Any, Optional[list]]:
        """(value, previous, outcomes): outcomes when already decided (no file, unreadable, over the
        memory limit); neither value nor outcomes for a large tensor, checked alone."""
        tensor = tensors[position]
        indices = plan[tensor]
        path = tensor.file
        if path is None:
            outcome = ConditionResult(False, ERROR_NO_VALUE, ()) if error_on_no_value else None
            return None, None, [outcome for _ in indices]
        try:
            value, previous, error = _read_values(tensor, path, any(needs_previous[i] for i in indices), limit,
                                                  largest_small)
        except (DumpError, OSError, ValueError) as exc:   # one bad file is one record, not the end of the check
            return None, None, _unreadable(exc, len(indices))
        if error is not None:
            return None, None, [ConditionResult(False, error, ()) for _ in indices]
        return value, previous, None

    batch = _Batch()
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="msdebug-check") if workers > 1 else None
    pending: deque = deque()   # a bounded window of large tensors in the pool keeps memory flat

    def take(position: int, value: Any, previous: Any, outcomes: Optional[list]) -> None:
        if outcomes is not None:
            record(position, outcomes)
        elif value is not None:
            batch.add(tuple(plan[tensors[position]]), position, value, previous)
            if batch.nbytes >= BATCH_BYTES:
                for checked in batch.check(watchpoints):
                    record(*checked)
        elif pool is None:
            run_alone(position)
        else:
            pending.append(pool.submit(run_alone, position))
            if len(pending) >= workers * 2:
                pending.popleft().result()

    try:
        for position in range(len(tensors)):
            take(position, *read(position))
        for checked in batch.check(watchpoints):
            record(*checked)
        for future in pending:
            future.result()
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
    return [hit for found in results for hit in found]
