"""``msdebug first-nan``: unmodified trainings with a planted NaN/Inf source, the producing operator named.

The trainings are real (MindSpore 2.10 on the CPU, ``tests/scripts/nan_origin_train.py``: one planted operation in
the network's first cell, triggered by the batch of step 3, in four loop styles). Each case runs the command as a
user does and reads its JSON result: the step, the operator, the calling line, and the producer rule itself (its
inputs finite, its output not), so a consumer of the NaN can never pass.

The default suite runs a representative subset: every loop style, every source kind and both routes (the dump, the
PyNative line tracer) at least once, plus a clean training. ``MSDEBUG_FIRST_NAN_MATRIX=full`` runs the whole matrix
(6 sources x 5 loops, about 30 trainings twice each).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from project import ROOT, fresh_env

SCRIPT = ROOT / "tests" / "scripts" / "nan_origin_train.py"
SOURCES = ("log", "sqrt", "div", "exp", "scale", "data")
LOOPS = (("functional", "pynative"), ("jit", "pynative"), ("model", "graph"), ("onestep", "graph"),
         ("onestep", "pynative"))
#: what the planted operator is called: its MindSpore type in a dump, the call the user wrote when traced
OPERATORS = {"log": {"Log", "ops.log"}, "sqrt": {"Sqrt", "ops.sqrt"}, "div": {"Div", "RealDiv", "/"},
             "exp": {"Exp", "ops.exp"}}
SUBSET = {("log", "functional", "pynative"), ("scale", "jit", "pynative"), ("exp", "model", "graph"),
          ("div", "onestep", "graph"), ("data", "onestep", "pynative")}
FULL = os.environ.get("MSDEBUG_FIRST_NAN_MATRIX", "").strip().lower() == "full"


def _planted_line(source: str) -> int:
    wanted = {"log": "ops.log(x + 1.0)", "sqrt": "ops.sqrt(x + 1.0)", "div": "x / (x[:, :1] + 1.0)",
              "exp": "ops.exp(x)", "scale": "ops.sqrt(x * self.gain)"}[source]
    for number, text in enumerate(SCRIPT.read_text().splitlines(), start=1):
        if text.split("#")[0].strip() == f"return {wanted}":
            return number
    raise AssertionError(wanted)


def first_nan(tmp_path: Path, *args: str, steps: int = 6, options: tuple = (), script: Path = SCRIPT
              ) -> tuple[int, dict, str]:
    """Run the command; ``options`` are first-nan's, ``args`` (and ``--steps``) the script's."""
    out = tmp_path / "result.json"
    env = fresh_env()
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-m", "msdebug_hooks", "first-nan", "--quiet", "--workdir",
                           str(tmp_path / "work"), "--json", str(out), *options, str(script), "--steps", str(steps),
                           *args],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    result = json.loads(out.read_text()) if out.exists() else {}
    return proc.returncode, result, proc.stdout + proc.stderr


def _selected() -> list:
    return [(s, loop, mode) for s in SOURCES for loop, mode in LOOPS if FULL or (s, loop, mode) in SUBSET]


def _cases():
    selected = _selected()
    for source in SOURCES:
        for loop, mode in LOOPS:
            case = (source, loop, mode)
            marks = [pytest.mark.mindspore]
            if case not in selected:
                marks.append(pytest.mark.skip(reason="full matrix only (MSDEBUG_FIRST_NAN_MATRIX=full)"))
            yield pytest.param(*case, id=f"{source}-{loop}-{mode}", marks=marks)


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    """Every selected case, run three at a time (each is two short trainings in subprocesses of their own)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(case):
        source, loop, mode = case
        return first_nan(tmp_path_factory.mktemp(f"{source}-{loop}-{mode}"), "--source", source, "--loop", loop,
                         "--mode", mode, steps=4)

    selected = _selected()
    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(zip(selected, pool.map(one, selected)))


@pytest.mark.parametrize("source, loop, mode", list(_cases()))
def test_names_the_producer(matrix, source, loop, mode):
    code, result, output = matrix[(source, loop, mode)]
    assert code == 1, output
    origin = result["origin"]
    assert origin is not None, output
    assert origin["step"] == result["first_bad_step"] == 3, output     # the batch of step 3 triggers every source
    assert result["loss_step"] in (None, 4), output        # a forward Inf swallowed by Tanh shows in step 4's loss
    assert not any("not deterministic" in note for note in result["notes"]), output
    if source == "data":
        assert origin["kind"] == "data", output
        assert "[3, 5]" in origin["detail"] and "nan" in origin["detail"], output
        return
    if source == "scale":
        assert origin["phase"] == "backward", output
        if origin["kind"] == "operator":                   # a dump: the backward operator itself
            _producer(origin, output)
            assert origin["operator"] == "SqrtGrad" and origin["line"] == _planted_line("scale"), output
            assert "overflow" in origin["hint"], output
        else:                                              # PyNative: the backward pass, by what it made
            assert origin["kind"] == "gradient" and "planted.gain" in origin["detail"], output
            if loop == "functional":                       # and the line that ran it
                assert "grad_fn(data, label)" in origin["code"], output
        return
    assert origin["kind"] == "operator" and origin["phase"] == "forward", output
    assert origin["operator"] in OPERATORS[source], output
    assert origin["file"].endswith("nan_origin_train.py") and origin["line"] == _planted_line(source), output
    _producer(origin, output)
    word = {"log": "log of 0", "sqrt": "sqrt of a negative", "div": "division by zero", "exp": "exp overflow"}
    assert word[source] in origin["hint"], output


def _producer(origin: dict, output: str) -> None:
    """The rule itself: every input finite, the output not."""
    assert origin["inputs"], output
    assert all(item.get("nan", 0) == 0 and item.get("inf", 0) == 0 for item in origin["inputs"]), output
    assert origin["output"]["nan"] + origin["output"]["inf"] > 0, output


@pytest.mark.mindspore
def test_clean_training_exits_0_with_the_steps_checked(tmp_path):
    code, result, output = first_nan(tmp_path, "--source", "none", "--loop", "jit", steps=4)
    assert code == 0, output
    assert result["first_bad_step"] is None and result["origin"] is None
    assert result["steps_checked"] == 4, output
    assert "no NaN/Inf in the 4 step(s) checked" in output
    assert not (tmp_path / "work").exists()               # nothing left behind without --keep


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    code, _, output = first_nan(tmp_path, options=("--steps", "0"))
    assert code == 2
    assert "--steps" in output and "Traceback" not in output and len(output.strip().splitlines()) == 1, output
    code, _, output = first_nan(tmp_path, script=tmp_path / "missing.py")
    assert code == 2 and "missing.py" in output and "Traceback (most recent" not in output.split("ending:")[0]
