"""Loss records and compare-loss: real MindSpore runs that part at a known step, identical runs, and every kind of
bad input with a message naming the file and line."""
from __future__ import annotations

import json
import math

import pytest

from compare_fixtures import CHANGE_AFTER
from project import run_python
from msdebug_hooks.cli import main
from msdebug_hooks.compare import LossWriter, compare_losses, read_losses
from msdebug_hooks.compare.loss import LossFileError, LossSeries
from msdebug_hooks.compare.loss_diff import DEFAULT_FORWARD_RTOL, FLOAT32_FORWARD_NOISE
from msdebug_hooks.errors import ConfigError


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _records(path, losses, start=1):
    return _write(path, [json.dumps({"step": start + i, "loss": v}) for i, v in enumerate(losses)])


def _series(name, losses, start=1):
    steps = range(start, start + len(losses))
    return LossSeries(name, dict(zip(steps, losses)), {step: i + 1 for i, step in enumerate(steps)})


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


MLP_SIZES = (16, 32, 4)   # inputs, hidden units (GELU), classes


def _mlp_case(path, steps=4, batch=32, seed=2):
    """Initial weights and batches of a 2-layer MLP, shared by both frameworks. Inputs of scale 3 put GELU's inputs
    where its tanh approximation errs most (up to 4.7e-4 at |x| = 2.7)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n_in, hidden, n_out = MLP_SIZES
    case = {"w1": rng.standard_normal((hidden, n_in)) / np.sqrt(n_in), "b1": 0.1 * rng.standard_normal(hidden),
            "w2": rng.standard_normal((n_out, hidden)) / np.sqrt(hidden), "b2": 0.1 * rng.standard_normal(n_out),
            "xs": 3.0 * rng.standard_normal((steps, batch, n_in))}
    case = {name: value.astype(np.float32) for name, value in case.items()}
    case["ys"] = rng.integers(0, n_out, (steps, batch)).astype(np.int32)
    np.savez(path, **case)
    return case


def _train_mlp_torch(case, directory):
    torch = pytest.importorskip("torch", reason="the PyTorch side needs torch (test extra)")
    n_in, hidden, n_out = MLP_SIZES
    model = torch.nn.Sequential(torch.nn.Linear(n_in, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, n_out))
    with torch.no_grad():
        for parameter, name in zip(model.parameters(), ("w1", "b1", "w2", "b2")):
            parameter.copy_(torch.from_numpy(case[name]))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with LossWriter(directory, rank=0) as losses:
        for step, (x, y) in enumerate(zip(case["xs"], case["ys"]), start=1):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y).long())
            loss.backward()
            optimizer.step()
            losses.write(step, loss.item())
    return directory


@pytest.mark.mindspore
def test_forward_bug_below_rtol_parts_at_step_1_against_pytorch(tmp_path, capsys):
    """MindSpore ports of a PyTorch MLP, same weights and batches: GELU(approximate=False) is the correct port;
    MindSpore's default GELU (tanh approximation) against PyTorch's exact one is a forward bug whose step-1 loss
    difference stays under the cross-framework rtol 1e-3."""
    case = _mlp_case(tmp_path / "case.npz")
    reference = _train_mlp_torch(case, tmp_path / "torch")
    run_python(f"""
        import mindspore as ms, numpy as np
        from mindspore import nn
        from msdebug_hooks.compare import LossWriter
        case = np.load({str(tmp_path / "case.npz")!r})
        n_in, hidden, n_out = {MLP_SIZES!r}
        for name, approximate in (("exact", False), ("tanh", True)):
            w1, b1, w2, b2 = (ms.Tensor(case[key]) for key in ("w1", "b1", "w2", "b2"))
            net = nn.SequentialCell([nn.Dense(n_in, hidden, weight_init=w1, bias_init=b1),
                                     nn.GELU(approximate=approximate),
                                     nn.Dense(hidden, n_out, weight_init=w2, bias_init=b2)])
            train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.CrossEntropyLoss()),
                                        nn.SGD(net.trainable_params(), learning_rate=0.1))
            with LossWriter({str(tmp_path)!r} + "/" + name, rank=0) as losses:
                for step, (x, y) in enumerate(zip(case["xs"], case["ys"]), start=1):
                    losses.write(step, float(train(ms.Tensor(x), ms.Tensor(y)).asnumpy()))
    """)
    exact = compare_losses(read_losses(tmp_path / "exact"), read_losses(reference))
    assert exact.first_parted is None and exact.forward_check.rel_error < FLOAT32_FORWARD_NOISE
    assert main(["compare-loss", str(tmp_path / "exact"), str(reference)]) == 0
    assert "forward-rtol 1e-06: agrees" in capsys.readouterr().out

    buggy = compare_losses(read_losses(tmp_path / "tanh"), read_losses(reference))
    step_1 = buggy.steps[0]
    assert DEFAULT_FORWARD_RTOL < step_1.rel_error < buggy.rtol, step_1   # hidden under rtol, far above the noise
    assert buggy.first_parted is step_1 and step_1.forward
    # under one tolerance for every step, step 1 would not part (and the parting, if any, would read as backward)
    old = compare_losses(read_losses(tmp_path / "tanh"), read_losses(reference), forward_rtol=buggy.rtol)
    assert old.first_parted is None or old.first_parted.step > 1
    assert main(["compare-loss", str(tmp_path / "tanh"), str(reference)]) == 1
    out = capsys.readouterr().out
    assert "first step beyond tolerance: 1 " in out and "a pure forward comparison" in out
    assert "below the cross-framework rtol 0.001" in out and "the forward pass differs" in out


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
    out = capsys.readouterr().out
    assert "5.0e-2 relative, 50,000x float32 forward noise" in out and "the forward pass differs" in out


# --- step 1, the forward comparison --------------------------------------------------------------------------------

REFERENCE = [2.0, 1.9, 1.8, 1.7]


def _shifted(rel_at_step_1, later=REFERENCE[1:]):
    return [REFERENCE[0] * (1 + rel_at_step_1), *later]


def test_step_1_below_rtol_but_beyond_forward_noise_parts_as_a_forward_difference():
    # the figures: forward bugs at 6e-4 and 8e-5 relative, under the cross-framework rtol 1e-3
    for rel, multiple in ((6e-4, "600x"), (8e-5, "80x")):
        result = compare_losses(_series("a", _shifted(rel)), _series("b", REFERENCE))
        first = result.first_parted
        assert first.step == 1 and first.forward and first.rel_error == pytest.approx(rel)
        assert first.rel_error < result.rtol and result.parted_count == 1 and result.forward_step == 1
        assert result.forward_noise_multiple == pytest.approx(rel / FLOAT32_FORWARD_NOISE)
        reading = result.reading()
        assert reading.startswith("step 1 ran the same weights on the same batch, a pure forward comparison, and "
                                  f"differs by {rel:.1e}".replace("e-0", "e-")), reading
        assert f"{multiple} float32 forward noise (at most about 1e-6)" in reading
        assert "below the cross-framework rtol 0.001 but beyond forward-rtol 1e-06" in reading
        assert "the forward pass differs" in reading and "backward" not in reading
        assert "bfloat16 1e-4..1e-3" in reading            # how to tell mixed precision from a bug
    # beyond rtol too: the same reading without "below"
    result = compare_losses(_series("a", _shifted(5e-3)), _series("b", REFERENCE))
    assert "beyond forward-rtol 1e-06 and rtol 0.001" in result.reading()


def test_step_1_within_forward_noise_sends_a_later_parting_to_the_backward_pass():
    # a correct port's step 1 (4e-7 relative), then a parting at step 3
    a = _series("a", [REFERENCE[0] * (1 + 4e-7), 1.9, 1.85, 1.7])
    result = compare_losses(a, _series("b", REFERENCE))
    assert not result.steps[0].parted and result.steps[0].forward and result.first_parted.step == 3
    reading = result.reading()
    assert reading.startswith("steps up to 2 agree, step 3 differs: step 1 differs by 4.0e-7 relative, within "
                              "float32 forward noise"), reading
    assert "so the forward pass agreed on the same weights; look at the backward pass and the weight update of " \
           "step 2" in reading
    # within the noise: agrees, and the size is said
    agree = compare_losses(_series("a", _shifted(5e-7)), _series("b", REFERENCE))
    assert agree.first_parted is None
    assert agree.reading().endswith("step 1 differs by 5.0e-7 relative, within float32 forward noise (at most about "
                                    "1e-6): the forward pass agrees")
    bit_equal = compare_losses(_series("a", REFERENCE), _series("b", REFERENCE))
    assert bit_equal.reading().endswith("step 1 is bit-equal in both runs: the forward pass agrees")


def test_files_that_start_later_are_judged_by_rtol_alone():
    # a resumed run: step 5 is not a forward comparison on the same weights, 6e-4 is within rtol there
    resumed = compare_losses(_series("a", _shifted(6e-4), start=5), _series("b", REFERENCE, start=5))
    assert resumed.forward_step is None and resumed.forward_check is None and resumed.first_parted is None
    assert not any(s.forward for s in resumed.steps) and "forward" not in resumed.reading()
    assert resumed.as_dict()["forward_parted"] is None
    later = compare_losses(_series("a", [2.0, 1.9, 1.85, 1.7], start=5), _series("b", REFERENCE, start=5))
    assert "the forward pass was checked only to rtol 0.001" in later.reading()
    first = compare_losses(_series("a", _shifted(5e-3), start=5), _series("b", REFERENCE, start=5))
    assert first.first_parted.step == 5 and not first.first_parted.forward
    assert "judged by rtol, not as a pure forward comparison" in first.reading()
    # --common-steps from a run that starts later: the overlap does not begin at both runs' first step
    overlap = compare_losses(_series("a", REFERENCE[1:], start=2), _series("b", REFERENCE), common_steps=True)
    assert overlap.forward_step is None
    # 0-based logs: step 0 is the first step
    zero = compare_losses(_series("a", _shifted(6e-4), start=0), _series("b", REFERENCE, start=0))
    assert zero.forward_step == 0 and zero.first_parted.step == 0 and zero.first_parted.forward


def test_forward_rtol_is_checked_and_can_restore_one_tolerance():
    a, b = _series("a", _shifted(6e-4)), _series("b", REFERENCE)
    assert DEFAULT_FORWARD_RTOL == 1e-6
    assert compare_losses(a, b, forward_rtol=1e-3).first_parted is None     # the old single tolerance
    for bad in (-1e-5, math.nan, "1e-5", True):
        with pytest.raises(ConfigError, match=r"forward_rtol=.* is not allowed: a finite number >= 0"):
            compare_losses(a, b, forward_rtol=bad)
    nonfinite = compare_losses(_series("a", [math.nan, *REFERENCE[1:]]), b)
    assert nonfinite.first_parted.forward and "has a loss that is finite in one run only" in nonfinite.reading()


def test_cli_prints_the_forward_check_and_exits_1(tmp_path, capsys):
    b = _records(tmp_path / "b.jsonl", REFERENCE)
    a = _records(tmp_path / "a.jsonl", _shifted(6e-4))
    assert main(["compare-loss", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert ("forward check (step 1: same weights, same batch): step 1 differs by 6.0e-4 relative, 600x float32 "
            "forward noise (at most about 1e-6); correct float32 ports measure 1e-7..5e-7; forward-rtol 1e-06: "
            "parts") in out
    assert "first step beyond tolerance: 1 " in out and "reading: step 1 ran the same weights" in out
    assert main(["compare-loss", str(a), str(b), "--forward-rtol", "1e-3"]) == 0
    assert "forward-rtol 0.001: agrees" in capsys.readouterr().out
    assert main(["compare-loss", str(a), str(b), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["first_parted_step"] == 1 and out["first_parted"]["forward"] is True
    assert out["forward_step"] == 1 and out["forward_parted"] is True and out["forward_rtol"] == 1e-6
    assert out["forward_rel_error"] == pytest.approx(6e-4) and out["forward_noise_multiple"] == pytest.approx(600)
    resumed = _records(tmp_path / "r.jsonl", _shifted(6e-4), start=5)
    assert main(["compare-loss", str(resumed), str(_records(tmp_path / "rb.jsonl", REFERENCE, start=5))]) == 0
    assert "no forward check: the steps compared start at 5" in capsys.readouterr().out
    assert main(["compare-loss", str(a), str(b), "--forward-rtol", "-1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "forward_rtol=-1.0 is not allowed: a finite number >= 0" in err


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
