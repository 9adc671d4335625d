"""Operator-level capture in PyNative mode: follow the user's own Python lines and name the first one that makes a
NaN/Inf from finite values, down to the operator inside it.

MindSpore 2.10 runs a PyNative step operator by operator from Python, but most operators (``x / y``, ``ops.sqrt``,
tensor methods) go straight into C++ with no Python frame of their own, so no hook per primitive sees them all. The
user's lines do run in Python: while a step is captured, ``sys.settrace`` follows every frame of the user's files (not
MindSpore's, not the standard library's, not this package's). After each line, the tensors it bound (new or changed
local variables, a returned value) are checked; the first line that made a non-finite tensor from finite ones is the
producer. Its expression is then taken apart (``ast``) and the sub-expressions evaluated again in the frame, innermost
first, to find the operator (``ops.log(...)``, ``a / b``) whose operands are finite and whose value is not; a call of a
cell or function of the user's own code is not re-run (it has its own traced lines) and the sub-expression search
stops there. Costs a Python call per line of the user's code, only in the steps captured.

A non-finite value that arrives in a user frame from outside (an argument, a weight) is never blamed on the line that
reads it: the step checks (``probe``) tell the data and weights apart.
"""
from __future__ import annotations

import ast
import inspect
import os
import sys
import sysconfig
import textwrap
import threading
from typing import Any, Optional

from msdebug_hooks.nan.values import as_array, first_bad, hint, is_finite, stats

__all__ = ["LineTracer"]

_SKIP_DIRS = tuple({os.path.realpath(p) for p in (sysconfig.get_paths().get("stdlib", ""),
                                                   sysconfig.get_paths().get("purelib", ""),
                                                   sysconfig.get_paths().get("platlib", ""),
                                                   os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
                    if p})


def _users(filename: str, cache: dict) -> bool:
    known = cache.get(filename)
    if known is None:
        path = os.path.realpath(filename) if not filename.startswith("<") else ""
        known = bool(path) and not path.startswith(_SKIP_DIRS) and "site-packages" not in path
        cache[filename] = known
    return known


def _tensors(value: Any, depth: int = 0) -> list:
    """The tensors in a value: itself, or the elements of a tuple/list (two levels)."""
    if hasattr(value, "asnumpy") and hasattr(value, "dtype"):
        return [value]
    if depth < 2 and isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item, depth + 1)]
    return []


def _bad(value: Any) -> bool:
    return any(not is_finite(as_array(t)) for t in _tensors(value))


class LineTracer:
    """Follows the user's lines while ``start()``-ed; ``found`` holds the first producer (a dict) once seen."""

    def __init__(self) -> None:
        self.found: Optional[dict] = None
        self.step = 0
        self._files: dict = {}
        self._seen: dict = {}         # id(frame) -> its locals at the last line event
        self._lines: dict = {}        # id(frame) -> the line that was running since then
        self._on = False

    # -- switching ----------------------------------------------------------------------------------------------
    def start(self, step: int) -> None:
        self.step = step
        if not self._on:
            self._on = True
            sys.settrace(self._global)
            threading.settrace(self._global)

    def stop(self) -> None:
        if self._on:
            self._on = False
            sys.settrace(None)
            threading.settrace(None)   # type: ignore[arg-type]
            self._seen.clear()
            self._lines.clear()

    # -- tracing ------------------------------------------------------------------------------------------------
    def _global(self, frame: Any, event: str, arg: Any) -> Any:
        if self.found is not None or not _users(frame.f_code.co_filename, self._files):
            return None
        self._seen[id(frame)] = dict(frame.f_locals)
        self._lines[id(frame)] = None
        return self._local

    def _local(self, frame: Any, event: str, arg: Any) -> Any:
        if self.found is not None:
            return None
        try:
            if event == "line":
                finished = self._lines.get(id(frame))
                self._lines[id(frame)] = frame.f_lineno
                if finished is not None:
                    self._after_line(frame, None, finished)
            elif event == "return":
                self._after_line(frame, arg, frame.f_lineno)
                self._seen.pop(id(frame), None)
                self._lines.pop(id(frame), None)
        except Exception:   # noqa: BLE001 - capture must never break the training it follows
            pass
        return self._local

    def _after_line(self, frame: Any, returned: Any, line: int) -> None:
        before = self._seen.get(id(frame), {})
        now = frame.f_locals
        made = [value for name, value in now.items() if before.get(name) is not value]
        if returned is not None:
            made.append(returned)
        self._seen[id(frame)] = dict(now)
        if not any(_bad(value) for value in made):
            return
        statement = _statement(frame.f_code, line)
        names = _names(statement) if statement is not None else set()
        if any(_bad(before.get(name)) for name in names if before.get(name) is not None):
            return      # it read a non-finite value: a consumer
        self.found = self._describe(frame, statement, line)

    def _describe(self, frame: Any, statement: Optional[ast.AST], line: int) -> dict:
        code = _code_line(frame.f_code.co_filename, line)
        found = {"step": self.step, "file": frame.f_code.co_filename, "line": line, "code": code,
                 "function": frame.f_code.co_name, "cell": type(frame.f_locals.get("self")).__name__
                 if "self" in frame.f_locals else "", "operator": "", "inputs": [], "output": None, "hint": ""}
        if statement is None:
            return found
        found["backward"] = _calls_grad(statement, frame)
        operator = None if found["backward"] else _innermost(statement, frame)
        if operator is None:
            return found
        text, operands, value = operator
        in_stats = [stats(a) for a in (as_array(o) for o in operands) if a is not None]
        out = as_array(value)
        out_stats = stats(out) if out is not None else None
        found.update(operator=text, inputs=[dict(s.as_dict(), text=s.text()) for s in in_stats],
                     output=None if out_stats is None else dict(out_stats.as_dict(), text=out_stats.text()),
                     hint=hint(text, in_stats, out_stats))
        if out is not None and first_bad(out):
            found["first_bad"] = list(first_bad(out)[0])
        return found


