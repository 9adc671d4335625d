"""What ``first-nan`` found: the origin (operator, step, line, inputs, hint) and how it was found."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

__all__ = ["Origin", "FirstNanResult"]


@dataclass
class Origin:
    """The producer of the first NaN/Inf.

    ``kind``: ``"operator"`` (an operator of the forward or backward pass or the update), ``"data"`` (the batch of
    the step already held it), ``"gradient"`` (PyNative: a gradient the backward pass made from a finite forward
    pass; the cell is named, MindSpore runs the backward pass in C++ where no Python line is) or ``"before"`` (the
    values were non-finite before the steps looked at). ``phase``: forward / backward / update.
    """

    kind: str
    step: int
    operator: str = ""
    phase: str = ""
    node: str = ""
    cell: str = ""
    file: str = ""
    line: Optional[int] = None
    code: str = ""
    inputs: list = field(default_factory=list)      # TensorStats.as_dict() of each input
    output: Optional[dict] = None
    hint: str = ""
    rank: int = 0
    detail: str = ""                               # data: which batch element; gradient: which parameter
    source: str = ""                               # "dump" or "trace"

    def lines(self) -> list[str]:
        where = f"{self.file}:{self.line}" if self.file else "(no source line)"
        if self.kind == "data":
            head = [f"origin: the data of step {self.step} (rank {self.rank}): {self.detail}"]
        elif self.kind == "before":
            head = [f"origin: the values were already non-finite when step {self.step} began (rank {self.rank}): "
                    f"{self.detail}"]
        elif self.kind == "gradient":
            head = [f"origin: step {self.step}, backward pass (rank {self.rank}): {self.detail}",
                    f"  cell: {self.cell or '?'}", f"  line: {where}" + (f"   {self.code}" if self.code else "")]
        else:
            head = [f"origin: step {self.step}, {self.phase or 'forward'} pass, operator {self.operator} (rank "
                    f"{self.rank})",
                    f"  line: {where}" + (f"   {self.code}" if self.code else "")]
            if self.cell:
                head.append(f"  cell: {self.cell}")
            if self.node:
                head.append(f"  node: {self.node}")
        for number, item in enumerate(self.inputs):
            head.append(f"  input {number}: {item['text'] if isinstance(item, dict) and 'text' in item else item}")
        if self.output:
            label = "values" if self.kind == "data" else "output"
            head.append(f"  {label}: {self.output.get('text', self.output)}")
        if self.hint:
            head.append(f"  hint: {self.hint}")
        return head

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class FirstNanResult:
    """``exit_code`` 1: an origin was found (``origin``); 0: the training had no NaN/Inf in ``steps_checked``."""

    command: str
    exit_code: int = 0
    first_bad_step: Optional[int] = None
    loss_step: Optional[int] = None                # set when the check saw it only later (in the loss or weights)
    rank: Optional[int] = None
    steps_checked: int = 0
    origin: Optional[Origin] = None
    notes: list = field(default_factory=list)
    seconds: dict = field(default_factory=dict)    # "check" and "rerun": wall time of each run
    workdir: str = ""
    kept: bool = False

    def lines(self) -> list[str]:
        if self.first_bad_step is None:
            out = [f"no NaN/Inf in the {self.steps_checked} step(s) checked (loss, or weights where no loss is seen)"]
        else:
            later = f"; the check run saw it at step {self.loss_step}" if self.loss_step else ""
            out = [f"first non-finite step: {self.first_bad_step} (rank {self.rank}{later})"]
            if self.origin is not None:
                out.extend(self.origin.lines())
        out.extend(f"note: {note}" for note in self.notes)
        if self.kept:
            out.append(f"runs, logs and dumps kept in {self.workdir}")
        return out

    def as_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items() if k != "origin"}
        data["origin"] = None if self.origin is None else self.origin.as_dict()
        return data
