"""Divergences after the first (issue 31): a port with two real differences names both. Real MindSpore 2.10 and
PyTorch 2.13 nets through ``compare_models``: a LeakyReLU slope differs first, and later a layer of the model's own
(a channel shuffle written as a leaf cell, no setting to read) computes another function of its input; run on
PyTorch's inputs to it, it still differs (``own``), while the layers between only pass the first difference on
and are not listed; the classifier's missing bias, small beside the error it inherits, reads ``inherited`` (the
list errs toward silence). With both equal, nothing after the first divergence is listed.
"""
from __future__ import annotations

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
torch = pytest.importorskip("torch")
mn, tn = ms.nn, torch.nn

from msdebug_hooks.compare.port_check import compare_models  # noqa: E402

pytestmark = pytest.mark.mindspore


class TorchShuffle(tn.Module):
    """Channels rolled by one."""

    def forward(self, x):
        return torch.cat((x[:, 1:], x[:, :1]), 1)


class TorchNet(tn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = tn.Conv2d(3, 4, 3, padding=1)
        self.act = tn.LeakyReLU(0.01)
        self.mid = tn.Conv2d(4, 4, 3, padding=1)
        self.shuffle = TorchShuffle()
        self.last = tn.Conv2d(4, 4, 3, padding=1)
        self.fc = tn.Linear(4 * 36, 3)

    def forward(self, x):
        return self.fc(torch.flatten(self.last(self.shuffle(self.mid(self.act(self.stem(x))))), 1))


class MindSporeShuffle(mn.Cell):
    """Channels rolled by ``shift`` (1: as the reference)."""

    def __init__(self, shift: int) -> None:
        super().__init__()
        self.shift = shift

    def construct(self, x):
        return ms.ops.concat((x[:, self.shift:], x[:, :self.shift]), 1)


class MindSporeNet(mn.Cell):
    def __init__(self, shift: int, bias: bool) -> None:
        super().__init__()
        self.stem = mn.Conv2d(3, 4, 3, pad_mode="pad", padding=1, has_bias=True)
        self.act = mn.LeakyReLU(0.2)          # the first difference: MindSpore's default slope
        self.mid = mn.Conv2d(4, 4, 3, pad_mode="pad", padding=1, has_bias=True)
        self.shuffle = MindSporeShuffle(shift)
        self.last = mn.Conv2d(4, 4, 3, pad_mode="pad", padding=1, has_bias=True)
        self.fc = mn.Dense(4 * 36, 3, has_bias=bias)

    def construct(self, x):
        return self.fc(self.last(self.shuffle(self.mid(self.act(self.stem(x))))).flatten(start_dim=1))


@pytest.fixture(scope="module")
def checks():
    torch.manual_seed(0)
    model = TorchNet()
    x = np.random.default_rng(0).standard_normal((2, 3, 6, 6)).astype(np.float32)
    y = np.array([0, 2], dtype=np.int32)
    with torch.no_grad():
        model.fc.bias.mul_(0.1)        # a bias a few percent of the classifier's output: small beside what it inherits
    return {shift: compare_models(model, MindSporeNet(shift, bias=shift == 1), x, y, steps=1) for shift in (2, 1)}


def test_a_later_layer_that_differs_on_its_own_is_named_after_the_first_divergence(checks):
    check = checks[2]
    assert check.marked == "act" and check.layers.replay.verdict == "own", check.format()
    assert check.later.layers == ["shuffle"], check.later.as_dict()   # fc's small missing bias reads inherited
    assert check.later.replayed == 4 and check.later.unknown == 0   # mid, shuffle, last, fc
    line = next(line for line in check.format().splitlines() if "also diverging on their own" in line)
    assert "shuffle (" in line and "on the same inputs" in line
    assert check.to_dict()["later"]["own"][0]["layer"] == "shuffle"


def test_only_inherited_layers_after_the_first_divergence_list_none(checks):
    check = checks[1]
    assert check.marked == "act" and check.later.layers == [] and check.later.replayed == 4, check.later.as_dict()
    assert check.later.unknown == 0 and "also diverging on their own" not in check.format()
