"""One sync dump as the dump comparison reads it: its index, the output shapes matching needs, and tensor files read
and compared pair by pair (an unreadable file is a ``not comparable`` result, never an exception)."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Optional, Union

from msdebug_hooks.compare.dump_matching import order_key
from msdebug_hooks.compare.metrics import TensorComparison, Tolerance, compare_arrays, not_comparable
from msdebug_hooks.dump import npy
from msdebug_hooks.dump.index import CONSTANT, GraphIndex, NodeInfo
from msdebug_hooks.dump.layout import TensorFile
from msdebug_hooks.dump.reader import DumpDir
from msdebug_hooks.errors import DumpError

PathLike = Union[str, Path]


class Side:
    """One dump: its index, and output shapes of its nodes at a sample iteration (for matching)."""

    def __init__(self, path: PathLike) -> None:
        self.dump = DumpDir(path)
        if self.dump.layout != "sync":
            raise DumpError(self.dump.root, "a sync dump (rank_<id>/...)", detail=f"found a {self.dump.layout} dump")
        self.index = GraphIndex(self.dump)
        self.version = self.dump.mindspore_version

    def nodes(self, rank: int, graph_id: int) -> list[NodeInfo]:
        return sorted((i for i in self.index.nodes.values()
                       if i.rank == rank and i.graph_id == graph_id and i.flat_name and i.node_type != CONSTANT),
                      key=order_key)

    def output_shapes(self, info: NodeInfo, iteration: int) -> Optional[tuple]:
        shapes = []
        for slot in info.output_slots:
            found = self.index.tensor_file(info, iteration, slot)
            if found is None:
                return None
            try:
                shapes.append(npy.read_header(found.path).shape)
            except DumpError:
                return None   # unreadable: matched by order alone; the comparison reports the file
        return tuple(shapes)


def _load(found: TensorFile, side: str) -> Any:
    try:
        return npy.load(found.path)
    except DumpError as exc:
        return f"{side}: {exc}"
    except (OSError, ValueError) as exc:
        return f"{side}: {found.path}: cannot be read ({exc})"


def compare_files(file_a: TensorFile, file_b: TensorFile, tolerance: Optional[Tolerance] = None, *,
                  any_shape: bool = False) -> TensorComparison:
    """Compare two dumped tensor files; an unreadable or truncated file is a ``not comparable`` result.

    ``any_shape``: two versions' dumps of one tensor may differ in shape alone (2.8+ write reshape outputs in the
    input's shape); with the same number of elements they are compared in memory order and the reason says so."""
    a = _load(file_a, "A")
    b = _load(file_b, "B")
    if isinstance(a, str) or isinstance(b, str):
        return not_comparable("; ".join(x for x in (a, b) if isinstance(x, str)),
                              shape_a=getattr(a, "shape", None), shape_b=getattr(b, "shape", None),
                              dtype_a=getattr(getattr(a, "dtype", None), "name", ""),
                              dtype_b=getattr(getattr(b, "dtype", None), "name", ""))
    if any_shape and a.shape != b.shape and a.size == b.size:
        result = compare_arrays(a.reshape(b.shape), b, tolerance)
        return dataclasses.replace(result, shape_a=tuple(a.shape), reason=f"{result.reason} (compared element by "
                                   f"element: dumped as {list(a.shape)} and {list(b.shape)})")
    return compare_arrays(a, b, tolerance)
