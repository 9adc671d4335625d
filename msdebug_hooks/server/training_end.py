"""How a debugger job ends: the training's own word (its training-done message, with the error it raised) and its
process's exit, combined into one verdict (``states.py``). The ending half of ``training_link.TrainingLink``, which
holds the state these methods read; every method runs with the link's lock held.

A clean training-done is not always the last word. A hand-written loop's end is seen only at the interpreter's exit
(``debugger/functional_loop.py``), where the client cannot see the exit status (``sys.exit(1)`` after the loop, a
signal): such a message is marked as said at exit (``wire/client_facts.py``), and while this server watches the
process (``liveness.py``) the job stays ``running`` until the process exits: ``finished`` on exit code 0,
``crashed`` with the code otherwise. ``EXIT_PATIENCE`` bounds that wait, for a process that lingers after its last
word. Where this server cannot see the exit code (a process it did not start, reaped by its own parent), the
client's word decides: ``crashed`` when the script gave ``sys.exit`` a non-zero status (the word carries it),
``finished`` otherwise.
"""
from __future__ import annotations

import time
from typing import Optional

from msdebug_hooks.server.errors import JobCrashed, JobLost, JobStateError
from msdebug_hooks.server.states import JobState
from msdebug_hooks.wire.client_facts import exit_status_said, parse_error, said_at_exit

__all__ = ["TrainingEnd", "EXIT_PATIENCE"]

EXIT_PATIENCE = 30.0     # seconds a process that said its training ended at exit gets to exit
LAST_WORD_SECONDS = 5.0  # how long a live process whose suspended wait was dropped gets to say how it ended
LAST_WORD_AFTER_EXIT = 0.5   # ... and how long its word may still take once the process has exited


class TrainingEnd:
    """Mixin of ``TrainingLink``: the training-done message, the watched process's exit, and the job's end."""

    _exiting: Optional[float] = None     # when a clean training-done said at exit came (its exit code decides)

    def _ended_error(self) -> Exception:
        if self.state is JobState.LOST:
            return JobLost(self.label, self.reason)
        if self.state is JobState.CRASHED:
            return JobCrashed(self.label, self.reason)
        return JobStateError(self.label, str(self.state), self.reason or "the training has ended")

    def _on_done(self, step: int, cur_node: str) -> None:
        """The training said it ended: with an error, crashed; cleanly at exit with its process watched, the exit
        code decides (see the module docstring); cleanly otherwise, finished."""
        if not self.alive:
            return
        self.step = max(self.step, step)       # a free run reports no step until it ends
        self.error = parse_error(cur_node)
        if self.error is not None:
            self._end(JobState.CRASHED, f"the training raised at step {self.step}: {self.error}")
        elif said_at_exit(cur_node) and exit_status_said(cur_node) is not None and \
                (self._process is None or not self._process.exit_visible):
            self._end(JobState.CRASHED, f"its training loop ended at step {self.step}, then its script called "
                                        f"sys.exit({exit_status_said(cur_node)})")
        elif said_at_exit(cur_node) and self._process is not None:
            self._exiting = time.monotonic()
            self._left, self._held = 0, False
            self._queue.clear()
            self._settle()
        else:
            self._end(JobState.FINISHED, f"the training finished at step {self.step}")
        self._check_process()

    def _hear_last_word(self) -> None:
        """A suspended wait's connection closed while the watched process still runs: Ctrl-C in the training
        interrupts the wait, and the training then says how it ended (``KeyboardInterrupt``) and exits. Wait up to
        ``LAST_WORD_SECONDS`` for that word (``LAST_WORD_AFTER_EXIT`` once the process is gone) before the job is
        taken for lost."""
        if self._process is None or self._process.ended() is not None:
            return
        deadline = time.monotonic() + LAST_WORD_SECONDS
        self._in_wait = True          # the watchdog leaves the process to this wait, which says what it saw
        try:
            while self.alive and time.monotonic() < deadline and not self._closing:
                if self._process.ended() is not None:    # its word, sent before it exited, may still be on its way
                    deadline = min(deadline, time.monotonic() + LAST_WORD_AFTER_EXIT)
                self._cond.wait(0.05)
        finally:
            self._in_wait = False

    def _exit_overdue(self, now: float) -> None:
        """Watchdog: a process that said its training ended at exit and is still there after ``EXIT_PATIENCE``."""
        if self._exiting is not None and now - self._exiting > EXIT_PATIENCE:
            self._exiting = None
            self._end(JobState.FINISHED, f"the training finished at step {self.step} (its process had not "
                                         f"exited {EXIT_PATIENCE:g} s after saying so)")

    def _check_process(self) -> None:
        """A watched process that exited ends the job (crashed with its code, or lost; after a training-done said
        at exit: finished or crashed by its code), and an ended job's exit code is noted once it is seen."""
        if self._process is None or (not self.alive and (self.exit_code is not None or
                                                         not self._process.exit_visible)):
            return
        end = self._process.ended()
        if end is None:
            return
        self.exit_code = end.code
        if not self.alive:
            if self.state is JobState.CRASHED:
                self.reason += f" (exit code {end.code})"
            elif end.code:
                self.reason += f"; its process then {end.describe()}"
            return
        how = f"its process{f' (pid {self.pid})' if not self._process.exit_visible else ''} {end.describe()}"
        where = f"at step {self.step}" if self._free_from is None else \
            f"at step {self.step} or later (a free run started there; its steps are told only when it ends)"
        if self._exiting is not None:
            self._exiting = None
            if end.code:
                self._end(JobState.CRASHED, f"its training loop ended at step {self.step}, then {how}")
            else:
                self._end(JobState.FINISHED, f"the training finished at step {self.step}")
        elif end.code:        # non-zero (a bound Popen's code, or a zombie's status): crashed
            self._end(JobState.CRASHED, f"{how} {where}")
        else:
            self._lose(f"{how} {where} without ending the training")

    def _end(self, state: JobState, reason: str) -> None:
        if not self.alive:
            return
        self.state, self.reason = state, reason
        self._left, self._held = 0, False
        self._exiting = None
        self._queue.clear()
        self._fail_view(reason)
        said = "" if state in (JobState.FINISHED, JobState.TERMINATED) else f" {state}"
        self._report(f"{self.label}{said}: {reason}")
        self._cond.notify_all()

    def _lose(self, reason: str) -> None:
        self._end(JobState.LOST, reason)
