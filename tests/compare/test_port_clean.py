"""Clean means clean (issue 31): parameter-free layers paired by order and role, unpaired ones a note, not a failure.

The ``mindspore`` part runs tests/scripts/port_clean_run.py once (real MindSpore 2.10 CPU and real PyTorch CPU, one
process) on the user-written pairs of tests/helpers/port_pairs.py: a functional ``torch.relu`` against ``nn.ReLU``
cells, an ``nn.Identity`` norm, a ``Dropout(p=0)`` cell, adaptive pool + flatten against a ``mean``, layers called
from ``forward_features``, a DenseNet-like user block inside ``nn.SequentialCell`` / ``nn.Sequential``, activations
whose names shifted, a ``[N, C]`` pool cell against ``[N, C, 1, 1]``. Correct pairs must read clean; every planted
bug must be named at its layer; text, ``ok``, JSON, the HTML banner and (for two cases) the command's exit code must
say the same. The fast part (no MindSpore) checks the rules on PyTorch modules and on written captures.
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
PAIRS = TESTS / "helpers" / "port_pairs.py"


def _env() -> dict:
    env = fresh_env()
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(ROOT), env.get("PYTHONPATH", "")])
    env.setdefault("GLOG_v", "3")
    return env


# --- the rules, without MindSpore -------------------------------------------------------------------------------
def test_user_blocks_inside_a_built_in_container_are_descended_into():
    import torch
    from torch import nn

    from msdebug_hooks.compare.layer_selection import is_builtin_container, select_layers

    class _Block(nn.Module):   # a private-looking user class, as torchvision's _DenseBlock
        def __init__(self) -> None:
            super().__init__()
            self.norm, self.conv = nn.BatchNorm2d(2), nn.Conv2d(2, 2, 1)

        def forward(self, x):
            return torch.cat([x, self.conv(self.norm(x))], 1)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(_Block(), nn.ModuleList([nn.ReLU()]))
            self.lstm = nn.LSTM(4, 4)

    net = Net()
    assert select_layers(net.named_modules(), "pytorch") == ["features.0.norm", "features.0.conv",
                                                             "features.1.0", "lstm"]
    assert is_builtin_container(net.features) and is_builtin_container(net.features[1])
    assert not is_builtin_container(net.features[0]) and not is_builtin_container(net.lstm)


def test_roles_and_unit_axes():
    from msdebug_hooks.compare.layer_roles import role_of, squeezable

    assert [role_of(n) for n in ("ReLU", "GELU", "HSwish", "Hardswish", "HardSwish", "Identity", "Dropout",
                                 "DropPath", "AdaptiveAvgPool2d", "GlobalAvgPooling", "Flatten")] == [
        "activation"] * 5 + ["identity", "dropout", "dropout", "pooling", "pooling", "reshape"]
    assert role_of("Conv2d") is None and role_of("PReLU") is None and role_of("_DenseBlock") is None
    assert squeezable((2, 8, 1, 1), (2, 8)) and not squeezable((2, 8), (2, 8)) and not squeezable((2, 8), (8, 2))


def test_call_site_is_found_in_a_helper_method():
    from torch import nn

    from msdebug_hooks.compare.port_tree import source_line

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem, self.head = nn.Linear(3, 3), nn.Linear(3, 2)

        def forward_features(self, x):
            return self.stem(x).relu()

        def forward(self, x):
            return self.head(self.forward_features(x))

    line = source_line(Net(), "stem", "PyTorch")
    assert line.call is not None and "return self.stem(x).relu()" in line.call
    assert "self.head(self.forward_features(x))" in source_line(Net(), "head", "PyTorch").call


def _write(path: Path, framework: str, layers: list, values: dict, params: tuple = ()) -> Path:
    """A capture of ``layers`` ((name, class)) in that order; ``values``: name -> array; ``params``: parameter
    records (their layers hold parameters)."""
    writer = CaptureWriter(path, framework)
    order = 0
    for name, _ in layers:
        writer.add(1, order, name, "forward-output", values[name])
        order += 1
    for name in params:
        writer.add(1, order, name, "parameter", np.ones(3, np.float32))
        order += 1
    writer.layer_types.update(dict(layers))
    writer.flush()
    return path


def _agree(report, page: str) -> None:
    """The text, ``ok``, the JSON and the HTML banner say the same thing."""
    data = json.loads(json.dumps(report.to_dict(), default=str))
    assert data["ok"] is report.ok
    assert ('data-ok="true"' in page) is report.ok and ('class="banner clean"' in page) is report.ok
    assert ("no layer diverges" in report.format()) is report.ok


def test_unpaired_parameter_free_layers_are_a_note_and_layers_with_parameters_still_count(tmp_path):
    from msdebug_hooks.compare.html_report import write_html_report
    from msdebug_hooks.compare.layers import compare_layers

    rng = np.random.default_rng(0)
    h = rng.standard_normal((2, 4, 1, 1)).astype(np.float32)
    relu = np.maximum(h, 0)
    out = rng.standard_normal((2, 3)).astype(np.float32)
    b = _write(tmp_path / "b", "pytorch", [("fc1", "Linear"), ("norm", "Identity"), ("fc2", "Linear")],
               {"fc1": h, "norm": h, "fc2": out}, ("fc1.weight", "fc2.weight"))
    # A: a ReLU cell and a Dropout PyTorch lacks (it calls torch.relu), a [2, 4] pool against nothing
    a = _write(tmp_path / "a", "mindspore", [("fc1", "Dense"), ("act", "ReLU"), ("drop", "Dropout"),
                                             ("pool", "AdaptiveAvgPool2d"), ("fc2", "Dense")],
               {"fc1": h, "act": relu, "drop": relu, "pool": relu.reshape(2, 4), "fc2": out},
               ("fc1.weight", "fc2.weight"))
    report = compare_layers(a, b)
    assert report.ok and report.finding is None and not report.unmatched_a and not report.unmatched_b
    assert [(f.side, f.record.name, f.role) for f in report.unpaired_free] == [
        ("A", "act", "activation"), ("A", "drop", "dropout"), ("A", "pool", "pooling"), ("B", "norm", "identity")]
    assert "4 parameter-free layer(s) without a partner" in report.format()
    _agree(report, write_html_report(tmp_path / "ok.html", report).read_text())
    # a layer holding parameters without a partner still fails, and the banner is not green
    extra = _write(tmp_path / "a2", "mindspore", [("fc1", "Dense"), ("proj", "Dense"), ("fc2", "Dense")],
                   {"fc1": h, "proj": h, "fc2": out}, ("fc1.weight", "proj.weight", "fc2.weight"))
    report = compare_layers(extra, b)
    assert not report.ok and report.finding is None and [r.name for r in report.unmatched_a] == ["proj", "proj.weight"]
    page = write_html_report(tmp_path / "bad.html", report).read_text()
    _agree(report, page)
    assert "the structures differ" in page


def test_an_unpaired_layer_that_changes_what_the_next_layer_gets_is_named(tmp_path):
    from msdebug_hooks.compare.layers import compare_layers

    rng = np.random.default_rng(1)
    h = rng.standard_normal((2, 6)).astype(np.float32)
    fc2_b, fc2_a = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32)
    b = _write(tmp_path / "b", "pytorch", [("fc1", "Linear"), ("fc2", "Linear")], {"fc1": h, "fc2": fc2_b},
               ("fc1.weight", "fc2.weight"))
    a = _write(tmp_path / "a", "mindspore", [("fc1", "Dense"), ("gate", "Tanh"), ("fc2", "Dense")],
               {"fc1": h, "gate": np.tanh(h), "fc2": fc2_a}, ("fc1.weight", "fc2.weight"))
    report = compare_layers(a, b)
    assert not report.ok and report.culprit is not None and report.culprit.record.name == "gate"
    assert report.headline().startswith("first divergence: gate (layer): the difference starts at A's gate (Tanh")
    assert report.to_dict()["culprit"]["name"] == "gate"


def test_activations_of_different_types_are_paired_by_role_and_the_swap_is_named(tmp_path):
    from msdebug_hooks.compare.layers import compare_layers

    rng = np.random.default_rng(2)
    h = rng.standard_normal((2, 6)).astype(np.float32)
    out = rng.standard_normal((2, 3)).astype(np.float32)
    b = _write(tmp_path / "b", "pytorch", [("fc1", "Linear"), ("act_b", "ReLU"), ("fc2", "Linear")],
               {"fc1": h, "act_b": np.maximum(h, 0), "fc2": out}, ("fc1.weight", "fc2.weight"))
    a = _write(tmp_path / "a", "mindspore", [("fc1", "Dense"), ("activation", "GELU"), ("fc2", "Dense")],
               {"fc1": h, "activation": h * 0.5 * (1 + np.tanh(h)), "fc2": out}, ("fc1.weight", "fc2.weight"))
    report = compare_layers(a, b)
    pair = report.first_divergence
    assert pair is not None and (pair.record_a.name, pair.record_b.name, pair.matched_by) == (
        "activation", "act_b", "order+role")
    assert "A's activation computes GELU where B's act_b computes ReLU" in report.headline()


def test_a_dropout_on_the_other_side_of_an_activation_is_not_paired_across_it(tmp_path):
    from msdebug_hooks.compare.layers import compare_layers

    rng = np.random.default_rng(3)
    h = rng.standard_normal((2, 6)).astype(np.float32)
    out = rng.standard_normal((2, 3)).astype(np.float32)
    relu = np.maximum(h, 0)
    b = _write(tmp_path / "b", "pytorch", [("fc1", "Linear"), ("act", "ReLU"), ("drop", "Dropout"), ("fc2", "Linear")],
               {"fc1": h, "act": relu, "drop": relu, "fc2": out}, ("fc1.weight", "fc2.weight"))
    a = _write(tmp_path / "a", "mindspore", [("fc1", "Dense"), ("dropout", "Dropout"), ("relu", "ReLU"),
                                             ("fc2", "Dense")],
               {"fc1": h, "dropout": h, "relu": relu, "fc2": out}, ("fc1.weight", "fc2.weight"))
    report = compare_layers(a, b)
    assert report.ok, report.format()
    assert [(p.record_a.name, p.record_b.name) for p in report.pairs if p.record_a.kind == "forward-output"] == [
        ("fc1", "fc1"), ("relu", "act"), ("fc2", "fc2")]
    assert {(f.side, f.record.name) for f in report.unpaired_free} == {("A", "dropout"), ("B", "drop")}


# --- the pairs through compare_models and the command -----------------------------------------------------------
@pytest.fixture(scope="module")
def clean_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("port_clean")
    proc = subprocess.run([sys.executable, str(TESTS / "scripts" / "port_clean_run.py"), str(out)], env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return out, json.loads((out / "results.json").read_text())


def _says_the_same(out: Path, name: str, result: dict) -> None:
    text = (out / f"{name}.txt").read_text()
    page = (out / f"{name}.html").read_text()
    ok = result["ok"]
    assert result["report"]["ok"] is ok
    assert ("verdict: clean" in text) is ok and result["headline"] in text
    assert ('data-ok="true"' in page) is ok and ('class="banner clean"' in page) is ok


CLEAN = ["clean", "mlp", "dense", "pool", "drop_path", "stem"]
PLANTED = {"unpaired_gelu": "act2", "unpaired_dropout_on": "drop", "mlp_swap": "activation2", "mlp_b_extra": "fc3",
           "dense_eps": "features.1.layer2.norm", "pool_wrong": "global_pool", "drop_path_dropout_on": "drop"}


@pytest.mark.mindspore
@pytest.mark.parametrize("name", CLEAN)
def test_a_correct_port_reads_clean(clean_results, name):
    out, results = clean_results
    result = results[name]
    _says_the_same(out, name, result)
    report = result["report"]
    assert result["ok"], (name, result["headline"])
    assert report["marked"] is None and not report["layers"]["unmatched_a"] and not report["layers"]["unmatched_b"]


@pytest.mark.mindspore
@pytest.mark.parametrize("name", sorted(PLANTED))
def test_a_planted_bug_is_named_at_its_layer(clean_results, name):
    out, results = clean_results
    result = results[name]
    _says_the_same(out, name, result)
    assert not result["ok"] and result["report"]["marked"] == PLANTED[name], (name, result["headline"])
    assert result["report"]["marked_kind"] == "layer"


@pytest.mark.mindspore
def test_random_layers_found_by_running_them_run_in_eval_mode_in_pairs(clean_results):
    """A drop path of a class of its own on both sides runs in eval mode (found by calling it twice, never by its
    name); a dropout only the port has keeps running and is named."""
    _, results = clean_results
    clean_notes = " ".join(results["drop_path"]["report"]["notes"])
    assert "1 random layer pair(s)" in clean_notes and "one side only" not in clean_notes
    planted_notes = " ".join(results["drop_path_dropout_on"]["report"]["notes"])
    assert "random on one side only, left running: MindSpore drop, PyTorch none" in planted_notes
    assert "random layer" not in " ".join(results["clean"]["report"]["notes"])


@pytest.mark.mindspore
def test_a_reference_tensor_the_port_lacks_is_a_difference(clean_results):
    """A Dense without the bias PyTorch's Linear has: every paired value may agree, the port still differs."""
    out, results = clean_results
    result = results["head_without_bias"]
    _says_the_same(out, "head_without_bias", result)
    assert not result["ok"] and result["report"]["weights"]["unpaired_torch"] == ["fc.bias"]
    assert "the port lacks 1 tensor(s) of its reference" in result["headline"] or result["report"]["marked"] == "fc"
    assert "MISSING: PyTorch's fc.bias has no partner in the port" in (out / "head_without_bias.txt").read_text()


