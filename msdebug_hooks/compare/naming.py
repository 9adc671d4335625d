"""Names across frameworks: the built-in MindSpore <-> PyTorch naming map and the user's mapping file.

Both sides are brought to one canonical (PyTorch-style) name before they are matched. Layer names are the same on
both sides when the port keeps the attribute names (``self.conv1`` is ``conv1`` in a ``Cell`` and in a ``Module``;
``SequentialCell`` and ``Sequential`` both number their children ``0``, ``1``, ...). Parameter names differ where
the layout table of :mod:`msdebug_hooks.compare.layouts` says so (BatchNorm's ``gamma``/``beta``/``moving_mean``/
``moving_variance``, Embedding's ``embedding_table``, PReLU's ``w``, BatchNorm3d's inner ``bn2d``): the one source
of these names, the shapes and the layout transforms (``docs/compare-pytorch.md`` shows it as a table).

A mapping file overrides the map: each entry names a tensor of the first side (A) and the one of the second side
(B) it corresponds to. Either a JSON object ``{"a_name": "b_name", ...}`` or plain text, one pair a line,
``a_name b_name`` (also ``a_name = b_name`` or ``a_name -> b_name``); ``#`` starts a comment.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Union

from msdebug_hooks.compare.layouts import mindspore_to_pytorch_suffix, pytorch_style_name
from msdebug_hooks.compare.name_rules import STAR, NameMapping, NameRule
from msdebug_hooks.errors import ConfigError

MINDSPORE = "mindspore"
PYTORCH = "pytorch"

#: last name part in MindSpore -> in PyTorch, from the layout table
MINDSPORE_TO_PYTORCH_SUFFIX = mindspore_to_pytorch_suffix()

#: PyTorch state-dict entries with no MindSpore counterpart (not reported as extra)
PYTORCH_ONLY_SUFFIXES = ("num_batches_tracked",)

#: MindSpore checkpoint entries that belong to the optimizer or the training loop, not to the network
_MINDSPORE_TRAINING_STATE = re.compile(
    r"^(moments|accum|moment1|moment2|adam_m|adam_v|vhat|linear|mean_grad|mean_square|"
    r"global_step|learning_rate|momentum|beta1_power|beta2_power|weight_decay|current_iterator_step|"
    r"last_overflow_iterator_step|epoch_num|step_num|loss_scale|scale_sense)(\.|$)")

PathLike = Union[str, "os.PathLike[str]"]


def canonical_name(name: str, framework: str) -> str:
    """The PyTorch-style name of ``name``: a MindSpore name through the layout table
    (:func:`msdebug_hooks.compare.layouts.pytorch_style_name`), any other as given."""
    if framework != MINDSPORE:
        return name
    return pytorch_style_name(name)


def name_candidates(name: str, framework: str) -> tuple:
    """The names ``name`` may have on the PyTorch side, most likely first: as written (a port that names a custom
    parameter ``w`` or ``gamma`` alike in both frameworks), then :func:`canonical_name`. A matcher that tries them in
    this order pairs both a custom ``w`` and PReLU's ``w`` (PyTorch's ``weight``) right."""
    canonical = canonical_name(name, framework)
    return (name,) if canonical == name else (name, canonical)


def is_framework_bookkeeping(name: str, framework: str) -> bool:
    """True for checkpoint entries that are not network weights (optimizer state, PyTorch's batch counters)."""
    if framework == MINDSPORE:
        return bool(_MINDSPORE_TRAINING_STATE.match(name))
    return name.rpartition(".")[2] in PYTORCH_ONLY_SUFFIXES


def convert_torch_state(torch_state: Mapping[str, object], mindspore_names: Union[Iterable[str], Mapping, Any],
                        mapping: Optional[Mapping[str, str]] = None, *, unit_axes: bool = False) -> dict:
    """``{mindspore_name: value}`` for every MindSpore parameter, taken from a PyTorch state dict through the layout
    table (``mapping``: PyTorch name -> MindSpore name, overriding it).

    ``mindspore_names``: the MindSpore parameter names (values returned as given), ``{name: shape}`` or the
    parameters (values as numpy arrays in MindSpore's layout: a Conv1d weight gains its unit axis), or the network
    itself (also each layer's exact rule and defaults; values as ``mindspore.Parameter``, so the result goes
    straight into ``mindspore.load_param_into_net(net, ...)``). Raises ``ConfigError`` naming the MindSpore
    parameters that found no PyTorch value and the values no layout of the table fits. ``unit_axes=True`` also
    reshapes a value whose shape differs only by size-1 axes (a layer scale ``[C]`` from ``[C, 1, 1]``): no layout
    of the table, so it is off unless the caller reports those pairs (the port check does).
    """
    from msdebug_hooks.compare.state_conversion import convert_torch_state as convert

    return convert(torch_state, mindspore_names, mapping, unit_axes=unit_axes)


def load_name_mapping(path: PathLike) -> NameMapping:
    """Read a mapping file (JSON object or ``a b`` lines) into a ``NameMapping``: exact pairs, and rules where a side
    holds a ``*`` (``layers.* -> blocks.*``, see :mod:`.name_rules`). ``ConfigError`` naming the file and line when
    bad."""
    target = Path(path).expanduser()
    try:
        text = target.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"mapping={str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("mapping", str(path), "a readable UTF-8 mapping file", detail=str(exc)) from None
    if text.lstrip()[:1] in ("{", "["):
        entries = _json_entries(text, path)
    else:
        entries = []
        for line_no, line in enumerate(text.splitlines(), start=1):
            content = line.split("#", 1)[0].strip()
            if not content:
                continue
            parts = [part for part in re.split(r"\s*(?:->|=|\s)\s*", content) if part]
            if len(parts) != 2:
                raise ConfigError("mapping", f"{path}:{line_no}", "one 'a_name b_name' pair a line "
                                  "(or 'a_name = b_name', 'a_name -> b_name')", detail=f"got {content!r}")
            entries.append((line_no, parts[0], parts[1]))
    pairs: dict[str, str] = {}
    rules: list = []
    for line_no, name_a, name_b in entries:
        where = f"{path}:{line_no}"
        if STAR not in name_a and STAR not in name_b:
            if name_a in pairs:
                raise ConfigError("mapping", where, "each name once", detail=f"{name_a!r} again")
            pairs[name_a] = name_b
            continue
        try:
            rule = NameRule(name_a, name_b, where=where)
        except ValueError as exc:
            raise ConfigError("mapping", where, "a rule 'a.*.b -> c.*.d': '*' for one or more whole name parts, "
                              "as many on both sides", detail=str(exc)) from None
        if any(earlier.pattern == rule.pattern for earlier in rules):
            raise ConfigError("mapping", where, "each rule pattern once (the first one would always win)",
                              detail=f"{name_a!r} again")
        rules.append(rule)
    return NameMapping(pairs, rules)


def _json_entries(text: str, path: PathLike) -> list:
    """``[(line, a, b)]`` of a JSON mapping, in file order; the line is where the key is first written."""
    def pairs_in_order(items: list) -> list:
        return items

    try:
        data = json.loads(text, object_pairs_hook=pairs_in_order)
    except json.JSONDecodeError as exc:
        raise ConfigError("mapping", str(path), "a JSON object of name -> name",
                          detail=f"line {exc.lineno}: {exc.msg}") from None
    if not isinstance(data, list) or any(not isinstance(item, tuple) for item in data):
        raise ConfigError("mapping", str(path), "a JSON object of name -> name",
                          detail=f"got a {'list' if isinstance(data, list) else type(data).__name__}")
    entries = []
    for key, value in data:
        line_no = text.count("\n", 0, max(text.find(json.dumps(key)), 0)) + 1
        if not isinstance(value, str) or not key or not value:
            raise ConfigError("mapping", f"{path}:{line_no}", "a JSON object whose values are non-empty names",
                              detail=f"bad entry {key!r}")
        entries.append((line_no, key, value))
    return entries
