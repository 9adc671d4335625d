"""Loss records and compare-loss: real MindSpore runs that part at a known step, identical runs, and every kind of
bad input with a message naming the file and line."""
from __future__ import annotations

import json
import math

import pytest

from compare_fixtures import CHANGE_AFTER
from conftest import run_python
from msdebug_hooks.cli import main
from msdebug_hooks.compare import LossWriter, compare_losses, read_losses
from msdebug_hooks.compare.loss import LossFileError


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _records(path, losses, start=1):
    return _write(path, [json.dumps({"step": start + i, "loss": v}) for i, v in enumerate(losses)])


# --- real runs -------------------------------------------------------------------------------------------------------

@pytest.mark.mindspore
def test_runs_that_part_at_step_k_report_step_k(two_runs_example, capsys):
    workdir, _ = two_runs_example
    code = main(["compare-loss", str(workdir / "b" / "losses"), str(workdir / "a" / "losses")])
    out = capsys.readouterr().out
    step = CHANGE_AFTER + 1
    assert code == 1
    assert f"first step beyond tolerance: {step} " in out
    assert f"steps up to {step - 1} agree, step {step} differs" in out and "backward pass and the weight update" in out
    result = compare_losses(read_losses(workdir / "b" / "losses"), read_losses(workdir / "a" / "losses"))
    assert [s.step for s in result.steps] == [1, 2, 3, 4, 5]
    assert result.steps[0].abs_error == result.steps[1].abs_error == 0.0   # same data, weights and graph: bit-equal
    assert result.first_parted.step == step


@pytest.mark.mindspore
def test_identical_runs_report_no_step(two_runs_example, capsys):
    workdir, _ = two_runs_example
    # the same run, twice, in two processes (once with a dump): nothing parts
    for run in ("a", "b"):
        code = main(["compare-loss", str(workdir / run / "losses_dumped"), str(workdir / run / "losses")])
        out = capsys.readouterr().out
        assert code == 0, out
        assert "no step beyond tolerance" in out and "max abs error 0," in out


