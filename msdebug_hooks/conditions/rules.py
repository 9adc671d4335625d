"""How a condition is judged over a batch, as data: ``JudgingRule`` and its ``Comparison`` rows, and their tables
for the compiled pre-judging kernel.

Why apart from ``judging``: a rule is worked out once per condition list (``judging.judging_rules``) and then read
by two judges, the numpy masks (``judging``) and the compiled marks of a prepared layout (``layout``); neither the
rule nor its tables need the condition classes.
"""
from __future__ import annotations

from types import ModuleType
from typing import NamedTuple, Sequence

import numpy as np

from msdebug_hooks.conditions.totals import Bounds

#: rule kinds: every tensor evaluated (a subclass with its own ``evaluate``), never reportable, NaN/Inf hits,
#: parameter comparisons
ALL, NEVER, OVERFLOW, COMPARE = "all", "never", "overflow", "compare"


class Comparison(NamedTuple):
    """One parameter of a condition: ``reader`` names the ``judging.StatisticArrays`` method that gives the
    statistic (None: the share of elements in ``bounds``), compared by ``operator`` ("gt", "lt", "ge", "le") with
    ``limit``."""

    reader: str | None
    bounds: Bounds | None
    operator: str
    limit: float | bool


class JudgingRule(NamedTuple):
    """How one condition is judged: its kind, and for ``COMPARE`` its allclose tolerance (or None), its
    comparisons, and whether a missing previous value is an error."""

    kind: str
    tolerance: Bounds | None = None
    comparisons: tuple[Comparison, ...] = ()
    needs_previous: bool = False


class RuleTables(NamedTuple):
    """Rules as the compiled pre-judging kernel (``_step_kernels.mark_reportable``) reads them: per condition
    (kind, allclose column or -1, needs previous, first and end comparison row); per comparison (statistic, range
    column or -1, operator); the comparisons' limits."""

    conditions: np.ndarray
    comparisons: np.ndarray
    limits: np.ndarray


def compiled_rules(k: ModuleType, rules: Sequence[JudgingRule], ranges: tuple[Bounds, ...],
                   tolerances: tuple[Bounds, ...]) -> RuleTables:
    """``rules`` as the tables of ``k.mark_reportable``; a range or tolerance is named by its column in the
    request's ``ranges`` / ``tolerances``."""
    kinds = {ALL: k.JUDGE_ALL, NEVER: k.JUDGE_NEVER, OVERFLOW: k.JUDGE_OVERFLOW, COMPARE: k.JUDGE_COMPARE}
    statistics = {"maximum": k.STAT_MAX, "minimum": k.STAT_MIN, "mean": k.STAT_MEAN, "sd": k.STAT_SD,
                  "abs_mean": k.STAT_ABS_MEAN, "zero_percentage": k.STAT_ZERO_PERCENTAGE,
                  "max_min": k.STAT_MAX_MIN, "update_ratio": k.STAT_UPDATE_RATIO}
    operators = {"gt": k.OP_GT, "lt": k.OP_LT, "ge": k.OP_GE, "le": k.OP_LE}
    conditions, comparisons, limits = [], [], []
    for rule in rules:
        if rule.kind != COMPARE:
            conditions.append((kinds[rule.kind], -1, 0, 0, 0))
            continue
        first = len(comparisons)
        for compare in rule.comparisons:
            if compare.reader is None:
                comparisons.append((k.STAT_RANGE, ranges.index(compare.bounds), operators[compare.operator]))
            else:
                comparisons.append((statistics[compare.reader], -1, operators[compare.operator]))
            limits.append(float(compare.limit))
        column = -1 if rule.tolerance is None else tolerances.index(rule.tolerance)
        conditions.append((k.JUDGE_COMPARE, column, int(bool(rule.needs_previous)), first, len(comparisons)))
    return RuleTables(np.array(conditions, np.int64).reshape(-1, 5), np.array(comparisons, np.int64).reshape(-1, 3),
                      np.array(limits, np.float64))
