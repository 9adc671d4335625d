"""A ``debugger.EventListener`` test server that misbehaves on request: dies, freezes, answers slowly, sends
garbage or oversized replies, speaks TLS. It is ``DebugTestServer`` (same recording, same command queue) served
through generic method handlers, so a ``WaitCMD`` answer may be raw bytes that are no ``EventReply`` at all.

MindInsight stays the reference for normal behaviour (``mindinsight_server``); this server exists for the faults
MindInsight cannot be made to commit on demand.
"""
from __future__ import annotations

import subprocess
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Callable, Optional

import grpc

from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.wire import ms_graph_pb2 as graph_pb

from debug_test_server import DebugTestServer, Recorded, _Servicer

RUN = pb.EventReply(run_cmd=pb.RunCMD(run_level="step", run_steps=1))
_UNARY = {"WaitCMD": pb.Metadata, "SendMetadata": pb.Metadata, "SendHeartbeat": pb.Heartbeat}
_STREAMS = {"SendGraph": pb.Chunk, "SendMultiGraphs": pb.Chunk, "SendTensors": graph_pb.TensorProto,
            "SendTensorBase": pb.TensorBase, "SendTensorStats": pb.TensorSummary,
            "SendWatchpointHits": pb.WatchpointHit}


def _serialize(reply) -> bytes:
    return reply if isinstance(reply, bytes) else reply.SerializeToString()


class FaultServer(DebugTestServer):
    """``with FaultServer() as server:``; the ``DebugTestServer`` API plus:

    * ``freeze()`` / ``thaw()``: every call blocks (a hung server, or a half-open connection as seen by a client);
    * ``delays[name] = seconds``: answer that RPC slowly;
    * ``command(b"...")``: a ``WaitCMD`` answer of raw bytes (garbage, or an oversized message);
    * ``die()``: stop at once, cancelling calls in flight and closing connections (a killed server); ``die_after_waits
      = k``: die when the k-th ``WaitCMD`` arrives (mid-run, or while the client is paused);
    * ``tls=(key_pem, cert_pem)``: serve TLS instead of plain gRPC; ``client_ca``: also require a client certificate
      signed by it (mutual TLS).
    """

    def __init__(self, port: int = 0, *, tls: Optional[tuple[bytes, bytes]] = None, client_ca: Optional[bytes] = None,
                 max_workers: int = 16) -> None:
        self.recorded = Recorded()
        import queue
        self.commands = queue.Queue()
        self.hooks: dict[str, Callable] = {}
        self.wait_arrived = threading.Event()
        self.auto_reply = None
        self.delays: dict[str, float] = {}
        self.die_after_waits: Optional[int] = None
        self.dead = threading.Event()
        self._thawed = threading.Event()
        self._thawed.set()
        servicer = _Servicer(self)
        handlers = {}
        for name, request in _UNARY.items():
            handlers[name] = grpc.unary_unary_rpc_method_handler(
                self._guard(name, getattr(servicer, name)), request_deserializer=request.FromString,
                response_serializer=_serialize)
        for name, request in _STREAMS.items():
            handlers[name] = grpc.stream_unary_rpc_method_handler(
                self._guard(name, getattr(servicer, name)), request_deserializer=request.FromString,
                response_serializer=_serialize)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers))
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("debugger.EventListener",
                                                                                    handlers),))
        if tls is None:
            self.port = self._server.add_insecure_port(f"127.0.0.1:{port}")
        else:
            credentials = grpc.ssl_server_credentials([tls], root_certificates=client_ca,
                                                      require_client_auth=client_ca is not None)
            self.port = self._server.add_secure_port(f"127.0.0.1:{port}", credentials)
        self.address = f"127.0.0.1:{self.port}"

    def _guard(self, name: str, handler: Callable) -> Callable:
        def guarded(request, context):
            while not self._thawed.wait(0.05):        # frozen: accept the call, never answer
                if not context.is_active() or self.dead.is_set():
                    return pb.EventReply(status=pb.EventReply.FAILED)
            if name == "WaitCMD" and self.die_after_waits is not None and \
                    len(self.recorded.waits) + 1 >= self.die_after_waits:
                self.recorded.waits.append(request)
                threading.Thread(target=self.die, daemon=True).start()
                while not self.dead.is_set():
                    time.sleep(0.01)
                return pb.EventReply(status=pb.EventReply.FAILED)   # never delivered: the server is gone
            delay = self.delays.get(name, 0.0)
            if delay:
                time.sleep(delay)
            return handler(request, context)
        return guarded

    def freeze(self) -> None:
        self._thawed.clear()

    def thaw(self) -> None:
        self._thawed.set()

    def die(self) -> None:
        self.dead.set()
        self._server.stop(grace=None)

    def __exit__(self, *exc) -> None:
        self.thaw()
        self.die()


def make_certificates(directory: Path, *, host: str = "localhost") -> dict[str, Path]:
    """A CA, a server certificate for ``host`` (and 127.0.0.1) signed by it, a client certificate signed by it, and
    a second, unrelated CA, made with the ``openssl`` binary. Returns the PEM paths by role."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {role: directory / f"{role}.pem" for role in
             ("ca", "ca_key", "server", "server_key", "client", "client_key", "other_ca", "other_ca_key")}

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    for ca in ("ca", "other_ca"):
        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN=msdebug test {ca}",
            "-keyout", str(paths[f"{ca}_key"]), "-out", str(paths[ca]))
    ext = directory / "server.ext"
    ext.write_text(f"subjectAltName=DNS:{host},IP:127.0.0.1\n")
    for role, extra in (("server", ["-extfile", str(ext)]), ("client", [])):
        csr = directory / f"{role}.csr"
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={host if role == 'server' else 'client'}",
            "-keyout", str(paths[f"{role}_key"]), "-out", str(csr))
        run("x509", "-req", "-in", str(csr), "-CA", str(paths["ca"]), "-CAkey", str(paths["ca_key"]),
            "-CAcreateserial", "-days", "2", "-out", str(paths[role]), *extra)
    return paths
