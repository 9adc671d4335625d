"""Issue 13 and 23 acceptance, multi-rank: a real two-rank ``msrun`` job connects both ranks to one ``DebuggerServer``
listening on P and P+1 (MindInsight's online debugger shows one device only), with ``DistributedDebugger(ranks="all",
port_per_rank=True)`` or with env activation alone (``ENABLE_MS_DEBUGGER=1`` and the port, nothing in the script).
Both ranks are visible, a hit on rank 1 is reported as rank 1 and holds rank 0 at the same step, and after the hit
``step 1`` three times, ``unwatch all``, ``continue`` and ``terminate`` each answer, through ``RankGroup`` and in the
``msdebug serve --ranks 2`` prompt, with ``status`` and ``jobs`` agreeing. A server on one port, and the rank that
finds no server on its own, both name the route that serves every rank.

The poisoned batch (rank 1, step 3) runs without ``LossGuard`` (``--no-guard``): its NaN reaches every rank's weights
through the gradient all-reduce, so from step 4 on the loss of both ranks overflows.
"""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from typing import Optional

import pytest

from project import EXAMPLES, ROOT, fresh_env
from msrun_job import run_msrun
from msdebug_hooks.server import DebuggerServer, JobState

pytestmark = [pytest.mark.mindspore, pytest.mark.msrun]

SCRIPT = ROOT / "examples" / "distributed" / "train.py"
LOSS = "*SoftmaxCrossEntropyWithLogits-op*"
JOB = ["--batches", "10", "--nan-rank", "1", "--nan-step", "3", "--no-guard"]


def _server_on_two_consecutive_ports() -> DebuggerServer:
    for _ in range(20):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base < 65535:
            try:
                return DebuggerServer(port=base, ports=[base + 1]).start()
            except OSError:
                continue
    raise RuntimeError("no two consecutive free ports")


