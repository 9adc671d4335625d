"""The layout table between MindSpore 2.10 and PyTorch, and every tool that uses it (issue 27).

The fast part (no MindSpore): the table's derived maps, the layout transforms, convert_torch_state on names and
shapes, the recorders' layer selection on PyTorch modules, and the docs' table kept equal to the code's. The
``mindspore`` part runs tests/scripts/layer_layouts_run.py once (one process, real MindSpore 2.10 CPU and real
PyTorch CPU, every layer type and three small models) and judges what it found.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from project import ROOT, run_python
from msdebug_hooks.compare import layouts
from msdebug_hooks.compare.layout_docs import END, START, render, replace_section
from msdebug_hooks.compare.naming import (MINDSPORE_TO_PYTORCH_SUFFIX, canonical_name, convert_torch_state,
                                          name_candidates)
from msdebug_hooks.errors import ConfigError

DOC = ROOT / "docs" / "compare-pytorch.md"


# --- the table and what derives from it (no MindSpore) -----------------------------------------------------------
def test_docs_table_is_written_from_the_layout_table():
    text = DOC.read_text(encoding="utf-8")
    assert START in text and END in text
    assert replace_section(text, render()) == text, \
        "docs/compare-pytorch.md differs from the layout table: run python -m msdebug_hooks.compare.layout_docs " \
        "docs/compare-pytorch.md"


def test_docs_check_command_says_when_the_table_is_stale(tmp_path, capsys):
    from msdebug_hooks.compare.layout_docs import main

    stale = tmp_path / "doc.md"
    stale.write_text(f"intro\n{START}\n| old table |\n{END}\nafter\n", encoding="utf-8")
    assert main([str(stale), "--check"]) == 1
    assert main([str(stale)]) == 0 and main([str(stale), "--check"]) == 0
    assert "| old table |" not in stale.read_text() and stale.read_text().endswith(f"{END}\nafter\n")
    (tmp_path / "bare.md").write_text("no markers\n")
    assert main([str(tmp_path / "bare.md")]) == 2
    assert "lacks the markers" in capsys.readouterr().err


def test_the_table_covers_the_layers_people_port():
    layers = {name for layout in layouts.LAYOUTS for name in layout.mindspore}
    for name in ("Conv1d", "Conv2d", "Conv3d", "Conv1dTranspose", "Conv2dTranspose", "Conv3dTranspose", "Dense",
                 "Embedding", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm",
                 "InstanceNorm2d", "LSTM", "GRU", "RNN", "MultiheadAttention", "PReLU", "GELU", "LeakyReLU"):
        assert name in layers, name
    assert layouts.layout_of("pytorch", "ConvTranspose1d") is layouts.layout_of("mindspore", "Conv1dTranspose")


def test_the_name_map_comes_from_the_table():
    assert MINDSPORE_TO_PYTORCH_SUFFIX == layouts.mindspore_to_pytorch_suffix()
    assert MINDSPORE_TO_PYTORCH_SUFFIX == {"gamma": "weight", "beta": "bias", "moving_mean": "running_mean",
                                           "moving_variance": "running_var", "embedding_table": "weight",
                                           "w": "weight"}
    assert canonical_name("bn3.bn2d.moving_variance", "mindspore") == "bn3.running_var"  # BatchNorm3d's inner bn2d
    assert canonical_name("block.act.w", "mindspore") == "block.act.weight"               # PReLU
    assert canonical_name("lstm.weight_ih_l1_reverse", "mindspore") == "lstm.weight_ih_l1_reverse"
    assert canonical_name("bn3.bn2d.moving_variance", "pytorch") == "bn3.bn2d.moving_variance"
    assert name_candidates("block.w", "mindspore") == ("block.w", "block.weight")
    assert name_candidates("fc.weight", "mindspore") == ("fc.weight",)


def test_rules_name_recurrent_parameters_of_every_layer_and_direction():
    lstm = layouts.layout_of("mindspore", "LSTM")
    assert layouts.pytorch_name_for(lstm, "bias_hh_l2_reverse") == "bias_hh_l2_reverse"
    assert layouts.pytorch_name_for(lstm, "weight_ih_lx") is None
    bn3 = layouts.layout_of("mindspore", "BatchNorm3d")
    assert layouts.pytorch_name_for(bn3, "bn2d.gamma") == "weight" and layouts.pytorch_name_for(bn3, "gamma") is None


def test_layout_transform_reshapes_conv1d_weights_only():
    torch_weight = np.arange(24, dtype=np.float32).reshape(4, 3, 2)
    ms_weight = layouts.to_mindspore_layout(torch_weight, (4, 3, 1, 2))
    assert ms_weight.shape == (4, 3, 1, 2) and np.array_equal(ms_weight[:, :, 0, :], torch_weight)
    assert layouts.to_mindspore_layout(torch_weight, (4, 3, 2, 1)) is None   # a (k, 1) kernel is another layer
    assert layouts.to_mindspore_layout(torch_weight, (3, 4, 1, 2)) is None
    a, b, note = layouts.one_layout(ms_weight, torch_weight)
    assert a.shape == b.shape == (4, 3, 2) and "Conv1d/Conv1dTranspose layout" in note
    a, b, note = layouts.one_layout(torch_weight.T.copy(), torch_weight)           # a transpose is not a layout
    assert a.shape == (2, 3, 4) and note == ""


def test_shape_pairing_refuses_private_cells_and_other_layers():
    assert layouts.pairable_by_shape([4, 4, 6], [4, 4, 6])
    assert layouts.pairable_by_shape([8, 4, 1, 3], [8, 4, 3])                       # Conv1d weight gradients
    assert not layouts.pairable_by_shape([4, 5, 6], [5, 4, 6])
    # T == B: MindSpore's time-major inner LSTM cell never pairs with PyTorch's batch-first module by shape
    assert not layouts.pairable_by_shape([4, 4, 6], [4, 4, 6], ("mindspore", "_DynamicLSTMCPUGPU"),
                                         ("pytorch", "LSTM"))
    assert layouts.pairable_by_shape([4, 4, 6], [4, 4, 6], ("mindspore", "LSTM"), ("pytorch", "LSTM"))
    assert not layouts.pairable_by_shape([4, 4, 6], [4, 4, 6], ("mindspore", "GRU"), ("pytorch", "LSTM"))


def test_convert_torch_state_by_names_and_by_shapes():
    state = {"conv.weight": np.ones((4, 3, 5), np.float32), "conv.bias": np.zeros(4, np.float32),
             "bn.weight": np.full(4, 2.0, np.float32), "act.weight": np.full(4, 0.25, np.float32),
             "block.w": np.arange(3, dtype=np.float32), "bn.num_batches_tracked": np.array(3)}
    by_names = convert_torch_state(state, ["conv.weight", "bn.gamma", "act.w", "block.w"])
    assert by_names["conv.weight"] is state["conv.weight"]            # names only: values as given (the old API)
    assert by_names["act.w"] is state["act.weight"] and by_names["block.w"] is state["block.w"]
    by_shapes = convert_torch_state(state, {"conv.weight": (4, 3, 1, 5), "conv.bias": [4]})
    assert by_shapes["conv.weight"].shape == (4, 3, 1, 5) and by_shapes["conv.bias"].shape == (4,)
    with pytest.raises(ConfigError) as caught:
        convert_torch_state(state, {"conv.weight": (4, 5, 1, 3), "bn.moving_mean": (4,)})
    message = str(caught.value)
    assert "no PyTorch value for bn.moving_mean" in message
    assert "conv.weight [4, 5, 1, 3] from conv.weight [4, 3, 5]" in message


def test_convert_torch_state_takes_torch_tensors_and_a_name_mapping():
    torch = pytest.importorskip("torch")
    state = {"encoder.conv.weight": torch.ones(2, 1, 3, dtype=torch.bfloat16)}
    converted = convert_torch_state(state, {"enc.conv.weight": (2, 1, 1, 3)},
                                    mapping={"encoder.conv.weight": "enc.conv.weight"})
    assert converted["enc.conv.weight"].dtype == np.float32 and converted["enc.conv.weight"].shape == (2, 1, 1, 3)


def test_convert_torch_state_reads_a_mapping_of_rules_only():
    from msdebug_hooks.compare.name_rules import NameMapping

    mapping = NameMapping({}, rules=[("blocks.*", "layers.*")])
    converted = convert_torch_state({"blocks.0.weight": np.ones(2, np.float32)}, {"layers.0.weight": (2,)}, mapping)
    assert list(converted) == ["layers.0.weight"] and converted["layers.0.weight"].tolist() == [1.0, 1.0]


def test_torch_recorder_selection_keeps_multihead_attention_whole():
    torch = pytest.importorskip("torch")
    from msdebug_hooks.compare.layer_selection import select_layers

    model = torch.nn.ModuleDict({"lstm": torch.nn.LSTM(4, 5), "mha": torch.nn.MultiheadAttention(8, 2),
                                 "head": torch.nn.Sequential(torch.nn.Linear(8, 2), torch.nn.ReLU())})
    assert select_layers(model.named_modules(), "pytorch") == ["lstm", "mha", "head.0", "head.1"]
    assert select_layers(model.named_modules(), "pytorch", inner_cells=True) == [
        "lstm", "mha", "mha.out_proj", "head.0", "head.1"]
    assert select_layers(model.named_modules(), "pytorch", containers=["head"]) == [
        "lstm", "mha", "head", "head.0", "head.1"]


# --- real MindSpore 2.10 and PyTorch, every layer type (one process) --------------------------------------------
LAYER_CASES = ("Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "Dense",
               "Embedding", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm", "InstanceNorm2d",
               "LSTM", "GRU", "RNN", "MultiheadAttention", "MultiheadAttention-separate", "PReLU", "activations",
               "custom names")
NO_FORWARD_ON_CPU = {"InstanceNorm2d"}            # MindSpore 2.10 has no CPU kernel for InstanceNorm
NO_WEIGHTS = {"activations"}


@pytest.fixture(scope="module")
def ported(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("layouts")
    script = Path(__file__).resolve().parents[1] / "scripts" / "layer_layouts_run.py"
    run_python(f"import runpy, sys; sys.argv = ['run', {str(out)!r}]; runpy.run_path({str(script)!r}, "
               f"run_name='__main__')", cwd=out, timeout=600)
    return json.loads((out / "results.json").read_text())


def _all_pass(found: list) -> list:
    return [item for item in found if item["verdict"] != "pass"]


@pytest.mark.mindspore
def test_at_least_fifteen_layer_types_were_ported(ported):
    assert set(ported["cases"]) == set(LAYER_CASES) and len(LAYER_CASES) >= 15


@pytest.mark.mindspore
@pytest.mark.parametrize("case", LAYER_CASES)
def test_converted_weights_load_and_both_frameworks_agree(ported, case):
    found = ported["cases"][case]
    assert "error" not in found, found.get("error")
    assert found["not_loaded"] == []                    # load_param_into_net(strict_load=True) took every value
    if case in NO_FORWARD_ON_CPU:
        assert "outputs" not in found
        return
    assert found["output_count"][0] == found["output_count"][1] >= 1
    assert _all_pass(found["outputs"]) == []
    assert found["param_grads"] or case in NO_WEIGHTS
    assert _all_pass(list(found["param_grads"].values())) == []
    assert _all_pass(found["input_grads"]) == []
    assert _all_pass(list(found["state"].values())) == []  # BatchNorm's running statistics after the pass
    if case.startswith("BatchNorm"):
        assert len(found["state"]) == 2


@pytest.mark.mindspore
@pytest.mark.parametrize("case", [c for c in LAYER_CASES if c not in NO_WEIGHTS])
def test_compare_weights_reads_a_correct_conversion_clean(ported, case):
    weights = ported["cases"][case]["weights"]
    assert weights["ok"], weights["problems"]
    if case in ("Conv1d", "ConvTranspose1d"):  # the layout-only difference is compared, and said
        assert any("Conv1d/Conv1dTranspose layout" in note for note in weights["layout_notes"])


@pytest.mark.mindspore
@pytest.mark.parametrize("case", [c for c in LAYER_CASES if c not in NO_WEIGHTS])
def test_compare_weights_names_a_planted_mistake(ported, case):
    planted = ported["cases"][case]["planted"]
    names = {name for _, a, b, _ in planted["problems"] for name in (a, b) if name}
    assert planted["problems"], f"{planted['name']} was changed, compare-weights saw nothing"
    assert {planted["name"], canonical_name(planted["name"], "mindspore")} & names, planted["problems"]


@pytest.mark.mindspore
@pytest.mark.parametrize("case", [c for c in LAYER_CASES if c not in NO_FORWARD_ON_CPU])
def test_compare_layers_reads_a_correct_port_clean(ported, case):
    layers = ported["cases"][case]["layers"]
    assert layers["ok"], (layers["first"], layers["only_a"], layers["only_b"])
    forward = [pair for pair in layers["pairs"] if pair[2] == "forward-output"]
    assert forward and all(a == b for a, b, *_ in forward)  # the same layer boundary on both sides


@pytest.mark.mindspore
def test_instance_norm_without_affine_starts_from_the_tables_defaults(ported):
    assert ported["instance_norm_defaults"] == {"layer.moving_mean": [0.0] * 3, "layer.moving_variance": [1.0] * 3,
                                                "layer.gamma": [1.0] * 3, "layer.beta": [0.0] * 3}


MODELS = [f"{kind}-B3-T5" for kind in ("LSTM", "GRU")] + [f"{kind}-B4-T4" for kind in ("LSTM", "GRU")] + [
    "LSTM-B4-T4-graph"]


@pytest.mark.mindspore
@pytest.mark.parametrize("model", MODELS + ["Conv1dStack-B3-L5", "Conv1dStack-B4-L4"])
def test_a_correct_port_reads_clean_through_the_commands(ported, model):
    """B4-T4: sequence length equal to the batch size, where a time-major tensor has the batch-major shape."""
    found = ported["models"][model]
    assert found["compare-weights"]["exit"] == 0, found["compare-weights"]["output"]
    assert found["compare-layers"]["exit"] == 0, found["compare-layers"]["output"]
    assert "no layer diverges" in found["compare-layers"]["output"]


@pytest.mark.mindspore
@pytest.mark.parametrize("model", ["LSTM-B4-T4", "GRU-B4-T4", "LSTM-B4-T4-graph", "Conv1dStack-B4-L4"])
def test_recorder_records_the_layers_the_user_wrote(ported, model):
    layers = ported["models"][model]["ms_layers"]
    assert not any(".rnn." in name or name.endswith(".rnn") or "dropout_op" in name for name in layers), layers
    if not model.startswith("Conv1d"):
        assert {"rnn.0", "head"} <= set(layers)


@pytest.mark.mindspore
def test_a_real_mistake_in_an_lstm_port_is_found(ported):
    """The control: the same port with layer 0's input gates stored in Ascend's order (i, g, f, o)."""
    found = ported["models"]["LSTM-planted"]
    assert found["compare-weights"]["exit"] == 1 and "rnn.weight_ih_l0" in found["compare-weights"]["output"]
    assert found["compare-layers"]["exit"] == 1
    assert "first divergence: rnn.0 (forward-output" in found["compare-layers"]["output"]
