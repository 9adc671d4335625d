"""What a job says when a view comes back without a value: the reason that holds for that node, not a guess.

Why: clients keep previous-step values of watched *parameters* only (as MindSpore did), none at step 0, and our
light source keeps op outputs and gradients only once something asks for them. A hint that says "watch it before
running" about a gradient that is watched sends a person in circles.
"""
from __future__ import annotations

from typing import Optional

from msdebug_hooks.server.graph import Node

__all__ = ["missing_value_hint"]


def missing_value_hint(node: Optional[Node], step: str, at_step: int, watched: bool) -> str:
    """``" (...)"``: why ``node`` has no ``step`` value ("current" or "previous") at suspension ``at_step``."""
    if step == "previous":
        if at_step == 0:
            return " (no step has run yet, so there is no previous value)"
        if node is not None and not node.is_parameter:
            return (f" (clients keep previous-step values of watched parameters only, as MindSpore did; this is "
                    f"{'an' if node.category[0] in 'aeiou' else 'a'} {node.category} output, whose "
                    "earlier values are not kept: view or save it at each suspension instead)")
        if watched:
            return (" (it is watched, but the training kept no copy from the step before: a watchpoint set at this "
                    "suspension keeps previous values from the next step end on)")
        return (" (clients keep previous-step values of watched parameters only: watch it, and from the next step "
                "end on its previous value can be viewed)")
    if node is not None and not node.is_parameter:
        return (" (the light source keeps op outputs and gradients only once something asks for them: run one step "
                "and view it again)")
    return ""
