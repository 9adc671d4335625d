"""Replay on the layer compare-layers names: own error against inherited, with real PyTorch modules.

Two slips that look alike in a comparison: a layer that computes differently (a tanh-approximated GELU) and a layer
fed an input that already differed through code between two recorded layers (attention scores scaled by 1/d instead
of 1/sqrt(d) before the softmax cell). Replaying the run-under-test's layer on the reference's captured inputs, or
comparing the recorded inputs, tells them apart.
"""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from msdebug_hooks.cli import main  # noqa: E402
from msdebug_hooks.compare.layers import compare_layers  # noqa: E402
from msdebug_hooks.compare.torch import TorchLayerRecorder  # noqa: E402


class Block(torch.nn.Module):
    """Attention scores, a softmax cell, then a GELU feed-forward: the port's two slips are switches."""

    def __init__(self, width: int = 16, *, scale_by_d: bool = False, tanh_gelu: bool = False) -> None:
        super().__init__()
        self.q = torch.nn.Linear(width, width)
        self.k = torch.nn.Linear(width, width)
        self.softmax = torch.nn.Softmax(dim=-1)
        self.fc = torch.nn.Linear(width, 4 * width)
        self.act = torch.nn.GELU(approximate="tanh" if tanh_gelu else "none")
        self.out = torch.nn.Linear(4 * width, width)
        self.scale = 1.0 / width if scale_by_d else 1.0 / math.sqrt(width)

    def forward(self, x):
        scores = self.q(x) @ self.k(x).transpose(-1, -2) * self.scale   # not a recorded layer
        mixed = self.softmax(scores) @ x
        return self.out(self.act(self.fc(mixed)))


def capture(directory, **slips):
    torch.manual_seed(0)
    model = Block(**slips)
    x = torch.randn(4, 8, 16, generator=torch.Generator().manual_seed(1)) * 2
    recorder = TorchLayerRecorder(model, directory, steps=[1], record_inputs=True, record_gradients=False)
    with recorder.step(1):
        model(x)
    recorder.remove()
    return model


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("replay")
    return root / "ref", capture(root / "ref")


def test_a_layer_that_computes_differently_is_its_own_error(reference, tmp_path):
    ref_dir, _ = reference
    model = capture(tmp_path / "tanh", tanh_gelu=True)
    report = compare_layers(tmp_path / "tanh", ref_dir, replay_a=model)
    assert report.first_divergence.record_a.name == "act" and report.finding.kind == "layer"
    assert report.replay.verdict == "own" and report.replay.how == "A's layer run on B's inputs"
    assert report.replay.own_error > 1e-5 and report.replay.own_error == pytest.approx(
        report.replay.observed_error, rel=0.5)
    assert "own error: on the same inputs it still differs" in report.format()
    # without a model, the recorded inputs say the same: they agree, the output does not
    plain = compare_layers(tmp_path / "tanh", ref_dir, replay=True)
    assert plain.replay.verdict == "own" and plain.replay.input_error < 1e-6


def test_a_layer_fed_a_differing_input_is_inherited(reference, tmp_path, capsys):
    ref_dir, ref_model = reference
    model = capture(tmp_path / "scaled", scale_by_d=True)
    report = compare_layers(tmp_path / "scaled", ref_dir, replay_a=model)
    assert report.first_divergence.record_a.name == "softmax"     # the first recorded layer the slip reaches
    assert report.replay.verdict == "inherited" and report.replay.own_error < 1e-6
    assert "its input already differed; look at what runs between the previous recorded layer and softmax" in \
        report.format()
    # the reference's model replayed on A's inputs says the same
    assert compare_layers(tmp_path / "scaled", ref_dir, replay_b=ref_model).replay.verdict == "inherited"
    plain = compare_layers(tmp_path / "scaled", ref_dir, replay=True)
    assert plain.replay.verdict == "inherited" and plain.replay.input_error > 1e-2
    # the JSON report carries it
    assert main(["compare-layers", str(tmp_path / "scaled"), str(ref_dir), "--json"]) == 1


def test_replay_without_inputs_or_model_says_why(tmp_path):
    torch.manual_seed(0)
    for name, slips in (("a", {"tanh_gelu": True}), ("b", {})):
        model = Block(**slips)
        recorder = TorchLayerRecorder(model, tmp_path / name, steps=[1], record_gradients=False)
        with recorder.step(1):
            model(torch.ones(2, 3, 16))
        recorder.remove()
    report = compare_layers(tmp_path / "a", tmp_path / "b", replay=True)
    assert report.replay.verdict == "unknown" and "record_inputs=True" in report.replay.note
