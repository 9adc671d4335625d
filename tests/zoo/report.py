"""Judge each zoo case's report against what it expects (``zoo.cases``), and the confusion table: case -> expected ->
reported -> right, and the share right per kind of case.

How a case is judged:

* a noise-only pair (``aligned``, or ``published`` without a real difference): right when the check exits 0;
* a port that keeps real differences: right when it exits 1, every difference is named -- the first divergence is
  one of its layers (or inside one: a block whose own code differs), or a layer the report lists as diverging on its
  own after the first divergence (replayed on the reference's inputs) is, or every one of its layers carries a
  ``SETTING`` -- and nothing else is: no setting on a layer outside the differences, no first divergence and no
  later own divergence outside them;
* a planted bug: right when the first divergence is the plant's layer with the plant's kind and replay verdict, and
  no setting is on another layer.

The text, JSON and HTML reports must agree (same verdict and headline) for a case to be right.
"""
from __future__ import annotations

from typing import Iterable


def _inside(marked: str, layers: Iterable[str]) -> bool:
    return any(marked == layer or marked.startswith(layer + ".") for layer in layers)


def _expected(case) -> str:
    if case.expect_ok:
        return "exit 0"
    plant = case.plant_object()
    if plant is not None:
        return f"{plant.layer} ({plant.kind}, replay {plant.replay or '-'})"
    return "exit 1, names " + ", ".join(case.kept)


def _reported(result: dict) -> str:
    code = result.get("exit")
    if code is None:
        return "not run: " + str(result.get("error", ""))[:80].replace("|", "/")
    if code == 2:
        return "exit 2 ConfigError: " + str(result.get("error", ""))[:90].replace("|", "/") + "..."
    if code == 0:
        text = "exit 0"
    elif result.get("marked"):
        text = f"{result['marked']} ({result.get('kind')}, replay {result.get('replay') or '-'})"
    else:
        text = "exit 1: " + str(result.get("headline", ""))[:70].replace("|", "/")
    later = result.get("later") or []
    if later:
        text += "; also own: " + ", ".join(later[:3]) + (f" and {len(later) - 3} more" if len(later) > 3 else "")
    settings = result.get("settings") or []
    if settings:
        layers = sorted({layer for layer, _ in settings})
        kinds = sorted({setting for _, setting in settings})
        text += f"; SETTING {'/'.join(kinds)} on {len(layers)} layer(s)"
    if not result.get("agree", True):
        text += "; **text/JSON/HTML disagree**"
    return text


def judge(case, result: dict) -> dict:
    """The row of ``case``: expected, reported, and whether (and why not) it is right."""
    why = []
    code = result.get("exit")
    settings_layers = {layer for layer, _ in result.get("settings") or []}
    marked = result.get("marked")
    if code is None or code == 2:
        why.append("no answer" if code is None else "ConfigError")
    elif case.expect_ok:
        if code != 0:
            why.append("false alarm")
    elif case.plant is not None:
        plant = case.plant_object()
        if code != 1 or marked != plant.layer:
            why.append("wrong module")
        elif result.get("kind") != plant.kind:
            why.append("wrong kind")
        if result.get("replay") != plant.replay:
            why.append("wrong replay")
        if settings_layers - {plant.layer}:
            why.append("setting elsewhere")
    else:
        kept = result.get("kept_layers") or {}
        union = {layer for layers in kept.values() for layer in layers}
        if code != 1:
            why.append("missed")
        later = result.get("later") or []
        unnamed = [key for key, layers in kept.items()
                   if not layers or not (any(_inside(name, layers) for name in [marked] * bool(marked) + later)
                                         or set(layers) <= settings_layers)]
        if unnamed:
            why.append("not named: " + ", ".join(unnamed))
        if marked and not _inside(marked, union) or any(not _inside(name, union) for name in later):
            why.append("divergence elsewhere")
        if settings_layers - union:
            why.append("setting elsewhere")
    if code in (0, 1) and not result.get("agree", False):
        why.append("reports disagree")
    return {"name": case.name, "variant": case.variant, "planted": case.planted, "expected": _expected(case),
            "reported": _reported(result), "right": not why, "why": why, "seconds": result.get("seconds")}


def table(rows: list) -> str:
    lines = ["| case | planted | expected | reported | right | s |", "|---|---|---|---|---|---|"]
    for row in rows:
        right = "yes" if row["right"] else "**no**: " + "; ".join(row["why"])
        seconds = "" if row["seconds"] is None else f"{row['seconds']:.0f}"
        lines.append(f"| {row['name']} | {row['planted'].replace('|', '/')} | {row['expected']} | {row['reported']} "
                     f"| {right} | {seconds} |")
    return "\n".join(lines)


def summary(rows: list) -> str:
    """The share right per kind of case, and the acceptance's three numbers."""
    def share(selected: list) -> str:
        right = sum(row["right"] for row in selected)
        return f"{right} of {len(selected)} ({100.0 * right / len(selected):.0f} %)" if selected else "none"

    noise = [row for row in rows if row["expected"] == "exit 0"]
    published = [row for row in rows if row["variant"] in ("published", "only") and row["expected"] != "exit 0"]
    plants = [row for row in rows if row["variant"] == "plant"]
    modules = [row for row in plants if "wrong module" not in row["why"] and "ConfigError" not in row["why"]
               and "no answer" not in row["why"]]
    alarms = sum("false alarm" in row["why"] for row in noise)
    return (f"right with default options: {share(rows)} of all cases; noise-only pairs read clean: {share(noise)} "
            f"(false alarms: {alarms}); ports keeping real differences named: "
            f"{share(published)}; planted bugs at the right module with the right kind and replay: {share(plants)} "
            f"(at the right module: {len(modules)} of {len(plants)})")
