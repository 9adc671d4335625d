"""``compare_models``: a PyTorch model and its MindSpore port, checked in one call (what PaDiff does for Paddle).

1. **Weights**: PyTorch's weights and BatchNorm statistics are copied into the MindSpore cell
   (:mod:`.port_weights`: the layout table's names and layouts, then the structure for renamed attributes), unless
   ``copy_weights=False`` (the cell keeps the weights your own converter loaded, and step 1 checks them).
2. **Conventions**: the settings a port must translate, read from both models (:mod:`.port_conventions`:
   BatchNorm momentum, epsilons, GELU's form, LeakyReLU's slope, dropout, the layer type).
3. **One step on both** (:mod:`.port_run`): the same batch, loss and SGD learning rate; each side's layer recorder
   captures step 1 with the layers' inputs, the parameters at its start and the gradients.
4. **Compared**: forward outputs and gradients with :func:`~msdebug_hooks.compare.layers.compare_layers` (its noise
   model names where the runs part), the suspect layer replayed in this process (the MindSpore cell on PyTorch's
   inputs: own error or inherited), and the update each parameter and buffer received (``after - before``).
5. **Reported**: the layer tree with the first divergence marked and the source lines behind it in both models
   (:mod:`.port_tree`); ``PortCheck.write_html`` writes the self-contained HTML report.

Dropout layers with the same ``p > 0`` on both sides are set to ``p = 0`` for the step (their random masks can never
agree between frameworks) and restored; a ``p`` that differs is a convention finding and runs as it is.
"""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from msdebug_hooks.compare import attribution
from msdebug_hooks.compare.fused_records import split_fused
from msdebug_hooks.compare.layers import LayerComparison, compare_layers
from msdebug_hooks.compare.layer_capture import FORWARD_INPUT, read_capture
from msdebug_hooks.compare.later_divergences import LaterDivergences, later_divergences
from msdebug_hooks.compare.moved_padding import LayerInputs, layer_inputs
from msdebug_hooks.compare.port_conventions import check_conventions, dropout_p
from msdebug_hooks.compare.port_random import find_random_layers, mode_setters
from msdebug_hooks.compare.port_run import (Batch, LossSpec, SideRun, mindspore_inputs, resolve_loss,
                                            restore_mindspore, restore_torch, run_mindspore, run_torch, torch_inputs)
from msdebug_hooks.compare.port_tree import layer_errors, record_layer, source_line, tree_lines
from msdebug_hooks.compare.port_updates import UpdateFinding, compare_updates, inherited_errors
from msdebug_hooks.compare.port_weights import WeightCopy, copy_into, pair_parameters, torch_state
from msdebug_hooks.compare.settings_partners import partner_names
from msdebug_hooks.compare.spatial_settings import input_sizes
from msdebug_hooks.compare.weight_origin import weight_origin
from msdebug_hooks.errors import ConfigError
from msdebug_hooks.validation import real_number, whole_number

ArrayLike = Union[np.ndarray, Sequence[np.ndarray]]


