"""Real two-rank data-parallel jobs started by ``msrun`` on the CPU: every stop is agreed by both ranks (no hang),
the guard names the rank that saw the NaN, and a two-rank dump is read rank by rank.

Two jobs (~20 s each on an idle 2-core machine), shared by the assertions; each bounded by its own timeout, after
which the whole job (msrun, scheduler, setsid workers) is killed and the test fails with the logs.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from project import ROOT
from msdebug_hooks import LogConfig
from msrun_job import run_msrun

pytestmark = [pytest.mark.mindspore, pytest.mark.msrun]

SCRIPT = ROOT / "examples" / "distributed" / "train.py"
NAN_STEP = 3


@pytest.fixture(scope="module")
def nan_job(tmp_path_factory):
    """Only rank 1's data holds a poisoned batch (step 3); the ranks also dump steps 2 and 3."""
    workdir = tmp_path_factory.mktemp("nan_job")
    job = run_msrun(SCRIPT, ["--nan-rank", "1", "--nan-step", str(NAN_STEP), "--batches", "8", "--stop-step", "100",
                             "--dump", str(workdir / "dump")], workdir, timeout=150)
    return job, workdir / "dump"


@pytest.mark.timeout(240, method="signal")
def test_nan_on_rank_1_only_stops_both_ranks_after_the_same_step_and_names_rank_1(nan_job):
    job, _ = nan_job
    assert job.returncode == 0, job.describe()                     # no hang, no crash: both workers exited 0
    rank0, rank1 = job.result(0), job.result(1)
    assert rank0["world"] == rank1["world"] == 2
    assert rank0["steps"] == rank1["steps"] == list(range(1, NAN_STEP + 1))   # 8 batches, both stopped after 3
    for result in (rank0, rank1):
        assert result["guard"]["failed_step"] == NAN_STEP and result["guard"]["failed_ranks"] == [1]
        assert "on rank 1" in result["guard"]["reason"]
    assert "this rank's loss" in rank0["guard"]["reason"]            # rank 0's own loss was finite
    # LossGuard, StopAtTime and StopAtStep together: one all-reduce per step, plus one to share the reasons
    assert rank0["agreement_collectives"] == rank1["agreement_collectives"] == NAN_STEP + 1
    for rank in (0, 1):                                              # the same agreed line on both ranks
        line = next(row for row in job.worker_log(rank).splitlines() if "stopping training on all 2 ranks" in row)
        assert f"after epoch 1, step {NAN_STEP}: rank 1: LossGuard: loss is inf" in line
        assert "rank 0:" not in line.split("ranks after")[1]          # rank 0 did not vote
    assert "asking every rank to stop" in job.worker_log(1) and "asking every rank to stop" not in job.worker_log(0)


@pytest.mark.timeout(240, method="signal")
def test_two_rank_dump_hits_carry_the_rank_they_were_dumped_on(nan_job):
    from msdebug_hooks.conditions import TensorOverflowCondition
    from msdebug_hooks.dump.analyzer import DumpAnalyzer, Watchpoint

    job, dump = nan_job
    assert job.returncode == 0, job.describe()
    analyzer = DumpAnalyzer(str(dump))
    assert analyzer.get_ranks() == [0, 1]
    tensors = analyzer.select_tensors("", ranks=[0, 1], iterations=[NAN_STEP - 1])
    assert {t.rank for t in tensors} == {0, 1}
    hits = analyzer.check_watchpoints([Watchpoint(tensors, TensorOverflowCondition())])
    assert hits
    for hit in hits:                                                 # each hit read from its own rank's folder
        assert f"rank_{hit.tensor.rank}" in Path(hit.tensor.file).parts
    by_rank = {rank: [h.tensor.node.name for h in hits if h.tensor.rank == rank] for rank in (0, 1)}
    # rank 1 saw the poisoned input and its own forward pass break; rank 0 only received the NaN/Inf through the
    # gradient all-reduce: its first hit is the AllReduce output, and none of its forward operators hit
    assert by_rank[1][0] == "inputs0"
    assert any("Conv2D" in name and "Grad" not in name for name in by_rank[1])
    assert "AllReduce" in by_rank[0][0]
    assert not any(name == "inputs0" or ("network-WithLossCell" in name and "Grad" not in name)
                   for name in by_rank[0])
    # the step before the failure is clean on both ranks
    clean = analyzer.select_tensors("", ranks=[0, 1], iterations=[NAN_STEP - 2])
    assert clean and not analyzer.check_watchpoints([Watchpoint(clean, TensorOverflowCondition())])


