"""An :class:`Origin` from what the rerun's probe saw in PyNative mode: a traced line, the batch, or gradients."""
from __future__ import annotations

from typing import Optional

from msdebug_hooks.nan.result import Origin

__all__ = ["origin_from_probe"]


def origin_from_probe(probe: dict, rank: int) -> Optional[Origin]:
    found = probe.get("found")
    if not found:
        return None
    step = int(found.get("step", 0))
    kind = found.get("kind")
    if kind == "data":
        return Origin("data", step, rank=rank, source="trace", output={"text": found.get("stats", "")},
                      detail=f"column {found['column']} of the batch holds {found['value']} at index "
                             f"{found['index']} (batch element {found['index'][0] if found['index'] else 0})",
                      hint="the input pipeline produced a non-finite value: check the data source and its "
                           "preprocessing (a division by a zero std, a log of 0, a corrupt record)")
    if kind == "gradient":
        names = found.get("parameters", [])
        return Origin("gradient", step, phase="backward", rank=rank, source="trace", cell=_cell(names),
                      detail=f"the forward pass was finite and the update made these weights non-finite: "
                             f"{', '.join(names[::-1][:6])} (the backward pass reaches the last first)",
                      hint="a gradient overflowed or divided by zero in the backward pass; under a loss scale lower "
                           "the scale or skip steps whose gradients are not finite (DynamicLossScaler + all_finite)")
    operator = found.get("operator") or ""
    names = found.get("parameters") or []
    if found.get("backward") or (names and not operator):
        return Origin("gradient", step, phase="backward", rank=rank, source="trace", cell=_cell(names),
                      file=found.get("file", ""), line=found.get("line"), code=found.get("code", ""),
                      detail="the forward pass was finite; the backward pass run by this line made non-finite "
                             "gradients" + (f" (weights made non-finite by the update: "
                                            f"{', '.join(names[::-1][:6])}; the backward pass reaches the last "
                                            f"first)" if names else ""),
                      hint="a gradient overflowed or divided by zero in the backward pass; under a loss scale lower "
                           "the scale or skip steps whose gradients are not finite (DynamicLossScaler + all_finite); "
                           "train the step under @mindspore.jit to have the backward operator named")
    detail = f"weights made non-finite by this step's update: {', '.join(names[::-1][:6])}" if names else ""
    phase = "forward"
    return Origin("operator", step, operator=operator or f"(the call on this line, in {found.get('function')})",
                  phase=phase, cell=found.get("cell", ""), file=found.get("file", ""), line=found.get("line"),
                  code=found.get("code", ""), inputs=found.get("inputs", []), output=found.get("output"),
                  hint=found.get("hint", ""), rank=rank, source="trace", detail=detail)


def _cell(names: list) -> str:
    """The cell of the parameter the backward pass reaches first (the last one the optimizer holds)."""
    if not names:
        return ""
    return names[-1].rsplit(".", 1)[0]
