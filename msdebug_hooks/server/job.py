"""The API a person drives one connected training with: watchpoints, run / pause / recheck / terminate, tensors.

The protocol gives the server one lever, the answer to the training's ``WaitCMD`` (``training_link.py``), so:

* ``run(n)`` answers the next ``n`` waits with "run one step" (-1: every wait); ``pause()`` stops answering (a
  run the training has not taken yet is cancelled, and the job is ``waiting`` again at once);
* a hit cancels the remaining steps, so the training stays suspended at the step where the watchpoint hit;
* watchpoint changes, views and rechecks are queued and delivered at the next wait, in order; the training answers
  a view with one ``Send*`` stream and waits again, so views work only while it is suspended.

Every blocking call takes a timeout and raises ``JobLost`` when the training is gone (``JobCrashed``, a ``JobLost``,
when it raised or its process exited non-zero), so nothing waits forever.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Optional, Sequence, Union

import numpy as np

from msdebug_hooks.conditions import Condition, parse_condition
from msdebug_hooks.conditions.protocol import UI_CONDITIONS
from msdebug_hooks.server import commands
from msdebug_hooks.server.errors import JobLost, JobStateError, TensorUnavailable
from msdebug_hooks.server.graph import JobGraph, Node
from msdebug_hooks.server.hits import Hit, ServerWatchpoint
from msdebug_hooks.server.job_hints import missing_value_hint
from msdebug_hooks.server.liveness import ProcessWatch
from msdebug_hooks.server.tensors import TensorStats, stats_from_summary
from msdebug_hooks.server.training_link import POLL, JobState, TrainingLink
from msdebug_hooks.validation import optional_whole_number

__all__ = ["Job", "JobState"]

NodesSpec = Union[None, str, Node, Sequence[Union[str, Node]]]


class ViewWaiter:
    """One view in flight: the servicer fills ``items`` with the training's answer and sets ``done``."""

    def __init__(self, level: str) -> None:
        self.level = level
        self.done = threading.Event()
        self.items: list = []


