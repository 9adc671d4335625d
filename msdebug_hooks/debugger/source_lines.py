"""The training's own source lines for the light graph's nodes (``graph.py``), so that a hit names a line the person
wrote: where a layer is called and defined, where a parameter is defined, and where the loss is computed.

Why: a cell-level graph has no operator trace; without this its stacks hold only ``def construct`` lines, which do
not say which layer a node is, and a weight, a gradient or the loss has no source line at all. So:

* a layer's definition is the assignment ``self.<attr> = ...`` that makes it a child of its parent cell, read from
  the parent's class (and its bases; the class nearest to the parent's own that assigns it). When that is
  MindSpore's code (``WithLossCell``'s ``self._backbone = backbone``), the search goes one cell up, until a line of
  the training's own code. A parameter's definition starts the same way at its own cell (``self.weight =
  Parameter(...)`` in ``Dense``: MindSpore's, so the line that defines that ``Dense`` in the script);
* a layer's call is the first ``self.<attr>(...)`` in its parent's ``construct`` (the class's own, or the nearest
  base's), going one cell up while that is MindSpore's code. A layer called only through a container or a loop
  (``for layer in self.layers: x = layer(x)``) has no such line: its definition is what is shown;
* the loss's computation is the innermost frame of the training's own code on the stack while the graph is built:
  under ``Model.train`` that is the ``model.train(...)`` line (MindSpore computes the loss inside it).

"The training's own code" is any file outside MindSpore's package, this package and Python's standard library.
Read statically: a layer replaced after construction (``net.fc1 = nn.Dense(...)`` in a script) shows the line of
its class that assigned the first one. Lines are written as ``source_address`` frames (``# In file
<path>:<line>/<code>/``), the form MindInsight and ``server/graph.py`` read.
"""
from __future__ import annotations

import ast
import functools
import inspect
import linecache
import os
import sys
import sysconfig
import textwrap
from typing import Any, Mapping, Optional

__all__ = ["definition_trace", "call_trace", "call_site_trace", "trace_line", "is_own_code"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))          # msdebug_hooks/
_STDLIB = tuple(os.path.abspath(p) for p in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]})


def is_own_code(path: str) -> bool:
    """True for a file of the training itself: not MindSpore's, not ours, not the standard library's, not
    generated (``<string>``, ``<frozen ...>``)."""
    if not path or path.startswith("<"):
        return False
    full = os.path.abspath(path)
    normal = full.replace("\\", "/")
    if "/mindspore/" in normal and ("-packages/" in normal or "/mindspore/python/" in normal):
        return False
    if full.startswith(_PACKAGE + os.sep):
        return False
    return not (full.startswith(_STDLIB) and "-packages" not in normal)


def trace_line(path: str, line: int, code: str) -> str:
    """One ``source_address`` frame, as MindSpore 2.x writes them less the column (MindInsight 2.3.1's form)."""
    return f"# In file {path}:{line}/    {code.strip()}/"


@functools.lru_cache(maxsize=512)
def _assignments(cls: type) -> Mapping[str, tuple[str, int, str]]:
    """``attr -> (file, line, code)`` of every ``self.<attr> = ...`` in the class body's methods (first one wins)."""
    try:
        path = inspect.getsourcefile(cls)
        lines, first = inspect.getsourcelines(cls)
    except (TypeError, OSError):
        return {}
    if not path:
        return {}
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:
        return {}
    found: dict[str, tuple[str, int, str]] = {}
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                number = first + node.lineno - 1
                code = lines[node.lineno - 1] if node.lineno - 1 < len(lines) else ""
                found.setdefault(target.attr, (path, number, code.strip()))
    return found


@functools.lru_cache(maxsize=512)
def _calls(cls: type) -> Mapping[str, tuple[str, int, str]]:
    """``attr -> (file, line, code)`` of the first ``self.<attr>(...)`` call in the class's own ``construct``."""
    construct = cls.__dict__.get("construct")
    try:
        path = inspect.getsourcefile(construct)
        lines, first = inspect.getsourcelines(construct)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (TypeError, OSError, SyntaxError):
        return {}
    if not path:
        return {}
    found: dict[str, tuple[str, int, str]] = {}
    for node in sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset)):
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            code = lines[node.lineno - 1] if node.lineno - 1 < len(lines) else ""
            found.setdefault(func.attr, (path, first + node.lineno - 1, code.strip()))
    return found


def call_trace(cells: Mapping[str, Any], path: str) -> str:
    """The frame of the training's own line that calls the cell at dotted ``path`` (``self.<attr>(...)`` in its
    parent's ``construct``, or the nearest base's that has one; the first such call), going one cell up while that
    line is MindSpore's (``WithLossCell`` calling its backbone); "" when none is found (a layer called through a
    list or a loop, ``for layer in self.layers``: the definition is then the line shown)."""
    owner, attr = _parent(path)
    while owner is not None and attr:
        cell = cells.get(owner)
        where = None
        for cls in type(cell).__mro__ if cell is not None else ():
            if "construct" in cls.__dict__:
                where = _calls(cls).get(attr)
                break
        if where is not None and is_own_code(where[0]):
            return trace_line(*where)
        if where is None:
            return ""
        owner, attr = _parent(owner)
    return ""


def _assigned_in(cell: Any, attr: str) -> Optional[tuple[str, int, str]]:
    """Where ``cell``'s class (or the nearest base that does) assigns ``self.<attr>``; None if none does."""
    for cls in type(cell).__mro__:
        if cls is object:
            break
        where = _assignments(cls).get(attr)
        if where is not None:
            return where
    return None


def definition_trace(cells: Mapping[str, Any], path: str, param: Any = None) -> str:
    """The frame of the training's own line that defines the cell at dotted ``path`` (``cells``: path -> cell, ""
    the root), or the parameter ``param`` of that cell; "" when no such line is found."""
    owner, attr = (path, _attr_of(cells.get(path), param)) if param is not None else _parent(path)
    while owner is not None and attr:
        cell = cells.get(owner)
        where = _assigned_in(cell, attr) if cell is not None else None
        if where is not None and is_own_code(where[0]):
            return trace_line(*where)
        owner, attr = _parent(owner)
    return ""


def _parent(path: str) -> tuple[Optional[str], str]:
    """``"a.b.c"`` -> ``("a.b", "c")``; the root ``""`` has none."""
    if not path:
        return None, ""
    head, _, last = path.rpartition(".")
    return head, last


def _attr_of(cell: Any, param: Any) -> str:
    """The attribute name under which ``cell`` holds ``param`` directly."""
    if cell is None:
        return ""
    for name, held in cell.parameters_and_names(expand=False):
        if held is param:
            return name.rsplit(".", 1)[-1]
    return ""


def call_site_trace(skip: int = 1) -> str:
    """The frame of the innermost line of the training's own code on the current stack; "" when there is none."""
    frame = sys._getframe(skip)
    while frame is not None:
        path = frame.f_code.co_filename
        if is_own_code(path):
            code = linecache.getline(path, frame.f_lineno)     # "" for a file that cannot be read
            return trace_line(path, frame.f_lineno, code or f"in {frame.f_code.co_name}")
        frame = frame.f_back
    return ""
