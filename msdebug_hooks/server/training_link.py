"""The training's side of a debugger job: what its gRPC calls (metadata, graph, heartbeats, hits, view answers,
``WaitCMD``) do to the job's state, and the state every part of a job shares.

The protocol gives the server one lever: the answer to ``WaitCMD``, which the training calls at every suspension
point (the initial one at step 0 and every step end) and which blocks it until answered (``on_wait``). A hit
arriving (``SendWatchpointHits``, sent before the wait of that step end) cancels the remaining steps, so the
training stays suspended at the step where the watchpoint hit. A ``WaitCMD`` blocked here notices at once when the
training's connection closes; while it runs, a training that stops heartbeating is declared lost after three missed
beats (MindInsight's rule); a process handed to ``bind_process`` is also watched. The API a person drives a job with
is ``job.Job``, built on this.

Free runs (``debugger/free_run.py``): for a client whose heartbeats say it can, a run of several steps (or until a
pause or a hit) is answered with one ``RunCMD{run_level: "free"}`` instead of a run-one-step answer per wait,
unless ranks run in lockstep. The training
then keeps one *watch* call outstanding (``on_watch``), which is answered as soon as the job wants the training
back (a pause, a terminate, a queued command, a hit, the end); the training's next blocking wait is a suspension
like any other, with its real step. ``job.step`` is the step of the last wait, so it stands still during a free run.
"""
from __future__ import annotations

import collections
import enum
import threading
import time
from typing import Any, Callable, Optional

from msdebug_hooks._proto import debug_grpc_pb2 as pb
from msdebug_hooks.debugger.free_run import CAPABLE, WATCH_NODE
from msdebug_hooks.server import commands
from msdebug_hooks.server.errors import JobLost, JobStateError
from msdebug_hooks.server.graph import JobGraph
from msdebug_hooks.server.hits import Hit, ServerWatchpoint, hit_from_proto

__all__ = ["TrainingLink", "JobState", "ENDED", "POLL", "ViewWaiter"]

POLL = 0.1                        # seconds between checks of a blocked WaitCMD's connection
_LOCKSTEP_POLL = 0.002            # a rank held for the others checks them this often


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


class ViewWaiter:
    def __init__(self, level: str) -> None:
        self.level = level
        self.done = threading.Event()
        self.items: list = []


class TrainingLink:
    """A connected training as its gRPC calls see it; ``job.Job`` adds the API. Never construct it directly."""

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
        self.watchpoints: dict[int, ServerWatchpoint] = {}
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
        self._waiter: Optional[ViewWaiter] = None
        self._next_watchpoint = 1
        self._unchecked = False             # watchpoints changed since the last check at step 0
        self._closing = False
        self._group: Any = None             # a RankGroup keeping this rank in lockstep with the others
        self.free_runs = True               # answer multi-step runs with one free run (set by the server)
        self.free_run_capable = False       # the client's heartbeats say it can do free runs
        self._free_from: Optional[int] = None   # the step a free run started at, while one lasts
        self.waits = 0                      # blocking WaitCMDs received (watch calls not counted)

    # -- what a person sees -------------------------------------------------------------------------------------
    @property
    def label(self) -> str:
        return f"job {self.id} (rank {self.rank}, {self.peer})"

    def __repr__(self) -> str:
        return f"<Job {self.id} rank={self.rank} state={self.state} step={self.step} peer={self.peer}>"

    @property
    def alive(self) -> bool:
        return self.state not in ENDED

    # -- shared by the API and the servicer side ----------------------------------------------------------------
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
                    self.step = max(self.step, request.cur_step)   # a free run reports no step until it ends
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

    def on_heartbeat(self, period: int, message: str = "") -> None:
        with self._cond:
            self.touch()
            self.heartbeat_period = float(period)
            self.free_run_capable = CAPABLE in message
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
        if request.cur_node == WATCH_NODE:
            return self._on_watch(is_active)
        with self._cond:
            self.touch()
            self.waits += 1
            self._back_from_free_run(request.cur_step)
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
                    if self._group is None and self.free_runs and self.free_run_capable and self._left != 1:
                        self._free_from = self.step
                        self.state = JobState.RUNNING
                        self._cond.notify_all()
                        return commands.free_run(max(self._left, 0))
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
                    self._cond.wait(_LOCKSTEP_POLL if held else POLL)
                finally:
                    self._in_wait = False
                if not is_active():
                    self._lose(f"its connection closed while it was suspended at step {self.step} "
                               "(process killed or network lost)")
                    return commands.failed()
                self._check_process()

    def _back_from_free_run(self, step: int) -> None:
        """A blocking wait after a free run: count the steps it ran (with the lock held)."""
        if self._free_from is None:
            return
        if self._left > 0:
            self._left = max(0, self._left - (step - self._free_from))
        self._free_from = None
        self._cond.notify_all()          # the watch call, if still held, lets go

    def _on_watch(self, is_active: Callable[[], bool]) -> pb.EventReply:
        """A free run's watch: held until the job wants the training back, then answered (any answer calls it
        back). Released quietly when the training has come back by itself or dropped the call."""
        with self._cond:
            while (self._free_from is not None and self._left != 0 and not self._queue and self.alive
                   and not self._closing and not self._pending_hits):
                self._cond.wait(POLL)
                if not is_active():
                    break
            return commands.ok()

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
