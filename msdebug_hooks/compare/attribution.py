"""Where does a difference *appear*? The noise-aware first divergence that compare-layers and compare-dumps share.

Two correct runs never agree bit for bit: another summation order, another kernel or another device leaves rounding
noise that grows from layer to layer. A fixed per-element threshold therefore either fires on noise (elements near
zero after a ReLU or a BatchNorm, gradients with cancellation) or stays silent on a real bug whose error is small but
far above the noise (a tanh-approximated GELU: 1e-4 of the values against 1e-7 of noise). So the first divergence is
decided on each tensor's error *as a whole*, ``e = |a - b| / |b|`` (``TensorComparison.relative_l2_error``), read
in execution order, against two references:

* the **noise floor** of the pair's arithmetic: the error a correct run leaves on one tensor, from the coarser dtype
  of the two sides (:data:`FORWARD_FLOOR`; float32: 1e-5, about 170 float32 roundings, which no correct layer of the
  corpus in docs/precision-comparison.md came within a factor of 10 of);
* the **upstream level**: the largest error of the records before it (compare-layers), or of the operator's own
  inputs (compare-dumps), since error that arrives through the input is inherited, not made here.

A record *diverges* when ``e`` is above the floor **and** more than :data:`JUMP` (10) times the upstream level: the
error appears or jumps there. Error that grows gradually through many layers (noise amplified by each layer's
conditioning) never jumps by 10 at once; a wrong operator, epsilon, scale or weight does.

Precision: when one side computed in float16/bfloat16 (the recorded source dtype), or when the first recorded layer
already differs at a level typical of reduced-precision arithmetic (:data:`REDUCED_PRECISION_BAND`: TF32 ~1e-3,
bf16 ~4e-3, fp16 ~5e-4), the finding is ``precision``, naming that layer; the scan then goes on with that
arithmetic's floor, and a later jump above it is reported as the layer it happens in. A later layer that is the
first to differ is named as a layer whatever its size: the layers before it computed in full precision.

Gradients are read only when every forward output agrees, in backward order (the reverse of the forward), with the
same rule: a gradient diverges when its error is above :data:`GRADIENT_FLOOR` **and** more than :data:`JUMP` times
the upstream level, here the largest error of the forward outputs and of the gradients read before it (the error that
flows back into its layer). Two things differ from forward records, both from the gradient being a sum over the
batch and the positions of per-position terms (``dy * x`` for a weight, ``dy`` for a bias or a BatchNorm beta):

* its rounding error, and the error it inherits from ``dy``, scale with the size of the *terms*, not of their sum.
  Where the terms cancel, ``|a - b| / |b|`` blows up although nothing is wrong: a BatchNorm beta right before a 1x1
  convolution and another BatchNorm has a gradient of exactly zero (that convolution sums the next BatchNorm's
  zero-mean gradient), so both sides hold pure rounding noise and differ by 100 %. The terms' size is not
  recorded, but the other parameters of the same layer are sums of the same ``dy`` (gamma's gradient sums
  ``dy * x_hat`` where beta's sums ``dy``; a weight's sums ``dy * x`` where its bias's sums ``dy``), so a gradient is
  measured against the larger of its own norm and its **layer's gradient scale** (:func:`scaled_errors`): the
  root-mean-square element of all the layer's parameter gradients (the reference's), times the square root of its
  own size. A gradient that is not cancelled is measured as before; a layer of one parameter is unchanged.
* the floor is higher (float32: 1e-2): even measured so, sums of many terms of both signs leave several 1e-3.
* and it rises with the forward level (:func:`kink_floor`): a piecewise operation (ReLU, ReLU6, a hard swish, max
  pooling) routes each gradient term by a comparison, so an element that lies within the runs' forward difference of
  a kink is routed differently on the two sides, and its whole term moves. Where the forward outputs differ by ``e``
  (relative), about a share ``e`` of the elements lie that close; flipping a share ``e`` of a sum's terms moves it
  by about ``sqrt(e)`` of its size, whatever the number of terms. A sum of few terms (a BatchNorm over 8 values)
  shows it as one flipped term: MobileNet v2 in float32 against float64 flips one ReLU6 input of 7,680 after a
  2x2 BatchNorm, and that BatchNorm's beta gradient differs by 1.4e-2. A gradient's floor is therefore at least
  ``JUMP * sqrt(e)``, ``e`` the largest forward error: 10 times the error kink flips explain, as a jump is 10 times
  the error inherited.

A layer's parameters are the records whose names agree up to the last dot (``layer1.0.bn1.weight`` and
``layer1.0.bn1.bias``): the naming both frameworks give a layer's parameters, no name of a model or layer type.
Parameters (recorded at the start of the step) come first: a parameter that differs is the root ("the runs start the
step from different values of fc2.weight").
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from msdebug_hooks.compare.metrics import TensorComparison

PARAMETER = "parameter"
FORWARD = "forward"
GRADIENT = "gradient"

#: finding kinds
LAYER = "layer"
PRECISION = "precision"
GRADIENT_FINDING = "gradient"
PARAMETER_FINDING = "parameter"

#: the relative L2 error a correct run leaves on one forward tensor, by the coarser dtype of the pair
FORWARD_FLOOR = {"float64": 1e-10, "float32": 1e-5, "float16": 1e-2, "bfloat16": 5e-2}
#: the same for parameter gradients (cancellation in the batch sum: see the module docstring)
GRADIENT_FLOOR = {"float64": 1e-6, "float32": 1e-2, "float16": 1e-1, "bfloat16": 2e-1}
#: parameters at the start of a step: converted weights are exact; a few updates leave 1e-7
PARAMETER_FLOOR = {"float64": 1e-10, "float32": 1e-5, "float16": 1e-2, "bfloat16": 5e-2}
#: a record diverges only when its error is more than JUMP times what arrived from upstream
JUMP = 10.0
#: relative errors typical of one layer computed in reduced precision (TF32 ~5e-4..1e-3, fp16 ~5e-4, bf16 ~4e-3)
REDUCED_PRECISION_BAND = (1e-4, 3e-2)
#: the floor used after a reduced-precision effect was seen upstream of float32-recorded tensors (TF32)
TF32_FLOOR = 1e-2

_REDUCED = ("float16", "bfloat16")
_RANK = {"float64": 0, "float32": 1, "float16": 2, "bfloat16": 3}


@dataclass(frozen=True)
class Entry:
    """One compared tensor, as the attribution reads it."""

    name: str
    kind: str                      # PARAMETER, FORWARD or GRADIENT
    comparison: TensorComparison
    dtype_a: str = "float32"       # the dtype each side computed in (a bf16 tensor may be stored as float32)
    dtype_b: str = "float32"
    #: compare-dumps: the largest error among the operator's own inputs (None: not known)
    inputs_error: Optional[float] = None


@dataclass(frozen=True)
class Finding:
    """The first divergence and what it is measured against."""

    kind: str                      # LAYER, PRECISION, GRADIENT_FINDING or PARAMETER_FINDING
    index: int                     # position in the entries given
    entry: Entry
    error: float                   # its relative L2 error (inf when not comparable or NaN/Inf disagree)
    upstream: float                # the largest error upstream of it
    floor: float                   # the noise floor it was judged against
    #: set when a reduced-precision effect was seen upstream of a LAYER finding (or is the finding itself)
    precision: Optional["Finding"] = None
    #: what ``error`` is relative to: the reference's norm, or (a cancelled gradient) its layer's gradient scale
    measure: str = "|a-b|/|b|"
    #: why the floor is what it is, where it is not the table's (a gradient's kink floor)
    floor_reason: str = ""

    @property
    def jump(self) -> float:
        return math.inf if self.upstream == 0 else self.error / self.upstream

    def describe(self) -> str:
        """One sentence: the error, the noise it stands out of, and what to check."""
        name = self.entry.name
        size = _size(self.error)
        if self.kind == PRECISION:
            low = coarser_dtype(self.entry.dtype_a, self.entry.dtype_b)
            if low in _REDUCED:
                side = "A" if _RANK[self.entry.dtype_a] > _RANK[self.entry.dtype_b] else "B"
                return (f"{name} is computed in {low} in {side} ({size} relative, the rounding of {low}); the "
                        f"records before it agree to {_size(self.upstream)}: a reduced-precision run "
                        f"(autocast / mixed precision / to_float), not a wrong layer, unless it jumps further")
            return (f"{name} already differs at {size} relative, the precision of TF32/bf16/fp16 arithmetic, "
                    f"not float32, while every record before it is identical: check TF32 (torch.backends.*."
                    f"allow_tf32), autocast and mixed-precision settings, then {name} itself")
        if not self.entry.comparison.comparable:
            return f"{name} cannot be compared ({self.entry.comparison.reason}): the layer computes something else"
        if self.entry.comparison.nan_inf_mismatch:
            return f"{name}: {self.entry.comparison.reason}"
        where = {PARAMETER_FINDING: "the runs start the step from different values of",
                 GRADIENT_FINDING: "every forward output agrees; the gradient of"}.get(self.kind, "")
        against = (f"upstream agrees to {_size(self.upstream)}" if self.upstream > 0
                   else "everything upstream is identical")
        lead = f"{where} {name}" if where else name
        reason = f" ({self.floor_reason})" if self.floor_reason else ""
        text = (f"{lead}: {size} relative ({self.measure}), {against}, noise floor {self.floor:.0e}{reason}"
                + (f": a {self.jump:,.0f}x jump" if math.isfinite(self.jump) and self.jump >= JUMP else ""))
        if self.precision is not None:
            text += f"; upstream of it, {self.precision.entry.name} shows reduced-precision arithmetic"
        return text


def in_reduced_precision_band(error: float) -> bool:
    """Whether ``error`` is of the size one layer computed in TF32/fp16/bf16 shows against float32."""
    return REDUCED_PRECISION_BAND[0] <= error <= REDUCED_PRECISION_BAND[1]


def coarser_dtype(dtype_a: str, dtype_b: str) -> str:
    """The lower-precision of two float dtype names (non-float names count as float32)."""
    a, b = (d if d in _RANK else "float32" for d in (dtype_a, dtype_b))
    return a if _RANK[a] >= _RANK[b] else b


def error_of(entry: Entry, negligible: float = 1e-6) -> float:
    """The entry's relative L2 error; 0 when both sides are zero up to rounding; inf when it cannot be compared or
    NaN/Inf disagree."""
    c = entry.comparison
    if not c.comparable or c.nan_inf_mismatch or c.relative_l2_error is None:
        return math.inf
    if c.largest_rms is not None and c.largest_rms <= negligible:
        return 0.0
    return c.relative_l2_error


def _floor(table: dict, entry: Entry) -> float:
    return table[coarser_dtype(entry.dtype_a, entry.dtype_b)]


def first_divergence(entries: Sequence[Entry], negligible: float = 1e-6) -> Optional[Finding]:
    """The first entry where a difference appears (parameters, then forward outputs in order, then gradients in
    backward order), or None when every difference stays within the noise of its arithmetic."""
    indexed = list(enumerate(entries))
    errors = {i: error_of(e, negligible) for i, e in indexed}
    for i, entry in indexed:
        if entry.kind == PARAMETER and errors[i] > _floor(PARAMETER_FLOOR, entry):
            return Finding(PARAMETER_FINDING, i, entry, errors[i], 0.0, _floor(PARAMETER_FLOOR, entry))
    level, precision, first = 0.0, None, True
    for i, entry in indexed:
        if entry.kind != FORWARD:
            continue
        error = errors[i]
        upstream = entry.inputs_error if entry.inputs_error is not None else level
        if not math.isfinite(error):
            return Finding(LAYER, i, entry, error, upstream, 0.0, precision)
        low = coarser_dtype(entry.dtype_a, entry.dtype_b)
        floor = FORWARD_FLOOR[low]
        if precision is not None and low not in _REDUCED:
            floor = max(floor, TF32_FLOOR)
        base_floor = FORWARD_FLOOR["float32"] if low in _REDUCED else floor
        if precision is None and error > base_floor and error > JUMP * upstream and (
                low in _REDUCED or (first and in_reduced_precision_band(error))):
            precision = Finding(PRECISION, i, entry, error, upstream, base_floor)
        elif error > floor and error > JUMP * upstream:
            return Finding(LAYER, i, entry, error, upstream, floor, precision)
        level = max(level, error)
        first = False
    if precision is not None:
        return precision
    scaled = scaled_errors(entries, GRADIENT, negligible)
    gradient_level = level
    kink = kink_floor(level)
    for i, entry in reversed(indexed):
        if entry.kind != GRADIENT:
            continue
        floor = max(_floor(GRADIENT_FLOOR, entry), kink)
        error = scaled[i]
        if error > floor and error > JUMP * gradient_level:
            measure = "|a-b|/|b|" if error == errors[i] else "|a-b| against its layer's gradient scale"
            reason = (f"{JUMP:g} x sqrt of the forward level {_size(level)}: gradient terms routed differently at "
                      f"kinks" if floor == kink else "")
            return Finding(GRADIENT_FINDING, i, entry, error, gradient_level, floor, measure=measure,
                           floor_reason=reason)
        if math.isfinite(error):
            gradient_level = max(gradient_level, error)
    return None


def kink_floor(forward_level: float) -> float:
    """The error a gradient inherits from kinks (ReLU, max pooling) where the forward outputs differ by
    ``forward_level``: ``JUMP * sqrt(forward_level)`` (see the module docstring); 0 for a level that is not finite."""
    return JUMP * math.sqrt(forward_level) if math.isfinite(forward_level) and forward_level > 0 else 0.0


def layer_of(name: str) -> str:
    """The layer a parameter belongs to: its name up to the last dot (a name without a dot is its own layer)."""
    return name.rsplit(".", 1)[0] if "." in name else name


def layer_scale(group: Sequence[tuple[float, int]], count: int) -> float:
    """The scale a tensor of ``count`` elements is measured against, from its layer's tensors ``(norm, size)``
    (its own included): the root-mean-square element of them all times ``sqrt(count)``, i.e. the norm it would have
    if its elements were as large as its layer's (see the module docstring: cancelled sums)."""
    squares = sum(norm * norm for norm, _ in group if math.isfinite(norm))
    size = sum(n for norm, n in group if math.isfinite(norm))
    return math.sqrt(squares / size * count) if size else 0.0


