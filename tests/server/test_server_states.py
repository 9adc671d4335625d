"""Issue 23, items 3-5: the server's states are honest and no order of API calls strands it.

* a training that raised is ``crashed`` with its error's last line (and exit code, where the server can see it); a
  process that exits non-zero is ``crashed`` with its code; ``finished`` only for a clean end;
* a training that dies while it runs, without closing anything the server could see, is noticed within seconds when
  its process is on this machine (a bound ``Popen``, or the pid our client names), by heartbeats otherwise;
* a pause that comes before the training took its run leaves it ``waiting`` where it is, at once;
* the ranks of a group step, continue and unwatch after a hit, any number of times.

The first tests drive the server with a protocol client in a thread (``protocol_trainer.py``: exact control, no
MindSpore); the ``mindspore`` ones with real MindSpore 2.10 trainings (``tests/scripts/counting_train.py``).
"""
from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import pytest

from project import ROOT
from protocol_trainer import LOSS, ProtocolTraining
from server_training import eventually, training
from msdebug_hooks.wire.client_facts import ERROR_MARK
from msdebug_hooks.server import DebuggerServer, JobCrashed, JobLost, JobState

COUNTING = ROOT / "tests" / "scripts" / "counting_train.py"


def _server(ranks: int = 1) -> DebuggerServer:
    """A started server on ``ranks`` consecutive free ports."""
    for _ in range(20):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + ranks <= 65536:
            try:
                return DebuggerServer(port=base, ports=range(base + 1, base + ranks), log_reports=False).start()
            except OSError:
                continue
    raise RuntimeError(f"no {ranks} consecutive free ports")


# -- protocol clients: no MindSpore ------------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_a_pause_before_the_training_took_its_run_leaves_it_waiting_where_it_is():
    with _server() as server, ProtocolTraining(server.address, step_seconds=0.002) as client:
        job = server.wait_for_training(timeout=30)
        job.watch("tensor_too_large:max_gt=1", LOSS)
        for attempt in range(60):
            if attempt % 3 == 0:
                job.recheck(timeout=10)
            elif attempt % 3 == 1:
                job.run(2, timeout=10)
            job.run(None, wait=False)
            if attempt % 2:
                time.sleep(0.003)
            step = job.pause(timeout=10)                 # never a TimeoutError: it ends waiting, now or a step on
            assert job.state is JobState.WAITING and step == job.step
            eventually(lambda: client.step == job.step, timeout=10, what="the client where the job says it is")
        assert job.terminate(timeout=10) is JobState.TERMINATED
        client.thread.join(10)
    assert client.ended == "exit"


@pytest.mark.timeout(120)
def test_every_rank_steps_continues_and_unwatches_after_a_hit_again_and_again():
    with _server(2) as server, \
            ProtocolTraining(f"127.0.0.1:{server.port}", rank=0, steps=400) as rank0, \
            ProtocolTraining(f"127.0.0.1:{server.port + 1}", rank=1, steps=400,
                             hit_steps=frozenset({3, 5, 6})) as rank1:
        group = server.wait_for_ranks(2, timeout=30)
        group.watch("tensor_too_large:max_gt=1", LOSS)
        hits = group.run_until_hit(timeout=30)
        assert [(h.rank, h.step) for h in hits] == [(1, 3)]
        assert [(j.step, j.state) for j in group.jobs] == [(3, JobState.WAITING)] * 2 and group.state == "waiting"
        for step in (4, 5, 6):                           # step 1, three times: rank 1 hits again at 5 and 6
            hits = group.run(1, timeout=30)
            assert [(j.step, j.state) for j in group.jobs] == [(step, JobState.WAITING)] * 2
            assert [(h.rank, h.step) for h in hits] == ([(1, step)] if step in (5, 6) else [])
            assert (rank0.step, rank1.step) == (step, step)
        group.run(None)                                  # continue (no hit ahead), then pause: one step end for all
        assert group.state == "running"
        time.sleep(0.05)
        stopped = group.pause(timeout=30)
        assert stopped > 6 and [(j.step, j.state) for j in group.jobs] == [(stopped, JobState.WAITING)] * 2
        assert (rank0.step, rank1.step) == (stopped, stopped)
        assert group.unwatch() == [1] and group.run(2, timeout=30) == []
        assert [j.step for j in group.jobs] == [stopped + 2] * 2
        assert group.run_until_hit(timeout=60) == []      # unwatched: continue runs to the end
        assert [(j.state, j.step) for j in group.jobs] == [(JobState.FINISHED, 400)] * 2
        assert group.terminate(timeout=5) == [JobState.FINISHED] * 2      # answers at once: nothing to stop
    assert rank0.ended == rank1.ended == "done"


