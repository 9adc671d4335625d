"""The README demo and the per-callback examples run as a user runs them, and say what happened."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from project import ROOT

pytestmark = pytest.mark.mindspore


def run_example(*args, timeout=180):
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / args[0]), *args[1:]], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def test_demo_catches_the_divergence_and_leaves_a_dump_of_just_the_failing_iterations(tmp_path):
    proc = run_example("demo.py", "--workdir", str(tmp_path))
    out = proc.stdout
    assert "LossGuard caught it: loss is inf at epoch 1, step 5" in out
    assert "StopAtStep(5)" in out
    # the rerun stopped right after the failing step: its last printed step is 5
    rerun = out.split("== 2.")[1].split("== 3.")[0]
    assert re.findall(r"step\s+(\d+)", rerun)[-1] == "5"
    iterations = sorted(p.name for p in (tmp_path / "dump").glob("rank_0/Net/*/*") if p.is_dir())
    assert iterations == ["3", "4"]
    assert re.search(r"rank_0/Net/\d+/3/ .* 0 holding NaN/Inf", out)
    assert re.search(r"rank_0/Net/\d+/4/ .* [1-9]\d* holding NaN/Inf", out)
    assert f"msdebug check-dump {tmp_path / 'dump'} --watch tensor_overflow --iterations 3-4" in out
    assert (tmp_path / "last_good" / "last_good_rank0_step4.ckpt").is_file()
    # the analyzer names the poisoned input first, then the first operator it reached and that operator's source line
    assert "First NaN/Inf: output 0 of inputs0 (dump iteration 4)" in out
    assert "First operator it reached: Default/network-WithLossCell/_backbone-LeNet5/conv1-Conv2d/Conv2D-op" in out
    assert re.search(r"source line: .*lenet\.py:\d+: x = self\.max_pool2d\(self\.relu\(self\.conv1\(x\)\)\)", out)
    # issue 32 point 5: where the outputs go is said first, and at the end how much is left there
    assert out.startswith(f"The demo's outputs (checkpoints, dump config, dump) go to {tmp_path}\n")
    assert re.search(rf"The demo's outputs are kept in {re.escape(str(tmp_path))} \(\d+\.\d MB\): remove it with "
                     rf"rm -r {re.escape(str(tmp_path))}, or run the demo with --clean\n$", out), out[-300:]


def test_stop_at_step_example():
    out = run_example("stop_at_step.py").stdout
    assert "on_train_end ran: 6 steps trained" in out and "stopped after step 6" in out


def test_stop_at_time_example():
    out = run_example("stop_at_time.py").stdout
    assert "first job:" in out and "resumed job starts with 0.50 s left" in out
    resumed_steps = int(re.search(r"resumed job: (\d+) steps", out).group(1))
    assert 1 <= resumed_steps <= 3


def test_loss_guard_example():
    out = run_example("loss_guard.py").stdout
    assert "failed_step=4 failed_epoch=1" in out and "other callback: on_train_end ran" in out
    assert "weights finite after the failing step: False; saved:" in out and "last_good_rank0_step3.ckpt" in out
    assert "LossGuardError: LossGuard: loss is inf at epoch 1, step 4" in out
    assert out.count("on_train_end ran") == 2        # runs 1 and 2 end gracefully, run 3 raises


def test_custom_loop_example():
    out = run_example("custom_loop.py").stdout
    assert "loop left at step 6; guard.failed_step=6; rerun with StopAtStep(6)" in out
