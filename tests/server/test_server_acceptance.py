"""Issue 13 acceptance, the scripted API: our own server (``msdebug_hooks.server``) drives real MindSpore 2.10 CPU
trainings started with only ``ENABLE_MS_DEBUGGER=1 MS_DEBUGGER_PORT=<server port>``.

The plain script logs every step and, in its own end hook, saves the weights: the tests compare what the server
reports (steps, hits, actual values, tensors) with what the training really did.
"""
from __future__ import annotations

import numpy as np
import pytest

from project import EXAMPLES
from msdebug_hooks._mindspore import installed_version_string
from server_training import DUMP, training
from msdebug_hooks.conditions import TensorTooLargeCondition
from msdebug_hooks.server import DebuggerServer, JobState

pytestmark = [pytest.mark.mindspore, pytest.mark.timeout(300)]

WEIGHTS = {"conv1.weight", "conv2.weight", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight",
           "fc3.bias"}


def test_api_waits_runs_exact_steps_hits_views_and_terminates_cleanly(tmp_path):
    # --width 2700: fc1.weight is 2700 x 400 float32 (4.3 MB), so it arrives in several 3 MiB pieces
    with DebuggerServer(port=0) as server, training(tmp_path, server.port, "--nan-batch", "4", "--width",
                                                    "2700") as run:
        job = server.wait_for_training(timeout=120, process=run.proc)
        assert (job.state, job.step, run.steps()) == (JobState.WAITING, 0, 0)         # held at step 0
        assert {n.short_name for n in job.nodes(category="weight")} == WEIGHTS
        assert job.ms_version == installed_version_string()     # the training's own MindSpore (2.7.2 in compat lane)

        assert job.run(3) == [] and job.step == 3 and job.state is JobState.WAITING    # exactly three steps
        assert run.logged_through(3)

        overflow = job.watch("weight_overflow")                                        # every weight
        assert {n.short_name for n in overflow.nodes} == WEIGHTS
        before = job.tensor("fc2.weight")
        assert job.run(1) == [] and job.step == 4 and run.logged_through(4)
        np.testing.assert_array_equal(job.tensor("fc2.weight", "previous"), before)    # step 3's value
        assert not np.array_equal(job.tensor("fc2.weight"), before)

        hits = job.run_until_hit(timeout=120)                                          # batch 4 is step 5
        assert job.step == 5 and run.logged_through(5)
        assert [(h.node.short_name, h.step, h.watchpoint.id) for h in hits] == [("conv1.weight", 5, overflow.id)]
        assert not np.isfinite(job.tensor(hits[0].node)).all()

        large = job.watch(TensorTooLargeCondition(max_gt=0.0), "fc1.weight")
        rechecked = [h for h in job.recheck() if h.watchpoint.id == large.id]
        fc1 = job.tensor("fc1.weight")
        assert fc1.shape == (2700, 400)
        stats = job.statistics("fc1.weight")
        assert [h.node.short_name for h in rechecked] == ["fc1.weight"] and rechecked[0].step == 5
        assert rechecked[0].actual_value == pytest.approx(float(fc1.max()))
        assert (stats.shape, stats.count) == (fc1.shape, fc1.size)
        assert (stats.min, stats.max) == pytest.approx((float(fc1.min()), float(fc1.max())))
        assert stats.mean == pytest.approx(float(fc1.astype(np.float64).mean()), rel=1e-5)

        assert job.terminate() is JobState.TERMINATED
        assert run.proc.wait(60) == 0
        assert run.lines()[-1] == "end" and run.steps() == 5                           # end hooks ran, no extra step
        saved = np.load(run.weights)
    np.testing.assert_array_equal(fc1, saved["fc1.weight"])
    assert rechecked[0].actual_value == pytest.approx(float(saved["fc1.weight"].max()))


def test_dump_source_finds_the_first_nan_operator_with_its_source_line_and_inputs(tmp_path):
    with DebuggerServer(port=0) as server, \
            training(tmp_path, server.port, "--steps", "6", "--bad-step", "2", script=DUMP,
                     env={"MS_DEBUGGER_SOURCE": "dump"}) as run:
        job = server.wait_for_training(timeout=180, process=run.proc)
        job.watch("tensor_overflow", "*")
        hits = job.run_until_hit(timeout=180)
        assert job.step == 3                                                           # batch 2 is step 3
        first = min((h for h in hits if not h.node.is_parameter), key=lambda h: h.node.index)   # execution order
        assert first.node.type == "Sqrt" and first.errors == []
        frame = first.node.source_frame
        assert frame.file_path.endswith("find_first_nan.py") and frame.code_line == "return ops.sqrt(x + 1.0)"
        assert (EXAMPLES / "find_first_nan.py").read_text().splitlines()[frame.line_no - 1].strip() == \
            frame.code_line
        (source,) = [name for name in first.node.inputs if not job.node(name).is_parameter]
        given = job.tensor(source)
        produced = job.tensor(first.node)
        assert np.isfinite(given).all() and (given < 0).any()                          # its input was finite
        np.testing.assert_array_equal(np.isnan(produced), given < 0)                   # sqrt of a negative
        assert job.terminate() is JobState.TERMINATED
        assert run.proc.wait(60) == 0


def test_debug_from_a_script_example_finds_the_sqrt_and_saves_its_input(tmp_path):
    import subprocess
    import sys

    from project import ROOT, fresh_env

    env = fresh_env()
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, str(EXAMPLES / "debug_first_nan.py"), "--save", str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "first NaN/Inf at step 3: output of Default/network-WithLossCell/_backbone-SqrtLeNet/scale-SqrtScale/" \
           "Sqrt-op0 (Sqrt)" in proc.stdout
    assert "find_first_nan.py:" in proc.stdout and "return ops.sqrt(x + 1.0)" in proc.stdout
    assert "training terminated at step 3, exit code 0" in proc.stdout
    given, produced = np.load(tmp_path / "input_Add-op0.npy"), np.load(tmp_path / "output_Sqrt-op0.npy")
    np.testing.assert_array_equal(np.isnan(produced), given < 0)
