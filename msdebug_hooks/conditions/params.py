"""Watchpoint parameters: what each one compares, what values it accepts, and the rules for combining them.

The facts are MindInsight's (``conditionmgr/condition_list.py``, ``validate_watch_condition_params``): a watchpoint
carries exactly one *check* parameter; ``range_start_inclusive`` / ``range_end_inclusive`` are *support* parameters
that a ``range_percentage_*`` check needs, both of them; ``atol``, ``equal_nan`` and ``epsilon`` are *hidden*
parameters with defaults. Percentages lie in [0, 100], ``abs_*``, ``rtol`` and ``*update_ratio*`` are >= 0,
``max_min_lt`` is > 0 and every value is finite. Rejecting bad values here means a watchpoint that cannot fire (or
always fires) is reported when it is written, not silently ignored during training.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping, Sequence

from msdebug_hooks.errors import ConfigError
from msdebug_hooks.validation import real_number

CHECK, SUPPORT, HIDDEN = "check", "support", "hidden"

#: value limit -> (``real_number``'s bounds, human description); every limit also requires a finite number
_LIMITS = {
    "normal": ({}, "a finite number"),
    "percentage": ({"minimum": 0.0, "maximum": 100.0}, "a number from 0 to 100"),
    "abs": ({"minimum": 0.0}, "a finite number >= 0"),
    "positive": ({"above": 0.0}, "a finite number > 0"),
}

#: the comparison a parameter name's last ``_`` suffix selects (MindSpore ``parameter_t::Evaluate``)
OPERATORS = {
    "gt": lambda stat, value: stat > value,
    "lt": lambda stat, value: stat < value,
    "ge": lambda stat, value: stat >= value,
    "le": lambda stat, value: stat <= value,
}


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of a condition, in the protocol's order."""

    name: str
    role: str = CHECK          # CHECK, SUPPORT or HIDDEN
    limit: str = "normal"      # key of _LIMITS, or "bool"
    default: float | bool | None = None
    requires: tuple[str, ...] = ()  # support parameters this check parameter needs

    @cached_property  # read per tensor and step by ``Condition.evaluate``
    def statistic(self) -> str:
        """The statistic the name selects: the name up to its last ``_`` (``abs_mean_gt`` -> ``abs_mean``)."""
        return self.name.rsplit("_", 1)[0] if "_" in self.name else ""

    @cached_property
    def operator(self) -> str | None:
        suffix = self.name.rsplit("_", 1)[-1]
        return suffix if suffix in OPERATORS else None

    @property
    def allowed(self) -> str:
        return "True or False" if self.limit == "bool" else _LIMITS[self.limit][1]


def _coerce(owner: str, spec: ParamSpec, value: Any) -> float | bool:
    field = f"{owner}.{spec.name}"
    if spec.limit == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float)) and value in (0, 1):  # the protocol carries equal_nan as a double 0/1
            return bool(value)
        raise ConfigError(field, value, spec.allowed)
    if not isinstance(value, (int, float)):
        import numpy as np
        if isinstance(value, np.generic) and np.issubdtype(type(value), np.number):
            value = value.item()       # a numpy scalar (a statistic, a value read from a file) as the number it is
    bounds, allowed = _LIMITS[spec.limit]
    return real_number(field, value, allowed=allowed, **bounds)


def validate_params(owner: str, specs: Sequence[ParamSpec], given: Mapping[str, Any]) -> dict[str, float | bool]:
    """Check ``given`` against ``specs``; return every enabled parameter (given ones plus defaults) in spec order.

    A check parameter's default applies only when no check parameter is given; hidden parameters always get theirs.
    """
    by_name = {s.name: s for s in specs}
    names = ", ".join(by_name) if by_name else "none"
    for name in given:
        if name not in by_name:
            raise ConfigError(f"{owner}.{name}", given[name], f"a parameter of {owner}: {names}")
    values = {name: _coerce(owner, by_name[name], value) for name, value in given.items()}
    checks = [s.name for s in specs if s.role == CHECK]
    given_checks = [n for n in checks if n in values]
    if not given_checks:
        defaults = [s for s in specs if s.role == CHECK and s.default is not None]
        if defaults:
            values[defaults[0].name] = defaults[0].default
            given_checks = [defaults[0].name]
        elif checks:
            raise ConfigError(owner, {}, f"exactly one check parameter: one of {', '.join(checks)}")
    if len(given_checks) > 1:
        raise ConfigError(owner, {n: values[n] for n in given_checks},
                          f"exactly one check parameter per watchpoint (one of {', '.join(checks)}); "
                          "create one watchpoint per check")
    required = set(by_name[given_checks[0]].requires) if given_checks else set()
    supports = {s.name for s in specs if s.role == SUPPORT and s.name in values}
    if supports != required:
        if required - supports:
            missing = [n for n in by_name[given_checks[0]].requires if n not in supports]
            raise ConfigError(f"{owner}.{given_checks[0]}", values[given_checks[0]],
                              f"a value together with {' and '.join(missing)}",
                              detail="the range to count in needs both bounds")
        extra = [n for n in by_name if n in supports - required]
        raise ConfigError(f"{owner}.{extra[0]}", values[extra[0]],
                          "only together with range_percentage_lt or range_percentage_gt")
    start, end = values.get("range_start_inclusive"), values.get("range_end_inclusive")
    if start is not None and end is not None and start > end:
        raise ConfigError(f"{owner}.range_start_inclusive", start,
                          f"a number <= range_end_inclusive ({end})")
    for spec in specs:
        if spec.role == HIDDEN and spec.name not in values:
            values[spec.name] = spec.default
    return {s.name: values[s.name] for s in specs if s.name in values}
