"""One connected training: its state, step, graph, watchpoints, hits and pending commands, and the API to drive it.

The protocol gives the server one lever: the answer to ``WaitCMD``, which the training calls at every suspension
point (the initial one at step 0 and every step end) and which blocks it until answered. So:

* ``run(n)`` answers the next ``n`` waits with "run one step" (-1: every wait); ``pause()`` stops answering;
* a hit arriving (``SendWatchpointHits``, sent before the wait of that step end) cancels the remaining steps, so the
  training stays suspended at the step where the watchpoint hit ("pause on hit");
* watchpoint changes, views and rechecks are queued and delivered at the next wait, in order; the training answers
  a view with one ``Send*`` stream and waits again, so views work only while it is suspended;
* a ``WaitCMD`` blocked here notices at once when the training's connection closes (killed while paused); while it
  runs, a training that stops heartbeating is declared lost after three missed beats (MindInsight's rule); a process
  handed to ``bind_process`` is also watched.

Every blocking call takes a timeout and raises ``JobLost`` when the training is gone, so nothing waits forever.
"""
from __future__ import annotations

import collections
import enum
import threading
import time
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

from msdebug_hooks._log import get_logger
from msdebug_hooks._proto import debug_grpc_pb2 as pb
from msdebug_hooks.conditions import Condition, parse_condition
from msdebug_hooks.conditions.protocol import UI_CONDITIONS
from msdebug_hooks.server import commands
from msdebug_hooks.server.errors import JobLost, JobStateError, TensorUnavailable
from msdebug_hooks.server.graph import JobGraph, Node
from msdebug_hooks.server.hits import Hit, Watchpoint, hit_from_proto
from msdebug_hooks.server.tensors import ReceivedTensor, TensorStats, stats_from_summary

__all__ = ["Job", "JobState"]

_LOG = get_logger("server")
_POLL = 0.1                       # seconds between checks of a blocked WaitCMD's connection
_LOCKSTEP_POLL = 0.002            # a rank held for the others checks them this often
NodesSpec = Union[None, str, Node, Sequence[Union[str, Node]]]


class JobState(str, enum.Enum):
    CONNECTING = "connecting"     # metadata (and maybe the graph) received; not suspended yet
    WAITING = "waiting"           # suspended at a step end (or step 0): commands are obeyed now
    RUNNING = "running"
    FINISHED = "finished"         # the training said it is done
    TERMINATED = "terminated"     # we told it to exit
    LOST = "lost"                 # disconnected, died or stopped heartbeating
    MISMATCH = "mismatch"         # its ms_version could not be accepted

    def __str__(self) -> str:
        return self.value


ENDED = (JobState.FINISHED, JobState.TERMINATED, JobState.LOST, JobState.MISMATCH)


class _ViewWaiter:
    def __init__(self, level: str) -> None:
        self.level = level
        self.done = threading.Event()
        self.items: list = []


