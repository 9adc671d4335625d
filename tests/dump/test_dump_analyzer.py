"""``DumpAnalyzer`` on a real MindSpore 2.10 LeNet sync dump: selection, values, and watchpoint hits that match an
independent numpy computation over the same files."""
from __future__ import annotations

import glob
import os

import numpy as np
import pytest

import msdebug_hooks as debugger      # a MindInsight script's "from mindinsight import debugger", import changed
from dump_fixtures import LENET_SOURCE, source_line, write_npy
from msdebug_hooks import DumpAnalyzer, Watchpoint
from msdebug_hooks.errors import ConfigError

SCOPE = "Default/network-WithLossCell/_backbone-LeNet5"
CONV1, CONV2 = f"{SCOPE}/conv1-Conv2d/Conv2D-op0", f"{SCOPE}/conv2-Conv2d/Conv2D-op0"


@pytest.fixture(scope="module")
def analyzer(lenet_dump):
    return DumpAnalyzer(str(lenet_dump))


def _output_files(dump_dir, iteration):
    return glob.glob(os.path.join(dump_dir, "rank_0", "Net", "0", str(iteration), "*.output.*.npy"))


def _file_key(path):
    """(flattened op name, slot) from a file name, parsed independently of the project's parser."""
    parts = os.path.basename(path).split(".")
    return ".".join(parts[1:-8]), int(parts[-4])


def test_ranks_iterations_history(analyzer):
    assert analyzer.get_ranks() == [0]
    assert analyzer.get_iterations() == [0, 1, 2] and analyzer.get_iterations(ranks=0) == [0, 1, 2]
    history = analyzer.get_graph_history()
    assert [(run.graph_name, run.iteration, run.has_data) for run in history] == [
        ("kernel_graph0", 0, True), ("kernel_graph0", 1, True), ("kernel_graph0", 2, True)]


def test_select_by_node_name_substring(analyzer):
    tensors = analyzer.select_tensors("conv1-Conv2d/Conv2D")
    assert {t.node.name for t in tensors} == {CONV1}
    assert sorted(t.iteration for t in tensors) == [0, 1, 2] and {t.slot for t in tensors} == {0}
    only = analyzer.select_tensors("conv1-Conv2d/Conv2D", iterations=[2], ranks=[0], slots=[0])
    assert [(t.iteration, t.rank, t.node.graph_name) for t in only] == [(2, 0, "kernel_graph0")]
    assert analyzer.select_tensors("conv1-conv2d/conv2d", case_sensitive=False, iterations=0)[0].node.name == CONV1


def test_select_by_regex(analyzer):
    tensors = analyzer.select_tensors(r"^Default/.*fc\d-Dense/MatMul-op\d+$", use_regex=True, iterations=1)
    assert sorted(t.node.name for t in tensors) == [f"{SCOPE}/fc{i}-Dense/MatMul-op0" for i in (1, 2, 3)]
    assert sorted(n.name for n in analyzer.select_nodes(r"^conv\d\.weight$", use_regex=True)) == [
        "conv1.weight", "conv2.weight"]


def test_select_by_code_stack(analyzer):
    line = source_line(LENET_SOURCE, "self.conv1(x)")
    tensors = analyzer.select_tensors(f"lenet.py:{line}", select_by="code_stack", iterations=0)
    names = {t.node.name for t in tensors}
    assert CONV1 in names and CONV2 not in names
    for tensor in tensors:
        assert any(f["file_path"] == str(LENET_SOURCE) and f["line_no"] == line for f in tensor.node.stack)
    fc3_line = source_line(LENET_SOURCE, "return self.fc3(x)")
    fc3 = {t.node.name for t in analyzer.select_tensors(f"lenet.py:{fc3_line}", select_by="code_stack")}
    assert f"{SCOPE}/fc3-Dense/MatMul-op0" in fc3 and CONV1 not in fc3
    # a line-number query is exact: line 6 is not line 6x
    assert analyzer.select_nodes("lenet.py:6", select_by="code_stack") == []
    # the code text itself can be searched, as MindInsight composed "<file>:<line>\n<code>"
    assert CONV1 in {n.name for n in analyzer.select_nodes("self.conv1(x)", select_by="code_stack")}


def test_value_equals_numpy_load_and_previous(analyzer, lenet_dump):
    (tensor,) = analyzer.select_tensors(r"^conv1\.weight$", iterations=2, use_regex=True, slots=0)
    (path,) = glob.glob(os.path.join(lenet_dump, "rank_0/Net/0/2/Parameter.conv1_weight.*.output.0.*.npy"))
    np.testing.assert_array_equal(tensor.value(), np.load(path))
    previous = tensor.previous()
    assert previous.iteration == 1 and previous.node == tensor.node
    assert not np.array_equal(previous.value(), tensor.value())      # the weight was updated
    assert tensor.previous().previous().previous() is None


