"""The ranks of one multi-rank job, driven together and kept in lockstep at step ends.

Why lockstep: the ranks of a data-parallel job meet in collectives (the gradient all-reduce) every step. If one rank
stays suspended while another runs on, the running one blocks in the next collective and MindSpore fails it after
its communication timeout (about 30 s on the CPU). So no rank leaves a step end until every live rank is at that
step end *and asked to run on*; then the group commits to that step (``committed``) and every rank leaves, even one
paused a moment later (its pause lands at the next step end, where the others stop too). A rank asked to run while
another is not is held (``running``) until the other is asked too, or pausing it returns it to ``waiting`` where it
is. A watchpoint hit on any rank stops, at that step end, the ranks whose run was asked before the hit
(``hit_stops``); a run asked after it goes on, so ``step`` / ``continue`` after a hit work on every rank.

The group never takes a job's lock: jobs consult it (``report``, ``may_leave``, ``hit_stops``, ``committed``)
while holding their own.
"""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Optional, Sequence, Union

from msdebug_hooks.conditions import Condition
from msdebug_hooks.server.errors import JobLost
from msdebug_hooks.server.hits import Hit, ServerWatchpoint

if TYPE_CHECKING:
    from msdebug_hooks.server.job import Job, JobState, NodesSpec

__all__ = ["RankGroup"]


class RankGroup:
    """Every connected rank of one job (``server.wait_for_ranks(n)``), sorted by rank."""

    def __init__(self, jobs: Sequence["Job"]) -> None:
        self.jobs = sorted(jobs, key=lambda j: j.rank)
        self._lock = threading.Lock()
        self._reached: dict[int, int] = {}       # rank -> the step end it last reported (its current one)
        self._ready: dict[int, bool] = {}        # rank -> asked to run on from there
        self._committed = -1                     # the last step end every rank was let go from
        self._hit_step: Optional[int] = None     # the step of the last hit on any rank
        self.hit_serial = 0                      # hits reported so far: a run asked before the last one stops
        for job in self.jobs:
            job.join_group(self)        # its current step counts as reached

    # -- lockstep (called by the jobs, with their own lock held) --------------------------------------------------
    def report(self, rank: int, step: int, *, ready: bool, hit: bool = False) -> None:
        """Rank ``rank`` is at step end ``step`` (or was last), asked to run on or not; ``hit``: it hit there."""
        with self._lock:
            self._reached[rank] = step
            self._ready[rank] = ready
            if hit:
                self._hit_step = step
                self.hit_serial += 1

    def hit_stops(self, step: int, run_serial: int) -> bool:
        """Whether a rank at step end ``step``, asked to run when ``run_serial`` hits were known, stops there."""
        with self._lock:
            return self._hit_step == step and self.hit_serial > run_serial

    def committed(self, step: int) -> bool:
        """Whether the ranks were let go from step end ``step`` (each rank there must leave)."""
        with self._lock:
            return self._committed >= step

    def may_leave(self, rank: int, step: int) -> bool:
        """Whether rank ``rank`` may leave step end ``step`` now: committed, or every live rank is there and ready
        (then this commits the group to it)."""
        with self._lock:
            if self._committed >= step:
                return True
            if not self._ready.get(rank, False):
                return False
            if all(self._reached.get(job.rank) == step and self._ready.get(job.rank, False)
                   for job in self.jobs if job.alive):
                self._committed = step
                return True
            return False

    # -- the API: the same verbs as a job, for every rank ---------------------------------------------------------
    @property
    def ranks(self) -> dict[int, "Job"]:
        return {job.rank: job for job in self.jobs}

    @property
    def live(self) -> list["Job"]:
        return [job for job in self.jobs if job.alive]

    @property
    def step(self) -> int:
        return min(job.step for job in self.jobs)

    @property
    def state(self) -> str:
        """One state when every rank is in it, else each rank's (``0:waiting/1:running``)."""
        states = {str(job.state) for job in self.jobs}
        return states.pop() if len(states) == 1 else "/".join(f"{j.rank}:{j.state}" for j in self.jobs)

    @property
    def hits(self) -> list[Hit]:
        return [hit for job in self.jobs for hit in job.hits]

    @property
    def all_hits(self) -> list[Hit]:
        return [hit for job in self.jobs for hit in job.all_hits]

    def watch(self, condition: Union[Condition, str], nodes: "NodesSpec" = None) -> list[ServerWatchpoint]:
        return [job.watch(condition, nodes) for job in self.live]

    def unwatch(self, watchpoint: Union[None, int] = None) -> list[int]:
        return sorted({i for job in self.live for i in job.unwatch(watchpoint)})

    def run(self, steps: Optional[int] = None, *, wait: bool = True, timeout: float = 300.0) -> list[Hit]:
        """Run every rank ``steps`` steps (None: until a hit or a pause); the hits of every rank, by rank. Every
        rank must be ``waiting``; ``JobStateError`` otherwise, and then no rank was asked to run."""
        live = self.live
        for job in live:                # check them all first: a rank left behind would hold the others
            job._require_waiting("run() needs every rank suspended (pause() or wait() first)")
        for job in live:
            job.run(steps, wait=False)
        if steps is None or not wait:
            return []
        return self._wait(live, timeout)

    def run_until_hit(self, timeout: float = 600.0) -> list[Hit]:
        """Run every rank until a hit on any of them (ranks already running just keep going); [] if they ended."""
        live = self.live
        marks = [job._run_on() for job in live]
        return self._wait(live, timeout, marks)

    def wait(self, timeout: float = 300.0) -> str:
        """Until every rank is suspended or ended; the group's state."""
        self._wait(self.live, timeout)
        return self.state

    def _wait(self, jobs: Sequence["Job"], timeout: float, marks: Optional[Sequence[Optional[int]]] = None
              ) -> list[Hit]:
        deadline = time.monotonic() + timeout
        for index, job in enumerate(jobs):
            try:
                left = max(deadline - time.monotonic(), 0.1)
                if marks is not None and marks[index] is not None:
                    job._wait_suspended(marks[index], left, "running until a watchpoint hits")
                else:
                    job.wait(timeout=left)
            except JobLost:
                if all(not j.alive for j in jobs):
                    raise
        return self.hits

    def pause(self, timeout: float = 300.0) -> int:
        """Pause every rank; they stop at the same step end. Returns it."""
        deadline = time.monotonic() + timeout
        for job in self.live:
            job._pause_ask()            # every rank first: one still asked to run would hold the others
        for job in self.live:
            job.pause(timeout=max(deadline - time.monotonic(), 0.1))
        return self.step

    def recheck(self, timeout: float = 120.0) -> list[Hit]:
        return [hit for job in self.live for hit in job.recheck(timeout=timeout)]

    def terminate(self, timeout: float = 120.0) -> list["JobState"]:
        """Tell every rank to stop (all at once: ranks stop together through their collectives)."""
        for job in self.jobs:
            job.terminate(wait=False)
        return [job.terminate(timeout=timeout) for job in self.jobs]
