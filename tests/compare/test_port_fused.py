"""Split / fused pairing (issue 31, mindcv's Swin ``q``, ``k``, ``v`` against timm's fused ``qkv``): one tensor of
one model holding the tensors of sibling layers of the other, concatenated along one axis, is paired, said in the
report, copied split (or concatenated), and its layer's records are compared part by part.

The fast part drives :func:`~msdebug_hooks.compare.fused_pairing.find_fused` on names and shapes; the ``mindspore``
part runs the port check on the small models of tests/helpers/fused_pairs.py in this process (real MindSpore CPU and
real PyTorch CPU): both directions read clean; q's and k's weights exchanged by a converter are named at ``q``
(a parameter finding, replay own, its value traced to PyTorch's slice of ``qkv``), and a fused port ``qkv`` stacked
k before q is named at ``qkv`` (its part ``[0:8]``, replayed whole and cut).
"""
from __future__ import annotations

import numpy as np
import pytest

from msdebug_hooks.compare.fused_pairing import Tensor, concat_axis, find_fused


def _t(path: str, shape: tuple, kind: str = "Dense") -> Tensor:
    return Tensor(path, path, kind, shape)


# --- the rule, without MindSpore ------------------------------------------------------------------------------------
def test_the_axis_is_the_one_where_the_sizes_add_up_and_must_be_unique():
    assert concat_axis([(8, 4), (8, 4), (8, 4)], (24, 4)) == 0
    assert concat_axis([(2, 5, 8)] * 3, (2, 5, 24)) == 2
    assert concat_axis([(8,), (8,)], (16,)) == 0
    assert concat_axis([(8, 4)] * 3, (24, 5)) is None      # another axis differs
    assert concat_axis([(8, 4)] * 3, (23, 4)) is None      # the sizes do not add up
    assert concat_axis([(2, 2), (2, 2)], (4, 4)) is None   # not one axis
    assert concat_axis([(8, 4)], (8, 4)) is None           # one part is no split


def test_sibling_layers_split_from_the_fused_tensor_under_the_partner_of_their_parent():
    ms = [_t(f"blocks.{b}.attn.{x}.{leaf}", (8, 8) if leaf == "weight" else (8,))
          for b in (0, 1) for x in "qkv" for leaf in ("weight", "bias")]
    torch = [_t(f"layers.{b}.attn.qkv.{leaf}", (24, 8) if leaf == "weight" else (24,), "Linear")
             for b in (1, 0) for leaf in ("weight", "bias")]   # created in the other order: the partners decide
    paired = {f"blocks.{b}.attn.proj.weight": f"layers.{b}.attn.proj.weight" for b in (0, 1)}
    found = {pair.mindspore: pair for pair in find_fused(ms, torch, paired)}
    assert len(found) == 4
    pair = found[("blocks.0.attn.q.weight", "blocks.0.attn.k.weight", "blocks.0.attn.v.weight")]
    assert pair.torch == ("layers.0.attn.qkv.weight",) and pair.axis == 0 and pair.sizes == (8, 8, 8)
    assert pair.split_reference and pair.bounds() == [(0, 8), (8, 16), (16, 24)]
    assert found[("blocks.1.attn.q.bias", "blocks.1.attn.k.bias", "blocks.1.attn.v.bias")].torch == (
        "layers.1.attn.qkv.bias",)
    assert "split from PyTorch's layers.0.attn.qkv.weight [24, 8] along axis 0 (8 + 8 + 8)" in pair.describe()
    whole = np.arange(24 * 8, dtype=np.float32).reshape(24, 8)
    parts = pair.mindspore_values({"layers.0.attn.qkv.weight": whole})
    assert np.array_equal(parts["blocks.0.attn.k.weight"], whole[8:16])


def test_the_reverse_one_fused_port_tensor_concatenates_split_reference_tensors():
    ms = [_t("attn.qkv.weight", (24, 8))]
    torch = [_t(f"attn.{x}.weight", (8, 8), "Linear") for x in "qkv"]
    (pair,) = find_fused(ms, torch, {})
    assert pair.mindspore == ("attn.qkv.weight",) and pair.torch == ("attn.q.weight", "attn.k.weight", "attn.v.weight")
    assert not pair.split_reference and "concatenated into MindSpore's attn.qkv.weight" in pair.describe()
    values = {name: np.full((8, 8), k, np.float32) for k, name in enumerate(pair.torch)}
    assert pair.mindspore_values(values)["attn.qkv.weight"][8:16].max() == 1


def test_no_split_without_siblings_of_one_kind_or_a_fitting_tensor():
    assert find_fused([_t("a.q.weight", (8, 8)), _t("a.k.weight", (8, 8), "Conv2d")],
                      [_t("a.qkv.weight", (16, 8), "Linear")], {}) == []    # different layer classes
    assert find_fused([_t("a.q.weight", (8, 8)), _t("b.k.weight", (8, 8))],
                      [_t("a.qkv.weight", (16, 8), "Linear")], {}) == []    # different parents
    assert find_fused([_t("a.q.weight", (8, 8)), _t("a.k.weight", (8, 8))],
                      [_t("a.qkv.weight", (24, 8), "Linear")], {}) == []    # 8 + 8 is not 24


