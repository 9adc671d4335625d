"""``DebuggerServer``: the server side of ``debugger.EventListener``, as a Python object a script drives.

::

    from msdebug_hooks.server import DebuggerServer
    with DebuggerServer(port=0) as server:          # 0: a free port; server.port tells which
        # start: ENABLE_MS_DEBUGGER=1 MS_DEBUGGER_HOST=127.0.0.1 MS_DEBUGGER_PORT=<server.port> python train.py
        job = server.wait_for_training(timeout=120)  # suspended at step 0
        job.watch("weight_overflow")
        hits = job.run_until_hit(timeout=600)
        values = job.tensor(hits[0].node.name)
        job.terminate()

Each client connection is a job with a handle of its own (``server.jobs``), so several trainings, or the ranks of
one job (``DistributedDebugger(ranks="all", port_per_rank=True)`` with ``ports=range(P, P + n)``), are driven at
once. Problems with clients (garbage, unknown callers, lost trainings) never stop the server: they are logged and
kept in ``server.reports``.

Beyond one machine, TLS: ``DebuggerServer(host="0.0.0.0", tls_cert="server.pem", tls_key="server-key.pem",
tls_client_ca="ca.pem")`` encrypts the traffic and admits only trainings holding a certificate signed by that CA
(``server_tls.py``); a refused connection is reported with its address (``handshakes.py``), and a server beyond
loopback without TLS warns once at start (``exposure.py``). docs/debugger-server.md, "Who may connect".
"""
from __future__ import annotations

import threading
import time
from concurrent import futures
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

import grpc

from msdebug_hooks._log import get_logger
from msdebug_hooks.server.connections import Connections
from msdebug_hooks.server.errors import JobLost, JobStateError
from msdebug_hooks.server.exposure import exposure_warning, reachable_host
from msdebug_hooks.server.handshakes import HandshakeWatch
from msdebug_hooks.server.job import Job, JobState
from msdebug_hooks.server.ports import check_free
from msdebug_hooks.server.server_tls import ServerTls
from msdebug_hooks.server.servicer import method_handlers
from msdebug_hooks.validation import whole_number

if TYPE_CHECKING:
    from msdebug_hooks.server.group import RankGroup

__all__ = ["DebuggerServer", "MAX_MESSAGE_BYTES"]

MAX_MESSAGE_BYTES = 4 * 1024 * 1024      # gRPC's default, as MindInsight keeps it; clients send 3 MiB pieces
_WATCHDOG_PERIOD = 1.0
_LOG = get_logger("server")


