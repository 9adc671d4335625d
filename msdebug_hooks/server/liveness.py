"""Is a training's process still there, and how did it end? The server sees a training's calls, not its process.

A training that runs between two step ends makes no call, so a process that dies then is not seen by its calls: its
connection closes, but gRPC tells the server only through a call in flight. Three missed heartbeats (MindInsight's
rule: about 90 s) would be the only sign. Where the process is on this machine it is watched directly, every second:

* a ``subprocess.Popen`` the caller gave (``bind_process``, ``wait_for_training(process=...)``, the script
  ``msdebug debug`` started): its exit code is read at once;
* the process our client names in its heartbeats (pid and start time, ``wire/client_facts.py``): watched through
  ``/proc/<pid>/stat`` when this machine shows a process with that pid *and* that start time, so a reused pid, or a
  pid of another machine or pid namespace, is never taken for it. Its exit code is visible only while it is a zombie
  (its parent, e.g. msrun, has not collected it yet); otherwise the server says it ended, code unknown.
"""
from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import Any, Optional

__all__ = ["ProcessEnd", "ProcessWatch", "describe_exit", "start_time"]


@dataclass(frozen=True)
class ProcessEnd:
    """How a watched process ended: ``code`` is its exit code (negative: the signal that killed it), or None when
    this server cannot see it (not its child, already collected)."""

    code: Optional[int]

    @property
    def clean(self) -> bool:
        return self.code == 0

    def describe(self) -> str:
        return describe_exit(self.code)


def describe_exit(code: Optional[int]) -> str:
    """``exited with code 1``, ``was killed by SIGKILL (exit code -9)``, or that the code is not visible."""
    if code is None:
        return "ended (its exit code is not visible to this server: not its child)"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name} (exit code {code})"
    return f"exited with code {code}"


def _stat_fields(pid: int) -> Optional[list[str]]:
    """The fields of ``/proc/<pid>/stat`` after the command name (field 3, the state, first); None if absent."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read().decode("ascii", "replace")
    except OSError:
        return None
    return text.rpartition(")")[2].split()      # the name may hold spaces and ')': cut at the last one


def start_time(pid: int) -> Optional[int]:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22), or None."""
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20 or not fields[19].isdigit():
        return None
    return int(fields[19])


class ProcessWatch:
    """One process to watch: a ``Popen``, or a pid with its start time. ``ended()`` is None while it runs."""

    def __init__(self, *, popen: Any = None, pid: Optional[int] = None, started: Optional[int] = None) -> None:
        self.popen = popen
        self.pid = popen.pid if popen is not None else pid
        self.started = started

    @classmethod
    def of_pid(cls, pid: int, started: int) -> Optional["ProcessWatch"]:
        """A watch on ``pid`` if this machine shows that very process now (same start time), else None."""
        if pid <= 0 or pid == os.getpid() or start_time(pid) != started:
            return None
        return cls(pid=pid, started=started)

    @property
    def exit_visible(self) -> bool:
        return self.popen is not None

    def ended(self) -> Optional[ProcessEnd]:
        if self.popen is not None:
            code = self.popen.poll()
            return None if code is None else ProcessEnd(code)
        fields = _stat_fields(self.pid)
        if fields is None or len(fields) < 20 or fields[19] != str(self.started):
            return ProcessEnd(None)                 # gone (collected), or the pid is another process's now
        if fields[0] in ("Z", "X"):                 # a zombie keeps its wait status in field 52
            status = fields[49] if len(fields) > 49 else ""
            return ProcessEnd(os.waitstatus_to_exitcode(int(status)) if status.isdigit() else None)
        return None
