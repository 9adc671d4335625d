"""What the tools answer on one case, through the public comparison API with its default options only, and the
confusion table of the whole corpus.

``report(case_dir)`` returns the four answers a case expects (see ``corpus.cases``), under the same keys:

* ``layer``: ``compare_layers(A, B).first_divergence.record_a.name``; ``None`` when nothing diverges and the
  comparison is ``ok``; ``"not ok: ..."`` when nothing diverges but records found no partner;
* ``kind``: ``compare_layers(A, B).finding.kind`` (``None`` where the comparison has no ``finding``);
* ``loss_step``: ``compare_losses(read_losses(A), read_losses(B)).first_parted.step`` or ``None``;
* ``weights``: every parameter ``compare_weights(B weights, A weights).problems`` names (``name_a`` and
  ``name_b``, in PyTorch's spelling through ``canonical_name``: a swap names both tensors in one problem).

A tool that raises gives ``"error: ..."`` for its answer, so it never reads as clean. ``details`` holds what a
reader of the table wants besides (step-1 loss error, weight problem kinds, side failures).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Optional

from corpus.architectures import first_line

KEYS = ("layer", "kind", "loss_step", "weights")


def _load_case(case_dir: Path) -> dict:
    return json.loads((Path(case_dir) / "case.json").read_text())


def _weights_file(side_dir: Path) -> Path:
    for name in ("initial.ckpt", "initial.pth"):
        if (side_dir / name).exists():
            return side_dir / name
    return side_dir / "initial.pth"  # missing: compare_weights says so


def _error(exc: BaseException) -> str:
    return f"error: {first_line(exc, 120)}"


def report(case_dir: Path) -> dict:
    """``{"name", "expect", "reported", "match", "details"}`` for one case directory."""
    from msdebug_hooks.compare import compare_layers, compare_losses, compare_weights, read_losses
    from msdebug_hooks.compare.naming import canonical_name

    case = _load_case(case_dir)
    a, b = Path(case["a_dir"]), Path(case["b_dir"])
    reported: dict = {}
    details: dict = {}
    for label, side_dir in (("A", a), ("B", b)):
        status_file = side_dir / "side.json"
        status = json.loads(status_file.read_text()) if status_file.exists() else {"status": "missing"}
        if status.get("status") != "ok":
            details[f"side {label}"] = status.get("error", status.get("status"))
        if status.get("capture_error"):
            details[f"capture {label}"] = status["capture_error"]
    try:
        comparison = compare_layers(a / "capture", b / "capture")
        first = comparison.first_divergence
        finding = getattr(comparison, "finding", None)
        if first is not None:
            reported["layer"] = first.record_a.name
        elif not comparison.ok:
            reported["layer"] = (f"not ok: {len(comparison.unmatched_a)} only in A, "
                                 f"{len(comparison.unmatched_b)} only in B")
        else:
            reported["layer"] = None
        reported["kind"] = getattr(finding, "kind", None) if finding is not None else None
        if first is not None:
            details["layer verdict"] = f"{first.result.verdict}: {first.result.reason}"
    except Exception as exc:  # noqa: BLE001 - any failure is the tool's answer, never a clean one
        reported["layer"], reported["kind"] = _error(exc), None
    try:
        losses = compare_losses(read_losses(a / "loss"), read_losses(b / "loss"))
        parted = losses.first_parted
        reported["loss_step"] = parted.step if parted is not None else None
        details["step-1 loss rel error"] = f"{losses.steps[0].rel_error:.2e}"
    except Exception as exc:  # noqa: BLE001
        reported["loss_step"] = _error(exc)
    try:
        weights = compare_weights(_weights_file(b), _weights_file(a))
        reported["weights"] = sorted({canonical_name(name, framework) for problem in weights.problems
                                      for name, framework in ((problem.name_a, weights.framework_a),
                                                              (problem.name_b, weights.framework_b)) if name})
        if weights.problems:
            details["weight problems"] = ", ".join(sorted({problem.kind for problem in weights.problems}))
    except Exception as exc:  # noqa: BLE001
        reported["weights"] = _error(exc)
    expect = case["expect"]
    return {"name": case["name"], "planted": case["planted"], "expect": expect, "reported": reported,
            "match": {key: expect[key] == reported[key] for key in KEYS}, "details": details}


def _cell(value: Any) -> str:
    if value is None:
        return "clean"
    if isinstance(value, list):
        if not value:
            return "clean"
        return ", ".join(f"`{name}`" for name in value) if len(value) <= 3 else f"{len(value)} problems"
    if isinstance(value, str) and value.startswith(("error:", "not ok:")):
        return value.replace("|", "/")
    return f"`{value}`"


def _layer_cell(answers: dict) -> str:
    if answers["layer"] is None and answers["kind"] is None:
        return "clean"
    return f"{_cell(answers['layer'])} ({answers['kind'] or 'no kind'})"


def table(rows: Iterable[dict]) -> str:
    """The confusion table (markdown): case -> expected -> reported -> match, per tool."""
    lines = ["| case | planted | compare-layers: expected | reported | compare-loss: expected | reported | "
             "compare-weights: expected | reported | match |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        expect, got, match = row["expect"], row["reported"], row["match"]
        missed = [key for key in KEYS if not match[key]]
        lines.append(" | ".join([
            f"| {row['name']}", row["planted"].replace("|", "/"), _layer_cell(expect), _layer_cell(got),
            _step_cell(expect["loss_step"]), _step_cell(got["loss_step"]),
            _cell(expect["weights"]), _cell(got["weights"]),
            "yes" if not missed else "**no**: " + ", ".join(missed)]) + " |")
    return "\n".join(lines)


def _step_cell(value: Any) -> str:
    if value is None:
        return "clean"
    return f"step {value}" if isinstance(value, int) else _cell(value)


def summary(rows: list) -> str:
    """One line: how many cases and answers match."""
    answers = sum(len(KEYS) for _ in rows)
    right = sum(sum(row["match"].values()) for row in rows)
    cases = sum(all(row["match"].values()) for row in rows)
    return f"{cases} of {len(rows)} cases fully right; {right} of {answers} answers right"


def normwise_error(a: Any, b: Any) -> Optional[float]:
    """``||a - b|| / ||b||`` in float64 (``None`` when the shapes differ; ``inf`` when ``b`` is zero and ``a`` not)."""
    import numpy as np

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return None
    diff, ref = float(np.linalg.norm(a - b)), float(np.linalg.norm(b))
    return diff / ref if ref else (0.0 if diff == 0 else math.inf)


def forward_errors(case_dir: Path) -> list:
    """``[(layer name in A, normwise relative error)]`` of every matched forward record, in A's execution order."""
    from msdebug_hooks.compare import compare_layers, read_capture

    case = _load_case(case_dir)
    cap_a, cap_b = read_capture(Path(case["a_dir"]) / "capture"), read_capture(Path(case["b_dir"]) / "capture")
    comparison = compare_layers(cap_a, cap_b)
    pairs = [pair for pair in comparison.pairs if pair.record_a.kind == "forward-output"]
    pairs.sort(key=lambda pair: pair.record_a.order)
    return [(pair.record_a.name, normwise_error(cap_a.load(pair.record_a), cap_b.load(pair.record_b)))
            for pair in pairs]