@dataclass
class PortCheck:
    """Everything one port check found. ``ok``: nothing differs beyond the noise and no setting differs."""

    model_mindspore: str
    model_pytorch: str
    batch: str
    loss: str
    lr: float
    copy: WeightCopy
    conventions: list
    layers: LayerComparison
    updates: list
    update_level: float
    losses_mindspore: list
    losses_pytorch: list
    tree: list = field(default_factory=list)
    sources: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    marked: Optional[str] = None       # the MindSpore layer the tree marks
    marked_kind: Optional[str] = None  # the finding's kind: layer, precision, gradient, parameter, update
    #: for a parameter finding: where the MindSpore value came from ("PyTorch's fc.weight transposed")
    origin: Optional[str] = None
    workdir: Optional[str] = None
    #: the layers after the first divergence that diverge on their own (replayed on PyTorch's inputs)
    later: LaterDivergences = field(default_factory=LaterDivergences)

    @property
    def ok(self) -> bool:
        """Nothing differs beyond the noise, no record with parameters lacks a partner, no setting differs.
        Parameter-free layers without a partner are a note (``layers.unpaired_free``), not a difference: the exit
        code, :meth:`headline`, :meth:`format`, :meth:`to_dict` and the HTML banner all read this. A tensor of the
        reference that no parameter of the port took (a bias the port's layer lacks) is a difference too: the
        reference trains or keeps something the port does not have."""
        return self.layers.ok and not self.updates and not self.conventions and not self.copy.unpaired_torch

    def headline(self) -> str:
        """One line: where the port parts from its reference, or that it does not."""
        finding = self.layers.finding
        if finding is not None:
            return f"first divergence: {self.marked} ({finding.kind}): {self.layers.explanation()}"
        if self.updates:
            return f"first divergence: {self.marked} (update): {self.updates[0].message}"
        if self.layers.unmatched_a or self.layers.unmatched_b:
            return "no matched record diverges, but some have no partner (listed above): the structures differ"
        if self.copy.unpaired_torch:
            return (f"the port lacks {len(self.copy.unpaired_torch)} tensor(s) of its reference (listed above): a "
                    f"parameter or statistic its layers do not have")
        if self.conventions:
            return (f"the step agrees, but {len(self.conventions)} setting(s) differ (listed above): they show in "
                    f"other modes or data (eval, other batches)")
        return "the port matches its reference: forward outputs, gradients and the update agree to the noise"

    def format(self) -> str:
        lines = [f"port check: {self.model_mindspore} (MindSpore, A) against {self.model_pytorch} (PyTorch, B)",
                 f"batch: {self.batch}; loss {self.loss}; SGD lr {self.lr:g}",
                 f"weights: {self.copy.summary()}"]
        if self.copy.rules:
            lines.append("  the attribute names differ; a mapping file would say: " + "; ".join(self.copy.rules[:6]))
        lines += [f"note: {note}" for note in self.notes + self.layers.notes + [self.layers.free_note()] if note]
        lines.append("settings (layout table conventions): " + ("none differ" if not self.conventions else
                                                                f"{len(self.conventions)} differ"))
        lines += [f"  SETTING: {finding.message}" for finding in self.conventions]
        pairs = self.layers.pairs
        counts = {kind: sum(1 for p in pairs if p.record_a.kind == kind)
                  for kind in ("forward-output", "parameter-gradient", "parameter")}
        lines.append(f"compared: {counts['forward-output']} forward outputs, {counts['parameter-gradient']} "
                     f"gradients, {counts['parameter']} parameters at the start of the step, "
                     f"{len(self.copy.pairs) + sum(len(p.mindspore) for p in self.copy.fused)} updates (largest "
                     f"|a-b|/|b| of a correct update: "
                     f"{_size(self.update_level)})")
        for step, (a, b) in enumerate(zip(self.losses_mindspore, self.losses_pytorch), start=1):
            lines.append(f"loss step {step}: MindSpore {a:.8g}, PyTorch {b:.8g} ({_size(_rel(a, b))} relative)")
        for label, records in (("only in MindSpore", self.layers.unmatched_a),
                               ("only in PyTorch", self.layers.unmatched_b)):
            if records:
                lines.append(f"{label}: " + ", ".join(f"{r.name} {list(r.shape)}" for r in records[:12]))
        lines += self.tree
        lines.append(self.headline())
        if self.origin:
            lines.append(f"  {self.origin}")
        if self.layers.replay is not None:
            lines.append(f"  {self.layers.replay.describe()}")
        if self.later.line():
            lines.append(f"  {self.later.line()}")
        for source in self.sources:
            lines += ["  " + text for text in source.lines()]
        if self.layers.finding is not None and self.updates:
            lines.append(f"  {len(self.updates)} parameter update(s) differ too, downstream of it")
        else:
            lines += [f"  UPDATE: {finding.message}" for finding in self.updates[1:]]
        lines += [f"  MISSING: PyTorch's {name} has no partner in the port" for name in self.copy.unpaired_torch[:12]]
        lines.append("verdict: " + ("clean" if self.ok else "the port differs from its reference"))
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"ok": self.ok, "model_mindspore": self.model_mindspore, "model_pytorch": self.model_pytorch,
                "batch": self.batch, "loss": self.loss, "lr": self.lr, "headline": self.headline(),
                "marked": self.marked, "marked_kind": self.marked_kind, "origin": self.origin,
                "weights": {"pairs": self.copy.pairs, "how": self.copy.how, "modules": self.copy.modules,
                            "unpaired_torch": self.copy.unpaired_torch,
                            "suggested_rules": self.copy.rules, "copied": self.copy.copied},
                "conventions": [finding.as_dict() for finding in self.conventions],
                "updates": [finding.as_dict() for finding in self.updates], "update_level": self.update_level,
                "losses": {"mindspore": self.losses_mindspore, "pytorch": self.losses_pytorch},
                "sources": [source.as_dict() for source in self.sources], "notes": self.notes,
                "layers": self.layers.to_dict(), "later": self.later.as_dict(), "workdir": self.workdir}

    def write_html(self, path: Union[str, Path]) -> Path:
        """The self-contained HTML report of this check (:func:`.html_report.write_html_report`)."""
        from msdebug_hooks.compare.html_report import write_html_report

        return write_html_report(path, self.layers, losses={"MindSpore": self.losses_mindspore,
                                                            "PyTorch": self.losses_pytorch}, ok=self.ok,
                                 title=f"port check: {self.model_mindspore}",
                                 headline=self.headline() + (f" ({self.origin})" if self.origin else ""),
                                 marked=self.marked, sources=[s.as_dict() for s in self.sources],
                                 settings=[f.message for f in self.conventions],
                                 extra=[line for line in [f"weights: {self.copy.summary()}", self.later.line()]
                                        + [f"update: {u.message}" for u in self.updates[:20]]
                                        + [f"note: {note}" for note in self.notes] if line],
                                 subtitle=f"A: {self.model_mindspore} (MindSpore, the port) \u00b7 B: "
                                          f"{self.model_pytorch} (PyTorch, the reference) \u00b7 {self.batch}")


