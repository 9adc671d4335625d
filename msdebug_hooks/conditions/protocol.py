"""Condition ids and names as they travel: proto enum ids, MindInsight UI ids, and ``name:param=value`` text.

Why: the online debugger receives ``WatchCondition{condition: <enum int>, params: [...]}`` in ``SetCMD``; the UI
speaks ``weight_overflow`` / ``gradient_too_large`` (a condition plus the kind of node it targets); the CLI takes
``tensor_too_large:abs_mean_gt=1e3``. All three resolve here to the same condition classes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from msdebug_hooks.conditions.conditions import CONDITION_CLASSES, Condition
from msdebug_hooks.config._common import did_you_mean
from msdebug_hooks.errors import ConfigError, ConfigErrors

#: ``WatchCondition.Condition`` enum value -> class
CONDITION_BY_ID: dict[int, type[Condition]] = {c.condition_id: c for c in CONDITION_CLASSES}
#: proto enum name ("tensor_too_large") and MindInsight API name ("TensorTooLarge") -> class
CONDITION_BY_NAME: dict[str, type[Condition]] = {
    **{c.name: c for c in CONDITION_CLASSES}, **{c.api_name: c for c in CONDITION_CLASSES},
    **{c.__name__: c for c in CONDITION_CLASSES}}


@dataclass(frozen=True)
class UiCondition:
    """A condition as the MindInsight UI offers it (``WATCHPOINT_CONDITION_MAPPING`` / ``condition_list.py``)."""

    ui_id: str
    condition_id: int
    target: str          # "weight", "gradient", "activation" or "tensor": which nodes the UI selects
    abbr: str
    ascend_only: bool = False

    @property
    def condition_class(self) -> type[Condition]:
        return CONDITION_BY_ID[self.condition_id]


UI_CONDITIONS: dict[str, UiCondition] = {u.ui_id: u for u in (
    UiCondition("weight_initialization", 14, "weight", "WI"),
    UiCondition("weight_overflow", 13, "weight", "WO"),
    UiCondition("weight_too_large", 15, "weight", "WL"),
    UiCondition("weight_too_small", 16, "weight", "WS"),
    UiCondition("weight_not_changed", 20, "weight", "WNC"),
    UiCondition("weight_change_too_large", 18, "weight", "WCL"),
    UiCondition("weight_change_too_small", 19, "weight", "WCS"),
    UiCondition("gradient_vanishing", 16, "gradient", "GV"),
    UiCondition("gradient_too_large", 15, "gradient", "GL"),
    UiCondition("gradient_exploding", 13, "gradient", "GE"),
    UiCondition("tensor_overflow", 13, "tensor", "TO"),
    UiCondition("operator_overflow", 2, "tensor", "OO", ascend_only=True),
    UiCondition("tensor_initialization", 14, "tensor", "TI"),
    UiCondition("tensor_too_large", 15, "tensor", "TL"),
    UiCondition("tensor_too_small", 16, "tensor", "TS"),
    UiCondition("tensor_all_zero", 17, "tensor", "TZ"),
    UiCondition("tensor_range", 21, "tensor", "TR"),
    UiCondition("activation_range", 21, "activation", "AR"),
)}


def condition_class(condition_id: int) -> type[Condition]:
    """The class for a ``WatchCondition.Condition`` value; ConfigError naming the supported ids otherwise."""
    try:
        return CONDITION_BY_ID[int(condition_id)]
    except (KeyError, TypeError, ValueError):
        allowed = ", ".join(f"{i} ({c.name})" for i, c in sorted(CONDITION_BY_ID.items()))
        raise ConfigError("watch_condition.condition", condition_id, f"one of {allowed}") from None


def _param_triplet(p: Any) -> tuple[str, Any, bool]:
    if isinstance(p, (tuple, list)):
        if len(p) == 2:
            return str(p[0]), p[1], False
        name, value, disabled = p
        return str(name), value, bool(disabled)
    if isinstance(p, Mapping):
        return str(p["name"]), p.get("value", 0.0), bool(p.get("disabled", False))
    return str(p.name), p.value, bool(p.disabled)  # a protobuf WatchCondition.Parameter


def from_protocol(condition_id: int, params: Sequence[Any] = ()) -> Condition:
    """A condition from a ``WatchCondition``: ``params`` as (name, value, disabled) tuples, dicts or protos.

    Disabled parameters are dropped; hidden ones (``atol``, ``equal_nan``, ``epsilon``) then take their defaults,
    which is what the client must do because MindInsight may send them disabled.
    """
    cls = condition_class(condition_id)
    given: dict[str, Any] = {}
    for p in params:
        name, value, disabled = _param_triplet(p)
        if not disabled:
            given[name] = value
    return _build(cls, given)


def _build(cls: type[Condition], given: Mapping[str, Any]) -> Condition:
    known = {s.name for s in cls.param_specs}
    for name, value in given.items():
        if name not in known:
            allowed = ", ".join(sorted(known)) if known else "none (this condition takes no parameters)"
            guess = did_you_mean(name, known)
            raise ConfigError(f"{cls.__name__}.{name}", value,
                              f"{guess} (a parameter of {cls.__name__}: {allowed})" if guess else
                              f"a parameter of {cls.__name__}: {allowed}")
    return cls(**given)


def from_ui(ui_id: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> Condition:
    """A condition from a MindInsight UI id (``weight_too_large``) and its parameters ({name: value} or list)."""
    ui = UI_CONDITIONS.get(ui_id)
    if ui is None:
        raise ConfigError("condition", ui_id, f"one of {', '.join(UI_CONDITIONS)}")
    if isinstance(params, Mapping):
        given = dict(params)
    else:
        given = {n: v for n, v, d in map(_param_triplet, params) if not d}
    return _build(ui.condition_class, given)


def parse_condition(text: str) -> Condition:
    """``"tensor_too_large:abs_mean_gt=1e3"`` -> condition. The name may be a UI id, a proto name or an API name
    (``TensorTooLarge``); parameters are ``name=value`` separated by commas; ``tensor_overflow`` needs none."""
    name, _, rest = text.strip().partition(":")
    name = name.strip()
    given: dict[str, Any] = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError("condition", text, "name:param=value[,param=value...], e.g. "
                                                  "tensor_too_large:abs_mean_gt=1e3")
        raw = raw.strip()
        if raw.lower() in ("true", "false"):
            given[key.strip()] = raw.lower() == "true"
            continue
        try:
            given[key.strip()] = float(raw)
        except ValueError:
            raise ConfigError(f"{name}.{key.strip()}", raw, "a number") from None
    if name in UI_CONDITIONS:
        cls = UI_CONDITIONS[name].condition_class
    else:
        cls = CONDITION_BY_NAME.get(name)
    if cls is None:
        names = condition_names()
        guess = did_you_mean(name, names)     # a typo gets the one name meant, not the list of all 23
        raise ConfigError("condition", name, guess or f"one of {', '.join(names)}")
    try:
        return _build(cls, given)
    except ConfigError as exc:   # name the condition as the user wrote it, not the class behind it
        errors = exc.errors if isinstance(exc, ConfigErrors) else [exc]
        renamed = [ConfigError(str(e.field).replace(cls.__name__, name), e.value,
                               str(e.allowed).replace(cls.__name__, name)) for e in errors]
        raise (ConfigErrors(renamed) if len(renamed) > 1 else renamed[0]) from None


def condition_names() -> list[str]:
    """Every name ``parse_condition`` takes in lower case, sorted: the UI ids and the protocol names (what a person
    types; the API names such as ``TensorTooLarge`` are accepted too)."""
    return sorted(set(UI_CONDITIONS) | {c.name for c in CONDITION_CLASSES})


def should_evaluate(condition: Condition, *, initial_suspension: bool, step_end: bool) -> bool:
    """When the online debugger checks a condition (``AddWatchPointsToCheck``): ``tensor_initialization`` only
    during the initial suspension and every other one only after it; change conditions only at step end."""
    if condition.initial_suspension_only:
        return initial_suspension
    if initial_suspension:
        return False
    return step_end or not condition.needs_previous
