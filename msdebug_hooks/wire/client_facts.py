"""What our client tells our server beyond MindInsight's protocol, in fields MindInsight reads nothing from.

* The heartbeat's ``message`` (MindInsight reads only a heartbeat's period):
  ``Debugger is alive (msdebug-hooks; free-run; pid=P; start=T; rank=R; world=W)``. ``free-run``: free runs
  (``protocol.py``, ``debugger/free_run.py``). ``pid`` / ``start``: the training's process and its start time in
  clock ticks since boot (``/proc/self/stat``), so a server on the same machine can watch that very process and see
  it die within a second while it runs, instead of after three missed heartbeats (``server/liveness.py``).
  ``rank`` / ``world``: the rank and the job's number of ranks, so a server can say that the other ranks of a job
  need ports of their own.
* The ``Metadata.cur_node`` of the training-done message of a training that raised:
  ``msdebug-hooks:error:<the error's last line>`` (e.g. ``ValueError: loss is NAN``). MindInsight reads nothing of a
  training-done message but the flag; our server reports the training ``crashed`` with that line, not ``finished``.
  A clean training-done said at the interpreter's exit (a hand-written loop's end is seen only then) carries
  ``msdebug-hooks:at-exit``: the process's exit status, which the client cannot see from there (``sys.exit(1)``
  after the loop), decides, so a server that watches the process waits for it before it says ``finished``. When the
  script called ``sys.exit`` with a non-zero status before that exit, the mark carries it
  (``msdebug-hooks:at-exit:status=1``), for a server that cannot see the exit code (a process it did not start,
  reaped by its own parent).

The client writes these (``heartbeat_message``, ``error_note``) and the server reads them (``parse_heartbeat``,
``parse_error``): one module, so the two sides cannot drift apart.
"""
from __future__ import annotations

import os
import re
import traceback
from dataclasses import dataclass
from typing import Optional

from msdebug_hooks.wire.protocol import FREE_RUN_CAPABLE

__all__ = ["ClientFacts", "heartbeat_message", "parse_heartbeat", "ERROR_MARK", "AT_EXIT_MARK", "error_note",
           "parse_error", "said_at_exit", "exit_status_said"]

ERROR_MARK = "msdebug-hooks:error:"
AT_EXIT_MARK = "msdebug-hooks:at-exit"
MAX_ERROR_CHARS = 400
_FIELD = re.compile(r"\b(pid|start|rank|world)=(\d+)\b")


@dataclass(frozen=True)
class ClientFacts:
    """What a heartbeat said: free runs, the process (pid, start time), rank and world size (None: not said)."""

    free_run: bool = False
    pid: Optional[int] = None
    start: Optional[int] = None
    rank: Optional[int] = None
    world: Optional[int] = None


def _own_start_time() -> Optional[int]:
    try:
        with open("/proc/self/stat", "rb") as stat:
            fields = stat.read().decode("ascii", "replace").rpartition(")")[2].split()
    except OSError:
        return None             # no /proc (not Linux): the server watches the process by its heartbeats only
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


def heartbeat_message(rank: int = 0, world: int = 1) -> str:
    """This process's heartbeat text."""
    facts = [FREE_RUN_CAPABLE, f"pid={os.getpid()}"]
    started = _own_start_time()
    if started is not None:
        facts.append(f"start={started}")
    facts += [f"rank={rank}", f"world={world}"]
    return f"Debugger is alive (msdebug-hooks; {'; '.join(facts)})"


def parse_heartbeat(message: str) -> ClientFacts:
    """The facts in a heartbeat's text; an unknown text (MindSpore's own client: "Debugger is alive") says none."""
    values = {key: int(value) for key, value in _FIELD.findall(message or "")}
    return ClientFacts(free_run=FREE_RUN_CAPABLE in (message or ""), **values)


def error_note(error: Optional[BaseException], *, at_exit: bool = False,
               exit_status: Optional[int] = None) -> Optional[str]:
    """The ``cur_node`` that tells the server how the training ended; for a clean end (no error, ``SystemExit(0)``)
    None, or ``AT_EXIT_MARK`` when said at the interpreter's exit (with ``exit_status``, a non-zero status the script
    gave ``sys.exit``, when there is one)."""
    if error is None or (isinstance(error, SystemExit) and error.code in (None, 0)):
        if at_exit and exit_status:
            return f"{AT_EXIT_MARK}:status={int(exit_status)}"
        return AT_EXIT_MARK if at_exit else None
    lines = traceback.format_exception_only(type(error), error)
    said = next((line for line in lines if not line.startswith(" ")), lines[-1])   # "ValueError: ..." (not notes)
    return ERROR_MARK + (" ".join(said.split()) or type(error).__name__)[:MAX_ERROR_CHARS]


def parse_error(cur_node: str) -> Optional[str]:
    """The error line a training-done message carries, or None (a clean end, or another client)."""
    if not cur_node.startswith(ERROR_MARK):
        return None
    return cur_node[len(ERROR_MARK):].strip()[:MAX_ERROR_CHARS] or "an error"


def said_at_exit(cur_node: str) -> bool:
    """Whether a clean training-done message was said at the interpreter's exit (``AT_EXIT_MARK``)."""
    return cur_node == AT_EXIT_MARK or cur_node.startswith(AT_EXIT_MARK + ":status=")


def exit_status_said(cur_node: str) -> Optional[int]:
    """The non-zero ``sys.exit`` status a training-done said at exit carries, or None."""
    prefix = AT_EXIT_MARK + ":status="
    tail = cur_node[len(prefix):] if cur_node.startswith(prefix) else ""
    return int(tail) if tail.lstrip("-").isdigit() and int(tail) else None
