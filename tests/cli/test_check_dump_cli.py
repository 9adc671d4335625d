"""``msdebug check-dump`` on real dumps: the NaN-making layer and step come first; bad input exits 2 with the reason."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import find_first_nan
from project import ROOT
from dump_fixtures import LENET_SOURCE, NAN_SOURCE, source_line, write_npy
from msdebug_hooks.cli import main

SQRT_NODE = "Default/network-WithLossCell/_backbone-SqrtLeNet/scale-SqrtScale/Sqrt-op0"


def run_cli(capsys, *argv):
    code = main(["check-dump", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_first_nan_is_the_sqrt_layer_at_the_bad_step(nan_dump, capsys):
    code, out, _ = run_cli(capsys, nan_dump, "--watch", "tensor_overflow", "--json")
    assert code == 1
    report = json.loads(out)
    first = report["results"][0]
    assert (first["node_name"], first["iteration"], first["slot"]) == (SQRT_NODE, find_first_nan.BAD_STEP, 0)
    sqrt_line = source_line(NAN_SOURCE, "ops.sqrt(x + 1.0)")
    assert first["source"][-1] == f"{NAN_SOURCE}:{sqrt_line}"
    # nothing overflows before the bad step
    assert min(result["iteration"] for result in report["results"]) == find_first_nan.BAD_STEP
    # the table names the same layer and iteration on its first row
    code, out, _ = run_cli(capsys, nan_dump, "--watch", "tensor_overflow", "--limit", "3")
    first_row = out.splitlines()[2].split()
    assert code == 1 and first_row[:3] == [str(find_first_nan.BAD_STEP), "0", SQRT_NODE]
    assert first_row[-1] == f"find_first_nan.py:{sqrt_line}"


def test_example_finds_the_same_operator(nan_dump):
    hit = find_first_nan.find_first_nan(nan_dump)
    assert hit.tensor.node.name == SQRT_NODE and hit.tensor.iteration == find_first_nan.BAD_STEP
    assert np.isnan(hit.tensor.value()).any()
    assert hit.tensor.node.source_lines()[-1]["code_line"] == "return ops.sqrt(x + 1.0)"


def test_value_watch_reports_nan_as_error_after_the_bad_step(nan_dump, capsys):
    code, out, _ = run_cli(capsys, nan_dump, "--watch", "tensor_too_large:abs_mean_gt=1e30",
                           "--iterations", f"0-{find_first_nan.BAD_STEP}", "--json")
    results = json.loads(out)["results"]
    assert code == 1 and results[0]["node_name"] == SQRT_NODE
    assert results[0]["error_code"] & 1 and results[0]["error_msg"] == ["Tensor contains NaN."]


def test_clean_dump_has_no_overflow(lenet_dump, capsys):
    code, out, _ = run_cli(capsys, lenet_dump, "--watch", "tensor_overflow", "--watch", "weight_overflow")
    assert code == 0 and "0 hit(s)" in out


def test_select_by_code_stack_and_iterations(lenet_dump, capsys):
    line = source_line(LENET_SOURCE, "self.conv1(x)")
    code, out, _ = run_cli(capsys, lenet_dump, "--watch", "tensor_too_large:abs_mean_gt=0",
                           "--select", f"code_stack=lenet.py:{line}", "--iterations", "1-2", "--ranks", "0", "--json")
    report = json.loads(out)
    assert code == 1 and report["hits"] == report["tensors_checked"] > 0
    assert {r["iteration"] for r in report["results"]} == {1, 2}
    assert any(r["node_name"].endswith("conv1-Conv2d/Conv2D-op0") for r in report["results"])
    code, out, _ = run_cli(capsys, lenet_dump, "--watch", "tensor_all_zero:zero_percentage_ge=100",
                           "--select", "node_name=regex:ReLU-op\\d$", "--select", "node_name=fc1-Dense/BiasAdd")
    assert code == 0 and out.startswith("15 tensors checked")     # 4 ReLU + 1 BiasAdd, 3 iterations


@pytest.mark.parametrize("argv, message", [
    (["--watch", "tensor_huge"], "tensor_huge"),
    (["--watch", "tensor_too_large:foo=1"], "foo"),
    (["--watch", "tensor_too_large:abs_mean_gt=1,max_gt=2"], "max_gt"),
    (["--watch", "tensor_too_large:abs_mean_gt=big"], "big"),
    (["--watch", "tensor_overflow", "--iterations", "9-3"], "--iterations='9-3' is not allowed: ranges from low to "
                                                            "high like 2-3, 0,5 or 1|4-6 (9-3 is reversed: 3-9)"),
    (["--watch", "tensor_overflow", "--iterations", "7"], "iterations present in the dump"),
    (["--watch", "tensor_overflow", "--ranks", "4"], "ranks present in the dump"),
    (["--watch", "tensor_overflow", "--select", "name=conv"], "--select"),
    ([], "--watch"),
])
def test_bad_input_exits_2(lenet_dump, capsys, argv, message):
    code, out, err = run_cli(capsys, lenet_dump, *argv)
    assert code == 2 and message in err and out == ""


def test_not_a_dump_and_truncated_file(tmp_path, capsys):
    code, _, err = run_cli(capsys, tmp_path, "--watch", "tensor_overflow")
    assert code == 2 and str(tmp_path) in err and "rank_<id>" in err
    iteration = tmp_path / "dump" / "rank_0" / "Net" / "0" / "0"
    path = write_npy(iteration / "ReLU.Default_ReLU-op0.0.0.7.output.0.DefaultFormat.Float32.npy",
                     np.ones(1000, np.float32))
    path.write_bytes(path.read_bytes()[:600])
    code, out, err = run_cli(capsys, tmp_path / "dump", "--watch", "tensor_overflow")
    assert code == 3 and "could not read 1 of 1 selected tensor(s)" in err      # a row, not an abort
    row = out.splitlines()[2]
    assert path.name in row and "truncated" in row and "The tensor file cannot be read" in row


def test_console_script(nan_dump):
    proc = subprocess.run([sys.executable, "-m", "msdebug_hooks", "check-dump", str(nan_dump), "--watch",
                           "tensor_overflow", "--limit", "1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert SQRT_NODE in proc.stdout.splitlines()[2]


@pytest.mark.mindspore
def test_example_script_end_to_end():
    proc = subprocess.run([sys.executable, str(NAN_SOURCE)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    sqrt_line = source_line(NAN_SOURCE, "ops.sqrt(x + 1.0)")
    assert f"first NaN/Inf: iteration {find_first_nan.BAD_STEP}, output 0 of {SQRT_NODE}" in proc.stdout
    assert f"source line: {NAN_SOURCE}:{sqrt_line}: return ops.sqrt(x + 1.0)" in proc.stdout


# -- a check that could not look never reads as clean -----------------------------------------------------------------

@pytest.fixture
def dump_copy(lenet_dump, tmp_path):
    """A private copy of the real LeNet dump, to damage."""
    copy = tmp_path / "dump"
    shutil.copytree(lenet_dump, copy)
    return copy


def _output_file(dump_dir, iteration: int, needle: str):
    return next(p for p in sorted((dump_dir / "rank_0" / "Net" / "0" / str(iteration)).glob("*.npy"))
                if needle in p.name and ".output.0." in p.name)


def test_a_select_that_matches_nothing_is_an_error_not_zero_hits(lenet_dump, capsys):
    code, out, err = run_cli(capsys, lenet_dump, "--watch", "tensor_overflow", "--select", "node_name=NoSuchOp")
    assert code == 2 and out == "" and "0 hit(s)" not in out
    assert err.strip() == "msdebug check-dump: error: nothing was checked: no dumped tensor matches " \
                          "--select node_name=NoSuchOp"
    # one of two selects matching nothing is said, and the other one is checked
    code, out, err = run_cli(capsys, lenet_dump, "--watch", "tensor_overflow", "--select", "node_name=NoSuchOp",
                             "--select", "node_name=ReLU")
    assert code == 0 and "warning: --select node_name=NoSuchOp matches no dumped tensor" in err
    assert out.startswith("24 tensors checked")          # ReLU and ReluGrad, 4 each, 3 iterations


def test_without_graphs_code_stack_selects_nothing_and_says_why(dump_copy, capsys):
    shutil.rmtree(dump_copy / "rank_0" / "graphs")
    line = source_line(LENET_SOURCE, "self.conv1(x)")
    code, out, err = run_cli(capsys, dump_copy, "--watch", "tensor_overflow", "--select", f"code_stack=lenet.py:{line}")
    assert code == 2 and out == ""
    assert "warning: rank_0, graph 0: no graphs/ms_output_trace_code_graph_0.ir, so nodes have no source lines" in err
    assert f"error: nothing was checked: no dumped tensor matches --select code_stack=lenet.py:{line}" in err


def test_without_execution_order_the_order_warning_is_given(dump_copy, capsys):
    shutil.rmtree(dump_copy / "rank_0" / "execution_order")
    code, out, err = run_cli(capsys, dump_copy, "--watch", "tensor_overflow")
    assert code == 0 and "0 hit(s)" in out
    assert "no execution_order/ms_execution_order_graph_0.csv, so hits within an iteration are not in the order " \
           "the operators ran" in err


def test_missing_tensor_files_are_counted_and_change_the_exit_code(dump_copy, capsys):
    _output_file(dump_copy, 1, "MaxPool-op0").unlink()
    code, out, err = run_cli(capsys, dump_copy, "--watch", "tensor_overflow")
    assert code == 3
    assert out.splitlines()[0].endswith("0 hit(s); could not read 1 tensor(s) (1 with no file; --error-on-no-value "
                                        "lists them)")
    assert "could not read 1 of " in err and "they were not checked" in err
    code, out, _ = run_cli(capsys, dump_copy, "--watch", "tensor_overflow", "--error-on-no-value")
    row = out.splitlines()[2]
    assert code == 3 and "MaxPool-op0" in row and "Tensor has no value." in row


def test_a_truncated_npy_is_one_row_and_the_rest_is_checked(dump_copy, capsys):
    bad = _output_file(dump_copy, 1, "ReLU-op0")
    bad.write_bytes(bad.read_bytes()[:300])
    hot = _output_file(dump_copy, 2, "conv1-Conv2d_Conv2D-op0")          # a real hit beside the broken file
    value = np.load(hot)
    value.flat[0] = np.nan
    write_npy(hot, value)
    code, out, err = run_cli(capsys, dump_copy, "--watch", "tensor_overflow", "--json")
    report = json.loads(out)
    assert code == 1 and report["hits"] == 1 and report["tensors_not_checked"] == 1
    rows = {r["node_name"].rsplit("/", 1)[-1]: r for r in report["results"]}
    assert rows["Conv2D-op0"]["iteration"] == 2 and rows["Conv2D-op0"]["error_code"] == 0
    assert rows["ReLU-op0"]["error_code"] == 64 and "truncated" in rows["ReLU-op0"]["error_msg"][0]
    assert bad.name in rows["ReLU-op0"]["error_msg"][0]
    assert "could not read 1 of" in err


# -- words a user should see -----------------------------------------------------------------------------------------

def test_a_weight_condition_checks_only_weights_under_the_name_typed(lenet_dump, capsys):
    code, out, _ = run_cli(capsys, lenet_dump, "--watch", "weight_too_large:abs_mean_gt=0", "--iterations", "2",
                           "--json")
    report = json.loads(out)
    names = {r["node_name"] for r in report["results"]}
    assert code == 1 and {r["condition"] for r in report["results"]} == {"weight_too_large"}
    assert "conv1.weight" in names and "moments.fc3.weight" in names
    assert not any("/" in name or name.startswith("inputs") for name in names)      # no activation, no input
    code, out, _ = run_cli(capsys, lenet_dump, "--watch", "weight_overflow", "--limit", "1")
    assert code == 0 and out.startswith("57 tensors checked")     # 19 parameters x 3 iterations, nothing else


def test_gradient_condition_checks_only_gradients(lenet_dump, capsys):
    code, out, _ = run_cli(capsys, lenet_dump, "--watch", "gradient_too_large:abs_mean_gt=0", "--json")
    results = json.loads(out)["results"]
    assert code == 1 and results and all(r["node_name"].startswith("Gradients/") for r in results)
    assert {r["condition"] for r in results} == {"gradient_too_large"}


def test_negative_limit_is_refused(lenet_dump, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["check-dump", str(lenet_dump), "--watch", "tensor_overflow", "--limit", "-1"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert "argument --limit: '-1' is not allowed: a whole number >= 0 (0 shows every hit)" in err


def test_no_watch_says_what_to_give_without_none(lenet_dump, capsys):
    code, out, err = run_cli(capsys, lenet_dump)
    assert code == 2 and "None" not in err
    assert err.strip() == "msdebug check-dump: error: --watch is not set: at least one --watch " \
                          "NAME[:PARAM=VALUE,...], e.g. --watch tensor_overflow"


def test_help_is_plain_text_with_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        main(["check-dump", "--help"])
    text = capsys.readouterr().out
    assert "``" not in text and "::" not in text
    assert "3  no hit, but N tensors could not be checked" in text and "2  bad input" in text


def test_activation_range_checks_only_activation_outputs(lenet_dump, capsys):
    code, out, _ = run_cli(capsys, lenet_dump, "--watch", "activation_range:max_min_gt=-1", "--json")
    results = json.loads(out)["results"]
    assert code == 1 and {r["node_name"].rsplit("/", 1)[-1] for r in results} == {f"ReLU-op{i}" for i in range(4)}
    assert len(results) == 12 and {r["condition"] for r in results} == {"activation_range"}


def test_the_readme_source_line_selects_the_conv1_layer(lenet_dump, capsys):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = set(re.findall(r"lenet\.py:(\d+)", readme))
    assert len(lines) == 1, lines                    # the snippet and the command name the same line
    (line,) = lines
    assert "self.conv1(x)" in LENET_SOURCE.read_text(encoding="utf-8").splitlines()[int(line) - 1]
    code, out, _ = run_cli(capsys, lenet_dump, "--watch", "tensor_too_large:abs_mean_gt=1e3", "--select",
                           f"code_stack=lenet.py:{line}", "--json")
    report = json.loads(out)
    assert code == 0 and report["tensors_checked"] == 12 and report["tensors_not_checked"] == 0


def test_a_corrupt_execution_order_file_is_named_not_a_traceback(dump_copy, capsys):
    csv_file = dump_copy / "rank_0" / "execution_order" / "ms_execution_order_graph_0.csv"
    csv_file.write_bytes(b"\xff\xfe\x00bad\n")
    code, out, err = run_cli(capsys, dump_copy, "--watch", "tensor_overflow")
    assert code == 2 and out == ""
    assert err.strip() == f"msdebug check-dump: error: {csv_file}: expected a UTF-8 text file as MindSpore writes " \
                          "it (byte 0: invalid start byte)"


@pytest.mark.mindspore
def test_a_pynative_dump_without_jit_is_said_to_hold_no_forward_or_backward_pass(tmp_path, lenet_dump, capsys):
    """Issue 32 point 4: MindSpore dumps what runs as a graph, so the tutorial's PyNative loop (no ``@jit``) dumps
    its optimizer alone; check-dump says so instead of reading the updates as the whole step. A GRAPH_MODE dump
    (backward pass present) gets no such line."""
    from msdebug_hooks import DumpConfig
    from project import fresh_env

    config = DumpConfig(path=str(tmp_path / "dump"), net_name="Net", iteration="all").write(tmp_path / "c.json")
    env = dict(fresh_env(), MINDSPORE_DUMP_CONFIG=str(config), GLOG_v="3",
               PYTHONPATH=f"{ROOT / 'examples'}:{ROOT}")
    subprocess.run([sys.executable, str(ROOT / "tests" / "scripts" / "ending_train.py"), "--style", "functional",
                    "--end", "none", "--steps", "1"], env=env, check=True, capture_output=True, timeout=240)
    code, out, err = run_cli(capsys, tmp_path / "dump", "--watch", "tensor_overflow")
    assert code == 0 and out.startswith("28 tensors checked"), out + err     # one step of updates
    assert re.search(r"warning: rank_0: no operator of a backward pass \(none under Gradients/\); only \d+ "
                     r"operator\(s\) of type ApplyMomentum, .* a PyNative training without @mindspore\.jit dumps its "
                     "optimizer alone", err), err
    code, _, err = run_cli(capsys, lenet_dump, "--watch", "tensor_overflow")
    assert "backward pass" not in err
