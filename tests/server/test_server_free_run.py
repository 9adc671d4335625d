"""Issue 14: free runs against our own server (``debugger/free_run.py``): real MindSpore 2.10 CPU trainings started
with only the debugger variables, driven by ``msdebug_hooks.server.DebuggerServer``.

A free run costs no ``WaitCMD`` per step (the server counts the blocking waits it receives: ``job.waits``), yet N
steps stay exactly N, a pause asked for mid-run lands within one step (the one in progress, or the next when the
answer crosses a step end), run-until-hit stops at the hit step, terminate ends the script cleanly, and a server
that dies during a free run does not hold the training. A client that does not say it can free-run (a raw protocol
client) keeps getting one step per wait (``test_server_parts.py``).
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from project import ROOT, fresh_env
from server_training import eventually, training
from msdebug_hooks.server import DebuggerServer, JobState

pytestmark = [pytest.mark.mindspore, pytest.mark.timeout(400)]


def test_free_runs_count_steps_pause_within_a_step_stop_at_hits_and_terminate(tmp_path):
    with DebuggerServer(port=0, log_reports=False) as server, \
            training(tmp_path, server.port, "--nan-batch", "29") as run:
        job = server.wait_for_training(timeout=120, process=run.proc)
        eventually(lambda: job.free_run_capable, timeout=120, what="a heartbeat saying the client can free-run")

        waits = job.waits
        assert job.run(10) == [] and (job.step, job.state) == (10, JobState.WAITING)   # exactly ten steps
        assert run.logged_through(10)
        assert job.waits - waits == 1          # the one it came back with: no wait per step

        waits = job.waits
        job.run(None)                                                   # free run until a pause
        eventually(lambda: run.steps() >= 15, timeout=120, what="the free run reaching step 15")
        asked_at = run.steps()                 # step `asked_at` has ended; the next one may be ending
        paused = job.pause(timeout=120)
        assert asked_at <= paused <= asked_at + 2 and run.logged_through(paused)
        assert job.waits - waits == 1

        overflow = job.watch("weight_overflow")
        waits = job.waits
        hits = job.run_until_hit(timeout=120)                           # batch 29 poisons step 30's update
        assert job.step == 30 and run.logged_through(30)
        assert {h.watchpoint.id for h in hits} == {overflow.id} and {h.step for h in hits} == {30}
        assert job.waits - waits <= 2          # a watchpoint change in between is delivered at one wait

        job.unwatch()
        job.run(None)
        eventually(lambda: run.steps() >= 33, timeout=120, what="the free run going on after the hit")
        assert job.terminate(timeout=120) is JobState.TERMINATED
        assert run.proc.wait(120) == 0
        assert run.lines()[-1] == "end" and "training finished" in run.out()


def test_a_free_run_to_the_end_leaves_the_job_at_its_last_step(tmp_path):
    """No wait per step in a free run: the step the job shows once it finished comes from the training's last word."""
    with DebuggerServer(port=0, log_reports=False) as server, \
            training(tmp_path, server.port, "--batches", "5") as run:
        job = server.wait_for_training(timeout=120, process=run.proc)
        eventually(lambda: job.free_run_capable, timeout=120, what="a heartbeat saying the client can free-run")
        assert job.run(None) == []
        eventually(lambda: job.state is JobState.FINISHED, timeout=120, what="the training finishing")
        assert job.step == 5 and job.reason == "the training finished at step 5"
        assert run.proc.wait(120) == 0


_SERVER = """
import sys, time
from msdebug_hooks.server import DebuggerServer
server = DebuggerServer(port=0, log_reports=False).start()
print(server.port, flush=True)
job = server.wait_for_training(timeout=120)
while not job.free_run_capable:
    time.sleep(0.01)
job.run(None)
print("running", flush=True)
sys.stdin.read()
"""


def test_a_server_killed_during_a_free_run_does_not_hold_the_training(tmp_path):
    env = fresh_env()
    env["PYTHONPATH"] = str(ROOT)
    server = subprocess.Popen([sys.executable, "-c", _SERVER], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        with training(tmp_path, port, "--batches", "40") as run:
            assert server.stdout.readline().strip() == "running"
            eventually(lambda: run.steps() >= 3, timeout=120, what="the free run reaching step 3")
            server.kill()                                   # no goodbye: the connection just breaks
            server.wait(30)
            assert run.proc.wait(120) == 0                  # it trained on, undebugged, to the end
            assert run.steps() == 40 and run.lines()[-1] == "end"
            assert "training continues without the debugger" in run.out()
    finally:
        if server.poll() is None:
            server.kill()
        server.wait(30)
