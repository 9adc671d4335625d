"""A port's padding moved into a layer of its own (issue 31): ``nn.Pad`` then an unpadded window against a padded
window in PyTorch (DenseNet's stem pooling in mindcv). Real MindSpore 2.10 and PyTorch 2.13 nets through
``compare_models``: the padding that takes effect is compared, not the literal argument. Zeros before a max pooling
of a ReLU's output, before a convolution, before an average pooling that counts its padding read clean with a note;
zeros before a max pooling of values that can be negative (judged on PyTorch's input to it, as the replay
judges a layer), before an average pooling that leaves its padding out,
and a padding split otherwise than the reference's stay SETTING lines saying why. A Linear with a bias against a
Dense without one names the bias, the two layers renamed (``fc``, ``classifier``).
"""
from __future__ import annotations

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
torch = pytest.importorskip("torch")
mn, tn = ms.nn, torch.nn

from msdebug_hooks.compare.port_check import compare_models  # noqa: E402

pytestmark = pytest.mark.mindspore


class TorchNet(tn.Module):
    """conv -> (ReLU) -> a padded window layer -> a classifier."""

    def __init__(self, window: tn.Module, relu: bool, bias: bool = True) -> None:
        super().__init__()
        self.conv = tn.Conv2d(3, 4, 3, padding=1)
        self.act = tn.ReLU() if relu else tn.Identity()
        self.pool = window
        self.fc = tn.Linear(4 * 16, 3, bias=bias)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.act(self.conv(x))), 1))


class MindSporeNet(mn.Cell):
    """The port: the padding in an ``nn.Pad`` of its own, the window layer unpadded."""

    def __init__(self, window: mn.Cell, relu: bool, pads: tuple = (1, 1), bias: bool = True,
                 leaky: bool = False) -> None:
        super().__init__()
        self.conv = mn.Conv2d(3, 4, 3, pad_mode="pad", padding=1, has_bias=True)
        self.act = mn.LeakyReLU() if leaky else mn.ReLU() if relu else mn.Identity()
        self.pool = mn.SequentialCell([mn.Pad(((0, 0), (0, 0), pads, pads)), window])
        self.classifier = mn.Dense(4 * 16, 3, has_bias=bias)

    def construct(self, x):
        return self.classifier(self.pool(self.act(self.conv(x))).flatten(start_dim=1))


def _check(torch_window, ms_window, relu=True, pads=(1, 1), bias=True, leaky=False):
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    y = np.array([0, 2], dtype=np.int32)
    model = TorchNet(torch_window, relu)
    return compare_models(model, MindSporeNet(ms_window, relu, pads, bias, leaky), x, y, steps=1, replay=False)


def _setting_lines(check) -> list:
    return [line for line in check.format().splitlines() if line.strip().startswith("SETTING:")]


def test_zeros_before_a_valid_max_pool_of_a_relu_read_clean_with_a_note():
    check = _check(tn.MaxPool2d(3, 2, padding=1), mn.MaxPool2d(3, 2), relu=True)
    text = check.format()
    assert check.ok and not check.conventions, text
    notes = [note for note in check.notes if "pool.1: max pooling padding" in note]
    assert len(notes) == 1 and "larger than PyTorch's by (2, 2)" in notes[0] and "-inf" in notes[0], check.notes
    assert ">= 0" in notes[0] and "note: pool.1: max pooling padding" in text


def test_zeros_before_a_max_pool_of_negative_values_is_a_setting_saying_why():
    check = _check(tn.MaxPool2d(3, 2, padding=1), mn.MaxPool2d(3, 2), relu=False)
    lines = _setting_lines(check)
    assert [(f.layer, f.setting) for f in check.conventions] == [("pool.1", "padding")], lines
    assert "pads with -inf" in lines[0] and "values below 0" in lines[0] and "pad_mode='pad', padding=1" in lines[0]
    assert not check.ok


def test_negatives_from_a_difference_upstream_leave_the_moved_padding_equal_on_pytorchs_inputs():
    """A LeakyReLU ported for the ReLU feeds the pool negatives PyTorch's pool never sees: the activation is the
    difference (a type SETTING and the first divergence); the pool, judged on PyTorch's input to it, is not."""
    check = _check(tn.MaxPool2d(3, 2, padding=1), mn.MaxPool2d(3, 2), relu=True, leaky=True)
    assert [(f.layer, f.setting) for f in check.conventions] == [("act", "type")], check.format()
    assert check.marked == "act", check.format()
    note = next(note for note in check.notes if "pool.1: max pooling padding" in note)
    assert "PyTorch's input to it in the step: smallest 0" in note and "a difference upstream" in note, note


def test_zeros_before_a_convolution_and_a_counting_average_pool_read_clean():
    conv = _check(tn.Conv2d(4, 4, 3, stride=2, padding=1, bias=False),
                  mn.Conv2d(4, 4, 3, stride=2, pad_mode="valid"), relu=False)
    assert conv.ok and any("padding_mode='zeros'" in note for note in conv.notes), conv.format()
    counted = _check(tn.AvgPool2d(3, 2, padding=1), mn.AvgPool2d(3, 2), relu=False)
    assert counted.ok and any("count_include_pad=True" in note for note in counted.notes), counted.format()


def test_an_average_pool_leaving_padding_out_and_a_shifted_split_stay_settings():
    excluded = _check(tn.AvgPool2d(3, 2, padding=1, count_include_pad=False), mn.AvgPool2d(3, 2), relu=True)
    lines = _setting_lines(excluded)
    assert len(lines) == 1 and "count_include_pad=False" in lines[0] and "pool.1" in lines[0], lines
    shifted = _check(tn.MaxPool2d(3, 2, padding=1), mn.MaxPool2d(3, 2), relu=True, pads=(0, 2))
    lines = _setting_lines(shifted)
    assert len(lines) == 1 and "not one constant" in lines[0], lines
    assert not shifted.ok and not excluded.ok


def test_a_linear_with_a_bias_against_a_dense_without_names_the_bias():
    """Renamed (``fc`` against ``classifier``): the Dense's one weight pairs it with the Linear holding it."""
    check = _check(tn.MaxPool2d(3, 2, padding=1), mn.MaxPool2d(3, 2), relu=True, bias=False)
    lines = _setting_lines(check)
    assert [(f.layer, f.torch_layer, f.setting) for f in check.conventions] == [("classifier", "fc", "bias")], lines
    assert "has_bias=False in MindSpore, bias=True in PyTorch: pass has_bias=True" in lines[0]
    assert "MISSING: PyTorch's fc.bias" in check.format() and not check.ok
