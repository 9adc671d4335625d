"""The training's side of a debugger job: what its gRPC calls (metadata, graph, heartbeats, hits, view answers,
``WaitCMD``) do to the job's state, and the state every part of a job shares.

The protocol gives the server one lever: the answer to ``WaitCMD``, which the training calls at every suspension
point (the initial one at step 0 and every step end) and which blocks it until answered (``on_wait``). A hit
arriving (``SendWatchpointHits``, sent before the wait of that step end) cancels the remaining steps, so the
training stays suspended at the step where the watchpoint hit.

The state is derived from three facts, in one place (``_settle``), so that no order of API calls and training calls
can leave it saying something untrue: ``_held`` (the training is suspended: a blocking wait arrived and no run or
exit has left since), ``_left`` (steps asked for: >0 a count, -1 until a pause or a hit, 0 none) and the hits in
flight. ``waiting`` is held with nothing asked and no hit on its way; anything else alive is ``running``. So a
``pause()`` that comes before the training took the run it cancels is at once ``waiting`` again, where the training
still is; a run not yet delivered is ``running`` (asked), never ``waiting``. ``_suspensions`` counts the moves to
``waiting``: blocking API calls wait for it to grow.

How a training ends is in ``states.py`` and ``training_end.py``; a process on this machine is watched every second
(``liveness.py``): a bound ``Popen``, or the pid our client names in its heartbeats.

Free runs (``wire/protocol.py``): for a client whose heartbeats say it can, a run of several steps (or until a
pause or a hit) is one ``RunCMD{run_level: "free"}``, unless ranks run in lockstep; the training keeps one *watch*
call outstanding (``_on_watch``), answered when the job wants it back (a pause, a terminate, a queued command, a
hit, the end). ``job.step`` is the step of the last wait, so it stands still during a free run.
"""
from __future__ import annotations

import collections
import threading
import time
from typing import Any, Callable, Optional

from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.wire.client_facts import parse_heartbeat
from msdebug_hooks.wire.protocol import RECHECK_LEVEL, WATCH_NODE
from msdebug_hooks.server import commands
from msdebug_hooks.server.errors import JobStateError
from msdebug_hooks.server.graph import JobGraph
from msdebug_hooks.server.hits import Hit, ServerWatchpoint, hit_from_proto
from msdebug_hooks.server.liveness import ProcessWatch
from msdebug_hooks.server.states import ENDED, JobState
from msdebug_hooks.server.training_end import TrainingEnd

__all__ = ["TrainingLink", "JobState", "ENDED", "POLL"]

POLL = 0.1                        # seconds between checks of a blocked WaitCMD's connection
_LOCKSTEP_POLL = 0.002            # a rank held for the others checks them this often


