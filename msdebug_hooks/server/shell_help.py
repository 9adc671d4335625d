"""The prompt's ``help``: every command with its aliases and what it does, or one command's description.

Why here: ``cmd.Cmd``'s own help prints bare names in columns and hides which short forms exist; a pdb user looks
for ``c``, ``s``, ``p`` and ``q`` in that list. Aliases are found, not listed by hand: a ``do_*`` attribute that is
the same function as another command's (``do_c = do_continue``) is an alias of it.
"""
from __future__ import annotations

import difflib
import inspect
from typing import Callable

from msdebug_hooks.conditions.protocol import condition_names
from msdebug_hooks.server.shell_parse import BadCommand
from msdebug_hooks.server.shell_text import table

__all__ = ["ShellHelp", "command_aliases"]

_KEYS = {"EOF": "Ctrl-D"}          # aliases that are keys, not words


def command_aliases(shell_class: type) -> dict[str, list[str]]:
    """``{command: [aliases]}`` for every ``do_*`` command of ``shell_class``, commands in alphabetical order,
    aliases shortest first."""
    found: dict[str, list[str]] = {}
    for name in sorted(dir(shell_class)):
        if not name.startswith("do_"):
            continue
        function = getattr(shell_class, name)
        primary = function.__name__[3:]
        found.setdefault(primary, [])
        if name[3:] != primary:
            found[primary].append(_KEYS.get(name[3:], name[3:]))
    return {primary: sorted(found[primary], key=lambda a: (len(a), a)) for primary in sorted(found)}


def _summary(method: Callable) -> tuple[str, str]:
    """(usage, what it does) from a docstring written as ``usage (aliases): what it does. More.``"""
    text = " ".join(inspect.cleandoc(method.__doc__ or "").split())
    usage, _, does = text.partition(": ")
    usage = usage.split(" (", 1)[0]
    first = does.split(". ", 1)[0].split("; ", 1)[0].rstrip(".")
    return usage, first


class ShellHelp:
    """Mixin of ``DebuggerShell`` (which provides ``say``)."""

    def do_help(self, arg: str) -> None:
        """help [COMMAND]: the commands with their aliases, or what one command does (help watch also lists the
        conditions)."""
        name = arg.strip()
        if not name:
            rows = []
            for primary, aliases in command_aliases(type(self)).items():
                usage, does = _summary(getattr(self, f"do_{primary}"))
                rows.append((usage, ", ".join(aliases), does))
            self.say(table(rows, ("command", "aliases", "does")))
            self.say("help COMMAND says more (e.g. help watch); Tab completes commands, conditions and node names")
            return
        method = getattr(self, f"do_{name}", None)
        if method is None:
            known = [n for names in command_aliases(type(self)).items() for n in (names[0], *names[1])]
            close = difflib.get_close_matches(name, known, n=1)
            raise BadCommand(f"help {name!r}: no such command" + (f"; did you mean {close[0]!r}?" if close else "")
                             + " (help lists them)")
        self.say(inspect.cleandoc(method.__doc__ or ""))
        aliases = command_aliases(type(self)).get(method.__name__[3:], [])
        if aliases:
            self.say(f"aliases: {', '.join(aliases)}")
        if method.__name__ == "do_watch":
            self.say("conditions: " + ", ".join(condition_names()))