def _installed_launcher(tmp_path):
    """The script as an installed msdebug-hooks runs it: its ``.pth`` processed at start (``site.addsitedir``)."""
    site_dir = tmp_path / "site-packages"
    site_dir.mkdir()
    shutil.copy(ROOT / "msdebug_hooks_autoattach.pth", site_dir)
    launcher = tmp_path / "launch_train.py"
    launcher.write_text(f"import runpy, site, sys\nsite.addsitedir({str(site_dir)!r})\n"
                        f"sys.argv = [{str(SCRIPT)!r}, *sys.argv[1:]]\n"
                        f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n")
    return launcher


@pytest.mark.timeout(420, method="signal")
def test_every_rank_steps_unwatches_and_continues_after_a_hit_on_rank_1_through_the_rank_group(tmp_path):
    jobs_done: list = []
    with _server_on_two_consecutive_ports() as server:
        runner = threading.Thread(target=lambda: jobs_done.append(run_msrun(
            SCRIPT, [*JOB, "--debugger", f"127.0.0.1:{server.port}", "--debugger-ranks", "all"], tmp_path,
            timeout=360)), daemon=True)
        runner.start()
        try:
            group = server.wait_for_ranks(2, timeout=240)
            ranks = group.ranks
            assert [(j.rank, j.port, j.step, j.state, j.world) for j in ranks.values()] == [
                (0, server.port, 0, JobState.WAITING, 2), (1, server.port + 1, 0, JobState.WAITING, 2)]
            assert group.run(1) == [] and [j.step for j in ranks.values()] == [1, 1]
            (loss,) = ranks[0].nodes(LOSS)                 # each rank's own loss, before the all-reduce
            group.watch("tensor_overflow", loss.name)
            hits = group.run_until_hit(timeout=180)
            assert [(h.rank, h.step, h.node.type) for h in hits] == [(1, 3, "SoftmaxCrossEntropyWithLogits")]
            # lockstep: rank 0 (no hit, its loss stayed finite) is suspended at the same step, not inside a collective
            assert [(j.step, j.state) for j in ranks.values()] == [(3, JobState.WAITING)] * 2
            assert ranks[0].all_hits == [] and ranks[0].tensor(loss.name).shape == ()
            time.sleep(35)    # longer than MindSpore's CPU collective timeout: nobody is waiting in a collective
            assert all(job.alive for job in ranks.values())
            for step in (4, 5, 6):                        # step 1, three times: the NaN is on every rank now
                hits = group.run(1, timeout=120)
                assert [(j.step, j.state) for j in ranks.values()] == [(step, JobState.WAITING)] * 2
                assert sorted((h.rank, h.step) for h in hits) == [(0, step), (1, step)]
            assert group.unwatch() == [1]
            assert group.run_until_hit(timeout=180) == []   # continue: nothing watched, so to the end
            assert [(j.state, j.step) for j in ranks.values()] == [(JobState.FINISHED, 10)] * 2
            assert group.terminate(timeout=10) == [JobState.FINISHED] * 2     # answers at once
        finally:
            runner.join(380)
    (job,) = jobs_done
    assert job.returncode == 0, job.describe()
    assert job.result(0)["steps"] == job.result(1)["steps"] == list(range(1, 11))


def _serve_while_msrun_runs(tmp_path, port: int, serve_args: list, job_args: list, *, host: str = "127.0.0.1",
                            job_env: Optional[dict] = None):
    """``msdebug serve --port PORT *serve_args`` in a process of its own while a two-rank msrun job of the launcher
    runs with the debugger variables pointing at PORT; (the server's first line, its whole output, the job, its exit
    code). ``job_env``: more variables of the job (TLS). The output is printed, so a failing assertion shows it.
    The server is always stopped."""
    env = fresh_env()
    env["PYTHONPATH"] = os.pathsep.join([str(EXAMPLES), str(ROOT)])
    serve = subprocess.Popen([sys.executable, "-m", "msdebug_hooks", "serve", "--port", str(port), *serve_args],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        hint = serve.stdout.readline()
        job = run_msrun(_installed_launcher(tmp_path), job_args, tmp_path, timeout=360,
                        env={"ENABLE_MS_DEBUGGER": "1", "MS_DEBUGGER_HOST": host, "MS_DEBUGGER_PORT": str(port),
                             **(job_env or {})})
        out, _ = serve.communicate(timeout=120)
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait(30)
    out = hint + out
    print(out)
    return hint, out, job, serve.returncode


@pytest.mark.timeout(420, method="signal")
def test_serve_with_two_ranks_drives_a_job_started_with_env_activation_only_past_its_hit(tmp_path):
    with _server_on_two_consecutive_ports() as probe:     # two consecutive free ports, released for msdebug serve
        port = probe.port
    commands = (f"watch tensor_overflow {LOSS}; continue; status; step 1; step 1; step 1; status; jobs; unwatch all; "
                "continue; status; jobs; terminate")
    hint, out, job, serve_code = _serve_while_msrun_runs(tmp_path, port, ["--ranks", "2", "--timeout", "240", "-c",
                                                                           commands], JOB)
    assert f"listening on 127.0.0.1:{port},{port + 1}" in hint
    assert f"ENABLE_MS_DEBUGGER=1 MS_DEBUGGER_HOST=127.0.0.1 MS_DEBUGGER_PORT={port}" in hint
    assert serve_code == 1
    assert job.returncode == 0, job.describe() + out
    assert job.result(0)["steps"] == job.result(1)["steps"] == list(range(1, 11))
    for rank in (0, 1):
        assert f"rank {rank} of 2 connects to the debugger server at 127.0.0.1:{port + rank}" in job.worker_log(rank)
    (first,) = [line for line in out.splitlines() if "SoftmaxCrossEntropyWithLogits-op" in line and
                "tensor_overflow" in line and line.split()[:1] == ["3"]]
    assert first.split()[:2] == ["3", "1"]                                      # step 3, rank 1 only
    for step in (4, 5, 6):                                                       # each step 1 answered, both ranks
        assert re.search(rf"\(msdebug job \d of 2 ranks step {step - 1} waiting\) step 1\n", out)
        for rank in (0, 1):
            assert re.search(rf"job \d \(rank {rank}\) waiting at step {step}\n", out)
        rows = [line.split()[:2] for line in out.splitlines() if "SoftmaxCrossEntropyWithLogits-op" in line
                and line.split()[:1] == [str(step)]]
        assert sorted(rows) == [[str(step), "0"], [str(step), "1"]]
    assert re.search(r"\(msdebug job \d of 2 ranks step 6 waiting\) unwatch all\ndeleted watchpoint\(s\) 1\n", out)
    for rank in (0, 1):
        assert re.search(rf"job \d \(rank {rank}\) finished: the training finished at step 10\n", out)
    assert re.search(r"\(msdebug job \d of 2 ranks step 10 finished\) terminate\n", out)
    # status and jobs agree, each time they were asked: (rank, state, step) of every rank
    status = re.findall(r"^job \d: rank (\d), (\w+) at step (\d+),", out, re.M)
    jobs = re.findall(r"^\*?\s+\d+\s+(\d)\s+(\w+)\s+(\d+)\s+ipv4:", out, re.M)
    said = {(rank, state, step) for rank, state, step in status}
    assert said == {(r, state, step) for r in "01" for state, step in (("waiting", "3"), ("waiting", "6"),
                                                                         ("finished", "10"))}
    assert sorted(jobs) == sorted(s for s in status if s[2] != "3")


@pytest.mark.timeout(420, method="signal")
def test_a_server_on_one_port_and_the_rank_that_finds_none_both_name_the_route_for_every_rank(tmp_path):
    with _server_on_two_consecutive_ports() as probe:
        port = probe.port                                # P + 1 stays free: nothing serves rank 1
    _, out, job, _ = _serve_while_msrun_runs(tmp_path, port, ["-c", "status; terminate"], ["--batches", "6"])
    assert job.returncode == 0, job.describe() + out
    assert "job 1 is rank 0 of a 2-rank job and this server serves one port" in out
    assert f"msdebug serve --port {port} --ranks 2 serves every rank" in out
    rank1 = job.worker_log(1)
    assert f"cannot reach the debugger server at 127.0.0.1:{port + 1}" in rank1
    assert f"rank 1 of 2 connects to port {port} + 1: msdebug serve --port {port} --ranks 2 serves every rank" in rank1
    assert f"msdebug serve --port {port + 1}" not in rank1            # no advice that would serve rank 1 alone
    assert "rank 1 runs undebugged" in rank1
    assert job.result(0)["steps"] == job.result(1)["steps"] == [1]    # terminated at step 0: one step still runs


@pytest.mark.timeout(420, method="signal")
@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl binary for certificates")
def test_serve_with_two_ranks_over_mutual_tls_pauses_and_steps_both_ranks(tmp_path):
    """Issue 36: ``msdebug serve --ranks 2`` with mutual TLS; every rank connects over TLS with its client
    certificate (certificates made here), both pause at step 0, step together and run to the end."""
    from fault_server import make_certificates

    certs = make_certificates(tmp_path / "certs")
    with _server_on_two_consecutive_ports() as probe:
        port = probe.port
    tls = ["--tls-cert", str(certs["server"]), "--tls-key", str(certs["server_key"]), "--tls-client-ca",
           str(certs["ca"])]
    hint, out, job, serve_code = _serve_while_msrun_runs(
        tmp_path, port, ["--ranks", "2", "--timeout", "240", *tls, "-c", "status; step 1; step 1; status; continue"],
        ["--batches", "4"], host="localhost",
        job_env={"MS_DEBUGGER_TLS_CA": str(certs["ca"]), "MS_DEBUGGER_TLS_CERT": str(certs["client"]),
                 "MS_DEBUGGER_TLS_KEY": str(certs["client_key"])})
    assert f"listening on 127.0.0.1:{port},{port + 1} over mutual TLS" in hint
    assert serve_code == 0 and job.returncode == 0, job.describe() + out
    assert job.result(0)["steps"] == job.result(1)["steps"] == list(range(1, 5))
    status = re.findall(r"^job \d: rank (\d), (\w+) at step (\d+),", out, re.M)
    assert sorted(status) == [("0", "waiting", "0"), ("0", "waiting", "2"), ("1", "waiting", "0"),
                              ("1", "waiting", "2")], out
    for rank in (0, 1):
        assert re.search(rf"job \d \(rank {rank}\) finished: the training finished at step 4\n", out)
    assert "refused" not in out and "without the debugger" not in job.worker_log(0) + job.worker_log(1)
