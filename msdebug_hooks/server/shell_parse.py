"""How the debugger prompt reads what it is given: a command script split into commands, and the error a command
line the prompt cannot obey raises (each command parses its own words, ``shlex`` where names may be quoted)."""
from __future__ import annotations

__all__ = ["BadCommand", "split_commands"]


class BadCommand(ValueError):
    """A command line the shell cannot obey (bad syntax, unknown node, ...)."""


def split_commands(text: str) -> list[str]:
    """``"watch weight_overflow *; continue"`` or a file's lines -> commands ("#" starts a comment line)."""
    commands = []
    for line in text.splitlines():
        if line.strip().startswith("#"):
            continue
        commands.extend(part.strip() for part in line.split(";") if part.strip())
    return commands
