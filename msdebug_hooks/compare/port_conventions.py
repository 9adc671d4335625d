"""Settings a port must translate, read from both models before anything runs: the layout table's conventions, checked.

The layout table (:mod:`msdebug_hooks.compare.layouts`) writes down where MindSpore and PyTorch mean different
things by the same argument or default differently. For each pair of layers (MindSpore cell, PyTorch module, paired
by the weight copy's module map or by name) these are compared:

* **BatchNorm momentum**: MindSpore's ``momentum`` argument weighs the running value, PyTorch's the new batch; the
  cell keeps ``1 - momentum`` as ``cell.momentum`` (MindSpore 2.10, ``nn/layer/normalization.py``), which must
  equal PyTorch's. PyTorch's ``momentum=None`` (a cumulative average) has no MindSpore counterpart.
* **epsilon** of BatchNorm, LayerNorm (MindSpore's default 1e-7, PyTorch's 1e-5) and GroupNorm;
* **GELU** ``approximate`` (MindSpore's default is the tanh form, PyTorch's the exact erf form);
* **LeakyReLU** slope (MindSpore's ``alpha`` defaults to 0.2, PyTorch's ``negative_slope`` to 0.01);
* **Dropout** ``p``;
* the **layer type** itself, when both classes are in the table and are different layers (a ReLU ported as GELU).

A finding names the MindSpore layer, both values and the argument that fixes it. Nothing here runs a model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

from msdebug_hooks.compare.layouts import layout_of


@dataclass(frozen=True)
class ConventionFinding:
    """One setting that differs between a MindSpore layer and its PyTorch module."""

    layer: str          # MindSpore layer name
    torch_layer: str    # PyTorch module name
    setting: str        # "momentum", "eps", "approximate", "negative_slope", "p", "type"
    value_mindspore: Any
    value_pytorch: Any
    message: str

    def as_dict(self) -> dict:
        return {"layer": self.layer, "torch_layer": self.torch_layer, "setting": self.setting,
                "mindspore": _plain(self.value_mindspore), "pytorch": _plain(self.value_pytorch),
                "message": self.message}


def _plain(value: Any) -> Any:
    return value if isinstance(value, (int, float, str, bool, type(None))) else str(value)


def _close(a: Optional[float], b: Optional[float]) -> bool:
    return a is not None and b is not None and math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-12)


def _bn_cell(cell: Any) -> Any:
    return getattr(cell, "bn2d", cell)  # MindSpore 2.10's BatchNorm3d holds a BatchNorm2d named bn2d


def _batchnorm(name: str, tname: str, cell: Any, module: Any) -> list:
    found = []
    inner = _bn_cell(cell)
    new_weight = getattr(inner, "momentum", None)  # 1 - the momentum argument (MindSpore 2.10)
    torch_momentum = getattr(module, "momentum", None)
    if new_weight is not None and torch_momentum is None:
        found.append(ConventionFinding(name, tname, "momentum", 1 - new_weight, None,
                                       f"{name}: PyTorch's momentum=None (a cumulative average of every batch) has "
                                       f"no MindSpore counterpart; running statistics will differ"))
    elif new_weight is not None and not _close(new_weight, torch_momentum):
        argument = round(1 - new_weight, 10)
        found.append(ConventionFinding(
            name, tname, "momentum", argument, torch_momentum,
            f"{name}: BatchNorm momentum={argument:g} in MindSpore weighs the running value, so it is PyTorch's "
            f"{1 - argument:g}; the reference has momentum={torch_momentum:g}: pass momentum="
            f"{round(1 - torch_momentum, 10):g} (1 - PyTorch's)"))
    found += _eps(name, tname, getattr(inner, "eps", None), getattr(module, "eps", None), "eps")
    return found


def _eps(name: str, tname: str, ms_value: Optional[float], torch_value: Optional[float], argument: str) -> list:
    if ms_value is None or torch_value is None or _close(ms_value, torch_value):
        return []
    return [ConventionFinding(name, tname, "eps", ms_value, torch_value,
                              f"{name}: epsilon {ms_value:g} in MindSpore, {torch_value:g} in PyTorch: pass "
                              f"{argument}={torch_value:g}")]


def _layernorm(name: str, tname: str, cell: Any, module: Any) -> list:
    return _eps(name, tname, getattr(cell, "epsilon", None), getattr(module, "eps", None), "epsilon")


def _groupnorm(name: str, tname: str, cell: Any, module: Any) -> list:
    return _eps(name, tname, getattr(cell, "eps", None), getattr(module, "eps", None), "eps")


def _gelu(name: str, tname: str, cell: Any, module: Any) -> list:
    ms_form, torch_form = getattr(cell, "approximate", None), getattr(module, "approximate", None)
    if ms_form is None or torch_form is None or ms_form == torch_form:
        return []
    fix = "approximate=False" if torch_form == "none" else "approximate=True"
    return [ConventionFinding(name, tname, "approximate", ms_form, torch_form,
                              f"{name}: GELU computes the {ms_form!r} form in MindSpore, {torch_form!r} in PyTorch: "
                              f"pass {fix}")]


def _leaky_relu(name: str, tname: str, cell: Any, module: Any) -> list:
    alpha, slope = getattr(cell, "alpha", None), getattr(module, "negative_slope", None)
    if alpha is None or slope is None or _close(alpha, slope):
        return []
    return [ConventionFinding(name, tname, "negative_slope", alpha, slope,
                              f"{name}: LeakyReLU slope {alpha:g} in MindSpore (alpha), {slope:g} in PyTorch "
                              f"(negative_slope): pass alpha={slope:g}")]


def dropout_p(layer: Any) -> Optional[float]:
    """A dropout layer's drop probability, MindSpore (``p``, or ``1 - keep_prob``) or PyTorch (``p``)."""
    p = getattr(layer, "p", None)
    if p is None and getattr(layer, "keep_prob", None) is not None:
        p = 1.0 - float(layer.keep_prob)
    return None if p is None else float(p)


