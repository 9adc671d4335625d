"""The prompt's hits (``shell.py``): the ``hits`` command and the table every hit is shown in.

One row per (node, watchpoint) hit, in the order a person reads a failure: by step, then op nodes before parameters
(the op that produced a NaN before the weight it spoiled), then graph order. The node column keeps the end of long
names (``shell_text.short_name``), which is what tells a weight from its gradient; the source column is the
training's own line behind the node (``Node.source_frame``): for our light source the line that defines a weight's
layer (also for its gradient) and the line that computes the loss.
"""
from __future__ import annotations

from typing import Sequence

from msdebug_hooks.server.hits import Hit
from msdebug_hooks.server.shell_text import short_name, source_location, table

__all__ = ["hits_table", "HEADER", "HitCommands"]

HEADER = ("step", "rank", "node", "slot", "watchpoint", "detail", "source")


def hits_table(hits: Sequence[Hit]) -> str:
    """``N hit(s):`` and the table."""
    ordered = sorted(hits, key=lambda h: (h.step, h.node.is_parameter, h.node.index))
    rows = [(h.step, h.rank, short_name(h.node.name), h.slot, h.watchpoint.label, h.describe(),
             source_location(h.node)) for h in ordered]
    return f"{len(hits)} hit(s):\n" + table(rows, HEADER, numeric=(0, 1, 3))


class HitCommands:
    """Mixin of ``DebuggerShell``: it provides ``say``, ``_driver`` and ``saw_hits`` (which the exit code reads)."""

    def _print_hits(self, hits: Sequence[Hit]) -> None:
        """Show ``hits`` (nothing when there are none) and remember that the session saw some."""
        if not hits:
            return
        self.saw_hits = True
        self.say(hits_table(hits))

    def do_hits(self, arg: str) -> None:
        """hits [all]: the hits of this suspension (all: every hit of the session)."""
        job = self._driver()
        hits = job.all_hits if arg.strip() == "all" else job.hits
        if not hits:
            self.say("no hits")
            return
        self._print_hits(hits)
