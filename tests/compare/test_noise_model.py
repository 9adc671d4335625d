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


# --- the port check of a MobileNet-like net: BatchNorm betas and running means that start at zero ------------------
# every BatchNorm output reaches the loss only through a 1x1 convolution and another BatchNorm (the head included),
# so the betas' gradients and the running means' changes after it are zero in exact arithmetic: rounding noise only
def _nets(momentum_ms=0.9):
    torch = pytest.importorskip("torch")
    ms_nn = pytest.importorskip("mindspore.nn")
    tnn = torch.nn

    class TorchBlock(tnn.Module):
        def __init__(self, c, e):
            super().__init__()
            self.conv_pw, self.bn1, self.act1 = tnn.Conv2d(c, e, 1, bias=False), tnn.BatchNorm2d(e), tnn.ReLU6()
            self.conv_dw = tnn.Conv2d(e, e, 3, padding=1, groups=e, bias=False)
            self.bn2, self.act2 = tnn.BatchNorm2d(e), tnn.ReLU6()
            self.conv_pwl, self.bn3 = tnn.Conv2d(e, c, 1, bias=False), tnn.BatchNorm2d(c)

        def forward(self, x):
            return x + self.bn3(self.conv_pwl(self.act2(self.bn2(self.conv_dw(self.act1(self.bn1(self.conv_pw(x))))))))

    class TorchNet(tnn.Module):
        def __init__(self):
            super().__init__()
            self.conv_stem, self.bn1, self.act1 = tnn.Conv2d(3, 8, 3, 2, 1, bias=False), tnn.BatchNorm2d(8), tnn.ReLU6()
            self.block1, self.block2 = TorchBlock(8, 16), TorchBlock(8, 16)
            self.conv_head, self.bn2, self.act2 = tnn.Conv2d(8, 16, 1, bias=False), tnn.BatchNorm2d(16), tnn.ReLU6()
            self.fc = tnn.Linear(16, 5)

        def forward(self, x):
            x = self.block2(self.block1(self.act1(self.bn1(self.conv_stem(x)))))
            return self.fc(self.act2(self.bn2(self.conv_head(x))).mean((2, 3)))

    def bn(c):
        return ms_nn.BatchNorm2d(c, momentum=momentum_ms)

    class MsBlock(ms_nn.Cell):
        def __init__(self, c, e):
            super().__init__()
            self.conv_pw, self.bn1, self.act1 = ms_nn.Conv2d(c, e, 1, has_bias=False), bn(e), ms_nn.ReLU6()
            self.conv_dw = ms_nn.Conv2d(e, e, 3, pad_mode="pad", padding=1, group=e, has_bias=False)
            self.bn2, self.act2 = bn(e), ms_nn.ReLU6()
            self.conv_pwl, self.bn3 = ms_nn.Conv2d(e, c, 1, has_bias=False), bn(c)

        def construct(self, x):
            return x + self.bn3(self.conv_pwl(self.act2(self.bn2(self.conv_dw(self.act1(self.bn1(self.conv_pw(x))))))))

    class MsNet(ms_nn.Cell):
        def __init__(self):
            super().__init__()
            self.conv_stem = ms_nn.Conv2d(3, 8, 3, 2, pad_mode="pad", padding=1, has_bias=False)
            self.bn1, self.act1 = bn(8), ms_nn.ReLU6()
            self.block1, self.block2 = MsBlock(8, 16), MsBlock(8, 16)
            self.conv_head, self.bn2, self.act2 = ms_nn.Conv2d(8, 16, 1, has_bias=False), bn(16), ms_nn.ReLU6()
            self.fc = ms_nn.Dense(16, 5)

        def construct(self, x):
            x = self.block2(self.block1(self.act1(self.bn1(self.conv_stem(x)))))
            return self.fc(self.act2(self.bn2(self.conv_head(x))).mean(axis=(2, 3)))

    torch.manual_seed(0)
    return TorchNet(), MsNet()


@pytest.mark.mindspore
def test_port_check_of_a_mobilenet_like_net_has_no_update_noise():
    from msdebug_hooks.compare.port_check import compare_models

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((2, 3, 16, 16)).astype(np.float32), rng.integers(0, 5, 2).astype(np.int64)
    check = compare_models(*_nets(), x, y, steps=1)
    assert check.ok and not check.updates, check.format()
    wrong = compare_models(*_nets(momentum_ms=0.1), x, y, steps=1)   # MindSpore's momentum is 1 - PyTorch's
    assert any("moving_mean" in u.name for u in wrong.updates), wrong.format()
