"""The generated protocol modules: package-internal imports, wire compatibility with MindInsight 2.3.1, and loading
under the lowest and newest protobuf the project supports (protos/README.md)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from project import guarded
from venv_tools import ROOT, create_venv, require_pypi, venv_python

LOWEST_PROTOBUF = "7.34.1"   # MindSpore 2.10's floor, pyproject's lower bound

# Walks the descriptors of the named pb2 modules into plain JSON (runs under protobuf 3.20 and 7.x alike).
DUMP_DESCRIPTORS = r'''
import importlib, json, sys
from google.protobuf import descriptor_pb2

def fields(desc):
    return {f.name: [f.number, f.type, f.is_repeated if hasattr(f, "is_repeated") else f.label == 3,
                     (f.message_type or f.enum_type).full_name if (f.message_type or f.enum_type) else "",
                     f.containing_oneof.name if f.containing_oneof else ""]
            for f in desc.fields}

def walk(desc, out):
    out["messages"][desc.full_name] = fields(desc)
    for enum in desc.enum_types:
        out["enums"][enum.full_name] = {v.name: v.number for v in enum.values}
    for nested in desc.nested_types:
        walk(nested, out)

out = {"messages": {}, "enums": {}, "services": {}, "packages": []}
for name in sys.argv[1:]:
    fd = importlib.import_module(name).DESCRIPTOR
    out["packages"].append(fd.package)
    for desc in fd.message_types_by_name.values():
        walk(desc, out)
    for enum in fd.enum_types_by_name.values():
        out["enums"][enum.full_name] = {v.name: v.number for v in enum.values}
    proto = descriptor_pb2.FileDescriptorProto.FromString(fd.serialized_pb)  # streaming flags live here
    for svc in proto.service:
        out["services"][proto.package + "." + svc.name] = {
            m.name: [m.input_type, m.output_type, m.client_streaming, m.server_streaming] for m in svc.method}
print(json.dumps(out, sort_keys=True))
'''

# Imports the generated modules (the gRPC stub from tests/helpers/, where protos/generate.py writes it), round-trips
# messages, prints the protobuf version (run in a fresh interpreter).
ROUND_TRIP = r'''
import sys
import google.protobuf
from msdebug_hooks.wire import debug_grpc_pb2 as pb, ms_graph_pb2 as graph
import debug_grpc_pb2_grpc as rpc
assert "ms_graph_pb2" not in sys.modules and "debug_grpc_pb2" not in sys.modules, "absolute gencode import leaked"
hit = pb.WatchpointHit(id=3, error_code=4,
    tensor=graph.TensorProto(node_name="Default/net/fc.weight", slot="0", finished=True),
    watch_condition=pb.WatchCondition(condition=pb.WatchCondition.tensor_too_large,
        params=[pb.WatchCondition.Parameter(name="max_gt", value=1.5, hit=True, actual_value=2.25)]))
again = pb.WatchpointHit.FromString(hit.SerializeToString())
assert again == hit and again.watch_condition.params[0].actual_value == 2.25
reply = pb.EventReply.FromString(pb.EventReply(run_cmd=pb.RunCMD(run_level="step", run_steps=1)).SerializeToString())
assert reply.WhichOneof("cmd") == "run_cmd" and reply.run_cmd.run_steps == 1
assert callable(rpc.EventListenerStub)
print(google.protobuf.__version__)
'''


def _run(python: str | Path, code: str, *args: str) -> str:
    """Run ``code`` with ``python`` in a clean environment that sees only the project source and tests/helpers/ (and
    $HOME, which MindInsight reads at import)."""
    with tempfile.TemporaryDirectory(prefix="msdebug-home-") as home:
        env = guarded({"PYTHONPATH": os.pathsep.join((str(ROOT), str(ROOT / "tests" / "helpers"))),
                       "PATH": "/usr/bin:/bin", "HOME": home})
        proc = subprocess.run([str(python), "-c", code, *args], capture_output=True, text=True, timeout=120,
                              env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_generated_modules_import_inside_the_package_and_round_trip():
    version = _run(sys.executable, ROUND_TRIP)
    assert version.startswith("7.")


def test_service_has_the_nine_rpcs_with_mindinsight_paths():
    from msdebug_hooks.wire import debug_grpc_pb2 as pb

    service = pb.DESCRIPTOR.services_by_name["EventListener"]
    assert service.full_name == "debugger.EventListener"
    streaming = {m.name: m.client_streaming for m in service.methods}
    assert streaming == {"WaitCMD": False, "SendMetadata": False, "SendHeartbeat": False, "SendGraph": True,
                         "SendMultiGraphs": True, "SendTensors": True, "SendTensorBase": True,
                         "SendTensorStats": True, "SendWatchpointHits": True}
    assert all(m.output_type.full_name == "debugger.EventReply" for m in service.methods)


@pytest.mark.mindinsight
@pytest.mark.timeout(600)
def test_descriptors_match_mindinsight_2_3_1(mindinsight_venv):
    """Every message, field (number, type, repeated, message/enum type, oneof), enum value and RPC equals
    MindInsight's."""
    ours = json.loads(_run(sys.executable, DUMP_DESCRIPTORS, "msdebug_hooks.wire.ms_graph_pb2",
                           "msdebug_hooks.wire.debug_grpc_pb2"))
    theirs = json.loads(_run(venv_python(mindinsight_venv), DUMP_DESCRIPTORS,
                             "mindinsight.domain.graph.proto.ms_graph_pb2",
                             "mindinsight.debugger.proto.debug_grpc_pb2"))
    assert sorted(ours["packages"]) == sorted(theirs["packages"]) == ["debugger", "mindinsight.domain.graph"]
    assert ours["services"] == theirs["services"]
    assert ours["enums"] == theirs["enums"]
    assert set(ours["messages"]) == set(theirs["messages"])
    for name, fields in theirs["messages"].items():
        assert ours["messages"][name] == fields, name


