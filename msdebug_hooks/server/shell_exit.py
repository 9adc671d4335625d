"""The prompt's exit code (``msdebug debug`` / ``msdebug serve``), which a CI job reads.

1 if any watchpoint hit, whatever else happened (a typo, a lost training: it did hit); otherwise 2 on bad input (an
unknown command, a bad condition, a missing node) or when the training could not be looked at (it never connected,
it was lost or crashed before it ended, a watchpoint could not be set again on the script's next training, or the
script exited with a non-zero code: it raised, was killed or ended by a signal); otherwise 0.
"""
from __future__ import annotations

__all__ = ["exit_code", "EXIT_OK", "EXIT_HITS", "EXIT_BAD"]

EXIT_OK, EXIT_HITS, EXIT_BAD = 0, 1, 2


def exit_code(saw_hits: bool, could_not_look: bool) -> int:
    """The session's exit code, by precedence: a hit (1) outranks bad input and trainings that could not be looked
    at (2), which outrank a clean run (0). A typo must not hide a divergence from CI; a check that could not look
    must not read as clean."""
    if saw_hits:
        return EXIT_HITS
    return EXIT_BAD if could_not_look else EXIT_OK
