"""Issue 36: our debugger server speaks TLS, admits only the trainings it should, and says when it is exposed.

Certificates are made in the test with the ``openssl`` binary (a CA, a server and a client certificate, an unrelated
CA, an expired server certificate). Real MindSpore 2.10 CPU LeNet trainings in subprocesses, real gRPC: a
mutual-TLS training under ``msdebug serve -c continue`` runs to its end; a plaintext training and one without a
client certificate are refused, each told why in one line, and train on to the end (exit 0, every step, the weights
saved); the server reports each refusal with the address it came from, and garbage sent over an admitted TLS
connection is reported as it is without TLS (the server's input fuzz, with TLS on).
"""
from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from fault_server import make_certificates
from mindinsight_server import free_port
from msdebug_cli import cli_env, run_msdebug
from server_training import PLAIN, eventually, training

from msdebug_hooks.cli._tls_options import TLS_FLAGS
from msdebug_hooks.errors import ConfigError, ConfigErrors
from msdebug_hooks.server import DebuggerServer
from msdebug_hooks.server.exposure import host_addresses
from msdebug_hooks.server.server_tls import ServerTls
from msdebug_hooks.wire import debug_grpc_pb2 as pb

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl binary for certificates")]


def _expired_certificate(certs: dict, directory: Path) -> Path:
    """The server's request signed by the CA for one day of 2020 (``openssl ca`` takes explicit dates)."""
    (directory / "index.txt").write_text("")
    (directory / "serial").write_text("01\n")
    config = directory / "ca.cnf"
    config.write_text("[ca]\ndefault_ca = d\n[d]\ndatabase = index.txt\nnew_certs_dir = .\nserial = serial\n"
                      "default_md = sha256\npolicy = p\n[p]\ncommonName = supplied\n")
    out = directory / "expired.pem"
    subprocess.run(["openssl", "ca", "-batch", "-config", str(config), "-cert", str(certs["ca"]), "-keyfile",
                    str(certs["ca_key"]), "-in", str(directory / "server.csr"), "-out", str(out), "-notext",
                    "-startdate", "20200101000000Z", "-enddate", "20200102000000Z"],
                   check=True, capture_output=True, timeout=60, cwd=directory)
    return out


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    directory = tmp_path_factory.mktemp("certs")
    paths = make_certificates(directory)
    paths["expired"] = _expired_certificate(paths, directory)
    return paths


def test_tls_files_are_checked_at_start_one_line_per_problem(certs, tmp_path):
    not_pem = tmp_path / "notes.txt"
    not_pem.write_text("hello\n")
    cases = [  # (options, the line's parts)
        (["--tls-cert", str(tmp_path / "nope.pem"), "--tls-key", str(certs["server_key"])],
         ["--tls-cert=", "nope.pem", "a readable PEM certificate (no such file)"]),
        (["--tls-cert", str(tmp_path), "--tls-key", str(certs["server_key"])],
         ["--tls-cert=", "a readable PEM certificate (is a directory)"]),
        (["--tls-cert", str(certs["server"]), "--tls-key", str(not_pem)],
         ["--tls-key=", "notes.txt", "not PEM"]),
        (["--tls-cert", str(certs["server"]), "--tls-key", str(certs["client_key"])],
         ["--tls-key=", "the unencrypted private key of --tls-cert", "does not match the certificate"]),
        (["--tls-cert", str(certs["expired"]), "--tls-key", str(certs["server_key"])],
         ["--tls-cert=", "expired.pem", "expired on Jan  2 00:00:00 2020 GMT"]),
        (["--tls-cert", str(certs["server"])], ["--tls-key is not set", "given together with --tls-cert"]),
        (["--tls-client-ca", str(certs["ca"])], ["--tls-cert is not set", "--tls-client-ca needs the server's"]),
    ]
    for options, parts in cases[:1]:     # the command's line and exit code, once (the same reading as below)
        proc = run_msdebug("serve", "--port", str(free_port()), "-c", "status", *options, timeout=60)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, (options, proc.stderr)
        assert lines[0].startswith("msdebug serve: error: ") and all(p in lines[0] for p in parts), lines[0]
    for options, parts in cases:
        given = dict(zip((o[6:].replace("-", "_") for o in options[::2]), options[1::2]))
        with pytest.raises(ConfigError) as info:
            ServerTls.from_paths(given.get("cert"), given.get("key"), given.get("client_ca"), fields=TLS_FLAGS)
        assert not isinstance(info.value, ConfigErrors) and all(p in str(info.value) for p in parts), str(info.value)
    both = run_msdebug("debug", "--tls-cert", str(not_pem), "--tls-key", str(certs["client_key"]),
                       "--tls-client-ca", str(tmp_path / "ca.pem"), "-c", "continue", str(not_pem), timeout=60)
    assert both.returncode == 2 and len(both.stderr.strip().splitlines()) == 2, both.stderr   # one line each
    assert "--tls-cert=" in both.stderr and "--tls-client-ca=" in both.stderr
    with pytest.raises(Exception, match="tls_key"):                       # the API names its own arguments
        DebuggerServer(tls_cert=str(certs["server"]))
    assert ServerTls.from_paths(certs["server"], certs["server_key"]).names == ("localhost", "127.0.0.1")


