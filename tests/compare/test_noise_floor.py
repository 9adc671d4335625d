"""Few-value BatchNorms (issue 31, "one noise model for every kind"): a net whose BatchNorms normalize 8 values
each (2x2 maps, batch 2) in float32 against float64, through real PyTorch steps, real layer captures and the port
check's update comparison.

Such a net's float32 noise grows from layer to layer (1e-4..1e-3 at its end), a ReLU input that lies within that
noise of zero routes its gradient term differently on the two sides (a gradient of 8 terms per element moves by
1e-1), and the updates carry both. The fixed floors (1e-2 for a gradient and a trained update, 1e-5 for a running
statistic) fire on that noise; the noise model reads it clean: a gradient against its kink floor, an update against
the error it inherits. A real change of the same kind (a gradient scaled in the backward pass, a BatchNorm momentum
off by a fifth) is still named.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

from msdebug_hooks.compare import attribution

torch = pytest.importorskip("torch")

#: seeds of the noise-only pairs: forward levels 6e-4, 1e-3, 1e-4; on the first a ReLU input flipped by float32
#: noise moves the last BatchNorm's beta gradient by 1.9e-1 (kink floor 2.5e-1), the fixed floor named it
SEEDS = (5, 0, 1)


def _net(depth: int = 40, width: int = 32):
    """A plain CNN: a stride-2 stem to 2x2, then ``depth`` conv-BatchNorm-ReLU layers over 8 values each."""
    nn = torch.nn
    layers = [nn.Conv2d(3, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
    for _ in range(depth):
        layers += [nn.Conv2d(width, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 5))


def _pair(tmp_path, seed, change=None, tag=""):
    """Side A in float32 (``change(net)`` applied), B in float64: ``(layer comparison, update findings, updates
    without the inherited errors)``."""
    from msdebug_hooks.compare.layers import compare_layers
    from msdebug_hooks.compare.port_run import Batch, run_torch
    from msdebug_hooks.compare.port_updates import compare_updates, inherited_errors
    from msdebug_hooks.compare.port_weights import WeightCopy

    threads = torch.get_num_threads()
    torch.set_num_threads(1)                      # one summation order, whatever the machine's core count
    try:
        torch.manual_seed(seed)
        model = _net()
        rng = np.random.default_rng(seed)
        batch = Batch((rng.standard_normal((2, 3, 4, 4)).astype(np.float32),), rng.integers(0, 5, 2))
        runs = {}
        for side, dtype in (("a", torch.float32), ("b", torch.float64)):
            net = copy.deepcopy(model).to(dtype)
            if change is not None and side == "a":
                change(net)
            runs[side] = run_torch(net, batch, "cross_entropy", 0.1, 1, tmp_path / f"{tag}{seed}{side}")
    finally:
        torch.set_num_threads(threads)
    layers = compare_layers(tmp_path / f"{tag}{seed}a", tmp_path / f"{tag}{seed}b")
    pairs = WeightCopy(pairs={name: name for name in runs["a"].before})
    inherited = inherited_errors([pair.entry() for pair in layers.pairs])
    updates, _ = compare_updates(pairs, runs["a"], runs["b"], inherited)
    fixed, _ = compare_updates(pairs, runs["a"], runs["b"])
    return layers, updates, fixed


def test_few_value_batchnorms_in_float32_against_float64_read_clean(tmp_path):
    above_fixed_floor = []
    for seed in SEEDS:
        layers, updates, fixed = _pair(tmp_path, seed)
        entries = [pair.entry() for pair in layers.pairs]
        scaled = attribution.scaled_errors(entries)
        gradients = [e for e, entry in zip(scaled, entries) if entry.kind == attribution.GRADIENT]
        above_fixed_floor.append(max(gradients) > attribution.GRADIENT_FLOOR["float32"] and bool(fixed))
        assert layers.finding is None, layers.finding.describe()
        assert not updates, [u.message for u in updates]
    # the pairs exercise the rule: the fixed floors alone would have named a gradient and updates on one of them
    assert any(above_fixed_floor)


def test_a_real_change_of_the_same_kind_is_still_named(tmp_path):
    def scaled_gradient(net):          # a backward-only change: the gradient into layer 61 (a BatchNorm) x1.5
        net[61].register_forward_hook(lambda module, args, out: out.register_hook(lambda g: g * 1.5) and None)

    layers, _, _ = _pair(tmp_path, 1, scaled_gradient, "gradient")
    finding = layers.finding
    assert finding is not None and finding.kind == attribution.GRADIENT_FINDING, finding
    assert finding.entry.name.startswith(("61.", "60.")), finding.describe()

    def momentum(net):                 # the running statistics of layer 31 move by 0.12 of the batch, not 0.1
        net[31].momentum = 0.12

    layers, updates, _ = _pair(tmp_path, 1, momentum, "momentum")
    assert layers.finding is None, layers.finding.describe()
    assert {u.name for u in updates} == {"31.running_mean", "31.running_var"}, [u.message for u in updates]
