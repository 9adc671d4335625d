"""Issue 13 acceptance, multi-rank: a real two-rank ``msrun`` job with ``DistributedDebugger(ranks="all",
port_per_rank=True)`` connects both ranks to one ``DebuggerServer`` listening on P and P+1 (MindInsight's online
debugger shows one device only). Both ranks are visible, a hit on rank 1 is reported as rank 1, terminate ends both.
"""
from __future__ import annotations

import socket
import threading
import time

import pytest

from conftest import ROOT
from msrun_job import run_msrun
from msdebug_hooks.server import DebuggerServer, JobState

pytestmark = [pytest.mark.mindspore, pytest.mark.msrun]

SCRIPT = ROOT / "examples" / "distributed" / "train.py"


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


@pytest.mark.timeout(300, method="signal")
def test_every_rank_connects_a_hit_on_rank_1_is_reported_as_rank_1_and_terminate_ends_both(tmp_path):
    jobs_done: list = []
    with _server_on_two_consecutive_ports() as server:
        runner = threading.Thread(target=lambda: jobs_done.append(run_msrun(
            SCRIPT, ["--batches", "8", "--nan-rank", "1", "--nan-step", "3", "--debugger",
                     f"127.0.0.1:{server.port}", "--debugger-ranks", "all"], tmp_path, timeout=240)), daemon=True)
        runner.start()
        try:
            group = server.wait_for_ranks(2, timeout=180)
            ranks = group.ranks
            assert [(j.rank, j.port, j.step, j.state) for j in ranks.values()] == [
                (0, server.port, 0, JobState.WAITING), (1, server.port + 1, 0, JobState.WAITING)]
            assert group.run(1) == [] and [j.step for j in ranks.values()] == [1, 1]
            (loss,) = ranks[0].nodes("*SoftmaxCrossEntropyWithLogits-op*")   # each rank's own loss, before all-reduce
            group.watch("tensor_overflow", loss.name)
            hits = group.run_until_hit(timeout=180)
            assert [(h.rank, h.step, h.node.type) for h in hits] == [(1, 3, "SoftmaxCrossEntropyWithLogits")]
            # lockstep: rank 0 (no hit, its loss stayed finite) is suspended at the same step, not inside a collective
            assert [(j.step, j.state) for j in ranks.values()] == [(3, JobState.WAITING)] * 2
            assert ranks[0].all_hits == [] and ranks[0].tensor(loss.name).shape == ()
            time.sleep(35)    # longer than MindSpore's CPU collective timeout: nobody is waiting in a collective
            assert all(job.alive for job in ranks.values())
            group.terminate()
            assert all(not job.alive for job in ranks.values())
        finally:
            runner.join(260)
    (job,) = jobs_done
    assert job.returncode == 0, job.describe()
    assert job.result(0)["steps"] == job.result(1)["steps"] == [1, 2, 3]     # both stopped after the same step


@pytest.mark.timeout(300, method="signal")
def test_serve_with_two_ranks_reports_the_hit_of_rank_1_and_ends_both(tmp_path):
    import os
    import subprocess
    import sys

    from conftest import EXAMPLES, fresh_env

    with _server_on_two_consecutive_ports() as probe:     # two consecutive free ports, released for msdebug serve
        port = probe.port
    env = fresh_env()
    env["PYTHONPATH"] = os.pathsep.join([str(EXAMPLES), str(ROOT)])
    serve = subprocess.Popen([sys.executable, "-m", "msdebug_hooks", "serve", "--port", str(port), "--ranks", "2",
                              "-c", "watch tensor_overflow *SoftmaxCrossEntropyWithLogits-op*; continue; jobs"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert f"listening on 127.0.0.1:{port},{port + 1}" in serve.stdout.readline()
        job = run_msrun(SCRIPT, ["--batches", "8", "--nan-rank", "1", "--nan-step", "3", "--debugger",
                                 f"127.0.0.1:{port}", "--debugger-ranks", "all"], tmp_path, timeout=240)
        out, _ = serve.communicate(timeout=60)
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait(30)
    assert serve.returncode == 1, out
    assert job.returncode == 0, job.describe()
    (row,) = [line for line in out.splitlines() if "SoftmaxCrossEntropyWithLogits-op" in line and "tensor_overflow" in
              line and not line.startswith("(msdebug")]
    assert row.split()[:2] == ["3", "1"]                                       # step 3, rank 1
    assert "(rank 0) waiting at step 3" in out and "(rank 1) waiting at step 3" in out
