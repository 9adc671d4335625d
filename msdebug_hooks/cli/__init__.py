"""``msdebug``: the command-line face of msdebug-hooks.

Each subcommand lives in its own module in this package and exposes ``register(subparsers)``, which adds its parser
and sets ``func`` (``func(args) -> int`` exit code). Modules are discovered, so adding a command touches one file.
Exit codes: 0 success, 1 "found something" (hits, differences), 2 bad input (argparse's own convention). The
project's errors (``ConfigError``, ``DumpError``) and unreadable or unwritable files (``OSError``) raised by a command
become one line, ``msdebug <command>: error: ...``, and exit 2, here, once for every command.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import re
import sys
from typing import Optional, Sequence

from msdebug_hooks import __version__
from msdebug_hooks._files import os_error_text
from msdebug_hooks.errors import ConfigError, DumpError, MissingExtraError

EXIT_OK, EXIT_FOUND, EXIT_BAD_INPUT = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="msdebug",
        description="Build, check and apply MindSpore diagnostic settings; analyse dumps and checkpoints; compare a "
                    "run with a reference; debug a training job.",
    )
    parser.add_argument("--version", action="version", version=f"msdebug-hooks {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        module.register(subparsers)
    for command in subparsers.choices.values():   # module docstrings make good help, minus their markup
        command.description = plain_text(command.description)
    return parser


def plain_text(text: Optional[str]) -> Optional[str]:
    """Help text as a terminal shows it: reStructuredText roles and literals (``x``, :class:`x`) become plain x,
    a literal-block ``::`` a colon."""
    if not text:
        return text
    text = re.sub(r":[a-z]+:`([^`]+)`", r"\1", text)
    text = re.sub(r"``([^`]+)``", r"\1", text)
    return re.sub(r"::$", ":", text, flags=re.MULTILINE)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        return int(args.func(args) or 0)
    except (ConfigError, DumpError) as exc:  # the project's own errors name the field, the value and what is allowed
        print(f"msdebug {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:  # a file or directory that cannot be read or written: its name and the reason
        print(f"msdebug {args.command}: error: {os_error_text(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except MissingExtraError as exc:  # an optional extra the command needs: the pip line that installs it
        print(f"msdebug {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
