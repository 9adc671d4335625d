"""A sync dump being written: its size while it grows, the disk guard, and waiting until it is complete.

MindSpore writes a sync dump from inside the run (``<path>/rank_<r>/<net_name>/<graph_id>/<iteration>/``); files of a
step can still be landing when the call that ran it has returned, and a process that was killed leaves a dump cut
short. So before a dump is read, :func:`wait_for_dump` polls until every expected iteration directory of every rank
is there and the listing (names and sizes) has not changed between two looks.

The disk guard (:class:`DiskGuard`) watches a dump while the run writes it and stops it before it fills the disk:
a dump of N steps in R runs needs about N x R times what one dumped step takes, so the size of the first step is the
estimate. It says stop as soon as the first step alone is over its share of ``max_bytes``, or once the first step is
complete (the next step's directory appears, or the run ended) and the estimate is over ``max_bytes`` or over the
free space of the disk.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Callable, Iterable, Optional

from msdebug_hooks.dump.layout import CONSTANTS_DIR, RANK_DIR, SPECIAL_RANK_ENTRIES
from msdebug_hooks.errors import DumpError

GB = 1024 ** 3
POLL_SECONDS = 0.5


def _tree_size(path: Path) -> int:
    total = 0
    try:
        entries = list(os.scandir(path))
    except OSError:
        return 0
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                total += _tree_size(Path(entry.path))
            elif entry.is_file(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
        except OSError:   # a file renamed or removed while we looked
            continue
    return total


def _int_entries(path: Path) -> list[Path]:
    try:
        return [p for p in path.iterdir() if p.is_dir() and p.name.isdigit()]
    except OSError:
        return []


def iteration_dirs(dump: Path) -> dict[tuple[int, int], list[Path]]:
    """``{(rank, iteration): [directory per graph]}`` of a sync dump as it stands now (empty while none exists)."""
    found: dict[tuple[int, int], list[Path]] = {}
    try:
        rank_dirs = [(RANK_DIR.match(p.name), p) for p in Path(dump).iterdir() if p.is_dir()]
    except OSError:
        return found
    for match, rank_dir in rank_dirs:
        if match is None:
            continue
        try:
            nets = [p for p in rank_dir.iterdir() if p.is_dir() and p.name not in SPECIAL_RANK_ENTRIES]
        except OSError:
            continue
        for net in nets:
            for graph in _int_entries(net):
                for iteration in _int_entries(graph):
                    if iteration.name != CONSTANTS_DIR:
                        found.setdefault((int(match[1]), int(iteration.name)), []).append(iteration)
    return found


def _listing(dump: Path) -> tuple:
    """Every file under ``dump`` with its size: two equal listings a poll apart mean the writing has settled."""
    entries = []
    for root, _dirs, files in os.walk(dump):
        for name in files:
            path = os.path.join(root, name)
            try:
                entries.append((path, os.stat(path).st_size))
            except OSError:
                entries.append((path, -1))
    return tuple(sorted(entries))


def wait_for_dump(dump: Path, ranks: Iterable[int], iterations: Iterable[int], *, timeout: float = 60.0,
                  poll: float = POLL_SECONDS, run: str = "") -> None:
    """Return once every rank's expected iterations are in ``dump`` and its files stopped changing.

    Raises :class:`DumpError` after ``timeout`` seconds naming what is missing (a dump in PyNative mode, where
    MindSpore 2.10 dumps only the optimizer graph, or a run that stopped early), or that files still change.
    """
    dump = Path(dump)
    wanted = {(rank, iteration) for rank in ranks for iteration in iterations}
    deadline = time.monotonic() + timeout
    previous: Optional[tuple] = None
    while True:
        present = iteration_dirs(dump)
        missing = sorted(wanted - set(present))
        listing = _listing(dump) if not missing else None
        if listing is not None and listing == previous and all(size >= 0 for _p, size in listing):
            return
        previous = listing
        if time.monotonic() >= deadline:
            who = f"run {run}'s " if run else ""
            if missing:
                detail = (f"missing (rank, iteration): {missing}; found {sorted(present) or 'none'} after waiting "
                          f"{timeout:g} s. The script must train in GRAPH_MODE (in PyNative mode MindSpore 2.10 dumps "
                          f"only the optimizer graph) and reach the step")
            else:
                detail = f"files were still changing after {timeout:g} s (raise --dump-wait)"
            raise DumpError(dump, f"{who}sync dump of iterations {sorted(set(iterations))} for ranks "
                                  f"{sorted(set(ranks))}", detail=detail)
        time.sleep(poll)


def free_bytes(path: Path) -> int:
    """Free space on the disk holding ``path`` (its nearest existing parent)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


