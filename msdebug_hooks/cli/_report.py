"""How a comparing command prints its report: the report's own text, or strict JSON; the exit code from ``ok``."""
from __future__ import annotations

import json
import math
from typing import Any

from msdebug_hooks.cli import EXIT_FOUND, EXIT_OK


def strict_json(value: Any) -> Any:
    """NaN/Inf are not JSON: write them as the strings "nan", "inf", "-inf" so any JSON reader accepts the output."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: strict_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(item) for item in value]
    return value


def print_report(report: Any, as_json: bool, *, indent: int = 1) -> int:
    """Print ``report`` (``format()`` or ``to_dict()`` as JSON); 0 when ``report.ok``, else 1."""
    if as_json:
        print(json.dumps(strict_json(report.to_dict()), indent=indent, allow_nan=False))
    else:
        print(report.format())
    return EXIT_OK if report.ok else EXIT_FOUND