@pytest.mark.timeout(120)
def test_training_done_is_finished_only_for_a_clean_end_and_crashed_with_the_error_it_reports():
    with _server() as server, ProtocolTraining(server.address, rank=0, steps=5) as clean, \
            ProtocolTraining(server.address, rank=1, steps=5, error=f"{ERROR_MARK}ValueError: loss is NAN") as bad:
        jobs = {job.rank: job for job in (server.wait_for_training(timeout=30), server.wait_for_training(timeout=30))}
        assert jobs[0].run_until_hit(timeout=30) == []
        assert (jobs[0].state, jobs[0].reason, jobs[0].error) == (JobState.FINISHED, "the training finished at step 5",
                                                                  None)
        with pytest.raises(JobCrashed, match=r"crashed: the training raised at step 5: ValueError: loss is NAN$"):
            jobs[1].run_until_hit(timeout=30)
        assert (jobs[1].state, jobs[1].error) == (JobState.CRASHED, "ValueError: loss is NAN")
        with pytest.raises(JobCrashed):                   # a JobLost too: the training is gone
            jobs[1].run(1)
    assert clean.ended == bad.ended == "done"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("code, state, said", [
    (3, JobState.CRASHED, "its process exited with code 3 at step"),
    (-9, JobState.CRASHED, "its process was killed by SIGKILL (exit code -9)"),
    (0, JobState.LOST, "exited with code 0 at step")])
def test_a_bound_process_that_ends_while_its_training_runs_ends_the_job_with_its_exit_code(code, state, said):
    exit_with = "import os, signal, time; time.sleep(0.3); os.kill(os.getpid(), signal.SIGKILL)" if code < 0 else \
        f"import sys, time; time.sleep(0.3); sys.exit({code})"
    process = subprocess.Popen([sys.executable, "-c", exit_with])
    with _server() as server, ProtocolTraining(server.address, step_seconds=0.01):
        job = server.wait_for_training(timeout=30, process=process)
        job.run(None)
        with pytest.raises(JobLost) as raised:            # JobCrashed is a JobLost
            job.wait(timeout=30)                          # ended by the process, not by a call from the training
        assert job.state is state and said in job.reason and job.exit_code == code
        assert isinstance(raised.value, JobCrashed) == (state is JobState.CRASHED)
        if code == 0:
            assert "without ending the training" in job.reason
    process.wait(10)


@pytest.mark.timeout(120)
def test_the_process_a_heartbeat_names_is_watched_by_its_pid_and_start_time():
    from msdebug_hooks.server.liveness import start_time

    sleepers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]) for _ in range(3)]
    try:
        def beat(process, start_shift=0):
            started = start_time(process.pid) + start_shift
            return f"Debugger is alive (msdebug-hooks; pid={process.pid}; start={started}; rank=0; world=1)"

        with _server() as server, \
                ProtocolTraining(server.address, heartbeat=beat(sleepers[0]), step_seconds=0.01), \
                ProtocolTraining(server.address, heartbeat=beat(sleepers[1]), step_seconds=0.01), \
                ProtocolTraining(server.address, heartbeat=beat(sleepers[2], start_shift=1), step_seconds=0.01):
            jobs = [server.wait_for_training(timeout=30) for _ in range(3)]
            by_pid = {job.pid: job for job in jobs}
            zombie, gone = by_pid[sleepers[0].pid], by_pid[sleepers[1].pid]
            assert None in by_pid                         # another start time: another process, not watched
            for job in jobs:
                job.run(None)
            sleepers[0].send_signal(signal.SIGKILL)       # not collected: a zombie keeps its exit status
            sleepers[1].send_signal(signal.SIGKILL)
            sleepers[1].wait(10)                          # collected: gone, its code no longer visible
            eventually(lambda: not zombie.alive and not gone.alive, timeout=15, what="both deaths seen by their pid")
            assert zombie.state is JobState.CRASHED and zombie.exit_code == -9
            assert f"its process (pid {sleepers[0].pid}) was killed by SIGKILL (exit code -9) at step" in zombie.reason
            if gone.state is JobState.CRASHED:       # the watcher looked between the kill and the wait (the zombie)
                assert gone.exit_code == -9 and "killed by SIGKILL" in gone.reason
            else:                                      # the usual case: collected before the watcher looked
                assert gone.state is JobState.LOST and gone.exit_code is None
                assert f"its process (pid {sleepers[1].pid}) ended (its exit code is not visible" in gone.reason
            assert by_pid[None].state is JobState.RUNNING
    finally:
        for process in sleepers:
            process.kill()
            process.wait(10)


@pytest.mark.timeout(120)
def test_without_a_process_to_watch_a_silent_training_is_lost_after_three_missed_heartbeats():
    with _server() as server, ProtocolTraining(server.address, heartbeat="Debugger is alive", period=5,
                                               vanish_at=3, step_seconds=0.01):
        job = server.wait_for_training(timeout=30)
        assert job.pid is None                            # MindSpore's own client names no process
        job.run(None)
        with pytest.raises(JobLost, match=r"no heartbeat for \d+ s \(period 5 s\) while running at step 2"):
            job.wait(timeout=60)
        assert job.state is JobState.LOST


