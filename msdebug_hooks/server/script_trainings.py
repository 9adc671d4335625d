"""The trainings of a script the prompt started (``msdebug debug``). A script may train more than once (several
``Model.train`` calls, often one per epoch), so its first training's end is not its end: wait for its next training
or its exit, and give the next training the watchpoints of the one before, so a debugged script stays watched from
its first step to its last."""
from __future__ import annotations

import subprocess
import time
from typing import Callable, Optional

from msdebug_hooks.errors import ConfigError
from msdebug_hooks.server.errors import JobError, JobLost
from msdebug_hooks.server.hits import ServerWatchpoint
from msdebug_hooks.server.job import Job
from msdebug_hooks.server.server import DebuggerServer

__all__ = ["REAP_SECONDS", "next_training", "carry_watchpoints"]

REAP_SECONDS = 60.0    # how long a training terminated at its step 0 gets to take the terminate
QUIET_SECONDS = 2.0    # a script that neither exits nor trains again within this is said to run on (evaluating, saving)


def next_training(server: DebuggerServer, process, say: Callable[[str], None], *, take: bool,
                  patience: float = 3600.0) -> Optional[Job]:
    """Wait until ``process`` trains again or exits. With ``take`` the next training is returned, waiting at its
    step 0; without, each one is terminated there, so the script runs to its end and exits on its own. None once the
    process has exited (its code is said). A script may run on for minutes between trainings (an evaluation, a
    checkpoint): it gets ``patience`` seconds (the session's ``--timeout``) and is killed only after that; Ctrl-C
    meanwhile ends it (SIGTERM). A killed script exits with a negative code, which the prompt reports as a run that
    could not be looked at."""
    deadline = time.monotonic() + patience
    told = False
    try:
        while True:
            left = deadline - time.monotonic()
            try:
                late = server.wait_for_training(timeout=max(left if told else min(left, QUIET_SECONDS), 0.0),
                                                process=process)
            except JobLost:            # the process exited
                break
            except TimeoutError:
                if not told and time.monotonic() < deadline:
                    told = True
                    say(f"the script runs on after its training ended; waiting up to {patience:g} s (--timeout) for "
                        "it to train again or exit; Ctrl-C ends it")
                    continue
                process.kill()
                say(f"*** the script neither trained again nor exited within {patience:g} s of its training's end; "
                    "killed")
                break
            if not late.alive:
                continue
            if take:
                return late
            late.terminate(timeout=REAP_SECONDS)
            say(f"job {late.id}: the script trained again after the session ended; terminated at step {late.step}")
    except KeyboardInterrupt:
        process.terminate()
        say("*** stopped waiting for the script: it was ended (SIGTERM)")
    say(f"training exited with code {_exit_code(process)}")
    return None


def _exit_code(process) -> int:
    try:
        return process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait(30)


def carry_watchpoints(previous: Job, job: Job) -> tuple[list[ServerWatchpoint], list[str]]:
    """Set ``previous``'s watchpoints on ``job`` as they were asked for: the condition text and the node selection,
    resolved again in the new graph (every weight is the new network's weights; named nodes must exist there).
    Returns the watchpoints made and, for each one that could not be (a named node the new graph lacks), why."""
    made, refused = [], []
    for watchpoint in previous.watchpoints.values():
        try:
            made.append(job.watch(watchpoint.label, watchpoint.asked_nodes))
        except (ConfigError, JobError, KeyError, ValueError, TypeError) as exc:
            refused.append(f"watchpoint {watchpoint.id} ({watchpoint.label}) could not be set on job {job.id}: "
                           f"{str(exc).strip(chr(34))}")
    return made, refused
