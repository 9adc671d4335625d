"""Large pairs of layer captures and of sync dumps, generated from numpy, for the comparison benchmarks.

Both pairs have what a real comparison meets: a few hundred tensors of 1 to 16 MB (sizes drawn log-uniformly, so
small ones outnumber large ones as in a network's activations), B the reference and A "the run under test": A = B
times (1 + 3e-7 n) (float32 rounding-level noise, n standard normal) up to one planted record, from which on the
noise is 1e-3 (a layer that computes differently, and every layer after it inheriting the difference). The
comparison must name the planted record; the benchmark checks it.

* :func:`layer_captures`: two ``CaptureWriter`` captures of forward outputs, one step.
* :func:`sync_dumps`: two sync dumps in MindSpore 2.10's layout (``rank_0/Net/0/0/``, file names
  ``type.name.task.stream.timestamp.io.slot.format.dtype.npy``); each operator has its input 0 (the previous
  operator's output, as a chain of layers dumps it with ``input_output: 0``) and its output 0. No ``.ir`` graph:
  operators are ordered by name, which is their order here.

Values are slices of two fixed random pools, so generating a gigabyte costs a few multiplications per byte.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MB = 1 << 20
NOISE, JUMP = 3e-7, 1e-3
_POOL = 16 * MB // 4   # float32 elements of the largest record


@dataclass
class Pair:
    """Two generated sides, the planted record's name and the tensor files on each side."""

    a: Path
    b: Path
    planted: str
    files_a: list
    files_b: list

    @property
    def nbytes(self) -> int:
        return sum(path.stat().st_size for path in self.files_a + self.files_b)


class _Values:
    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.rng = rng
        self.pool = rng.standard_normal(2 * _POOL, dtype=np.float32)
        self.noise = rng.standard_normal(2 * _POOL, dtype=np.float32)

    def sizes(self, target_bytes: int, smallest: int, largest: int) -> list:
        """Record sizes in bytes (multiples of 1 KiB), log-uniform in [smallest, largest], summing to >= target."""
        out: list = []
        while sum(out) < target_bytes:
            size = math.exp(self.rng.uniform(math.log(smallest), math.log(largest)))
            out.append(int(size) // 1024 * 1024)
        return out

    def pair(self, index: int, nbytes: int, level: float) -> tuple:
        """(reference, under test) for record ``index``: float32 [n / 256, 256]."""
        n = nbytes // 4
        start = (index * 7919 * 1024) % _POOL
        reference = self.pool[start:start + n] * np.float32(1 + index % 7)
        noise = self.noise[(start + 4099) % _POOL:][:n]
        under_test = reference * (np.float32(1) + np.float32(level) * noise)
        return reference.reshape(-1, 256), under_test.reshape(-1, 256)


def _levels(count: int, planted: int) -> list:
    return [NOISE if index < planted else JUMP for index in range(count)]


def layer_captures(root: Path, target_bytes: int, *, smallest: int = MB, largest: int = 16 * MB,
                   seed: int = 0) -> Pair:
    """Captures ``root/a`` (under test) and ``root/b`` (reference) of at least ``target_bytes`` each."""
    from msdebug_hooks.compare.layer_capture import FORWARD_OUTPUT, CaptureWriter

    values = _Values(seed)
    sizes = values.sizes(target_bytes, smallest, largest)
    planted = int(len(sizes) * 0.6)
    writers = {side: CaptureWriter(root / side, "pytorch") for side in ("a", "b")}
    names = [f"blocks.{index // 4}.{('conv', 'bn', 'act', 'proj')[index % 4]}" for index in range(len(sizes))]
    for index, (size, level) in enumerate(zip(sizes, _levels(len(sizes), planted))):
        reference, under_test = values.pair(index, size, level)
        writers["b"].add(1, index, names[index], FORWARD_OUTPUT, reference)
        writers["a"].add(1, index, names[index], FORWARD_OUTPUT, under_test)
    for writer in writers.values():
        writer.flush()
    files = {side: [writer.directory / record.file for record in writer.records] for side, writer in writers.items()}
    return Pair(root / "a", root / "b", names[planted], files["a"], files["b"])


def _op_file(directory: Path, index: int, io: str, stamp: int) -> Path:
    flat = f"Default_network-Net_layer{index:04d}-Dense_MatMul-op{index}"
    return directory / f"MatMul.{flat}.0.0.{stamp}.{io}.0.DefaultFormat.float32.npy"


def sync_dumps(root: Path, target_bytes: int, *, smallest: int = MB, largest: int = 16 * MB, seed: int = 1) -> Pair:
    """Dumps ``root/a`` (under test) and ``root/b`` (reference) of at least ``target_bytes`` each (inputs and
    outputs: each operator's output is written again as the next one's input)."""
    values = _Values(seed)
    sizes = values.sizes(target_bytes // 2, smallest, largest)
    planted = int(len(sizes) * 0.6)
    levels = _levels(len(sizes), planted)
    files: dict = {"a": [], "b": []}
    directories = {side: root / side / "rank_0" / "Net" / "0" / "0" for side in ("a", "b")}
    for directory in directories.values():
        directory.mkdir(parents=True)
    previous: tuple = ()
    for index, size in enumerate(sizes):
        reference, under_test = values.pair(index, size, levels[index])
        # the input of operator 0 is a graph input (the same data on both sides); then the previous output
        inputs = previous or (reference, reference)
        for side, inp, out in (("b", inputs[0], reference), ("a", inputs[1], under_test)):
            for io, array in (("input", inp), ("output", out)):
                path = _op_file(directories[side], index, io, 1000 + 2 * index + (io == "output"))
                with open(path, "wb") as handle:
                    np.lib.format.write_array(handle, np.ascontiguousarray(array))
                files[side].append(path)
        previous = (reference, under_test)
    planted_name = f"Default_network-Net_layer{planted:04d}-Dense_MatMul-op{planted}"
    return Pair(root / "a", root / "b", planted_name, files["a"], files["b"])