def _dropout(name: str, tname: str, cell: Any, module: Any) -> list:
    p_ms, p_torch = dropout_p(cell), dropout_p(module)
    if p_ms is None or p_torch is None or _close(p_ms, p_torch):
        return []
    return [ConventionFinding(name, tname, "p", p_ms, p_torch,
                              f"{name}: Dropout p={p_ms:g} in MindSpore, {p_torch:g} in PyTorch: pass p={p_torch:g}")]


_CHECKS: dict = {"BatchNorm1d/2d": _batchnorm, "BatchNorm3d": _batchnorm, "LayerNorm": _layernorm,
                 "GroupNorm": _groupnorm, "GELU": _gelu, "LeakyReLU": _leaky_relu}


def _check_for(cell: Any, module: Any) -> Optional[Callable]:
    if type(cell).__name__ == "Dropout" and type(module).__name__ == "Dropout":
        return _dropout
    layout = layout_of("mindspore", type(cell).__name__)
    if layout is None or layout is not layout_of("pytorch", type(module).__name__):
        return None
    return _CHECKS.get(layout.layer)


def check_conventions(cell: Any, torch_module: Any, torch_name: Callable[[str], str]) -> list:
    """Every convention finding between ``cell``'s layers and ``torch_module``'s (``torch_name``: MindSpore layer
    name -> PyTorch module name, e.g. ``WeightCopy.torch_name``), in MindSpore's layer order."""
    modules = dict(torch_module.named_modules())
    findings: list = []
    for name, cell_layer in cell.cells_and_names():
        if not name or not type(cell_layer).__module__.startswith("mindspore.nn"):
            continue
        tname = torch_name(name)
        module = modules.get(tname)
        if module is None or not type(module).__module__.startswith("torch.nn"):
            continue
        layout_ms = layout_of("mindspore", type(cell_layer).__name__)
        layout_torch = layout_of("pytorch", type(module).__name__)
        if layout_ms is not None and layout_torch is not None and layout_ms is not layout_torch:
            findings.append(ConventionFinding(name, tname, "type", type(cell_layer).__name__, type(module).__name__,
                                              f"{name}: a {type(cell_layer).__name__} in MindSpore where PyTorch has "
                                              f"a {type(module).__name__} ({tname})"))
            continue
        check = _check_for(cell_layer, module)
        if check is not None:
            findings += check(name, tname, cell_layer, module)
    return findings
