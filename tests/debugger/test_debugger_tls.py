"""TLS to a debugger server: certificates made at test time with the ``openssl`` binary, a TLS ``FaultServer`` on
loopback. A trusted server works (also with a client certificate); a wrong CA or a wrong host name is refused with
an error naming the setting to fix, and training still runs to the end, undebugged, with one warning."""
from __future__ import annotations

import logging
import shutil

import pytest

from msdebug_hooks.debugger.settings import DebuggerSettings, TlsConfig
from msdebug_hooks.errors import ConfigError, ConfigErrors

from fault_server import RUN, FaultServer, make_certificates
from mindinsight_server import free_port

pytestmark = [pytest.mark.timeout(90),
              pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl binary for certificates")]


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certificates(tmp_path_factory.mktemp("certs"))


def _pem(path) -> bytes:
    return path.read_bytes()


def _session(address: str, tls: TlsConfig):
    import numpy as np

    from msdebug_hooks.wire import ms_graph_pb2 as graph_pb
    from msdebug_hooks.debugger.graph import DebugGraph
    from msdebug_hooks.debugger.session import DebuggerSession
    from msdebug_hooks.debugger.transport import Transport

    graph = DebugGraph(graph_pb.GraphProto(name="kernel_graph_0", root_name="0"))
    return DebuggerSession(Transport(address, timeout=3, tls=tls), graph, lambda name: np.zeros(1),
                           ms_version="2.10.0", sleep=lambda s: None)


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING and r.name.startswith("msdebug_hooks.debugger")]


def test_trusted_server_with_and_without_a_client_certificate(certs):
    server_pair = (_pem(certs["server_key"]), _pem(certs["server"]))
    for client_ca in (None, _pem(certs["ca"])):
        with FaultServer(tls=server_pair, client_ca=client_ca) as server:
            tls = TlsConfig.from_paths(certs["ca"], certs["client"] if client_ca else None,
                                       certs["client_key"] if client_ca else None)
            session = _session(f"localhost:{server.port}", tls)
            try:
                assert session.connect()
                server.command(RUN)
                assert session.suspend().value == "run"
            finally:
                session.close()
            assert server.recorded.metadata[0].ms_version == "2.10.0" and len(server.recorded.graph_streams) == 1


@pytest.mark.parametrize("case", ["wrong_ca", "wrong_name", "no_client_cert"])
def test_untrusted_server_is_refused_naming_the_setting(certs, case, caplog):
    client_ca = _pem(certs["ca"]) if case == "no_client_cert" else None
    with FaultServer(tls=(_pem(certs["server_key"]), _pem(certs["server"])), client_ca=client_ca) as server:
        tls = TlsConfig.from_paths(certs["other_ca" if case == "wrong_ca" else "ca"],
                                   server_name="wrong.example" if case == "wrong_name" else None)
        session = _session(f"127.0.0.1:{server.port}", tls)
        assert not session.connect()
        assert session.state.value == "detached" and server.recorded.metadata == []
    warnings = _warnings(caplog)
    assert len(warnings) == 1
    message = warnings[0]
    assert "MS_DEBUGGER_TLS_CA" in message and "MS_DEBUGGER_TLS_SERVER_NAME" in message, message
    if case == "no_client_cert":
        assert "MS_DEBUGGER_TLS_CERT" in message
    assert "training continues without the debugger" in message


def test_tls_settings_from_the_environment(certs, tmp_path):
    env = {"ENABLE_MS_DEBUGGER": "1", "MS_DEBUGGER_TLS_CA": str(certs["ca"]),
           "MS_DEBUGGER_TLS_CERT": str(certs["client"]), "MS_DEBUGGER_TLS_KEY": str(certs["client_key"]),
           "MS_DEBUGGER_TLS_SERVER_NAME": "localhost", "MSDEBUG_DEBUGGER_ON_LOST": "Stop"}
    settings = DebuggerSettings.from_env(env)
    assert settings.tls.ca == _pem(certs["ca"]) and settings.tls.key == _pem(certs["client_key"])
    assert settings.tls.server_name == "localhost" and settings.on_server_lost == "stop"
    assert DebuggerSettings.from_env({"ENABLE_MS_DEBUGGER": "1"}).tls is None
    with pytest.raises(ConfigError) as info:
        DebuggerSettings.from_env({"MS_DEBUGGER_TLS_CA": str(tmp_path / "missing.pem")})
    assert info.value.field == "MS_DEBUGGER_TLS_CA" and "a readable PEM file" in str(info.value)
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello")
    with pytest.raises(ConfigErrors) as info:
        DebuggerSettings.from_env({"MS_DEBUGGER_TLS_CA": str(not_pem), "MS_DEBUGGER_TLS_CERT": str(certs["client"]),
                                   "MSDEBUG_DEBUGGER_ON_LOST": "pause"})
    fields = [e.field for e in info.value.errors]
    assert fields == ["MS_DEBUGGER_TLS_CA", "MS_DEBUGGER_TLS_KEY", "MSDEBUG_DEBUGGER_ON_LOST"], fields


@pytest.mark.mindspore
def test_training_over_tls_and_with_a_wrong_ca(certs, caplog):
    """A real LeNet training attached over TLS, then the same with an untrusted server: same losses as without
    the debugger both times; the second logs one warning naming the CA setting."""
    from _recording import train_losses
    from msdebug_hooks.debugger.callback import DebuggerCallback

    def train(callbacks) -> list[float]:
        return train_losses(callbacks, 6)

    reference = train([])
    pair = (_pem(certs["server_key"]), _pem(certs["server"]))
    for ca, attached in ((certs["ca"], True), (certs["other_ca"], False)):
        port = free_port()
        with FaultServer(port, tls=pair) as server:
            server.auto_reply = RUN
            debugger = DebuggerCallback("localhost", port, tls_ca=str(ca), rpc_timeout=3)
            assert train([debugger]) == reference
        waits = [w.cur_step for w in server.recorded.waits]
        assert waits == (list(range(7)) if attached else [])
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and "MS_DEBUGGER_TLS_CA (DebuggerCallback tls_ca)" in warnings[0]
    with pytest.raises(ConfigError, match="tls_key"):
        DebuggerCallback("localhost", 50051, tls_cert=str(certs["client"]))