@pytest.mark.mindinsight
@pytest.mark.timeout(600)
def test_bytes_we_write_are_what_mindinsight_reads(mindinsight_venv):
    """A SetCMD-bearing reply and a chunked tensor, serialised here, parse in MindInsight and re-serialise equal."""
    from msdebug_hooks.wire import debug_grpc_pb2 as pb, ms_graph_pb2 as graph

    messages = {
        "debug_grpc_pb2.EventReply": pb.EventReply(set_cmd=pb.SetCMD(id=2, watch_nodes=[pb.WatchNode(
            node_name="Default/network-Net/fc-Dense/fc.weight", node_type="Parameter", graph_name="kernel_graph_0")],
            watch_condition=pb.WatchCondition(condition=pb.WatchCondition.tensor_not_changed, params=[
                pb.WatchCondition.Parameter(name="rtol", value=1e-5),
                pb.WatchCondition.Parameter(name="atol", disabled=True)]))),
        "ms_graph_pb2.TensorProto": graph.TensorProto(node_name="Default/a/b", slot="0", iter="prev", truncate=True,
                                                      tensor_content=b"\x00\x01" * 8, dims=[2, 4],
                                                      data_type=graph.DT_FLOAT16, finished=True),
        "debug_grpc_pb2.TensorSummary": pb.TensorSummary(
            tensor_base=pb.TensorBase(data_type=11, shape=[3, 4], data_size=48),
            statistics=pb.Statistics(max_value=2.5, min_value=-1.0, avg_value=0.5, count=12, nan_count=1)),
    }
    payload = {name: msg.SerializeToString(deterministic=True).hex() for name, msg in messages.items()}
    code = r'''
import json, sys
from mindinsight.debugger.proto import debug_grpc_pb2
from mindinsight.domain.graph.proto import ms_graph_pb2
mods = {"debug_grpc_pb2": debug_grpc_pb2, "ms_graph_pb2": ms_graph_pb2}
out = {}
for name, data in json.loads(sys.argv[1]).items():
    module, cls = name.split(".")
    msg = getattr(mods[module], cls).FromString(bytes.fromhex(data))
    out[name] = [msg.SerializeToString(deterministic=True).hex(), str(msg)]
print(json.dumps(out))
'''
    echoed = json.loads(_run(venv_python(mindinsight_venv), code, json.dumps(payload)))
    for name, data in payload.items():
        assert echoed[name][0] == data, (name, echoed[name][1])
    assert 'node_name: "Default/network-Net/fc-Dense/fc.weight"' in echoed["debug_grpc_pb2.EventReply"][1]
    assert "condition: tensor_not_changed" in echoed["debug_grpc_pb2.EventReply"][1]


@pytest.mark.pypi
@pytest.mark.timeout(300)
def test_generated_code_loads_on_the_lowest_supported_protobuf():
    """A throwaway venv with only protobuf==LOWEST and grpcio imports the modules and round-trips messages."""
    require_pypi()
    import grpc

    with tempfile.TemporaryDirectory(prefix="msdebug-pb-lowest-") as tmp:
        env_dir = Path(tmp) / "venv"
        create_venv(env_dir, [f"protobuf=={LOWEST_PROTOBUF}", f"grpcio=={grpc.__version__}"])
        assert _run(venv_python(env_dir), ROUND_TRIP) == LOWEST_PROTOBUF


def test_generated_code_loads_on_the_newest_protobuf_the_project_venv():
    """The project venv carries the newest protobuf we support (7.x); load there in a fresh interpreter."""
    import google.protobuf

    assert _run(sys.executable, ROUND_TRIP) == google.protobuf.__version__
    assert int(google.protobuf.__version__.split(".")[0]) == 7


@pytest.mark.pypi
@pytest.mark.timeout(300)
def test_committed_code_matches_the_protos():
    """`protos/generate.py --check`: the committed modules are exactly what the pinned protoc makes."""
    require_pypi()
    proc = subprocess.run([sys.executable, str(ROOT / "protos" / "generate.py"), "--check"], capture_output=True,
                          text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout + proc.stderr
