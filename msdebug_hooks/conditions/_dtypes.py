"""Input normalisation for the statistics: which dtypes are analysed, and how each is read as float32 or float64.

Shared by both engines (``numpy_chunks``, ``compiled``) and the batched path (``batch``), so that every path
converts an element exactly the same way (the C++ ``static_cast<double>``).
"""
from __future__ import annotations

from typing import Any, Iterable

import numpy as np

_SUPPORTED = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
              "float16", "float32", "float64", "bfloat16")
SUPPORTED_DTYPES_TEXT = "bool, int8-64, uint8-64, float16, float32, float64, bfloat16 (read as float32)"

#: bytes per chunk of numpy's pass and of a conversion: half of a core's L2, so a chunk stays in cache while read
CHUNK_BYTES = 256 * 1024


class UnsupportedDtypeError(TypeError):
    """The tensor's dtype is one MindSpore's debugger never analysed (complex, strings, objects, ...)."""

    def __init__(self, dtype: Any) -> None:
        self.dtype = dtype
        super().__init__(f"dtype={str(dtype)!r} is not supported for watchpoint statistics: "
                         f"supported are {SUPPORTED_DTYPES_TEXT}")


def bfloat16_to_float32(words: np.ndarray) -> np.ndarray:
    """Raw bfloat16 words (uint16, or an ml_dtypes bfloat16 array) -> float32, exactly (bf16 is the high half)."""
    raw = np.asarray(words)
    raw = raw.view(np.uint16) if raw.dtype.itemsize == 2 else raw.astype(np.uint16)
    return (raw.astype(np.uint32) << np.uint32(16)).view(np.float32)


#: the common native dtypes -> work kind (the per-tensor lookup by name was a visible cost for small tensors)
KIND_BY_DTYPE = {np.dtype(np.float32): "f4", np.dtype(np.float64): "f8",
                  **{np.dtype(name): "conv4" for name in ("float16", "bool", "int8", "uint8", "int16", "uint16")},
                  **{np.dtype(name): "conv8" for name in ("int32", "int64", "uint32", "uint64")}}


def flat_kind(value: Any, *, bfloat16: bool = False) -> tuple[np.ndarray, str]:
    """(C-order 1-D array, kind) where kind names the work dtype path: "f4", "f8", "bf16" or "conv4"/"conv8"."""
    arr = np.asarray(value)
    kind = KIND_BY_DTYPE.get(arr.dtype)
    if kind is not None and not bfloat16:
        return arr.ravel(), kind  # the method: np.ravel's wrapper costs a microsecond per tensor
    name = arr.dtype.name
    if bfloat16:
        if arr.dtype.itemsize != 2:
            raise UnsupportedDtypeError(f"{name} marked as bfloat16 (expected 2-byte words)")
        return np.ravel(arr, order="C").view(np.uint16), "bf16"
    if name == "bfloat16":  # ml_dtypes
        return np.ravel(arr, order="C").view(np.uint16), "bf16"
    if name not in _SUPPORTED:
        raise UnsupportedDtypeError(name)
    flat = np.ravel(arr, order="C")
    if name == "float32":
        return flat, "f4"
    if name == "float64":
        return flat, "f8"
    if name in ("float16", "bool", "int8", "uint8", "int16", "uint16"):
        return flat, "conv4"  # exact in float32
    return flat, "conv8"  # int32/64, uint32/64: double, as static_cast<double>


_DTYPE_TEXT: dict[np.dtype, str] = {}


def dtype_text(value: Any, kind: str) -> str:
    """The dtype as ``TensorStatistics.dtype`` names it ("float32", ">f4", "bfloat16")."""
    if kind == "bf16":
        return "bfloat16"
    dtype = np.asarray(value).dtype
    text = _DTYPE_TEXT.get(dtype)
    if text is None:
        text = _DTYPE_TEXT[dtype] = str(dtype)
    return text


def f32_at_least(bound: float) -> np.float32:
    """Smallest float32 >= bound, so that for float32 x: x >= result  <=>  double(x) >= bound."""
    b = np.float32(bound)
    if float(b) < bound:
        b = np.nextafter(b, np.float32(np.inf))
    return b


def f32_at_most(bound: float) -> np.float32:
    b = np.float32(bound)
    if float(b) > bound:
        b = np.nextafter(b, np.float32(-np.inf))
    return b


def work_dtype(kind: str) -> np.dtype:
    return np.dtype(np.float64 if kind in ("f8", "conv8") else np.float32)


def chunk_elements(kind: str, chunk_bytes: int = CHUNK_BYTES) -> int:
    """Elements per chunk of the work dtype of ``kind`` (converted dtypes are converted one chunk at a time)."""
    return max(1024, chunk_bytes // work_dtype(kind).itemsize)


def work_chunks(flat: np.ndarray, kind: str, chunk: int, work: np.dtype) -> Iterable[np.ndarray]:
    """Yield work-dtype chunks; converted kinds go through one reused buffer (exact conversion, as the C++ cast)."""
    n = flat.shape[0]
    if kind in ("f4", "f8"):
        for start in range(0, n, chunk):
            yield flat[start:start + chunk]
        return
    conv = np.empty(min(chunk, n), work)
    wide = np.empty(min(chunk, n), np.uint32) if kind == "bf16" else None
    for start in range(0, n, chunk):
        part = flat[start:start + chunk]
        k = part.shape[0]
        if kind == "bf16":
            w = wide[:k]
            np.copyto(w, part)
            np.left_shift(w, np.uint32(16), out=w)
            yield w.view(np.float32)
        else:
            out = conv[:k]
            np.copyto(out, part, casting="unsafe")
            yield out
