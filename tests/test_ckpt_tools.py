"""``msdebug ckpt-diff`` / ``msdebug ckpt-scan`` and the functions behind them, on checkpoints of real LeNet-5 training
(MindSpore 2.10 CPU). The commands run as ``python -m msdebug_hooks`` subprocesses, as a user would run them."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
from mindspore import nn  # noqa: E402
from mindspore.train import Model  # noqa: E402

from project import ROOT  # noqa: E402
from lenet import make_dataset, make_lenet  # noqa: E402
from msdebug_hooks.ckpt import compare_checkpoints, scan_checkpoint  # noqa: E402
from msdebug_hooks.errors import ConfigError  # noqa: E402

pytestmark = pytest.mark.mindspore  # every test here trains in this process

FC3 = {"fc3.weight", "fc3.bias"}


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    """before.ckpt / after.ckpt of a normal run, stuck.ckpt after a run whose fc3 learning rate is 0, nan.ckpt =
    after.ckpt with NaN in two elements of fc2.weight and +Inf in one of fc1.bias."""
    out = tmp_path_factory.mktemp("ckpts")
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")

    ms.set_seed(1)
    net = make_lenet()
    model = Model(net, loss_fn, nn.Momentum(net.trainable_params(), learning_rate=0.05, momentum=0.9))
    ms.save_checkpoint(model.train_network, str(out / "before.ckpt"))
    model.train(1, make_dataset(3), dataset_sink_mode=False)
    ms.save_checkpoint(model.train_network, str(out / "after.ckpt"))

    ms.set_seed(1)
    net2 = make_lenet()
    groups = [{"params": net2.fc3.trainable_params(), "lr": 0.0},
              {"params": [p for p in net2.trainable_params() if p.name not in FC3]}]
    model2 = Model(net2, loss_fn, nn.Momentum(groups, learning_rate=0.05, momentum=0.9))
    model2.train(1, make_dataset(3), dataset_sink_mode=False)
    ms.save_checkpoint(model2.train_network, str(out / "stuck.ckpt"))

    params = ms.load_checkpoint(str(out / "after.ckpt"))
    fc2 = params["fc2.weight"].asnumpy().copy()
    fc2[0, 0] = fc2[3, 7] = np.nan
    fc1b = params["fc1.bias"].asnumpy().copy()
    fc1b[5] = np.inf
    params["fc2.weight"].set_data(ms.Tensor(fc2))
    params["fc1.bias"].set_data(ms.Tensor(fc1b))
    ms.save_checkpoint([{"name": name, "data": p} for name, p in params.items()], str(out / "nan.ckpt"))

    (out / "garbage.ckpt").write_bytes(b"not a checkpoint" * 8)
    return out


def msdebug(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "msdebug_hooks", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_diff_of_a_normal_run_exit_0_and_json(ckpts):
    proc = msdebug("ckpt-diff", str(ckpts / "before.ckpt"), str(ckpts / "after.ckpt"), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["problems"] == [] and report["unchanged"] == []
    names = {p["name"] for p in report["params"]}
    assert {"conv1.weight", "fc3.bias", "moments.fc1.weight", "global_step"} <= names
    assert set(report["skipped"]) == {"learning_rate", "momentum"}  # 0-d hyper-parameters
    fc1 = next(p for p in report["params"] if p["name"] == "fc1.weight")
    before = ms.load_checkpoint(str(ckpts / "before.ckpt"))["fc1.weight"].asnumpy().astype(np.float64)
    after = ms.load_checkpoint(str(ckpts / "after.ckpt"))["fc1.weight"].asnumpy().astype(np.float64)
    assert fc1["max_abs_diff"] == pytest.approx(np.abs(after - before).max(), rel=1e-6)
    assert fc1["mean_abs_update_ratio"] == pytest.approx(
        np.abs(after - before).mean() / (np.abs(before).mean() + 1e-9), rel=1e-5)


def test_diff_names_the_parameters_that_did_not_update(ckpts):
    proc = msdebug("ckpt-diff", str(ckpts / "before.ckpt"), str(ckpts / "stuck.ckpt"))
    assert proc.returncode == 1
    problems = [line for line in proc.stderr.splitlines() if line.startswith("PROBLEM:")]
    assert sorted(problems) == ["PROBLEM: not changed: fc3.bias (allclose rtol=1e-05 atol=1e-08)",
                                "PROBLEM: not changed: fc3.weight (allclose rtol=1e-05 atol=1e-08)"]
    assert "fc3.weight" in proc.stdout and "NO" in proc.stdout


def test_diff_expect_unchanged_and_filters(ckpts):
    same = msdebug("ckpt-diff", str(ckpts / "after.ckpt"), str(ckpts / "after.ckpt"), "--expect-unchanged")
    assert same.returncode == 0, same.stderr
    fc3_only = msdebug("ckpt-diff", str(ckpts / "before.ckpt"), str(ckpts / "stuck.ckpt"), "--only", r"^fc3\.",
                       "--expect-unchanged")
    assert fc3_only.returncode == 0, fc3_only.stderr
    moved = msdebug("ckpt-diff", str(ckpts / "before.ckpt"), str(ckpts / "after.ckpt"), "--expect-unchanged")
    assert moved.returncode == 1 and "changed: fc3.weight" in moved.stderr


def test_scan_finds_injected_nan_and_inf_with_counts(ckpts):
    proc = msdebug("ckpt-scan", str(ckpts / "nan.ckpt"), "--json")
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is False
    bad = {b["name"]: (b["nan_count"], b["inf_count"], b["size"]) for b in report["bad"]}
    assert bad == {"fc2.weight": (2, 0, 84 * 120), "fc1.bias": (0, 1, 120)}
    clean = msdebug("ckpt-scan", str(ckpts / "after.ckpt"))
    assert clean.returncode == 0 and "0 with NaN/Inf" in clean.stdout


def test_diff_flags_nan_in_the_later_file(ckpts):
    report = compare_checkpoints(ckpts / "after.ckpt", ckpts / "nan.ckpt")
    assert set(report.non_finite) == {"fc2.weight", "fc1.bias"}
    assert set(report.changed) == {"fc2.weight", "fc1.bias"}
    assert any(line.startswith("NaN/Inf: fc2.weight") for line in report.problems())


def test_bad_input_exits_2_with_a_clear_message(ckpts, tmp_path):
    missing = msdebug("ckpt-scan", str(tmp_path / "nope.ckpt"))
    assert missing.returncode == 2 and "nope.ckpt" in missing.stderr and "does not exist" in missing.stderr
    garbage = msdebug("ckpt-diff", str(ckpts / "after.ckpt"), str(ckpts / "garbage.ckpt"))
    assert garbage.returncode == 2 and "checkpoint=" in garbage.stderr and "garbage.ckpt" in garbage.stderr
    bad_regex = msdebug("ckpt-diff", str(ckpts / "after.ckpt"), str(ckpts / "after.ckpt"), "--only", "fc(")
    assert bad_regex.returncode == 2 and "only='fc('" in bad_regex.stderr
    bad_rtol = msdebug("ckpt-diff", str(ckpts / "after.ckpt"), str(ckpts / "after.ckpt"), "--rtol", "-1")
    assert bad_rtol.returncode == 2 and "rtol=-1.0 is not allowed" in bad_rtol.stderr


def test_names_only_in_one_file_and_shape_mismatch(tmp_path):
    a, b = tmp_path / "a.ckpt", tmp_path / "b.ckpt"
    ms.save_checkpoint([{"name": "w", "data": ms.Tensor(np.ones((2, 3), np.float32))},
                        {"name": "gone", "data": ms.Tensor(np.ones(4, np.float32))}], str(a))
    ms.save_checkpoint([{"name": "w", "data": ms.Tensor(np.ones((3, 2), np.float32))},
                        {"name": "new", "data": ms.Tensor(np.ones(4, np.float32))}], str(b))
    report = compare_checkpoints(a, b)
    assert report.only_in_a == ["gone"] and report.only_in_b == ["new"]
    assert [(m.name, m.a_shape, m.b_shape) for m in report.mismatched] == [("w", (2, 3), (3, 2))]
    assert report.params == [] and len(report.problems()) == 3
    with pytest.raises(ConfigError, match="max_update_ratio"):
        compare_checkpoints(a, b, max_update_ratio=0)


def test_scan_function_on_a_clean_checkpoint(ckpts):
    report = scan_checkpoint(ckpts / "before.ckpt")
    assert report.ok and report.parameters == 19