class Job(TrainingLink):
    """A connected training. Obtain it from ``DebuggerServer.wait_for_training()``; never construct it.

    Attributes: ``id`` (1, 2, ... per server), ``rank`` (the device id the training reports), ``peer`` (its
    address), ``port`` (the server port it came to), ``ms_version``, ``state``, ``step``, ``graph``, ``watchpoints``,
    ``hits`` (those of the current suspension) and ``all_hits``.
    """

    # -- the API ------------------------------------------------------------------------------------------------
    def nodes(self, pattern: str = "", *, category: Optional[str] = None, stack: str = "") -> list[Node]:
        """Nodes matching ``pattern`` / ``category`` / source ``stack`` (see ``JobGraph.search``)."""
        return self._graph().search(pattern, category=category, stack=stack)

    def node(self, name: str) -> Node:
        return self._graph().node(name)

    def watch(self, condition: Union[Condition, str], nodes: NodesSpec = None) -> ServerWatchpoint:
        """Set a watchpoint; it is checked at every later step end (the training gets it at its next suspension).

        ``condition``: a ``msdebug_hooks.conditions`` instance or text (``"weight_overflow"``,
        ``"tensor_too_large:abs_mean_gt=1e3"``). ``nodes``: node names or ``Node``s, a glob / substring, a category
        (``"weight"``, ``"gradient"``, ``"activation"``, ``"parameter"``), or None / ``"*"`` for all. A MindInsight
        UI id such as ``weight_overflow`` also restricts the nodes to its kind (weights)."""
        label = ""
        target = None
        if isinstance(condition, str):
            label = condition.strip()
            ui = UI_CONDITIONS.get(label.partition(":")[0].strip())
            target = ui.target if ui is not None and ui.target != "tensor" else None
            condition = parse_condition(label)
        if not isinstance(condition, Condition):
            raise TypeError(f"condition={condition!r} is not allowed: a Condition (e.g. TensorOverflowCondition()) "
                            "or text such as 'weight_overflow' or 'tensor_too_large:abs_mean_gt=1e3'")
        chosen = self._select(nodes, target)
        if not chosen:
            raise ValueError(f"nodes={nodes!r} is not allowed: it matches no node with a value in {self.label}'s "
                             f"graph{f' of kind {target}' if target else ''}")
        with self._cond:
            self._require_alive()
            watchpoint = ServerWatchpoint(self._next_watchpoint, condition, tuple(chosen), label or repr(condition),
                                          _as_asked(nodes))
            self._next_watchpoint += 1
            self.watchpoints[watchpoint.id] = watchpoint
            self._queue.append(commands.set_watchpoint(watchpoint.id, condition, chosen))
            self._unchecked = True
            self._cond.notify_all()
        return watchpoint

    def unwatch(self, watchpoint: Union[None, int, ServerWatchpoint] = None) -> list[int]:
        """Delete one watchpoint (id or object), or all of them with None; returns the ids deleted."""
        with self._cond:
            self._require_alive()
            if watchpoint is None:
                ids = list(self.watchpoints)
            else:
                wp_id = watchpoint.id if isinstance(watchpoint, ServerWatchpoint) else int(watchpoint)
                if wp_id not in self.watchpoints:
                    raise KeyError(f"no watchpoint {wp_id} in {self.label} (have: {sorted(self.watchpoints)})")
                ids = [wp_id]
            for wp_id in ids:
                del self.watchpoints[wp_id]
                self._queue.append(commands.delete_watchpoint(wp_id))
            self._cond.notify_all()
        return ids

    def run(self, steps: Optional[int] = None, *, wait: bool = True, timeout: float = 300.0) -> list[Hit]:
        """Let the training run ``steps`` steps and wait until it is suspended again (or a watchpoint hits first);
        returns the hits of that suspension. ``steps=None`` runs until ``pause()`` or a hit and returns at once;
        so does ``wait=False`` (then ``wait()``; e.g. to start every rank of a job before waiting for any)."""
        optional_whole_number("steps", steps, minimum=1, allowed="an int >= 1, or None to run until a pause or a hit")
        with self._cond:
            self._require(JobState.WAITING, "run() needs a suspended training (call pause() or wait() first)")
            mark = self._start_run(-1 if steps is None else steps)
        if steps is None or not wait:
            return []
        self._wait_suspended(mark, timeout, f"running {steps} step(s)")
        return list(self.hits)

    def run_until_hit(self, timeout: float = 600.0) -> list[Hit]:
        """Run until a watchpoint hits; returns the hits. Returns [] if the training finished without one;
        ``TimeoutError`` (training left running) after ``timeout`` seconds; ``JobLost`` if the training died."""
        mark = self._run_on()
        self._wait_suspended(mark, timeout, "running until a watchpoint hits")
        return list(self.hits)

    def wait(self, timeout: float = 300.0) -> JobState:
        """Block until the training is suspended or ended; returns the state (``JobLost`` if it died)."""
        with self._cond:
            mark = self._suspensions if self.state is not JobState.WAITING else None
        if mark is not None:
            self._wait_suspended(mark, timeout, "waiting for a suspension")
        return self.state

    def pause(self, timeout: float = 300.0) -> int:
        """Stop at the next step end (a step in progress finishes first); returns the step it stopped at. A run
        the training has not taken yet is simply cancelled: it stays where it is."""
        mark = self._pause_ask()
        if mark is not None:
            self._wait_suspended(mark, timeout, "pausing")
        return self.step

    def recheck(self, timeout: float = 120.0) -> list[Hit]:
        """Evaluate every watchpoint again on the values held at this suspension; returns the hits."""
        with self._cond:
            self._require(JobState.WAITING, "recheck() needs a suspended training")
            self.hits = []
            ticket = self._queue_recheck()
            if self.step == 0:
                self._unchecked = False
            deadline = time.monotonic() + timeout
            while self._rechecks_done < ticket:      # delivered, and the training is back in a wait
                self._check_process()
                if not self.alive:
                    raise self._ended_error()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self.label} did not answer a recheck within {timeout:g} s (state "
                                       f"{self.state}, step {self.step})")
                self._cond.wait(min(left, POLL))
        return list(self.hits)

    def terminate(self, timeout: float = 60.0, *, wait: bool = True) -> JobState:
        """Tell the training to stop (at once if suspended, else at its next step end); it ends cleanly, with its
        other callbacks' end hooks. Returns the final state once the exit is delivered (at once with
        ``wait=False``)."""
        with self._cond:
            if not self.alive:
                return self.state
            self._left = 0
            self._queue.clear()
            self._queue.append(commands.terminate())
            self._fail_view("the job is being terminated")
            self._cond.notify_all()
            if not wait:
                return self.state
            deadline = time.monotonic() + timeout
            while self.alive:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self.label} did not take the terminate within {timeout:g} s "
                                       f"(state {self.state}, step {self.step})")
                self._cond.wait(min(left, POLL))
                self._check_process()
        return self.state

    def tensor(self, name: Union[str, Node], step: str = "current", *, slot: int = 0,
               timeout: float = 60.0) -> np.ndarray:
        """The value of a node's output (``slot``) at this suspension, or its value one step earlier with
        ``step="previous"`` (clients keep previous values of watched parameters, as MindSpore did)."""
        item = self._view(name, step, slot, "value", timeout)[0]
        if item.value is None:
            raise TensorUnavailable(self._unavailable(item.node_name, step, item.problem))
        return item.value

    def statistics(self, name: Union[str, Node], step: str = "current", *, slot: int = 0,
                   timeout: float = 60.0) -> TensorStats:
        """Statistics of a node's output computed by the training (no tensor transfer)."""
        stats = stats_from_summary(self._view(name, step, slot, "statistics", timeout)[0])
        if not stats.available:
            raise TensorUnavailable(self._unavailable(self._resolve(name).name, step, ""))
        return stats

    def join_group(self, group: Any) -> None:
        """Hold this rank at step ends until the other ranks of ``group`` get there (``group.py``)."""
        with self._cond:
            self._group = group
            group.report(self.rank, self.step, ready=self._left != 0)

    def bind_process(self, process: Any) -> None:
        """Watch a ``subprocess.Popen`` running this training: its exit ends the job at once (no heartbeat wait),
        ``crashed`` with its exit code when non-zero."""
        with self._cond:
            self._process = ProcessWatch(popen=process)
            self._check_process()

    # -- run / pause steps shared with RankGroup ------------------------------------------------------------------
    def _start_run(self, left: int) -> int:
        """Lock held, training waiting: ask for ``left`` steps (-1: until a pause or a hit); the suspension mark."""
        mark = self._suspensions
        if self.step == 0 and self._unchecked and self.watchpoints:
            self._queue_recheck()                   # initial-value conditions are checked before step 1
        self._unchecked = False
        if self._group is not None:
            self._run_serial = self._group.hit_serial   # a hit known now does not stop this run
        self._ask(left)
        return mark

    def _run_on(self) -> int:
        """Run until a pause or a hit: from a suspension, or on from a run in progress; the suspension mark."""
        with self._cond:
            self._check_process()
            self._require_alive()
            if self.state is JobState.RUNNING:
                mark = self._suspensions
                self._ask(-1)
                return mark
            self._require(JobState.WAITING, "run_until_hit() needs a suspended or running training")
            return self._start_run(-1)

    def _pause_ask(self) -> Optional[int]:
        """Ask for a pause; None when the training is suspended now, else the mark to wait for."""
        with self._cond:
            self._check_process()
            self._require_alive()
            if self.state is JobState.WAITING:
                return None
            if self.state is not JobState.RUNNING:
                raise JobStateError(self.label, f"{self.state} at step {self.step}",
                                    "pause() needs a running training")
            mark = self._suspensions
            self._ask(0)                            # a run not taken yet: suspended where it is, at once
            return None if self.state is JobState.WAITING else mark

    def _require_waiting(self, needed: str) -> None:
        with self._cond:
            self._require(JobState.WAITING, needed)

    def _queue_recheck(self) -> int:
        """Lock held: queue a recheck; its ticket (``_rechecks_done`` reaches it once the training is back)."""
        self._rechecks_asked += 1
        self._queue.append(commands.recheck())
        self._cond.notify_all()
        return self._rechecks_asked

    # -- helpers of the API -------------------------------------------------------------------------------------
    def _graph(self) -> JobGraph:
        if self.graph is None:
            raise JobStateError(self.label, str(self.state), "it has not sent its graph yet")
        return self.graph

    def _resolve(self, name: Union[str, Node]) -> Node:
        return name if isinstance(name, Node) else self._graph().node(name)

    def _select(self, nodes: NodesSpec, target: Optional[str]) -> list[Node]:
        graph = self._graph()
        if nodes is None or nodes == "*" or nodes == "all":
            chosen = graph.search(watchable=True)
        elif isinstance(nodes, Node):
            chosen = [nodes]
        elif isinstance(nodes, str):
            if nodes in ("weight", "gradient", "activation", "parameter", "operator"):
                chosen = graph.search(category=nodes, watchable=True)
            else:
                exact = graph.find(nodes)
                chosen = [exact] if exact is not None else graph.search(nodes, watchable=True)
        else:
            chosen = [self._resolve(n) for n in nodes]
        if target is not None:
            chosen = [n for n in chosen if n.category == target or (target == "parameter" and
                                                                     n.category == "weight")]
        return [n for n in chosen if n.outputs]

    def _view(self, name: Union[str, Node], step: str, slot: int, level: str, timeout: float) -> list:
        if step not in ("current", "previous"):
            raise ValueError(f"step={step!r} is not allowed: 'current' or 'previous'")
        node = self._resolve(name)
        if not 0 <= slot < max(node.outputs, 1):
            raise ValueError(f"slot={slot} is not allowed: {node.name} has {node.outputs} output(s)")
        with self._view_lock:
            waiter = ViewWaiter(level)
            with self._cond:
                self._require(JobState.WAITING, "tensors can be read only while the training is suspended "
                                                "(pause() or wait() first)")
                self._waiter = waiter
                self._queue.append(commands.view([(node, slot, step == "previous")], level))
                self._cond.notify_all()
            deadline = time.monotonic() + timeout
            while not waiter.done.wait(POLL):
                with self._cond:
                    self._check_process()
                    if not self.alive:
                        self._waiter = None
                        raise self._ended_error()
                if time.monotonic() > deadline:
                    with self._cond:
                        self._waiter = None
                    raise TimeoutError(f"{self.label} did not answer a {level} view of {node.name} within "
                                       f"{timeout:g} s")
            if not waiter.items:
                raise JobLost(self.label, self.reason or "the view was cancelled")
            return waiter.items

    def _unavailable(self, node_name: str, step: str, problem: str) -> str:
        """Why a view came back empty, as far as the server can tell (``job_hints.py``)."""
        if problem:
            return f"{self.label} sent {node_name} at step {self.step} but it was refused: {problem}"
        node = self.graph.find(node_name) if self.graph is not None else None
        watched = node is not None and any(node in wp.nodes for wp in self.watchpoints.values())
        return f"{self.label} holds no {step} value of {node_name} at step {self.step}" + \
            missing_value_hint(node, step, self.step, watched)

    def _wait_suspended(self, mark: int, timeout: float, doing: str) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                self._check_process()
                if self._suspensions > mark:
                    return      # suspended again: by a hit, the steps asked for, or a pause
                if not self.alive:
                    if self.state in (JobState.LOST, JobState.CRASHED):
                        raise self._ended_error()
                    return      # finished or terminated: nothing more will happen
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self.label}: still {self.state} at step {self.step} after {timeout:g} s "
                                       f"of {doing}")
                self._cond.wait(min(left, POLL))


def _as_asked(nodes: NodesSpec) -> Union[None, str, tuple[str, ...]]:
    """A watchpoint's node selection in names only (no ``Node`` of one job's graph), to be resolved again."""
    if nodes is None or isinstance(nodes, str):
        return nodes
    if isinstance(nodes, Node):
        nodes = [nodes]
    return tuple(node.name if isinstance(node, Node) else node for node in nodes)
