"""The comparison corpus (issue 22's acceptance): three real architectures in PyTorch and MindSpore (a ResNet-style
CNN, a transformer encoder, a Conv1d + LSTM audio net), noise-only pairs that must read clean and planted port bugs
that must be named at the right layer, step and parameter -- with every tool at its default options -- and, for the
named layer, the replay's verdict: its own error or inherited from its input.

The corpus runs once per module (three processes: PyTorch, MindSpore PyNative, MindSpore GRAPH_MODE; under a minute
on 2 idle cores); each case is one test asserting that what compare-layers, compare-loss and compare-weights answer
is what the case expects (``tests/corpus/cases.py``), and each case naming a layer one more for the replay.
``benchmarks/comparison_corpus.py`` writes the same answers as the confusion table in
``docs/precision-comparison.md``.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from project import fresh_env  # noqa: E402
from corpus.cases import CASES, CASES_BY_NAME  # noqa: E402
from corpus.port_replay import REPLAY_FILE  # noqa: E402
from corpus.report import KEYS, REPLAY_KEYS, report  # noqa: E402
from corpus.runner import generate  # noqa: E402

pytestmark = pytest.mark.mindspore

#: the float32 noise floor of a forward record (msdebug_hooks.compare.attribution.FORWARD_FLOOR["float32"])
FLOOR = 1e-5


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    """Every case directory; a side that failed is judged by the cases that use it (their tools cannot answer)."""
    return generate(tmp_path_factory.mktemp("corpus"), CASES, env=fresh_env())


@pytest.fixture(scope="module")
def reports(corpus) -> dict:
    """``report(case)`` once per case, shared by the tests that read it."""
    cache: dict = {}

    def get(name: str) -> dict:
        if name not in cache:
            cache[name] = report(corpus["cases"][name])
        return cache[name]
    return get


def test_every_side_writes_its_capture_losses_and_weights(corpus):
    """The corpus itself is sound: every side ran, and each case leads to two sides holding all three artefacts."""
    failed = {key: status.get("error") for key, status in corpus["sides"].items() if status.get("status") != "ok"}
    assert not failed, f"sides that did not run: {json.dumps(failed, indent=1)[:4000]}"
    for case_dir in corpus["cases"].values():
        case = json.loads((case_dir / "case.json").read_text())
        for side in ("a_dir", "b_dir"):
            side_dir = Path(case[side])
            assert (side_dir / "capture" / "manifest.json").is_file(), side_dir
            assert (side_dir / "loss" / "loss_rank_0.jsonl").is_file(), side_dir
            assert any((side_dir / name).is_file() for name in ("initial.pth", "initial.ckpt")), side_dir


@pytest.mark.parametrize("name", [case.name for case in CASES])
def test_case_is_answered_as_expected(reports, name):
    row = reports(name)
    expected = {key: row["expect"][key] for key in KEYS}
    reported = {key: row["reported"][key] for key in KEYS}
    assert reported == expected, (f"{name} ({row['planted']}):\n expected {expected}\n reported {reported}\n "
                                  f"details {row['details']}")


@pytest.mark.parametrize("name", [case.name for case in CASES if case.expect.replay is not None])
def test_replay_tells_own_error_from_inherited(reports, name):
    """The named layer's recorded inputs (``compare_layers(..., replay=True)``) and, for a port against PyTorch, the
    port's layer run on PyTorch's inputs (``replay_a=net``) say what the case's plant implies."""
    row = reports(name)
    expected = {key: row["expect"][key] for key in REPLAY_KEYS}
    reported = {key: row["reported"][key] for key in REPLAY_KEYS}
    assert reported == expected, f"{name}: expected {expected}, reported {reported}; details {row['details']}"


def test_replay_of_the_attention_scale_is_inherited_with_its_sizes(reports):
    """The scaling runs in code before the softmax cell: the softmax's inputs already differ far above the noise,
    and the port's softmax run on PyTorch's inputs agrees with PyTorch's output to float32 noise."""
    row = reports("transformer_attention_scale")
    numbers = row["details"]["replay"]
    assert row["reported"]["replay"] == row["reported"]["replayed"] == "inherited", row["details"]
    assert numbers["input"] > 100 * FLOOR and numbers["observed"] > 100 * FLOOR, numbers
    assert numbers["own"] < FLOOR, numbers


@pytest.mark.parametrize("name", ["transformer_gelu_tanh", "transformer_layernorm_eps", "audio_lstm_gate_order"])
def test_replay_of_a_layer_bug_is_own_with_its_sizes(reports, name):
    """The bug is in the layer: its inputs agree to float32 noise, and run on PyTorch's inputs the port's layer
    still differs by what compare-layers observed."""
    row = reports(name)
    numbers = row["details"]["replay"]
    assert row["reported"]["replay"] == row["reported"]["replayed"] == "own", row["details"]
    assert numbers["input"] < FLOOR < numbers["observed"], numbers
    assert numbers["own"] == pytest.approx(numbers["observed"], rel=0.1), numbers


def test_replay_runs_for_every_port_case_with_a_named_layer(corpus):
    """The corpus's replay step is sound: each port-against-PyTorch case has its replay file, none failed, and
    every case naming a layer carries a verdict."""
    for name, case_dir in corpus["cases"].items():
        replay_file = case_dir / REPLAY_FILE
        assert replay_file.is_file() == CASES_BY_NAME[name].replays_port, name
        if replay_file.is_file():
            result = json.loads(replay_file.read_text())
            assert result["status"] == "ok", f"{name}: {result.get('traceback', result)}"
            assert (result["replay"] is not None) == (result["layer"] is not None), result
