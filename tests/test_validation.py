"""The one number check (msdebug_hooks/validation.py): what it accepts, what it refuses, and how a refusal reads."""
from __future__ import annotations

import math

import numpy as np
import pytest

from msdebug_hooks.errors import ConfigError, ConfigErrors
from msdebug_hooks.validation import (optional_real_number, optional_whole_number, raise_all, real_number,
                                      whole_number)


def test_whole_number_returns_an_int_within_the_range():
    assert whole_number("steps", 3, minimum=1) == 3
    assert whole_number("port", 65535, minimum=1, maximum=65535) == 65535
    assert whole_number("offset", -7) == -7            # no bound: any int
    assert type(whole_number("steps", 3)) is int


@pytest.mark.parametrize("value", [True, False, 1.0, "3", None, np.float32(2), [1]])
def test_whole_number_refuses_what_is_not_an_int(value):
    with pytest.raises(ConfigError) as info:
        whole_number("steps", value, minimum=1)
    assert (info.value.field, info.value.value, info.value.allowed) == ("steps", value, "an int >= 1")


@pytest.mark.parametrize("value, words", [(0, "an int >= 1"), (70000, "an int 1..65535")])
def test_whole_number_names_the_range_it_wanted(value, words):
    maximum = 65535 if value > 1 else None
    with pytest.raises(ConfigError, match=f"steps={value} is not allowed: {words}$"):
        whole_number("steps", value, minimum=1, maximum=maximum)


def test_whole_number_upper_bound_only_and_own_wording():
    with pytest.raises(ConfigError, match="level=5 is not allowed: an int <= 4$"):
        whole_number("level", 5, maximum=4)
    with pytest.raises(ConfigError, match=r"period=3 is not allowed: 5..3600 seconds \(the server's range\)$"):
        whole_number("period", 3, minimum=5, maximum=3600, allowed="5..3600 seconds (the server's range)")


def test_whole_number_reads_digit_strings_only_when_asked():
    assert whole_number("MS_DEBUGGER_PORT", " 15051 ", minimum=1, maximum=65535, digits=True) == 15051
    assert whole_number("n", 4, digits=True) == 4
    for text in ("-1", "1.0", "0x10", "", "²", "1e3"):
        with pytest.raises(ConfigError) as info:
            whole_number("n", text, digits=True)
        assert info.value.value == text                # named as given
    with pytest.raises(ConfigError) as info:           # out of range: still the string the user wrote
        whole_number("MS_DEBUGGER_PORT", "70000", minimum=1, maximum=65535, digits=True)
    assert info.value.value == "70000" and "MS_DEBUGGER_PORT='70000' is not allowed" in str(info.value)


@pytest.mark.parametrize("check, bound, words", [(optional_whole_number, {"minimum": 1}, "an int >= 1"),
                                                  (optional_real_number, {"above": 0}, "a number > 0")])
def test_the_optional_checks_pass_none_through(check, bound, words):
    assert check("limit", None, **bound) is None
    assert check("limit", 2, **bound) == 2
    with pytest.raises(ConfigError, match=f"limit=0 is not allowed: {words}$"):
        check("limit", 0, **bound)


def test_real_number_returns_a_float_within_the_range():
    assert real_number("rtol", 1) == 1.0 and type(real_number("rtol", 1)) is float
    assert real_number("timeout", 0.5, above=0) == 0.5
    assert real_number("window", 0, minimum=0) == 0.0
    assert real_number("share", 1.0, minimum=0, maximum=1) == 1.0
    assert real_number("x", np.float64(2.5)) == 2.5     # a numpy float is a float


@pytest.mark.parametrize("value", [True, "1", None, math.nan, math.inf, -math.inf, 1j])
def test_real_number_refuses_what_is_not_a_finite_number(value):
    with pytest.raises(ConfigError) as info:
        real_number("rtol", value)
    assert info.value.field == "rtol" and info.value.allowed == "a number"


@pytest.mark.parametrize("kwargs, value, words", [
    ({"above": 0}, 0, "a number > 0"),
    ({"above": 0, "maximum": 1}, 1.5, "a number > 0 and <= 1"),
    ({"minimum": 0}, -0.1, "a number >= 0"),
    ({"minimum": -1, "maximum": 1}, 2, "a number -1..1"),
    ({"maximum": 1}, 2, "a number <= 1"),
])
def test_real_number_names_the_range_it_wanted(kwargs, value, words):
    with pytest.raises(ConfigError) as info:
        real_number("x", value, **kwargs)
    assert info.value.allowed == words and str(info.value) == f"x={value!r} is not allowed: {words}"


def test_real_number_lets_infinity_through_only_when_asked():
    assert real_number("reconnect_window", math.inf, minimum=0, finite=False) == math.inf
    for value in (math.nan, -math.inf):
        with pytest.raises(ConfigError):
            real_number("reconnect_window", value, minimum=0, finite=False)


def test_a_refusal_is_a_value_error():
    """``ConfigError`` subclasses ``ValueError``: callers that caught ValueError before the helper still do."""
    with pytest.raises(ValueError):
        whole_number("steps", -1, minimum=0)


def test_raise_all_reports_one_error_as_itself_and_several_together():
    raise_all([])
    one = ConfigError("a", 1, "an int >= 2")
    with pytest.raises(ConfigError) as info:
        raise_all([one])
    assert info.value is one
    two = ConfigError("b", "x", "a number")
    with pytest.raises(ConfigErrors) as info:
        raise_all(iter([one, two]))
    assert info.value.errors == [one, two] and str(info.value).splitlines() == [str(one), str(two)]