def _rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b) if b else (0.0 if a == b else float("inf"))


def _size(value: float) -> str:
    return "inf" if value == float("inf") else ("0" if value == 0 else f"{value:.1e}")


def as_batch(inputs: Union[ArrayLike, Batch], target: Optional[np.ndarray] = None) -> Batch:
    """A :class:`Batch` from an array, a sequence of arrays (positional inputs) or a ``Batch``."""
    if isinstance(inputs, Batch):
        return inputs
    arrays = (inputs,) if isinstance(inputs, np.ndarray) else tuple(inputs)
    if not arrays or not all(isinstance(a, np.ndarray) for a in arrays):
        raise ConfigError("inputs", type(inputs).__name__, "a numpy array or a sequence of numpy arrays")
    return Batch(tuple(np.ascontiguousarray(a) for a in arrays),
                 None if target is None else np.ascontiguousarray(np.asarray(target)))


def _matching_dropouts(cell: Any, torch_module: Any, copy: WeightCopy) -> list:
    """``(ms dropout, torch dropout, p)`` where both have the same ``p > 0``: set to 0 for the step."""
    modules = dict(torch_module.named_modules())
    found = []
    for name, layer in cell.cells_and_names():
        module = modules.get(copy.torch_name(name))
        if type(layer).__name__.startswith("Dropout") and module is not None and \
                type(module).__name__.startswith("Dropout"):
            p_ms, p_torch = dropout_p(layer), dropout_p(module)
            if p_ms and p_torch and abs(p_ms - p_torch) < 1e-9:
                found.append((layer, module, p_ms))
    return found


def _first_inputs(layers: Mapping[str, Any], capture: Path) -> tuple:
    """``(capture, {id(layer): record})``: the first input each of ``layers`` (name -> layer) was given in the
    captured step (its first call), for the settings that depend on it (a strided ``pad_mode='same'``, a padding
    moved into a layer before)."""
    found = read_capture(capture)
    records = {}
    for record in found.step_records(1, kinds=(FORWARD_INPUT,)):
        layer, _, slot = record.name.rpartition(".")
        if slot == "in0" and layer in layers and len(record.shape) > 2:
            records.setdefault(id(layers[layer]), record)
    return found, records


