"""Tensors paired by module structure, for a port whose names say little (mindcv's ``layer2.0.down_sample.1`` for
timm's ``layer2.0.downsample.1``, ``features.3.layers.4`` for ``features.1.conv.2``).

Each side's tensors are grouped by the module that holds them (a *holder*): the layer of the layout table that owns
them (its class or a subclass: BatchNorm's four tensors are one holder, whatever order they were created in), else
the module the tensor sits in directly. A holder's **signature** is the multiset of its tensors' shapes with size-1
axes dropped, so a Conv1d weight ``[o, i, 1, k]`` and ``[o, i, k]``, or a layer scale ``[C]`` and ``[C, 1, 1]``,
sign alike. Both frameworks list tensors in the order the modules were created (a module's own tensors before its
children's), so the two **module trees are matched top down** (:func:`match`): at each level the items (holders and
modules, a module signing for everything below it) with equal signatures are aligned in order (:func:`align`: the
most pairs; among those the fewest runs, so a module created elsewhere in one model moves as one run; then the most
agreement by name, a hint only), an aligned pair of modules is matched inside, and the items left over on both sides
are opened one level and aligned again. Branches created in the opposite order pair by their containers; a
container split differently in the two models falls back to its layers.

Inside a holder pair each tensor takes its partner by role (the layout table's name: BatchNorm's ``gamma`` is
``weight``, ``moving_variance`` is ``running_var``), then by shape in creation order: first shapes equal or related
by a layout of the table, then shapes equal once size-1 axes are dropped (**shape algebra**: the caller reports
each such pair; nothing is reshaped silently). The **module map** (MindSpore cell -> PyTorch module) follows from
the pairs: a cell maps to a PyTorch module that holds its tensors' partners and nothing else (:func:`module_map`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional

from msdebug_hooks.compare.layouts import pytorch_style_name, transform_between, unit_axes_between
from msdebug_hooks.compare.state_conversion import table_rules

TABLE, UNIT_AXES = "table", "unit axes"


def shape_fit(shape_ms: tuple, shape_torch: tuple) -> Optional[str]:
    """``TABLE`` when the shapes are equal or related by a layout of the table, ``UNIT_AXES`` when they are equal
    once size-1 axes are dropped, else None."""
    if transform_between(shape_ms, shape_torch) is not None:
        return TABLE
    return UNIT_AXES if unit_axes_between(shape_ms, shape_torch) else None


@dataclass
class Holder:
    """One module's tensors on one side, in creation order: full names, role names (the PyTorch-style names
    relative to the holder it may have, most likely first) and shapes."""

    path: str
    names: list = field(default_factory=list)
    roles: list = field(default_factory=list)
    shapes: list = field(default_factory=list)

    def add(self, name: str, roles: tuple, shape: tuple) -> None:
        self.names.append(name)
        self.roles.append(roles)
        self.shapes.append(tuple(int(d) for d in shape))

    def signature(self) -> tuple:
        return tuple(sorted(tuple(d for d in shape if d != 1) for shape in self.shapes))


def group_holders(framework: str, layers: Mapping[str, Any], items: list) -> list:
    """Holders of ``items`` (``(path, full name, shape)`` in creation order) by owning module."""
    owned = table_rules(framework, layers, [path for path, _, _ in items]) if layers else {}
    holders: dict = {}
    for path, name, shape in items:
        if path in owned:
            prefix, rule = owned[path]
            relative = path[len(prefix) + 1:] if prefix else path
            roles = (rule.matches(relative), relative) if framework == "mindspore" else (relative,)
        else:
            prefix, _, relative = path.rpartition(".")
            roles = (relative, pytorch_style_name(relative)) if framework == "mindspore" else (relative,)
        holders.setdefault(prefix, Holder(prefix)).add(name, tuple(dict.fromkeys(roles)), shape)
    return list(holders.values())


def mindspore_holders(cell: Any, names: Iterable[str]) -> list:
    """Holders of the MindSpore parameters ``names`` of ``cell`` (``parameters_and_names`` order)."""
    wanted = set(names)
    items = [(path, param.name, tuple(param.shape)) for path, param in cell.parameters_and_names()
             if param.name in wanted]
    return group_holders("mindspore", dict(cell.cells_and_names()), items)


def torch_holders(state: Mapping[str, Any], names: Iterable[str], module: Any = None) -> list:
    """Holders of the PyTorch tensors ``names`` of ``state`` (its order); ``module``, when given, names the layers
    of the table (MultiheadAttention's ``out_proj`` is part of it), else each tensor's parent module holds it."""
    wanted = set(names)
    items = [(name, name, tuple(value.shape)) for name, value in state.items() if name in wanted]
    return group_holders("pytorch", dict(module.named_modules()) if module is not None else {}, items)


@dataclass
class Node:
    """A module of the tree the holders hang in: its own holder (tensors it holds directly) and its child modules,
    in creation order. Its signature covers every tensor below it."""

    path: str
    holder: Optional[Holder] = None
    children: list = field(default_factory=list)
    _signature: Optional[tuple] = None

    def items(self) -> list:
        return ([self.holder] if self.holder is not None else []) + self.children

    def signature(self) -> tuple:
        if self._signature is None:
            self._signature = tuple(sorted(shape for item in self.items() for shape in item.signature()))
        return self._signature


def tree(holders: list) -> Node:
    """The module tree of ``holders`` (their paths), children in the order their first tensor was created."""
    root = Node("")
    nodes = {"": root}
    for holder in holders:
        parts = holder.path.split(".") if holder.path else []
        for cut in range(1, len(parts) + 1):
            path = ".".join(parts[:cut])
            if path not in nodes:
                nodes[path] = Node(path)
                nodes[".".join(parts[:cut - 1])].children.append(nodes[path])
        nodes[holder.path].holder = holder
    return root


def _hint(a: Any, b: Any) -> float:
    """How much two holders or modules agree by name, in [0, 2): the same role names, and the share of path parts
    equal at the start and at the end."""
    roles = (sorted(r[0] for r in a.roles) == sorted(r[0] for r in b.roles)
             if isinstance(a, Holder) and isinstance(b, Holder) else isinstance(a, Node) and isinstance(b, Node))
    pa, pb = a.path.split("."), b.path.split(".")
    head = next((k for k, (x, y) in enumerate(zip(pa, pb)) if x != y), min(len(pa), len(pb)))
    tail = next((k for k, (x, y) in enumerate(zip(pa[::-1], pb[::-1])) if x != y), min(len(pa), len(pb)))
    return float(roles) + 0.99 * min(head + tail, max(len(pa), len(pb))) / max(len(pa), len(pb))


def align(a: list, b: list) -> list:
    """``[(i, j)]``: holder ``a[i]`` pairs with ``b[j]``. First the order-preserving alignment of equal signatures
    with the most pairs; among those, the one with the fewest runs (a module created elsewhere in one model moves
    as one run, it does not split the run of its neighbours), then the best name hint. Then the holders it leaves
    over pair by equal signature, best hint first (the module created elsewhere)."""
    ids: dict = {}
    sig_a = [ids.setdefault(h.signature(), len(ids)) for h in a]
    sig_b = [ids.setdefault(h.signature(), len(ids)) for h in b]
    n, m = len(a), len(b)
    run = 1.0 / (2 * (n + m + 1))   # all run penalties together weigh less than one more pair
    eps = run / (4 * (n + m + 1))   # all hints together weigh less than one run
    gain = {(i, j): 1.0 + eps * _hint(a[i - 1], b[j - 1])
            for i in range(1, n + 1) for j in range(1, m + 1) if sig_a[i - 1] == sig_b[j - 1]}
    low = float("-inf")
    ends = [[low] * (m + 1) for _ in range(n + 1)]   # best score ending with the pair (i-1, j-1)
    gaps = [[0.0] * (m + 1) for _ in range(n + 1)]   # best score ending with a holder left out
    for i in range(n + 1):
        for j in range(m + 1):
            if i == j == 0:
                continue
            gaps[i][j] = max(max(ends[i - 1][j], gaps[i - 1][j]) if i else low,
                             max(ends[i][j - 1], gaps[i][j - 1]) if j else low)
            if (i, j) in gain:
                ends[i][j] = gain[(i, j)] + max(ends[i - 1][j - 1], gaps[i - 1][j - 1] - run)
    pairs, i, j = [], n, m
    in_pair = ends[n][m] >= gaps[n][m]
    while i and j:
        if in_pair:
            pairs.append((i - 1, j - 1))
            in_pair = ends[i][j] == gain[(i, j)] + ends[i - 1][j - 1]
            i, j = i - 1, j - 1
            continue
        if gaps[i][j] == max(ends[i - 1][j], gaps[i - 1][j]):
            i -= 1
        else:
            j -= 1
        in_pair = ends[i][j] >= gaps[i][j]
    pairs.reverse()
    used_a, used_b = {i for i, _ in pairs}, {j for _, j in pairs}
    for i in range(n):
        if i in used_a:
            continue
        free = [j for j in range(m) if j not in used_b and sig_b[j] == sig_a[i]]
        if free:
            j = max(free, key=lambda k: (_hint(a[i], b[k]), -k))
            pairs.append((i, j))
            used_b.add(j)
    return sorted(pairs)


def pair_within(a: Holder, b: Holder) -> list:
    """``[(ms name, torch name, fit)]`` inside a holder pair: by role, then by shape in creation order (table
    layouts before shape algebra). Tensors that find nothing are left out."""
    free = list(range(len(b.names)))
    found, pending = [], []
    for i, roles in enumerate(a.roles):
        j = next((j for j in free if b.roles[j][0] in roles and shape_fit(a.shapes[i], b.shapes[j])), None)
        if j is None:
            pending.append(i)
            continue
        found.append((a.names[i], b.names[j], shape_fit(a.shapes[i], b.shapes[j])))
        free.remove(j)
    for fit in (TABLE, UNIT_AXES):
        for i in list(pending):
            j = next((j for j in free if shape_fit(a.shapes[i], b.shapes[j]) == fit), None)
            if j is not None:
                found.append((a.names[i], b.names[j], fit))
                free.remove(j)
                pending.remove(i)
    return found


def match(a: list, b: list, out: list) -> None:
    """Holder pairs of two sequences of holders and modules, top down: items with equal signatures are aligned
    (:func:`align`), an aligned pair of modules is matched inside, and the items left over on both sides are
    replaced by their children and aligned again (a container split differently in the two models)."""
    pairs = align(a, b)
    for i, j in pairs:
        if isinstance(a[i], Holder) and isinstance(b[j], Holder):
            out.append((a[i], b[j]))
        else:
            match(_open([a[i]]), _open([b[j]]), out)
    used_a, used_b = {i for i, _ in pairs}, {j for _, j in pairs}
    rest_a = [item for i, item in enumerate(a) if i not in used_a]
    rest_b = [item for j, item in enumerate(b) if j not in used_b]
    if any(isinstance(item, Node) for item in rest_a + rest_b):
        match(_open(rest_a), _open(rest_b), out)


def _open(items: list) -> list:
    return [inner for item in items for inner in (item.items() if isinstance(item, Node) else [item])]


def pair_by_structure(a: list, b: list) -> list:
    """``[(ms name, torch name, fit)]`` for the holders ``a`` (MindSpore) and ``b`` (PyTorch): holders matched down
    the two module trees (:func:`match`) and paired inside, then each tensor still left takes the first left-over
    PyTorch tensor of the same role whose shape fits (a module split differently in the two models)."""
    found, holder_pairs = [], []
    match([tree(a)], [tree(b)], holder_pairs)
    for holder_a, holder_b in holder_pairs:
        found += pair_within(holder_a, holder_b)
    done_a, done_b = {ms for ms, _, _ in found}, {torch for _, torch, _ in found}
    rest_b = [(name, roles[0], shape) for h in b for name, roles, shape in zip(h.names, h.roles, h.shapes)
              if name not in done_b]
    for holder in a:
        for name, roles, shape in zip(holder.names, holder.roles, holder.shapes):
            if name in done_a:
                continue
            index = next((k for k, (_, role, other) in enumerate(rest_b)
                          if role.rpartition(".")[2] in {r.rpartition(".")[2] for r in roles}
                          and shape_fit(shape, other)), None)
            if index is not None:
                found.append((name, rest_b[index][0], shape_fit(shape, rest_b[index][2])))
                del rest_b[index]
    return found


def module_map(pairs: Mapping[str, str], ms_paths: Mapping[str, str], torch_names: Iterable[str]) -> dict:
    """MindSpore cell path -> PyTorch module name, containers included: a cell maps to a PyTorch module that holds
    the partners of all its tensors and no other tensor (``pairs``: MindSpore parameter name -> PyTorch name;
    ``ms_paths``: parameter name -> its path in the cell). Where wrappers nest around the same tensors on both
    sides (``features.3`` > ``features.3.layers``, ``features.1`` > ``features.1.conv``), the innermost pair up
    and the wrappers outermost first; a side with fewer wrappers gives its innermost module to the rest."""
    under_torch: dict = {}
    for name in torch_names:
        parts = name.split(".")
        for cut in range(len(parts)):
            key = ".".join(parts[:cut])
            under_torch[key] = under_torch.get(key, 0) + 1
    partners: dict = {}
    for ms_name, torch_name in pairs.items():
        parts = ms_paths.get(ms_name, ms_name).split(".")
        for cut in range(1, len(parts)):
            partners.setdefault(".".join(parts[:cut]), {})[torch_name] = torch_name.split(".")[:-1]
    chains: dict = {}   # PyTorch module -> the MindSpore cells whose tensors it holds exactly
    for cell, named in partners.items():
        owners = list(named.values())   # one entry per PyTorch tensor (parts split from one tensor share it)
        common = owners[0]
        for other in owners[1:]:
            cut = next((k for k, (x, y) in enumerate(zip(common, other)) if x != y), min(len(common), len(other)))
            common = common[:cut]
        target = ".".join(common)
        if target and under_torch.get(target) == len(owners):
            chains.setdefault(target, []).append(cell)
    modules = {}
    for target, cells in chains.items():
        parts = target.split(".")
        torch_chain = [".".join(parts[:cut]) for cut in range(1, len(parts) + 1)
                       if under_torch.get(".".join(parts[:cut])) == under_torch[target]]
        cells.sort(key=lambda cell: cell.count("."))
        modules[cells[-1]] = torch_chain[-1]   # the layers themselves
        for k, cell in enumerate(cells[:-1]):  # the wrappers around them, outermost first
            modules[cell] = torch_chain[k] if k < len(torch_chain) - 1 else torch_chain[-1]
    return modules
