"""The prompt's hits (``shell.py``): the ``hits`` command and the table every hit is shown in.

One row per (node, watchpoint) hit, in the order a person reads a failure, which is the order the step computed
them: by step, then the forward pass's op nodes, the gradients, the ops fed by the gradients (the optimizer's
updates, ``JobGraph.after_backward``), then parameters (the op that produced a NaN before the weight it spoiled),
each in graph order. The node column keeps the end of long names (``shell_text.short_name``), which is what tells a
weight from its gradient, and can be pasted back (``JobGraph.find`` takes the ``...`` form); the source column is the
training's own line behind the node (``Node.source_frame``): for our light source the line that calls a weight's
layer (also for its gradient; its definition where no ``construct`` calls it by attribute) and the line that computes
the loss.
"""
from __future__ import annotations

from typing import Optional, Sequence

from msdebug_hooks.server.graph import JobGraph, Node
from msdebug_hooks.server.hits import Hit
from msdebug_hooks.server.shell_text import short_name, source_location, table

__all__ = ["hits_table", "HEADER", "HitCommands"]

HEADER = ("step", "rank", "node", "slot", "watchpoint", "detail", "source")


def hits_table(hits: Sequence[Hit], graph: Optional[JobGraph] = None) -> str:
    """``N hit(s):`` and the table; ``graph`` (the job's) tells the updates from the forward pass's ops."""
    updates = graph.after_backward() if graph is not None else frozenset()

    def phase(node: Node) -> int:
        if node.is_parameter:
            return 3
        return 1 if node.category == "gradient" else 2 if node.name in updates else 0

    ordered = sorted(hits, key=lambda h: (h.step, phase(h.node), h.node.index))
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
        self.say(hits_table(hits, self.job.graph if self.job is not None else None))

    def do_hits(self, arg: str) -> None:
        """hits [all]: the hits of this suspension (all: every hit of the session)."""
        job = self._driver()
        hits = job.all_hits if arg.strip() == "all" else job.hits
        if not hits:
            self.say("no hits")
            return
        self._print_hits(hits)
