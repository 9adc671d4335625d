"""Composite layers (issue 31): a layer that applies parameter-free children in its own forward is compared as one.

The ``mindspore`` part runs tests/scripts/composite_run.py once (real MindSpore 2.10 CPU and real PyTorch CPU, one
process, six small nets, about 10 s on an idle machine): a MindSpore cell computing ``x * sigmoid(x)`` with a
``Sigmoid`` child against ``nn.SiLU``; a ``BatchNorm2d`` subclass applying ``Identity`` and ``ReLU`` children
against MindSpore's ``BatchNorm2d`` then ``ReLU`` cells held in a ``CellList`` (whose parameters MindSpore names
without the attribute). Correct pairs read clean; a hard swish, a BatchNorm eps and a transposed weight are named at
their layer with the replay's verdict, a ``LeakyReLU`` after the BatchNorm at that activation. The fast part checks
the recording rules and the run pairing on PyTorch modules and written captures, without MindSpore.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from project import ROOT, fresh_env
from msdebug_hooks.compare.layer_capture import CaptureWriter

TESTS = Path(__file__).resolve().parents[1]


# --- the rules, without MindSpore -------------------------------------------------------------------------------
def test_composites_are_told_by_structure_and_isinstance():
    import torch
    from torch import nn

    from msdebug_hooks.compare.layer_selection import FREE, LAYER, composite_kind, select_layers

    class Swish(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate = nn.Sigmoid()

        def forward(self, x):
            return x * self.gate(x)

    class NormAct(nn.BatchNorm2d):
        def __init__(self) -> None:
            super().__init__(2)
            self.drop, self.act = nn.Identity(), nn.ReLU()

    class Gated(nn.Module):   # parameter-free children, but two inputs: not one function of its input
        def __init__(self) -> None:
            super().__init__()
            self.gate = nn.Sigmoid()

        def forward(self, x, y):
            return x * self.gate(y)

    class Padded(nn.Module):  # a leaf of no parameter-free role below: not a composite
        def __init__(self) -> None:
            super().__init__()
            self.pad, self.act = nn.ZeroPad2d(1), nn.ReLU()

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.norm, self.act = nn.Conv2d(2, 2, 1), NormAct(), Swish()
            self.gated, self.padded, self.seq = Gated(), Padded(), nn.Sequential(nn.ReLU(), nn.Identity())

    net = Net()
    assert composite_kind("pytorch", net.act) == FREE and composite_kind("pytorch", net.norm) == LAYER
    assert composite_kind("pytorch", net.conv) is None and composite_kind("pytorch", net) is None
    assert composite_kind("pytorch", net.gated) is None and composite_kind("pytorch", net.padded) is None
    assert composite_kind("pytorch", net.seq) is None   # a built-in container is never one layer
    assert select_layers(net.named_modules(), "pytorch") == [
        "conv", "norm", "act", "gated.gate", "padded.pad", "padded.act", "seq.0", "seq.1"]
    assert torch.equal(net.act(torch.ones(1)), torch.nn.functional.silu(torch.ones(1)))


def _write(path: Path, framework: str, layers: list, types: dict, params: tuple = ()) -> Path:
    writer = CaptureWriter(path, framework)
    writer.layer_types.update(types)
    order = 0
    for name, values in layers:
        writer.add(1, order, name, "forward-output", np.asarray(values, dtype=np.float32))
        order += 1
    for name in params:
        writer.add(1, order, name, "parameter", np.ones(2, dtype=np.float32))
        order += 1
    writer.flush()
    return path


def test_a_layer_composite_is_paired_with_the_run_it_covers(tmp_path):
    from msdebug_hooks.compare.layers import compare_layers

    x = np.array([[-1.0, 2.0]])
    normed = x * 0.5
    # A: norm then relu as two cells; B: one BatchNorm subclass applying an Identity and a ReLU inside
    a = _write(tmp_path / "a", "mindspore", [("norm", normed), ("relu", np.maximum(normed, 0)), ("fc", [[3.0]])],
               {"norm": "BatchNorm2d", "relu": "ReLU", "fc": "Dense"}, ("norm.gamma", "fc.weight"))
    b = _write(tmp_path / "b", "pytorch", [("bn", np.maximum(normed, 0)), ("fc", [[3.0]])],
               {"bn": "NormAct", "bn.drop": "Identity", "bn.act": "ReLU", "fc": "Linear"}, ("bn.weight", "fc.weight"))
    report = compare_layers(a, b, mapping={"norm": "bn", "norm.gamma": "bn.weight"})
    assert report.ok, report.format()
    pair = report.pairs[0]
    assert (pair.record_a.name, pair.record_b.name, pair.run_a) == ("norm", "bn", ("norm", "relu"))
    assert any("inside a composite layer" in note and "A's norm" in note for note in report.notes)
    # a LeakyReLU where the composite applies a ReLU: the run's pair is named at the activation that differs
    leaky = np.where(normed > 0, normed, 0.2 * normed)
    d = _write(tmp_path / "d", "mindspore", [("norm", normed), ("relu", leaky), ("fc", [[3.0]])],
               {"norm": "BatchNorm2d", "relu": "LeakyReLU", "fc": "Dense"}, ("norm.gamma", "fc.weight"))
    report = compare_layers(d, b, mapping={"norm": "bn", "norm.gamma": "bn.weight"})
    assert not report.ok and report.first_divergence.record_a.name == "relu"
    assert report.first_divergence.run_a == ("norm", "relu")
    # the port without its ReLU: the run stops at the missing activation, and the composite's output differs
    c = _write(tmp_path / "c", "mindspore", [("norm", normed), ("fc", [[3.0]])],
               {"norm": "BatchNorm2d", "fc": "Dense"}, ("norm.gamma", "fc.weight"))
    report = compare_layers(c, b, mapping={"norm": "bn", "norm.gamma": "bn.weight"})
    assert not report.ok and report.first_divergence.record_a.name == "norm"


def test_a_parameter_free_composite_plays_its_childrens_role():
    from msdebug_hooks.compare.role_names import ACTIVATION, DROPOUT, OTHER, POOLING, layer_role

    types = {"act": "Swish", "act.sigmoid": "Sigmoid", "path": "DropPath", "path.drop": "Dropout",
             "head": "SelectPool", "head.pool": "AdaptiveAvgPool2d", "head.flat": "Flatten",
             "mix": "Mix", "mix.drop": "Dropout", "mix.flat": "Flatten", "block": "Block", "block.conv": "Conv2d"}
    assert [layer_role(name, types) for name in ("act", "path", "head", "mix", "block")] == [
        ACTIVATION, DROPOUT, POOLING, OTHER, None]


# --- the small nets through compare_models ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def composite_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("composite")
    env = fresh_env()
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(ROOT), env.get("PYTHONPATH", "")])
    env.setdefault("GLOG_v", "3")
    proc = subprocess.run([sys.executable, str(TESTS / "scripts" / "composite_run.py"), str(out)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads((out / "results.json").read_text())


@pytest.mark.mindspore
def test_a_swish_cell_holding_a_sigmoid_reads_as_silu(composite_results):
    clean = composite_results["swish"]
    assert clean["ok"] and not clean["settings"] and clean["unmatched"] == [[], []], clean["headline"]
    assert ["act", "act", []] in clean["pairs"]      # the composite's output, not its inner Sigmoid
    planted = composite_results["hard_swish"]
    assert not planted["ok"] and (planted["marked"], planted["kind"], planted["replay"]) == ("act", "layer", "own")


@pytest.mark.mindspore
def test_a_batchnorm_applying_its_activation_pairs_with_batchnorm_then_relu(composite_results):
    clean = composite_results["bn_act"]
    assert clean["renamed"], "the port's CellList must name its parameters without the attribute"
    assert clean["ok"] and not clean["settings"] and clean["unmatched"] == [[], []], clean["headline"]
    assert ["stages.0.a_bn", "bn1", ["stages.0.a_bn", "stages.0.a_af"]] in clean["pairs"]
    assert ["stages.0.b_bn", "bn2", []] in clean["pairs"]   # Identity children only: nothing of A's to cover
    assert any("inside a composite layer" in note for note in clean["notes"])
    eps = composite_results["bn_act_eps"]
    assert (eps["marked"], eps["kind"], eps["replay"]) == ("stages.0.a_bn", "layer", "own"), eps["headline"]
    assert eps["settings"] == [["stages.0.a_bn", "eps"]]
    transposed = composite_results["transposed"]
    assert (transposed["marked"], transposed["kind"], transposed["replay"]) == ("stages.0.b", "parameter", "own")
    leaky = composite_results["bn_leaky"]   # named at the activation, whose type the settings check names too
    assert (leaky["marked"], leaky["kind"], leaky["replay"]) == ("stages.0.a_af", "layer", "own"), leaky["headline"]
    assert leaky["settings"] == [["stages.0.a_af", "type"]]