def test_outputs_that_merge_adjacent_axes_compare_in_the_reference_shape():
    from msdebug_hooks.compare.layouts import same_row_major

    assert same_row_major((2, 3136, 96), (2, 56, 56, 96)) and same_row_major((2, 56, 56, 96), (2, 3136, 96))
    assert same_row_major((2, 3, 4), (2, 12)) and same_row_major((6, 1, 4), (2, 3, 4))
    assert not same_row_major((2, 96, 56, 56), (2, 56, 56, 96))   # NCHW against NHWC: another order
    assert not same_row_major((6, 4), (4, 6)) and not same_row_major((2, 8), (2, 8))
    assert not same_row_major((2, 8), (2, 9))


# --- real models, one process ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fused_checks():
    import mindspore as ms
    import torch

    from fused_pairs import CellFused, CellSplit, TorchFused, TorchSplit
    from msdebug_hooks.compare.port_check import compare_models
    from msdebug_hooks.compare.port_weights import copy_into, pair_parameters, torch_state

    ms.set_context(mode=ms.PYNATIVE_MODE)
    x = np.random.default_rng(0).standard_normal((2, 5, 4)).astype(np.float32)
    y = np.array([0, 2])
    torch.manual_seed(0)
    checks = {"split": compare_models(TorchFused(), CellSplit(), x, y, steps=1),
              "fused": compare_models(TorchSplit(), CellFused(), x, y, steps=1)}
    module, cell = TorchFused(), CellSplit()
    state = torch_state(module)
    copy_into(cell, state, pair_parameters(state, cell, None, module))
    q, k = cell.q.weight.asnumpy().copy(), cell.k.weight.asnumpy().copy()   # the converter exchanged q and k
    cell.q.weight.set_data(ms.Tensor(k))
    cell.k.weight.set_data(ms.Tensor(q))
    checks["swapped"] = compare_models(module, cell, x, y, steps=1, copy_weights=False)
    module, cell = TorchSplit(), CellFused()
    state = torch_state(module)
    copy_into(cell, state, pair_parameters(state, cell, None, module))
    weight = cell.qkv.weight.asnumpy().copy()   # the converter stacked k before q
    cell.qkv.weight.set_data(ms.Tensor(np.concatenate([weight[8:16], weight[:8], weight[16:]])))
    checks["fused_swapped"] = compare_models(module, cell, x, y, steps=1, copy_weights=False)
    return checks


@pytest.mark.mindspore
@pytest.mark.parametrize("name", ["split", "fused"])
def test_a_correct_port_with_a_fused_layer_on_either_side_reads_clean(fused_checks, name):
    check = fused_checks[name]
    text = check.format()
    assert check.ok and check.marked is None, text
    assert not check.layers.unmatched_a and not check.layers.unmatched_b, text
    assert "2 split or concatenated" in text and "along axis 0 (8 + 8 + 8)" in text, text
    parts = [pair for pair in check.layers.pairs if "[8:16]" in pair.record_a.name + pair.record_b.name]
    assert {pair.record_a.kind for pair in parts} == {"forward-output", "parameter", "parameter-gradient"}, text
    assert abs(check.losses_mindspore[0] - check.losses_pytorch[0]) < 1e-5 * abs(check.losses_pytorch[0])


@pytest.mark.mindspore
def test_swapped_q_and_k_weights_are_named_at_q_with_their_origin(fused_checks):
    check = fused_checks["swapped"]
    text = check.format()
    assert not check.ok and check.marked == "q" and check.marked_kind == "parameter", text
    assert check.layers.replay is not None and check.layers.replay.verdict == "own", text
    assert check.origin is not None and "qkv.weight[8:16]" in check.origin, check.origin


@pytest.mark.mindspore
def test_a_fused_port_layer_with_its_parts_stacked_wrong_is_named_and_replayed_part_by_part(fused_checks):
    check = fused_checks["fused_swapped"]
    text = check.format()
    assert not check.ok and check.marked == "qkv" and check.marked_kind == "parameter", text
    assert check.layers.replay is not None and check.layers.replay.verdict == "own", text
    assert "qkv.weight[0:8]" in check.headline(), check.headline()


@pytest.mark.mindspore
def test_a_random_layer_called_twice_pairs_call_by_call_with_two_called_once(fused_checks):
    import mindspore as ms
    import torch

    from fused_pairs import CellDropTwice, TorchDropTwice
    from msdebug_hooks.compare.port_random import find_random_layers

    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    found = find_random_layers(CellDropTwice(), TorchDropTwice(), (torch.from_numpy(x),), (ms.Tensor(x),),
                               lambda name: name)
    assert found.mindspore == ["drop"] and found.pytorch == ["drop1", "drop2"], found
    assert found.paired == [("drop", "drop1"), ("drop", "drop2")], found
