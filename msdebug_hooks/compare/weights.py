"""Converted weights checked against their source: the first thing to rule out in a port.

``compare_weights(a, b)`` reads two weight files -- ``.ckpt`` (MindSpore, through :mod:`msdebug_hooks.ckpt`) or
``.pth``/``.pt`` (PyTorch, imported lazily) in any combination -- matches names through the built-in naming map
(and the user's mapping, A name -> B name), and gives every parameter one finding:

``ok``          same values (within ``rtol``/``atol``);
``values``      same shape, values differ (max absolute error and cosine given);
``transposed``  B's shape is the transpose of A's and B equals A transposed (a ``[in, out]`` / ``[out, in]`` mixup);
``shape``       shapes differ otherwise;
``dtype``       an integer/bool dtype against another dtype (float widths are compared as values);
``renamed``     in A only, with a B-only name close to it of the same shape (the closest name is suggested);
``missing``     in A, nothing in B;
``extra``       in B, nothing in A.

Optimizer state in a ``.ckpt`` (``moments.*``, ``learning_rate``, ``global_step``, ...) and PyTorch's
``num_batches_tracked`` are not weights and are skipped (counted in ``skipped``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Union

import numpy as np

from msdebug_hooks.compare.naming import MINDSPORE, PYTORCH, canonical_name, is_framework_bookkeeping
from msdebug_hooks.config._common import closest_name
from msdebug_hooks.errors import ConfigError

PathLike = Union[str, "os.PathLike[str]"]
_SUFFIXES = {".ckpt": MINDSPORE, ".pth": PYTORCH, ".pt": PYTORCH}
OK, VALUES, TRANSPOSED, SHAPE, DTYPE, RENAMED, MISSING, EXTRA = (
    "ok", "values", "transposed", "shape", "dtype", "renamed", "missing", "extra")


@dataclass
class WeightFinding:
    """One parameter's finding; ``message`` is the line the command prints."""

    kind: str
    name_a: Optional[str]
    name_b: Optional[str]
    message: str
    shape_a: Optional[list] = None
    shape_b: Optional[list] = None
    max_abs_error: Optional[float] = None


@dataclass
class WeightComparison:
    path_a: str
    path_b: str
    framework_a: str
    framework_b: str
    findings: list = field(default_factory=list)
    skipped: list = field(default_factory=list)

    @property
    def problems(self) -> list:
        return [f for f in self.findings if f.kind != OK]

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict:
        return {"path_a": self.path_a, "path_b": self.path_b, "framework_a": self.framework_a,
                "framework_b": self.framework_b, "ok": self.ok, "skipped": self.skipped,
                "findings": [vars(f) for f in self.findings]}

    def format(self) -> str:
        matched = sum(1 for f in self.findings if f.kind == OK)
        lines = [f"A: {self.path_a} ({self.framework_a})", f"B: {self.path_b} ({self.framework_b})",
                 f"{matched} parameters match, {len(self.problems)} problems"
                 + (f", {len(self.skipped)} non-weight entries skipped" if self.skipped else "")]
        lines += [f"{f.kind.upper()}: {f.message}" for f in self.problems]
        return "\n".join(lines)


def framework_of(path: PathLike) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in _SUFFIXES:
        raise ConfigError("checkpoint", str(path), "a MindSpore .ckpt or a PyTorch .pth/.pt file",
                          detail=f"unknown suffix {suffix or '(none)'!r}")
    return _SUFFIXES[suffix]


def load_weights(path: PathLike) -> tuple[str, dict]:
    """``(framework, {name: array})`` of a ``.ckpt`` or ``.pth``/``.pt`` file."""
    framework = framework_of(path)
    if framework == MINDSPORE:
        from msdebug_hooks.ckpt import load_parameters
        return framework, load_parameters(path)
    from msdebug_hooks.compare.torch import load_state_dict
    return framework, load_state_dict(path)


