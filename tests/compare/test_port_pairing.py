"""Weights paired by module structure (issue 31): real model zoos, planted ports and the one-line error.

The fast part (no MindSpore, no PyTorch) drives :mod:`msdebug_hooks.compare.module_pairing` on holders built from
names and shapes: BatchNorm's roles whatever the creation order, a module created elsewhere in one model, branches
created in the opposite order, shapes related only by size-1 axes, and tensors nothing fits. The ``mindspore`` part
runs tests/scripts/port_pairing_run.py once (mindcv against timm / torchvision with random weights, and small
planted ports: the weights copied, then the logits of both in eval mode) and ``msdebug port-check`` on a port
missing a layer (exit 2, one line naming what is left on each side).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from project import ROOT, fresh_env
from msdebug_hooks.compare.layouts import transform_between, unit_axes_between
from msdebug_hooks.compare.module_pairing import UNIT_AXES, group_holders, module_map, pair_by_structure
from msdebug_hooks.compare.naming import convert_torch_state
from msdebug_hooks.errors import ConfigError

TESTS = Path(__file__).resolve().parents[1]
BN_MS = ("moving_mean", "moving_variance", "gamma", "beta")
BN_TORCH = ("weight", "bias", "running_mean", "running_var")


def _ms(*layers: tuple) -> list:
    """MindSpore holders from ``(path, {leaf: shape})`` in creation order (no layers: roles from the names)."""
    return group_holders("mindspore", {}, [(f"{path}.{leaf}", f"{path}.{leaf}", shape)
                                           for path, leaves in layers for leaf, shape in leaves.items()])


def _torch(*layers: tuple) -> list:
    return group_holders("pytorch", {}, [(f"{path}.{leaf}", f"{path}.{leaf}", shape)
                                         for path, leaves in layers for leaf, shape in leaves.items()])


def _conv(shape: tuple) -> dict:
    return {"weight": shape}


def _bn(c: int, order: tuple) -> dict:
    return {leaf: (c,) for leaf in order}


def _pairs(ms_holders: list, torch_holders: list) -> dict:
    return {ms: torch for ms, torch, _ in pair_by_structure(ms_holders, torch_holders)}


# --- the fast part -------------------------------------------------------------------------------------------------
def test_batchnorm_tensors_pair_by_role_whatever_their_order_in_a_renamed_container():
    ms = _ms(("conv1", _conv((8, 3, 3, 3))), ("bn1", _bn(8, BN_MS)),
             ("layer.0.down_sample.0", _conv((8, 8, 1, 1))), ("layer.0.down_sample.1", _bn(8, BN_MS)))
    torch = _torch(("conv1", _conv((8, 3, 3, 3))), ("bn1", _bn(8, BN_TORCH)),
                   ("layer.0.downsample.0", _conv((8, 8, 1, 1))), ("layer.0.downsample.1", _bn(8, BN_TORCH)))
    pairs = _pairs(ms, torch)
    assert len(pairs) == 10
    for ms_leaf, torch_leaf in zip(BN_MS, ("running_mean", "running_var", "weight", "bias")):
        assert pairs[f"layer.0.down_sample.1.{ms_leaf}"] == f"layer.0.downsample.1.{torch_leaf}"
        assert pairs[f"bn1.{ms_leaf}"] == f"bn1.{torch_leaf}"


def test_shifted_indices_pair_by_structure_not_by_name():
    # the same names at other places: features.1 is a BatchNorm in one model and a block in the other
    ms = _ms(("features.0", _conv((16, 3, 3, 3))), ("features.1", _bn(16, BN_MS)),
             ("features.3.layers.0", _conv((16, 1, 3, 3))), ("features.3.layers.1", _bn(16, BN_MS)))
    torch = _torch(("features.0.0", _conv((16, 3, 3, 3))), ("features.0.1", _bn(16, BN_TORCH)),
                   ("features.1.conv.0", _conv((16, 1, 3, 3))), ("features.1.conv.1", _bn(16, BN_TORCH)))
    pairs = _pairs(ms, torch)
    assert pairs["features.1.gamma"] == "features.0.1.weight"
    assert pairs["features.3.layers.1.moving_variance"] == "features.1.conv.1.running_var"


def _regnet_like(stages: int) -> tuple:
    """A shortcut projection created first (MindSpore) or last (PyTorch), with the same shape as the block's first
    1x1 convolution: shapes alone cannot tell the two apart, only where each run of modules continues."""
    ms, torch, c_in = [], [], 8
    for s in range(stages):
        c = 8 * (s + 2)
        ms += [(f"s{s}.proj", _conv((c, c_in, 1, 1))), (f"s{s}.bn", _bn(c, BN_MS)),
               (f"s{s}.f.a", _conv((c, c_in, 1, 1))), (f"s{s}.f.a_bn", _bn(c, BN_MS)),
               (f"s{s}.f.b", _conv((c, 8, 3, 3))), (f"s{s}.f.b_bn", _bn(c, BN_MS)),
               (f"s{s}.f.c", _conv((c, c, 1, 1))), (f"s{s}.f.c_bn", _bn(c, BN_MS))]
        torch += [(f"t{s}.conv1.conv", _conv((c, c_in, 1, 1))), (f"t{s}.conv1.bn", _bn(c, BN_TORCH)),
                  (f"t{s}.conv2.conv", _conv((c, 8, 3, 3))), (f"t{s}.conv2.bn", _bn(c, BN_TORCH)),
                  (f"t{s}.conv3.conv", _conv((c, c, 1, 1))), (f"t{s}.conv3.bn", _bn(c, BN_TORCH)),
                  (f"t{s}.downsample.conv", _conv((c, c_in, 1, 1))), (f"t{s}.downsample.bn", _bn(c, BN_TORCH))]
        c_in = c
    return _ms(*ms), _torch(*torch)


def test_a_module_created_elsewhere_moves_as_one_run():
    pairs = _pairs(*_regnet_like(3))
    assert len(pairs) == 3 * 20
    for s in range(3):
        assert pairs[f"s{s}.proj.weight"] == f"t{s}.downsample.conv.weight"
        assert pairs[f"s{s}.bn.gamma"] == f"t{s}.downsample.bn.weight"
        assert pairs[f"s{s}.f.a.weight"] == f"t{s}.conv1.conv.weight"
        assert pairs[f"s{s}.f.c_bn.moving_mean"] == f"t{s}.conv3.bn.running_mean"


def test_branches_created_in_the_opposite_order_pair_by_their_containers():
    # equal channel counts: every single layer of one branch has a twin in the other, the branches do not
    main_ms = [("blk.main.0", _conv((4, 4, 1, 1))), ("blk.main.1", _bn(4, BN_MS)), ("blk.main.3", _conv((4, 1, 3, 3))),
               ("blk.main.4", _bn(4, BN_MS)), ("blk.main.5", _conv((4, 4, 1, 1))), ("blk.main.6", _bn(4, BN_MS))]
    proj_ms = [("blk.proj.0", _conv((4, 1, 3, 3))), ("blk.proj.1", _bn(4, BN_MS)), ("blk.proj.2", _conv((4, 4, 1, 1))),
               ("blk.proj.3", _bn(4, BN_MS))]
    b1 = [("blk.branch1.0", _conv((4, 1, 3, 3))), ("blk.branch1.1", _bn(4, BN_TORCH)),
          ("blk.branch1.2", _conv((4, 4, 1, 1))), ("blk.branch1.3", _bn(4, BN_TORCH))]
    b2 = [("blk.branch2.0", _conv((4, 4, 1, 1))), ("blk.branch2.1", _bn(4, BN_TORCH)),
          ("blk.branch2.3", _conv((4, 1, 3, 3))), ("blk.branch2.4", _bn(4, BN_TORCH)),
          ("blk.branch2.5", _conv((4, 4, 1, 1))), ("blk.branch2.6", _bn(4, BN_TORCH))]
    pairs = _pairs(_ms(*main_ms, *proj_ms), _torch(*b1, *b2))
    assert len(pairs) == 25
    assert pairs["blk.main.0.weight"] == "blk.branch2.0.weight"
    assert pairs["blk.proj.0.weight"] == "blk.branch1.0.weight"
    assert pairs["blk.proj.3.beta"] == "blk.branch1.3.bias"
    modules = module_map(pairs, {}, [name for h in _torch(*b1, *b2) for name in h.names])
    assert modules["blk.main"] == "blk.branch2" and modules["blk.proj"] == "blk.branch1"


def test_unit_axes_pair_by_shape_algebra_and_say_so():
    found = pair_by_structure(_ms(("blk", {"gamma_": (6,)}), ("blk.fc", _conv((6, 6)))),
                              _torch(("blk", {"gamma": (6, 1, 1)}), ("blk.pw", _conv((6, 6, 1, 1)))))
    assert {(ms, torch, fit) for ms, torch, fit in found} == {("blk.gamma_", "blk.gamma", UNIT_AXES),
                                                              ("blk.fc.weight", "blk.pw.weight", UNIT_AXES)}
    assert unit_axes_between((6,), (6, 1, 1)) and unit_axes_between((6, 6), (6, 6, 1, 1))
    assert not unit_axes_between((6,), (6,)) and not unit_axes_between((2, 3), (3, 2))
    assert transform_between((6,), (6, 1, 1)) is None  # no layout of the table: the table is unchanged


def test_convert_torch_state_reshapes_unit_axes_only_when_asked():
    state = {"blk.gamma": np.arange(4, dtype=np.float32).reshape(4, 1, 1)}
    with pytest.raises(ConfigError, match="shapes no layout explains"):
        convert_torch_state(state, {"blk.gamma": (4,)})
    converted = convert_torch_state(state, {"blk.gamma": (4,)}, unit_axes=True)
    assert converted["blk.gamma"].shape == (4,) and converted["blk.gamma"].tolist() == [0, 1, 2, 3]


def test_what_fits_nowhere_stays_unpaired():
    # noise-only pair: a transposed matrix and a different kernel have the same sizes but no layout relates them
    found = pair_by_structure(_ms(("fc", _conv((3, 5))), ("conv", _conv((4, 4, 1, 1)))),
                              _torch(("fc", _conv((5, 3))), ("conv", _conv((4, 4, 3, 3)))))
    assert found == []


# --- the mindspore part --------------------------------------------------------------------------------------------
def _env() -> dict:
    env = fresh_env()
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(ROOT), env.get("PYTHONPATH", "")])
    env.setdefault("GLOG_v", "3")
    return env


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    out = tmp_path_factory.mktemp("port_pairing")
    proc = subprocess.run([sys.executable, str(TESTS / "scripts" / "port_pairing_run.py"), str(out)], env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads((out / "results.json").read_text())


@pytest.mark.mindspore
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small_100", "regnet_x_200mf", "mobilenet_v2_100"])
def test_zoo_models_pair_every_tensor_and_give_the_same_logits(zoo, name):
    result = zoo[name]
    assert len(result["pairs"]) == result["parameters"] and not result["unpaired_torch"], result["summary"]
    assert result["logits_error"] < 1e-5, (result["logits_error"], result["summary"])


@pytest.mark.mindspore
def test_zoo_details_renamed_containers_unit_axes_and_branches(zoo):
    resnet = zoo["resnet18"]
    assert resnet["modules"]["layer2.0.down_sample"] == "layer2.0.downsample"
    assert resnet["pairs"]["layer2.0.down_sample.1.gamma"] == "layer2.0.downsample.1.weight"
    assert resnet["how"]["layer2.0.down_sample.1.gamma"] == "structure" and resnet["how"]["conv1.weight"] == "name"
    mobilenet = zoo["mobilenet_v3_small_100"]  # mindcv's Dense head against timm's 1x1 convolution
    assert mobilenet["unit_axes"] == ["classifier.0.weight"] and "shape algebra" in mobilenet["summary"]
    assert zoo["mobilenet_v2_100"]["modules"]["features.3"] == "features.1"  # indices shifted by the stem
    shuffle = zoo["shufflenet_v2_x0_5"]  # branches created in the opposite order; no bias on mindcv's head
    assert shuffle["modules"]["features.0.branch_main"] == "stage2.0.branch2"
    assert shuffle["modules"]["features.0.branch_proj"] == "stage2.0.branch1"
    assert shuffle["unpaired_torch"] == ["fc.bias"] and "no MindSpore peer (fc.bias)" in shuffle["summary"]


@pytest.mark.mindspore
def test_layer_scale_against_unit_axes_is_copied_reshaped(zoo):
    case = zoo["layer_scale"]
    assert case["pairs"]["scale"] == "gamma" and case["unit_axes"] == ["scale"]
    assert case["pairs"]["down_sample.1.moving_variance"] == "downsample.1.running_var"
    assert case["modules"]["down_sample"] == "downsample" and case["modules"]["head"] == "fc"
    assert "1 paired by shape algebra" in case["summary"] and case["logits_error"] < 1e-6
    assert case["port_check"]["ok"], case["port_check"]["headline"]  # the [C] parameter compared as [C, 1, 1]


@pytest.mark.mindspore
def test_a_missing_or_different_layer_is_named_on_both_sides(zoo):
    missing, different = zoo["missing_layer"]["error"], zoo["different_layer"]["error"]
    assert "left unpaired: MindSpore 2 (extra.weight [4, 4, 1, 1], extra.bias [4]); PyTorch 0;" in missing
    assert ("left unpaired: MindSpore 1 (extra.weight [4, 4, 1, 1]); PyTorch 1 (other.weight [4, 4, 3, 3]);"
            in different)
    assert "\n" not in missing + different


_MODELS = """
import mindspore as ms
import torch
from mindspore import nn