def _norms(comparison: TensorComparison) -> Optional[tuple[float, float]]:
    """``(|a - b|, |b|)`` of a compared pair (None when it was not measured)."""
    distance, relative = comparison.euclidean_distance, comparison.relative_l2_error
    if distance is None or relative is None or not comparison.comparable:
        return None
    if relative == 0.0 or not math.isfinite(relative):
        return distance, 0.0
    return distance, distance / relative


def scaled_errors(entries: Sequence[Entry], kind: str = GRADIENT, negligible: float = 1e-6) -> list:
    """Each entry's error (:func:`error_of`); for entries of ``kind``, ``|a - b|`` against the larger of ``|b|`` and
    its layer's scale (:func:`layer_scale` over the entries of that kind with the same :func:`layer_of`)."""
    errors = [error_of(entry, negligible) for entry in entries]
    groups: dict = {}
    for entry in entries:
        norms = _norms(entry.comparison) if entry.kind == kind else None
        if norms is not None:
            groups.setdefault(layer_of(entry.name), []).append((norms[1], entry.comparison.count))
    for i, entry in enumerate(entries):
        norms = _norms(entry.comparison) if entry.kind == kind else None
        if norms is None or errors[i] == 0.0 or entry.comparison.nan_inf_mismatch:
            continue
        scale = max(norms[1], layer_scale(groups[layer_of(entry.name)], entry.comparison.count))
        if scale > 0.0:
            errors[i] = min(errors[i], norms[0] / scale)
    return errors


def noise_level(entries: Sequence[Entry], before: int, negligible: float = 1e-6) -> float:
    """The largest error of the forward entries before position ``before`` (what "upstream agrees to" reports)."""
    found = [error_of(e, negligible) for e in entries[:before] if e.kind == FORWARD]
    return max((x for x in found if math.isfinite(x)), default=0.0)


def _size(error: float) -> str:
    if math.isinf(error):
        return "inf"
    return "0" if error == 0 else f"{error:.1e}"