def _step_inputs(cell: Any, torch_module: Any, root: Path) -> tuple:
    """The port's input sizes (``id(cell)`` -> spatial size) and the :class:`LayerInputs` of the checked step."""
    sides = [_first_inputs(dict(cell.cells_and_names()), root / "mindspore"),
             _first_inputs(dict(torch_module.named_modules()), root / "pytorch")]

    def loader(capture: Any, records: dict) -> Any:
        def load(layer: Any) -> Optional[np.ndarray]:
            record = records.get(id(layer))
            return None if record is None else np.asarray(capture.load(record))
        return load
    return ({key: tuple(record.shape[2:]) for key, record in sides[0][1].items()},
            LayerInputs(*(loader(capture, records) for capture, records in sides)))


def _run(option: str, runner: Any, model: Any, *args: Any) -> SideRun:
    """One side's step; a model that fails on the batch is a ``ConfigError`` naming it (the cause chained)."""
    try:
        return runner(model, *args)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's model failed on the batch: one line, the cause chained
        text = str(exc).strip().splitlines()
        raise ConfigError(option, type(model).__name__, "a model that runs one training step on the batch",
                          detail=f"{type(exc).__name__}: {text[0] if text else ''}"[:300]) from exc


def compare_models(torch_module: Any, mindspore_cell: Any, inputs: Union[ArrayLike, Batch],
                   target: Optional[np.ndarray] = None, *, loss: LossSpec = "auto", lr: float = 0.1, steps: int = 3,
                   mapping: Optional[Mapping[str, str]] = None, copy_weights: bool = True, replay: bool = True,
                   workdir: Optional[Union[str, Path]] = None, keep: bool = False) -> PortCheck:
    """Check ``mindspore_cell`` (the port, A) against ``torch_module`` (the reference, B) on one batch.

    ``inputs``: the model's positional inputs (a numpy array or a sequence of them); ``target``: the loss's target
    (``loss="auto"``: cross entropy for integer labels, MSE for a float target, the output's mean without one; or
    ``"cross_entropy"``, ``"mse"``, ``"mean"``, ``"sum"``, or ``(torch_loss, mindspore_loss)`` callables).
    ``mapping``: PyTorch name -> MindSpore name for weights the names and the structure do not pair.
    ``copy_weights=False`` keeps the cell's weights (yours, converted by your code) and checks them.
    ``steps``: SGD steps on the batch (step 1 is compared; all give the loss curves). The captures go to
    ``workdir`` (default: a temporary directory, removed unless ``keep``). Afterwards both models hold the weights
    and statistics they started step 1 with (the cell: PyTorch's copied weights). ``ConfigError`` for bad arguments,
    weights that cannot be paired, or a model that fails on the batch.
    """
    whole_number("steps", steps, minimum=1, allowed="an integer >= 1")
    real_number("lr", lr, above=0, allowed="a finite learning rate > 0")
    batch = as_batch(inputs, target)
    loss_name = resolve_loss(loss, batch)
    custom = (None, None) if isinstance(loss, str) else tuple(loss)
    state = torch_state(torch_module)
    copy = pair_parameters(state, mindspore_cell, mapping, torch_module)
    if copy_weights:
        copy_into(mindspore_cell, state, copy)
    else:
        copy.copied = False
    notes = []
    dropouts = _matching_dropouts(mindspore_cell, torch_module, copy)
    if dropouts:
        notes.append(f"{len(dropouts)} dropout layer(s) with the same p > 0 on both sides ran with p = 0 for the "
                     f"step: random masks cannot agree between frameworks")
    root = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="msdebug-port-"))
    root.mkdir(parents=True, exist_ok=True)
    for side in ("mindspore", "pytorch"):
        if (root / side).exists():
            shutil.rmtree(root / side)
    restore_modes = None
    try:
        for layer, module, _ in dropouts:
            layer.p, module.p = 0.0, 0.0
        try:
            random = _run("torch_module", find_random_layers, mindspore_cell, torch_module,
                          tuple(torch_inputs(torch_module, batch)), tuple(mindspore_inputs(mindspore_cell, batch)),
                          copy.torch_name)
            if random.paired or random.mindspore or random.pytorch:
                notes.append(random.note())
            ms_eval, torch_eval, restore_modes = mode_setters(mindspore_cell, torch_module, random)
            run_b = _run("torch_module", run_torch, torch_module, batch, loss_name, lr, steps, root / "pytorch",
                         custom[0], torch_eval)
            run_a = _run("mindspore_cell", run_mindspore, mindspore_cell, batch, loss_name, lr, steps,
                         root / "mindspore", custom[1], ms_eval)
        finally:
            for layer, module, p in dropouts:
                layer.p, module.p = p, p
        restore_torch(torch_module, run_b.before)       # the weights of the captured step, for the replay
        restore_mindspore(mindspore_cell, run_a.before)
        cap_a, cap_b, parts = split_fused(read_capture(root / "mindspore"), read_capture(root / "pytorch"),
                                          copy.fused, copy.paths)
        layers = compare_layers(cap_a, cap_b, mapping=copy.layer_mapping(parts),
                                replay=replay, replay_a=mindspore_cell if replay else None)
        cells = dict(mindspore_cell.cells_and_names())
        for layer, _, _ in dropouts:       # replayed as they ran in the step
            layer.p = 0.0
        try:
            later = later_divergences(layers, mindspore_cell if replay else None, cells, _first_layer(layers, cells))
        finally:
            for layer, _, p in dropouts:
                layer.p = p
        restore_mindspore(mindspore_cell, run_a.before)  # a replayed BatchNorm in training mode moved its statistics
        sizes, step_inputs = _step_inputs(mindspore_cell, torch_module, root)
        with input_sizes(sizes), layer_inputs(step_inputs):
            conventions = check_conventions(mindspore_cell, torch_module,
                                            partner_names(copy, layers, mindspore_cell, torch_module))
        notes += step_inputs.notes
        updates, level = compare_updates(copy, run_a, run_b, inherited_errors([p.entry() for p in layers.pairs]))
    finally:
        if restore_modes is not None:
            restore_modes()
        if workdir is None and not keep:
            shutil.rmtree(root, ignore_errors=True)
    check = PortCheck(type(mindspore_cell).__name__, type(torch_module).__name__, batch.describe(),
                      loss_name if isinstance(loss, str) else "custom", float(lr), copy, conventions, layers, updates,
                      level, run_a.losses, run_b.losses, notes=notes,
                      workdir=str(root) if (workdir is not None or keep) else None, later=later)
    _mark(check, mindspore_cell, torch_module)
    finding = layers.finding
    state, partners = copy.reference_state(state)
    found = None if finding is None else copy.parameter_name(finding.entry.name)
    if finding is not None and finding.kind == attribution.PARAMETER_FINDING and found in partners:
        check.origin = weight_origin(run_a.before[found], state, partners[found])
    return check


