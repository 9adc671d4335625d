"""Walk a MindSpore dump directory lazily: list what is there, open nothing until asked.

Sync (e2e) layout, what every 2.x CPU/GPU job writes::

    <path>/rank_<r>/<net_name>/<graph_id>/<iteration>/<tensor files>, statistic.csv
    <path>/rank_<r>/<net_name>/<graph_id>/constants/<tensor files>
    <path>/rank_<r>/graphs/ms_output_trace_code_graph_<g>.ir|.pb
    <path>/rank_<r>/execution_order/ms_execution_order_graph_<g>.csv, ms_global_execution_order_graph_<g>.csv
    <path>/rank_<r>/.dump_metadata/config.json, data_dump.json

Ascend async layout (``file_format: npy``), read for its tensors only::

    <path>/<time>/<device_id>/<model_name>/<model_id>/<iteration>/<tensor files>, statistic.csv, mapping.csv

Files whose names were too long are stored under a number and listed in ``mapping.csv`` (``number,original name``).
"""
from __future__ import annotations

import csv
import json
from functools import lru_cache
from pathlib import Path
from typing import Optional

from msdebug_hooks.dump import layout
from msdebug_hooks.dump.ir_trace import IrGraph, parse_ir
from msdebug_hooks.dump.layout import TensorFile, parse_tensor_file_name
from msdebug_hooks.errors import DumpError

_EXPECTED = ("a MindSpore dump directory (the dump config's 'path'): rank_<id>/<net_name>/<graph_id>/<iteration>/ "
             "for a sync dump, or <time>/<device_id>/<model_name>/<model_id>/<iteration>/ for an async dump")


def _int_dirs(path: Path) -> dict[int, Path]:
    try:
        return {int(p.name): p for p in path.iterdir() if p.is_dir() and p.name.isdigit()}
    except OSError:
        return {}


