"""How the debugger prompt prints: aligned tables, short node names, a node's source line."""
from __future__ import annotations

import os
from typing import Sequence

from msdebug_hooks.server.graph import Node

__all__ = ["table", "short_name", "source_location"]


def table(rows: Sequence[Sequence[object]], header: Sequence[str], *, numeric: Sequence[int] = ()) -> str:
    """Rows as aligned columns under ``header``; columns listed in ``numeric`` are right-aligned."""
    cells = [[str(c) for c in header]] + [[_cell(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = []
    for row in cells:
        parts = [c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def short_name(name: str, width: int = 60) -> str:
    """``name`` in at most ``width`` characters, keeping its end, which tells nodes apart (``.../conv1-Conv2d/
    conv1.weight`` vs ``.../GradOf_conv1.weight-op19``): whole scope levels are dropped from the front; only a last
    level longer than ``width`` is itself cut at its front."""
    if len(name) <= width:
        return name
    parts = name.split("/")
    kept = parts[-1]
    for part in reversed(parts[:-1]):
        if len(part) + 1 + len(kept) + len(".../") > width:
            break
        kept = f"{part}/{kept}"
    if len(".../") + len(kept) > width:
        return "..." + name[-(width - 3):]
    return ".../" + kept


def source_location(node: Node) -> str:
    """``file.py:line`` of the node's innermost source frame, or ""."""
    frame = node.source_frame
    return f"{os.path.basename(frame.file_path)}:{frame.line_no}" if frame else ""
