"""The servers the debugger benchmarks train against, each in a process of its own (as MindInsight would be): a
minimal debugger service in "continue" mode, the same with ``tensor_overflow`` on every operator of the graph it
receives (dump source), and our own ``DebuggerServer`` driven headless.

Run as ``python -m debugger_bench.servers --continue N [--weights FILE] | --ops | --ours N`` (``start_*`` below do
it): each prints its port on the first line and serves until its stdin closes.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent import futures
from pathlib import Path

import grpc

from debugger_bench import child_command
from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.wire import ms_graph_pb2 as graph_pb

RAW_METHOD = "/bench.Raw/Push"
WEIGHTS = ["conv1.weight", "conv2.weight", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight",
           "fc3.bias"]
Cond = pb.WatchCondition
WATCHPOINTS = [   # (condition, enabled parameter): none of these hits on healthy LeNet training
    (Cond.tensor_general_overflow, None),
    (Cond.tensor_too_large, ("max_gt", 1e6)),
    (Cond.tensor_too_small, ("min_lt", -1e6)),
    (Cond.tensor_change_too_large, ("abs_mean_update_ratio_gt", 10.0)),
    (Cond.tensor_not_changed, ("rtol", 1e-30)),
]


class _ContinueServer:
    """Answers every wait with "run one step"; at step 0 of each session it first sends ``watchpoints`` SetCMDs."""

    def __init__(self, watchpoints: int, weights: list[str] | None = None) -> None:
        self.watchpoints = watchpoints
        self.weights = weights          # bare parameter names to watch (None: LeNet's, scoped as MindInsight sends)
        self.pending: list[pb.EventReply] = []

    def _set_cmds(self) -> list[pb.EventReply]:
        scope = "Default/network-WithLossCell/_backbone-LeNet5"
        names = self.weights if self.weights is not None else [
            f"{scope}/{w.split('.')[0]}-{'Conv2d' if 'conv' in w else 'Dense'}/{w}" for w in WEIGHTS]
        nodes = [pb.WatchNode(node_name=name, node_type="Parameter") for name in names]
        replies = []
        for index, (condition, param) in enumerate(WATCHPOINTS[:self.watchpoints], start=1):
            params = [Cond.Parameter(name=param[0], value=param[1])] if param else []
            replies.append(pb.EventReply(set_cmd=pb.SetCMD(id=index, watch_nodes=nodes, watch_condition=Cond(
                condition=condition, params=params))))
        return replies

    def SendMetadata(self, request, context):
        self.pending = self._set_cmds()
        return pb.EventReply(version_matched=True)

    def WaitCMD(self, request, context):
        if self.pending:
            return self.pending.pop(0)
        return pb.EventReply(run_cmd=pb.RunCMD(run_level="step", run_steps=1))

    def SendHeartbeat(self, request, context):
        return pb.EventReply()

    def drain(self, iterator, context):
        for _ in iterator:
            pass
        return pb.EventReply()



def raw_push(iterator, context) -> bytes:
    """The raw baseline's handler: ready-made ``bytes`` pieces, counted and dropped."""
    total = 0
    for chunk in iterator:
        total += len(chunk)
    return str(total).encode()


def _count_pieces(iterator, context) -> pb.EventReply:
    for _ in iterator:
        pass
    return pb.EventReply()