def test_beyond_loopback_one_warning_and_a_reachable_host_in_the_hint(certs):
    """Loopback and mutual TLS: no warning; every interface without TLS: the warning with what is exposed and the
    options; with TLS but no client CA: the shorter one. The hint never names 0.0.0.0."""
    hostname = socket.gethostname()
    pair = {"tls_cert": str(certs["server"]), "tls_key": str(certs["server_key"])}
    for host, tls, warned in (("127.0.0.1", {}, None), ("0.0.0.0", {}, "without TLS"),
                              ("0.0.0.0", pair, "without --tls-client-ca"),
                              ("0.0.0.0", dict(pair, tls_client_ca=str(certs["ca"])), None)):
        lines: list[str] = []
        with DebuggerServer(host=host, notify=lines.append, log_reports=False, **tls) as server:
            hint = server.training_variables()
            assert "MS_DEBUGGER_HOST=0.0.0.0" not in hint and f"MS_DEBUGGER_PORT={server.port}" in hint, hint
        if warned is None:
            assert lines == [], lines
        else:
            assert len(lines) == 1 and warned in lines[0], lines
        if host == "0.0.0.0":
            # this host's name where it resolves beyond loopback (a cluster node), else loopback (a sandbox)
            assert f"MS_DEBUGGER_HOST={hostname if host_addresses() else '127.0.0.1'} " in hint, hint
        if "tls_client_ca" in tls:
            assert "MS_DEBUGGER_TLS_CERT=" in hint and "MS_DEBUGGER_TLS_CA=" in hint
    serve = subprocess.run([sys.executable, "-m", "msdebug_hooks", "serve", "--host", "0.0.0.0", "--port",
                            str(free_port()), "--connect-timeout", "0.5", "-c", "status"], env=cli_env(),
                           capture_output=True, text=True, timeout=60)
    out = serve.stdout.splitlines()
    assert out[0].startswith("msdebug serve: listening on 0.0.0.0:") and "(every interface" in out[0] and \
        "MS_DEBUGGER_HOST=0.0.0.0" not in out[0], out
    warning = out[1]
    assert warning.startswith("msdebug serve: warning: listening on 0.0.0.0:") and "without TLS" in warning
    for part in ("connect as a training", "plaintext", "--tls-cert/--tls-key", "--tls-client-ca", "--host 127.0.0.1"):
        assert part in warning, warning
    assert sum("warning" in line for line in out) == 1 and "Traceback" not in serve.stderr


def _tls_env(certs, *, client: bool) -> dict:
    env = {"MS_DEBUGGER_TLS_CA": str(certs["ca"])}
    if client:
        env.update(MS_DEBUGGER_TLS_CERT=str(certs["client"]), MS_DEBUGGER_TLS_KEY=str(certs["client_key"]))
    return env


