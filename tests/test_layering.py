"""The package's shape: no import cycle at all (between top-level parts or between modules), no module over 400 lines.

Imports are read from the source (``ast``), at any depth (function-level imports count: a lazy import is still a
dependency), so nothing is imported and no MindSpore starts. A top-level part is a subpackage (``config``,
``callbacks``, ``debugger``, ``server``, ...) or a top-level module (``rank``, ``training_loop``, ...).
"""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import msdebug_hooks

PACKAGE = Path(msdebug_hooks.__file__).resolve().parent
MAX_LINES = 400
GENERATED = "msdebug_hooks.wire."       # protoc's output (``*_pb2``, ``*_pb2_grpc``): written by protos/generate.py


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _part(module: str) -> str:
    """``msdebug_hooks.debugger.session`` -> ``debugger``; the package's own ``__init__`` -> ``msdebug_hooks``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _imported(module: str, path: Path) -> set[str]:
    """Modules of msdebug_hooks that ``module`` imports, anywhere in its body."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:      # relative: resolve against this module's package
                base = module.split(".")
                base = base[:len(base) - node.level + (1 if is_package else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)   # "from pkg import submodule"
    return {name for name in found if name in MODULES}


def _public_name_targets(module: str, path: Path) -> set[str]:
    """``from msdebug_hooks import DumpConfig`` depends on the module the lazy public name resolves to."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module == "msdebug_hooks" and not node.level:
            found.update(msdebug_hooks._EXPORTS[a.name] for a in node.names if a.name in msdebug_hooks._EXPORTS)
    return found


def _part_edges() -> dict[tuple[str, str], list[str]]:
    """(importing part, imported part) -> the module-level imports behind that edge."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for module, path in MODULES.items():
        if module == "msdebug_hooks":     # the lazy facade: names resolve on first use, not at import
            continue
        for target in _imported(module, path) | _public_name_targets(module, path):
            source_part, target_part = _part(module), _part(target)
            if target == "msdebug_hooks" or source_part == target_part:
                continue
            edges[(source_part, target_part)].append(f"{module} -> {target}")
    return edges


def _cycles(edges: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one part (Tarjan)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_the_walk_sees_the_packages_and_their_lazy_imports():
    """The checker itself: it must see known edges, including a function-level import, or it checks nothing."""
    edges = _part_edges()
    assert {"config", "callbacks", "conditions", "dump", "debugger", "server", "compare", "cli"} <= \
        {part for edge in edges for part in edge}
    assert ("debugger", "conditions") in edges                 # session / watchpoints evaluate conditions
    assert any("msdebug_hooks.cli." in line for line in edges[("cli", "config")])   # imported inside functions


def test_a_cycle_between_parts_is_found():
    edges = {("a", "b"): ["a.x -> b.y"], ("b", "c"): ["b.y -> c.z"], ("c", "a"): ["c.z -> a.x"], ("c", "d"): []}
    assert _cycles(edges) == [["a", "b", "c"]]
    assert _cycles({("a", "b"): [], ("b", "c"): []}) == []


def test_no_import_cycle_between_top_level_parts():
    edges = _part_edges()
    problems = []
    for group in _cycles(edges):
        members = set(group)
        lines = [line for (a, b), found in sorted(edges.items()) if a in members and b in members for line in found]
        problems.append(f"cycle between {', '.join(group)}:\n    " + "\n    ".join(lines))
    assert not problems, "\n".join(problems)


def _module_edges() -> dict[tuple[str, str], list[str]]:
    """(module, module it imports) for every import between two modules of the package, lazy ones included.

    A package's ``__init__`` that only re-exports is left out as a target when the importer lives inside that
    package (``from msdebug_hooks.debugger import x`` inside debugger/ is the facade, not a dependency on itself)."""
    edges: dict[tuple[str, str], list[str]] = {}
    for module, path in MODULES.items():
        if module == "msdebug_hooks":
            continue
        for target in _imported(module, path) | _public_name_targets(module, path):
            if target == module or target == "msdebug_hooks" or module.startswith(target + "."):
                continue
            edges[(module, target)] = [f"{module} -> {target}"]
    return edges


def test_no_import_cycle_between_modules():
    edges = _module_edges()
    problems = [" -> ".join(group) for group in _cycles(edges)]
    assert not problems, "modules importing each other (directly or around a circle):\n    " + "\n    ".join(problems)


def test_no_module_over_400_lines():
    too_long = {module: n for module, path in MODULES.items()
                if not (module.startswith(GENERATED) and module.endswith(("_pb2", "_pb2_grpc")))
                and (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not too_long, f"modules over {MAX_LINES} lines (split them by job): {too_long}"
