"""The layer-capture format: the outputs of each layer in one or more steps, in execution order, on disk.

A capture is a directory holding ``manifest.json`` and one ``.npy`` file per record::

    capture/
      manifest.json
      step_3/0000_conv1.forward-output.npy
      step_3/0001_bn1.forward-output.npy
      ...

``manifest.json`` (``format`` = ``"msdebug-layer-capture"``, ``format_version`` = 2)::

    {"format": "msdebug-layer-capture", "format_version": 2, "framework": "mindspore" | "pytorch" | ...,
     "steps": [3], "records": [{"step": 3, "order": 0, "name": "conv1", "kind": "forward-output",
                                "file": "step_3/0000_conv1.forward-output.npy", "shape": [32, 6, 28, 28],
                                "dtype": "float32", "source_dtype": "bfloat16"}, ...]}

``order`` counts every record of a step in the order it was made (forward inputs and outputs as the layers ran,
then parameter gradients, with parameters before either when recorded). A layer called twice in one step (a shared
``ReLU``) gives two records, ``relu`` and ``relu#1``. ``kind`` is ``forward-output``, ``forward-input`` (recorders'
``record_inputs=True``: input ``i`` of a call is ``<layer>.in<i>``, counted like outputs -- ``relu.in0#1`` is the
input of ``relu#1`` -- and written just before that call's outputs), ``parameter-gradient`` or ``parameter``.

``dtype`` is the dtype of the ``.npy`` file; ``source_dtype`` the tensor's dtype in the framework. They differ only
for dtypes numpy cannot hold: a bfloat16 tensor is written as float32 (every bfloat16 value is exactly a float32)
with ``"source_dtype": "bfloat16"``; float16 stays float16. Version 1 (no ``forward-input``, no ``source_dtype``:
read as equal to ``dtype``) is still read.

Every file is written atomically and the manifest is rewritten atomically after each step, so a capture cut short
by a crash is still readable up to its last finished step. Reading needs numpy only.

:class:`CaptureWriter` writes; :class:`StepRecorder` holds the step selection and call counting both framework
recorders share; :func:`read_capture` reads.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Union

import numpy as np

from msdebug_hooks._files import atomic_path, atomic_write_text
from msdebug_hooks.errors import DumpError

FORMAT = "msdebug-layer-capture"
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
MANIFEST = "manifest.json"
FORWARD_OUTPUT = "forward-output"
FORWARD_INPUT = "forward-input"
PARAMETER_GRADIENT = "parameter-gradient"
PARAMETER = "parameter"
#: what ``compare-layers`` compares by default (a layer's inputs are compared through its predecessor's output)
COMPARED_KINDS = (FORWARD_OUTPUT, PARAMETER_GRADIENT, PARAMETER)
#: every kind a record may have
KINDS = COMPARED_KINDS + (FORWARD_INPUT,)

PathLike = Union[str, "os.PathLike[str]"]


class CaptureError(DumpError):
    """A directory or file that is not a readable layer capture (a ``DumpError``: path, what was expected, why)."""


@dataclass(frozen=True)
class LayerRecord:
    """One tensor of a capture: what it is and where its values are."""

    step: int
    order: int
    name: str
    kind: str
    file: str
    shape: tuple
    dtype: str
    source_dtype: str = ""  # the framework's dtype (``bfloat16`` for a float32 file); empty: same as ``dtype``

    def __post_init__(self) -> None:
        if not self.source_dtype:
            object.__setattr__(self, "source_dtype", self.dtype)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["shape"] = list(self.shape)
        return data


def _safe_file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.#-]+", "_", name)[:120] or "_"


class CaptureWriter:
    """Writes records into a capture directory; the manifest is rewritten (atomically) by :meth:`flush`."""

    def __init__(self, directory: PathLike, framework: str) -> None:
        self.directory = Path(directory).expanduser()
        self.framework = framework
        self.records: list[LayerRecord] = []
        #: recorded layer name -> its class name (``Conv1d``, ``LSTM``): lets a matcher refuse to pair unlike layers
        self.layer_types: dict[str, str] = {}
        #: sequential container -> its recorded layers: recorded too, for GRAPH_MODE (see layer_selection)
        self.containers: dict[str, list] = {}
        if (self.directory / MANIFEST).exists():  # a second run would overwrite the first one's manifest
            raise FileExistsError(f"{self.directory} already holds a layer capture ({MANIFEST}): write each run "
                                  f"into a new directory")
        self.directory.mkdir(parents=True, exist_ok=True)

    @property
    def steps(self) -> list[int]:
        return sorted({record.step for record in self.records})

    def add(self, step: int, order: int, name: str, kind: str, array: np.ndarray,
            source_dtype: Optional[str] = None) -> LayerRecord:
        """Write ``array`` as the record's ``.npy`` file (atomically) and remember the record.

        ``source_dtype``: the tensor's dtype in its framework when ``array`` was converted (default: the array's).
        An array of a non-standard numpy bfloat16 dtype (MindSpore's ``asnumpy()``) is written as float32."""
        if kind not in KINDS:
            raise ValueError(f"kind={kind!r} is not allowed: one of {', '.join(KINDS)}")
        array = np.ascontiguousarray(array)
        if array.dtype.name == "bfloat16":  # not a numpy dtype: .npy could not be read back without its package
            array, source_dtype = array.astype(np.float32), "bfloat16"
        relative = f"step_{step}/{order:04d}_{_safe_file_name(name)}.{kind}.npy"
        with atomic_path(self.directory / relative, mode=0o644) as tmp:
            with open(tmp, "wb") as handle:
                np.save(handle, array, allow_pickle=False)
        record = LayerRecord(step, order, name, kind, relative, tuple(int(d) for d in array.shape),
                             array.dtype.name, source_dtype or array.dtype.name)
        self.records.append(record)
        return record

    def flush(self) -> Path:
        """Rewrite ``manifest.json`` with every record so far."""
        manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, "framework": self.framework,
                    "steps": self.steps, "records": [record.to_dict() for record in self.records]}
        if self.layer_types:
            manifest["layer_types"] = self.layer_types
        if self.containers:
            manifest["containers"] = self.containers
        return atomic_write_text(self.directory / MANIFEST, json.dumps(manifest, indent=1) + "\n", mode=0o644)


