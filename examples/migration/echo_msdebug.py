"""``msdebug(...)``: run an ``msdebug`` command in this process, echoing it as a shell would, for the migration
examples' step-by-step stories."""
from __future__ import annotations


def msdebug(*argv: str) -> int:
    """Print ``$ msdebug ...``, run it, print ``(exit N)``; return the exit code."""
    from msdebug_hooks.cli import main

    print(f"\n$ msdebug {' '.join(argv)}", flush=True)
    code = main(list(argv))
    print(f"(exit {code})", flush=True)
    return code