@pytest.mark.timeout(240, method="signal")
def test_stop_at_time_with_ranks_at_different_speeds_stops_both_after_the_same_step(tmp_path):
    # rank 1 sleeps 0.15 s after every step and resumed with 27 of its 30 s used; rank 0 has 30 s left: only
    # rank 1's clock runs out, and a stop on rank 1 alone would leave rank 0 blocked in the next all-reduce
    # MindSpore's own logs go to files, one rank_<id>/logs/ folder per rank
    logs = LogConfig(to_stderr=False, log_dir=str(tmp_path / "glog"))
    job = run_msrun(SCRIPT, ["--stop-time", "30", "--restored-time", "1:27", "--slow-rank", "1", "--sleep", "0.15",
                             "--batches", "200"], tmp_path, timeout=150, env=logs.env())
    assert job.returncode == 0, job.describe()
    for rank in (0, 1):
        assert (logs.log_location(rank) / f"mindspore.log.{job.result(rank)['pid']}").is_file()
    rank0, rank1 = job.result(0), job.result(1)
    assert rank0["steps"] == rank1["steps"]
    stopped = rank0["steps"][-1]
    assert 1 <= stopped < 200                                      # stopped by time, not by running out of data
    assert rank0["timer"]["stopped_step"] == rank1["timer"]["stopped_step"] == stopped
    assert rank0["guard"]["failed_step"] is None
    for rank in (0, 1):
        line = next(row for row in job.worker_log(rank).splitlines() if "stopping training on all 2 ranks" in row)
        assert f"step {stopped}: rank 1: StopAtTime: time budget" in line
        assert "rank 0:" not in line.split("ranks after")[1]           # rank 0 still had time: it did not vote


@pytest.mark.timeout(240, method="signal")
def test_check_dump_names_the_rank_of_each_hit_and_where_each_rank_first_saw_it(nan_job):
    import json
    import subprocess
    import sys

    job, dump = nan_job
    assert job.returncode == 0, job.describe()
    command = [sys.executable, "-m", "msdebug_hooks", "check-dump", str(dump), "--watch", "tensor_overflow"]
    table = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert table.returncode == 1, table.stderr                      # 1: hits found
    rows = [line.split() for line in table.stdout.splitlines()[2:] if line[:1].isdigit()]
    assert {row[1] for row in rows} == {"0", "1"}                   # the rank column
    assert ["2", "1", "inputs0"] in [row[:3] for row in rows]
    assert "rank 0: iteration 2, Default/grad_reducer-DistributedGradReducer/AllReduce" in table.stdout
    assert "a collective's output: the values came from another rank" in table.stdout
    assert "rank 1: iteration 2, inputs0 slot 0\n" in table.stdout
    report = json.loads(subprocess.run(command + ["--json", "--ranks", "1"], capture_output=True, text=True,
                                       timeout=120).stdout)
    assert {hit["rank"] for hit in report["results"]} == {1} and set(report["first_hit_by_rank"]) == {"1"}
    assert report["first_hit_by_rank"]["1"]["communication"] is False


@pytest.mark.mindinsight
@pytest.mark.timeout(300, method="signal")
def test_mindinsight_pause_and_terminate_on_rank_0_stop_both_ranks_cleanly(tmp_path, mindinsight_server):
    import threading

    rest = mindinsight_server.rest
    rest.reset()
    jobs: list = []
    runner = threading.Thread(target=lambda: jobs.append(run_msrun(
        SCRIPT, ["--batches", "400", "--debugger", mindinsight_server.grpc_address], tmp_path, timeout=240)),
        daemon=True)
    runner.start()
    try:
        meta = rest.wait_for_state("waiting", timeout=120)["metadata"]      # rank 0 at its initial suspension
        assert meta["step"] == 0
        rest.continue_steps(2)
        rest.wait_for(lambda r: r["metadata"]["step"] == 2 and r["metadata"]["state"] == "waiting", what="step 2")
        rest.continue_steps(-1)                                             # run, then pause from the UI
        rest.wait_for(lambda r: r["metadata"]["state"] == "running" and r["metadata"]["step"] > 3, what="running",
                      timeout=60)
        rest.pause()
        paused = rest.wait_for_state("waiting", timeout=60)["metadata"]["step"]
        rest.terminate()
    finally:
        runner.join(260)
    job, = jobs
    assert job.returncode == 0, job.describe()
    rank0, rank1 = job.result(0), job.result(1)
    assert rank0["steps"] == rank1["steps"] == list(range(1, paused + 1))   # rank 1 followed, both stopped there
    assert "follows the debugger of rank 0" in job.worker_log(1)
    for rank in (0, 1):
        line = next(row for row in job.worker_log(rank).splitlines() if "stopping training on all 2 ranks" in row)
        assert f"step {paused}: rank 0: the debugger server asked to terminate the training at step {paused}" in line