class TrainingLink(TrainingEnd):
    """A connected training as its gRPC calls see it; ``job.Job`` adds the API. Never construct it directly."""

    def __init__(self, job_id: int, peer: str, port: int, report: Callable[[str], None]) -> None:
        self.id = job_id
        self.peer = peer
        self.port = port
        self.rank = 0
        self.world: Optional[int] = None    # the job's number of ranks, as our client says (None: not said)
        self.device_name = ""
        self.ms_version = ""
        self.backend = ""
        self.state = JobState.CONNECTING
        self.reason = ""
        self.error: Optional[str] = None    # the last line of the error a crashed training reported
        self.exit_code: Optional[int] = None   # its process's exit code, once seen (a bound Popen, a zombie)
        self.step = 0
        self.cur_node = ""
        self.graph: Optional[JobGraph] = None
        self.graph_protos: list = []
        self.watchpoints: dict[int, ServerWatchpoint] = {}
        self.hits: list[Hit] = []
        self.all_hits: list[Hit] = []
        self.heartbeat_period: Optional[float] = None
        self.last_seen = time.monotonic()
        self._process: Optional[ProcessWatch] = None
        self._report = report
        self._cond = threading.Condition()
        self._queue: collections.deque = collections.deque()
        self._left = 0                      # steps asked for: >0 count, -1 until paused or a hit, 0 none
        self._held = False                  # suspended: a blocking wait came, no run or exit left since
        self._suspensions = 0               # bumped at every move to WAITING
        self._in_wait = False               # blocked in a wait now (its connection is watched there)
        self._process_checked = 0.0         # when a held wait last looked at the process
        self._pending_hits: list[Hit] = []
        self._view_lock = threading.Lock()
        self._waiter: Any = None            # the API's ViewWaiter for the view in flight (job.py)
        self._next_watchpoint = 1
        self._rechecks_asked = self._rechecks_done = 0   # a recheck is done when a wait follows its delivery
        self._recheck_out = False
        self._unchecked = False             # watchpoints changed since the last check at step 0
        self._closing = False
        self._group: Any = None             # a RankGroup keeping this rank in lockstep with the others
        self._run_serial = 0                # the group's hit count when this rank was last asked to run
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

    @property
    def pid(self) -> Optional[int]:
        """The training's process id, where known (a bound ``Popen``, or our client's heartbeats)."""
        return self._process.pid if self._process is not None else None

    # -- the state, in one place ----------------------------------------------------------------------------------
    def _settle(self) -> None:
        """Derive the state from the facts (lock held); a move to WAITING counts a suspension."""
        if not self.alive or (self.state is JobState.CONNECTING and not self._held):
            return
        leaving = self._group is not None and self._group.committed(self.step)
        waiting = self._held and self._left == 0 and not self._pending_hits and not leaving
        if waiting and self.state is not JobState.WAITING:
            self._suspensions += 1
        self.state = JobState.WAITING if waiting else JobState.RUNNING
        self._cond.notify_all()

    def _ask(self, left: int) -> None:
        """Set the steps asked for (lock held); the group hears whether this rank wants to run on."""
        self._left = left
        if self._group is not None:
            self._group.report(self.rank, self.step, ready=left != 0)
        self._settle()

    # -- shared by the API and the servicer side ----------------------------------------------------------------
    def _require_alive(self) -> None:
        if not self.alive:
            raise self._ended_error()

    def _require(self, state: JobState, needed: str) -> None:
        self._check_process()
        self._require_alive()
        if self.state is not state:
            raise JobStateError(self.label, f"{self.state} at step {self.step}", needed)

    def _fail_view(self, why: str) -> None:
        if self._waiter is not None:
            self._waiter.done.set()
            self._waiter = None

    # -- called by the servicer (gRPC threads) ------------------------------------------------------------------
    def touch(self) -> None:
        self.last_seen = time.monotonic()

    def on_metadata(self, request: pb.Metadata) -> Optional[pb.EventReply]:
        """``SendMetadata``: the first one introduces the training; ``training_done`` ends it (``training_end.py``:
        cleanly, with the error our client reports in ``cur_node``, or as its process's exit code decides)."""
        with self._cond:
            self.touch()
            if request.training_done:
                self._on_done(request.cur_step, request.cur_node)
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
            facts = parse_heartbeat(message)
            self.free_run_capable = facts.free_run
            if facts.world is not None:
                self.world = facts.world
            if self._process is None and facts.pid is not None and facts.start is not None:
                self._process = ProcessWatch.of_pid(facts.pid, facts.start)   # None unless it is on this machine
            if self.state is JobState.LOST and self.reason.startswith("no heartbeat"):
                self.state, self.reason = JobState.RUNNING, ""
                self._report(f"{self.label} is back (heartbeat)")
                self._settle()

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
            self._cond.notify_all()      # the state moves at the wait that follows, with the hits
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
            if self._recheck_out:
                self._recheck_out, self._rechecks_done = False, self._rechecks_done + 1
            self._back_from_free_run(request.cur_step)
            if self.state is JobState.TERMINATED:
                return commands.terminate()
            if self.state in (JobState.FINISHED, JobState.CRASHED, JobState.MISMATCH) or self.graph is None:
                return commands.failed()        # MindInsight's answer before a graph: the client backs off
            if self.state is JobState.LOST:
                self._report(f"{self.label} is back (it called WaitCMD at step {request.cur_step})")
                self.state, self.reason = JobState.RUNNING, ""
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
            self._held = True
            if self._group is not None:
                self._group.report(self.rank, self.step, ready=self._left != 0, hit=arrived)
            self._settle()
            while True:
                if self._closing or not self.alive:
                    return commands.failed()
                reply = self._queue.popleft() if self._queue else self._next_run()
                if reply is not None:
                    if reply.WhichOneof("cmd") == "exit":
                        self._end(JobState.TERMINATED, f"terminated at step {self.step}")
                    elif reply.WhichOneof("cmd") == "run_cmd" and reply.run_cmd.run_level == RECHECK_LEVEL:
                        self._recheck_out = True
                    elif reply.WhichOneof("cmd") == "run_cmd":
                        self._held = False          # it leaves the suspension: running until its next wait
                        self._settle()
                    return reply                    # set / view / recheck: still suspended
                self._in_wait = True
                try:
                    self._cond.wait(_LOCKSTEP_POLL if self._left != 0 and self._group is not None else POLL)
                finally:
                    self._in_wait = False
                if not is_active():
                    self._hear_last_word()
                    self._lose(f"its connection closed while it was suspended at step {self.step} "
                               "(process killed or network lost)")
                    return commands.failed()
                if time.monotonic() - self._process_checked >= POLL:
                    self._process_checked = time.monotonic()
                    self._check_process()

    def _next_run(self) -> Optional[pb.EventReply]:
        """The run answer for a suspended training now, or None to keep it suspended (lock held)."""
        group = self._group
        if group is not None:
            if self._left != 0 and group.hit_stops(self.step, self._run_serial):
                self._ask(0)                        # another rank hit at this step: every rank stops here
            if not group.may_leave(self.rank, self.step):
                return None                         # lockstep: not every rank is ready to leave this step end
        elif self._left == 0:
            return None
        elif self.free_runs and self.free_run_capable and self._left != 1:
            self._free_from = self.step
            return commands.free_run(max(self._left, 0))
        if self._left > 0:
            self._left -= 1
        return commands.run_step()

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
        """Watchdog, every second: a watched process that exited ends the job; a running training that missed
        three heartbeats is lost (MindInsight's rule)."""
        with self._cond:
            if not self._in_wait:           # a blocked wait sees its connection close within POLL: it says so
                self._check_process()
            self._exit_overdue(now)
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

