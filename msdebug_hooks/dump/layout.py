"""Dump file names: what MindSpore encodes in them, parsed without opening the file.

MindSpore 2.10 names a tensor file
``<OpType>.<OpName>.<task>.<stream>.<timestamp>.<input|output>.<slot>.<format>.<dtype>.npy``; older releases left out
the dtype (``....<slot>.<format>.npy``). ``OpName`` is the node's full scope name with ``/``, ``\\``, ``.`` and spaces
replaced by ``_``, so it cannot be turned back into the scope name (``_backbone`` has its own ``_``); the fixed fields
are counted from the right and the op type is the first field.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

_FLATTEN = re.compile(r"[./\\ ]")
IO_KINDS = ("input", "output")


def flatten_name(name: str) -> str:
    """The form a node name takes inside a dump file name (``Default/conv1.weight`` -> ``Default_conv1_weight``)."""
    return _FLATTEN.sub("_", name)


@dataclass(frozen=True)
class TensorFile:
    """One dumped tensor file, described by its name alone."""

    path: Path
    op_type: str
    op_name: str          # flattened full name, as in the file name
    task_id: int
    stream_id: int
    timestamp: int
    io: str               # "input" or "output"
    slot: int
    format: str
    dtype: Optional[str]  # None for the older name format


def parse_tensor_file_name(path: Path | str, real_name: Optional[str] = None) -> Optional[TensorFile]:
    """Parse a tensor file name; ``None`` when the name is not a tensor file (``statistic.csv``, ``*.json``, ...).

    ``real_name`` is the original name when the file on disk was renamed (async dump's ``mapping.csv``).
    """
    if real_name is not None:
        name = real_name
    else:
        name = path.name if isinstance(path, Path) else os.path.basename(path)
    if not name.endswith(".npy"):
        return None
    if not isinstance(path, Path):      # listings hand in Paths already: building one again costs more than parsing
        path = Path(path)
    parts = name[: -len(".npy")].split(".")
    # 2.10:  type . name . task . stream . ts . io . slot . format . dtype
    # older: type . name . task . stream . ts . io . slot . format
    for tail, has_dtype in ((4, True), (3, False)):
        if len(parts) < 5 + tail or parts[-tail] not in IO_KINDS:
            continue
        io_index = len(parts) - tail
        task, stream, stamp = parts[io_index - 3: io_index]
        slot = parts[io_index + 1]
        if not (task.isdigit() and stream.isdigit() and stamp.isdigit() and slot.isdigit()):
            continue
        op_name = ".".join(parts[1: io_index - 3])
        if not op_name:
            continue
        return TensorFile(path=path, op_type=parts[0], op_name=op_name, task_id=int(task), stream_id=int(stream),
                          timestamp=int(stamp), io=parts[io_index], slot=int(slot), format=parts[io_index + 2],
                          dtype=parts[-1] if has_dtype else None)
    return None


# file names under rank_<r>/
RANK_DIR = re.compile(r"^rank_(\d+)$")
IR_FILE = re.compile(r"^ms_output_trace_code_graph_(\d+)\.ir$")
PB_FILE = re.compile(r"^ms_output_trace_code_graph_(\d+)\.pb$")
EXEC_ORDER_FILE = re.compile(r"^ms_execution_order_graph_(\d+)\.csv$")
GRAPH_HISTORY_FILE = re.compile(r"^ms_global_execution_order_graph_(\d+)\.csv$")
SPECIAL_RANK_ENTRIES = {"graphs", "execution_order", ".dump_metadata"}
CONSTANTS_DIR = "constants"
STATISTIC_FILE = "statistic.csv"
MAPPING_FILE = "mapping.csv"
