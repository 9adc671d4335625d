"""Checkpoint-file checks from the docs' troubleshooting guide: did the weights update between two checkpoints, and
does a checkpoint hold NaN/Inf?

The docs hand users loops over ``mindspore.load_checkpoint`` that compare arrays with ``==`` and test
``np.isnan(value)`` as a truth value (both raise for arrays). These functions do it properly, with the same
tolerances and update-ratio definition as the watchpoint engine (``msdebug_hooks.conditions``), and return reports
that the ``msdebug ckpt-diff`` / ``msdebug ckpt-scan`` commands print as text or JSON. MindSpore is imported only
when a file is loaded.
"""
from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Union

import numpy as np

from msdebug_hooks._files import atomic_path
from msdebug_hooks.errors import ConfigError

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class ParamChange:
    """One parameter present in both files with the same shape and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    changed: bool                    # not allclose(b, a, rtol, atol)
    max_abs_diff: float
    mean_abs_update_ratio: float     # mean|b - a| / (mean|a| + 1e-9)
    too_large: bool                  # ratio above max_update_ratio (when given)
    non_finite: bool                 # NaN/Inf in either file


@dataclass(frozen=True)
class Mismatch:
    """A parameter present in both files whose shape or dtype differs."""

    name: str
    a_shape: tuple[int, ...]
    a_dtype: str
    b_shape: tuple[int, ...]
    b_dtype: str


@dataclass
class CheckpointDiff:
    """What :func:`compare_checkpoints` found; ``problems(expect_unchanged)`` is what makes the CLI exit 1."""

    a: str
    b: str
    rtol: float
    atol: float
    max_update_ratio: Optional[float]
    params: list[ParamChange] = field(default_factory=list)
    only_in_a: list[str] = field(default_factory=list)
    only_in_b: list[str] = field(default_factory=list)
    mismatched: list[Mismatch] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)    # filtered out by only/exclude/include_scalars

    @property
    def changed(self) -> list[str]:
        return [p.name for p in self.params if p.changed]

    @property
    def unchanged(self) -> list[str]:
        return [p.name for p in self.params if not p.changed]

    @property
    def too_large(self) -> list[str]:
        return [p.name for p in self.params if p.too_large]

    @property
    def non_finite(self) -> list[str]:
        return [p.name for p in self.params if p.non_finite]

    def problems(self, expect_unchanged: bool = False) -> list[str]:
        """One line per finding that contradicts the expectation (all changed, or all unchanged)."""
        lines = [f"only in {self.a}: {name}" for name in self.only_in_a]
        lines += [f"only in {self.b}: {name}" for name in self.only_in_b]
        lines += [f"shape/dtype differ: {m.name}: {m.a_shape} {m.a_dtype} vs {m.b_shape} {m.b_dtype}"
                  for m in self.mismatched]
        if expect_unchanged:
            lines += [f"changed: {p.name} (max abs diff {p.max_abs_diff:.6g})" for p in self.params if p.changed]
            return lines
        lines += [f"not changed: {name} (allclose rtol={self.rtol:g} atol={self.atol:g})" for name in self.unchanged]
        lines += [f"change too large: {p.name} (mean abs update ratio {p.mean_abs_update_ratio:.6g} > "
                  f"{self.max_update_ratio:g})" for p in self.params if p.too_large]
        lines += [f"NaN/Inf: {name}" for name in self.non_finite]
        return lines

    def to_dict(self) -> dict:
        data = asdict(self)
        data["changed"], data["unchanged"] = self.changed, self.unchanged
        return data

    def format(self) -> str:
        width = max([len(p.name) for p in self.params] + [9])
        lines = [f"{self.a} -> {self.b}: {len(self.changed)} changed, {len(self.unchanged)} unchanged, "
                 f"{len(self.only_in_a) + len(self.only_in_b)} in one file only, {len(self.mismatched)} mismatched"]
        lines.append(f"{'parameter':<{width}}  {'changed':<7}  {'max|diff|':>11}  {'update ratio':>12}")
        for p in self.params:
            flags = " NaN/Inf" if p.non_finite else ""
            flags += " TOO LARGE" if p.too_large else ""
            lines.append(f"{p.name:<{width}}  {'yes' if p.changed else 'NO':<7}  {p.max_abs_diff:>11.4g}  "
                         f"{p.mean_abs_update_ratio:>12.4g}{flags}")
        lines += [f"only in {self.a}: {n}" for n in self.only_in_a] + [f"only in {self.b}: {n}" for n in self.only_in_b]
        lines += [f"mismatch {m.name}: {m.a_shape} {m.a_dtype} vs {m.b_shape} {m.b_dtype}" for m in self.mismatched]
        if self.skipped:
            lines.append(f"not compared: {', '.join(self.skipped)}")
        return "\n".join(lines)


@dataclass(frozen=True)
class NonFiniteParam:
    name: str
    shape: tuple[int, ...]
    dtype: str
    size: int
    nan_count: int
    inf_count: int


@dataclass
class CheckpointScan:
    """What :func:`scan_checkpoint` found: the parameters holding NaN/Inf, with counts."""

    path: str
    parameters: int
    bad: list[NonFiniteParam] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.bad

    def to_dict(self) -> dict:
        data = asdict(self)
        data["ok"] = self.ok
        return data

    def format(self) -> str:
        head = f"{self.path}: {self.parameters} parameters, {len(self.bad)} with NaN/Inf"
        return "\n".join([head] + [f"{b.name} {b.shape} {b.dtype}: {b.nan_count} NaN, {b.inf_count} Inf "
                                   f"of {b.size}" for b in self.bad])


def load_parameters(path: PathLike) -> dict[str, np.ndarray]:
    """Every parameter of a MindSpore ``.ckpt`` file as a numpy array (bfloat16 is widened to float32).

    Raises ``FileNotFoundError`` for a missing file and ``ConfigError`` for anything MindSpore cannot read.
    """
    target = Path(path).expanduser()
    if not target.exists():
        raise FileNotFoundError(f"checkpoint={str(path)!r} does not exist")
    if not target.is_file():
        raise ConfigError("checkpoint", str(path), "a MindSpore .ckpt file", detail="it is not a regular file")
    import mindspore as ms

    try:
        loaded = ms.load_checkpoint(str(target))
    except (ValueError, RuntimeError, TypeError, OSError) as exc:
        raise ConfigError("checkpoint", str(path), "a MindSpore .ckpt file that load_checkpoint can read",
                          detail=str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from exc
    arrays = {}
    for name, param in loaded.items():
        try:
            arrays[name] = param.asnumpy()
        except TypeError:  # numpy has no bfloat16
            arrays[name] = param.astype(ms.float32).asnumpy()
    return arrays


def _selected(names: list[str], arrays: dict[str, np.ndarray], only: Optional[str], exclude: Optional[str],
              include_scalars: bool) -> tuple[list[str], list[str]]:
    only_re = _compile("only", only)
    exclude_re = _compile("exclude", exclude)
    kept, skipped = [], []
    for name in names:
        if (only_re and not only_re.search(name)) or (exclude_re and exclude_re.search(name)) \
                or (not include_scalars and arrays[name].ndim == 0):
            skipped.append(name)
        else:
            kept.append(name)
    return kept, skipped


def _compile(field_name: str, pattern: Optional[str]) -> Optional[re.Pattern]:
    if not pattern:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ConfigError(field_name, pattern, "a Python regular expression", detail=str(exc)) from exc


def compare_checkpoints(a: PathLike, b: PathLike, *, rtol: float = 1e-5, atol: float = 1e-8,
                        max_update_ratio: Optional[float] = None, only: Optional[str] = None,
                        exclude: Optional[str] = None, include_scalars: bool = False) -> CheckpointDiff:
    """Compare checkpoint ``a`` (earlier) with ``b`` (later), parameter by parameter.

    A parameter "changed" unless ``allclose(b, a, rtol, atol)`` (the engine's ``TensorUnchangedCondition``); its
    mean absolute update ratio is ``mean|b-a| / (mean|a| + 1e-9)`` and is flagged above ``max_update_ratio``
    (``TensorChangeAboveThresholdCondition``). ``only`` / ``exclude`` are regular expressions searched in the
    names. 0-d parameters (optimizer hyper-parameters such as ``learning_rate`` and ``momentum``, which never
    change) are left out unless ``include_scalars``.
    """
    from msdebug_hooks.conditions import (TensorChangeAboveThresholdCondition, TensorUnchangedCondition,
                                          check_many)

    if max_update_ratio is not None and not max_update_ratio > 0:
        raise ConfigError("max_update_ratio", max_update_ratio, "a number > 0 or None")
    try:  # the engine validates rtol/atol; report them under this function's own argument names
        unchanged_cond = TensorUnchangedCondition(rtol=rtol, atol=atol)
    except ConfigError as exc:
        raise ConfigError(exc.field.rsplit(".", 1)[-1], exc.value, exc.allowed) from exc
    ratio_cond = TensorChangeAboveThresholdCondition(
        abs_mean_update_ratio_gt=max_update_ratio if max_update_ratio is not None else 0.1)
    first, second = load_parameters(a), load_parameters(b)
    report = CheckpointDiff(str(a), str(b), rtol, atol, max_update_ratio)
    both, skipped = _selected([n for n in first if n in second], first, only, exclude, include_scalars)
    report.only_in_a, skipped_a = _selected([n for n in first if n not in second], first, only, exclude,
                                            include_scalars)
    report.only_in_b, skipped_b = _selected([n for n in second if n not in first], second, only, exclude,
                                            include_scalars)
    report.skipped = skipped + skipped_a + skipped_b
    for name in both:
        old, new = first[name], second[name]
        if old.shape != new.shape or old.dtype != new.dtype:
            report.mismatched.append(Mismatch(name, tuple(old.shape), str(old.dtype), tuple(new.shape),
                                              str(new.dtype)))
            continue
        old_f = old if old.dtype.kind == "f" else old.astype(np.float64)
        new_f = new if new.dtype.kind == "f" else new.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):  # NaN/Inf are reported, not warned about
            unchanged, ratio = check_many([unchanged_cond, ratio_cond], new_f, previous=old_f)
        ratio_value = _actual(ratio, "abs_mean_update_ratio_gt")
        non_finite = not (np.isfinite(old_f).all() and np.isfinite(new_f).all())
        max_abs = float(np.max(np.abs(new_f - old_f))) if new_f.size else 0.0
        report.params.append(ParamChange(
            name, tuple(new.shape), str(new.dtype), changed=not unchanged.hit, max_abs_diff=max_abs,
            mean_abs_update_ratio=ratio_value, too_large=bool(max_update_ratio is not None and ratio.hit),
            non_finite=non_finite))
    return report


def _actual(result, param_name: str) -> float:
    for param in result.params:
        if param.name == param_name and param.actual_value is not None:
            return float(param.actual_value)
    return float("nan")


def scan_checkpoint(path: PathLike) -> CheckpointScan:
    """Every parameter of ``path`` holding NaN or Inf, with how many of each."""
    arrays = load_parameters(path)
    return CheckpointScan(str(path), len(arrays), find_non_finite(arrays.items()))


def find_non_finite(named_arrays: Iterable[tuple[str, np.ndarray]]) -> list[NonFiniteParam]:
    """The arrays holding NaN or Inf, with counts. Cheap for clean ones: one sum each, no temporary array."""
    bad = []
    for name, value in named_arrays:
        with np.errstate(over="ignore", invalid="ignore"):
            if value.dtype.kind not in "fc" or np.isfinite(value.sum()):
                continue  # integers cannot hold NaN/Inf; a finite sum means all elements are finite
        nan_count = int(np.count_nonzero(np.isnan(value)))
        inf_count = int(np.count_nonzero(np.isinf(value)))
        if nan_count or inf_count:
            bad.append(NonFiniteParam(name, tuple(value.shape), str(value.dtype), int(value.size),
                                      nan_count, inf_count))
    return bad


def save_checkpoint_atomic(save_obj, target: PathLike) -> Path:
    """``mindspore.save_checkpoint(save_obj, ...)`` that never leaves a partial file at ``target`` (0600, parents
    created). ``save_checkpoint`` appends ``.ckpt`` to a name without it, so it writes under such a staged name
    beside the temporary file, which is then renamed over ``target``."""
    import mindspore as ms

    target = Path(target)
    with atomic_path(target) as tmp:
        staged = tmp.with_name(tmp.name + ".ckpt")
        try:
            ms.save_checkpoint(save_obj, str(staged))
            os.replace(staged, tmp)
        finally:
            staged.unlink(missing_ok=True)
    return target