def _code_line(filename: str, line: int) -> str:
    import linecache

    return linecache.getline(filename, line).strip()


_TREES: dict = {}


def _statement(code: Any, line: int) -> Optional[ast.AST]:
    """The statement of ``code``'s function that holds ``line``."""
    tree = _TREES.get(code)
    if tree is None:
        try:
            lines, first = inspect.getsourcelines(code)
        except (OSError, TypeError):
            return None
        tree = (ast.parse(textwrap.dedent("".join(lines))), first)
        _TREES[code] = tree
    module, first = tree
    wanted = line - first + 1
    best = None
    for node in ast.walk(module):
        if isinstance(node, ast.stmt) and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.If,
                                                                ast.For, ast.While, ast.With, ast.Try)):
            if node.lineno <= wanted <= (node.end_lineno or node.lineno):
                if best is None or node.lineno >= best.lineno:
                    best = node
    return best


def _names(statement: ast.AST) -> set:
    return {node.id for node in ast.walk(statement) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


def _expression(statement: ast.AST) -> Optional[ast.expr]:
    value = getattr(statement, "value", None)
    return value if isinstance(value, ast.expr) else None


def _evaluable(node: ast.expr, frame: Any) -> bool:
    """Whether ``node`` may be evaluated again: its calls are MindSpore operators (``mindspore.ops``, tensor methods,
    builtins) or MindSpore's own cells that hold no optimizer and no cell of the user's code. A function of the user's
    code, a ``@jit`` function, a grad function or a training cell is never re-run (it would step again)."""
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        try:
            target = eval(compile(ast.Expression(call.func), "<first-nan>", "eval"), frame.f_globals, frame.f_locals)
        except Exception:   # noqa: BLE001
            return False
        if not _pure(target):
            return False
    return True


def _is_grad(target: Any) -> bool:
    """A function made by ``mindspore.grad`` / ``value_and_grad`` (MindSpore's ``_Grad`` transform): calling it
    runs a forward and a backward pass."""
    return "_Grad." in (getattr(target, "__qualname__", "") or "") and \
        (getattr(target, "__module__", "") or "").startswith("mindspore.")


def _calls_grad(statement: ast.AST, frame: Any) -> bool:
    for call in (n for n in ast.walk(statement) if isinstance(n, ast.Call)):
        try:
            if _is_grad(_evaluate(call.func, frame)):
                return True
        except Exception:   # noqa: BLE001
            continue
    return False


def _pure(target: Any) -> bool:
    if hasattr(target, "cells_and_names"):
        for _, cell in target.cells_and_names():
            module = type(cell).__module__ or ""
            if not module.startswith("mindspore.") or hasattr(cell, "global_step") or hasattr(cell, "optimizer"):
                return False
        return True
    module = getattr(target, "__module__", None) or ""
    if _is_grad(target):
        return False
    if inspect.isbuiltin(target) or isinstance(target, type):
        return True
    owner = getattr(target, "__self__", None)
    if owner is not None and hasattr(owner, "asnumpy"):        # a tensor method
        return True
    return module.startswith("mindspore.ops")


def _evaluate(node: ast.expr, frame: Any) -> Any:
    return eval(compile(ast.Expression(node), "<first-nan>", "eval"), frame.f_globals, frame.f_locals)


def _operands(node: ast.expr) -> list:
    if isinstance(node, ast.BinOp):
        return [node.left, node.right]
    if isinstance(node, ast.UnaryOp):
        return [node.operand]
    if isinstance(node, ast.Call):
        return list(node.args) + [kw.value for kw in node.keywords]
    return []


def _innermost(statement: ast.AST, frame: Any) -> Optional[tuple]:
    """``(text, operand values, value)`` of the innermost operator of the statement whose operands are finite and
    whose value is not, or of the outermost call the search could not enter; ``None`` when it found neither."""
    top = _expression(statement)
    if top is None:
        return None
    candidate = None
    todo = [top]
    while todo:
        node = todo.pop()
        if not isinstance(node, (ast.Call, ast.BinOp, ast.UnaryOp)):
            continue
        if not _evaluable(node, frame):
            if candidate is None:
                candidate = (ast.unparse(node.func if isinstance(node, ast.Call) else node), [], None)
            continue
        try:
            value = _evaluate(node, frame)
            operands = [_evaluate(o, frame) for o in _operands(node)]
        except Exception:   # noqa: BLE001
            continue
        if not _bad(value):
            continue
        if any(_bad(o) for o in operands):
            todo.extend(reversed(_operands(node)))
            continue
        text = ast.unparse(node.func) if isinstance(node, ast.Call) else _op_text(node)
        return text, operands, value
    return candidate


def _op_text(node: ast.expr) -> str:
    symbols = {ast.Div: "/", ast.Mult: "*", ast.Add: "+", ast.Sub: "-", ast.Pow: "**", ast.FloorDiv: "//",
               ast.MatMult: "@", ast.USub: "-"}
    op = getattr(node, "op", None)
    return symbols.get(type(op), type(op).__name__)
