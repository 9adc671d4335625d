"""Layer captures, ``msdebug compare-layers`` and ``msdebug compare-weights`` on real PyTorch models (no MindSpore):
the format, matching, first divergence, bad input, and the weight checks' messages."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from project import ROOT, fresh_env, guarded  # noqa: E402
from msdebug_hooks.cli import main  # noqa: E402
from msdebug_hooks.compare.layer_capture import CaptureWriter, StepRecorder, read_capture  # noqa: E402
from msdebug_hooks.compare.layers import compare_layers  # noqa: E402
from msdebug_hooks.compare.naming import canonical_name, load_name_mapping  # noqa: E402
from msdebug_hooks.compare.torch import TorchLayerRecorder  # noqa: E402
from torch_training import make_lenet_bn_torch, train_and_capture  # noqa: E402

LAYERS = ["conv1", "bn1", "relu", "pool", "conv2", "bn2", "relu#1", "pool#1", "flatten", "fc1", "relu#2", "fc2",
          "relu#3", "fc3"]


def capture_torch(directory, *, scale_fc1=None, model=None):
    """LeNet-BN trained 3 steps, steps 1 and 2 captured; ``scale_fc1`` scales fc1's weight first (the injected
    difference)."""
    def scale(net):
        with torch.no_grad():
            net.fc1.weight.mul_(scale_fc1)
    return train_and_capture(directory, model=model, before=scale if scale_fc1 else None)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return capture_torch(tmp_path_factory.mktemp("reference") / "capture")


def cli(*argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_capture_lists_every_layer_call_in_order_for_the_chosen_step_only(reference):
    capture = read_capture(reference)
    assert capture.framework == "pytorch" and capture.steps == [1, 2]
    forward = capture.step_records(2, ["forward-output"])
    assert [r.name for r in forward] == LAYERS  # the shared ReLU and pool: one record per call
    assert [r.order for r in forward] == list(range(len(LAYERS)))
    assert forward[0].shape == (16, 6, 28, 28) and forward[0].dtype == "float32"
    grads = capture.step_records(2, ["parameter-gradient"])
    assert [r.name for r in grads][:4] == ["conv1.weight", "conv1.bias", "bn1.weight", "bn1.bias"]
    assert all(r.order > forward[-1].order for r in grads)
    assert not (reference / "step_3").exists()
    value = capture.load(forward[-1])
    assert value.shape == (16, 10) and np.isfinite(value).all()
    manifest = json.loads((reference / "manifest.json").read_text())
    assert manifest["format"] == "msdebug-layer-capture" and manifest["format_version"] == 2
    assert set(manifest["records"][0]) == {"step", "order", "name", "kind", "file", "shape", "dtype",
                                               "source_dtype"}


def test_identical_runs_pass_and_exit_0(reference, tmp_path, capsys):
    again = capture_torch(tmp_path / "again")
    code, out, _ = cli("compare-layers", again, reference, capsys=capsys)
    assert code == 0, out
    assert "28 pairs compared; 0 only in A, 0 only in B" in out and "no layer diverges" in out


def test_a_kind_one_capture_lacks_entirely_is_left_out_and_said(reference, tmp_path, capsys):
    no_gradients = train_and_capture(tmp_path / "no_gradients", record_gradients=False)
    code, out, _ = cli("compare-layers", no_gradients, reference, capsys=capsys)
    assert code == 0 and "14 pairs compared; 0 only in A, 0 only in B" in out, out
    assert "parameter-gradient records: only B has them" in out and "no layer diverges" in out


def test_records_without_a_partner_are_not_clean(reference, tmp_path, capsys):
    cut = capture_torch(tmp_path / "cut")
    manifest = json.loads((cut / "manifest.json").read_text())
    manifest["records"] = [r for r in manifest["records"] if r["name"] != "fc3"]   # a layer the run does not have
    (cut / "manifest.json").write_text(json.dumps(manifest))
    code, out, _ = cli("compare-layers", cut, reference, "--step", "2", capsys=capsys)
    assert code == 1 and "27 pairs compared; 0 only in A, 1 only in B" in out, out
    assert "no matched pair diverges" in out and "the records listed above have no partner" in out


def test_a_scaled_layer_is_named_first_and_written_as_csv_and_json(reference, tmp_path, capsys):
    changed = capture_torch(tmp_path / "changed", scale_fc1=1.5)
    csv_path = tmp_path / "pairs.csv"
    code, out, _ = cli("compare-layers", changed, reference, "--step", "1", "--csv", csv_path, capsys=capsys)
    assert code == 1
    assert "first divergence: fc1 (forward-output, order 9)" in out
    rows = csv_path.read_text().splitlines()
    assert rows[0].startswith("order,kind,name_a,name_b,matched_by,verdict") and len(rows) == 29
    code, out, _ = cli("compare-layers", changed, reference, "--json", "--kinds", "forward", capsys=capsys)
    data = json.loads(out)
    assert code == 1 and data["first_divergence"]["name_a"] == "fc1"
    verdicts = {pair["name_a"]: pair["verdict"] for pair in data["pairs"]}
    assert all(verdicts[name] == "pass" for name in LAYERS[:9])  # everything before fc1 agrees


def test_corrupt_and_truncated_files_become_not_comparable_rows(reference, tmp_path, capsys):
    broken = capture_torch(tmp_path / "broken")
    by_name = {r.name: r for r in read_capture(broken).step_records(2, ["forward-output"])}
    truncated = broken / by_name["bn1"].file
    truncated.write_bytes(truncated.read_bytes()[:200])
    (broken / by_name["conv2"].file).write_bytes(b"not a numpy file at all")
    (broken / by_name["fc3"].file).unlink()
    report = compare_layers(broken, reference, step_a=2)
    rows = {pair.record_a.name: pair.result for pair in report.pairs}
    for name in ("bn1", "conv2", "fc3"):
        assert rows[name].verdict == "not comparable", name
        assert by_name[name].file.split("/")[-1] in rows[name].reason
    assert "file missing" in rows["fc3"].reason
    assert report.first_divergence.record_a.name == "bn1"  # a check that could not look never reads as clean
    code, out, err = cli("compare-layers", broken, reference, "--step", "2", capsys=capsys)
    assert code == 1 and "Traceback" not in out + err


def test_shape_and_dtype_mismatches_are_not_comparable(tmp_path):
    a, b = CaptureWriter(tmp_path / "a", "mindspore"), CaptureWriter(tmp_path / "b", "pytorch")
    a.add(0, 0, "conv1", "forward-output", np.zeros((2, 3), np.float32))
    b.add(0, 0, "conv1", "forward-output", np.zeros((2, 3), np.float32))
    a.add(0, 1, "fc", "forward-output", np.zeros((4, 5), np.float32))
    b.add(0, 1, "fc", "forward-output", np.zeros((5, 4), np.float32))
    a.add(0, 2, "argmax", "forward-output", np.zeros((4,), np.int32))
    b.add(0, 2, "argmax", "forward-output", np.zeros((4,), np.float32))
    a.flush(), b.flush()
    report = compare_layers(tmp_path / "a", tmp_path / "b")
    results = {pair.record_a.name: pair.result for pair in report.pairs}
    assert results["conv1"].verdict == "pass"
    assert results["fc"].verdict == "not comparable" and "shapes differ: [4, 5] vs [5, 4]" in results["fc"].reason
    assert results["argmax"].verdict == "not comparable" and "dtypes differ: int32 vs float32" in \
        results["argmax"].reason
    assert report.first_divergence.record_a.name == "fc"


@pytest.mark.parametrize("setup, expected", [
    (lambda d: None, "no such directory"),
    (lambda d: d.mkdir(), "not a capture: no manifest"),
    (lambda d: (d.mkdir(), (d / "manifest.json").write_text("{oops")), "a JSON manifest"),
    (lambda d: (d.mkdir(), (d / "manifest.json").write_text('{"format": "other"}')), '"format": "msdebug-layer'),
    (lambda d: (d.mkdir(), (d / "manifest.json").write_text(
        '{"format": "msdebug-layer-capture", "format_version": 1, "records": [{"step": 1}]}')),
     "records[0].order: a int"),
])
def test_a_directory_that_is_not_a_capture_is_exit_2_in_one_line(reference, tmp_path, capsys, setup, expected):
    target = tmp_path / "not_a_capture"
    setup(target)
    code, out, err = cli("compare-layers", target, reference, capsys=capsys)
    assert code == 2 and out == ""
    assert err.startswith("msdebug compare-layers: error: ") and expected in err and err.count("\n") == 1


def test_unknown_step_is_bad_input(reference, capsys):
    code, _, err = cli("compare-layers", reference, reference, "--step", "7", capsys=capsys)
    assert code == 2 and "--step=7 is not allowed: a step in" in err


def test_order_and_shape_match_renamed_layers_and_a_mapping_file_overrides(reference, tmp_path, capsys):
    class Renamed(torch.nn.Module):  # the same network with other attribute names
        def __init__(self):
            super().__init__()
            source = make_lenet_bn_torch(seed=0)
            self.features = torch.nn.Sequential(source.conv1, source.bn1, torch.nn.ReLU(), torch.nn.MaxPool2d(2, 2),
                                                source.conv2, source.bn2, torch.nn.ReLU(), torch.nn.MaxPool2d(2, 2))
            self.head = torch.nn.Sequential(torch.nn.Flatten(), source.fc1, torch.nn.ReLU(), source.fc2,
                                            torch.nn.ReLU(), source.fc3)

        def forward(self, x):
            return self.head(self.features(x))

    renamed = capture_torch(tmp_path / "renamed", model=Renamed())
    report = compare_layers(renamed, reference, kinds=("forward-output",))
    assert [(p.record_a.name, p.record_b.name, p.matched_by) for p in report.pairs][:2] == [
        ("features.0", "conv1", "order+shape"), ("features.1", "bn1", "order+shape")]
    assert report.ok and not report.unmatched_a and not report.unmatched_b
    mapping = tmp_path / "mapping.txt"
    mapping.write_text("# A name -> B name\nfeatures.0 -> conv1\nfeatures.1 = bn2\n")
    report = compare_layers(renamed, reference, kinds=("forward-output",), mapping=load_name_mapping(mapping))
    first = report.pairs[0], report.pairs[1]
    assert [(p.record_a.name, p.record_b.name, p.matched_by) for p in first] == [
        ("features.0", "conv1", "mapping"), ("features.1", "bn2", "mapping")]
    assert report.pairs[1].result.verdict == "not comparable"  # the user's pairing is kept, and it is wrong
    mapping.write_text("features.0 conv1 extra\n")
    code, _, err = cli("compare-layers", renamed, reference, "--mapping", mapping, capsys=capsys)
    assert code == 2 and f"mapping='{mapping}:1' is not allowed" in err


def test_naming_map_and_mapping_file_formats(tmp_path):
    assert canonical_name("bn1.gamma", "mindspore") == "bn1.weight"
    assert canonical_name("layer.bn.moving_variance", "mindspore") == "layer.bn.running_var"
    assert canonical_name("embed.embedding_table", "mindspore") == "embed.weight"
    assert canonical_name("bn1.gamma", "pytorch") == "bn1.gamma"
    as_json = tmp_path / "m.json"
    as_json.write_text('{"a.gamma": "a.weight"}')
    assert load_name_mapping(as_json) == {"a.gamma": "a.weight"}
    as_json.write_text('["a", "b"]')
    with pytest.raises(ValueError, match="a JSON object of name -> name"):
        load_name_mapping(as_json)


# --- compare-weights ----------------------------------------------------------------------------------------------

@pytest.fixture()
def pth_pair(tmp_path):
    state = {k: v.clone() for k, v in make_lenet_bn_torch(seed=0).state_dict().items()}
    torch.save(state, tmp_path / "source.pth")
    return tmp_path, state


def test_compare_weights_identical_files_exit_0(pth_pair, capsys):
    root, _ = pth_pair
    code, out, _ = cli("compare-weights", root / "source.pth", root / "source.pth", capsys=capsys)
    assert code == 0 and "18 parameters match, 0 problems, 4 non-weight entries skipped" in out


def test_compare_weights_names_a_transposed_a_missing_and_a_renamed_parameter(pth_pair, capsys):
    root, state = pth_pair
    state["fc1.weight"] = state["fc1.weight"].t().contiguous()  # [120, 400] stored as [400, 120]
    del state["fc2.bias"]
    state["fc3.weights"] = state.pop("fc3.weight")
    state["conv1.bias"] = state["conv1.bias"] + 0.5
    torch.save(state, root / "converted.pth")
    code, out, _ = cli("compare-weights", root / "source.pth", root / "converted.pth", capsys=capsys)
    assert code == 1
    lines = out.splitlines()
    assert "TRANSPOSED: fc1.weight: transposed: B [400, 120] is A [120, 400] transposed" in out
    assert any(line.startswith("MISSING: fc2.bias [84] float32 is missing from B") for line in lines)
    assert "RENAMED: fc3.weight [10, 84] is not in B under its name; B has fc3.weights [10, 84] instead: " \
           "renamed? (values equal)" in out
    assert "VALUES: conv1.bias: values differ: max abs error 0.5" in out
    assert "14 parameters match, 4 problems" in out
    code, out, _ = cli("compare-weights", root / "source.pth", root / "converted.pth", "--json", capsys=capsys)
    kinds = {f["name_a"]: f["kind"] for f in json.loads(out)["findings"]}
    assert kinds["fc1.weight"] == "transposed" and kinds["fc2.bias"] == "missing"
    assert kinds["fc3.weight"] == "renamed" and kinds["conv1.bias"] == "values"


def test_compare_weights_bad_input_is_exit_2_in_one_line(pth_pair, capsys):
    root, _ = pth_pair
    (root / "garbage.pth").write_bytes(b"\x00" * 64)
    for argv, expected in (((root / "nope.pth", root / "source.pth"), "does not exist"),
                           ((root / "garbage.pth", root / "source.pth"), "a PyTorch .pth file torch.load can read"),
                           ((root / "source.pth", root / "weights.h5"), "a MindSpore .ckpt or a PyTorch .pth/.pt")):
        code, out, err = cli("compare-weights", *argv, capsys=capsys)
        assert code == 2 and expected in err and err.count("\n") == 1 and out == "", err


def test_without_torch_compare_weights_names_the_extra(pth_pair):
    root, _ = pth_pair
    code = ("import sys; sys.modules['torch'] = None\n"  # what Python does for a package that is not installed
            "from msdebug_hooks.cli import main\n"
            f"sys.exit(main(['compare-weights', {str(root / 'source.pth')!r}, {str(root / 'source.pth')!r}]))")
    env = guarded(dict(fresh_env(), PYTHONPATH=str(ROOT)))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert 'pip install "msdebug-hooks[torch]"' in proc.stderr and "Traceback" not in proc.stderr


def test_importing_the_compare_package_imports_neither_torch_nor_mindspore():
    code = ("import sys, msdebug_hooks, msdebug_hooks.compare, msdebug_hooks.compare.torch, "
            "msdebug_hooks.compare.layers, msdebug_hooks.compare.weights, msdebug_hooks.cli\n"
            "msdebug_hooks.cli.build_parser()\n"
            "print(sorted(m for m in ('torch', 'mindspore') if m in sys.modules))")
    env = guarded(dict(fresh_env(), PYTHONPATH=str(ROOT)))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr


def test_a_step_cut_short_or_unwritable_leaves_a_readable_capture(tmp_path):
    target = tmp_path / "capture"
    target.mkdir()
    (target / "step_2").write_text("in the way")  # the step's directory cannot be made: every write there fails
    with pytest.warns(RuntimeWarning, match="cannot write 'conv1' of step 2 .* the rest of this step is not captured"):
        train_and_capture(target, steps=(1, 2, 3), num_steps=3)  # training goes on
    assert read_capture(target).steps == [1, 3]
    with pytest.raises(FileExistsError, match="already holds a layer capture"):
        StepRecorder(target, "pytorch")  # a second run never overwrites the first one's manifest
    recorder = StepRecorder(tmp_path / "partial", "pytorch")
    recorder.begin_step(1)
    recorder.add("conv1", "forward-output", np.ones((2, 2), np.float32))
    recorder.end_step()
    recorder.begin_step(2)
    recorder.add("conv1", "forward-output", np.ones((2, 2), np.float32))
    # the process dies in step 2, before end_step: the manifest lists the finished steps only
    assert read_capture(tmp_path / "partial").steps == [1]


def test_tuple_outputs_and_chosen_containers_are_recorded(tmp_path):
    class Recurrent(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh())
            self.lstm = torch.nn.LSTM(8, 5, batch_first=True)

        def forward(self, x):
            return self.lstm(self.encoder(x))

    model = Recurrent()
    recorder = TorchLayerRecorder(model, tmp_path / "capture", containers=["encoder"])
    with recorder.step(0):
        model(torch.ones(2, 3, 4))
    records = read_capture(tmp_path / "capture").step_records(0)
    assert [(r.name, r.shape) for r in records] == [
        ("encoder.0", (2, 3, 8)), ("encoder.1", (2, 3, 8)), ("encoder", (2, 3, 8)),
        ("lstm.0", (2, 3, 5)), ("lstm.1.0", (1, 2, 5)), ("lstm.1.1", (1, 2, 5))]
    with pytest.raises(ValueError, match=r"containers=\['decoder'\] is not allowed"):
        TorchLayerRecorder(model, tmp_path / "other", containers=["decoder"])


def test_an_in_place_layer_records_the_input_it_was_given(tmp_path):
    """torchvision's ``nn.ReLU(inplace=True)`` overwrites its input: the recorder copies inputs before the call."""
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Identity(), torch.nn.ReLU(inplace=True))
    recorder = TorchLayerRecorder(model, tmp_path / "capture", record_inputs=True)
    x = torch.tensor([[-1.0, 2.0, -3.0]])
    with recorder.step(0):
        model(x.clone())
    capture = read_capture(tmp_path / "capture")
    values = {r.name: np.asarray(capture.load(r)) for r in capture.step_records(0)}
    np.testing.assert_array_equal(values["1.in0"], [[-1.0, 2.0, -3.0]])
    np.testing.assert_array_equal(values["1"], [[0.0, 2.0, 0.0]])