@pytest.mark.mindspore
def test_mutual_tls_training_under_serve_continue_runs_to_its_end(certs, tmp_path):
    port = free_port()
    serve = subprocess.Popen([sys.executable, "-m", "msdebug_hooks", "serve", "--port", str(port), "--tls-cert",
                              str(certs["server"]), "--tls-key", str(certs["server_key"]), "--tls-client-ca",
                              str(certs["ca"]), "-c", "watch weight_overflow; step 1; continue"],
                             env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first = serve.stdout.readline()
        assert f"listening on 127.0.0.1:{port} over mutual TLS" in first and "MS_DEBUGGER_TLS_CERT=" in first, first
        with training(tmp_path, port, "--batches", "4", host="localhost", env=_tls_env(certs, client=True)) as run:
            out, _ = serve.communicate(timeout=240)
            assert serve.returncode == 0, out
            assert run.proc.wait(60) == 0 and run.lines()[-1] == "end" and run.steps() == 4
            assert run.weights.exists()
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait(30)
    assert "job 1 connected from" in out and "job 1 waiting at step 1" in out and "job 1 finished" in out, out
    assert "refused" not in out and "warning" not in out


@pytest.mark.mindspore
def test_plaintext_and_uncertified_trainings_are_refused_and_train_on(certs, tmp_path):
    lines: list[str] = []
    with DebuggerServer(tls_cert=str(certs["server"]), tls_key=str(certs["server_key"]),
                        tls_client_ca=str(certs["ca"]), notify=lines.append, log_reports=False) as server:
        # the server's inputs over an admitted TLS connection: garbage is reported and answered FAILED
        credentials = grpc.ssl_channel_credentials(certs["ca"].read_bytes(), certs["client_key"].read_bytes(),
                                                   certs["client"].read_bytes())
        with grpc.secure_channel(f"localhost:{server.port}", credentials) as channel:
            wait = channel.unary_unary("/debugger.EventListener/WaitCMD")
            assert pb.EventReply.FromString(wait(b"\xff\xfe not a protobuf", timeout=10)).status == \
                pb.EventReply.FAILED
            hits = channel.stream_unary("/debugger.EventListener/SendWatchpointHits")
            assert pb.EventReply.FromString(hits(iter([b"\x0a\xff\xff\xff"]), timeout=10)).status == \
                pb.EventReply.FAILED
            assert pb.EventReply.FromString(wait(pb.Metadata(device_name="0:0").SerializeToString(),
                                                 timeout=10)).status == pb.EventReply.FAILED  # no metadata first
            metadata = channel.unary_unary("/debugger.EventListener/SendMetadata")
            metadata(pb.Metadata(device_name="0:0", ms_version="2.10.0").SerializeToString(), timeout=10)
        assert len(server.jobs) == 1                  # the certified client got in, the rest was refused
        with socket.create_connection(("127.0.0.1", server.port)) as raw:    # not even TLS
            raw.sendall(b"GET / HTTP/1.1\r\n\r\n" + bytes(range(256)) * 8)
        with training(tmp_path, server.port, "--batches", "3", name="plain") as plain, \
                training(tmp_path, server.port, "--batches", "3", name="uncertified", host="localhost",
                         env=_tls_env(certs, client=False)) as uncertified:
            for run in (plain, uncertified):
                assert run.proc.wait(180) == 0, run.out()
                assert run.lines()[-1] == "end" and run.steps() == 3 and run.weights.exists()
        eventually(lambda: server.refused >= 3, timeout=10, what=f"three refusals reported: {lines}")
        assert len(server.jobs) == 1 and server.refused >= 3
        garbage = [r for r in server.reports if "garbage" in r]
        assert any("WaitCMD" in r for r in garbage) and any("SendWatchpointHits" in r for r in garbage), garbage
        assert any("no metadata first" in r for r in server.reports)
    refusals = [line for line in lines if line.startswith("refused a connection from ")]
    assert refusals and all("TLS handshake failed" in line for line in refusals), lines
    assert {line.split()[4] for line in refusals} <= {"127.0.0.1", "::1"}, refusals
    told = {name: [line for line in run.out().splitlines() if "without the debugger" in line]
            for name, run in (("plain", plain), ("uncertified", uncertified))}
    assert len(told["plain"]) == 1 and "it speaks TLS" in told["plain"][0] and \
        "MS_DEBUGGER_TLS_CA" in told["plain"][0], told
    assert len(told["uncertified"]) == 1 and "MS_DEBUGGER_TLS_CERT" in told["uncertified"][0], told
    assert "Traceback" not in plain.out() + uncertified.out()


@pytest.mark.mindspore
def test_debug_over_mutual_tls_starts_its_training_with_the_tls_variables(certs):
    """``msdebug debug`` hands its training the server's TLS settings it can know; the client certificate must
    come from the person (without one: one line, exit 2, no training started)."""
    server = ["--tls-cert", str(certs["server"]), "--tls-key", str(certs["server_key"]), "--tls-client-ca",
              str(certs["ca"])]
    env = cli_env()
    env.update(MS_DEBUGGER_TLS_CA=str(certs["ca"]))
    missing = subprocess.run([sys.executable, "-m", "msdebug_hooks", "debug", *server, "-c", "continue", str(PLAIN)],
                             env=env, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1, missing.stderr
    assert "MS_DEBUGGER_TLS_CERT and MS_DEBUGGER_TLS_KEY" in missing.stderr and missing.stdout == ""
    env.update(_tls_env(certs, client=True))
    proc = subprocess.run([sys.executable, "-m", "msdebug_hooks", "debug", *server, "-c", "step 1; continue",
                           str(PLAIN), "--batches", "3"], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "with the debugger at 127.0.0.1:" in proc.stdout and " over TLS" in proc.stdout
    assert "job 1 waiting at step 1" in proc.stdout and "job 1 finished: the training finished at step 3" in proc.stdout


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="the kernel's TCP table is Linux's")
def test_the_kernel_table_names_the_peer_of_a_connection_as_grpc_names_it():
    """What the refusal report rests on: a connection to a listening port shows up with the client's address and
    port, the same endpoint gRPC's ``context.peer()`` spelling gives, and is gone once closed."""
    from msdebug_hooks.server.handshakes import established_peers, peer_endpoint

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = listener.accept()
            mine = client.getsockname()
            assert established_peers([port]) == {mine} and established_peers([port + 1 if port < 65535 else 1]) \
                != {mine}
            assert peer_endpoint(f"ipv4:127.0.0.1:{mine[1]}") == mine
            accepted.close()
        eventually(lambda: mine not in (established_peers([port]) or set()), timeout=5, what="the closed one gone")
    assert peer_endpoint("ipv6:%5B::1%5D:51234") == ("::1", 51234)
    assert peer_endpoint("ipv6:%5B::ffff:10.0.0.5%5D:7") == ("10.0.0.5", 7) and peer_endpoint("unix:/x") is None