class StepRecorder:
    """What both framework recorders share: which steps to capture, call counting, and the writer.

    ``steps``: the steps to capture (the training loop's own step numbers); ``None`` captures every step.
    """

    def __init__(self, directory: PathLike, framework: str, steps: Optional[Iterable[int]] = None) -> None:
        self.writer = CaptureWriter(directory, framework)
        self.steps = None if steps is None else {int(step) for step in steps}
        self.current_step: Optional[int] = None
        self._order = 0
        self._calls: dict[str, int] = {}

    @property
    def directory(self) -> Path:
        return self.writer.directory

    def wants(self, step: int) -> bool:
        return self.steps is None or int(step) in self.steps

    def begin_step(self, step: int) -> bool:
        """Start capturing ``step`` if it is selected; return whether it is. A step still open is finished first."""
        self.end_step()
        self.current_step = int(step) if self.wants(step) else None
        self._order = 0
        self._calls = {}
        return self.current_step is not None

    @property
    def capturing(self) -> bool:
        return self.current_step is not None

    def add(self, name: str, kind: str, array: np.ndarray, source_dtype: Optional[str] = None) -> None:
        """Record ``array`` for the current step (a no-op when the step is not captured). Forward outputs and
        inputs get their call number: the second record of ``relu`` in a step is ``relu#1``."""
        if self.current_step is None:
            return
        if kind in (FORWARD_OUTPUT, FORWARD_INPUT):
            calls = self._calls.get(name, 0)
            self._calls[name] = calls + 1
            name = name if calls == 0 else f"{name}#{calls}"
        try:
            self.writer.add(self.current_step, self._order, name, kind, array, source_dtype)
        except OSError as exc:  # a full disk must not stop the training: the step stays incomplete, and says so
            warnings.warn(f"layer capture: cannot write {name!r} of step {self.current_step} into "
                          f"{self.directory} ({exc}); the rest of this step is not captured", RuntimeWarning,
                          stacklevel=2)
            self.end_step()
            return
        self._order += 1

    def end_step(self) -> None:
        """Finish the current step: the manifest now lists it (a manifest that cannot be written is warned about;
        the capture then ends at its last written step)."""
        if self.current_step is not None:
            try:
                self.writer.flush()
            except OSError as exc:
                warnings.warn(f"layer capture: cannot write the manifest of {self.directory} ({exc})",
                              RuntimeWarning, stacklevel=2)
        self.current_step = None


