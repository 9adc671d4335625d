"""The prompt's watchpoint commands (``shell.py``): watch, unwatch, watchpoints. With several ranks, watch and
unwatch act on every rank (the group); the list shows the current rank's."""
from __future__ import annotations

import shlex

from msdebug_hooks.server.shell_parse import BadCommand
from msdebug_hooks.server.shell_text import table

__all__ = ["WatchCommands"]


class WatchCommands:
    """Mixin of ``DebuggerShell``: it provides ``say``, ``_job`` and ``_driver`` (the group or the job)."""

    def do_watch(self, arg: str) -> None:
        """watch CONDITION [PARAM=VALUE ...] [NODES ...]: set a watchpoint. CONDITION is a MindInsight id
        (weight_overflow, gradient_too_large, tensor_overflow, weight_not_changed, ...) or a condition name,
        optionally with :PARAM=VALUE,...; NODES are names, globs or a category (default: what the condition is
        for, e.g. every weight for weight_*; '*' for all). Example: watch gradient_too_large abs_mean_gt=1e3 *"""
        tokens = shlex.split(arg)
        if not tokens:
            raise BadCommand("watch needs a condition, e.g. watch weight_overflow")
        name, params, nodes = tokens[0], [], []
        for token in tokens[1:]:
            (params if "=" in token else nodes).append(token)
        spec = name if not params else f"{name}{',' if ':' in name else ':'}{','.join(params)}"
        selected: object = None
        if len(nodes) == 1:
            selected = nodes[0]
        elif nodes:
            job = self._job()
            chosen: dict[str, None] = {}
            for pattern in nodes:
                for node in job.nodes(pattern) if job.graph.find(pattern) is None else [job.node(pattern)]:
                    chosen.setdefault(node.name, None)
            selected = list(chosen)
        made = self._driver().watch(spec, selected)
        for watchpoint in made if isinstance(made, list) else [made]:
            self.say(f"watchpoint {watchpoint.id}: {watchpoint.label} on {len(watchpoint.nodes)} node(s)")

    def do_unwatch(self, arg: str) -> None:
        """unwatch ID|all: delete a watchpoint, or all of them."""
        target = arg.strip()
        if target not in ("all", "*") and not target.isdigit():
            raise BadCommand(f"unwatch {target!r}: give a watchpoint id or 'all'")
        ids = self._driver().unwatch(None if target in ("all", "*") else int(target))
        self.say(f"deleted watchpoint(s) {', '.join(map(str, ids)) or 'none'}")

    def do_watchpoints(self, arg: str) -> None:
        """watchpoints (wp): the current job's watchpoints."""
        rows = [(w.id, w.label, w.condition, len(w.nodes)) for w in self._job().watchpoints.values()]
        self.say(table(rows, ("id", "as given", "condition", "nodes"), numeric=(0, 3)))

    do_wp = do_watchpoints
