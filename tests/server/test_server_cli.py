"""Issue 13 acceptance, the terminal debugger: ``msdebug debug`` driven through a pseudo-terminal (pexpect) as a
person types, Ctrl-C pausing a running job; ``-c`` / command-file mode in a subprocess with its exit codes (1 on
hits, 0 without, 2 on bad input); ``msdebug serve`` for a training started elsewhere. Real CPU trainings.
"""
from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest

from project import EXAMPLES
from server_training import PLAIN, training

from msdebug_cli import cli_env, run_msdebug  # noqa: E402

pytestmark = [pytest.mark.timeout(300)]

PROMPT = r"\(msdebug job 1 step (\d+) (\w+)\) "


_env, _msdebug = cli_env, run_msdebug


@pytest.mark.mindspore
def test_prompt_through_a_terminal_lists_watches_steps_views_pauses_on_ctrl_c_and_terminates(tmp_path):
    log = tmp_path / "steps.log"
    child = pexpect.spawn(sys.executable, ["-m", "msdebug_hooks", "debug", "--output", str(tmp_path / "out.txt"),
                                           str(PLAIN), "--batches", "3000", "--log", str(log)],
                          env=_env(), cwd=str(tmp_path), encoding="utf-8", timeout=120, dimensions=(50, 200))
    try:
        child.expect(PROMPT)
        assert child.match.groups() == ("0", "waiting")
        child.sendline("nodes fc1 weight")
        child.expect("fc1-Dense/fc1.weight")
        child.expect(r"2 node\(s\)")
        child.expect(PROMPT)
        child.sendline("watch weight_overflow")
        child.expect(r"watchpoint 1: weight_overflow on 8 node\(s\)")
        child.expect(PROMPT)
        child.sendline("step 2")
        child.expect(PROMPT)
        assert child.match.groups() == ("2", "waiting")
        child.sendline("tensor fc3.bias previous")
        child.expect(r"fc3.bias \(previous, step 2\): float32 \[10\]")
        child.expect(PROMPT)
        child.sendline("stats fc1.weight")
        child.expect(r"count\s+48000")
        child.expect(PROMPT)
        child.sendline("continue")
        deadline = time.monotonic() + 120
        while (log.read_text().count("step ") if log.exists() else 0) < 6:   # it really runs on
            assert time.monotonic() < deadline, "the training did not run on after continue"
            time.sleep(0.1)
        child.sendintr()                                                      # Ctrl-C: pause
        child.expect("pausing at the next step end")
        child.expect(r"job 1 waiting at step (\d+)")
        paused = int(child.match.group(1))
        child.expect(PROMPT)
        assert int(child.match.group(1)) == paused > 2
        child.sendline("hits")
        child.expect("no hits")
        child.expect(PROMPT)
        steps_now = log.read_text().count("step ")
        assert steps_now in (paused - 1, paused)       # held at the step it reported (its own hook may run after ours)
        child.sendline("bogus")
        child.expect(r"\*\*\* unknown command 'bogus'")
        child.expect(PROMPT)
        child.sendline("terminate")
        child.expect("job 1 terminated")
        child.expect("training exited with code 0")
        child.sendline("quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert log.read_text().splitlines()[-1] == "end" and log.read_text().count("step ") == paused
    assert child.exitstatus == 2          # 'bogus' was bad input; no hit


@pytest.mark.mindspore
def test_command_mode_exits_1_on_hits_0_without_and_2_on_bad_input(tmp_path):
    hit = _msdebug("debug", "-c", "watch weight_overflow *; watch gradient_exploding; watch tensor_overflow "
                   "*SoftmaxCrossEntropyWithLogits-op*; watch tensor_overflow *ApplyMomentum-op1*; continue; "
                   "source conv1.weight; stats .../SoftmaxCrossEntropyWithLogits-op9; bogus", str(PLAIN),
                   "--nan-batch", "2", "--batches", "8")
    assert hit.returncode == 1, hit.stdout + hit.stderr                       # a hit, even with a typo after it
    assert "job 1 waiting at step 3" in hit.stdout
    (row,) = [line for line in hit.stdout.splitlines() if "conv1.weight" in line and "weight_overflow" in line]
    assert row.split()[:2] == ["3", "0"]                                      # step 3, rank 0
    assert "training exited with code 0" in hit.stdout
    # the source column: the script's line calling the layer (for its weight and its gradient), and the line
    # computing the loss (Model.train computes it inside model.train)
    lenet = (EXAMPLES / "lenet.py").read_text().splitlines()
    conv1 = next(n for n, line in enumerate(lenet, 1) if "self.conv1(x)" in line)
    defined = next(n for n, line in enumerate(lenet, 1) if "self.conv1 = " in line)
    train = next(n for n, line in enumerate(PLAIN.read_text().splitlines(), 1) if "model.train(" in line)
    (grad,) = [line for line in hit.stdout.splitlines() if "GradOf_conv1.weight" in line and "gradient_" in line]
    (loss,) = [line for line in hit.stdout.splitlines() if "SoftmaxCrossEntropyWithLogits-op" in line and
               line.split()[0] == "3"]
    assert row.endswith(f" lenet.py:{conv1}") and grad.endswith(f" lenet.py:{conv1}"), (row, grad)
    assert loss.endswith(f" plain_lenet_train.py:{train}"), loss
    assert f"> {EXAMPLES / 'lenet.py'}:{conv1}  {lenet[conv1 - 1].strip()}" in hit.stdout   # source's marker
    assert f"  {EXAMPLES / 'lenet.py'}:{defined}  {lenet[defined - 1].strip()}" in hit.stdout  # then the definition
    # issue 32 point 4: the rows in the order the step computed them (the updates after the gradients); the
    # shortened name pasted back; the statistics of a tensor with no finite value say so (not min 0, max 0, mean 0)
    rows = [line for line in hit.stdout.splitlines() if line.startswith("   3     0")]
    kinds = [("grad" if "GradOf_" in r else "update" if "ApplyMomentum" in r else "weight" if "weight_overflow" in r
              else "loss") for r in rows]
    assert kinds == sorted(kinds, key=["loss", "grad", "update", "weight"].index) and "update" in kinds, rows
    assert ".../SoftmaxCrossEntropyWithLogits-op9 " in loss and \
        "_loss_fn-SoftmaxCrossEntropyWithLogits/SoftmaxCrossEntropyWithLogits-op9 (current, step 3):" in hit.stdout
    said = [line.split() for line in hit.stdout.splitlines()]
    assert [["min", "no", "finite", "values"], ["max", "no", "finite", "values"],
            ["mean", "no", "finite", "values"]] == [w for w in said if w[:1] in (["min"], ["max"], ["mean"])]
    # issue 32 point 5: the log the command made (path printed at the start) is removed at its end (exit 1 here)
    log = Path(re.search(r"its output goes to (\S+)$", hit.stdout, re.MULTILINE).group(1))
    assert f"msdebug debug: removed the training's output log {log} (--output FILE keeps it)" in hit.stdout
    assert not log.exists()
    foreign = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d|^\[(DEBUG|INFO|WARNING|ERROR)\] [A-Z_]+\(\d+", re.MULTILINE)
    assert not foreign.search(hit.stdout + hit.stderr), hit.stdout + hit.stderr   # only our lines

    clean = _msdebug("debug", "-c", "watch weight_overflow; continue; hits", str(PLAIN), "--batches", "4")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "job 1 finished" in clean.stdout and "no hits" in clean.stdout

    script = tmp_path / "commands.txt"
    script.write_text("# a typo in the condition\nwatch weight_overflw\ncontinue\n")
    bad = _msdebug("debug", "-x", str(script), str(PLAIN), "--batches", "4")
    assert bad.returncode == 2
    assert "condition='weight_overflw' is not allowed" in bad.stdout and "(msdebug job 1 step 0 waiting) continue" \
        not in bad.stdout                                                     # stopped at the bad command
    assert "training exited with code 0" in bad.stdout                        # and ended the training cleanly
    kept = Path(re.search(r"its output goes to (\S+)$", bad.stdout, re.MULTILINE).group(1))
    assert bad.stdout.rstrip().endswith(f"msdebug debug: the training's output is kept in {kept}")   # exit 2: kept
    assert kept.is_file() and "msdebug run: debugger attached" in kept.read_text()
    kept.unlink()

    missing = _msdebug("debug", "-c", "continue", str(tmp_path / "nope.py"))
    assert missing.returncode == 2 and "script=" in missing.stderr and "Traceback" not in missing.stderr


@pytest.mark.mindspore
def test_continue_follows_a_script_that_trains_again_with_its_watchpoints_and_ends_it_without_a_kill(tmp_path):
    """A script with several ``Model.train`` calls (one per epoch is common): ``continue`` runs on into the next
    training, which gets the watchpoints of the one before, so the whole script stays watched; one still connecting
    after the session ended is terminated at step 0, so the script ends on its own (no 60 s wait, no kill)."""
    both = _msdebug("debug", "-c", "watch weight_overflow *; continue", str(PLAIN), "--batches", "3",
                    "--trainings", "2", "--pause-between", "3")        # 3 s of "evaluation" between the two
    assert both.returncode == 0, both.stdout + both.stderr
    assert "the script runs on after its training ended; waiting up to 3600 s (--timeout)" in both.stdout
    assert "job 1 finished" in both.stdout and "job 2: the script trains again (rank 0), waiting at step 0; " \
        "commands now act on it; watchpoint 1: weight_overflow on 8 node(s) set again" in both.stdout
    assert "continuing job 2" in both.stdout and "job 2 finished" in both.stdout
    assert "training exited with code 0" in both.stdout and "killed" not in both.stdout

    second = _msdebug("debug", "-c", "watch weight_overflow *; continue", str(PLAIN), "--nan-batch", "1",
                      "--nan-training", "2", "--batches", "4", "--trainings", "2")
    assert second.returncode == 1, second.stdout + second.stderr       # the carried watchpoint hit in training 2
    assert "job 1 finished" in second.stdout and "job 2 waiting at step 2" in second.stdout
    (row,) = [line for line in second.stdout.splitlines() if "conv1.weight" in line and "weight_overflow" in line]
    assert row.split()[:2] == ["2", "0"]

    # exit 2 keeps the command's own log: these two write theirs under tmp_path instead of the temp directory
    other = _msdebug("debug", "--output", str(tmp_path / "other.log"), "-c", "watch weight_overflow; watch "
                     "weight_too_large:abs_mean_gt=100 fc3.weight; "
                     "continue", str(PLAIN), "--batches", "3", "--trainings", "2", "--retrain-small")
    assert other.returncode == 2, other.stdout + other.stderr   # training 2 could not be watched as asked
    assert "watchpoint 1: weight_overflow on 2 node(s) set again" in other.stdout   # every weight of the new network
    assert "*** watchpoint 2 (weight_too_large:abs_mean_gt=100) could not be set on job 2: nodes='fc3.weight'" \
        in other.stdout
    assert "training exited with code 0" in other.stdout and "killed" not in other.stdout

    hung = _msdebug("debug", "--output", str(tmp_path / "hung.log"), "--timeout", "4", "-c", "continue", str(PLAIN),
                    "--batches", "3", "--trainings", "2", "--pause-between", "60")
    assert hung.returncode == 2, hung.stdout + hung.stderr     # its second training could not be looked at
    assert "*** the script neither trained again nor exited within 4 s of its training's end; killed" in hung.stdout
    assert "training exited with code -9" in hung.stdout

    hit = _msdebug("debug", "-c", "watch weight_overflow *; continue", str(PLAIN), "--nan-batch", "1",
                   "--batches", "4", "--trainings", "2")
    assert hit.returncode == 1, hit.stdout + hit.stderr
    assert "job 1 waiting at step 2" in hit.stdout
    assert "job 2: the script trained again after the session ended; terminated at step 0" in hit.stdout
    assert "training exited with code 0" in hit.stdout and "killed" not in hit.stdout


@pytest.mark.mindspore
def test_serve_drives_a_training_started_elsewhere_and_takes_its_next_one_with_the_watchpoints(tmp_path):
    # --port 0 (issue 32 point 4): a free port, printed where the training's variables are
    serve = subprocess.Popen([sys.executable, "-m", "msdebug_hooks", "serve", "--port", "0", "-c",
                              "watch weight_overflow; step 1; continue; wait 120; continue; stats conv1.weight"],
                             env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first = serve.stdout.readline()
        port = int(re.search(r"listening on 127\.0\.0\.1:(\d+);", first).group(1))
        assert port > 0 and f"MS_DEBUGGER_PORT={port}" in first, first
        with training(tmp_path, port, "--batches", "6", "--trainings", "2", "--nan-batch", "3", "--nan-training",
                      "2") as run:
            out, _ = serve.communicate(timeout=240)
            assert serve.returncode == 1, out
            assert run.proc.wait(60) == 0 and run.lines()[-1] == "end" and run.steps() == 6 + 4
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait(30)
    assert "job 1 finished" in out
    assert "job 2 connected (rank 0), waiting at step 0; watchpoint 1: weight_overflow on 8 node(s) set again" in out
    assert "job 2 waiting at step 4" in out and "nan " in out


def test_serve_and_debug_refuse_a_port_in_use_and_bad_values_with_exit_2():
    from msdebug_hooks.server import DebuggerServer

    with DebuggerServer(port=0, log_reports=False) as taken:
        port = taken.port
        busy = _msdebug("serve", "--port", str(port), "-c", "status", timeout=60)
    assert busy.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in busy.stderr
    assert "Traceback" not in busy.stderr
    for args, message in ((("serve", "--port", "0", "--ranks", "2"), "--port=0 is not allowed: 1..65534 (0, a free "
                                                                     "port, with --ranks 1 only)"),
                          (("serve", "--ranks", "0"), "--ranks=0 is not allowed"),
                          (("debug", "--port", "70000", str(PLAIN)), "port=70000 is not allowed"),
                          (("serve", "-x", "/nonexistent/commands.txt"), "--command-file='/nonexistent/commands.txt'"),
                          (("serve", "-c", " ; "), "no commands given")):
        proc = _msdebug(*args, timeout=60)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, (args, proc.stderr)


@pytest.mark.mindspore
def test_command_mode_with_the_dump_source_names_the_first_nan_operator_and_its_line():
    proc = _msdebug("debug", "--source", "dump", "-c", "watch tensor_overflow *; continue; source Sqrt-op0",
                    str(EXAMPLES / "debug_first_nan.py"), "--train")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines() if "tensor_overflow" in line and
            not line.startswith(("(msdebug", "watchpoint"))]
    operators = [row for row in rows if "Parameter" not in row and not row[2].endswith((".weight", ".bias"))]
    assert operators[0][:2] == ["3", "0"] and operators[0][2].endswith("scale-SqrtScale/Sqrt-op0")
    assert operators[0][-1].startswith("find_first_nan.py:")                 # the source column
    assert "> " + str(EXAMPLES / "find_first_nan.py") in proc.stdout and "return ops.sqrt(x + 1.0)" in proc.stdout
