"""A real MindInsight 2.3.1 debugger server for tests, and the REST calls its browser UI makes.

MindInsight 2.3.1 pins protobuf 3.20 and needs NumPy < 2, so it lives in its own venv, ``.venv-mindinsight`` at the
project root, created on first use and reused after (``tests/helpers/venv_tools.py`` stamps a complete one). The
``mindinsight_server`` fixture starts one server per test session on free ports (REST + debugger gRPC) and always
stops it. Tests drive a debugger session exactly as a person in the browser would, through ``MindInsightREST``;
request bodies follow docs/debugger-protocol.md section 4.

The fixtures are made visible to every test module by tests/conftest.py.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from venv_tools import ROOT, ensure_venv

MINDINSIGHT_VENV = ROOT / ".venv-mindinsight"
MINDINSIGHT_REQUIREMENTS = ("mindinsight==2.3.1", "numpy<2")
API = "/v1/mindinsight/debugger"
SESSION = "0"   # the online session id is always "0"


class RESTError(RuntimeError):
    """MindInsight answered a REST call with an HTTP error; carries the status and the JSON error body."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path} -> HTTP {status}: {body}")
        self.status = status
        self.body = body


@dataclass
class MindInsightREST:
    """The debugger REST API of one MindInsight server, as the browser UI calls it (urllib + json only)."""

    base_url: str
    graph_name: str = "kernel_graph_0"
    timeout: float = 40.0   # poll-data long-polls up to 25 s
    _pos: str = field(default="0", init=False)

    # -- plumbing ---------------------------------------------------------------------------------------------
    def _call(self, method: str, path: str, body: Any = None, query: dict | None = None) -> Any:
        url = self.base_url + API + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                text = reply.read().decode()
        except urllib.error.HTTPError as exc:
            raise RESTError(method, path, exc.code, exc.read().decode(errors="replace")) from None
        return json.loads(text) if text else None

    def _session(self, suffix: str) -> str:
        return f"/sessions/{SESSION}/{suffix}"

    # -- session ------------------------------------------------------------------------------------------------
    def create_online_session(self) -> str:
        return self._call("POST", "/sessions", {"session_type": "ONLINE", "dump_dir": None})

    def poll(self) -> dict:
        """One long poll (<= 25 s); advances the stored position like the UI does."""
        reply = self._call("GET", self._session("poll-data"), query={"pos": self._pos})
        pos = (reply or {}).get("metadata", {}).get("pos")
        if pos:
            self._pos = pos
        return reply

    def retrieve_all(self) -> dict:
        return self._call("POST", self._session("retrieve"), {"mode": "all"})

    def retrieve_node(self, name: str, *, single_node: bool = False) -> dict:
        return self._call("POST", self._session("retrieve"), {
            "mode": "node", "params": {"name": name, "graph_name": self.graph_name, "single_node": single_node,
                                       "watch_point_id": 0, "rank_id": 0}})

    def metadata(self) -> dict:
        return self.retrieve_all().get("metadata", {})

    def wait_for(self, predicate: Callable[[dict], bool], *, timeout: float = 30.0, interval: float = 0.2,
                 what: str = "condition") -> dict:
        """Retrieve ``mode: all`` until ``predicate(reply)`` holds; return that reply or raise TimeoutError."""
        deadline = time.monotonic() + timeout
        reply: dict = {}
        while time.monotonic() < deadline:
            reply = self.retrieve_all()
            if predicate(reply):
                return reply
            time.sleep(interval)
        raise TimeoutError(f"MindInsight: no {what} within {timeout} s; last reply: {json.dumps(reply)[:2000]}")

    def wait_for_state(self, state: str, *, timeout: float = 30.0) -> dict:
        return self.wait_for(lambda r: r.get("metadata", {}).get("state") == state, timeout=timeout,
                             what=f"state {state!r}")

    # -- watchpoints --------------------------------------------------------------------------------------------
    def condition_collections(self) -> dict:
        return self._call("GET", self._session("condition-collections"))

    def create_watchpoint(self, condition_id: str, params: dict[str, float | bool] | None = None) -> dict:
        body = {"condition": {"id": condition_id,
                              "params": [{"name": k, "value": v} for k, v in (params or {}).items()]},
                "watch_nodes": [], "graph_name": self.graph_name, "rank_id": 0}
        return self._call("POST", self._session("create-watchpoint"), body)

    def update_watchpoint(self, watch_point_id: int, watch_nodes: list[str], *, add: bool = True) -> dict:
        return self._call("POST", self._session("update-watchpoint"), {
            "watch_point_id": watch_point_id, "watch_nodes": watch_nodes, "mode": 1 if add else 0,
            "graph_name": self.graph_name, "rank_id": 0})

    def delete_watchpoint(self, watch_point_id: int | None) -> dict:
        return self._call("POST", self._session("delete-watchpoint"), {"watch_point_id": watch_point_id})

    def recheck(self) -> dict:
        return self._call("POST", self._session("recheck"))

    def search_watchpoint_hits(self, *, limit: int = 50, offset: int = 0) -> dict:
        return self._call("POST", self._session("search-watchpoint-hits"),
                          {"group_condition": {"limit": limit, "offset": offset, "rank_id": 0}})

    # -- training control ---------------------------------------------------------------------------------------
    def continue_steps(self, steps: int = 1) -> dict:
        """``steps`` = N steps, or -1 for "until pause / hit"."""
        return self._call("POST", self._session("control"), {"mode": "continue", "level": "step", "steps": steps})

    def next_node(self, name: str = "") -> dict:
        return self._call("POST", self._session("control"), {
            "mode": "continue", "level": "node", "name": name, "graph_name": self.graph_name, "rank_id": 0})

    def pause(self) -> dict:
        return self._call("POST", self._session("control"), {"mode": "pause"})

    def terminate(self) -> dict:
        return self._call("POST", self._session("control"), {"mode": "terminate"})

    def reset(self, *, timeout: float = 30.0) -> None:
        """Leave the session ``pending`` for the next test: terminate whatever client is attached."""
        if self.metadata().get("state", "pending") != "pending":
            try:
                self.terminate()
            except RESTError:
                pass          # e.g. the client left between the two calls
            self.wait_for_state("pending", timeout=timeout)

    # -- tensors ------------------------------------------------------------------------------------------------
    def tensor_history(self, node_name: str) -> dict:
        return self._call("POST", self._session("tensor-history"),
                          {"name": node_name, "graph_name": self.graph_name, "rank_id": 0})

    def tensor_value(self, tensor_name: str, *, shape: str = "[:, :]", prev: bool = False) -> dict:
        """``tensor_name`` = "<ui node name>:<slot>"; the first call answers ``uncached`` and asks the client."""
        return self._call("GET", self._session("tensors"), query={
            "name": tensor_name, "detail": "data", "shape": shape, "graph_name": self.graph_name,
            "prev": "true" if prev else "false", "rank_id": 0})

    def viewed_value(self, tensor_name: str, shape: str, *, timeout: float = 30):
        """What the UI's value view ends up showing, as a float32 array: tensor-history (base level) first, then the
        value, polled until the client has sent it."""
        import numpy as np

        deadline = time.monotonic() + timeout
        while "shape" not in self.tensor_history(tensor_name.rsplit(":", 1)[0])["tensor_history"][0]:
            assert time.monotonic() < deadline, f"no tensor base for {tensor_name}"
            time.sleep(0.1)
        while (value := self.tensor_value(tensor_name, shape=shape)["tensor_value"])["tensor_status"] != "cached":
            assert time.monotonic() < deadline, f"no tensor value for {tensor_name}"
            time.sleep(0.1)
        return np.asarray(value["value"], np.float32)

    def tensor_graphs(self, tensor_name: str) -> dict:
        return self._call("GET", self._session("tensor-graphs"),
                          query={"tensor_name": tensor_name, "graph_name": self.graph_name, "rank_id": 0})

    def search(self, name: str = "", node_category: str | None = None) -> dict:
        query = {"name": name, "graph_name": self.graph_name, "watch_point_id": 0, "rank_id": 0}
        if node_category:
            query["node_category"] = node_category
        return self._call("GET", self._session("search"), query=query)


