"""Issue 10 point 1: a diverging, unmodified script with MindSpore's ``LossMonitor`` pauses at the hit step.

``LossMonitor`` raises ``ValueError: ... loss is NAN or INF`` in the step end of the step whose loss is not finite.
Started with only ``ENABLE_MS_DEBUGGER=1`` (and ``MS_DEBUGGER_SOURCE=dump`` for the dump source), the debugger must
see that step first: training pauses there, with the hit in ``search-watchpoint-hits``, against the real MindInsight
2.3.1. What happens next is the documented behaviour: once training goes on from the pause at a step whose loss is
not finite, ``LossMonitor`` ends the script with its own ``ValueError`` (exit 1), CONTINUE or TERMINATE alike; the UI
goes back to pending.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from project import EXAMPLES, ROOT
from server_training import Training, training

pytestmark = [pytest.mark.mindspore, pytest.mark.mindinsight, pytest.mark.timeout(300)]

ONLINE_DEBUG = EXAMPLES / "online_debug.py"                      # LeNet, LossMonitor(50), --nan-batch
DUMP_SCRIPT = ROOT / "tests" / "scripts" / "dump_source_train.py"  # GRAPH_MODE; LeNet with --inf-batch


def env_started(tmp_path: Path, server, script: Path, *args: str, **env_vars: str):
    """``script`` started as an installed package starts it: the shipped ``.pth`` line, debugger variables only."""
    return training(tmp_path, server.debugger_port, *args, script=script, host=server.host, env=env_vars,
                    log_args=False)


def _out(run: Training) -> str:
    return run.out()


def _waiting_at(rest, run, step: int, timeout: float = 150) -> None:
    def there(reply: dict) -> bool:
        assert run.proc.poll() is None, f"training exited ({run.proc.returncode}) before pausing:\n{_out(run)[-3000:]}"
        return reply["metadata"]["step"] == step and reply["metadata"]["state"] == "waiting"
    rest.wait_for(there, timeout=timeout, what=f"waiting at step {step}")


def _until_the_loss_is_not_finite(rest, run, step: int, action: str) -> int:
    """From a pause at ``step``: one step at a time until the pause at the step whose loss is NaN/Inf (the poisoned
    batch makes the weights NaN; with random initial weights its own loss may still be finite, the next one is not).
    LossMonitor must not have ended the script before any of these pauses. Then ``action`` (continue / terminate):
    LossMonitor ends the script naming that very step. Returns it."""
    for _ in range(5):
        assert "training process cannot continue" not in _out(run)      # LossMonitor has not seen the step yet
        if re.search(rf"the loss of step {step} is (nan|inf|-inf)", _out(run)):
            break
        rest.continue_steps(1)
        step += 1
        _waiting_at(rest, run, step)
    else:
        raise AssertionError(f"no step with a non-finite loss up to step {step}:\n{_out(run)[-3000:]}")
    rest.continue_steps(1) if action == "continue" else rest.terminate()
    assert run.proc.wait(120) == 1                                            # LossMonitor's ValueError, as documented
    assert f"step: {step}, loss is NAN or INF, training process cannot continue" in _out(run)
    assert "training finished" not in _out(run)
    rest.wait_for_state("pending")                                        # the debugger told MindInsight it ended
    return step


def _hit_leaves(rest) -> dict[str, set[int]]:
    """Leaf node name -> ids of the watchpoints that hit it."""
    table: dict[str, set[int]] = {}
    for node in rest.search_watchpoint_hits(limit=200).get("watch_point_hits", []):
        for tensor in node["tensors"]:
            leaf = node["node_name"].rsplit("/", 1)[-1]
            table.setdefault(leaf, set()).update(e["id"] for e in tensor["watch_points"])
    return table


@pytest.mark.parametrize("action", ["continue", "terminate"])
def test_light_source_pauses_at_the_nan_step_before_loss_monitor_ends_the_script(mindinsight, tmp_path,
                                                                                   action):
    rest = mindinsight.rest
    with env_started(tmp_path, mindinsight, ONLINE_DEBUG, "--epochs", "1", "--batches", "30",
                     "--nan-batch", "4") as run:
        _waiting_at(rest, run, 0)
        overflow = rest.create_watchpoint("weight_overflow")["id"]
        rest.continue_steps(-1)
        _waiting_at(rest, run, 5)                                   # batch 4 (0-based) is step 5: its loss is Inf
        hits = _hit_leaves(rest)
        assert hits and all(ids == {overflow} for ids in hits.values()), hits
        assert "conv1.weight" in hits
        _until_the_loss_is_not_finite(rest, run, 5, action)


def test_dump_source_pauses_at_the_inf_step_before_loss_monitor_ends_the_script(mindinsight, tmp_path):
    rest = mindinsight.rest
    log = tmp_path / "steps.log"
    with env_started(tmp_path, mindinsight, DUMP_SCRIPT, "--steps", "8", "--inf-batch", "2",
                     "--loss-monitor", "--log", str(log), MS_DEBUGGER_SOURCE="dump") as run:
        _waiting_at(rest, run, 0)
        overflow = rest.create_watchpoint("tensor_overflow")["id"]
        rest.continue_steps(-1)
        _waiting_at(rest, run, 3)                                   # batch 2 is step 3
        hits = _hit_leaves(rest)
        assert hits and all(ids == {overflow} for ids in hits.values()), hits
        assert any(leaf.startswith("Conv2D") for leaf in hits), sorted(hits)
        _until_the_loss_is_not_finite(rest, run, 3, "continue")


HAND_PLACED = """
import sys
import mindspore as ms
from mindspore import nn
from mindspore.train import LossMonitor, Model
from lenet import make_dataset, make_lenet
from msdebug_hooks import DebuggerCallback

ms.set_seed(1)   # initial weights whose poisoned step has an Inf loss (CPU ReLU maps NaN to 0: not every init does)
net = make_lenet()
model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
              nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9))
debugger = DebuggerCallback(sys.argv[1], int(sys.argv[2]))
model.train(1, make_dataset(30, nan_batches={4}), callbacks=[LossMonitor(1), debugger], dataset_sink_mode=False)
"""


def test_debugger_listed_after_loss_monitor_still_sees_the_nan_step_first(mindinsight, tmp_path):
    """A script that adds ``DebuggerCallback`` by hand, after ``LossMonitor``: still paused at the hit step."""
    rest = mindinsight.rest
    script = tmp_path / "hand_placed.py"
    script.write_text(HAND_PLACED)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(EXAMPLES), str(ROOT)]))
    env.pop("ENABLE_MS_DEBUGGER", None)
    output = tmp_path / "output.txt"
    with open(output, "w") as out:
        proc = subprocess.Popen([sys.executable, str(script), mindinsight.host, str(mindinsight.debugger_port)],
                                env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    run = Training(proc, tmp_path / "steps.log", tmp_path / "weights.npz", output)
    try:
        _waiting_at(rest, run, 0)
        assert "listed after LossMonitor" in _out(run)
        overflow = rest.create_watchpoint("weight_overflow")["id"]
        rest.continue_steps(-1)
        _waiting_at(rest, run, 5)
        assert "conv1.weight" in _hit_leaves(rest) and all(ids == {overflow} for ids in _hit_leaves(rest).values())
        _until_the_loss_is_not_finite(rest, run, 5, "terminate")
    except BaseException:
        print(_out(run)[-4000:])
        raise
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait(30)