class Ref(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(self.bn(self.conv(x)).mean(dim=(2, 3)))


class Port(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, pad_mode="pad", padding=1, has_bias=True)
        self.norm = nn.BatchNorm2d(4)
        self.extra = nn.Conv2d(4, 4, 1, has_bias=True)
        self.head = nn.Dense(4, 3)

    def construct(self, x):
        return self.head(self.extra(self.norm(self.conv(x))).mean(axis=(2, 3)))
"""


@pytest.mark.mindspore
def test_port_check_exits_2_with_one_line_naming_the_leftovers(tmp_path):
    (tmp_path / "m.py").write_text(textwrap.dedent(_MODELS))
    np.savez(tmp_path / "b.npz", x=np.ones((2, 3, 5, 5), np.float32))
    proc = subprocess.run([sys.executable, "-m", "msdebug_hooks", "port-check", "--torch", "m.py:Ref",
                           "--mindspore", "m.py:Port", "--batch", "b.npz"], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    expected = ("left unpaired: MindSpore 4 (extra.weight [4, 4, 1, 1], extra.bias [4], head.weight [3, 4], "
                "head.bias [3]); PyTorch 2 (fc.weight [2, 4], fc.bias [2])")
    assert expected in lines[0], lines[0]


@pytest.mark.mindspore
def test_regnet_x_400mf_is_refused_for_its_widths_and_pairs_where_the_widths_agree(zoo):
    # mindcv rounds the last stage to 384 channels, torchvision to 400: a real difference, named with its shapes
    # (186 includes the BatchNorm running statistics: non-trainable, but weights of a table layer, never constants)
    refused = zoo["regnet_x_400mf_torchvision"]["error"]
    assert "MindSpore 186 (0.blocks.3.blocks.0.proj.weight [384, 160, 1, 1]," in refused, refused
    assert "PyTorch 186 (trunk_output.block4.block4-0.proj.0.weight [400, 160, 1, 1]," in refused, refused
    same = zoo["regnet_x_400mf_same_widths"]  # torchvision's RegNet given mindcv's widths: everything pairs
    assert len(same["pairs"]) == same["parameters"] == 357 and not same["unpaired_torch"], same["summary"]
    # the parameter names do not follow the cell path (a CellList); the pairs and the module map follow the cells
    assert same["paths"]["0.blocks.3.blocks.0.proj.weight"] == "stages.3.blocks.0.proj.weight"
    assert same["pairs"]["0.blocks.3.blocks.0.proj.weight"] == "trunk_output.block4.block4-0.proj.0.weight"
    assert same["pairs"]["0.blocks.3.blocks.11.f.c_bn.gamma"] == "trunk_output.block4.block4-11.f.c.1.weight"
    assert same["modules"]["stages.3.blocks.0.proj"] == "trunk_output.block4.block4-0.proj.0"
    assert same["logits_error"] < 1e-5, same["logits_error"]


@pytest.mark.mindspore
def test_constants_the_model_builds_are_set_aside_and_said(zoo):
    case = zoo["constants"]  # an integer index (set aside first) and a float mask PyTorch keeps unsaved
    assert case["constants"] == ["index", "mask"] and len(case["pairs"]) == 8, case["summary"]
    assert "2 non-trainable MindSpore parameters are constants the model builds itself" in case["summary"]
    assert case["pairs"]["norm.moving_variance"] == "bn.running_var"  # non-trainable, but it has a partner
    assert case["logits_error"] < 1e-6, case["logits_error"]


@pytest.mark.mindspore
def test_swin_sets_its_constants_aside_and_splits_the_fused_qkv(zoo):
    case = zoo["swin_tiny"]
    assert case["error"] is None, case["error"]
    constants = case["constants"]   # 12 relative position indexes (one-hot floats), 5 shifted blocks' masks
    assert len(constants) == 17 and sum(name.endswith("relative_bias.index") for name in constants) == 12, constants
    assert all(name.endswith(("relative_bias.index", "attn_mask")) for name in constants), constants
    assert len(case["fused"]) == 24 and not case["unpaired_torch"], case["summary"]   # 12 blocks: weight and bias
    assert ["0.blocks.0.attn.q.weight", "0.blocks.0.attn.k.weight", "0.blocks.0.attn.v.weight"] in [
        names for names, _, _ in case["fused"]]
    assert [["0.blocks.3.blocks.1.attn.q.bias", "0.blocks.3.blocks.1.attn.k.bias", "0.blocks.3.blocks.1.attn.v.bias"],
            ["layers.3.blocks.1.attn.qkv.bias"], 0] in case["fused"], case["fused"]
    assert ("MindSpore 0.blocks.0.attn.q.weight, 0.blocks.0.attn.k.weight, 0.blocks.0.attn.v.weight split from "
            "PyTorch's layers.0.blocks.0.attn.qkv.weight [288, 96] along axis 0 (96 + 96 + 96)") in case["summary"]