def _first_layer(layers: LayerComparison, cells: Mapping[str, Any]) -> Optional[str]:
    """The MindSpore layer the first divergence names: the unpaired layer it starts at (A's suspect), else the
    finding's own."""
    finding, culprit = layers.finding, layers.culprit
    if finding is None:
        return None
    return record_layer(culprit.record.name if culprit is not None and culprit.side == "A" else finding.entry.name,
                        cells)


def _mark(check: PortCheck, cell: Any, torch_module: Any) -> None:
    """Fill the tree, the marked layer and its source lines."""
    cells = dict(cell.cells_and_names())
    finding = check.layers.finding
    torch_layer = None
    if finding is not None:
        culprit = check.layers.culprit
        check.marked = _first_layer(check.layers, cells)
        check.marked_kind = finding.kind
        pair = check.layers.pairs[finding.index]   # PyTorch's own partner (names may have shifted)
        torch_layer = record_layer(culprit.record.name if culprit is not None and culprit.side == "B"
                                   else pair.record_b.name, dict(torch_module.named_modules()))
    elif check.updates:
        check.marked = record_layer(check.copy.paths.get(check.updates[0].name, check.updates[0].name), cells)
        check.marked_kind = "update"
    check.tree = tree_lines(cell, layer_errors(check.layers, cells), check.marked, check.copy.torch_name)
    if check.marked:
        found = [source_line(cell, check.marked, "MindSpore"),
                 source_line(torch_module, torch_layer or check.copy.torch_name(check.marked), "PyTorch")]
        check.sources = [source for source in found if source is not None]


__all__ = ["PortCheck", "UpdateFinding", "Batch", "compare_models", "compare_updates", "as_batch"]
