"""The training's own warnings, shown at the prompt of ``msdebug debug`` (not only in its output log).

The debugger in the training says what changes what the person can expect (a non-finite loss that MindSpore's
``LossMonitor`` will raise on, watched nodes that cannot be checked and will never hit, a loop whose loss is not
seen, a capture that failed) as a warning of the ``msdebug_hooks`` logger, which the training writes to its output.
Under ``msdebug debug`` that output is a log file: the prompt reads the lines added since its last look and shows
each of the project's warnings and errors once (``[msdebug] WARNING ...``, the format ``_log.get_logger`` gives when
the script set no handler of its own for ``msdebug_hooks``). A line is shown once even when the training says it
again (a loss that stays NaN). Left out: the training's echo of what the prompt itself asked (``stopping training:
the debugger server asked to terminate ...``, ``the training was terminated at step N``), which the prompt already
said. With ``--output -`` the training writes to the terminal and nothing is repeated.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

__all__ = ["TrainingNotices", "NOTICE"]

# "[msdebug] WARNING rank 0: debugger: ..." as _log.get_logger formats the project's records
NOTICE = re.compile(r"^\[msdebug\] (WARNING|ERROR|CRITICAL) (.*)$")
# the training's word that it obeyed the prompt's terminate (callback.py, functional_loop.py)
_ECHO = re.compile(r"the debugger server asked to terminate|debugger: the training was terminated at step")


class TrainingNotices:
    """Reads the new complete lines of a training's output log; returns its warnings not shown before."""

    def __init__(self, log: Optional[Path]) -> None:
        self.log = log
        self._offset = 0
        self._shown: set[str] = set()

    def new(self) -> list[str]:
        """The warnings written since the last call, each text once per session, in the order written."""
        if self.log is None:
            return []
        try:
            with open(self.log, "rb") as stream:
                stream.seek(self._offset)
                data = stream.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1            # a line still being written is read at the next look
        self._offset += end
        notices = []
        for line in data[:end].decode(errors="replace").splitlines():
            match = NOTICE.match(line.strip())
            if match and match.group(2) not in self._shown and not _ECHO.search(match.group(2)):
                self._shown.add(match.group(2))
                notices.append(f"{match.group(1).lower()} from the training: {match.group(2)}")
        return notices
