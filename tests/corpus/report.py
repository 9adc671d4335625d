"""What the tools answer on one case, through the public comparison API with its default options only, and the
confusion table of the whole corpus.

``report(case_dir)`` returns the answers a case expects (see ``corpus.cases``), under the same keys:

* ``layer``: ``compare_layers(A, B).first_divergence.record_a.name``; ``None`` when nothing diverges and the
  comparison is ``ok``; ``"not ok: ..."`` when nothing diverges but records found no partner;
* ``kind``: ``compare_layers(A, B).finding.kind`` (``None`` where the comparison has no ``finding``);
* ``loss_step``: ``compare_losses(read_losses(A), read_losses(B)).first_parted.step`` or ``None``;
* ``weights``: every parameter ``compare_weights(B weights, A weights).problems`` names (``name_a`` and
  ``name_b``, in PyTorch's spelling through ``canonical_name``: a swap names both tensors in one problem);
* ``replay``: where a layer is named, ``compare_layers(A, B, replay=True).replay.verdict`` (the layer's recorded
  inputs compared: ``own`` or ``inherited``), else ``None``;
* ``replayed``: the verdict of the real replay the corpus ran (``replay_a.json`` in the case directory, written by
  ``corpus.port_replay``: the port's layer run on PyTorch's inputs), ``None`` where none ran or nothing was named.

A tool that raises gives ``"error: ..."`` for its answer, so it never reads as clean. ``details`` holds what a
reader of the table wants besides (step-1 loss error, weight problem kinds, side failures).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Optional

from corpus.architectures import first_line
from corpus.port_replay import REPLAY_FILE

KEYS = ("layer", "kind", "loss_step", "weights")
#: own error or inherited, for the named layer: from the recorded inputs, and from the real replay (ports only)
REPLAY_KEYS = ("replay", "replayed")


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
        reported["layer"], reported["kind"], first = _error(exc), None, None
    reported["replay"], reported["replayed"] = _replays(case_dir, a, b, first is not None, details)
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
            "match": {key: expect[key] == reported[key] for key in KEYS + REPLAY_KEYS}, "details": details}


def _replays(case_dir: Path, a: Path, b: Path, named: bool, details: dict) -> tuple:
    """``(verdict from the recorded inputs, verdict of the real replay)`` for the layer compare-layers names; each
    ``None`` where there is nothing to replay (no layer named; no real replay for this pair of sides), ``"error:
    ..."`` where it failed. The numbers go to ``details["replay"]`` (``input``, ``observed``, ``own`` errors)."""
    from msdebug_hooks.compare import compare_layers

    inputs = replayed = None
    numbers: dict = {}
    if named:
        try:
            verdict = compare_layers(a / "capture", b / "capture", replay=True).replay
            inputs = verdict.verdict if verdict is not None else "error: no replay verdict"
            if verdict is not None:
                numbers.update(input=verdict.input_error, observed=verdict.observed_error)
                details["replay (inputs)"] = verdict.describe()
        except Exception as exc:  # noqa: BLE001
            inputs = _error(exc)
    replay_file = Path(case_dir) / REPLAY_FILE
    if replay_file.exists():
        result = json.loads(replay_file.read_text())
        if result.get("status") != "ok":
            replayed = f"error: {result.get('error')}"
        elif result.get("replay") is not None:
            replayed = result["replay"]["verdict"]
            numbers["own"] = result["replay"]["own_error"]
            details["replay (port on PyTorch's inputs)"] = (f"{replayed}: {result['replay']['how']}, "
                                                           f"{_size(result['replay']['own_error'])}")
    if numbers:
        details["replay"] = numbers
    return inputs, replayed


def _size(value: Any) -> str:
    if value is None:
        return "?"
    if isinstance(value, str):  # "inf" from as_dict()
        return value
    return "0" if value == 0 else f"{value:.1e}"


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


def _replay_expected(expect: dict) -> str:
    if expect["replay"] is None:
        return "-"
    return f"`{expect['replay']}`" + (" (both)" if expect["replayed"] is not None else "")


def _replay_reported(row: dict) -> str:
    """``own`` / ``inherited`` from the inputs with their error against the output's, then the real replay's."""
    got, numbers = row["reported"], row["details"].get("replay", {})
    if got["replay"] is None and got["replayed"] is None:
        return "-"
    parts = [_cell(got["replay"])]
    if "input" in numbers:
        parts[0] += f": inputs {_size(numbers['input'])}, output {_size(numbers['observed'])}"
    if got["replayed"] is not None:
        own = f" {_size(numbers['own'])}" if "own" in numbers else ""
        parts.append(f"replayed {_cell(got['replayed'])}{own}")
    return "; ".join(parts)


def table(rows: Iterable[dict]) -> str:
    """The confusion table (markdown): case -> expected -> reported -> match, per tool, and the replay verdict of
    the named layer (from the recorded inputs; ``replayed``: the port's layer run on PyTorch's inputs)."""
    lines = ["| case | planted | compare-layers: expected | reported | compare-loss: expected | reported | "
             "compare-weights: expected | reported | replay: expected | reported | match |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        expect, got, match = row["expect"], row["reported"], row["match"]
        missed = [key for key in KEYS + REPLAY_KEYS if not match[key]]
        lines.append(" | ".join([
            f"| {row['name']}", row["planted"].replace("|", "/"), _layer_cell(expect), _layer_cell(got),
            _step_cell(expect["loss_step"]), _step_cell(got["loss_step"]),
            _cell(expect["weights"]), _cell(got["weights"]), _replay_expected(expect), _replay_reported(row),
            "yes" if not missed else "**no**: " + ", ".join(missed)]) + " |")
    return "\n".join(lines)


def _step_cell(value: Any) -> str:
    if value is None:
        return "clean"
    return f"step {value}" if isinstance(value, int) else _cell(value)


def summary(rows: list) -> str:
    """One line: how many cases and tool answers match, and how many replay verdicts (of those there are)."""
    answers = sum(len(KEYS) for _ in rows)
    right = sum(sum(row["match"][key] for key in KEYS) for row in rows)
    cases = sum(all(row["match"].values()) for row in rows)
    verdicts = [row["match"][key] for row in rows for key in REPLAY_KEYS
                if row["expect"][key] is not None or row["reported"][key] is not None]
    return (f"{cases} of {len(rows)} cases fully right; {right} of {answers} tool answers right; "
            f"{sum(verdicts)} of {len(verdicts)} replay verdicts right")


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
