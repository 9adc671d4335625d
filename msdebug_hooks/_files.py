"""Atomic file writes: a reader (or MindSpore) never sees a half-written file, and a failed write leaves nothing."""
from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path
from typing import Iterator, Union

PathLike = Union[str, "os.PathLike[str]"]


@contextlib.contextmanager
def atomic_path(target: PathLike, *, mode: int = 0o600) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; on success chmod it to ``mode`` and rename it over ``target``.

    The parent directory is created. On any exception the temporary file is removed and ``target`` is untouched.
    """
    target = Path(target).expanduser()
    if target.is_dir():
        raise IsADirectoryError(errno.EISDIR, "Is a directory", str(target))
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError as exc:  # a file stands where a parent directory should be
        raise NotADirectoryError(errno.ENOTDIR, f"{exc.filename} is a file, not a directory", str(target)) from None
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:  # name the file asked for, not the temporary one beside it
        raise OSError(exc.errno, exc.strerror, str(target)) from None
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def atomic_write_text(target: PathLike, text: str, *, mode: int = 0o600) -> Path:
    """Write ``text`` to ``target`` atomically (temp file in the same directory, fsync, rename)."""
    target = Path(target).expanduser()
    with atomic_path(target, mode=mode) as tmp:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    return target


def os_error_text(exc: OSError) -> str:
    """``"<file>: <reason>"`` for a user, without Python's ``[Errno N]`` prefix and quotes."""
    reason = exc.strerror or str(exc)
    return f"{exc.filename}: {reason}" if exc.filename is not None else reason