def _listen(servicer: _ContinueServer, streams: dict, *extra) -> None:
    """Serve the debugger service of ``servicer`` (the unary calls, every stream drained except ``streams``, which
    are ``name -> (handler, deserializer)``) and the ``extra`` generic handlers on a free loopback port; print the
    port, then serve until the benchmark closes our stdin."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))   # gRPC's default 4 MiB receive limit
    unary = {name: grpc.unary_unary_rpc_method_handler(getattr(servicer, name), request_deserializer=kind.FromString,
                                                       response_serializer=pb.EventReply.SerializeToString)
             for name, kind in (("WaitCMD", pb.Metadata), ("SendMetadata", pb.Metadata),
                                ("SendHeartbeat", pb.Heartbeat))}
    drained = {name: (servicer.drain, kind.FromString) for name, kind in (
        ("SendGraph", pb.Chunk), ("SendMultiGraphs", pb.Chunk), ("SendTensorBase", pb.TensorBase),
        ("SendTensorStats", pb.TensorSummary), ("SendWatchpointHits", pb.WatchpointHit))}
    handlers = {name: grpc.stream_unary_rpc_method_handler(handler, request_deserializer=deserializer,
                                                           response_serializer=pb.EventReply.SerializeToString)
                for name, (handler, deserializer) in {**drained, **streams}.items()}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("debugger.EventListener",
                                                                          {**unary, **handlers}), *extra))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    sys.stdin.read()          # until the benchmark closes our stdin
    server.stop(None)


def serve(watchpoints: int, weights_file: str = "") -> None:
    """The debugger service, except that ``SendTensors`` pieces are counted, not parsed (parsing a 3 MiB message
    is the server's cost, and the raw baseline's server does not pay it either), and the raw baseline's method.
    ``weights_file``: parameter names to watch, one a line (default LeNet's)."""
    weights = Path(weights_file).read_text().split() if weights_file else None
    raw = grpc.method_handlers_generic_handler("bench.Raw", {"Push": grpc.stream_unary_rpc_method_handler(
        raw_push, request_deserializer=None, response_serializer=None)})
    _listen(_ContinueServer(watchpoints, weights), {"SendTensors": (_count_pieces, None)}, raw)


class _OpsServer(_ContinueServer):
    """Continue mode; at step 0 it sets ``tensor_overflow`` (a no-hit check on healthy training) on every operator
    of the graph the client sent, as MindInsight does for a "tensor" watchpoint."""

    def __init__(self) -> None:
        super().__init__(0)
        self.ops: list[tuple[str, str]] = []

    def SendGraph(self, iterator, context):
        graph = graph_pb.GraphProto.FromString(b"".join(chunk.buffer for chunk in iterator))
        self.ops = [(n.full_name, n.op_type) for n in graph.node if n.full_name and n.HasField("output_type")]
        self.pending = [pb.EventReply(set_cmd=pb.SetCMD(id=1, watch_nodes=[
            pb.WatchNode(node_name=name, node_type=kind) for name, kind in self.ops],
            watch_condition=Cond(condition=Cond.tensor_general_overflow)))]
        return pb.EventReply()

    def SendMetadata(self, request, context):
        return pb.EventReply(version_matched=True)


def serve_ops() -> None:
    """The dump source's server: :class:`_OpsServer`, tensors parsed."""
    servicer = _OpsServer()
    _listen(servicer, {"SendGraph": (servicer.SendGraph, pb.Chunk.FromString),
                       "SendTensors": (servicer.drain, graph_pb.TensorProto.FromString)})


SERVER_WATCHPOINTS = ["weight_overflow", "weight_too_large:max_gt=1e6", "weight_too_small:min_lt=-1e6",
                      "weight_change_too_large:abs_mean_update_ratio_gt=10", "weight_not_changed:rtol=1e-30"]


def serve_ours(watchpoints: int, *, tls_dir: str = "", per_step: bool = False) -> None:
    """Our server, headless: every training that connects gets ``watchpoints`` watchpoints on all weights and runs
    until a hit (none comes), as a script driving ``DebuggerServer`` would. ``tls_dir``: mutual TLS with the
    ``server.pem`` / ``server_key.pem`` / ``ca.pem`` there; ``per_step``: one ``WaitCMD`` per step (no free run),
    the round trip every step pays."""
    import threading

    from msdebug_hooks.server import DebuggerServer

    tls = {"tls_cert": f"{tls_dir}/server.pem", "tls_key": f"{tls_dir}/server_key.pem",
           "tls_client_ca": f"{tls_dir}/ca.pem"} if tls_dir else {}
    with DebuggerServer(port=0, log_reports=False, free_run=not per_step, **tls) as server:
        def drive() -> None:
            while True:
                try:
                    job = server.wait_for_training(timeout=3600)
                except Exception:      # closed
                    return
                for spec in SERVER_WATCHPOINTS[:watchpoints]:
                    job.watch(spec)
                job.run(None)

        threading.Thread(target=drive, daemon=True).start()
        print(server.port, flush=True)
        sys.stdin.read()


def _start(*args: str) -> tuple[subprocess.Popen, int]:
    """This module in a process of its own with ``args``: (the process, its port)."""
    command, env = child_command("servers", *args)
    proc = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return proc, int(proc.stdout.readline())


def start_server(watchpoints: int, weights_file: str = "") -> tuple[subprocess.Popen, int]:
    """The continue-mode server with ``watchpoints`` of :data:`WATCHPOINTS` on the weights."""
    return _start("--continue", str(watchpoints), "--weights", weights_file)


def start_ops() -> tuple[subprocess.Popen, int]:
    """The dump source's server, ``tensor_overflow`` on every operator."""
    return _start("--ops")


def start_ours(watchpoints: int, *, tls_dir: str = "", per_step: bool = False) -> tuple[subprocess.Popen, int]:
    """Our own server, headless, ``watchpoints`` of :data:`SERVER_WATCHPOINTS` on all weights (``serve_ours``)."""
    return _start("--ours", str(watchpoints), "--tls", tls_dir, *(["--per-step"] if per_step else []))


def stop(proc: subprocess.Popen) -> None:
    """Close a server's stdin (it stops) and wait for it."""
    proc.stdin.close()
    proc.wait(10)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--continue", dest="watchpoints", type=int, default=None)
    parser.add_argument("--weights", default="")
    parser.add_argument("--ops", action="store_true")
    parser.add_argument("--ours", type=int, default=None)
    parser.add_argument("--tls", default="", help="with --ours: a directory of certificates (mutual TLS)")
    parser.add_argument("--per-step", action="store_true", help="with --ours: one wait per step, no free run")
    args = parser.parse_args(argv)
    if args.ours is not None:
        serve_ours(args.ours, tls_dir=args.tls, per_step=args.per_step)
    elif args.ops:
        serve_ops()
    else:
        serve(args.watchpoints or 0, args.weights)
    return 0


if __name__ == "__main__":
    sys.exit(main())
