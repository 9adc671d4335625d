"""Tab completion at the prompt: command names, condition names and their parameters, node names (full, or the
unique last part such as ``fc1.weight``), categories, watchpoint and job ids.

Why the word delimiters change: readline splits words at ``-``, ``/``, ``=`` and more by default, so a node name such
as ``Default/network-WithLossCell/...`` could never be completed whole. While the prompt runs, only whitespace
splits words; the previous delimiters are put back when it ends.
"""
from __future__ import annotations

from typing import Callable, Optional

from msdebug_hooks.conditions.protocol import CONDITION_BY_NAME, UI_CONDITIONS, condition_names
from msdebug_hooks.server.graph import CATEGORIES

__all__ = ["ShellCompletion"]

_VIEW_WORDS = ("previous", "slot=")


class ShellCompletion:
    """Mixin of ``DebuggerShell`` (which provides ``job``, ``server`` and the ``do_*`` commands)."""

    _saved_delims: Optional[str] = None

    def preloop(self) -> None:
        try:
            import readline
        except ImportError:        # no readline (some platforms): the prompt works, without completion
            return
        if self._saved_delims is None:      # not again after a Ctrl-C restarted the loop: keep the person's own
            self._saved_delims = readline.get_completer_delims()
        readline.set_completer_delims(" \t\n")

    def postloop(self) -> None:
        if self._saved_delims is None:
            return
        import readline

        readline.set_completer_delims(self._saved_delims)
        self._saved_delims = None

    def completenames(self, text: str, *ignored) -> list[str]:
        """Command names and aliases starting with ``text`` (not ``EOF``, which is Ctrl-D)."""
        return [name for name in super().completenames(text, *ignored) if name != "EOF"]

    def completedefault(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        """The completions of ``text`` as an argument of the command that starts ``line``."""
        words = line[:begidx].split()
        if not words:
            return []
        method = getattr(self, f"do_{words[0]}", None)
        completer = self._completers().get(method.__name__[3:] if method is not None else "")
        return sorted(completer(text, words[1:])) if completer is not None else []

    def _completers(self) -> dict[str, Callable[[str, list[str]], list[str]]]:
        return {"watch": self._complete_watch, "nodes": self._complete_nodes, "source": self._complete_source,
                "tensor": self._complete_view, "stats": self._complete_view, "save": self._complete_view,
                "unwatch": self._complete_unwatch, "job": self._complete_job}

    # -- what each argument can be -------------------------------------------------------------------------------
    def _node_names(self, text: str) -> list[str]:
        """Full names starting with ``text``, and the unique last parts (``fc1.weight``) that do; with nothing
        typed, the last parts only (full names are long)."""
        graph = self.job.graph if self.job is not None else None
        if graph is None:
            return []
        counts: dict[str, int] = {}
        for node in graph:
            counts[node.short_name] = counts.get(node.short_name, 0) + 1
        found = {n.short_name for n in graph if counts[n.short_name] == 1 and n.short_name.startswith(text)}
        if text:
            found |= {n.name for n in graph if n.name.startswith(text)}
        return list(found)

    def _complete_watch(self, text: str, before: list[str]) -> list[str]:
        if not before:
            return [name for name in condition_names() if name.startswith(text)]
        spec = before[0].partition(":")[0]
        ui = UI_CONDITIONS.get(spec)
        cls = ui.condition_class if ui is not None else CONDITION_BY_NAME.get(spec)
        params = [f"{p.name}=" for p in cls.param_specs] if cls is not None else []
        words = params + list(CATEGORIES) + ["*"]
        return [w for w in words if w.startswith(text)] + self._node_names(text)

    def _complete_nodes(self, text: str, before: list[str]) -> list[str]:
        words = [*CATEGORIES, "all", "stack="]
        return [w for w in words if w.startswith(text)] + self._node_names(text)

    def _complete_source(self, text: str, before: list[str]) -> list[str]:
        return self._node_names(text) if not before else []

    def _complete_view(self, text: str, before: list[str]) -> list[str]:
        """The node first, then ``previous`` / ``slot=`` (and for ``save`` the file, which is not completed)."""
        named = [w for w in before if "=" not in w and w not in ("previous", "prev", "current", "cur")]
        if not named:
            return self._node_names(text)
        return [w for w in _VIEW_WORDS if w.startswith(text)]

    def _complete_unwatch(self, text: str, before: list[str]) -> list[str]:
        ids = [str(i) for i in self.job.watchpoints] if self.job is not None else []
        return [w for w in ids + ["all"] if w.startswith(text)]

    def _complete_job(self, text: str, before: list[str]) -> list[str]:
        return [str(job.id) for job in self.server.jobs if str(job.id).startswith(text)]