def compare_weights(path_a: PathLike, path_b: PathLike, *, mapping: Optional[Mapping[str, str]] = None,
                    rtol: float = 1e-6, atol: float = 1e-8) -> WeightComparison:
    """Check B's weights against A's (A: usually the source, B: the converted file)."""
    framework_a, weights_a = load_weights(path_a)
    framework_b, weights_b = load_weights(path_b)
    report = WeightComparison(str(path_a), str(path_b), framework_a, framework_b)
    for framework, weights in ((framework_a, weights_a), (framework_b, weights_b)):
        for name in [n for n in weights if is_framework_bookkeeping(n, framework)]:
            report.skipped.append(name)
            del weights[name]
    mapping = dict(mapping or {})
    b_by_key = {canonical_name(name, framework_b): name for name in weights_b}
    b_left = dict.fromkeys(weights_b)
    a_left = []
    for name_a, value_a in weights_a.items():
        name_b = mapping.get(name_a) or b_by_key.get(canonical_name(name_a, framework_a))
        if name_b is None or name_b not in b_left:
            a_left.append(name_a)
            continue
        del b_left[name_b]
        report.findings.append(_compare_pair(name_a, value_a, name_b, weights_b[name_b], rtol, atol))
    for name_a in a_left:
        value_a = weights_a[name_a]
        guess = _closest(name_a, framework_a, list(b_left), framework_b)
        if guess is not None and tuple(weights_b[guess].shape) in (value_a.shape, value_a.shape[::-1]):
            del b_left[guess]
            pair = _compare_pair(name_a, value_a, guess, weights_b[guess], rtol, atol)
            report.findings.append(WeightFinding(
                RENAMED, name_a, guess, f"{name_a} {list(value_a.shape)} is not in B under its name; B has "
                f"{guess} {list(weights_b[guess].shape)} instead: renamed? ({_pair_summary(pair)})",
                list(value_a.shape), list(weights_b[guess].shape), pair.max_abs_error))
        else:
            hint = f" (closest name in B: {guess})" if guess else ""
            report.findings.append(WeightFinding(MISSING, name_a, None, f"{name_a} {list(value_a.shape)} "
                                                 f"{value_a.dtype} is missing from B{hint}", list(value_a.shape)))
    for name_b in b_left:
        value_b = weights_b[name_b]
        report.findings.append(WeightFinding(EXTRA, None, name_b, f"{name_b} {list(value_b.shape)} {value_b.dtype} "
                                             f"is in B only (not in A)", None, list(value_b.shape)))
    return report


def _closest(name_a: str, framework_a: str, names_b: list, framework_b: str) -> Optional[str]:
    keys = {canonical_name(name, framework_b): name for name in names_b}
    guess = closest_name(canonical_name(name_a, framework_a), keys)
    return keys[guess] if guess else None


def _pair_summary(finding: WeightFinding) -> str:
    return {OK: "values equal", TRANSPOSED: "values equal transposed"}.get(finding.kind, f"{finding.kind}: "
                                                                         f"{finding.message.split(': ', 1)[-1]}")


def _is_numeric_float(array: np.ndarray) -> bool:
    return array.dtype.kind == "f" or array.dtype.name == "bfloat16"


def _compare_pair(name_a: str, a: np.ndarray, name_b: str, b: np.ndarray, rtol: float, atol: float) -> WeightFinding:
    label = name_a if name_a == name_b else f"{name_a} -> {name_b}"
    shapes = (list(a.shape), list(b.shape))
    if a.dtype != b.dtype and not (_is_numeric_float(a) and _is_numeric_float(b)):
        return WeightFinding(DTYPE, name_a, name_b, f"{label}: dtype {a.dtype} in A, {b.dtype} in B", *shapes)
    if a.shape != b.shape:
        if a.ndim >= 2 and b.shape == a.shape[::-1]:
            if _close(a.T, b, rtol, atol):
                return WeightFinding(TRANSPOSED, name_a, name_b, f"{label}: transposed: B {list(b.shape)} is A "
                                     f"{list(a.shape)} transposed (values equal after transposing); transpose "
                                     f"it in the conversion", *shapes)
            return WeightFinding(SHAPE, name_a, name_b, f"{label}: shape {list(a.shape)} in A, {list(b.shape)} in B "
                                 f"(the transpose, but the values differ even transposed)", *shapes)
        return WeightFinding(SHAPE, name_a, name_b, f"{label}: shape {list(a.shape)} in A, {list(b.shape)} in B",
                             *shapes)
    fa, fb = a.astype(np.float64), b.astype(np.float64)
    diff = np.abs(fa - fb)
    max_abs = float(np.nanmax(diff)) if diff.size else 0.0
    if _close(a, b, rtol, atol):
        return WeightFinding(OK, name_a, name_b, f"{label}: equal", *shapes, max_abs_error=max_abs)
    from msdebug_hooks.compare.metrics import compare_arrays
    result = compare_arrays(b, a)
    return WeightFinding(VALUES, name_a, name_b, f"{label}: values differ: max abs error {max_abs:.3g}, cosine "
                         f"{result.cosine:.6f}", *shapes, max_abs_error=max_abs)


def _close(a: Any, b: Any, rtol: float, atol: float) -> bool:
    return bool(np.allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=rtol, atol=atol,
                            equal_nan=True))
