"""Per-step loss records, written by any training loop and read back for ``msdebug compare-loss``.

The record is JSON Lines, one object per step: ``{"step": 1, "epoch": 1, "rank": 0, "loss": 2.30, "overflow":
false, "loss_scale": 4096.0}`` (``overflow`` and ``loss_scale`` only when the train cell returns them). One file per
rank (``loss_rank_<r>.jsonl`` in the given directory). Lines are appended whole and flushed at once, and the file is
fsync'ed every ``fsync_every`` steps, so a run that crashes keeps every step it logged.

The reader also takes CSV with ``step`` and ``loss`` columns, and any text log with a user-given regular expression
whose named groups are ``step`` and ``loss``. This module never imports MindSpore or PyTorch.
"""
from __future__ import annotations

import csv
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from msdebug_hooks.errors import ConfigError
from msdebug_hooks.validation import whole_number

PathLike = Union[str, "os.PathLike[str]"]

#: the name of one rank's record inside a directory
RECORD_NAME = "loss_rank_{rank}.jsonl"


def record_path(directory: PathLike, rank: int) -> Path:
    return Path(directory).expanduser() / RECORD_NAME.format(rank=rank)


class LossWriter:
    """Append one rank's per-step losses to a JSON Lines file; usable from any loop (PyTorch, plain numpy, ...).

    Args:
        target: a directory (the file is ``loss_rank_<rank>.jsonl`` in it) or a file path ending in ``.jsonl``.
        rank: the rank written into every record and the file name (default: this process's rank).
        fsync_every: fsync the file every this many records (every record is flushed to the OS at once; fsync
            makes it survive a machine crash too). 0: only at ``close()``.

    Example (PyTorch)::

        with LossWriter("runs/torch") as losses:
            for step, (x, y) in enumerate(loader, start=1):
                loss = train_step(x, y)
                losses.write(step, loss.item(), epoch=epoch)
    """

    def __init__(self, target: PathLike, rank: Optional[int] = None, *, fsync_every: int = 20) -> None:
        if rank is None:
            from msdebug_hooks.rank import rank_id
            rank = rank_id()
        whole_number("rank", rank, minimum=0, allowed="None or an int >= 0")
        whole_number("fsync_every", fsync_every, minimum=0, allowed="an int >= 0 (0: fsync only at close)")
        path = Path(target).expanduser()
        self.path = path if path.suffix == ".jsonl" else record_path(path, rank)
        self.rank = rank
        self.fsync_every = fsync_every
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = open(self.path, "a", encoding="utf-8", buffering=1)  # line-buffered: each record flushed
        self._unsynced = 0

    def write(self, step: int, loss: Optional[float], *, epoch: Optional[int] = None,
              overflow: Optional[bool] = None, loss_scale: Optional[float] = None) -> None:
        """Append one step's record. A non-finite loss is written as the JSON strings "nan"/"inf"/"-inf"."""
        if self._handle.closed:
            raise ValueError(f"{self.path}: LossWriter is closed")
        record: dict[str, Any] = {"step": int(step)}
        if epoch is not None:
            record["epoch"] = int(epoch)
        record["rank"] = self.rank
        record["loss"] = _json_float(loss)
        if overflow is not None:
            record["overflow"] = bool(overflow)
        if loss_scale is not None:
            record["loss_scale"] = _json_float(loss_scale)
        self._handle.write(json.dumps(record) + "\n")
        self._unsynced += 1
        if self.fsync_every and self._unsynced >= self.fsync_every:
            self.sync()

    def sync(self) -> None:
        """Flush and fsync what was written so far."""
        if not self._handle.closed:
            self._handle.flush()
            os.fsync(self._handle.fileno())
            self._unsynced = 0

    def close(self) -> None:
        if not self._handle.closed:
            self.sync()
            self._handle.close()

    def __enter__(self) -> "LossWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _json_float(value: Optional[float]) -> Any:
    if value is None:
        return None
    if hasattr(value, "item"):      # a 0-d tensor of any framework, or a numpy scalar: read without autograd noise
        value = value.item()
    value = float(value)
    return value if math.isfinite(value) else str(value)  # JSON has no NaN: "nan", "inf", "-inf"


# --- reading --------------------------------------------------------------------------------------------------------

class LossFileError(ValueError):
    """A loss record or log that cannot be read: ``path`` and ``line`` (1-based, 0 for the whole file) say where."""

    def __init__(self, path: PathLike, line: int, message: str) -> None:
        self.path = str(path)
        self.line = line
        super().__init__(f"{self.path}:{line}: {message}" if line else f"{self.path}: {message}")


@dataclass
class LossSeries:
    """One run's losses by step: ``losses[step]`` and the line each came from."""

    path: str
    losses: dict[int, float] = field(default_factory=dict)
    lines: dict[int, int] = field(default_factory=dict)
    duplicates: int = 0   # steps logged more than once (a resumed run appending): the last one is kept

    @property
    def steps(self) -> list[int]:
        return sorted(self.losses)


