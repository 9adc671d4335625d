"""Issue 13 acceptance, faults: our debugger server reports a training killed while paused, garbage from a client and
a second client on the same port, stays up, and leaks neither threads nor the port (checked after each test).
Real MindSpore 2.10 CPU trainings in subprocesses; real gRPC clients for the garbage.
"""
from __future__ import annotations

import signal
import socket
import threading

import grpc
import numpy as np
import pytest

from server_training import eventually as _eventually, training
from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.server import DebuggerServer, JobLost, JobState

pytestmark = [pytest.mark.mindspore, pytest.mark.timeout(300)]


@pytest.fixture
def no_leaks():
    """After the test: no thread of ours is left and the server's ports can be bound again."""
    before = {t.ident for t in threading.enumerate()}
    ports: list[int] = []
    yield ports
    _eventually(lambda: not [t for t in threading.enumerate() if t.ident not in before and t.is_alive()],
                timeout=20, what=f"threads left: {[t.name for t in threading.enumerate() if t.ident not in before]}")
    for port in ports:
        with socket.socket() as probe:               # SO_REUSEADDR: closed connections in TIME_WAIT are no leak
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(("127.0.0.1", port))          # raises if something still listens there
            probe.listen()


def test_training_killed_while_paused_is_reported_and_the_server_serves_the_next_one(tmp_path, no_leaks):
    with DebuggerServer(port=0) as server:
        no_leaks.append(server.port)
        with training(tmp_path, server.port, name="killed") as run:
            job = server.wait_for_training(timeout=120)          # no process bound: the connection must tell
            assert job.run(2) == [] and job.step == 2
            run.proc.send_signal(signal.SIGKILL)
            run.proc.wait(30)
            _eventually(lambda: job.state is JobState.LOST, what="the killed training reported lost")
            assert "connection closed" in job.reason and "step 2" in job.reason
            assert any(f"job {job.id}" in r and "lost" in r for r in server.reports)
            with pytest.raises(JobLost, match="step 2"):
                job.tensor("fc1.weight")
            with pytest.raises(JobLost):
                job.run(1)
        with training(tmp_path, server.port, name="next") as run:
            second = server.wait_for_training(timeout=120, process=run.proc)
            assert second.id != job.id and second.run(1) == [] and second.step == 1
            assert second.terminate() is JobState.TERMINATED and run.proc.wait(60) == 0


def test_garbage_from_clients_is_reported_and_a_real_training_goes_on(tmp_path, no_leaks):
    with DebuggerServer(port=0) as server:
        no_leaks.append(server.port)
        with training(tmp_path, server.port) as run:
            job = server.wait_for_training(timeout=120, process=run.proc)
            before = job.tensor("fc1.weight")
            with grpc.insecure_channel(server.address) as channel:
                wait = channel.unary_unary("/debugger.EventListener/WaitCMD")
                reply = pb.EventReply.FromString(wait(b"\xff\xfe not a protobuf \x00\x01", timeout=10))
                assert reply.status == pb.EventReply.FAILED
                hits = channel.stream_unary("/debugger.EventListener/SendWatchpointHits")
                reply = pb.EventReply.FromString(hits(iter([b"\x0a\xff\xff\xff"]), timeout=10))
                assert reply.status == pb.EventReply.FAILED
                stranger = channel.unary_unary("/debugger.EventListener/WaitCMD",
                                               request_serializer=pb.Metadata.SerializeToString,
                                               response_deserializer=pb.EventReply.FromString)
                assert stranger(pb.Metadata(device_name="0:0", cur_step=0), timeout=10).status == \
                    pb.EventReply.FAILED                       # no metadata first: never reaches the real job
            with socket.create_connection(("127.0.0.1", server.port)) as raw:   # not even HTTP/2
                raw.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(range(256)) * 8)
            garbage = [r for r in server.reports if "garbage" in r]
            assert any("WaitCMD" in r for r in garbage) and any("SendWatchpointHits" in r for r in garbage)
            assert any("no metadata first" in r for r in server.reports)
            assert server.jobs == [job] and job.state is JobState.WAITING
            assert job.run(1) == [] and job.step == 1 and run.logged_through(1)
            assert not np.array_equal(job.tensor("fc1.weight"), before)
            assert job.terminate() is JobState.TERMINATED and run.proc.wait(60) == 0


def test_a_second_training_on_the_same_port_gets_a_job_of_its_own(tmp_path, no_leaks):
    with DebuggerServer(port=0) as server:
        no_leaks.append(server.port)
        with training(tmp_path, server.port, name="a") as first_run, \
                training(tmp_path, server.port, "--nan-batch", "0", name="b") as second_run:
            jobs = [server.wait_for_training(timeout=180), server.wait_for_training(timeout=180)]
            assert len({j.peer for j in jobs}) == 2 and server.jobs == sorted(jobs, key=lambda j: j.id)
            assert any("1 other job(s) on this port" in r for r in server.reports)
            for job in jobs:
                job.watch("weight_overflow")
            by_pid = {job.id: job.run(2) for job in jobs}
            # exactly one of them was poisoned at batch 0: its overflow hits at step 1, the other runs 2 clean steps
            poisoned = [j for j in jobs if by_pid[j.id]]
            clean = [j for j in jobs if not by_pid[j.id]]
            assert len(poisoned) == 1 and len(clean) == 1
            assert poisoned[0].step == 1 and {h.step for h in by_pid[poisoned[0].id]} == {1}
            assert clean[0].step == 2
            for job in jobs:
                assert job.terminate() is JobState.TERMINATED
            assert first_run.proc.wait(60) == 0 and second_run.proc.wait(60) == 0
            assert sorted((first_run.steps(), second_run.steps())) == [1, 2]   # each ran what its own job said


def test_closing_the_server_under_a_suspended_training_lets_it_train_to_the_end(tmp_path, no_leaks):
    server = DebuggerServer(port=0).start()
    no_leaks.append(server.port)
    try:
        with training(tmp_path, server.port, "--batches", "12") as run:
            job = server.wait_for_training(timeout=120, process=run.proc)
            assert job.run(2) == [] and run.logged_through(2)
            server.close()                                     # while the training is suspended at step 2
            assert run.proc.wait(120) == 0                     # it trained on, undebugged, to the end
    finally:
        server.close()
    assert run.steps() == 12 and run.lines()[-1] == "end"
