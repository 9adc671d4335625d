"""The dump tensor source's parts: the dump's graph file, MindInsight's stack format, settings and refusals."""
from __future__ import annotations

import pytest

from msdebug_hooks.wire import ms_graph_pb2 as graph_pb
from msdebug_hooks.debugger.dump_source import DumpTensorSource, scratch_base, source_options_from_env
from msdebug_hooks.debugger.pb_graph import (debug_graph_from_dump, mindinsight_source_address, output_count,
                                             read_model_graph)
from msdebug_hooks.errors import ConfigError, DumpError

STACK_2X = ("      # In file /w/conv.py:373, 17~44/        output = self.conv2d(x, self.weight)/\n"
            "      # In file /w/conv.py:372~376, 4~21/    def construct(self, x):/\n"
            "      # Corresponding forward node candidate:\n"
            "      #  - In file /w/loss.py:891, 20~69/   x = f(a, b)/")


def _graph() -> graph_pb.GraphProto:
    graph = graph_pb.GraphProto(name="kernel_graph0")
    graph.parameters.add(name="fc.weight", type=graph_pb.TypeProto(
        data_type=graph_pb.DT_TENSOR, tensor_type=graph_pb.TypeProto.Tensor(
            elem_type=graph_pb.DT_FLOAT32, shape=graph_pb.TensorShapeProto(dim=[{"size": 3}, {"size": 4}]))))
    node = graph.node.add(name="1", op_type="MatMul", scope="Default/fc-Dense",
                          full_name="Default/fc-Dense/MatMul-op0", source_address=STACK_2X)
    node.input.add(name="fc.weight")
    node.output_type.data_type = graph_pb.DT_TENSOR
    graph.node.add(name="2", op_type="UpdateState", scope="Default", full_name="Default/UpdateState-op0")
    return graph


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def test_reads_the_graph_inside_the_dumps_model_proto(tmp_path):
    body = _graph().SerializeToString()
    # ModelProto: ir_version (1, varint), domain (2, string), graph (4)
    model = b"\x08\x01" + b"\x12" + _varint(2) + b"ms" + b"\x22" + _varint(len(body)) + body
    (tmp_path / "m.pb").write_bytes(model)
    (tmp_path / "g.pb").write_bytes(body)
    assert read_model_graph(tmp_path / "m.pb") == _graph()
    assert read_model_graph(tmp_path / "g.pb") == _graph()
    (tmp_path / "bad.pb").write_bytes(b"\x22\x7f\x00")          # a graph field longer than the file
    with pytest.raises(DumpError, match="bad.pb"):
        read_model_graph(tmp_path / "bad.pb")


def test_graph_is_renamed_for_mindinsight_and_stacks_use_its_format():
    graph = debug_graph_from_dump(_graph(), 0, [("fc.weight", "live-param", "weight")])
    assert (graph.name, graph.proto.root_name) == ("kernel_graph_0", "0")   # MindInsight: int(name.split('_')[-1])
    assert graph.parameters["fc.weight"].source == "live-param" and graph.parameters["fc.weight"].shape == (3, 4)
    assert graph.nodes == {"Default/fc-Dense/MatMul-op0": "MatMul", "Default/UpdateState-op0": "UpdateState"}
    lines = graph.proto.node[0].source_address.split("\n")
    assert lines[0] == "      # In file /w/conv.py:373/        output = self.conv2d(x, self.weight)/"
    assert lines[1] == "      # In file /w/conv.py:372/    def construct(self, x):/"
    assert lines[2] == "      # Corresponding forward node candidate:"
    assert lines[3] == "      #  - In file /w/loss.py:891/   x = f(a, b)/"
    assert [output_count(n) for n in graph.proto.node] == [1, 0]
    assert mindinsight_source_address("# In file /old.py:12/ code/") == "# In file /old.py:12/ code/"


def test_env_switch_and_its_errors():
    assert source_options_from_env({"MS_DEBUGGER_SOURCE": "Dump", "MS_DEBUGGER_DUMP_KERNELS": "Conv2D, ReLU,",
                                    "MS_DEBUGGER_DUMP_DIR": "/tmp"}, {}) == {
        "source": "dump", "dump_dir": "/tmp", "dump_kernels": ["Conv2D", "ReLU"]}
    assert source_options_from_env({"MS_DEBUGGER_SOURCE": "dump"}, {"source": "light"}) == {}   # explicit wins
    assert source_options_from_env({}, {}) == {}
    with pytest.raises(ConfigError, match="MS_DEBUGGER_SOURCE.*full.*light, dump"):
        source_options_from_env({"MS_DEBUGGER_SOURCE": "full"}, {})


def test_bad_scratch_dirs_and_kernels_are_refused():
    with pytest.raises(ConfigError, match="dump_dir.*/tmp/a.b"):
        scratch_base("/tmp/a.b")                                   # MindSpore allows no '.' in a dump path
    assert scratch_base("/tmp/ok_dir-1").as_posix() == "/tmp/ok_dir-1"
    with pytest.raises(ConfigError, match="kernels"):
        DumpTensorSource(kernels="Conv2D")                          # a string, not a list


def test_an_existing_dump_config_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("MINDSPORE_DUMP_CONFIG", "/x/dump.json")
    source = DumpTensorSource(dump_dir=str(tmp_path).replace(".", "_"))
    with pytest.raises(ConfigError, match="MINDSPORE_DUMP_CONFIG.*/x/dump.json"):
        source.configure()
    assert source.root is None


@pytest.mark.mindspore
@pytest.mark.timeout(120)
def test_a_process_that_compiled_before_gets_a_clear_error():
    """MindSpore reads the dump config at the first compile; a debugger attached to a second training must say so
    instead of showing nothing."""
    from project import run_python

    code = """
import mindspore as ms
from mindspore.train import Model
ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
from lenet import make_model, make_dataset
from msdebug_hooks.debugger.callback import DebuggerCallback
model, net = make_model()
model.train(1, make_dataset(1), dataset_sink_mode=False)          # compiles: dump settings are read now
try:
    model2, _ = make_model()
    model2.train(1, make_dataset(1), callbacks=[DebuggerCallback("127.0.0.1", 1, source="dump")],
                 dataset_sink_mode=False)
except RuntimeError as exc:
    print("REFUSED:", exc)
"""
    result = run_python(code, timeout=110)
    assert "REFUSED:" in result.stdout and "compiled a graph before" in result.stdout, result.stdout[-2000:]
    with pytest.raises(ConfigError, match="source.*sideways.*light, dump"):
        from msdebug_hooks.debugger.callback import DebuggerCallback

        DebuggerCallback(source="sideways")


def test_scratch_dirs_of_dead_processes_are_removed_at_the_next_start(tmp_path, monkeypatch):
    import subprocess
    import sys

    monkeypatch.delenv("MINDSPORE_DUMP_CONFIG", raising=False)
    base = tmp_path.parent / tmp_path.name.replace(".", "_")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    orphan = base / f"msdebug_dump_{int(dead.stdout)}_abc"
    alive = base / "msdebug_dump_1_xyz"                              # pid 1 always runs
    for path in (orphan, alive):
        (path / "dump").mkdir(parents=True)
    source = DumpTensorSource(dump_dir=str(base))
    try:
        source.configure()
        assert not orphan.exists() and alive.exists() and source.root.exists()
        assert source.root.name.startswith(f"msdebug_dump_{__import__('os').getpid()}_")
    finally:
        source.close()
        monkeypatch.delenv("MINDSPORE_DUMP_CONFIG", raising=False)
    assert not source.root.exists()