class DebuggerServer:
    """A debugger server on ``host``:``port`` (0: a free port) and optionally more ``ports`` (one per rank).

    Args:
        port: the first port; 0 picks a free one (``server.port``).
        host: the address to listen on (default loopback only; "0.0.0.0" for every interface).
        ports: more ports to listen on, e.g. ``range(P + 1, P + n)`` for ranks connecting to ``port + rank``.
        max_workers: gRPC worker threads per port; each suspended training holds one.
        log_reports: also log every report (connects, losses, garbage) at INFO.
        free_run: answer a run of several steps (or until a pause or a hit) with one free run, no ``WaitCMD`` per
            step (``wire/protocol.py``); False: one wait per step, as MindInsight does.
        tls_cert, tls_key: PEM files of the server's certificate (chain) and key: TLS instead of plaintext.
        tls_client_ca: PEM file of a CA (needs ``tls_cert``): mutual TLS, only trainings holding a client certificate
            signed by it get in. The files are checked here (``ConfigError``, one per problem).
        notify: told the lines a person should see (the warning of a server beyond loopback without TLS, each
            refused connection); default: logged as warnings.
    """

    def __init__(self, port: int = 0, host: str = "127.0.0.1", *, ports: Iterable[int] = (), max_workers: int = 32,
                 log_reports: bool = True, free_run: bool = True, tls_cert: Any = None, tls_key: Any = None,
                 tls_client_ca: Any = None, notify: Optional[Callable[[str], None]] = None) -> None:
        ports = list(ports)
        for name, value in (("port", port), *((f"ports[{i}]", p) for i, p in enumerate(ports))):
            whole_number(name, value, minimum=0, maximum=65535, allowed="an int 0..65535 (0: a free port)")
        self.tls: Optional[ServerTls] = tls_cert if isinstance(tls_cert, ServerTls) else \
            ServerTls.from_paths(tls_cert, tls_key, tls_client_ca)
        self.notify = notify or (lambda line: _LOG.warning("debugger server: %s", line))
        self.host = host
        self.max_workers = max_workers
        self._connections = Connections(free_runs=bool(free_run), log_reports=log_reports)
        self._lock = self._connections.changed       # guards the jobs, the reports and the listeners
        self._claimed: set[int] = set()
        self._listeners: list[tuple[int, grpc.Server]] = []
        self._closed = threading.Event()
        self._watchdog: Optional[threading.Thread] = None
        self._wanted = [port, *ports]
        self._started = False
        self._handshakes = None if self.tls is None else HandshakeWatch(lambda: self.ports, self._refused,
                                                                        mutual=self.tls.mutual)

    # -- lifecycle ----------------------------------------------------------------------------------------------
    def start(self) -> "DebuggerServer":
        if self._started:
            return self
        self._started = True
        try:
            for port in self._wanted:
                self.add_port(port)
        except Exception:
            self.close()
            raise
        self._watchdog = threading.Thread(target=self._watch, name="msdebug-server-watchdog", daemon=True)
        self._watchdog.start()
        warning = exposure_warning(self.host, self.port, tls=self.tls is not None,
                                   mutual=self.tls is not None and self.tls.mutual)
        if warning:
            self.notify(warning)
        return self

    def add_port(self, port: int = 0) -> int:
        """Listen on one more port (0: a free one); returns it. ``OSError`` in one line when it cannot be."""
        check_free(self.host, port)          # before gRPC, which prints its own line for a port in use
        grpc_server = grpc.server(futures.ThreadPoolExecutor(max_workers=self.max_workers,
                                                             thread_name_prefix="msdebug-server"),
                                  options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                                           ("grpc.so_reuseport", 0)])
        try:
            if self.tls is None:
                bound = grpc_server.add_insecure_port(f"{self.host}:{port}")
            else:
                assert self._handshakes is not None
                bound = grpc_server.add_secure_port(f"{self.host}:{port}",
                                                    self.tls.credentials(self._handshakes.connection_started))
        except RuntimeError as exc:
            raise OSError(f"cannot listen on {self.host}:{port}: {exc}") from None
        if not bound:
            raise OSError(f"cannot listen on {self.host}:{port} (in use?)")
        on_call = None if self._handshakes is None else self._handshakes.admitted
        grpc_server.add_generic_rpc_handlers((method_handlers(self._connections, bound, on_call=on_call),))
        grpc_server.start()
        with self._lock:
            self._listeners.append((bound, grpc_server))
        return bound

    def close(self, grace: float = 1.0) -> None:
        """Stop listening and release every thread; suspended trainings see the server gone (they run on)."""
        self._closed.set()
        with self._lock:
            jobs, listeners = self._connections.jobs, list(self._listeners)
            self._listeners.clear()
            self._lock.notify_all()
        for job in jobs:
            job.close()
        for _, grpc_server in listeners:
            grpc_server.stop(grace).wait()
        if self._watchdog is not None and self._watchdog is not threading.current_thread():
            self._watchdog.join(5)

    def __enter__(self) -> "DebuggerServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- what a script uses -------------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        """The first port listened on."""
        return self._listeners[0][0] if self._listeners else 0

    @property
    def ports(self) -> list[int]:
        return [port for port, _ in self._listeners]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def hint_host(self) -> str:
        """The host a training is given (``MS_DEBUGGER_HOST``): ``host``, or for a wildcard (``0.0.0.0``) this
        host's name (one of its certificate's names when it has them)."""
        return reachable_host(self.host, self.tls.names if self.tls is not None else ())

    def training_variables(self) -> str:
        """The variables that start a training against this server, as a shell line (TLS files as placeholders
        where the server cannot know them)."""
        host = self.hint_host
        line = f"ENABLE_MS_DEBUGGER=1 MS_DEBUGGER_HOST={host} MS_DEBUGGER_PORT={self.port}"
        if self.tls is None:
            return line
        line += f" MS_DEBUGGER_TLS_CA=<the CA that signed {self.tls.cert_path}>"
        if self.tls.names and host not in self.tls.names and self.tls.dns_names:
            line += f" MS_DEBUGGER_TLS_SERVER_NAME={self.tls.dns_names[0]}"
        if self.tls.mutual:
            line += (f" MS_DEBUGGER_TLS_CERT=<a certificate signed by {self.tls.client_ca_path}> "
                     "MS_DEBUGGER_TLS_KEY=<its key>")
        return line

    @property
    def refused(self) -> int:
        """How many connections failed their TLS handshake so far (0 without TLS, or where it cannot be seen)."""
        return self._handshakes.refused if self._handshakes is not None else 0

    @property
    def jobs(self) -> list[Job]:
        return self._connections.jobs

    @property
    def reports(self) -> list[str]:
        """What happened with clients (connects, losses, garbage), oldest first."""
        return self._connections.reports

    @property
    def free_run(self) -> bool:
        """Whether jobs that connect from now on answer multi-step runs with free runs."""
        return self._connections.free_runs

    @free_run.setter
    def free_run(self, value: bool) -> None:
        self._connections.free_runs = bool(value)

    @property
    def log_reports(self) -> bool:
        """Whether every report is also logged at INFO."""
        return self._connections.log_reports

    @log_reports.setter
    def log_reports(self, value: bool) -> None:
        self._connections.log_reports = value

    def job(self, job_id: int) -> Job:
        for job in self.jobs:
            if job.id == job_id:
                return job
        raise KeyError(f"no job {job_id} (jobs: {', '.join(str(j.id) for j in self.jobs) or 'none'})")

    def wait_for_training(self, timeout: float = 120.0, *, rank: Optional[int] = None,
                          process=None) -> Job:
        """Wait until a training (of ``rank``, if given) is suspended at its first suspension point and return
        its job; each call returns a job not returned before. ``process`` (a ``Popen``) is watched: if it exits
        first, ``JobLost`` says so instead of waiting out the timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                if self._closed.is_set() or not self._started:
                    raise JobStateError("the debugger server", "closed" if self._started else "not started",
                                        "close() was called, so no training can connect to it any more (start a new "
                                        "DebuggerServer)" if self._started else "call start() first, or use it in a "
                                        "with block")
                for job in self._connections.jobs:
                    if job.id in self._claimed or (rank is not None and job.rank != rank):
                        continue
                    if job.state is JobState.WAITING or (job.graph is not None and not job.alive):
                        self._claimed.add(job.id)
                        if process is not None:
                            job.bind_process(process)
                        return job
                if process is not None and process.poll() is not None:
                    raise JobLost(f"the training (pid {process.pid})",
                                  f"it exited with code {process.returncode} before connecting to {self.address}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"no training{f' of rank {rank}' if rank is not None else ''} connected to "
                        f"{self.host}:{','.join(map(str, self.ports))} within {timeout:g} s (start it with "
                        f"{self.training_variables()})")
                self._lock.wait(min(left, 0.1))

    def wait_for_ranks(self, count: int, timeout: float = 180.0) -> "RankGroup":
        """Wait for ``count`` ranks (0 .. count-1) of one multi-rank job and return them as a ``RankGroup``: driven
        together, and held in lockstep at step ends so that a hit on one rank suspends every rank at that step."""
        from msdebug_hooks.server.group import RankGroup

        whole_number("count", count, minimum=1)
        deadline = time.monotonic() + timeout
        jobs = [self.wait_for_training(timeout=max(deadline - time.monotonic(), 0.0), rank=rank)
                for rank in range(count)]
        return RankGroup(jobs)

    def _refused(self, line: str) -> None:
        self._connections.report(line, log=False)        # notify tells it
        self.notify(line)

    def _watch(self) -> None:
        while not self._closed.wait(_WATCHDOG_PERIOD):
            if self._handshakes is not None:
                self._handshakes.check()
            now = time.monotonic()
            for job in self.jobs:
                job.check_heartbeat(now)
            with self._lock:
                self._lock.notify_all()