def test_what_our_client_tells_beyond_the_protocol_reads_back():
    import os

    from msdebug_hooks.wire.client_facts import error_note, heartbeat_message, parse_error, parse_heartbeat, \
        said_at_exit
    from msdebug_hooks.server.liveness import start_time

    facts = parse_heartbeat(heartbeat_message(rank=1, world=4))
    assert (facts.free_run, facts.pid, facts.start, facts.rank, facts.world) == (True, os.getpid(),
                                                                                 start_time(os.getpid()), 1, 4)
    assert parse_heartbeat("Debugger is alive").pid is None          # MindSpore's own client: no facts
    assert parse_error(error_note(ValueError("loss is NAN\n  more"))) == "ValueError: loss is NAN more"
    assert parse_error(error_note(KeyboardInterrupt())) == "KeyboardInterrupt"
    assert error_note(SystemExit(0)) is None and error_note(SystemExit()) is None      # a clean exit
    assert parse_error(error_note(SystemExit(2))) == "SystemExit: 2"
    assert parse_error("") is None and parse_error("Default/net/fc1") is None       # not our mark: no error
    # a clean end said at the interpreter's exit is marked (the exit status decides); an error is said as before
    at_exit = error_note(None, at_exit=True)
    assert said_at_exit(at_exit) and parse_error(at_exit) is None and error_note(None) is None
    assert said_at_exit(error_note(SystemExit(0), at_exit=True)) and not said_at_exit("")
    assert parse_error(error_note(KeyboardInterrupt(), at_exit=True)) == "KeyboardInterrupt"
    # the status a script gave sys.exit after a clean loop, for a server that cannot see the exit code
    from msdebug_hooks.wire.client_facts import exit_status_said

    said = error_note(None, at_exit=True, exit_status=3)
    assert said_at_exit(said) and parse_error(said) is None and exit_status_said(said) == 3
    assert exit_status_said(at_exit) is None and exit_status_said(error_note(None, at_exit=True, exit_status=0)) is None


# -- real MindSpore trainings -------------------------------------------------------------------------------------
@pytest.mark.mindspore
@pytest.mark.timeout(300)
def test_a_training_that_raises_is_crashed_with_its_error_line_and_its_exit_code(tmp_path):
    with _server() as server, \
            training(tmp_path, server.port, "--raise-at", "3", script=COUNTING, name="bound") as bound, \
            training(tmp_path, server.port, "--raise-at", "3", script=COUNTING, name="unbound") as unbound:
        first, second = server.wait_for_training(timeout=240), server.wait_for_training(timeout=240)
        jobs = {job.pid: job for job in (first, second)}
        job, loose = jobs[bound.proc.pid], jobs[unbound.proc.pid]
        job.bind_process(bound.proc)
        for each in (job, loose):
            with pytest.raises(JobCrashed, match="the training raised at step 3: ValueError: bad batch at step 3"):
                each.run(5, timeout=120)
            assert each.state is JobState.CRASHED and each.error == "ValueError: bad batch at step 3"
        assert bound.proc.wait(60) == 1 and unbound.proc.wait(60) == 1
        eventually(lambda: job.exit_code == 1, timeout=15, what="the bound process's exit code")
        assert job.reason == "the training raised at step 3: ValueError: bad batch at step 3 (exit code 1)"


@pytest.mark.mindspore
@pytest.mark.timeout(300)
def test_a_training_that_ends_cleanly_is_finished(tmp_path):
    with _server() as server, training(tmp_path, server.port, "--batches", "4", script=COUNTING) as run:
        job = server.wait_for_training(timeout=240, process=run.proc)
        assert job.run_until_hit(timeout=120) == []
        assert (job.state, job.step, job.reason) == (JobState.FINISHED, 4, "the training finished at step 4")
        assert run.proc.wait(60) == 0
        eventually(lambda: job.exit_code == 0, timeout=15, what="the exit code")
        assert job.reason == "the training finished at step 4"        # a clean exit adds nothing


@pytest.mark.mindspore
@pytest.mark.timeout(300)
def test_a_running_training_killed_without_a_word_is_seen_within_seconds_by_its_pid(tmp_path):
    with _server() as server, training(tmp_path, server.port, script=COUNTING) as run:
        job = server.wait_for_training(timeout=240)       # not bound: found by the pid its heartbeats name
        assert job.pid == run.proc.pid and job.run(2) == []
        job.run(None)                                     # a free run: no call in flight but the watch
        time.sleep(0.5)
        run.proc.send_signal(signal.SIGKILL)
        eventually(lambda: not job.alive, timeout=15, what="the death seen (heartbeats would take 90 s)")
        assert job.state is JobState.CRASHED and job.exit_code == -9    # a zombie until we collect it
        assert f"its process (pid {run.proc.pid}) was killed by SIGKILL" in job.reason
