"""gRPC transport to MindInsight's ``debugger.EventListener``: the channel, deadlines and typed calls of the nine RPCs.

This module only moves messages. What a command means, when to wait and what to answer is decided by the session
(``msdebug_hooks.debugger.session``). Three rules from the server shape it (docs/debugger-protocol.md 1.1, 1.4):

* The server keeps gRPC's default 4 MiB receive limit, so every streamed message is cut to at most
  ``CHUNK_BYTES`` (3 MiB) serialised (``chunking.py``).
* ``WaitCMD`` blocks until a person acts in the UI and the server never notices a cancelled call, so it has no
  deadline (it can still be cancelled by ``close()``). Every other call has one, so a stuck server costs a bounded
  wait and an exception, never a hang.
* Failures surface as a few exceptions of our own (``TransportError`` and subclasses, ``transport_errors.py``),
  never as ``grpc.RpcError``.

Fault tolerance lives in the channel options and in ``reopen()`` (the session decides when to use it):

* Keepalive pings every ``keepalive_s`` (default 360 s) with a 20 s answer deadline, only while a call is in flight,
  so a blocked ``WaitCMD`` on a half-open connection (server machine gone, network cut) fails instead of waiting
  forever. MindInsight's server keeps gRPC's default ping policy (at most one ping per 5 minutes without data,
  two strikes, then GOAWAY "too_many_pings", which would kill the very wait we want to protect), hence the six
  minutes. The heartbeat thread is the faster detector (``heartbeat.py``).
* Reconnect backoff is capped at 5 s (gRPC's default grows to 120 s), so a restarted server is found quickly.
* Replies larger than ``MAX_REPLY_BYTES`` are refused by gRPC itself (``MessageTooLarge``), and a reply that does not
  parse as an ``EventReply`` fails the call (``ServerError``): a broken server cannot make us allocate or obey junk.
* TLS: ``tls=TlsConfig(...)`` (``settings.py``) makes a secure channel; a failed handshake becomes ``TlsError``
  whose message names the settings to check.

Example::

    with Transport("127.0.0.1:50051") as t:
        reply = t.send_metadata(debug_grpc_pb2.Metadata(device_name="0:0", backend="GPU", ms_version="2.10.0"))
        t.send_graph(graph.SerializeToString())
        command = t.wait_cmd(debug_grpc_pb2.Metadata(device_name="0:0", cur_step=0, backend="GPU"))
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Iterable, Iterator, TypeVar

import grpc

from msdebug_hooks.debugger.chunking import CHUNK_BYTES, MIN_CHUNK_BYTES, graph_chunks, serialized_tensor_pieces
from msdebug_hooks.debugger.transport_errors import (ServerError, ServerUnavailable, TransportClosed, TransportError,
                                                     map_rpc_error)
from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.wire import ms_graph_pb2 as graph_pb

__all__ = ["Transport", "MAX_REPLY_BYTES"]

MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # our own send limit; the server's receive limit is the binding one
MAX_REPLY_BYTES = 4 * 1024 * 1024     # largest EventReply we accept (a real one is a few KiB; a ViewCMD of 10k names
                                      # is ~1 MiB)
KEEPALIVE_TIMEOUT_S = 20.0
_REMEMBERED_REPLY_BYTES = 64         # a RunCMD reply is ~10 bytes; larger replies (views, watchpoints) are parsed anew
_T = TypeVar("_T")
_READY = grpc.ChannelConnectivity.READY.value[0]


def _parse_reply(method: str, data: bytes) -> pb.EventReply:
    """Parse a reply ourselves (gRPC's own deserialiser would log a traceback per bad message: a broken server
    could flood the training log)."""
    try:
        return pb.EventReply.FromString(data)
    except Exception as exc:   # DecodeError, or anything the parser raises on hostile bytes
        raise ServerError(method, f"the reply is not an EventReply ({len(data)} bytes): {exc}") from None


class _RawStub:
    """The nine RPCs with requests serialised by protobuf and replies left as bytes (parsed by ``_parse_reply``)."""

    def __init__(self, channel: grpc.Channel) -> None:
        path = "/debugger.EventListener/"
        ser = lambda message: message.SerializeToString()   # noqa: E731
        for name in ("WaitCMD", "SendMetadata", "SendHeartbeat"):
            setattr(self, name, channel.unary_unary(path + name, request_serializer=ser,
                                                    response_deserializer=None))
        for name in ("SendGraph", "SendMultiGraphs", "SendTensors", "SendTensorBase", "SendTensorStats",
                     "SendWatchpointHits"):
            setattr(self, name, channel.stream_unary(path + name, request_serializer=ser,
                                                     response_deserializer=None))


class Transport:
    """A gRPC channel (insecure, or TLS) to one MindInsight debugger server and typed calls of its nine RPCs.

    Args:
        address: ``host:port`` of the debugger gRPC server (MindInsight's ``--debugger-port``).
        timeout: deadline in seconds of each unary call except ``WaitCMD``.
        stream_timeout: deadline in seconds of each streaming call (a large tensor may take a while).
        chunk_bytes: largest serialised streamed message; keep it under the server's 4 MiB limit.
        use_proxy: honour ``http_proxy``-style variables (off: the server is normally on a local network).
        tls: a ``settings.TlsConfig`` for a secure channel (None: insecure, as MindInsight itself serves).
        keepalive_s: seconds between keepalive pings while a call is in flight (>= 300 against MindInsight).
    """

    def __init__(self, address: str, *, timeout: float = 10.0, stream_timeout: float = 120.0,
                 chunk_bytes: int = CHUNK_BYTES, use_proxy: bool = False, tls=None,
                 keepalive_s: float = 360.0) -> None:
        if timeout <= 0 or stream_timeout <= 0:
            raise ValueError(f"timeout={timeout}, stream_timeout={stream_timeout}: both must be > 0 seconds")
        if not MIN_CHUNK_BYTES <= chunk_bytes <= CHUNK_BYTES:
            raise ValueError(f"chunk_bytes={chunk_bytes}: allowed {MIN_CHUNK_BYTES}..{CHUNK_BYTES} "
                             "(the server rejects messages over 4 MiB)")
        self.address = address
        self.timeout = timeout
        self.stream_timeout = stream_timeout
        self.chunk_bytes = chunk_bytes
        self.tls = tls
        self._options = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                         ("grpc.max_receive_message_length", MAX_REPLY_BYTES),
                         ("grpc.enable_http_proxy", 1 if use_proxy else 0),
                         ("grpc.keepalive_time_ms", int(keepalive_s * 1000)),
                         ("grpc.keepalive_timeout_ms", int(KEEPALIVE_TIMEOUT_S * 1000)),
                         ("grpc.keepalive_permit_without_calls", 0),
                         ("grpc.http2.max_pings_without_data", 0),
                         ("grpc.initial_reconnect_backoff_ms", 500),
                         ("grpc.min_reconnect_backoff_ms", 500),
                         ("grpc.max_reconnect_backoff_ms", 5000)]
        if tls is not None and tls.server_name:
            self._options.append(("grpc.ssl_target_name_override", tls.server_name))
        self._lock = threading.Lock()
        self.closed = False
        self.generation = 0
        self._last_wait_reply: tuple[bytes, pb.EventReply] | None = None   # see ``_wait_reply``
        self._open_channel()

    def _open_channel(self) -> None:
        if self.tls is None:
            channel = grpc.insecure_channel(self.address, options=self._options)
        else:
            credentials = grpc.ssl_channel_credentials(root_certificates=self.tls.ca, private_key=self.tls.key,
                                                       certificate_chain=self.tls.cert)
            channel = grpc.secure_channel(self.address, credentials, options=self._options)
        self._channel = channel
        self._stub = _RawStub(channel)
        self._send_serialized_tensors = channel.stream_unary(   # pieces serialised by us (no extra copy)
            "/debugger.EventListener/SendTensors", request_serializer=None, response_deserializer=None)

    def reopen(self) -> None:
        """Drop the current connection and open a fresh channel to the same address. Calls in flight (a blocked
        ``WaitCMD`` from another thread) fail with ``ServerUnavailable``. Used when the heartbeat says the server is
        gone while the wait itself cannot tell (a frozen server or a half-open connection). No-op once closed."""
        with self._lock:
            if self.closed:
                return
            old = self._channel
            self.generation += 1
            self._open_channel()
        old.close()

    def ready_now(self, timeout: float = 0.05) -> bool:
        """Whether a connection is up, waiting at most ``timeout`` (enough for a loopback or LAN connect); also
        starts a connection attempt when the channel is idle."""
        deadline = time.monotonic() + timeout
        try:
            while not self.closed:
                # the channel's own state, no polling thread (channel_ready_future's thread races with close())
                if self._channel._channel.check_connectivity_state(True) == _READY:
                    return True
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.005)
        except (AttributeError, ValueError):   # another grpc layout, or closed meanwhile
            return not self.closed and self.wait_for_ready(timeout)
        return False

    # -- lifecycle ----------------------------------------------------------------------------------------------
    def wait_for_ready(self, timeout: float) -> bool:
        """True once the channel is connected, False if it is not within ``timeout`` seconds."""
        future = grpc.channel_ready_future(self._channel)
        try:
            future.result(timeout=timeout)
            return True
        except grpc.FutureTimeoutError:
            future.cancel()   # unsubscribe: no polling thread left behind
            return False

    def close(self) -> None:
        """Close the channel (a ``WaitCMD`` in flight then fails with ``TransportClosed``). Idempotent."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
        self._channel.close()   # cancels calls in flight

    def __enter__(self) -> "Transport":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- unary calls --------------------------------------------------------------------------------------------
    def send_metadata(self, metadata: pb.Metadata, *, timeout: float | None = None) -> pb.EventReply:
        """``timeout`` overrides the transport's deadline for this call (e.g. a short first contact)."""
        return self._unary("SendMetadata", self._stub.SendMetadata, metadata, timeout)

    def send_heartbeat(self, heartbeat: pb.Heartbeat) -> pb.EventReply:
        return self._unary("SendHeartbeat", self._stub.SendHeartbeat, heartbeat)

    def wait_cmd(self, metadata: pb.Metadata, *, generation: int | None = None) -> pb.EventReply:
        """Block (no deadline) until the server answers with a command, or the transport is closed.

        A plain blocking call: less latency and CPU than a future plus a done callback (measured on
        loopback), which matters because the client makes one after every training step. ``close()``
        from another thread ends it (TransportClosed), ``reopen()`` too (ServerUnavailable), and Ctrl-C
        interrupts it. With ``generation``, a channel reopened since then fails the call at once instead of
        starting a wait on a server already known to be gone.
        """
        with self._lock:
            call, current = self._stub.WaitCMD, self.generation
        if generation is not None and generation != current:
            raise ServerUnavailable("WaitCMD", "the connection was reopened: the server stopped answering heartbeats")
        self._check_open("WaitCMD")
        try:
            data = call(metadata)
        except grpc.RpcError as exc:
            raise self.rpc_error("WaitCMD", exc, current) from None
        return self._wait_reply(data)

    def _wait_reply(self, data: bytes) -> pb.EventReply:
        """A ``WaitCMD`` reply, parsed; the same bytes as the last small reply give the same message (treat it as
        read-only). During a continue the server answers "run one step" at every step, and parsing it is not free
        under the pure-Python protobuf that MindSpore 2.10 selects for the whole process when it is imported
        first (it sets ``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python``)."""
        last = self._last_wait_reply
        if last is not None and last[0] == data:
            return last[1]
        reply = _parse_reply("WaitCMD", data)
        self._last_wait_reply = (data, reply) if len(data) <= _REMEMBERED_REPLY_BYTES else None
        return reply

    def watch_cmd(self, metadata: pb.Metadata):
        """A ``WaitCMD`` not waited for (a grpc future: ``done()``, ``cancel()``): a free run's watch
        (``free_run.py``). Raises ``TransportClosed`` once closed; close and reopen fail it."""
        with self._lock:
            call = self._stub.WaitCMD
        self._check_open("WaitCMD")
        return call.future(metadata)

    # -- streaming calls ----------------------------------------------------------------------------------------
    def send_graph(self, serialized_graph: bytes) -> pb.EventReply:
        """One graph (``SendGraph``): the server concatenates the chunks and parses one GraphProto."""
        return self._stream("SendGraph", self._stub.SendGraph,
                            graph_chunks(serialized_graph, chunk_bytes=self.chunk_bytes))

    def send_tensor_values(self, tensors: Iterable[tuple[graph_pb.TensorProto, object]]) -> pb.EventReply:
        """Whole tensors as ``(header, content)`` pairs (content: bytes or a byte memoryview), in request order,
        each cut into finished-terminated pieces without first copying the content into a message (see
        ``serialized_tensor_pieces``)."""
        def pieces() -> Iterator[bytes]:
            for header, content in tensors:
                yield from serialized_tensor_pieces(header, content, chunk_bytes=self.chunk_bytes)
        return self._stream("SendTensors", self._send_serialized_tensors, pieces())

    def send_tensor_bases(self, bases: Iterable[pb.TensorBase]) -> pb.EventReply:
        return self._stream("SendTensorBase", self._stub.SendTensorBase, iter(bases))

    def send_tensor_stats(self, summaries: Iterable[pb.TensorSummary]) -> pb.EventReply:
        return self._stream("SendTensorStats", self._stub.SendTensorStats, iter(summaries))

    def send_watchpoint_hits(self, hits: Iterable[pb.WatchpointHit]) -> pb.EventReply:
        """Hits found at a suspension point. Callers must not send an empty stream: the server treats any call
        as "stop the multi-step continue"."""
        return self._stream("SendWatchpointHits", self._stub.SendWatchpointHits, iter(hits))

    # -- failures -----------------------------------------------------------------------------------------------
    def rpc_error(self, method: str, exc: grpc.RpcError, generation: int) -> TransportError:
        """What a call of ``method`` started on channel ``generation`` raises when gRPC failed it with ``exc``."""
        return map_rpc_error(method, exc, closed=self.closed, reopened=generation != self.generation,
                             address=self.address, tls=self.tls)

    # -- internals ----------------------------------------------------------------------------------------------
    def _check_open(self, method: str) -> None:
        if self.closed:
            raise TransportClosed(method, "transport closed")

    def _unary(self, method: str, call: Callable[..., _T], request, timeout: float | None = None) -> _T:
        self._check_open(method)
        generation = self.generation
        try:
            return _parse_reply(method, call(request, timeout=self.timeout if timeout is None else timeout))
        except grpc.RpcError as exc:
            raise self.rpc_error(method, exc, generation) from None

    def _stream(self, method: str, call: Callable[..., _T], requests: Iterator) -> _T:
        self._check_open(method)
        generation = self.generation
        try:
            return _parse_reply(method, call(requests, timeout=self.stream_timeout))
        except grpc.RpcError as exc:
            raise self.rpc_error(method, exc, generation) from None