class DumpDir:
    """One dump directory: ranks, graphs, iterations, tensor files, and the side files MindSpore writes.

    Only directory listings happen at construction; file lists are read per iteration directory when asked;
    arrays are never loaded here (see :mod:`msdebug_hooks.dump.npy`).
    """

    def __init__(self, path: Path | str) -> None:
        self.root = Path(path).expanduser()
        if not self.root.exists():
            raise DumpError(self.root, _EXPECTED, detail="path does not exist")
        if not self.root.is_dir():
            raise DumpError(self.root, _EXPECTED, detail="not a directory")
        # (rank, graph_id, iteration) -> directory;  (rank, graph_id) -> constants directory
        self._iter_dirs: dict[tuple[int, int, int], Path] = {}
        self._const_dirs: dict[tuple[int, int], Path] = {}
        self._rank_dirs: dict[int, Path] = {}
        self.layout = self._scan_sync() or self._scan_async()
        if not self.layout:
            entries = sorted(p.name for p in self.root.iterdir())[:8]
            detail = f"found {entries or 'an empty directory'}"
            if layout.RANK_DIR.match(self.root.name) or (self.root / "graphs").is_dir():
                detail += f"; this looks like a rank directory: pass its parent {self.root.parent}"
            raise DumpError(self.root, _EXPECTED, detail=detail)

    # ---- discovery --------------------------------------------------------------------------------------------
    def _scan_sync(self) -> str:
        for entry in self.root.iterdir():
            match = layout.RANK_DIR.match(entry.name)
            if match and entry.is_dir():
                self._rank_dirs[int(match[1])] = entry
        if not self._rank_dirs:
            return ""
        for rank, rank_dir in self._rank_dirs.items():
            for net_dir in rank_dir.iterdir():
                if not net_dir.is_dir() or net_dir.name in layout.SPECIAL_RANK_ENTRIES:
                    continue
                for graph_id, graph_dir in _int_dirs(net_dir).items():
                    for iteration, iter_dir in _int_dirs(graph_dir).items():
                        self._iter_dirs[(rank, graph_id, iteration)] = iter_dir
                    constants = graph_dir / layout.CONSTANTS_DIR
                    if constants.is_dir():
                        self._const_dirs[(rank, graph_id)] = constants
        return "sync"

    def _scan_async(self) -> str:
        for time_dir in self.root.iterdir():
            for device_id, device_dir in _int_dirs(time_dir).items():
                for model_dir in (p for p in device_dir.iterdir() if p.is_dir()):
                    for model_id, model_id_dir in _int_dirs(model_dir).items():
                        for iteration, iter_dir in _int_dirs(model_id_dir).items():
                            self._iter_dirs[(device_id, model_id, iteration)] = iter_dir
        return "async" if self._iter_dirs else ""

    # ---- what is there ----------------------------------------------------------------------------------------
    def ranks(self) -> list[int]:
        return sorted(set(self._rank_dirs) | {key[0] for key in self._iter_dirs})

    def graphs(self, rank: int) -> list[int]:
        return sorted({g for (r, g, _) in self._iter_dirs if r == rank} | {g for (r, g) in self._const_dirs
                                                                            if r == rank})

    def iterations(self, rank: Optional[int] = None, graph_id: Optional[int] = None) -> list[int]:
        return sorted({i for (r, g, i) in self._iter_dirs
                       if (rank is None or r == rank) and (graph_id is None or g == graph_id)})

    def rank_dir(self, rank: int) -> Optional[Path]:
        return self._rank_dirs.get(rank)

    # ---- tensor files -----------------------------------------------------------------------------------------
    def tensor_files(self, rank: int, graph_id: int, iteration: int) -> list[TensorFile]:
        """The tensor files of one iteration directory (names parsed, nothing opened but ``mapping.csv``)."""
        return self._files(self._iter_dirs.get((rank, graph_id, iteration)))

    def constant_files(self, rank: int, graph_id: int) -> list[TensorFile]:
        return self._files(self._const_dirs.get((rank, graph_id)))

    @staticmethod
    def _files(directory: Optional[Path]) -> list[TensorFile]:
        # not cached here: a long run has more iteration directories than memory should hold listings for;
        # GraphIndex keeps a bounded LRU of the ones in use
        return list(_list_tensor_files(directory)) if directory is not None else []

    def statistics(self, rank: int, graph_id: int, iteration: int) -> list[dict[str, str]]:
        """Rows of ``statistic.csv`` (only written with ``saved_data`` statistic/full); ``[]`` when absent."""
        directory = self._iter_dirs.get((rank, graph_id, iteration))
        if not directory or not (directory / layout.STATISTIC_FILE).is_file():
            return []
        return [dict(row) for row in csv.DictReader(_text_lines(directory / layout.STATISTIC_FILE))]

    # ---- side files -------------------------------------------------------------------------------------------
    def _side_file(self, rank: int, sub: str, pattern, graph_id: int) -> Optional[Path]:
        rank_dir = self._rank_dirs.get(rank)
        directory = rank_dir / sub if rank_dir else None
        if directory is None or not directory.is_dir():
            return None
        for entry in directory.iterdir():
            match = pattern.match(entry.name)
            if match and int(match[1]) == graph_id:
                return entry
        return None

    def ir_graph(self, rank: int, graph_id: int) -> Optional[IrGraph]:
        """The parsed ``.ir`` of a graph (cached), or ``None`` when the dump has none (async, or deleted)."""
        path = self._side_file(rank, "graphs", layout.IR_FILE, graph_id)
        return _parse_ir_cached(path, graph_id, path.stat().st_mtime_ns) if path else None

    def execution_order(self, rank: int, graph_id: int) -> list[str]:
        """Kernel full names in execution order (``execution_order/ms_execution_order_graph_<g>.csv``)."""
        path = self._side_file(rank, "execution_order", layout.EXEC_ORDER_FILE, graph_id)
        if not path:
            return []
        return [name for name in _csv_column(path) if name and not name.startswith("NodeExecutionOrder")]

    def graph_history(self, rank: int, graph_id: int) -> list[int]:
        """Iterations in which the root graph ran (``ms_global_execution_order_graph_<g>.csv``)."""
        path = self._side_file(rank, "execution_order", layout.GRAPH_HISTORY_FILE, graph_id)
        if not path:
            return []
        return [int(item) for item in _csv_column(path) if item.strip().isdigit()]

    def metadata(self, rank: int) -> dict:
        """``.dump_metadata``: ``{"config": {...device_target, ms_version}, "data_dump": {...the dump json}}``."""
        rank_dir = self._rank_dirs.get(rank)
        result: dict = {}
        for key, name in (("config", "config.json"), ("data_dump", "data_dump.json")):
            path = rank_dir / ".dump_metadata" / name if rank_dir else None
            if path and path.is_file():
                try:
                    result[key] = json.loads(path.read_text(encoding="utf-8"))
                except (OSError, ValueError) as exc:
                    raise DumpError(path, "a JSON file", detail=str(exc)) from None
        return result

    @property
    def mindspore_version(self) -> Optional[str]:
        """The MindSpore version that wrote the dump (``ms_version`` in ``.dump_metadata/config.json``, written by
        2.7-2.10 sync dumps), or None when no rank records it (an async dump, a copy without the metadata)."""
        for rank in self.ranks():
            try:
                found = self.metadata(rank).get("config", {}).get("ms_version")
            except (DumpError, AttributeError):
                continue
            if isinstance(found, str) and found:
                return found
        return None

    def __repr__(self) -> str:
        return f"DumpDir({str(self.root)!r}, layout={self.layout}, ranks={self.ranks()})"


def _text_lines(path: Path) -> list[str]:
    """The lines of a CSV MindSpore wrote; ``DumpError`` naming the file when it is not UTF-8 text."""
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise DumpError(path, "a UTF-8 text file as MindSpore writes it",
                        detail=f"byte {exc.start}: {exc.reason}") from None


def _csv_column(path: Path) -> list[str]:
    return [line.strip().split(",")[0] for line in _text_lines(path)]


def _read_mapping(directory: Path) -> dict[str, str]:
    """``mapping.csv``: on-disk name -> original name; which column is which is decided by what exists on disk."""
    path = directory / layout.MAPPING_FILE
    if not path.is_file():
        return {}
    mapping = {}
    for row in csv.reader(_text_lines(path)):
        if len(row) < 2:
            continue
        first, second = row[0].strip(), row[1].strip()
        if (directory / first).exists():
            mapping[first] = second
        elif (directory / second).exists():
            mapping[second] = first
    return mapping


def _list_tensor_files(directory: Path) -> tuple[TensorFile, ...]:
    mapping = _read_mapping(directory)
    files = []
    for entry in directory.iterdir():
        real = mapping.get(entry.name)
        candidates = [real, real + ".npy"] if real else []
        for candidate in candidates + [None]:
            parsed = parse_tensor_file_name(entry, candidate)
            if parsed is not None:
                files.append(parsed)
                break
    files.sort(key=lambda f: (f.timestamp, f.op_name, f.io, f.slot))
    return tuple(files)


@lru_cache(maxsize=16)
def _parse_ir_cached(path: Path, graph_id: int, mtime_ns: int) -> IrGraph:   # mtime: a re-run dump is re-read
    return parse_ir(path, graph_id)