#: one value of a hooked call, ready to write: (record name, kind, array, source dtype)
CallEntry = tuple[str, str, np.ndarray, str]


def flatten_tensors(name: str, value: Any) -> Iterator[tuple[str, Any]]:
    """``value`` with tuples and lists unpacked depth-first as ``name.0``, ``name.1``, ..."""
    if isinstance(value, (tuple, list)):
        for index, item in enumerate(value):
            yield from flatten_tensors(f"{name}.{index}", item)
    else:
        yield name, value


def input_name(layer: str, index: int) -> str:
    """The record name of positional input ``index`` of ``layer`` (before the call number): ``layer.in<index>``."""
    return f"{layer}.in{index}"


class FrameworkRecorder:
    """What the MindSpore and PyTorch recorders share around their hooks: the step block and the unpacking of a
    call's inputs and outputs.

    Subclasses set ``self.session`` (a :class:`StepRecorder`) and ``self.record_inputs``, and define
    ``begin_step``, ``end_step`` and ``convert``; ``add_call`` may be overridden to filter what a hook delivers.
    """

    session: StepRecorder
    record_inputs: bool = False

    @property
    def directory(self) -> Path:
        return self.session.directory

    def begin_step(self, step: int) -> bool:  # pragma: no cover - defined by every subclass
        raise NotImplementedError

    def end_step(self) -> None:  # pragma: no cover - defined by every subclass
        raise NotImplementedError

    @staticmethod
    def convert(value: Any) -> tuple[np.ndarray, str]:  # pragma: no cover - defined by every subclass
        """A framework tensor as (numpy array, the tensor's own dtype name); bfloat16 becomes float32."""
        raise NotImplementedError

    @classmethod
    def to_numpy(cls, value: Any) -> np.ndarray:
        return cls.convert(value)[0]

    def add_value(self, name: str, kind: str, value: Any) -> None:
        """Record one tensor (a parameter, a gradient) for the current step, keeping its source dtype."""
        if self.session.capturing:
            array, source_dtype = self.convert(value)
            self.session.add(name, kind, array, source_dtype)

    @contextlib.contextmanager
    def step(self, step: int) -> Iterator[bool]:
        """``with recorder.step(n):`` around one step (forward and backward, or an evaluation pass)."""
        capturing = self.begin_step(step)
        try:
            yield capturing
        finally:
            self.end_step()

    def record_call(self, name: str, inputs: Any, output: Any) -> None:
        """A hooked call of layer ``name``: its tensor inputs (when ``record_inputs``; ``name.in0``, ...), then its
        output (tuples and lists become ``name.0``, ``name.1``, ...). Inputs that are not tensors are skipped."""
        entries: list[CallEntry] = []
        if self.record_inputs and inputs is not None:
            positional = inputs if isinstance(inputs, (tuple, list)) else (inputs,)
            for index, item in enumerate(positional):
                entries += [(entry, FORWARD_INPUT, *self.convert(value))
                            for entry, value in flatten_tensors(input_name(name, index), item)
                            if hasattr(value, "shape") and hasattr(value, "dtype")]
        entries += [(entry, FORWARD_OUTPUT, *self.convert(value)) for entry, value in flatten_tensors(name, output)]
        self.add_call(name, entries)

    def record_output(self, name: str, output: Any) -> None:
        """A hook's output without its inputs."""
        self.record_call(name, None, output)

    def add_call(self, name: str, entries: list[CallEntry]) -> None:
        """Write the records of one call of ``name`` (overridden to drop repeated deliveries of one call)."""
        for entry, kind, array, source_dtype in entries:
            self.session.add(entry, kind, array, source_dtype)


