"""The states of a debugger job, what each means, and which ones are ends.

A running job is ``waiting`` (suspended at a step end or at step 0, nothing asked of it: commands are obeyed now) or
``running`` (asked to run: taking steps, or held at a step end for the other ranks of its group). How it ends:
``finished`` only when the training said it ended cleanly; ``crashed`` when it said it raised (with the error's
last line) or its process exited with a non-zero code; ``terminated`` when we told it to; ``lost`` when its
connection closed while it was suspended, three heartbeats were missed, or its process vanished without a word (exit
code not visible); ``mismatch`` when its ``ms_version`` could not be accepted.
"""
from __future__ import annotations

import enum

__all__ = ["JobState", "ENDED"]


class JobState(str, enum.Enum):
    CONNECTING = "connecting"     # metadata (and maybe the graph) received; not suspended yet
    WAITING = "waiting"           # suspended at a step end (or step 0), nothing asked: commands are obeyed now
    RUNNING = "running"           # asked to run (also while a rank is held for the others of its group)
    FINISHED = "finished"         # the training said it ended, cleanly
    CRASHED = "crashed"           # it raised (it said so), or its process exited with a non-zero code
    TERMINATED = "terminated"     # we told it to exit
    LOST = "lost"                 # disconnected, stopped heartbeating, or its process vanished without a word
    MISMATCH = "mismatch"         # its ms_version could not be accepted

    def __str__(self) -> str:
        return self.value


ENDED = (JobState.FINISHED, JobState.CRASHED, JobState.TERMINATED, JobState.LOST, JobState.MISMATCH)
