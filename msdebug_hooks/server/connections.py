"""Which job each client connection is, and what the server reports: the part of the server the gRPC methods use.

Why its own module: the servicer (``servicer.py``) needs only this of the server, and the server
(``server.py``) starts the servicer on each port it listens on; with the jobs kept here, both import this module
and neither imports the other.
"""
from __future__ import annotations

import threading
from typing import Optional

from msdebug_hooks._log import get_logger
from msdebug_hooks.server.job import Job

__all__ = ["Connections"]

_LOG = get_logger("server")


class Connections:
    """The jobs of one server by client connection (port, peer), and its reports.

    ``changed`` guards both and is notified whenever a job connects or a report is added, so the server's
    ``wait_for_training`` and a script waiting on reports wake up."""

    def __init__(self, *, free_runs: bool = True, log_reports: bool = True) -> None:
        self.free_runs = free_runs          # the jobs made from now on answer multi-step runs with free runs
        self.log_reports = log_reports      # also log every report at INFO
        self.reports: list[str] = []
        self.changed = threading.Condition()
        self._jobs: list[Job] = []
        self._by_peer: dict[tuple[int, str], Job] = {}

    @property
    def jobs(self) -> list[Job]:
        """Every job so far, in the order they connected."""
        with self.changed:
            return list(self._jobs)

    def report(self, message: str, *, log: bool = True) -> None:
        """Keep ``message`` (a connect, a loss, garbage from a client) and log it if asked to (and ``log``)."""
        with self.changed:
            self.reports.append(message)
            self.changed.notify_all()
        if self.log_reports and log:
            _LOG.info("debugger server: %s", message)

    def job_for(self, peer: str, port: int, method: str, *, create: bool = False,
                quiet: bool = False) -> Optional[Job]:
        """The job of this connection. ``SendMetadata`` (``create``) makes a new one (a second session on a known
        connection is a new job too); any other call from an unknown connection is reported (unless ``quiet``) and
        refused with None: it never reaches another training's job."""
        key = (port, peer)
        with self.changed:
            job = self._by_peer.get(key)
            if job is None and not create:
                if not quiet:
                    self.report(f"{peer}: {method} from a client that sent no metadata first; refused")
                return None
            if job is not None and not (create and job.graph is not None):
                return job
            previous = job
            job = Job(len(self._jobs) + 1, peer, port, self.report)
            job.free_runs = self.free_runs
            self._jobs.append(job)
            self._by_peer[key] = job
            others = [j for j in self._jobs if j.alive and j is not job and j is not previous and j.port == port]
            self.changed.notify_all()
        if previous is not None:       # a second session on one connection: the first one is over
            previous.end_session(f"the training started a new session on the same connection (job {job.id})")
        note = f" ({len(others)} other job(s) on this port)" if others else ""
        self.report(f"job {job.id} connected from {peer} on port {port}{note}")
        return job