def test_prefix_rules_of_a_mapping_file_pair_layers(tmp_path, capsys):
    rng = np.random.default_rng(7)
    a, b = CaptureWriter(tmp_path / "a", "mindspore"), CaptureWriter(tmp_path / "b", "pytorch")
    for order, part in enumerate(("attn", "ffn", "norm")):
        value = rng.standard_normal((3, 4)).astype(np.float32)
        a.add(1, order, f"layers.0.{part}", "forward-output", value)
        b.add(1, order, f"blocks.0.{part}", "forward-output", value)
    a.add(1, 3, "layers.1.ffn", "forward-output", np.ones((2, 2), np.float32))
    b.add(1, 3, "blocks.1.ffn", "forward-output", np.ones((5,), np.float32))
    a.flush(), b.flush()
    rules = tmp_path / "rules.txt"
    rules.write_text("layers.* -> blocks.*\n")
    report = compare_layers(tmp_path / "a", tmp_path / "b", mapping=load_name_mapping(rules))
    assert [(p.record_b.name, p.matched_by) for p in report.pairs] == [
        ("blocks.0.attn", "mapping"), ("blocks.0.ffn", "mapping"), ("blocks.0.norm", "mapping"),
        ("blocks.1.ffn", "mapping")]
    assert report.first_divergence.record_a.name == "layers.1.ffn"   # paired by the rule although shapes differ
    assert not report.pairs[3].result.comparable
