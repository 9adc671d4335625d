"""Reading dumped ``.npy`` files safely: header first, size checked, data memory-mapped.

A dump written by a job that was killed can hold truncated files; ``np.load`` then fails deep inside numpy with a
message that names neither the file nor the problem. Here the header is read and the file size checked against it
before any data is touched, and the data is memory-mapped so checking a tensor never costs more than the pages read.
"""
from __future__ import annotations

import io
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Optional

import numpy as np

from msdebug_hooks.errors import DumpError


@dataclass(frozen=True)
class NpyHeader:
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool
    data_offset: int

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


class NpyContents(NamedTuple):
    """What ``read_array`` read: the header, and the data (read-only; None when it was larger than asked for)."""

    header: NpyHeader
    data: Optional[np.ndarray]


_MAGIC = b"\x93NUMPY"
# the header numpy writes: {'descr': '<f4', 'fortran_order': False, 'shape': (32, 6), }
_SIMPLE_HEADER = re.compile(r"^\{'descr': '([<>|=]?[a-zA-Z]\d*)', 'fortran_order': (True|False), "
                            r"'shape': \(((?:\d+, ?)*\d*)\), \}\s*$")


def _parse_header(handle, path: Path | str) -> tuple[tuple[int, ...], bool, np.dtype]:
    """numpy's own header, read with a regex when it has numpy's usual form (MindSpore's does), else with numpy."""
    prefix = handle.read(10)
    if len(prefix) == 10 and prefix[:6] == _MAGIC and prefix[6] == 1:
        length = int.from_bytes(prefix[8:10], "little")
        text = handle.read(length).decode("latin1")
        match = _SIMPLE_HEADER.match(text) if len(text) == length else None
        if match:
            shape = tuple(int(n) for n in match[3].replace(" ", "").split(",") if n)
            return shape, match[2] == "True", np.dtype(match[1])
    handle.seek(0)
    version = np.lib.format.read_magic(handle)
    reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    return reader(handle)


def read_header(path: Path | str) -> NpyHeader:
    """Shape and dtype of a ``.npy`` file without reading its data; ``DumpError`` if it is not a whole ``.npy``."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            return _checked_header(handle, path, os.fstat(handle.fileno()).st_size)
    except FileNotFoundError:
        raise DumpError(path, "an existing dump file", detail="file not found") from None


def _checked_header(handle, path: Path | str, size: int) -> NpyHeader:
    """The header read from ``handle`` (left positioned at the data), checked against the file's ``size``."""
    try:
        shape, fortran, dtype = _parse_header(handle, path)
    except (ValueError, OSError, EOFError, TypeError) as exc:
        # numpy's literal_eval failure names a Python AST object: say what is wrong instead
        reason = "the header dictionary is malformed" if "<ast." in str(exc) else str(exc)
        raise DumpError(Path(path), "a .npy file (numpy magic and header)", detail=reason) from None
    offset = handle.tell()
    header = NpyHeader(tuple(int(n) for n in shape), np.dtype(dtype), bool(fortran), offset)
    if header.dtype.hasobject:
        raise DumpError(Path(path), "a numeric .npy array", detail=f"object dtype {header.dtype}")
    if size < offset + header.nbytes:
        raise DumpError(Path(path), f"{offset + header.nbytes} bytes for shape {header.shape} {header.dtype}",
                        detail=f"file has {size} bytes: truncated")
    return header


_HEADER_PEEK = 4096   # numpy and MindSpore write headers of 128 bytes; longer ones are read in a second call


def read_array(path: Path | str, *, max_bytes: Optional[int] = None) -> NpyContents:
    """Header and data of ``path`` with one ``read`` of the whole file into the array's own buffer (``np.load`` of
    the same file costs more: it parses the header with ``literal_eval`` and reads in pieces).

    The array is read-only; it is ``None`` when the data is larger than ``max_bytes`` (when given): then only the
    header is read, so the caller can refuse the tensor or map it instead. ``DumpError`` as :func:`read_header`.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise DumpError(Path(path), "an existing dump file", detail="file not found") from None
    try:
        size = os.fstat(fd).st_size
        if max_bytes is not None and size > max_bytes + _HEADER_PEEK:       # too large to take: its header only
            return NpyContents(_checked_header(_HeaderReader(fd, size), path, size), None)
        raw = np.empty(size, np.uint8)
        if size and os.readv(fd, [raw]) != size:
            raise DumpError(Path(path), f"{size} bytes", detail="the file shrank while being read")
    finally:
        os.close(fd)
    header = _checked_header(io.BytesIO(raw[:_header_length(raw)].tobytes()), path, size)
    nbytes, offset = header.nbytes, header.data_offset
    if max_bytes is not None and nbytes > max_bytes:
        return NpyContents(header, None)
    data = raw[offset:offset + nbytes].view(header.dtype)
    if offset % header.dtype.alignment:
        data = data.copy()
    data = data.reshape(header.shape, order="F" if header.fortran_order else "C")
    data.flags.writeable = False
    return NpyContents(header, data)


def _header_length(raw: np.ndarray) -> int:
    """Bytes of magic, version, length field and header dictionary at the start of ``raw`` (its size if shorter)."""
    prefix = raw[:12].tobytes()
    if len(prefix) == 12 and prefix[6] in (2, 3):
        return min(raw.shape[0], 12 + int.from_bytes(prefix[8:12], "little"))
    if len(prefix) >= 10:
        return min(raw.shape[0], 10 + int.from_bytes(prefix[8:10], "little"))
    return len(prefix)


class _HeaderReader(io.RawIOBase):
    """Just enough of a file object over an open descriptor for the header parser (``read``, ``seek``, ``tell``)."""

    def __init__(self, fd: int, size: int) -> None:
        super().__init__()
        self._fd, self._size, self._position = fd, size, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        count = os.preadv(self._fd, [buffer], self._position)
        self._position += count
        return count

    def seek(self, position: int, whence: int = 0) -> int:
        self._position = position if whence == 0 else (self._position + position if whence == 1
                                                        else self._size + position)
        return self._position

    def tell(self) -> int:
        return self._position

    def fileno(self) -> int:
        return self._fd


MMAP_MIN_BYTES = 256 * 1024   # below this, one read() is cheaper than setting up a mapping


def load(path: Path | str, *, mmap: bool = True, header: Optional[NpyHeader] = None) -> np.ndarray:
    """The array in ``path``, read-only: memory-mapped from 256 KiB up (unless ``mmap=False``), read otherwise.

    Pass ``header`` (from :func:`read_header`) to skip parsing it again.
    """
    path = Path(path)
    header = header or read_header(path)
    order = "F" if header.fortran_order else "C"
    if mmap and header.nbytes >= MMAP_MIN_BYTES:
        return np.memmap(path, dtype=header.dtype, mode="r", offset=header.data_offset, shape=header.shape,
                         order=order)
    with open(path, "rb") as handle:
        handle.seek(header.data_offset)
        data = np.fromfile(handle, dtype=header.dtype, count=math.prod(header.shape))
    data = data.reshape(header.shape, order=order)
    data.flags.writeable = False
    return data
