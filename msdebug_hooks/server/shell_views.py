"""The prompt's views (``shell.py``): the graph's nodes, a node's source lines, tensor values and statistics, the
training's output. Each reads the current job (with several ranks: the current rank, ``job N`` switches)."""
from __future__ import annotations

import shlex

import numpy as np

from msdebug_hooks._files import atomic_path
from msdebug_hooks.server.graph import CATEGORIES
from msdebug_hooks.server.shell_parse import BadCommand
from msdebug_hooks.server.shell_text import table

__all__ = ["ViewCommands", "MAX_ROWS"]

MAX_ROWS = 60


class ViewCommands:
    """Mixin of ``DebuggerShell``: it provides ``say``, ``_job``, ``_node`` and ``output_log``."""

    def do_nodes(self, arg: str) -> None:
        """nodes [PATTERN] [CATEGORY] [stack=TEXT] [all] (search): list nodes. PATTERN is a glob (*, ?) or a
        substring; CATEGORY one of weight, gradient, activation, parameter, operator; stack=TEXT matches source
        lines (e.g. stack=train.py:42); 'all' lifts the 60-row limit."""
        pattern, category, stack, show_all = "", None, "", False
        for token in shlex.split(arg):
            if token in CATEGORIES:
                category = token
            elif token.startswith("stack="):
                stack = token[len("stack="):]
            elif token == "all":
                show_all = True
            else:
                pattern = token
        nodes = self._job().nodes(pattern, category=category, stack=stack)
        shown = nodes if show_all else nodes[:MAX_ROWS]
        rows = [(n.index, n.category, n.type, n.outputs, n.name) for n in shown]
        self.say(table(rows, ("#", "category", "type", "outputs", "name"), numeric=(0, 3)))
        if len(shown) < len(nodes):
            self.say(f"... {len(nodes) - len(shown)} more (add 'all', or narrow the pattern)")
        self.say(f"{len(nodes)} node(s)")

    do_search = do_nodes

    def do_source(self, arg: str) -> None:
        """source NAME (where): the source lines behind a node, innermost first; > marks the training's own line.
        A parameter has none of its own: it shows those of the op it feeds (with our light source, the line that
        calls its layer, then the one that defines it)."""
        node = self._node(arg.strip())
        stack = node.stack or node.borrowed_stack
        if not stack:
            self.say(f"{node.name}: the graph carries no source lines for it (the dump source has them)")
            return
        if not node.stack:
            self.say(f"{node.name}: a parameter has no source lines of its own; those of {node.stack_from}, which "
                     "uses it:")
        own = node.source_frame
        for frame in stack:
            self.say(f"{'>' if frame is own else ' '} {frame.file_path}:{frame.line_no}  {frame.code_line}")

    do_where = do_source

    def _tensor_args(self, arg: str, extra: int = 0) -> tuple[list[str], str, int]:
        words, step, slot = [], "current", 0
        for token in shlex.split(arg):
            if token in ("previous", "prev"):
                step = "previous"
            elif token in ("current", "cur"):
                step = "current"
            elif token.startswith("slot="):
                if not token[5:].isdigit():
                    raise BadCommand(f"{token}: slot must be an int >= 0")
                slot = int(token[5:])
            else:
                words.append(token)
        if len(words) != 1 + extra:
            raise BadCommand("give the node name" + (" and a file" if extra else ""))
        return words, step, slot

    def do_stats(self, arg: str) -> None:
        """stats NAME [previous] [slot=N]: statistics of a node's output (computed by the training)."""
        (name,), step, slot = self._tensor_args(arg)
        s = self._job().statistics(name, step, slot=slot)
        none = "no finite values"          # not the protocol's 0: a NaN tensor has no min, max or mean
        rows = [("dtype", s.dtype), ("shape", list(s.shape)), ("count", s.count),
                ("min", s.min if s.finite_count else none), ("max", s.max if s.finite_count else none),
                ("mean", s.mean if s.finite_count else none), ("nan", s.nan_count), ("+inf", s.pos_inf_count),
                ("-inf", s.neg_inf_count),
                ("zero", s.zero_count), ("< 0", s.negative_count), ("> 0", s.positive_count)]
        self.say(f"{self._node(name).name} ({step}, step {self._job().step}):")
        self.say(table(rows, ("statistic", "value"), numeric=(1,)))

    def do_tensor(self, arg: str) -> None:
        """tensor NAME [previous] [slot=N] (p, print): a node's output values (summarised when large)."""
        (name,), step, slot = self._tensor_args(arg)
        value = self._job().tensor(name, step, slot=slot)
        finite = value[np.isfinite(value)] if np.issubdtype(value.dtype, np.floating) else value
        summary = (f"min {finite.min():.6g}  max {finite.max():.6g}  mean {finite.astype(np.float64).mean():.6g}"
                   if finite.size else "no finite values")
        self.say(f"{self._node(name).name} ({step}, step {self._job().step}): {value.dtype} {list(value.shape)}  "
                 f"{summary}")
        self.say(np.array2string(value, threshold=200, edgeitems=3, precision=6, max_line_width=110))

    do_p = do_print = do_tensor

    def do_save(self, arg: str) -> None:
        """save NAME FILE.npy [previous] [slot=N]: write a node's output to a .npy file (atomically)."""
        (name, target), step, slot = self._tensor_args(arg, extra=1)
        if not target.endswith(".npy"):
            raise BadCommand(f"save {target!r}: the file name must end in .npy")
        value = self._job().tensor(name, step, slot=slot)
        with atomic_path(target, mode=0o644) as tmp:
            with open(tmp, "wb") as out:
                np.save(out, value)
        self.say(f"saved {self._node(name).name} ({step}, step {self._job().step}) to {target}")

    def do_log(self, arg: str) -> None:
        """log [N]: the last N lines (default 20) of the training's output."""
        if self.output_log is None or not self.output_log.exists():
            self.say("the training's output goes to the terminal")
            return
        count = int(arg) if arg.strip().isdigit() else 20
        lines = self.output_log.read_text(errors="replace").splitlines()[-count:]
        self.say("\n".join(lines))