def test_graph_neighbours(analyzer):
    (conv2,) = analyzer.select_nodes(CONV2)
    inputs = [n.name for n in analyzer.get_input_nodes(conv2)]
    assert inputs == [f"{SCOPE}/max_pool2d-MaxPool2d/MaxPool-op0", "conv2.weight"]
    assert f"{SCOPE}/relu-ReLU/ReLU-op1" in [n.name for n in analyzer.get_output_nodes(conv2)]
    in_tensors = conv2.get_input_tensors(iterations=1)
    assert [t.node.name for t in in_tensors] == inputs
    (conv2_out,) = conv2.get_output_tensors(iterations=1)
    assert f"{SCOPE}/relu-ReLU/ReLU-op1" in [n.name for n in analyzer.list_affected_nodes(conv2_out)]


def _threshold_between(values):
    """A threshold with a clear gap on both sides, so float32 vs float64 rounding cannot move a tensor across."""
    ordered = sorted(set(values))
    gaps = [(b / a, (a * b) ** 0.5) for a, b in zip(ordered, ordered[1:]) if a > 0]
    middle = [g for g in gaps[len(gaps) // 4: 3 * len(gaps) // 4] if g[0] > 1.05]
    return middle[len(middle) // 2][1]


def test_too_large_hits_match_numpy(analyzer, lenet_dump):
    expected_values = {}
    for iteration in (0, 1, 2):
        for path in _output_files(lenet_dump, iteration):
            value = np.load(path).astype(np.float64)
            expected_values[(iteration,) + _file_key(path)] = float(np.mean(np.abs(value))) if value.size else 0.0
    threshold = _threshold_between(expected_values.values())
    expected = {key for key, abs_mean in expected_values.items() if abs_mean > threshold}
    assert 10 < len(expected) < len(expected_values) - 10

    tensors = analyzer.select_tensors("")
    assert len(tensors) == len(expected_values)
    hits = analyzer.check_watchpoints([Watchpoint(tensors, debugger.TensorTooLargeCondition(abs_mean_gt=threshold))])
    got = {(h.tensor.iteration,) + _file_key(str(h.tensor.file)) for h in hits}
    assert got == expected
    for hit in hits:
        assert hit.error_code == 0
        (param,) = [p for p in hit.params if p.name == "abs_mean_gt"]
        key = (hit.tensor.iteration,) + _file_key(str(hit.tensor.file))
        assert param.hit and param.actual_value == pytest.approx(expected_values[key], rel=1e-5)
        assert "The setting for watchpoint is abs_mean_gt" in str(hit.get_hit_detail())
        assert "triggered on tensor" in str(hit)
    # sorted by iteration, then execution order
    keys = [analyzer._order_key(h.tensor) for h in hits]
    assert keys == sorted(keys)


def test_all_zero_hits_match_numpy_and_threads_agree(lenet_dump, monkeypatch):
    expected = set()
    for iteration in (0, 1, 2):
        for path in _output_files(lenet_dump, iteration):
            value = np.load(path)
            if value.size and 100.0 * np.count_nonzero(value == 0) / value.size >= 50:
                expected.add((iteration,) + _file_key(path))
    assert expected    # ReLU outputs are about half zeros
    from msdebug_hooks.dump import watchpoints as checker

    monkeypatch.setattr(checker, "PARALLEL_MIN_BYTES", 0)     # every tensor through the thread pool
    results = []
    for workers in (1, 2):
        analyzer = DumpAnalyzer(lenet_dump, workers=workers)
        watchpoint = Watchpoint(analyzer.select_tensors(""), debugger.TensorAllZeroCondition(zero_percentage_ge=50))
        hits = analyzer.check_watchpoints([watchpoint])
        results.append([(h.tensor.iteration, h.tensor.node.name, h.tensor.slot) for h in hits])
        assert {(h.tensor.iteration,) + _file_key(str(h.tensor.file)) for h in hits} == expected
    assert results[0] == results[1]


def test_weight_change_against_previous_iteration(analyzer, lenet_dump):
    tensors = analyzer.select_tensors(r"^conv1\.weight$", use_regex=True)
    assert [t.node.name for t in tensors] == ["conv1.weight"] * 3
    hits = analyzer.check_watchpoints(
        [Watchpoint(tensors, debugger.TensorChangeAboveThresholdCondition(abs_mean_update_ratio_gt=0.0))])
    by_iteration = {h.tensor.iteration: h for h in hits}
    assert by_iteration[0].error_code & 4 and by_iteration[0].get_hit_detail() is None
    assert "The previous step value cannot be found." in by_iteration[0].error_msg
    for iteration in (1, 2):
        now = np.load(glob.glob(f"{lenet_dump}/rank_0/Net/0/{iteration}/Parameter.conv1_weight.*")[0])
        before = np.load(glob.glob(f"{lenet_dump}/rank_0/Net/0/{iteration - 1}/Parameter.conv1_weight.*")[0])
        ratio = np.mean(np.abs(now.astype(np.float64) - before)) / (np.mean(np.abs(before.astype(np.float64))) + 1e-9)
        hit = by_iteration[iteration]
        assert hit.error_code == 0
        (param,) = [p for p in hit.params if p.name == "abs_mean_update_ratio_gt"]
        assert param.hit and param.actual_value == pytest.approx(ratio, rel=1e-5)


def test_seed_script_runs_with_only_the_import_changed(analyzer, lenet_dump, capsys):
    line = source_line(LENET_SOURCE, "self.conv1(x)")
    # MindInsight's offline-debugger sample, verbatim apart from the import and the dump path / source line
    analyzer = DumpAnalyzer(str(lenet_dump))
    tensors = analyzer.select_tensors(query_string=f"{LENET_SOURCE}:{line}", select_by="code_stack")
    watchpoint1 = Watchpoint(tensors, debugger.TensorTooLargeCondition(abs_mean_gt=0.001))
    watchpoint2 = Watchpoint(tensors, debugger.TensorAllZeroCondition(zero_percentage_ge=99.9))
    hits = analyzer.check_watchpoints([watchpoint1, watchpoint2])
    for hit in hits:
        print("The hit detail is: {}".format(hit.get_hit_detail()))
        tensor = hit.tensor
        print("The hit tensor info is: iteration: {}, graph_name: {}, node_name: {}, rank: {}, slot: {}"
              .format(tensor.iteration, tensor.node.graph_name, tensor.node.name, tensor.rank, tensor.slot))
    out = capsys.readouterr().out
    assert f"node_name: {CONV1}, rank: 0, slot: 0" in out and "graph_name: kernel_graph0" in out
    assert hits and all(h.get_threshold() is watchpoint1.condition for h in hits if h.error_code == 0
                        and h.watchpoint is watchpoint1)


def test_no_value_and_memory_limit_error_codes(tmp_path):
    graph_dir = tmp_path / "rank_0" / "Net" / "0"
    name = "Conv2D.Default_Conv2D-op0.0.0.{}.output.0.DefaultFormat.Float32.npy"
    write_npy(graph_dir / "0" / name.format(1), np.ones((4,), np.float32))
    (graph_dir / "1").mkdir()
    write_npy(graph_dir / "1" / "ReLU.Default_ReLU-op0.0.0.5.output.0.DefaultFormat.Float32.npy", np.ones(2))
    analyzer = DumpAnalyzer(tmp_path)
    (node,) = analyzer.select_nodes("Conv2D-op0")
    tensors = node.get_output_tensors()
    assert [t.iteration for t in tensors] == [0, 1] and tensors[1].value() is None
    condition = debugger.TensorTooLargeCondition(max_gt=10)
    assert analyzer.check_watchpoints([Watchpoint(tensors, condition)]) == []
    (missing,) = analyzer.check_watchpoints([Watchpoint(tensors, condition)], error_on_no_value=True)
    assert missing.tensor.iteration == 1 and missing.error_code == 32 and missing.error_msg == ["Tensor has no value."]


def test_an_unreadable_file_is_an_error_record_and_the_check_goes_on(tmp_path):
    graph_dir = tmp_path / "rank_0" / "Net" / "0"
    name = "Conv2D.Default_Conv2D-op0.0.0.{}.output.0.DefaultFormat.Float32.npy"
    for iteration in range(3):
        write_npy(graph_dir / str(iteration) / name.format(iteration + 1), np.full((64,), 100.0, np.float32))
    broken = graph_dir / "1" / name.format(2)
    broken.write_bytes(broken.read_bytes()[:200])          # header whole, data cut short
    analyzer = DumpAnalyzer(tmp_path)
    (node,) = analyzer.select_nodes("Conv2D-op0")
    hits = analyzer.check_watchpoints([Watchpoint(node.get_output_tensors(),
                                                  debugger.TensorTooLargeCondition(max_gt=10))])
    assert [(h.tensor.iteration, h.error_code) for h in hits] == [(0, 0), (1, 64), (2, 0)]
    (message,) = hits[1].error_msg
    assert message.startswith(f"The tensor file cannot be read: {broken}: expected ") and "truncated" in message
    assert hits[1].get_hit_detail() is None and hits[1].to_dict()["error_code"] == 64


def test_bad_arguments_are_named(analyzer, tmp_path):
    with pytest.raises(ConfigError, match="select_by"):
        analyzer.select_tensors("x", select_by="source")
    with pytest.raises(ConfigError, match="ranks.*present in the dump: \\[0\\]"):
        analyzer.select_tensors("x", ranks=3)
    with pytest.raises(ConfigError, match="iterations.*present in the dump: \\[0, 1, 2\\]"):
        analyzer.select_tensors("x", iterations=[7])
    with pytest.raises(ConfigError, match="slots"):
        analyzer.select_tensors("x", slots=["0"])
    with pytest.raises(ConfigError, match="query_string"):
        analyzer.select_tensors("(", use_regex=True)
    with pytest.raises(ConfigError, match="mem_limit.*2048"):
        DumpAnalyzer(tmp_path, mem_limit=100)
    with pytest.raises(ConfigError, match="condition"):
        Watchpoint([], condition="tensor_too_large")
    with pytest.raises(ConfigError, match="tensors\\[0\\]"):
        Watchpoint(["conv1"], debugger.TensorOverflowCondition())


def test_memory_limit_skips_a_tensor_without_reading_it(tmp_path):
    iteration_dir = tmp_path / "rank_0" / "Net" / "0" / "0"
    iteration_dir.mkdir(parents=True)
    path = iteration_dir / "MatMul.Default_MatMul-op0.0.0.1.output.0.DefaultFormat.Float32.npy"
    shape = (600 * 2 ** 20,)                     # 2.4 GiB of float32, stored as a sparse file
    header = {"descr": "<f4", "fortran_order": False, "shape": shape}
    with open(path, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, header)
        handle.truncate(handle.tell() + shape[0] * 4)
    analyzer = DumpAnalyzer(tmp_path, mem_limit=2048)
    (hit,) = analyzer.check_watchpoints([Watchpoint(analyzer.select_tensors("MatMul"),
                                                    debugger.TensorOverflowCondition())])
    assert hit.error_code == 8 and hit.error_msg == ["The tensor size exceeds the memory limit."]


def test_two_ranks_are_kept_apart_and_ordered(lenet_dump, tmp_path):
    for rank in (0, 1):          # a second rank that holds the same data: what a 2-card job writes, per card
        (tmp_path / f"rank_{rank}").symlink_to(lenet_dump / "rank_0", target_is_directory=True)
    analyzer = DumpAnalyzer(tmp_path)
    assert analyzer.get_ranks() == [0, 1] and analyzer.get_iterations(ranks=[1]) == [0, 1, 2]
    only_one = analyzer.select_tensors("conv1-Conv2d/Conv2D-op0", ranks=1)
    assert {t.rank for t in only_one} == {1} and len(only_one) == 3
    both = analyzer.select_tensors("conv1-Conv2d/Conv2D-op0")
    hits = analyzer.check_watchpoints([Watchpoint(both, debugger.TensorTooLargeCondition(abs_mean_gt=0))])
    assert [(h.tensor.iteration, h.tensor.rank) for h in hits] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    np.testing.assert_array_equal(hits[0].tensor.value(), hits[1].tensor.value())


def test_constants_are_read_for_every_iteration(tmp_path):
    graph_dir = tmp_path / "rank_0" / "Net" / "0"
    write_npy(graph_dir / "constants" / "Parameter.data-1.0.0.9.output.0.DefaultFormat.npy", np.arange(3.0))
    for iteration in (0, 1):
        write_npy(graph_dir / str(iteration) / "Add.Default_Add-op0.0.0.10.output.0.DefaultFormat.npy",
                  np.full(3, float(iteration)))
    analyzer = DumpAnalyzer(tmp_path)
    (constant,) = analyzer.select_nodes("data-1")
    assert constant.node_type == "constant"
    tensors = analyzer.select_tensors("data-1")
    assert [t.iteration for t in tensors] == [0, 1]
    for tensor in tensors:
        np.testing.assert_array_equal(tensor.value(), np.arange(3.0))
    hits = analyzer.check_watchpoints([Watchpoint(analyzer.select_tensors(""),
                                                  debugger.TensorAllZeroCondition(zero_percentage_ge=100))])
    assert [(h.tensor.iteration, h.tensor.node.name) for h in hits] == [(0, "Default_Add-op0")]


def test_code_stack_selection_on_a_dump_without_graphs_warns(lenet_dump, tmp_path):
    import shutil

    copy = tmp_path / "dump"
    shutil.copytree(lenet_dump, copy)
    shutil.rmtree(copy / "rank_0" / "graphs")
    analyzer = DumpAnalyzer(copy)
    line = source_line(LENET_SOURCE, "self.conv1(x)")
    with pytest.warns(UserWarning, match="graphs/ directory is missing"):
        assert analyzer.select_tensors(f"lenet.py:{line}", select_by="code_stack") == []
    assert any("no graphs/ms_output_trace_code_graph_0.ir" in note for note in analyzer.layout_warnings())
    assert DumpAnalyzer(lenet_dump).layout_warnings() == []
