"""The ranks of one multi-rank job, driven together and kept in lockstep at step ends.

Why lockstep: the ranks of a data-parallel job meet in collectives (the gradient all-reduce) every step. If one rank
stays suspended while another runs on, the running one blocks in the next collective and MindSpore fails it after
its communication timeout (about 30 s on the CPU). So a rank that reaches a step end is held there (it looks
"running") until every live rank of the group has reached the same step end; a watchpoint hit on any rank at that
step then suspends every rank there, and nobody is left waiting inside a collective while a person looks.

The group never takes a job's lock: jobs consult it (``released``, ``stop_step``) while holding their own.
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
        self._reached: dict[int, int] = {}       # rank -> last step end it reported
        self._stop_step: Optional[int] = None    # a rank reported hits at this step: every rank stops there
        for job in self.jobs:
            job.join_group(self)        # its current step counts as reached

    # -- lockstep (called by the jobs, with their own lock held) --------------------------------------------------
    def report(self, rank: int, step: int, hit: bool) -> None:
        with self._lock:
            self._reached[rank] = step
            if hit:
                self._stop_step = step

    def stop_here(self, step: int) -> bool:
        with self._lock:
            return self._stop_step == step

    def released(self, step: int) -> bool:
        """Whether every live rank has reached the step end ``step`` and none hit there."""
        with self._lock:
            if self._stop_step == step:
                return False
            return all(self._reached.get(job.rank, -1) >= step for job in self.jobs if job.alive)

    # -- the API: the same verbs as a job, for every rank ---------------------------------------------------------
    @property
    def ranks(self) -> dict[int, "Job"]:
        return {job.rank: job for job in self.jobs}

    @property
    def step(self) -> int:
        return min(job.step for job in self.jobs)

    @property
    def state(self) -> str:
        states = {str(job.state) for job in self.jobs}
        return states.pop() if len(states) == 1 else "/".join(f"{j.rank}:{j.state}" for j in self.jobs)

    @property
    def hits(self) -> list[Hit]:
        return [hit for job in self.jobs for hit in job.hits]

    @property
    def all_hits(self) -> list[Hit]:
        return [hit for job in self.jobs for hit in job.all_hits]

    def watch(self, condition: Union[Condition, str], nodes: "NodesSpec" = None) -> list[ServerWatchpoint]:
        return [job.watch(condition, nodes) for job in self.jobs if job.alive]

    def unwatch(self, watchpoint: Union[None, int] = None) -> list[int]:
        return sorted({i for job in self.jobs if job.alive for i in job.unwatch(watchpoint)})

    def run(self, steps: Optional[int] = None, *, timeout: float = 300.0) -> list[Hit]:
        """Run every rank ``steps`` steps (None: until a hit or a pause); the hits of every rank, by rank."""
        live = [job for job in self.jobs if job.alive]
        for job in live:
            job.run(steps, wait=False)
        if steps is None:
            return []
        return self._wait(live, timeout)

    def run_until_hit(self, timeout: float = 600.0) -> list[Hit]:
        live = [job for job in self.jobs if job.alive]
        for job in live:
            job.run(None, wait=False)
        return self._wait(live, timeout)

    def _wait(self, jobs: Sequence["Job"], timeout: float) -> list[Hit]:
        deadline = time.monotonic() + timeout
        for job in jobs:
            try:
                job.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except JobLost:
                if all(not j.alive for j in jobs):
                    raise
        return self.hits

    def pause(self, timeout: float = 300.0) -> int:
        for job in self.jobs:
            if job.alive:
                job.pause(timeout=timeout)
        return self.step

    def recheck(self, timeout: float = 120.0) -> list[Hit]:
        return [hit for job in self.jobs if job.alive for hit in job.recheck(timeout=timeout)]

    def terminate(self, timeout: float = 120.0) -> list["JobState"]:
        """Tell every rank to stop (all at once: ranks stop together through their collectives)."""
        for job in self.jobs:
            job.terminate(wait=False)
        return [job.terminate(timeout=timeout) for job in self.jobs]