@dataclass
class MindInsightServer:
    """Addresses of a running MindInsight and a REST client bound to it."""

    host: str
    port: int             # REST / UI
    debugger_port: int    # gRPC debugger.EventListener
    workspace: Path
    rest: MindInsightREST

    @property
    def grpc_address(self) -> str:
        return f"{self.host}:{self.debugger_port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def logs(self, limit: int = 6000) -> str:
        """The tail of the server's debugger and gunicorn logs, for failure messages."""
        parts = []
        for path in sorted((self.workspace / "log").rglob("*.log")):
            text = path.read_text(errors="replace")
            if text.strip():
                parts.append(f"--- {path.name}\n{text[-limit:]}")
        return "\n".join(parts)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _mindinsight_cmd(venv_dir: Path, home: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["HOME"] = str(home)   # MindInsight writes ~/mindinsight at import; keep that inside the workspace
    bin_dir = venv_dir / "bin"
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"   # `mindinsight start` runs `gunicorn` by name
    env.pop("PYTHONPATH", None)
    return subprocess.run([str(bin_dir / "mindinsight"), *args], env=env, capture_output=True, text=True,
                          timeout=120)


def _wait_listening(host: str, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout} s")


@pytest.fixture(scope="session")
def mindinsight_venv() -> Path:
    """The MindInsight 2.3.1 venv (created once, ~30 s from a warm pip cache; reused while complete)."""
    ensure_venv(MINDINSIGHT_VENV, MINDINSIGHT_REQUIREMENTS)
    return MINDINSIGHT_VENV


@contextlib.contextmanager
def running_mindinsight(venv_dir: Path = MINDINSIGHT_VENV, host: str = "127.0.0.1") -> Iterator[MindInsightServer]:
    """Start MindInsight with the debugger on free ports, create the online session, stop it on exit (always)."""
    port, debugger_port = free_port(), free_port()
    workspace = Path(tempfile.mkdtemp(prefix="msdebug-mindinsight-"))
    (workspace / "summary").mkdir()
    server = MindInsightServer(host, port, debugger_port, workspace, MindInsightREST(f"http://{host}:{port}"))
    try:
        proc = _mindinsight_cmd(venv_dir, workspace, "start", "--port", str(port), "--enable-debugger", "True",
                                "--debugger-port", str(debugger_port), "--summary-base-dir",
                                str(workspace / "summary"), "--workspace", str(workspace))
        if proc.returncode != 0 or "success" not in proc.stdout:
            raise RuntimeError(f"mindinsight start failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        _wait_listening(host, port, 60)
        _wait_listening(host, debugger_port, 60)
        server.rest.create_online_session()
        yield server
    finally:
        _mindinsight_cmd(venv_dir, workspace, "stop", "--port", str(port))   # harmless when start failed early
        shutil.rmtree(workspace, ignore_errors=True)


@pytest.fixture(scope="session")
def mindinsight_server(mindinsight_venv: Path) -> Iterator[MindInsightServer]:
    """A running MindInsight 2.3.1 with the debugger enabled, on free ports; stopped at the end of the session."""
    with running_mindinsight(mindinsight_venv) as server:
        yield server


@pytest.fixture
def mindinsight(mindinsight_server: MindInsightServer) -> Iterator[MindInsightServer]:
    """The session's MindInsight, handed back ``pending`` for the next test whatever this one left attached."""
    yield mindinsight_server
    mindinsight_server.rest.reset()
