"""The prompt's commands that let the training run (``shell.py``): continue, step, pause, recheck, terminate. With
several ranks they act on every rank, kept in lockstep (``group.py``). A blocking command blocks the prompt, never
the training, and Ctrl-C turns it into a pause."""
from __future__ import annotations

from typing import Sequence

from msdebug_hooks.server.hits import Hit
from msdebug_hooks.server.job import JobState
from msdebug_hooks.server.shell_parse import BadCommand

__all__ = ["RunCommands"]


class RunCommands:
    """Mixin of ``DebuggerShell``: it provides ``say``, ``job``, ``group``, ``timeout``, ``bad_input``, ``_driver``
    (the group or the job), ``_job``, ``_jobs``, ``_reap`` (follow the script's next training) and ``_print_hits``."""

    def _after_run(self, hits: Sequence[Hit]) -> None:
        """Say where each rank stands after a run, follow the script once every rank ended, show the hits."""
        for job in self._jobs():
            rank = f" (rank {job.rank})" if self.group is not None else ""
            if job.alive:
                self.say(f"job {job.id}{rank} {job.state} at step {job.step}")
            else:
                self.say(f"job {job.id}{rank} {job.state}: {job.reason}")
        if not any(job.alive for job in self._jobs()) and all(job.state is not JobState.LOST
                                                               for job in self._jobs()):
            self._reap(session_over=False)
        self._print_hits(hits)

    def do_continue(self, arg: str) -> None:
        """continue (c, cont): run until a watchpoint hits or the script ends (its later trainings too, with the same
        watchpoints); Ctrl-C pauses it at the next step end."""
        while True:
            job = self._driver()
            try:
                hits = job.run_until_hit(timeout=self.timeout)
            except KeyboardInterrupt:
                self.say("pausing at the next step end ...")
                job.pause()
                self._after_run([])
                return
            self._after_run(hits)
            if hits or self.bad_input or self._driver() is job or not self.job.alive:
                return
            self.say(f"continuing job {self.job.id}")

    do_c = do_cont = do_continue

    def do_step(self, arg: str) -> None:
        """step [N] (s, next, n): run N steps (default 1); stops earlier on a hit; Ctrl-C pauses."""
        text = arg.strip() or "1"
        if not text.isdigit() or int(text) < 1:
            raise BadCommand(f"step {text!r}: give a number of steps >= 1")
        job = self._driver()
        try:
            hits = job.run(int(text), timeout=self.timeout)
        except KeyboardInterrupt:
            self.say("pausing at the next step end ...")
            job.pause()
            hits = []
        self._after_run(hits)

    do_s = do_next = do_n = do_step

    def do_pause(self, arg: str) -> None:
        """pause: stop a running training at its next step end."""
        step = self._driver().pause()
        self.say(f"paused at step {step}")

    def do_recheck(self, arg: str) -> None:
        """recheck: evaluate every watchpoint again on this step's values."""
        hits = self._driver().recheck()
        self.say(f"recheck at step {self._job().step}: {len(hits)} hit(s)")
        self._print_hits(hits)

    def do_terminate(self, arg: str) -> None:
        """terminate: stop the training (it ends cleanly, its end hooks run)."""
        self._driver().terminate()
        for job in self._jobs():
            self.say(f"job {job.id} {job.state}")
        self._reap()
