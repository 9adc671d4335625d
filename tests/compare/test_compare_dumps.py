"""compare-dumps on real MindSpore dumps: a changed layer is named with its source line, identical runs pass,
shifted op ids still match, and broken inputs are reported, never passed and never a traceback."""
from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest

from compare_fixtures import CHANGE_AFTER
from project import EXAMPLES
from dump_fixtures import source_line, write_npy
from msdebug_hooks.cli import main
from msdebug_hooks.compare import DumpComparer
from msdebug_hooks.compare.dumps import BY_NAME, BY_ORDER
from msdebug_hooks.errors import ConfigError

pytestmark = pytest.mark.mindspore

LENET = EXAMPLES / "lenet.py"


def _order_of_first_divergence(result):
    first = result.first_divergence
    return next(p.order for p in result.pairs if p.node_a == first.node_a and p.iteration == first.iteration)


def _files(dump, pattern):
    found = sorted(dump.glob(f"rank_0/Net/0/0/{pattern}"))
    assert found, pattern
    return found


def test_changed_layer_is_named_with_its_source_line(two_runs_example, tmp_path, capsys):
    workdir, story = two_runs_example
    dump_b, dump_a = workdir / "b" / "dump", workdir / "a" / "dump"
    result = DumpComparer(dump_b, dump_a).compare(progress=False)
    step = CHANGE_AFTER + 1
    assert sorted({p.iteration for p in result.pairs}) == [step - 2, step - 1]   # around_step(step)
    assert all(p.comparison.passed for p in result.pairs if p.iteration == step - 2)
    first = result.first_divergence
    assert first.iteration == step - 1
    assert first.node_a.endswith("/fc2-Dense/MatMul-op0") and first.node_a == first.node_b
    line = source_line(LENET, "self.fc2(x)")
    assert first.source_a.startswith(f"{LENET}:{line}  ") and first.source_b.startswith(f"{LENET}:{line}  ")
    assert first.inputs_differed is True and first.differing_inputs == ("input 1 (fc2.weight)",)
    assert first.verdict == "error" and result.exit_code() == 1
    # every operator before it passed at that iteration
    first_order = _order_of_first_divergence(result)
    before = [p for p in result.pairs if p.iteration == step - 1 and p.order < first_order]
    assert len(before) > 20 and all(p.comparison.passed for p in before)
    # the CLI says the same, and writes every pair
    code = main(["compare-dumps", str(dump_b), str(dump_a), "--csv", str(tmp_path / "p.csv"),
                 "--json", str(tmp_path / "p.json"), "--no-progress"])
    out = capsys.readouterr().out
    assert code == 1
    assert "first diverging operator (iteration 2, rank 0): MatMul " in out
    assert f"source A: {LENET}:{line}  x = self.relu(self.fc2(x))" in out
    assert "its inputs already differed (input 1 (fc2.weight))" in out
    with open(tmp_path / "p.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(result.pairs) and {"cosine", "max_rel_error", "verdict", "node_a"} <= set(rows[0])
    saved = json.loads((tmp_path / "p.json").read_text())
    assert saved["first_divergence"]["node_a"] == first.node_a and len(saved["pairs"]) == len(rows)
    # and the example told the story
    assert f"the runs part at step {step}" in story and "first diverging operator" in story
    assert f"the story: the losses part at step {step}" in story and "input 1 (fc2.weight) already differed" in story
    assert (workdir / "loss.png").is_file()


def test_identical_runs_pass_every_pair(lenet_dump, lenet_dump_rerun, capsys):
    result = DumpComparer(lenet_dump_rerun, lenet_dump).compare(progress=False)
    assert {p.iteration for p in result.pairs} == {0}
    assert len(result.pairs) > 150 and all(p.comparison.verdict == "pass" for p in result.pairs)
    assert all(p.matched_by == BY_NAME for p in result.pairs)
    assert not result.unmatched_a and not result.unmatched_b and result.first_divergence is None
    assert result.exit_code() == 0
    assert main(["compare-dumps", str(lenet_dump_rerun), str(lenet_dump), "--no-progress"]) == 0
    assert "no operator differs beyond the noise of its dtype (largest |a-b|/|b|: 0.0e+00)" in capsys.readouterr().out


def test_shifted_op_ids_still_match_by_scope_type_order_and_shape(lenet_dump, lenet_dump_shifted):
    result = DumpComparer(lenet_dump, lenet_dump_shifted, iterations=0).compare(progress=False)
    relu_a = "Default/network-WithLossCell/_backbone-LeNet5/relu-ReLU/ReLU-op"
    relu_b = "Default/network-WithLossCell/_backbone-ShiftedLeNet/relu-ReLU/ReLU-op"   # the class was renamed too
    pairs = {(p.node_a, p.io, p.slot): p for p in result.pairs}
    # A's ReLU after conv2 is op1; in the shifted graph the extra ReLU took op1 and that one became op2
    after_conv2 = pairs[(relu_a + "1", "output", 0)]
    assert after_conv2.node_b == relu_b + "2" and after_conv2.matched_by == BY_ORDER
    assert pairs[(relu_a + "0", "output", 0)].node_b == relu_b + "0"
    assert pairs[(relu_a + "3", "output", 0)].node_b == relu_b + "4"
    assert result.unmatched_b == [f"rank 0 graph 0: {relu_b}1",
                                  "rank 0 graph 0: Gradients/Default/network-WithLossCell/_backbone-ShiftedLeNet/"
                                  "relu-ReLU/Grad_ReLU/ReluGrad-op4"]
    assert not result.unmatched_a
    conv1 = [p for p in result.pairs if p.node_a.endswith("conv1-Conv2d/Conv2D-op0")]
    assert conv1 and all(p.node_b.endswith("_backbone-ShiftedLeNet/conv1-Conv2d/Conv2D-op0") for p in conv1)
    # ReLU is idempotent: every matched value is the same
    assert all(p.comparison.verdict == "pass" for p in result.pairs), [
        (p.node_a, p.node_b, p.comparison.reason) for p in result.pairs if not p.comparison.passed][:3]
    assert result.exit_code() == 0


@pytest.fixture
def broken_copy(lenet_dump_rerun, tmp_path):
    copy = tmp_path / "dump"
    shutil.copytree(lenet_dump_rerun, copy)
    return copy


def test_truncated_npy_is_not_comparable_and_not_clean(lenet_dump_rerun, broken_copy, capsys):
    target = _files(broken_copy, "Conv2D.*conv1*output.0.*.npy")[0]
    target.write_bytes(target.read_bytes()[:200])
    result = DumpComparer(broken_copy, lenet_dump_rerun).compare(progress=False)
    bad = [p for p in result.pairs if p.comparison.verdict == "not comparable"]
    assert len(bad) == 1 and "truncated" in bad[0].comparison.reason and bad[0].comparison.reason.startswith("A: ")
    assert result.first_divergence is None and result.exit_code() == 2
    assert main(["compare-dumps", str(broken_copy), str(lenet_dump_rerun), "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert "1 pair(s) could not be compared: the dumps are not shown to agree" in captured.err
    assert "Traceback" not in captured.err + captured.out


def test_garbage_npy_and_changed_shape_and_dtype(lenet_dump_rerun, broken_copy):
    garbage = _files(broken_copy, "MaxPool.*output.0.*.npy")[0]
    garbage.write_bytes(b"not a numpy file at all")
    reshaped = _files(broken_copy, "Flatten.*output.0.*.npy")[0]
    write_npy(reshaped, np.zeros((4, 8), np.float32))
    retyped = _files(broken_copy, "BiasAdd.*fc1*output.0.*.npy")[0]
    write_npy(retyped, np.zeros(np.load(retyped).shape, np.int32))
    result = DumpComparer(broken_copy, lenet_dump_rerun, inputs=False).compare(progress=False)
    reasons = {p.node_a.rsplit("/", 1)[-1]: p.comparison.reason for p in result.pairs
               if p.comparison.verdict == "not comparable"}
    assert "a .npy file" in reasons["MaxPool-op0"]
    assert reasons["Flatten-op0"].startswith("shapes differ: [4, 8] vs [32, ")
    assert reasons["BiasAdd-op0"] == "dtypes differ: int32 vs float32"
    assert result.exit_code() == 2 and result.first_divergence is None


def test_bad_dump_arguments_exit_2(lenet_dump_rerun, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("hello")
    cases = [
        ([str(tmp_path), str(lenet_dump_rerun)], "expected a MindSpore dump directory"),
        ([str(tmp_path / "missing"), str(lenet_dump_rerun)], "path does not exist"),
        ([str(lenet_dump_rerun), str(lenet_dump_rerun), "--iterations", "7"], "iterations both dumps hold"),
        ([str(lenet_dump_rerun), str(lenet_dump_rerun), "--ranks", "3"], "ranks in both dumps: [0]"),
        ([str(lenet_dump_rerun), str(lenet_dump_rerun), "--rtol", "-1"], "Tolerance.rtol=-1.0 is not allowed"),
    ]
    for args, message in cases:
        assert main(["compare-dumps", *args, "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
    with pytest.raises(ConfigError, match="diverge_at"):
        DumpComparer(lenet_dump_rerun, lenet_dump_rerun, diverge_at="sometimes")


def test_rank_selection_and_progress_bar(lenet_dump_rerun, capsys):
    result = DumpComparer(lenet_dump_rerun, lenet_dump_rerun, ranks=0, rank_b=0,
                          iterations=[0]).compare(progress=True)
    assert result.exit_code() == 0 and {(p.rank_a, p.rank_b) for p in result.pairs} == {(0, 0)}
    assert "comparing tensors" in capsys.readouterr().err        # tqdm's bar went to stderr
    with pytest.raises(ConfigError, match=r"rank_b=5 is not allowed: a rank of .*: \[0\]"):
        DumpComparer(lenet_dump_rerun, lenet_dump_rerun, rank_b=5).compare(progress=False)
    with pytest.raises(ConfigError, match="exactly one rank of A"):
        DumpComparer(lenet_dump_rerun, lenet_dump_rerun, ranks=[0, 1], rank_b=0)
    outputs_only = DumpComparer(lenet_dump_rerun, lenet_dump_rerun, inputs=False).compare(progress=False)
    assert outputs_only.pairs and all(p.io == "output" for p in outputs_only.pairs)


def test_different_input_data_is_named_as_the_data(lenet_dump_rerun, broken_copy, capsys):
    data = _files(broken_copy, "Parameter.inputs0.*output.0.*.npy")[0]
    write_npy(data, np.load(data) * np.float32(2))
    result = DumpComparer(broken_copy, lenet_dump_rerun).compare(progress=False)
    first = result.first_divergence
    assert first.node_a == "inputs0" and first.node_type == "parameter" and result.exit_code() == 1
    assert "fed different data or weights" in first.explanation()
    assert main(["compare-dumps", str(broken_copy), str(lenet_dump_rerun), "--no-progress"]) == 1
    assert "first diverging operator (iteration 0, rank 0): Parameter inputs0" in capsys.readouterr().out


def test_a_weight_0_1_percent_apart_is_named_as_the_root_with_its_first_consumer(lenet_dump_fc2_nudged,
                                                                                lenet_dump_rerun, capsys):
    result = DumpComparer(lenet_dump_fc2_nudged, lenet_dump_rerun).compare(progress=False)
    first = result.first_divergence
    assert first.node_a.endswith("/fc2-Dense/MatMul-op0") and first.root == "fc2.weight", first
    assert first.root_error == pytest.approx(1e-3, rel=1e-3)
    line = source_line(LENET, "self.fc2(x)")
    assert first.source_a.startswith(f"{LENET}:{line}  ")
    # every operator before it agrees to float32 noise (identical here), so nothing upstream is blamed
    before = [p for p in result.pairs if p.iteration == first.iteration and p.io == "output"
              and p.order < _order_of_first_divergence(result)]
    assert before and all(p.error() == 0.0 for p in before)
    assert main(["compare-dumps", str(lenet_dump_fc2_nudged), str(lenet_dump_rerun), "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "the runs start the step from different values of fc2.weight (0.1 % apart" in out, out
    assert "this is its first consumer" in out and "itself computes differently" not in out