def _number(text: Any, path: PathLike, line: int, name: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        raise LossFileError(path, line, f"{name}={text!r} is not a number") from None


def _step(text: Any, path: PathLike, line: int) -> int:
    if isinstance(text, bool):
        raise LossFileError(path, line, f"step={text!r} is not an int >= 0")
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise LossFileError(path, line, f"step={text!r} is not an int >= 0") from None
    if value < 0 or (isinstance(text, float) and text != value):
        raise LossFileError(path, line, f"step={text!r} is not an int >= 0")
    return value


def _add(series: LossSeries, step: int, loss: float, line: int, allow_nonfinite: bool) -> None:
    if not math.isfinite(loss) and not allow_nonfinite:
        raise LossFileError(series.path, line, f"loss at step {step} is {loss}: compare-loss needs finite losses "
                                               f"(--allow-nonfinite counts a non-finite loss as a difference)")
    if step in series.losses:
        series.duplicates += 1
    series.losses[step] = loss
    series.lines[step] = line


def compile_pattern(pattern: str) -> re.Pattern:
    """A user's log pattern; it must have the named groups ``step`` and ``loss``."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ConfigError("--pattern", pattern, f"a Python regular expression ({exc})") from None
    missing = {"step", "loss"} - set(compiled.groupindex)
    if missing:
        raise ConfigError("--pattern", pattern, f"a regular expression with the named groups (?P<step>...) and "
                                                f"(?P<loss>...); missing: {', '.join(sorted(missing))}")
    return compiled


def read_losses(path: PathLike, pattern: Optional[str] = None, *, rank: int = 0,
                allow_nonfinite: bool = False) -> LossSeries:
    """Read one run's losses from a JSON Lines record, a CSV with ``step``/``loss`` columns, or a text log.

    ``path`` may be a directory holding ``loss_rank_<rank>.jsonl``. A text log needs ``pattern``: a regular
    expression with named groups ``step`` and ``loss`` (lines that do not match are skipped). Raises
    :class:`LossFileError` naming the file and line for anything it cannot read.
    """
    source = Path(path).expanduser()
    if source.is_dir():
        source = record_path(source, rank)
    if not source.is_file():
        raise LossFileError(source, 0, "no such file" if not source.exists() else "not a file")
    compiled = compile_pattern(pattern) if pattern is not None else None
    series = LossSeries(str(source))
    try:
        with open(source, encoding="utf-8", errors="replace", newline="") as handle:
            if compiled is not None:
                _read_log(handle, compiled, series, allow_nonfinite)
            elif source.suffix.lower() == ".csv":
                _read_csv(handle, series, allow_nonfinite)
            else:
                _read_jsonl(handle, series, allow_nonfinite)
    except OSError as exc:
        raise LossFileError(source, 0, f"cannot be read ({exc.strerror or exc})") from None
    if not series.losses:
        raise LossFileError(source, 0, "holds no loss records" + (f" matching --pattern {pattern!r}" if pattern
                                                                  else ""))
    return series


def _read_jsonl(handle, series: LossSeries, allow_nonfinite: bool) -> None:
    for number, text in enumerate(handle, start=1):
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except ValueError as exc:
            hint = " (a text log? pass --pattern with (?P<step>..) and (?P<loss>..) groups)" if number == 1 else ""
            raise LossFileError(series.path, number, f"not a JSON object: {exc}{hint}") from None
        if not isinstance(record, dict) or "step" not in record or "loss" not in record:
            keys = sorted(record) if isinstance(record, dict) else type(record).__name__
            raise LossFileError(series.path, number, f"a record needs the keys 'step' and 'loss'; found {keys}")
        if record["loss"] is None:
            continue  # a step without a loss (custom train cell): nothing to compare
        _add(series, _step(record["step"], series.path, number),
             _number(record["loss"], series.path, number, "loss"), number, allow_nonfinite)


def _read_csv(handle, series: LossSeries, allow_nonfinite: bool) -> None:
    reader = csv.DictReader(handle)
    columns = [c.strip() for c in reader.fieldnames or []]
    if "step" not in columns or "loss" not in columns:
        raise LossFileError(series.path, 1, f"a CSV needs the columns 'step' and 'loss'; found {columns}")
    reader.fieldnames = columns
    for row in reader:
        number = reader.line_num
        if None in row or any(row[c] is None for c in ("step", "loss")):
            raise LossFileError(series.path, number, f"expected {len(columns)} columns, found another count")
        if not row["loss"].strip():
            continue
        _add(series, _step(row["step"].strip(), series.path, number),
             _number(row["loss"].strip(), series.path, number, "loss"), number, allow_nonfinite)


def _read_log(handle, pattern: re.Pattern, series: LossSeries, allow_nonfinite: bool) -> None:
    for number, text in enumerate(handle, start=1):
        match = pattern.search(text)
        if match is None:
            continue
        _add(series, _step(match["step"], series.path, number), _number(match["loss"], series.path, number, "loss"),
             number, allow_nonfinite)
