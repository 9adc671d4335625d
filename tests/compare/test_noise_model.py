"""The noise model on noise-only pairs (issue 31): cancelled gradients and updates that are zero in exact arithmetic
must read clean, while a gradient or update that really differs is still named.

* attribution alone (no framework): a layer whose bias gradient cancels, the gradient jump rule, a planted bias bug;
* PyTorch float32 against float64 of a MobileNet v2 (depthwise convolutions, BatchNorm betas starting at zero, betas
  before a 1x1 convolution and another BatchNorm: gradients of exactly zero) through real layer captures: clean; the
  same pair with the gradient into one block scaled by 1.5 (a backward-only bug) is named as a gradient finding;
* the port check of a MobileNet-like MindSpore cell against its PyTorch module: no UPDATE line, and a BatchNorm
  momentum ported wrong is still an update finding.
"""
from __future__ import annotations

import copy
import sys
from pathlib import Path

import numpy as np
import pytest

from msdebug_hooks.compare import attribution
from msdebug_hooks.compare.metrics import compare_arrays

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))


def _entry(name, kind, a, b):
    return attribution.Entry(name, kind, compare_arrays(a, b))


def _layer(rng, bias_b, bias_a, noise=1e-6):
    weight = rng.standard_normal((8, 4))
    forward = rng.standard_normal((2, 8))
    return [_entry("fc", attribution.FORWARD, forward * (1 + 1e-7), forward),
            _entry("fc.weight", attribution.GRADIENT, weight * (1 + noise * rng.standard_normal(weight.shape)),
                   weight),
            _entry("fc.bias", attribution.GRADIENT, bias_a, bias_b)]


def test_a_cancelled_bias_gradient_is_measured_against_its_layer():
    rng = np.random.default_rng(0)
    zero_in_exact = 1e-5 * rng.standard_normal(8)            # both sides: rounding noise of a sum that cancels
    entries = _layer(rng, zero_in_exact, 1e-5 * rng.standard_normal(8))
    assert attribution.error_of(entries[2]) > 0.5             # 100 % apart against its own norm
    assert attribution.scaled_errors(entries)[2] < 1e-4 and attribution.first_divergence(entries) is None
    bias = rng.standard_normal(8)
    found = attribution.first_divergence(_layer(rng, bias, 2 * bias))   # a bias gradient doubled: a real bug
    assert found is not None and found.kind == attribution.GRADIENT_FINDING and found.entry.name == "fc.bias"


def test_gradients_appear_or_jump_like_forward_records():
    rng = np.random.default_rng(1)
    b = rng.standard_normal(64)

    def grad(name, error):
        return _entry(name, attribution.GRADIENT, b + error * np.linalg.norm(b) / 8 * rng.standard_normal(64), b)
    forward = _entry("x", attribution.FORWARD, b, b)
    # backward order is the reverse: "late" is read first; 2e-2 inherited from 5e-3 is not a jump
    assert attribution.first_divergence([forward, grad("early", 2e-2), grad("late", 5e-3)]) is None
    found = attribution.first_divergence([forward, grad("early", 2e-2), grad("late", 1e-6)])
    assert found is not None and found.entry.name == "early" and found.upstream < 1e-5


# --- PyTorch float32 against float64 of a MobileNet v2 -------------------------------------------------------------
def _mobilenet_pair(tmp_path, plant=None):
    torch = pytest.importorskip("torch")
    from zoo.torch_zoos import import_torch_zoos

    from msdebug_hooks.compare.layers import compare_layers
    from msdebug_hooks.compare.torch import TorchLayerRecorder

    timm, _ = import_torch_zoos()
    torch.manual_seed(0)
    model = timm.create_model("mobilenetv2_100", pretrained=False, num_classes=10)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((2, 3, 64, 64)), rng.integers(0, 10, 2)
    for side, dtype in (("a", torch.float32), ("b", torch.float64)):
        net = copy.deepcopy(model).to(dtype).train()
        handle = None
        if plant and side == "a":
            handle = net.get_submodule(plant).register_forward_hook(
                lambda module, args, out: out.register_hook(lambda g: g * 1.5) and None)
        recorder = TorchLayerRecorder(net, tmp_path / side, steps=[1])
        with recorder.step(1):
            loss = torch.nn.functional.cross_entropy(net(torch.from_numpy(x).to(dtype)), torch.from_numpy(y))
            loss.backward()
        recorder.remove()
        if handle is not None:
            handle.remove()
    return compare_layers(tmp_path / "a", tmp_path / "b")


def test_mobilenet_float32_against_float64_reads_clean(tmp_path):
    report = _mobilenet_pair(tmp_path)
    entries = [pair.entry() for pair in report.pairs]
    raw = [attribution.error_of(e) for e in entries if e.kind == attribution.GRADIENT]
    assert max(raw) > 1.0                  # betas whose gradient is zero in exact arithmetic: pure noise on both
    assert report.finding is None, report.finding.describe()


def test_a_backward_only_bug_in_mobilenet_is_a_gradient_finding(tmp_path):
    report = _mobilenet_pair(tmp_path, plant="blocks.3.1")
    finding = report.finding
    assert finding is not None and finding.kind == attribution.GRADIENT_FINDING, report.finding
    assert finding.entry.name.startswith("blocks.3.1."), finding.describe()
