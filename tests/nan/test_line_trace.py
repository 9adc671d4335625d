"""The PyNative line tracer and the hint rules, in this process: functions of this file are "the user's code".

Each case computes something small with real MindSpore tensors while a ``LineTracer`` follows it; the tracer must
name the line and the operator that made the first NaN/Inf from finite values, and nothing for a function that only
passes on a value that was already bad, or for finite work (noise-only cases).
"""
from __future__ import annotations

import numpy as np
import pytest

from msdebug_hooks.nan.values import hint, stats

pytestmark = pytest.mark.mindspore


@pytest.fixture(scope="module")
def ms():
    import mindspore

    mindspore.set_context(mode=mindspore.PYNATIVE_MODE)
    return mindspore


def traced(function, *args):
    from msdebug_hooks.nan.line_trace import LineTracer

    tracer = LineTracer()
    tracer.start(7)
    try:
        function(*args)
    finally:
        tracer.stop()
    return tracer.found


def _tensor(ms, values):
    return ms.Tensor(np.asarray(values, np.float32))


def log_of_shifted(x):
    from mindspore import ops

    y = x + 1.0
    return ops.log(y)                                   # the producer


def nested(x):
    from mindspore import ops

    z = ops.log(x + 1.0) * 2.0 + 1.0                    # log is the producer, * and + only pass it on
    return z


def consumer(bad):
    doubled = bad * 2.0
    return doubled + 1.0


def inner_sqrt(x):
    from mindspore import ops

    return ops.sqrt(x)                                  # the producer, one call down


def outer(x):
    h = inner_sqrt(x - 3.0)
    return h * 2.0


def divide(a, b):
    ratio = a / b
    return ratio


def finite_work(x):
    from mindspore import ops

    y = ops.exp(x) / (ops.abs(x) + 1.0)
    return ops.log(y + 1.0)


def line_of(function, marker):
    import inspect

    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, text in enumerate(lines) if marker in text)


def test_names_the_line_and_operator_of_a_log_of_zero(ms):
    found = traced(log_of_shifted, _tensor(ms, [[0.5, -1.0]]))
    assert found["line"] == line_of(log_of_shifted, "return ops.log(y)")
    assert found["operator"] == "ops.log" and found["step"] == 7
    assert found["inputs"][0]["zeros"] == 1 and found["inputs"][0]["nan"] == 0
    assert "log of 0" in found["hint"]


def test_the_innermost_operator_of_an_expression_not_its_consumers(ms):
    found = traced(nested, _tensor(ms, [[0.5, -1.0]]))
    assert found["line"] == line_of(nested, "z = ops.log")
    assert found["operator"] == "ops.log"
    assert found["output"]["inf"] == 1


def test_a_function_fed_a_bad_value_is_never_blamed(ms):
    assert traced(consumer, _tensor(ms, [[np.nan, 1.0]])) is None
    assert traced(consumer, _tensor(ms, [[np.inf, 1.0]])) is None


def test_the_producer_one_call_down_not_its_caller(ms):
    found = traced(outer, _tensor(ms, [[4.0, 1.0]]))
    assert found["line"] == line_of(inner_sqrt, "return ops.sqrt") and found["function"] == "inner_sqrt"
    assert found["operator"] == "ops.sqrt"
    assert "sqrt of a negative" in found["hint"]


def test_division_by_zero_written_as_an_operator(ms):
    found = traced(divide, _tensor(ms, [[1.0, 2.0]]), _tensor(ms, [[0.0, 4.0]]))
    assert found["line"] == line_of(divide, "ratio = a / b") and found["operator"] == "/"
    assert "division by zero" in found["hint"]


def test_finite_work_finds_nothing(ms):
    assert traced(finite_work, _tensor(ms, [[0.5, -3.0, 20.0]])) is None


def test_hints_follow_the_operator_kind_and_the_input_values():
    zero = stats(np.array([0.0, 1.0], np.float32))
    negative = stats(np.array([-2.0, 1.0], np.float32))
    big = stats(np.array([100.0, 1.0], np.float32))
    small = stats(np.array([50.0, 1.0], np.float32))
    inf = stats(np.array([np.inf, 1.0], np.float32))
    nan = stats(np.array([np.nan, 1.0], np.float32))
    assert "log of 0" in hint("Log", [zero], inf)
    assert "log of a negative" in hint("ops.log", [negative], nan)
    assert "sqrt of a negative" in hint("Sqrt", [negative], nan)
    assert "division by zero" in hint("RealDiv", [negative, zero], inf)
    assert "exp overflow" in hint("Exp", [big], inf)
    assert "exp overflow" not in hint("Exp", [small], inf)           # 50 is below float32's 88.72: another cause
    assert "exp overflow" in hint("Exp", [small], stats(np.array([np.inf], np.float16)))   # float16 holds 11.09
    assert "overflow" in hint("MatMul", [big, big], inf)
    assert "division" not in hint("Div", [negative, big], nan)       # no zero denominator: not called one