@dataclass
class Capture:
    """A capture read back: its framework, steps and records (values load on demand)."""

    directory: Path
    framework: str
    steps: list[int]
    records: list[LayerRecord]
    #: recorded layer name -> class name, where the recorder wrote them (format 2)
    layer_types: dict = field(default_factory=dict)
    #: sequential container -> the recorded layers inside it (format 2)
    containers: dict = field(default_factory=dict)

    def step_records(self, step: int, kinds: Iterable[str] = KINDS) -> list[LayerRecord]:
        """The records of ``step`` of the given kinds, in order."""
        kinds = set(kinds)
        return sorted((r for r in self.records if r.step == step and r.kind in kinds), key=lambda r: r.order)

    def load(self, record: LayerRecord) -> np.ndarray:
        """The record's values; ``CaptureError`` (naming the file) when the file is missing, corrupt or does not
        hold what the manifest says."""
        path = self.directory / record.file
        try:
            array = np.load(path, mmap_mode="r", allow_pickle=False)   # read in chunks by the comparison
        except FileNotFoundError:
            raise CaptureError(path, f"the .npy file the manifest lists for {record.name!r}",
                               detail="file missing") from None
        except (ValueError, OSError, EOFError) as exc:
            raise CaptureError(path, f"a readable .npy file for {record.name!r}",
                               detail=str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
        if tuple(array.shape) != tuple(record.shape):
            raise CaptureError(path, f"shape {list(record.shape)} as the manifest says",
                               detail=f"the file holds {list(array.shape)}")
        return array


_RECORD_FIELDS = {"step": int, "order": int, "name": str, "kind": str, "file": str, "shape": list, "dtype": str}


def read_capture(directory: PathLike) -> Capture:
    """Read a capture's manifest; ``CaptureError`` when ``directory`` is not a capture or its manifest is bad."""
    root = Path(directory).expanduser()
    if not root.is_dir():
        raise CaptureError(root, "a layer-capture directory", detail="no such directory" if not root.exists()
                           else "not a directory")
    manifest_path = root / MANIFEST
    if not manifest_path.is_file():
        raise CaptureError(root, f"a layer-capture directory holding {MANIFEST}",
                           detail="not a capture: no manifest (written by LayerRecorder / TorchLayerRecorder)")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CaptureError(manifest_path, "a JSON manifest", detail=str(exc)) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CaptureError(manifest_path, f'a manifest with "format": "{FORMAT}"',
                           detail=f"format={manifest.get('format') if isinstance(manifest, dict) else None!r}")
    version = manifest.get("format_version")
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        raise CaptureError(manifest_path, f"format_version {' or '.join(map(str, READABLE_VERSIONS))}",
                           detail=f"format_version={version!r}")
    raw_records = manifest.get("records")
    if not isinstance(raw_records, list):
        raise CaptureError(manifest_path, '"records": a list', detail=f"records={type(raw_records).__name__}")
    records = [_record(manifest_path, index, raw) for index, raw in enumerate(raw_records)]
    layer_types = manifest.get("layer_types", {})
    if not isinstance(layer_types, dict) or not all(isinstance(v, str) for v in layer_types.values()):
        raise CaptureError(manifest_path, '"layer_types": an object of layer name -> class name',
                           detail=f"layer_types={str(layer_types)[:80]}")
    containers = manifest.get("containers", {})
    if not isinstance(containers, dict) or not all(isinstance(v, list) and all(isinstance(n, str) for n in v)
                                                   for v in containers.values()):
        raise CaptureError(manifest_path, '"containers": an object of container name -> list of layer names',
                           detail=f"containers={str(containers)[:80]}")
    return Capture(root, str(manifest.get("framework", "")), sorted({r.step for r in records}), records,
                   layer_types, containers)


def _record(manifest_path: Path, index: int, raw: Any) -> LayerRecord:
    if not isinstance(raw, dict):
        raise CaptureError(manifest_path, f"records[{index}]: an object", detail=f"got {type(raw).__name__}")
    for field_name, field_type in _RECORD_FIELDS.items():
        value = raw.get(field_name)
        if not isinstance(value, field_type) or isinstance(value, bool):
            raise CaptureError(manifest_path, f"records[{index}].{field_name}: a {field_type.__name__}",
                               detail=f"got {value!r}")
    if raw["kind"] not in KINDS:
        raise CaptureError(manifest_path, f"records[{index}].kind: one of {', '.join(KINDS)}",
                           detail=f"got {raw['kind']!r}")
    source_dtype = raw.get("source_dtype", raw["dtype"])  # version 1 has none: the file's dtype is the source's
    if not isinstance(source_dtype, str):
        raise CaptureError(manifest_path, f"records[{index}].source_dtype: a str", detail=f"got {source_dtype!r}")
    file_path = Path(raw["file"])
    if file_path.is_absolute() or ".." in file_path.parts:
        raise CaptureError(manifest_path, f"records[{index}].file: a path inside the capture",
                           detail=f"got {raw['file']!r}")
    return LayerRecord(raw["step"], raw["order"], raw["name"], raw["kind"], raw["file"],
                       tuple(int(d) for d in raw["shape"]), raw["dtype"], source_dtype)