@pytest.mark.mindspore
def test_a_strided_same_padding_is_read_at_the_size_the_layer_was_given(clean_results):
    """kernel 2 stride 2 'same' adds nothing at an even size (the clean stem); a 3x3 stride-2 'same' max pool adds
    a zero after only, and its setting is compared with the partner the comparison paired (max_pool, maxpool)."""
    _, results = clean_results
    assert not results["stem"]["report"]["conventions"]
    found = results["stem_pool_same"]["report"]["conventions"]
    assert [(f["layer"], f["setting"]) for f in found] == [("max_pool", "padding")]
    assert "at input size 4" in found[0]["message"]


@pytest.mark.mindspore
def test_what_each_case_shows(clean_results):
    _, results = clean_results
    layers = {name: result["report"]["layers"] for name, result in results.items()}
    # clean: every parameter-free layer without a partner is listed, on its side, as a note
    assert {(f["side"], f["name"]) for f in layers["clean"]["unpaired_parameter_free"]} == {
        ("A", "act1"), ("A", "act2"), ("A", "pool"), ("A", "flatten"), ("A", "drop"), ("B", "norm")}
    # the GELU cell against torch.relu has no partner, changes its input, and is where the difference starts;
    # it is called from forward_features
    assert layers["unpaired_gelu"]["culprit"] == {"side": "A", "name": "act2", "role": "activation",
                                                  "layer_type": "GELU"}
    sources = {s["framework"]: s for s in results["unpaired_gelu"]["report"]["sources"]}
    assert "self.act2(self.conv2(x))" in sources["MindSpore"]["call"]
    # a Dropout(p=0.5) PyTorch lacks: the pool before it still holds what PyTorch feeds fc, so the dropout is named
    assert layers["unpaired_dropout_on"]["culprit"]["name"] == "drop"
    # names shifted: the swapped activation is paired by role and named with both types
    assert "A's activation2 computes GELU where B's act_b computes ReLU" in results["mlp_swap"]["headline"]
    assert {s["framework"]: s["layer"] for s in results["mlp_swap"]["report"]["sources"]} == {
        "MindSpore": "activation2", "PyTorch": "act_b"}
    # PyTorch's extra Tanh the port lacks
    assert layers["mlp_b_extra"]["culprit"]["side"] == "B" and layers["mlp_b_extra"]["culprit"]["name"] == "gate"
    # the dense block inside the built-in container is recorded layer by layer
    assert any(p["name_a"] == "features.1.layer2.norm" for p in layers["dense"]["pairs"])
    # the [N, C] pool cell against [N, C, 1, 1]: paired by role, compared squeezed
    pool = next(p for p in layers["pool"]["pairs"] if p["name_a"] == "global_pool")
    assert pool["name_b"] == "pool" and pool["matched_by"] == "order+role" and "size-1 axes" in pool["reason"]


@pytest.mark.mindspore
@pytest.mark.parametrize("ms_builder, exit_code", [("mindspore_net", 0), ("mindspore_net_gelu", 1)])
def test_the_command_exits_as_the_report_reads(tmp_path, ms_builder, exit_code):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "batch.npz", x=rng.standard_normal((2, 3, 8, 8)).astype(np.float32), y=np.array([1, 2]))
    proc = subprocess.run([sys.executable, "-m", "msdebug_hooks", "port-check", "--torch", f"{PAIRS}:torch_net",
                           "--mindspore", f"{PAIRS}:{ms_builder}", "--batch", str(tmp_path / "batch.npz"),
                           "--steps", "1", "--json", "--html", str(tmp_path / "r.html")], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == exit_code, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    page = (tmp_path / "r.html").read_text()
    assert data["ok"] is (exit_code == 0) and ('class="banner clean"' in page) is (exit_code == 0)
    assert json.dumps(data["headline"])[1:-1].split(":")[0] in page
