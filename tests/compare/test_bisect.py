"""``msdebug bisect``: two unmodified MindSpore trainings in, the step, the operator and both source lines out.

The runs are real (MindSpore 2.10 on the CPU, GRAPH_MODE, ``tests/scripts/bisect_train.py`` and copies of it with one
line changed); each test says which change it plants. Tests that start MindSpore carry the mark; the others check
bad input, runs that cannot record, the disk guard and the dump wait without training anything.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import sys
import threading
import time
from pathlib import Path

import pytest

from project import ROOT, fresh_env
from dump_fixtures import source_line
from msdebug_hooks.cli import main
from msdebug_hooks.compare.bisect_answer import cell_of, phase_of_node
from msdebug_hooks.compare.dump_wait import DiskGuard, wait_for_dump
from msdebug_hooks.errors import DumpError

SCRIPT = ROOT / "tests" / "scripts" / "bisect_train.py"
ACTIVATION_SCRIPT = ROOT / "tests" / "scripts" / "bisect_activation.py"
mindspore = pytest.mark.mindspore


@pytest.fixture
def scripts(tmp_path, monkeypatch):
    """``make(name, **changes)``: a copy of the training script with module constants changed; the runs inherit
    the environment a fresh interpreter would (nothing this test process's imports added)."""
    monkeypatch.chdir(tmp_path)
    os.environ.clear()
    os.environ.update(fresh_env())
    text = SCRIPT.read_text(encoding="utf-8")

    def make(name: str, **changes) -> Path:
        out = text
        for constant, value in changes.items():
            line = next(row for row in out.splitlines() if row.startswith(f"{constant} = "))
            out = out.replace(line, f"{constant} = {value!r}", 1)
            assert out != text
        path = tmp_path / name
        path.write_text(out, encoding="utf-8")
        return path
    return make


def _python(script: Path, *args: str) -> str:
    return shlex.join([sys.executable, str(script), *args])


def _bisect(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["bisect", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@mindspore
def test_an_epsilon_change_is_named_at_its_operator_with_both_source_lines(scripts, tmp_path, capsys):
    base, changed = scripts("base.py"), scripts("changed.py", EPSILON=1e-2)
    workdir = tmp_path / "work"
    code, out, err = _bisect(capsys, _python(changed), _python(base), "--workdir", str(workdir), "--jobs", "2",
                             "--json", str(tmp_path / "result.json"))
    assert code == 1, out + err
    # the losses part at step 1 (not bit-equal: step 1 is dumped, its operators judged against float32 noise)
    assert "losses: the runs part at step 1: " in out and "relative, not bit-equal)" in out
    assert "tolerance: same framework: step 1 is not bit-equal, so it is dumped" in out
    assert "dump: step 1 in both runs" in out
    assert "answer: step 1, forward: LayerNorm in cell norm" in out
    assert "  where:    the forward pass of step 1" in out
    line = source_line(base, "self.norm(self.fc1(x))")
    assert f"  source A: {changed}:{line}  x = self.relu(self.norm(self.fc1(x)))" in out
    assert f"  source B: {base}:{line}  x = self.relu(self.norm(self.fc1(x)))" in out
    # LayerNorm's epsilon is its input 5, a constant no operator makes: the operator is configured differently
    assert "reading:  constant: its inputs agree but for input 5: A 0.01, B 1e-05" in out
    saved = json.loads((tmp_path / "result.json").read_text())
    assert saved["exit_code"] == 1 and saved["step"] == 1 and saved["dumped_steps"] == [1]
    assert saved["answer"]["operator"] == "LayerNorm" and saved["answer"]["phase"] == "forward"
    assert saved["answer"]["node_a"].endswith("/norm-LayerNorm/LayerNorm-op0") and saved["pairs_compared"] > 100
    # progress went to stderr, step by step; what the command created is gone
    for step in ("[1/4] run A", "[2/4] run B", "[3/4] run A: dump of step 1", "[4/4] run B: dump of step 1"):
        assert f"msdebug bisect: {step}" in err
    assert not workdir.exists() and "removed" in err


@mindspore
def test_a_weight_changed_between_steps_is_found_resumably_within_the_disk_guard(scripts, tmp_path, capsys):
    """Run A rescales fc2's weight after step 2 (a callback). The disk guard first refuses the dump; the second call
    reuses both trainings and names the update between steps 2 and 3; a third reuses everything."""
    base, changed = scripts("base.py"), scripts("changed.py", CHANGE_AFTER=2)
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "mine.txt").write_text("not bisect's")
    args = [_python(changed), _python(base), "--workdir", str(workdir)]
    code, out, err = _bisect(capsys, *args, "--max-dump-gb", "0.0005")
    assert code == 2, out + err
    # stopped while it dumps, or (a fast machine) judged right after it ended: refused either way
    assert "msdebug bisect: error: run A (" in err and ("was stopped after" in err or "(rerun to dump" in err)
    # the guard judged the first dumped step whole, or (a loaded machine) caught it while it was still being written
    assert (("disk guard: one dumped step takes " in err and "2 step(s) in 2 run(s) need about" in err)
            or ("disk guard: the first dumped step already takes " in err and "is not complete: 2 step(s) in 2 "
                "run(s) need more than" in err)), err
    assert "over --max-dump-gb 0.0005" in err and f"kept {workdir}" in err
    assert not (workdir / "a" / "dump_step_3" / "dump").exists()      # the partial dump is removed at once
    assert (workdir / "a" / "dump_step_3" / "run.log").is_file()
    # again, with room: both trainings are reused, only the dumps run
    code, out, err = _bisect(capsys, *args, "--keep")
    assert code == 1, out + err
    assert err.count("training with its loss recorded: reused from") == 2
    # steps 1 and 2 are bit-equal: the runs are reproducible, so step 3 parts at its first bit
    assert "losses: the runs part at step 3: " in out and "relative, not bit-equal)" in out
    assert "tolerance: same framework: step 1 is bit-equal" in out
    assert "dump: steps 2 and 3 in both runs" in out
    assert "answer: step 3, update: MatMul in cell fc2" in out
    assert ("where:    between step 2 and step 3, outside the graph: step 2 agreed in every dumped operator "
            "(forward, backward, update), yet step 3 starts from different values of fc2.weight") in out
    line = source_line(base, "return self.fc2(x)")
    assert f"  source A: {changed}:{line}  return self.fc2(x)" in out
    assert f"  source B: {base}:{line}  return self.fc2(x)" in out
    assert "reading:  root: its inputs already differed (input 1 (fc2.weight))" in out and "50 % apart" in out
    # a third call reuses all four runs and gives the same answer; without --keep it removes only its own entries
    started = time.monotonic()
    code, again, err = _bisect(capsys, *args)
    assert code == 1 and err.count("reused from") == 4
    assert again.splitlines()[2:] == out.splitlines()[2:]
    assert time.monotonic() - started < 60          # generous: no MindSpore ran (the four runs took longer)
    assert sorted(p.name for p in workdir.iterdir()) == ["mine.txt"]


@mindspore
def test_identical_runs_say_no_difference_and_exit_0(scripts, tmp_path, capsys):
    """One script in two working directories (two checkouts), one with an extra variable that changes nothing."""
    (tmp_path / "v1").mkdir()
    (tmp_path / "v2").mkdir()
    scripts("v1/train.py")
    scripts("v2/train.py")
    command = shlex.join([sys.executable, "train.py", "--steps", "4"])
    code, out, err = _bisect(capsys, command, command, "--cwd-a", str(tmp_path / "v1"), "--cwd-b",
                             str(tmp_path / "v2"), "--env-b", "UNUSED_SETTING=1", "--jobs", "2",
                             "--workdir", str(tmp_path / "work"))
    assert code == 0, out + err
    assert "losses: 4 steps agree bit for bit" in out
    assert "answer: no difference: the runs agree on every step compared" in out
    assert "no dump needed" in err and not (tmp_path / "work").exists()


@mindspore
def test_a_run_that_crashes_is_named_with_its_log(scripts, tmp_path, capsys):
    base, crashing = scripts("base.py"), scripts("crashing.py", CRASH_AT=3)
    workdir = tmp_path / "work"
    code, out, err = _bisect(capsys, _python(crashing), _python(base), "--workdir", str(workdir), "--jobs", "2")
    assert code == 2 and out == ""
    log = workdir / "a" / "train" / "run.log"
    assert (f"msdebug bisect: error: run A ({_python(crashing)}) exited with status 1 after " in err
            and f"(training with its loss recorded); its output: {log}, ending:" in err)
    assert "RuntimeError: the data loader broke before step 3" in err and "msdebug_hooks/" not in err
    assert "RuntimeError: the data loader broke before step 3" in log.read_text()
    assert f"kept {workdir}" in err


# ---- no training: bad input, runs that record nothing, the disk guard, the dump wait ---------------------------

@pytest.mark.parametrize("argv, expected", [
    (["--steps", "0"], "msdebug bisect: error: --steps=0 is not allowed: an int > 0"),
    (["--steps", "-2"], "msdebug bisect: error: --steps=-2 is not allowed: an int > 0\n"),       # not "(or None)"
    (["--rtol", "-1"], "msdebug bisect: error: --rtol=-1.0 is not allowed: a finite number >= 0\n"),
    (["--max-dump-gb", "-1"], "msdebug bisect: error: --max-dump-gb=-1.0 is not allowed: a number > 0"),
    (["--env-a", "1X=2"], "msdebug bisect: error: --env-a='1X=2' is not allowed: NAME=VALUE"),
    (["--cwd-b", "/no/such/dir"], "msdebug bisect: error: --cwd-b='/no/such/dir' is not allowed: an existing "
                                  "directory"),
])
def test_bad_input_is_one_line_and_exit_2(argv, expected, tmp_path, capsys):
    code, out, err = _bisect(capsys, "python a.py", "python b.py", "--workdir", str(tmp_path / "w"), *argv)
    assert code == 2 and out == ""
    assert (err if expected.endswith("\n") else err.splitlines()[0]).startswith(expected) and "Traceback" not in err
    assert not (tmp_path / "w").exists()          # an argument error leaves no work directory behind


def test_an_empty_command_or_an_msrun_that_does_not_wait_is_refused(tmp_path, capsys):
    code, _out, err = _bisect(capsys, "  ", "python b.py", "--workdir", str(tmp_path / "w"))
    assert code == 2 and err.startswith("msdebug bisect: error: A='  ' is not allowed: a command that starts")
    code, _out, err = _bisect(capsys, "msrun --join True a.py", "msrun --worker_num=2 b.py", "--workdir",
                              str(tmp_path / "w"))
    assert code == 2 and err.startswith("msdebug bisect: error: B='msrun --worker_num=2 b.py' is not allowed: an "
                                        "msrun command with --join=True")
    assert not (tmp_path / "w").exists()      # refused before anything was made


def test_runs_that_cannot_start_or_record_nothing_are_named(tmp_path, capsys):
    code, _out, err = _bisect(capsys, "no-such-program --x", "python b.py", "--workdir", str(tmp_path / "w"))
    assert code == 2
    assert "error: run A (no-such-program --x) could not start: No such file or directory" in err
    # a Python run that trains nothing: no loss recorded (the shim ran: the fast lane's guard still holds)
    quiet = shlex.join([sys.executable, "-c", "print('no training here')"])
    code, _out, err = _bisect(capsys, quiet, quiet, "--workdir", str(tmp_path / "w2"), "--jobs", "2")
    assert code == 2
    assert "ended well but recorded no loss: it trains without Model.train/Model.fit" in err
    assert str(tmp_path / "w2" / "a" / "train" / "run.log") in err or str(tmp_path / "w2" / "b") in err
    # one run at a time: refused once run A recorded nothing, before run B is started (issue 32 point 4)
    code, _out, err = _bisect(capsys, quiet, quiet, "--workdir", str(tmp_path / "w3"))
    assert code == 2 and "run A (" in err and "ended well but recorded no loss" in err
    assert "run B" not in err and not (tmp_path / "w3" / "b").exists(), err


def _fake_step(dump: Path, rank: int, iteration: int, size: int) -> None:
    directory = dump / f"rank_{rank}" / "Net" / "0" / str(iteration)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"t{size}.npy").write_bytes(b"\0" * size)


def test_disk_guard_estimates_from_the_first_step(tmp_path):
    dump = tmp_path / "dump"
    guard = DiskGuard(dump, [3, 4], runs=2, max_bytes=10_000, free=lambda: 10 ** 12, limit="--max-dump-gb X")
    assert guard.check() is None                               # nothing written yet
    _fake_step(dump, 0, 3, 2_000)
    assert guard.check() is None                               # 2 KB so far, 4 steps' worth is 8 KB < 10 KB
    _fake_step(dump, 1, 3, 1_000)                              # a second rank: 3 KB per step, 12 KB in all
    reason = guard.check()
    assert reason.startswith("the first dumped step already takes 2.93 KB and is not complete")
    assert reason.endswith("over --max-dump-gb X")
    small = DiskGuard(dump, [3, 4], runs=2, max_bytes=100_000, free=lambda: 10 ** 12)
    assert small.check() is None and small.estimate is None
    _fake_step(dump, 0, 4, 10)                                 # step 4 began: step 3 is complete
    assert small.check() is None and small.step_bytes == 3_000 and small.estimate == 12_000
    tight = DiskGuard(dump, [3, 4], runs=1, max_bytes=100_000, free=lambda: 1_000)
    assert "more than the 1000 bytes free on the disk of" in tight.check_known(3_000)


def test_dump_wait_returns_once_complete_and_names_what_is_missing(tmp_path):
    dump = tmp_path / "dump"
    _fake_step(dump, 0, 1, 10)
    threading.Timer(0.3, _fake_step, (dump, 0, 2, 10)).start()
    wait_for_dump(dump, [0], [1, 2], timeout=10, poll=0.1)
    assert (dump / "rank_0" / "Net" / "0" / "2").is_dir()
    with pytest.raises(DumpError, match=r"run A's sync dump of iterations \[1, 2\] for ranks \[0, 1\].*missing "
                                        r"\(rank, iteration\): \[\(1, 1\), \(1, 2\)\].*GRAPH_MODE"):
        wait_for_dump(dump, [0, 1], [1, 2], timeout=0.3, poll=0.1, run="A")


@pytest.mark.parametrize("node, op_type, cell, phase", [
    ("Default/network-WithLossCell/_backbone-Net/norm-LayerNorm/LayerNorm-op0", "LayerNorm", "norm", "forward"),
    ("Gradients/Default/network-WithLossCell/_backbone-Net/fc2-Dense/Grad_BiasAdd/BiasAddGrad-op1", "BiasAddGrad",
     "fc2", "backward"),
    ("Default/optimizer-Momentum/ApplyMomentum-op3", "ApplyMomentum", "optimizer", "update"),
    ("Default/network-TrainOneStepCell/blocks-SequentialCell/0-Block/attn-Attention/MatMul-op9", "MatMul",
     "blocks.0.attn", "forward"),
])
def test_cells_and_phases_from_node_scopes(node, op_type, cell, phase):
    assert cell_of(node) == cell and phase_of_node(node, op_type) == phase


@mindspore
@pytest.mark.msrun
def test_two_rank_jobs_are_compared_rank_by_rank(scripts, tmp_path, capsys, monkeypatch):
    """msrun jobs of 2 ranks; run A rescales fc2's weight on rank 1 only, after step 2. Rank 1 parts at step 3 (the
    weight), rank 0 at step 3's gradient all-reduce; the dump reruns stop both ranks together after step 3."""
    from mindinsight_server import free_port

    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    base, changed = scripts("base.py"), scripts("changed.py", CHANGE_AFTER=2, CHANGE_RANK=1)

    def job(script: Path, logs: str) -> str:
        return shlex.join(["msrun", "--worker_num=2", "--local_worker_num=2", f"--master_port={free_port()}",
                           "--join=True", f"--log_dir={logs}", "--cluster_time_out=90", str(script), "--distributed",
                           "--steps", "4"])
    workdir = tmp_path / "work"
    code, out, err = _bisect(capsys, job(changed, "logs_a"), job(base, "logs_b"), "--workdir", str(workdir),
                             "--jobs", "2", "--timeout", "240", "--keep")
    assert code == 1, out + err
    assert "losses: rank 0: the runs part at step " in out and "losses: rank 1: the runs part at step 3: " in out
    assert "answer: step 3, update: MatMul in cell fc2 (rank 1)" in out
    assert "yet step 3 starts from different values of fc2.weight" in out
    # rank 0 only received the difference, through the gradient all-reduce of step 3
    assert "  rank 0: step 3, backward: AllReduce in cell grad_reducer; other rank; " in out
    for rank in (0, 1):   # both ranks' dump reruns stopped after step 3, together
        records = (workdir / "a" / "dump_step_3" / "records" / f"loss_rank_{rank}.jsonl").read_text().splitlines()
        assert [json.loads(line)["step"] for line in records] == [1, 2, 3]
    assert "stopping training on all 2 ranks after epoch 1, step 3" in (workdir / "a" / "dump_step_3" /
                                                                        "run.log").read_text()


# ---- one framework, two versions of one Model.train script: activations replaced, tolerance of the runs' own noise

ACT_LINE = "self.act = nn.GELU()"
#: fc2's weight 4e-6 apart (2**-18): under the float32 noise floor of a weight (1e-5), yet step 1's loss moves
NUDGE = ("    net = Classifier()\n    net.fc2.weight.set_data(ms.Tensor(net.fc2.weight.asnumpy() * "
         "np.float32(1 + 2 ** -18)))\n")


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
    """Four bisects of copies of ``bisect_activation.py`` (nn.GELU(), tanh-approximated) against it, in one work
    directory so that run B is trained and dumped once: the same file; nn.ReLU(); nn.GELU(approximate=False); one
    weight nudged within float32 noise (a stand-in for runs that are not reproducible). Each: (exit code,
    stdout, stderr, JSON result, script A)."""
    root = tmp_path_factory.mktemp("versions")
    text = ACTIVATION_SCRIPT.read_text(encoding="utf-8")
    assert ACT_LINE in text and "    net = Classifier()\n" in text
    copies = {"same": text, "relu": text.replace(ACT_LINE, "self.act = nn.ReLU()"),
              "exact": text.replace(ACT_LINE, "self.act = nn.GELU(approximate=False)"),
              "nudged": text.replace("    net = Classifier()\n", NUDGE)}
    base = root / "train.py"
    base.write_text(text, encoding="utf-8")
    found = {"base": base}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        fresh = fresh_env()      # what a new interpreter inherits (nothing this process's imports added)
        for name in set(os.environ) - set(fresh):
            patch.delenv(name)
        for name, value in fresh.items():
            patch.setenv(name, value)
        patch.delenv("MINDSPORE_DUMP_CONFIG", raising=False)
        for name, copy in copies.items():
            script = root / f"train_{name}.py"
            script.write_text(copy, encoding="utf-8")
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(["bisect", _python(script), _python(base), "--workdir", str(root / "work"), "--keep",
                             "--json", str(root / f"{name}.json")])
            saved = json.loads((root / f"{name}.json").read_text()) if code != 2 else None
            found[name] = (code, out.getvalue(), err.getvalue(), saved, script)
    return found


def _source(script: Path, base: Path, out: str) -> None:
    line = source_line(base, "self.norm(self.act(self.fc1(x)))")
    assert f"  source A: {script}:{line}  x = self.norm(self.act(self.fc1(x)))" in out
    assert f"  source B: {base}:{line}  x = self.norm(self.act(self.fc1(x)))" in out


@mindspore
def test_relu_for_gelu_is_named_at_the_activation_with_both_source_lines(versions):
    code, out, err, saved, script = versions["relu"]
    assert code == 1, out + err
    assert "losses: the runs part at step 1: " in out and "dump: step 1 in both runs" in out
    assert "answer: step 1, forward: A computes ReLU where B computes GeLU (cell act)" in out
    assert "  reading:  replaced: A computes ReLU where B computes GeLU (cell act): fed the same inputs" in out
    _source(script, versions["base"], out)
    best = saved["answer"]
    assert best["reading"] == "replaced" and best["phase"] == "forward" and best["cell"] == "act"
    assert best["node_a"].endswith("/act-ReLU/ReLU-op0") and best["node_b"].endswith("/act-GELU/GeLU-op0")


@mindspore
def test_exact_gelu_against_tanh_gelu_parts_and_is_named_at_the_gelu(versions):
    code, out, err, saved, script = versions["exact"]
    assert code == 1, out + err
    best = saved["answer"]
    assert best["step"] == 1 and best["phase"] == "forward" and best["reading"] == "replaced"
    # MindSpore computes the exact GELU from Erf and elementwise operators, the tanh form as one GeLU kernel
    assert best["replaced"].startswith("A computes ") and best["replaced"].endswith(" where B computes GeLU (cell act)")
    assert "Erf" in best["replaced"] and best["node_b"].endswith("/act-GELU/GeLU-op0")
    assert 1e-5 < best["error"] < 1e-2        # the two GELUs differ by ~1e-4 of the activation: far above float32
    _source(script, versions["base"], out)
    assert "reused from" in err                # run B trained and dumped once for all four bisects


@mindspore
def test_identical_scripts_are_bit_equal_and_exit_0(versions):
    code, out, err, saved, _ = versions["same"]
    assert code == 0, out + err
    assert "losses: 3 steps agree bit for bit" in out
    assert "tolerance: same framework: step 1 is bit-equal, so the runs are reproducible" in out
    assert "answer: no difference" in out and saved["answers"] == []


@mindspore
def test_noise_alone_at_step_1_is_told_from_a_change_by_its_dump(versions):
    """A weight 4e-6 apart: step 1 is not bit-equal, but its dump shows no operator beyond float32 noise, so the
    runs are read as not reproducible and the later steps are judged by rtol 1e-3: no difference, exit 0."""
    code, out, err, saved, _ = versions["nudged"]
    assert code == 0, out + err
    assert "step 1's dump shows no operator beyond float32 noise" in err
    assert "tolerance: same framework, not reproducible: step 1 differs by noise alone" in out
    assert "answer: no difference" in out
    assert "losses: 3 steps agree (step 1 within " in out and saved["dumped_steps"] == [1]


@mindspore
def test_a_change_below_float32_noise_parts_reproducible_runs(scripts, tmp_path, capsys):
    """fc2's weight scaled by 1 + 2**-18 (4e-6) after step 2: a change under every float32 noise floor (with
    compare-loss's rtol the runs would agree). Steps 1 and 2 are bit-equal, so the runs are compared bit for bit and
    step 3 parts at fc2's MatMul, with a note that the difference is of noise size."""
    base, changed = scripts("base.py"), scripts("changed.py", CHANGE_AFTER=2, SCALE=1 + 2 ** -18)
    code, out, err = _bisect(capsys, _python(changed), _python(base), "--workdir", str(tmp_path / "work"),
                             "--jobs", "2")
    assert code == 1, out + err
    assert "losses: the runs part at step 3: " in out and "tolerance: same framework: step 1 is bit-equal" in out
    assert "answer: step 3, update: MatMul in cell fc2" in out and "fc2.weight" in out
    assert "note: rank 0: MatMul differs by " in out and "within the float32 noise floor (1e-05)" in out