class DiskGuard:
    """Watch a dump while its run writes it; :meth:`check` returns why to stop it, or ``None``.

    Args:
        dump: the dump directory being written.
        iterations: the iterations the config selects.
        runs: how many runs, this one included, will still write a dump like this one.
        max_bytes: the most those dumps may take together (the user's limit less what earlier dumps took).
        free: bytes free for them now (default: the free space of the dump's disk, looked up at each check).
        limit: how the error names ``max_bytes`` (e.g. ``--max-dump-gb 10``).
    """

    def __init__(self, dump: Path, iterations: Iterable[int], *, runs: int, max_bytes: float,
                 free: Optional[Callable[[], int]] = None, limit: str = "") -> None:
        self.dump = Path(dump)
        self.limit = limit or f"the limit of {size_text(max_bytes)}"
        self.iterations = sorted(set(iterations))
        self.runs = runs
        self.max_bytes = max_bytes
        self._free = free or (lambda: free_bytes(self.dump))
        #: the first dumped step's size once known (all ranks), and the estimate of every dump still to write
        self.step_bytes: Optional[int] = None
        self.estimate: Optional[int] = None

    def _first_step_size(self) -> tuple[int, bool]:
        """The bytes written so far for the first iteration (every rank and graph), and whether it is complete."""
        present = iteration_dirs(self.dump)
        first = self.iterations[0]
        size = sum(_tree_size(d) for (_rank, it), dirs in present.items() if it == first for d in dirs)
        later = any(it > first for (_rank, it) in present)
        return size, later

    def _verdict(self, size: int, complete: bool, written: int) -> Optional[str]:
        count = len(self.iterations) * self.runs
        total = size * count
        plan = f"{len(self.iterations)} step(s) in {self.runs} run(s)"
        free = self._free()
        if complete:
            self.step_bytes, self.estimate = size, total
            what = f"one dumped step takes {size_text(size)}: {plan} need about {size_text(total)}"
        else:
            what = (f"the first dumped step already takes {size_text(size)} and is not complete: {plan} need more "
                    f"than {size_text(total)}")
        if total > self.max_bytes:
            return f"{what}, over {self.limit}"
        if total - written > free:
            return f"{what}, more than the {size_text(free)} free on the disk of {self.dump}"
        return None

    def check(self, finished: bool = False) -> Optional[str]:
        """Why the run should stop now (``None``: go on). ``finished``: the run has ended (its dump is complete)."""
        if self.estimate is not None:
            return None
        size, later = self._first_step_size()
        if size == 0 and not finished:
            return None
        return self._verdict(size, later or finished, _tree_size(self.dump))

    def check_known(self, step_bytes: int) -> Optional[str]:
        """Before a run starts: why not to start it when one dumped step is known to take ``step_bytes``."""
        return self._verdict(step_bytes, True, 0)


def size_text(size: float) -> str:
    """``3.7 MB``, ``1.2 GB``: a size as a person reads it."""
    for unit, scale in (("GB", GB), ("MB", 1024 ** 2), ("KB", 1024)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{int(size)} bytes"
