"""Names across frameworks: the built-in MindSpore <-> PyTorch naming map and the user's mapping file.

Both sides are brought to one canonical (PyTorch-style) name before they are matched. Layer names are the same on
both sides when the port keeps the attribute names (``self.conv1`` is ``conv1`` in a ``Cell`` and in a ``Module``;
``SequentialCell`` and ``Sequential`` both number their children ``0``, ``1``, ...). Parameter names differ in their
last part only:

============================  =================================  ==========================================
layer                         MindSpore                          PyTorch
============================  =================================  ==========================================
BatchNorm1d/2d/3d             gamma, beta, moving_mean,          weight, bias, running_mean, running_var
                              moving_variance                    (num_batches_tracked: no MindSpore peer)
LayerNorm, GroupNorm          gamma, beta                        weight, bias
Dense / Linear                weight, bias ([out, in] on both)   weight, bias
Conv1d/2d/3d                  weight, bias ([out, in/g, k...])   weight, bias
Embedding                     embedding_table                    weight
============================  =================================  ==========================================

A mapping file overrides the map: each entry names a tensor of the first side (A) and the one of the second side
(B) it corresponds to. Either a JSON object ``{"a_name": "b_name", ...}`` or plain text, one pair a line,
``a_name b_name`` (also ``a_name = b_name`` or ``a_name -> b_name``); ``#`` starts a comment.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Iterable, Mapping, Optional, Union

from msdebug_hooks.errors import ConfigError

MINDSPORE = "mindspore"
PYTORCH = "pytorch"

#: last name part in MindSpore -> in PyTorch
MINDSPORE_TO_PYTORCH_SUFFIX = {
    "gamma": "weight",
    "beta": "bias",
    "moving_mean": "running_mean",
    "moving_variance": "running_var",
    "embedding_table": "weight",
}

#: PyTorch state-dict entries with no MindSpore counterpart (not reported as extra)
PYTORCH_ONLY_SUFFIXES = ("num_batches_tracked",)

#: MindSpore checkpoint entries that belong to the optimizer or the training loop, not to the network
_MINDSPORE_TRAINING_STATE = re.compile(
    r"^(moments|accum|moment1|moment2|adam_m|adam_v|vhat|linear|mean_grad|mean_square|"
    r"global_step|learning_rate|momentum|beta1_power|beta2_power|weight_decay|current_iterator_step|"
    r"last_overflow_iterator_step|epoch_num|step_num|loss_scale|scale_sense)(\.|$)")

PathLike = Union[str, "os.PathLike[str]"]


def canonical_name(name: str, framework: str) -> str:
    """The PyTorch-style name of ``name`` (MindSpore's last part translated through the built-in map)."""
    if framework != MINDSPORE:
        return name
    head, dot, last = name.rpartition(".")
    last = MINDSPORE_TO_PYTORCH_SUFFIX.get(last, last)
    return f"{head}{dot}{last}"


def is_framework_bookkeeping(name: str, framework: str) -> bool:
    """True for checkpoint entries that are not network weights (optimizer state, PyTorch's batch counters)."""
    if framework == MINDSPORE:
        return bool(_MINDSPORE_TRAINING_STATE.match(name))
    return name.rpartition(".")[2] in PYTORCH_ONLY_SUFFIXES


def convert_torch_state(torch_state: Mapping[str, object], mindspore_names: Iterable[str],
                        mapping: Optional[Mapping[str, str]] = None) -> dict:
    """``{mindspore_name: value}`` for every name in ``mindspore_names``, taken from a PyTorch state dict through
    the naming map (``mapping``: PyTorch name -> MindSpore name, overriding it).

    Raises ``ConfigError`` naming the MindSpore parameters that found no PyTorch value.
    """
    overrides = {ms_name: torch_name for torch_name, ms_name in (mapping or {}).items()}
    converted, missing = {}, []
    for ms_name in mindspore_names:
        torch_name = overrides.get(ms_name, canonical_name(ms_name, MINDSPORE))
        if torch_name in torch_state:
            converted[ms_name] = torch_state[torch_name]
        else:
            missing.append(ms_name)
    if missing:
        raise ConfigError("torch_state", sorted(torch_state)[:8], "a state dict holding every MindSpore parameter",
                          detail=f"no PyTorch value for {', '.join(missing)}")
    return converted


def load_name_mapping(path: PathLike) -> dict[str, str]:
    """Read a mapping file (JSON object or ``a b`` lines); ``ConfigError`` naming the file and line when bad."""
    target = Path(path).expanduser()
    try:
        text = target.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"mapping={str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("mapping", str(path), "a readable UTF-8 mapping file", detail=str(exc)) from None
    if text.lstrip()[:1] in ("{", "["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError("mapping", str(path), "a JSON object of name -> name",
                              detail=f"line {exc.lineno}: {exc.msg}") from None
        if not isinstance(data, dict):
            raise ConfigError("mapping", str(path), "a JSON object of name -> name",
                              detail=f"got a {type(data).__name__}")
        bad = [key for key, value in data.items() if not isinstance(value, str) or not key or not value]
        if bad:
            raise ConfigError("mapping", str(path), "a JSON object whose values are non-empty names",
                              detail=f"bad entry {bad[0]!r}")
        return dict(data)
    mapping: dict[str, str] = {}
    for line_no, line in enumerate(text.splitlines(), start=1):
        content = line.split("#", 1)[0].strip()
        if not content:
            continue
        parts = [part for part in re.split(r"\s*(?:->|=|\s)\s*", content) if part]
        if len(parts) != 2:
            raise ConfigError("mapping", f"{path}:{line_no}", "one 'a_name b_name' pair a line "
                              "(or 'a_name = b_name', 'a_name -> b_name')", detail=f"got {content!r}")
        if parts[0] in mapping:
            raise ConfigError("mapping", f"{path}:{line_no}", "each name once", detail=f"{parts[0]!r} again")
        mapping[parts[0]] = parts[1]
    return mapping