@pytest.mark.mindspore
def test_loss_recorder_under_debug_session_records_loss_overflow_and_scale(tmp_path):
    run_python(f"""
        import mindspore as ms
        from lenet import make_loss_scale_cell, synthetic_batches
        from msdebug_hooks import DebugSession, LossRecorder
        cell, net = make_loss_scale_cell()
        recorder = LossRecorder({str(tmp_path)!r}, rank=3)
        with DebugSession(callbacks=[recorder], network=net) as session:
            for images, labels in synthetic_batches(3):
                session.step_end(cell(ms.Tensor(images), ms.Tensor(labels)))
    """)
    lines = (tmp_path / "loss_rank_3.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["step"] for r in records] == [1, 2, 3]
    assert all(r["rank"] == 3 and r["epoch"] == 1 and r["overflow"] is False for r in records)
    assert all(r["loss_scale"] == 4096.0 and math.isfinite(r["loss"]) for r in records)


# --- the writer ------------------------------------------------------------------------------------------------------

def test_writer_keeps_every_step_of_a_crashed_run(tmp_path):
    run_python(f"""
        import os
        from msdebug_hooks.compare import LossWriter
        writer = LossWriter({str(tmp_path)!r}, rank=0, fsync_every=0)
        for step in range(1, 6):
            writer.write(step, 1.0 / step, epoch=1)
        os._exit(9)   # killed: no close, no flush at exit
    """, check=False)
    series = read_losses(tmp_path)
    assert series.steps == [1, 2, 3, 4, 5] and series.losses[4] == 0.25


def test_writer_appends_and_writes_nonfinite_as_strings(tmp_path):
    with LossWriter(tmp_path, rank=1) as writer:
        writer.write(1, 2.5, epoch=1, overflow=True, loss_scale=1024.0)
        writer.write(2, float("nan"))
    with LossWriter(tmp_path / "loss_rank_1.jsonl", rank=1) as writer:
        writer.write(3, 2.0)
    lines = (tmp_path / "loss_rank_1.jsonl").read_text().splitlines()
    assert json.loads(lines[0]) == {"step": 1, "epoch": 1, "rank": 1, "loss": 2.5, "overflow": True,
                                    "loss_scale": 1024.0}
    assert json.loads(lines[1])["loss"] == "nan" and len(lines) == 3
    with pytest.raises(LossFileError, match=r"loss_rank_1.jsonl:2: loss at step 2 is nan"):
        read_losses(tmp_path, rank=1)
    assert math.isnan(read_losses(tmp_path, rank=1, allow_nonfinite=True).losses[2])


# --- readers ---------------------------------------------------------------------------------------------------------

def test_csv_and_regex_logs_are_read(tmp_path):
    csv_file = _write(tmp_path / "run.csv", ["epoch,step,loss", "1,1,2.0", "1,2,1.5"])
    assert read_losses(csv_file).losses == {1: 2.0, 2: 1.5}
    log = _write(tmp_path / "train.log", ["[INFO] starting", "epoch: 1 step: 1, loss is 2.0",
                                          "noise", "epoch: 1 step: 2, loss is 1.5001"])
    pattern = r"step: (?P<step>\d+), loss is (?P<loss>[-+\d.eE]+)"
    series = read_losses(log, pattern)
    assert series.losses == {1: 2.0, 2: 1.5001} and series.lines == {1: 2, 2: 4}
    assert compare_losses(series, read_losses(csv_file)).first_parted is None


@pytest.mark.parametrize("lines, message", [
    (['{"step": 1, "loss": 2.0}', '{"step": 2, "loss": '], r"run.jsonl:2: not a JSON object"),
    (['{"step": 1, "loss": 2.0}', '{"step": 2, "value": 1.0}'],
     r"run.jsonl:2: a record needs the keys 'step' and 'loss'; found \['step', 'value'\]"),
    (['{"step": 1, "loss": "nan"}'], r"run.jsonl:1: loss at step 1 is nan"),
    (['{"step": 1, "loss": NaN}'], r"run.jsonl:1: loss at step 1 is nan"),
    (['{"step": -1, "loss": 1.0}'], r"run.jsonl:1: step=-1 is not an int >= 0"),
    (['{"step": 1, "loss": "high"}'], r"run.jsonl:1: loss='high' is not a number"),
    ([""], r"run.jsonl: holds no loss records"),
])
def test_bad_records_name_the_file_and_line(tmp_path, lines, message):
    with pytest.raises(LossFileError, match=message):
        read_losses(_write(tmp_path / "run.jsonl", lines))


def test_unknown_csv_columns_and_bad_patterns(tmp_path):
    with pytest.raises(LossFileError, match=r"run.csv:1: a CSV needs the columns 'step' and 'loss'; found "
                                            r"\['iter', 'value'\]"):
        read_losses(_write(tmp_path / "run.csv", ["iter,value", "1,2.0"]))
    log = _write(tmp_path / "train.log", ["step 1 loss 2"])
    with pytest.raises(ValueError, match=r"--pattern=.*missing: loss"):
        read_losses(log, r"step (?P<step>\d+)")
    with pytest.raises(ValueError, match=r"--pattern=.*a Python regular expression"):
        read_losses(log, r"step (?P<step>\d+")
    with pytest.raises(LossFileError, match=r"train.log: holds no loss records matching --pattern"):
        read_losses(log, r"epoch (?P<step>\d+) (?P<loss>\d+)")


def test_cli_bad_inputs_exit_2_with_one_line(tmp_path, capsys):
    a = _records(tmp_path / "a.jsonl", [2.0, 1.9, 1.8])
    b = _records(tmp_path / "b.jsonl", [2.0, 1.9])
    cases = [
        ([str(tmp_path / "missing.jsonl"), str(b)], "missing.jsonl: no such file"),
        ([str(a), str(b)], "a.jsonl:3: step 3 is not in"),
        ([str(a), str(b), "--rtol", "-1"], "rtol=-1.0 is not allowed"),
        ([str(_write(tmp_path / "bad.jsonl", ["step 1 loss 2"])), str(b)], "bad.jsonl:1: not a JSON object"),
    ]
    for args, message in cases:
        assert main(["compare-loss", *args]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and err.count("\n") == 1, err
    # --common-steps compares the overlap instead
    assert main(["compare-loss", str(a), str(b), "--common-steps"]) == 0


def test_cli_reports_errors_and_json(tmp_path, capsys):
    a = _records(tmp_path / "a.jsonl", [2.0, 1.9, 1.8, 1.7])
    b = _records(tmp_path / "b.jsonl", [2.0, 1.9005, 1.81, 1.6])
    assert main(["compare-loss", str(a), str(b), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["first_parted_step"] == 3 and out["steps_parted"] == 2
    assert out["max_abs_error"] == pytest.approx(0.1) and out["max_rel_error"] == pytest.approx(0.1 / 1.6)
    assert main(["compare-loss", str(a), str(b), "--rtol", "0.1"]) == 0
    assert "no step beyond tolerance" in capsys.readouterr().out
    assert main(["compare-loss", str(a), str(a)]) == 0
    first_differs = _records(tmp_path / "c.jsonl", [2.1, 1.9, 1.8, 1.7])
    assert main(["compare-loss", str(first_differs), str(a)]) == 1
    assert "already differs: the forward pass differs" in capsys.readouterr().out


def test_plot_writes_a_png(tmp_path, capsys):
    a = _records(tmp_path / "a.jsonl", [2.0, 1.9, 1.8])
    b = _records(tmp_path / "b.jsonl", [2.0, 1.9, 1.7])
    png = tmp_path / "out" / "loss.png"
    assert main(["compare-loss", str(a), str(b), "--plot", str(png)]) == 1
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot: {png}" in capsys.readouterr().out


def test_plot_without_matplotlib_names_the_extra(tmp_path):
    a = _records(tmp_path / "a.jsonl", [2.0, 1.9])
    proc = run_python(f"""
        import sys
        sys.modules["matplotlib"] = None     # as if it were not installed
        from msdebug_hooks.cli import main
        sys.exit(main(["compare-loss", {str(a)!r}, {str(a)!r}, "--plot", {str(tmp_path / "x.png")!r}]))
    """, check=False)
    assert proc.returncode == 2
    assert 'pip install "msdebug-hooks[plot]"' in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "x.png").exists()


def test_comparison_core_never_imports_mindspore_or_torch(tmp_path):
    a = _records(tmp_path / "a.jsonl", [2.0, 1.9])
    proc = run_python(f"""
        import sys
        import msdebug_hooks
        from msdebug_hooks import DumpComparer, LossWriter, Tolerance, compare_arrays, compare_losses, read_losses
        from msdebug_hooks.cli import main
        code = main(["compare-loss", {str(a)!r}, {str(a)!r}])
        print(code, "mindspore" in sys.modules, "torch" in sys.modules)
    """)
    assert proc.stdout.strip().splitlines()[-1] == "0 False False"


def test_loss_writer_from_a_pytorch_loop(tmp_path, capsys):
    torch = pytest.importorskip("torch", reason="the PyTorch side needs torch (test extra)")

    def train(directory, lr):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        data = torch.randn(8, 4, generator=torch.Generator().manual_seed(1))
        target = data.sum(dim=1, keepdim=True)
        with LossWriter(directory, rank=0) as losses:
            for step in range(1, 5):
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(model(data), target)
                loss.backward()
                optimizer.step()
                losses.write(step, loss, epoch=1)      # a 0-d tensor is taken as it is
        return directory

    same = train(tmp_path / "torch_a", 0.1)
    again = train(tmp_path / "torch_b", 0.1)
    other_lr = train(tmp_path / "torch_c", 0.2)
    assert main(["compare-loss", str(again), str(same)]) == 0
    assert main(["compare-loss", str(other_lr), str(same)]) == 1
    out = capsys.readouterr().out
    assert "first step beyond tolerance: 2 " in out and "steps up to 1 agree" in out
