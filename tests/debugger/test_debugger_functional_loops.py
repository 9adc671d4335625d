"""Issue 23 items 1-2: the debugger reaches training loops written the way MindSpore 2.x's tutorials write them
(``value_and_grad`` / ``grad`` + an optimizer, ``@mindspore.jit``, a ``TrainOneStepCell`` called by hand, a loop over
``create_tuple_iterator()``), with no edit to the script: ``msdebug debug``, env activation against ``msdebug
serve`` and the Python server API. Gradients under ``@jit`` are captured without a crash. Real MindSpore CPU
trainings of ``examples/functional_train.py``; step N is the N-th optimizer call.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from project import EXAMPLES, run_python
from mindinsight_server import free_port
from server_training import eventually, training

from msdebug_cli import cli_env, run_msdebug  # noqa: E402

pytestmark = [pytest.mark.mindspore, pytest.mark.timeout(300)]

SCRIPT = EXAMPLES / "functional_train.py"


_env, _msdebug = cli_env, run_msdebug


def _rows(out: str, text: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if text in line and line.split()[:1] == ["3"]]


@pytest.mark.parametrize("variant", [[], ["--no-jit"]], ids=["jit", "pynative"])
def test_debug_pauses_the_unmodified_tutorial_loop_at_its_nan_step(tmp_path, variant):
    log = tmp_path / "steps.log"
    proc = _msdebug("debug", "--output", str(tmp_path / "out.txt"), "-c", "watch weight_overflow; continue",
                    str(SCRIPT), "--steps", "8", "--nan-step", "3", "--log", str(log), *variant)
    out = (tmp_path / "out.txt").read_text()
    assert proc.returncode == 1, proc.stdout + out
    assert "job 1 waiting at step 3" in proc.stdout
    assert _rows(proc.stdout, "weight_overflow") and all(row[1] == "0" for row in _rows(proc.stdout, ".weight"))
    # the terminate at the end of the commands ended the loop like the end of its data: 3 steps, then the script
    # evaluated and finished on its own (exit 0), no traceback
    assert "training exited with code 0" in proc.stdout
    assert [row.split()[1] for row in log.read_text().splitlines() if row.startswith("step")] == ["1", "2", "3"]
    assert log.read_text().splitlines()[-1] == "end" and "done" in out and "Traceback" not in out
    assert "a step is one call of the optimizer" in out


def test_gradient_and_loss_watchpoints_under_jit_capture_without_a_crash(tmp_path):
    proc = _msdebug("debug", "--output", str(tmp_path / "out.txt"), "-c",
                    "watch gradient_too_large abs_mean_gt=1e3 *; watch tensor_too_large:max_gt=1e3 "
                    "*CrossEntropyLoss-op*; continue; stats fc3.weight",
                    str(SCRIPT), "--steps", "6", "--nan-step", "3")
    out = (tmp_path / "out.txt").read_text()
    assert proc.returncode == 1, proc.stdout + out
    assert "job 1 waiting at step 3" in proc.stdout
    grads = _rows(proc.stdout, "gradient_too_large")
    assert {row[2].split("/")[-1].split("-op")[0] for row in grads} >= {"GradOf_fc3.weight", "GradOf_fc1.weight"}
    assert _rows(proc.stdout, "CrossEntropyLoss-op")          # the loss of step 3 (the step function's output)
    assert "should be initialized" not in out and "Traceback" not in out and "training exited with code 0" in \
        proc.stdout


@pytest.mark.parametrize("variant", [["--grad"], ["--train-one-step"]], ids=["grad-jit", "train-one-step"])
def test_other_loop_shapes_are_reached_and_say_what_they_cannot_show(tmp_path, variant):
    proc = _msdebug("debug", "--output", str(tmp_path / "out.txt"), "-c",
                    "watch weight_overflow; step 2; continue", str(SCRIPT), "--steps", "6", "--nan-step", "4",
                    *variant)
    out = (tmp_path / "out.txt").read_text()
    assert proc.returncode == 1, proc.stdout + out
    assert "job 1 waiting at step 2" in proc.stdout and "job 1 waiting at step 4" in proc.stdout
    assert "training exited with code 0" in proc.stdout and "Traceback" not in out
    said = [line for line in out.splitlines() if "the loss of this loop is not seen" in line]
    # mindspore.grad under @jit returns no loss: said once, with the edit; a TrainOneStepCell's loss cell is seen
    assert len(said) == (1 if variant == ["--grad"] else 0), out
    if said:
        assert "return it first from the @mindspore.jit step function, or add: with DebugSession(" in said[0]


def test_env_activation_against_serve_pauses_at_the_nan_step(tmp_path):
    port = free_port()
    serve = subprocess.Popen([sys.executable, "-m", "msdebug_hooks", "serve", "--port", str(port), "-c",
                              "watch weight_overflow; continue; hits"],
                             env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert f"listening on 127.0.0.1:{port}" in serve.stdout.readline()
        with training(tmp_path, port, "--steps", "8", "--nan-step", "5", script=SCRIPT) as run:
            out, _ = serve.communicate(timeout=240)
            assert serve.returncode == 1, out + run.out()
            assert run.proc.wait(60) == 0, run.out()
            assert run.lines()[-1] == "end" and run.steps() == 5      # stopped after step 5, ended cleanly
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait(30)
    assert "job 1 connected" in out and "waiting at step 0" in out and "job 1 waiting at step 5" in out


def test_api_steps_views_pauses_and_terminates_a_functional_loop(tmp_path):
    from msdebug_hooks.server import DebuggerServer

    with DebuggerServer(port=0, log_reports=False) as server:
        with training(tmp_path, server.port, "--steps", "400", "--no-jit", script=SCRIPT) as run:
            job = server.wait_for_training(timeout=120, process=run.proc)
            assert job.step == 0
            job.watch("weight_overflow")
            job.run(2)
            assert job.step == 2 and run.steps() == 1       # held at the end of step 2, before the loop logs it
            before = job.tensor("fc3.weight", step="previous")
            after = job.tensor("fc3.weight")
            assert before.shape == after.shape == (10, 84) and (before != after).any()
            (loss,) = job.nodes("*CrossEntropyLoss-op*")
            assert 0 < float(job.tensor(loss)) < 10                  # step 2's loss, from the loss cell's hook
            job.run(None, wait=False)
            eventually(lambda: run.steps() >= 5, 120, "the loop runs on")
            paused_at = job.pause(timeout=120)
            assert 2 < paused_at < 400
            job.terminate()
            assert run.proc.wait(120) == 0, run.out()
    steps = run.steps()
    assert paused_at <= steps < 400 and run.lines()[-1] == "end"     # the loop ended early, the script ran on
    assert "Traceback" not in run.out()


def test_jit_step_runs_compiled_unless_a_capture_needs_its_hooks(tmp_path):
    """hook_guard: with only bookkeeping hooks the @jit function runs compiled (its Python body does not run per
    call) and the hook is never compiled into it; while a capturing hook is live it runs eagerly and the hook sees
    the gradients, registered before the first compile (the case that crashed with 'self.values should be
    initialized'); once it is removed the compiled graph is used again."""
    script = tmp_path / "guarded.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        import mindspore as ms
        from mindspore import nn, Tensor
        from msdebug_hooks.debugger import hook_guard

        net = nn.Dense(4, 3)
        loss_fn = nn.CrossEntropyLoss()
        opt = nn.SGD(net.trainable_params(), 0.1)

        def forward(x, y):
            return loss_fn(net(x), y)

        grad_fn = ms.value_and_grad(forward, None, opt.parameters)
        ran = []

        @ms.jit
        def train_step(x, y):
            ran.append(1)
            loss, grads = grad_fn(x, y)
            opt(grads)
            return loss

        class Keeper:
            def __init__(self):
                self.values = {}

            def keep(self, cell, inputs):
                self.values["grad"] = inputs[0][0].asnumpy()

        keeper, seen = Keeper(), []
        grads = hook_guard.forward_pre_hook(opt, keeper.keep)     # before the first compile
        losses = hook_guard.forward_hook(loss_fn, lambda cell, inputs, output: seen.append(1), captures=False)
        x, y = Tensor(np.ones((2, 4), np.float32)), Tensor(np.array([0, 1], np.int32))
        for _ in range(2):
            train_step(x, y)
        print("eager", len(ran), len(seen), keeper.values["grad"].shape, flush=True)
        grads.remove()
        ran.clear()
        for _ in range(3):
            train_step(x, y)
        print("compiled", len(ran) <= 1, len(seen), flush=True)
        losses.remove()
    """))
    proc = run_python(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')")
    assert "eager 2 2 (3, 4)" in proc.stdout, proc.stdout + proc.stderr
    assert "compiled True 2" in proc.stdout, proc.stdout + proc.stderr


def test_from_env_is_inert_without_the_variable_and_an_explicit_session_is_not_debugged_twice(tmp_path):
    script = tmp_path / "explicit.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(EXAMPLES)!r})
        import mindspore as ms
        from mindspore import nn, Tensor
        from lenet import make_dataset, make_lenet
        from msdebug_hooks import DebugSession, DebuggerCallback

        net = make_lenet()
        loss_fn = nn.CrossEntropyLoss()
        optimizer = nn.SGD(net.trainable_params(), 0.01)
        grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, optimizer.parameters)
        debugger = DebuggerCallback.from_env()
        print("enabled", debugger.enabled, flush=True)
        with DebugSession(callbacks=[debugger], network=net, optimizer=optimizer, loss_fn=loss_fn) as session:
            for x, y in make_dataset(3).create_tuple_iterator():
                loss, grads = grad_fn(x, y)
                optimizer(grads)
                session.step_end(loss)
        with open(sys.argv[2], "a") as log:
            log.write("end\\n")
    """))
    plain = subprocess.run([sys.executable, str(script), "--log", str(tmp_path / "plain.log")],
                           env=_env(), capture_output=True, text=True, timeout=240)
    assert plain.returncode == 0, plain.stderr
    assert "enabled False" in plain.stdout
    info = [line for line in plain.stderr.splitlines() if "DebuggerCallback.from_env() attaches nothing" in line]
    assert len(info) == 1 and "ENABLE_MS_DEBUGGER is unset" in info[0]

    from msdebug_hooks.server import DebuggerServer

    with DebuggerServer(port=0, log_reports=False) as server:
        with training(tmp_path, server.port, script=script) as run:
            job = server.wait_for_training(timeout=120, process=run.proc)
            assert job.run_until_hit(timeout=120) == []       # to the end: the explicit session's 3 steps
            assert run.proc.wait(120) == 0, run.out()
        assert len(server.jobs) == 1 and job.step == 3, [j.step for j in server.jobs]
    assert "enabled True" in run.out() and "hand-written training loop" not in run.out()


def test_a_loop_the_debugger_cannot_see_is_named_at_the_end_not_passed_over_in_silence():
    """Env activation (as ``msdebug run`` installs it) on a loop that updates its weights without an nn.Optimizer:
    nothing can be debugged, and the script's end says what to add instead of training undebugged in silence."""
    proc = run_python("""
        from msdebug_hooks import autoattach
        autoattach.install_from_env()
        import mindspore as ms
        from mindspore import nn, ops
        from lenet import make_dataset, make_lenet

        net = make_lenet()
        loss_fn = nn.CrossEntropyLoss()
        grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, net.trainable_params())
        for x, y in make_dataset(2).create_tuple_iterator():
            loss, grads = grad_fn(x, y)
            for weight, grad in zip(net.trainable_params(), grads):
                ops.assign(weight, weight - 0.01 * grad)
        print("trained")
    """, env={"ENABLE_MS_DEBUGGER": "1", "MS_DEBUGGER_PORT": "9"})
    said = [line for line in proc.stderr.splitlines() if "reached no training the debugger can see" in line]
    assert "trained" in proc.stdout and len(said) == 1, proc.stderr
    assert "add: with DebugSession(callbacks=[DebuggerCallback.from_env()]" in said[0]
