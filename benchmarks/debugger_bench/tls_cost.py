"""What TLS adds to the debugger's per-step round trip (issue 36), measured in the run of ``--server``, plaintext
against mutual TLS (certificates made with the ``openssl`` binary, as the tests make them), interleaved:

* the round trip alone: one unary call of the protocol (``SendHeartbeat``, answered by our ``DebuggerServer``'s
  handler without waiting on anything, the same path a ``WaitCMD`` takes) from a client in this process to a server
  in this process, back to back, in alternating rounds of 300 calls; the target is judged on it;
* in training: LeNet-5 with our own server in a process of its own answering one ``WaitCMD`` per step (no free run,
  so every step pays the round trip); the in-hook time of the debugger's step end and the median step. On a loaded
  machine its noise (milliseconds) is far above the effect (microseconds).

Target: TLS adds <= 10 % to the round trip."""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import perf_doc
from debugger_bench import ROOT, servers
from debugger_bench.light_source import hook_classes, interleaved_rounds


def call_round_trip(certs: dict, rounds: int = 10, calls: int = 300) -> dict[str, float]:
    """Median seconds of one ``SendHeartbeat`` round trip to our server, plaintext and mutual TLS."""
    import grpc

    from msdebug_hooks.server import DebuggerServer
    from msdebug_hooks.wire import debug_grpc_pb2 as pb

    request = pb.Heartbeat(message="bench", period=30).SerializeToString()
    credentials = grpc.ssl_channel_credentials(certs["ca"].read_bytes(), certs["client_key"].read_bytes(),
                                               certs["client"].read_bytes())
    with DebuggerServer(log_reports=False) as clear, \
            DebuggerServer(log_reports=False, tls_cert=str(certs["server"]), tls_key=str(certs["server_key"]),
                           tls_client_ca=str(certs["ca"])) as secure, \
            grpc.insecure_channel(f"127.0.0.1:{clear.port}") as clear_channel, \
            grpc.secure_channel(f"localhost:{secure.port}", credentials) as secure_channel:
        calls_of = {"plaintext": clear_channel.unary_unary("/debugger.EventListener/SendHeartbeat"),
                    "mutual TLS": secure_channel.unary_unary("/debugger.EventListener/SendHeartbeat")}
        times: dict[str, list[float]] = {name: [] for name in calls_of}
        for index in range(rounds):
            for name in (list(calls_of) if index % 2 else list(calls_of)[::-1]):
                call = calls_of[name]
                call(request, timeout=10)                       # connected (and the handshake done) first
                for _ in range(calls):
                    start = time.perf_counter()
                    call(request, timeout=10)
                    times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def tls_round_trip(rounds: int, steps: int, section: perf_doc.Section) -> dict[str, float]:
    """(call TLS / plaintext, in-hook TLS / plaintext, step TLS / plaintext); printed and added to ``section``."""
    sys.path.insert(0, str(ROOT / "tests" / "helpers"))
    from fault_server import make_certificates
    from lenet import make_dataset, make_model

    spent: list[tuple[float, float]] = []
    TimedDebugger, _ = hook_classes(spent)
    with tempfile.TemporaryDirectory(prefix="msdebug-tls-bench-") as directory:
        certs = make_certificates(Path(directory))
        call = call_round_trip(certs)
        plain_proc, plain_port = servers.start_ours(0, per_step=True)
        tls_proc, tls_port = servers.start_ours(0, tls_dir=directory, per_step=True)
        client = {"tls_ca": str(certs["ca"]), "tls_cert": str(certs["client"]), "tls_key": str(certs["client_key"])}
        variants = {"plain": lambda: [],
                    "one wait per step, plaintext": lambda: [TimedDebugger("127.0.0.1", plain_port)],
                    "one wait per step, mutual TLS": lambda: [TimedDebugger("localhost", tls_port, **client)]}
        try:
            models = {name: make_model(0.01)[0] for name in variants}
            datasets = {name: make_dataset(steps, prebuilt=True) for name in variants}
            for name, model in models.items():          # warm up (and the TLS handshake)
                model.train(1, datasets[name], callbacks=variants[name](), dataset_sink_mode=False)
            times, hooks = interleaved_rounds(variants, models, datasets, rounds, spent)
        finally:
            servers.stop(plain_proc)
            servers.stop(tls_proc)
    clear, tls = "one wait per step, plaintext", "one wait per step, mutual TLS"
    hook = {name: statistics.median(h[0] for h in hooks[name]) for name in (clear, tls)}
    step = {name: statistics.median(times[name]) for name in variants}
    ratio_hook, ratio_step = hook[tls] / hook[clear], step[tls] / step[clear]
    ratio_call = call["mutual TLS"] / call["plaintext"]
    verdict = "met" if ratio_call <= 1.10 else "NOT met"
    line = (f"TLS on the round trip of one call to our server (loopback, in-process, 10 alternating rounds of 300 "
            f"calls): **{call['mutual TLS'] * 1e6:.0f} us** with mutual TLS against {call['plaintext'] * 1e6:.0f} us "
            f"in plaintext (**x{ratio_call:.3f}**). Target (issue 36) TLS <= +10 % on the round trip: {verdict}.")
    print(line)
    section.add(line, "")
    line = (f"In training (our server, one `WaitCMD` per step, LeNet-5 batch 32, {rounds} "
            f"interleaved rounds x {steps} steps): in-hook **{hook[tls] * 1e6:.0f} us** with mutual TLS against "
            f"{hook[clear] * 1e6:.0f} us in plaintext (**x{ratio_hook:.3f}**); median step {step[tls] * 1e3:.3f} ms "
            f"against {step[clear] * 1e3:.3f} ms (x{ratio_step:.3f}; plain training {step['plain'] * 1e3:.3f} ms; "
            f"load (1 min) {perf_doc.load_1m()}).")
    print(line)
    section.add(line, "")
    return {"call": ratio_call, "in_hook": ratio_hook, "step": ratio_step}