class Job:
    """A connected training. Obtain it from ``DebuggerServer.wait_for_training()``; never construct it.

    Attributes: ``id`` (1, 2, ... per server), ``rank`` (the device id the training reports), ``peer`` (its
    address), ``port`` (the server port it came to), ``ms_version``, ``state``, ``step``, ``graph``, ``watchpoints``,
    ``hits`` (those of the current suspension) and ``all_hits``.
    """

    def __init__(self, job_id: int, peer: str, port: int, report: Callable[[str], None]) -> None:
        self.id = job_id
        self.peer = peer
        self.port = port
        self.rank = 0
        self.device_name = ""
        self.ms_version = ""
        self.backend = ""
        self.state = JobState.CONNECTING
        self.reason = ""
        self.step = 0
        self.cur_node = ""
        self.graph: Optional[JobGraph] = None
        self.graph_protos: list = []
        self.watchpoints: dict[int, Watchpoint] = {}
        self.hits: list[Hit] = []
        self.all_hits: list[Hit] = []
        self.heartbeat_period: Optional[float] = None
        self.last_seen = time.monotonic()
        self.process: Any = None
        self._report = report
        self._cond = threading.Condition()
        self._queue: collections.deque = collections.deque()
        self._left = 0                      # steps still to run: >0 count, -1 until paused, 0 stay
        self._suspensions = 0               # bumped each time the training blocks in a wait
        self._in_wait = False
        self._pending_hits: list[Hit] = []
        self._view_lock = threading.Lock()
        self._waiter: Optional[_ViewWaiter] = None
        self._next_watchpoint = 1
        self._unchecked = False             # watchpoints changed since the last check at step 0
        self._closing = False
        self._group: Any = None             # a RankGroup keeping this rank in lockstep with the others

    # -- what a person sees -------------------------------------------------------------------------------------
    @property
    def label(self) -> str:
        return f"job {self.id} (rank {self.rank}, {self.peer})"

    def __repr__(self) -> str:
        return f"<Job {self.id} rank={self.rank} state={self.state} step={self.step} peer={self.peer}>"

    @property
    def alive(self) -> bool:
        return self.state not in ENDED

    # -- the API ------------------------------------------------------------------------------------------------
    def nodes(self, pattern: str = "", *, category: Optional[str] = None, stack: str = "") -> list[Node]:
        """Nodes matching ``pattern`` / ``category`` / source ``stack`` (see ``JobGraph.search``)."""
        return self._graph().search(pattern, category=category, stack=stack)

    def node(self, name: str) -> Node:
        return self._graph().node(name)

    def watch(self, condition: Union[Condition, str], nodes: NodesSpec = None) -> Watchpoint:
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
            watchpoint = Watchpoint(self._next_watchpoint, condition, tuple(chosen), label or repr(condition))
            self._next_watchpoint += 1
            self.watchpoints[watchpoint.id] = watchpoint
            self._queue.append(commands.set_watchpoint(watchpoint.id, condition, chosen))
            self._unchecked = True
            self._cond.notify_all()
        return watchpoint

    def unwatch(self, watchpoint: Union[None, int, Watchpoint] = None) -> list[int]:
        """Delete one watchpoint (id or object), or all of them with None; returns the ids deleted."""
        with self._cond:
            self._require_alive()
            if watchpoint is None:
                ids = list(self.watchpoints)
            else:
                wp_id = watchpoint.id if isinstance(watchpoint, Watchpoint) else int(watchpoint)
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
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
            raise ValueError(f"steps={steps!r} is not allowed: an int >= 1, or None to run until a pause or a hit")
        with self._cond:
            self._require(JobState.WAITING, "run() needs a suspended training (call pause() or wait() first)")
            mark = self._suspensions
            if self.step == 0 and self._unchecked and self.watchpoints:
                self._queue.append(commands.recheck())    # initial-value conditions are checked before step 1
            self._unchecked = False
            self._left = -1 if steps is None else steps
            self.state = JobState.RUNNING
            self._cond.notify_all()
        if steps is None or not wait:
            return []
        self._wait_suspended(mark, timeout, f"running {steps} step(s)")
        return list(self.hits)

    def run_until_hit(self, timeout: float = 600.0) -> list[Hit]:
        """Run until a watchpoint hits; returns the hits. Returns [] if the training finished without one;
        ``TimeoutError`` (training left running) after ``timeout`` seconds; ``JobLost`` if the training died."""
        with self._cond:
            mark = self._suspensions
            running = self.state is JobState.RUNNING
            if running:
                self._left = -1                  # already running: now until a hit
        if not running:
            self.run(None)
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
        """Stop at the next step end (a step in progress finishes first); returns the step it stopped at."""
        with self._cond:
            self._left = 0
            self._drop_runs()
            if self.state is JobState.WAITING:
                return self.step
            self._require(JobState.RUNNING, "pause() needs a running training")
            mark = self._suspensions
            self._cond.notify_all()
        self._wait_suspended(mark, timeout, "pausing")
        return self.step

    def recheck(self, timeout: float = 120.0) -> list[Hit]:
        """Evaluate every watchpoint again on the values held at this suspension; returns the hits."""
        with self._cond:
            self._require(JobState.WAITING, "recheck() needs a suspended training")
            mark = self._suspensions
            self.hits = []
            self._queue.append(commands.recheck())
            if self.step == 0:
                self._unchecked = False
            self._cond.notify_all()
        self._wait_suspended(mark, timeout, "rechecking")
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
                self._cond.wait(min(left, _POLL))
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
            group.report(self.rank, self.step, hit=False)

    def bind_process(self, process: Any) -> None:
        """Watch a ``subprocess.Popen`` running this training: its exit ends the job at once (no heartbeat wait)."""
        self.process = process

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
            waiter = _ViewWaiter(level)
            with self._cond:
                self._require(JobState.WAITING, "tensors can be read only while the training is suspended "
                                                "(pause() or wait() first)")
                self._waiter = waiter
                self._queue.append(commands.view([(node, slot, step == "previous")], level))
                self._cond.notify_all()
            deadline = time.monotonic() + timeout
            while not waiter.done.wait(_POLL):
                with self._cond:
                    self._check_process()
                    if not self.alive:
                        self._waiter = None
                        raise JobLost(self.label, self.reason or str(self.state))
                if time.monotonic() > deadline:
                    with self._cond:
                        self._waiter = None
                    raise TimeoutError(f"{self.label} did not answer a {level} view of {node.name} within "
                                       f"{timeout:g} s")
            if not waiter.items:
                raise JobLost(self.label, self.reason or "the view was cancelled")
            return waiter.items

    def _unavailable(self, node_name: str, step: str, problem: str) -> str:
        if problem:
            return f"{self.label} sent {node_name} at step {self.step} but it was refused: {problem}"
        hint = (" (clients keep previous-step values only of watched parameters, and none at step 0: watch it "
                "before running)" if step == "previous" else "")
        return f"{self.label} holds no {step} value of {node_name} at step {self.step}{hint}"

    def _require_alive(self) -> None:
        if not self.alive:
            raise self._ended_error()

    def _ended_error(self) -> Exception:
        if self.state is JobState.LOST:
            return JobLost(self.label, self.reason)
        return JobStateError(self.label, str(self.state), self.reason or "the training has ended")

    def _require(self, state: JobState, needed: str) -> None:
        self._check_process()
        self._require_alive()
        if self.state is not state:
            raise JobStateError(self.label, f"{self.state} at step {self.step}", needed)

    def _wait_suspended(self, mark: int, timeout: float, doing: str) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                self._check_process()
                if self._suspensions > mark:
                    return      # suspended again: by a hit, the steps asked for, or a pause
                if not self.alive:
                    if self.state is JobState.LOST:
                        raise JobLost(self.label, self.reason)
                    return      # finished or terminated: nothing more will happen
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self.label}: still {self.state} at step {self.step} after {timeout:g} s "
                                       f"of {doing}")
                self._cond.wait(min(left, _POLL))

    def _drop_runs(self) -> None:
        kept = [r for r in self._queue if not (r.WhichOneof("cmd") == "run_cmd" and r.run_cmd.run_level == "step")]
        self._queue = collections.deque(kept)

    def _fail_view(self, why: str) -> None:
        if self._waiter is not None:
            self._waiter.done.set()
            self._waiter = None

    def _check_process(self) -> None:
        """Called with the lock held: a bound process that exited ends the job."""
        if self.process is None or not self.alive:
            return
        code = self.process.poll()
        if code is not None:
            self._lose(f"the training process exited with code {code} at step {self.step}")

    def _lose(self, reason: str) -> None:
        if not self.alive:
            return
        self.state = JobState.LOST
        self.reason = reason
        self._left = 0
        self._queue.clear()
        self._fail_view(reason)
        self._report(f"{self.label} lost: {reason}")
        self._cond.notify_all()

    # -- called by the servicer (gRPC threads) ------------------------------------------------------------------
    def touch(self) -> None:
        self.last_seen = time.monotonic()

    def on_metadata(self, request: pb.Metadata) -> Optional[pb.EventReply]:
        """``SendMetadata``: the first one introduces the training; ``training_done`` ends it."""
        with self._cond:
            self.touch()
            if request.training_done:
                if self.alive:
                    self.state = JobState.FINISHED
                    self.reason = f"the training finished at step {request.cur_step}"
                    self._fail_view(self.reason)
                    self._report(f"{self.label}: {self.reason}")
                self._cond.notify_all()
                return commands.ok()
            self.device_name = request.device_name
            device = request.device_name.split(":", 1)[0]
            self.rank = int(device) if device.isdigit() else 0
            self.ms_version = request.ms_version
            self.backend = request.backend
            self.step = request.cur_step
            parts = request.ms_version.split(".")
            if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
                self.state = JobState.MISMATCH
                self.reason = f"ms_version={request.ms_version!r} is not major.minor[.patch]"
                self._report(f"{self.label} refused: {self.reason}")
                self._cond.notify_all()
                return commands.version_reply(False)
            self._cond.notify_all()
            return commands.version_reply(True)

    def on_graph(self, protos: list, parsed: JobGraph) -> None:
        with self._cond:
            self.touch()
            self.graph_protos = protos
            self.graph = parsed
            self._cond.notify_all()

    def on_heartbeat(self, period: int) -> None:
        with self._cond:
            self.touch()
            self.heartbeat_period = float(period)
            if self.state is JobState.LOST and self.reason.startswith("no heartbeat"):
                self.state = JobState.RUNNING if not self._in_wait else JobState.WAITING
                self._report(f"{self.label} is back (heartbeat)")
                self._cond.notify_all()

    def on_hits(self, messages: list[pb.WatchpointHit]) -> list[str]:
        """Keep the hits until the next wait tells their step; returns problems (unknown watchpoint or node)."""
        problems = []
        with self._cond:
            self.touch()
            for message in messages:
                watchpoint = self.watchpoints.get(message.id)
                node = self.graph.find(message.tensor.node_name) if self.graph is not None else None
                if watchpoint is None or node is None:
                    problems.append(f"hit for watchpoint {message.id} on {message.tensor.node_name[:200]!r}: "
                                    f"{'no such watchpoint' if watchpoint is None else 'no such node'}")
                    continue
                hit = hit_from_proto(message, node, watchpoint)
                hit.rank, hit.job_id = self.rank, self.id
                self._pending_hits.append(hit)
            if self._pending_hits:       # pause on hit: the remaining steps are cancelled now
                self._left = 0
                self._drop_runs()
            self._cond.notify_all()
        return problems

    def on_view_answer(self, level: str, items: list) -> bool:
        """An answer to our view; False if nobody asked for one at that level (it is reported)."""
        with self._cond:
            self.touch()
            waiter = self._waiter
            if waiter is None or waiter.level != level:
                return False
            waiter.items = items
            self._waiter = None
            waiter.done.set()
            return True

    def on_wait(self, request: pb.Metadata, is_active: Callable[[], bool]) -> pb.EventReply:
        """``WaitCMD``: deliver the next command, or block (the training is suspended) until there is one."""
        with self._cond:
            self.touch()
            if self.state is JobState.TERMINATED:
                return commands.terminate()
            if self.state in (JobState.FINISHED, JobState.MISMATCH) or self.graph is None:
                return commands.failed()        # MindInsight's answer before a graph: the client backs off
            if self.state is JobState.LOST:
                self._report(f"{self.label} is back (it called WaitCMD at step {request.cur_step})")
                self.state, self.reason = JobState.WAITING, ""
            if request.cur_step != self.step:
                self.hits = []
            self.step = request.cur_step
            self.cur_node = request.cur_node
            arrived = bool(self._pending_hits)
            if arrived:
                for hit in self._pending_hits:
                    hit.step = self.step
                self.hits.extend(self._pending_hits)
                self.all_hits.extend(self._pending_hits)
                self._pending_hits = []
            if self._group is not None:
                self._group.report(self.rank, self.step, hit=arrived)
            counted = False
            while True:
                if self._closing or self.state in (JobState.LOST, JobState.FINISHED, JobState.MISMATCH):
                    return commands.failed()
                if self._queue:
                    reply = self._queue.popleft()
                    kind = reply.WhichOneof("cmd")
                    if kind == "exit":
                        self.state = JobState.TERMINATED
                        self.reason = f"terminated at step {self.step}"
                        self._report(f"{self.label}: {self.reason}")
                    elif kind == "run_cmd" and reply.run_cmd.run_level == "step":
                        self.state = JobState.RUNNING
                    else:                           # set / view / recheck: still suspended, unless asked to run
                        self.state = JobState.RUNNING if self._left != 0 else JobState.WAITING
                    self._cond.notify_all()
                    return reply
                held = False
                if self._left != 0 and self._group is not None and self._group.stop_here(self.step):
                    self._left = 0                  # another rank hit at this step: every rank stops here
                if self._left != 0:
                    if self._group is None or self._group.released(self.step):
                        if self._left > 0:
                            self._left -= 1
                        self.state = JobState.RUNNING
                        self._cond.notify_all()
                        return commands.run_step()
                    held = True                     # lockstep: the other ranks are not at this step end yet
                elif not counted:
                    counted = True
                    self.state = JobState.WAITING
                    self._suspensions += 1
                    self._cond.notify_all()
                self._in_wait = True
                try:
                    self._cond.wait(_LOCKSTEP_POLL if held else _POLL)
                finally:
                    self._in_wait = False
                if not is_active():
                    self._lose(f"its connection closed while it was suspended at step {self.step} "
                               "(process killed or network lost)")
                    return commands.failed()
                self._check_process()

    def check_heartbeat(self, now: float) -> None:
        """Watchdog: a running training that missed three heartbeats is lost (MindInsight's rule)."""
        with self._cond:
            self._check_process()
            if not self.alive or self._in_wait or self.heartbeat_period is None:
                return
            silent = now - self.last_seen
            if silent > 3 * (self.heartbeat_period + 0.5):
                self._lose(f"no heartbeat for {silent:.0f} s (period {self.heartbeat_period:g} s) while "
                           f"{self.state} at step {self.step}")

    def end_session(self, reason: str) -> None:
        with self._cond:
            self._lose(reason)

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._fail_view("the server is closing")
            self._cond.notify_all()
