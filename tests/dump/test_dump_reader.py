"""The dump reader on a real MindSpore 2.10 sync dump of LeNet, plus synthetic layouts a CPU run cannot write."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from dump_fixtures import LENET_SOURCE, source_line, write_npy
from msdebug_hooks.dump import npy
from msdebug_hooks.dump.ir_trace import parse_trace_line
from msdebug_hooks.dump.layout import flatten_name, parse_tensor_file_name
from msdebug_hooks.dump.reader import DumpDir
from msdebug_hooks.errors import DumpError

CONV1 = "Default/network-WithLossCell/_backbone-LeNet5/conv1-Conv2d/Conv2D-op0"


def test_file_names_both_formats_and_non_tensor_files():
    new = parse_tensor_file_name("Conv2D.Default_net_conv1-Conv2d_Conv2D-op0.0.0.1795305354152992.output.0."
                                 "DefaultFormat.Float32.npy")
    assert (new.op_type, new.op_name, new.io, new.slot, new.format, new.dtype, new.timestamp) == (
        "Conv2D", "Default_net_conv1-Conv2d_Conv2D-op0", "output", 0, "DefaultFormat", "Float32", 1795305354152992)
    old = parse_tensor_file_name("Conv2D.Conv2D-op12.0.0.1623124369613540.input.1.NC1HWC0.npy")
    assert (old.op_name, old.io, old.slot, old.format, old.dtype) == ("Conv2D-op12", "input", 1, "NC1HWC0", None)
    const = parse_tensor_file_name("Parameter.data-3.0.0.1623124369613540.output.0.DefaultFormat.npy")
    assert (const.op_type, const.op_name) == ("Parameter", "data-3")
    for other in ("statistic.csv", "mapping.csv", "Conv2D.Conv2D-op12.json", "x.npy", "a.b.c.d.output.x.F.npy"):
        assert parse_tensor_file_name(other) is None
    assert flatten_name("Default/net/conv1.weight") == "Default_net_conv1_weight"


def test_trace_lines_of_2x_and_1x():
    new = parse_trace_line("      # In file /w/lenet.py:63, 42~52/            x = self.conv1(x)/")
    assert (new.file_path, new.line_no, new.code_line) == ("/w/lenet.py", 63, "x = self.conv1(x)")
    ranged = parse_trace_line("# In file /w/lenet.py:57~63, 8~30/        def construct(self, x):/")
    assert ranged.line_no == 57
    old = parse_trace_line("# In file ./train_alexnet.py(175)/ x = self.conv3(x)/")
    assert (old.file_path, old.line_no, old.code_line) == ("./train_alexnet.py", 175, "x = self.conv3(x)")
    assert parse_trace_line("# Fullname with scope: (Default/x)") is None


def test_real_dump_layout(lenet_dump):
    dump = DumpDir(lenet_dump)
    assert dump.layout == "sync"
    assert dump.ranks() == [0] and dump.graphs(0) == [0]
    assert dump.iterations() == [0, 1, 2]
    assert dump.graph_history(0, 0) == [0, 1, 2]
    assert dump.metadata(0)["config"]["device_target"] == "CPU"
    assert dump.metadata(0)["data_dump"]["common_dump_settings"]["net_name"] == "Net"
    for iteration in (0, 1, 2):
        iteration_dir = Path(lenet_dump) / "rank_0" / "Net" / "0" / str(iteration)
        on_disk = sorted(n for n in os.listdir(iteration_dir) if n.endswith(".npy"))
        listed = sorted(f.path.name for f in dump.tensor_files(0, 0, iteration))
        assert listed == on_disk and len(listed) > 100
    order = dump.execution_order(0, 0)
    assert order[0] == CONV1 and any("ApplyMomentum" in name for name in order)
    assert dump.statistics(0, 0, 0) == []          # CPU cannot write statistic.csv


def test_ir_trace_ties_operators_to_source_lines(lenet_dump):
    graph = DumpDir(lenet_dump).ir_graph(0, 0)
    assert graph.graph_name == "kernel_graph0"
    conv1 = graph.nodes[CONV1]
    line = source_line(LENET_SOURCE, "self.conv1(x)")
    assert any(f.file_path == str(LENET_SOURCE) and f.line_no == line for f in conv1.stack)
    assert conv1.op_type == "Conv2D" and conv1.inputs[0] == "inputs0"
    assert graph.nodes["conv1.weight"].is_weight and not graph.nodes["inputs0"].is_weight


def test_arrays_are_memory_mapped_and_equal_numpy_load(lenet_dump):
    dump = DumpDir(lenet_dump)
    item = next(f for f in dump.tensor_files(0, 0, 1) if f.op_name == flatten_name(CONV1) and f.io == "output")
    value = npy.load(item.path)
    assert isinstance(value, np.memmap) and not value.flags.writeable
    np.testing.assert_array_equal(value, np.load(item.path))
    header = npy.read_header(item.path)
    assert header.shape == (32, 6, 28, 28) and header.dtype == np.float32


def test_not_a_dump_directory(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(DumpError) as info:
        DumpDir(tmp_path)
    assert str(tmp_path) in str(info.value) and "rank_<id>" in str(info.value) and "notes.txt" in str(info.value)
    with pytest.raises(DumpError, match="does not exist"):
        DumpDir(tmp_path / "missing")
    with pytest.raises(DumpError, match="not a directory"):
        DumpDir(tmp_path / "notes.txt")


def test_rank_directory_given_instead_of_the_dump(lenet_dump):
    with pytest.raises(DumpError, match=f"looks like a rank directory: pass its parent {lenet_dump}"):
        DumpDir(lenet_dump / "rank_0")


def test_truncated_and_garbage_npy(tmp_path):
    good = write_npy(tmp_path / "a.npy", np.arange(1000, dtype=np.float32))
    cut = tmp_path / "cut.npy"
    cut.write_bytes(good.read_bytes()[:2000])
    with pytest.raises(DumpError) as info:
        npy.load(cut)
    assert "cut.npy" in str(info.value) and "truncated" in str(info.value) and "4128" in str(info.value)
    junk = tmp_path / "junk.npy"
    junk.write_bytes(b"not numpy at all")
    with pytest.raises(DumpError, match="junk.npy.*numpy magic"):
        npy.read_header(junk)


def test_old_file_names_and_constants(tmp_path):
    graph_dir = tmp_path / "rank_0" / "Net" / "1"
    write_npy(graph_dir / "0" / "ReLU.Default_ReLU-op3.0.0.100.output.0.DefaultFormat.npy", np.ones(4, np.float16))
    write_npy(graph_dir / "constants" / "Parameter.data-1.0.0.99.output.0.DefaultFormat.npy", np.zeros(3))
    (graph_dir / "0" / "statistic.csv").write_text("Op Type,Op Name,Slot,Max Value\nReLU,ReLU-op3,0,1.0\n")
    dump = DumpDir(tmp_path)
    assert dump.ranks() == [0] and dump.graphs(0) == [1] and dump.iterations(0, 1) == [0]
    (relu,) = dump.tensor_files(0, 1, 0)
    assert (relu.op_name, relu.dtype) == ("Default_ReLU-op3", None)
    assert [f.op_name for f in dump.constant_files(0, 1)] == ["data-1"]
    assert dump.statistics(0, 1, 0) == [{"Op Type": "ReLU", "Op Name": "ReLU-op3", "Slot": "0", "Max Value": "1.0"}]
    assert dump.ir_graph(0, 1) is None and dump.execution_order(0, 1) == []


def test_async_layout_with_mapping_csv(tmp_path):
    iteration_dir = tmp_path / "20261122000000" / "0" / "Net" / "7" / "3"
    long_name = "Conv2D." + "Default_" * 40 + "Conv2D-op12.2.7.161243956333802.output.0.NCHW.Float32.npy"
    write_npy(iteration_dir / "1234567890", np.full((2, 2), 5.0, np.float32))
    (iteration_dir / "mapping.csv").write_text(f"1234567890,{long_name}\n")
    write_npy(iteration_dir / "Add.Add-op1.2.7.161243956333900.output.0.NCHW.Float32.npy", np.ones(2, np.float32))
    dump = DumpDir(tmp_path)
    assert dump.layout == "async" and dump.ranks() == [0] and dump.graphs(0) == [7] and dump.iterations() == [3]
    files = {f.op_name: f for f in dump.tensor_files(0, 7, 3)}
    assert set(files) == {"Default_" * 40 + "Conv2D-op12", "Add-op1"}
    mapped = files["Default_" * 40 + "Conv2D-op12"]
    assert mapped.path.name == "1234567890" and mapped.op_type == "Conv2D"
    np.testing.assert_array_equal(npy.load(mapped.path), np.full((2, 2), 5.0, np.float32))
