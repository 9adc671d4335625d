"""The MindSpore ``LayerRecorder`` against PyTorch, on real MindSpore 2.10 CPU and real PyTorch: the migration
example's LeNet-BN, converted PyTorch weights, GRAPH_MODE and PyNative, ``Model.train`` and a custom loop; the
migration example end to end; ``compare-weights`` between a ``.pth`` and a ``.ckpt``.

Tolerance: the default ``Tolerance`` (rtol = atol = 1e-4, cosine >= 0.9999). Measured between MindSpore 2.10 and
PyTorch 2.13 CPU on this network, the largest absolute error of any forward output is about 4e-6 and of any
parameter gradient about 3e-7 (different kernels sum in another order), so the default has a wide margin.
"""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from project import EXAMPLES, ROOT, run_python  # noqa: E402
from msdebug_hooks.compare.layers import compare_layers  # noqa: E402
from torch_training import make_lenet_bn_torch, train_and_capture  # noqa: E402

pytestmark = pytest.mark.mindspore

CAPTURE_STEP = 2


@pytest.fixture(scope="module")
def torch_reference(tmp_path_factory):
    """PyTorch LeNet-BN trained 2 steps as the MindSpore script trains it; step 2 captured (with parameters)."""
    root = tmp_path_factory.mktemp("torch_reference")
    train_and_capture(root / "capture", steps=[CAPTURE_STEP], num_steps=CAPTURE_STEP, batch_size=32,
                      record_parameters=True, before=lambda model: torch.save(model.state_dict(),
                                                                              root / "initial.pth"))
    return root


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_recorder_matches_pytorch_on_every_layer_in_both_modes(torch_reference, tmp_path, mode):
    proc = run_python(f"""
        import runpy, sys
        sys.path.insert(0, {str(EXAMPLES / "migration")!r})
        sys.argv = ["layer_capture_train.py", {mode!r}, {str(torch_reference / "initial.pth")!r}, {str(tmp_path)!r}]
        runpy.run_path({str(ROOT / "tests" / "scripts" / "layer_capture_train.py")!r}, run_name="__main__")
    """, timeout=400)
    reference = torch_reference / "capture"
    # Model.train, the recorder as a callback: forward outputs and parameters of step 2
    model = compare_layers(tmp_path / "model", reference)
    assert model.step_a == CAPTURE_STEP and model.framework_a == "mindspore"
    kinds = {pair.record_a.kind for pair in model.pairs}
    forward = [pair for pair in model.pairs if pair.record_a.kind == "forward-output"]
    assert [pair.record_a.name for pair in forward] == [pair.record_b.name for pair in forward]
    assert len(forward) == 14 and forward[1].record_a.name == "bn1" and forward[6].record_a.name == "relu#1"
    if mode == "graph":  # no hook on the optimizer can be compiled: said in a warning, and nothing half-recorded
        assert "GRADIENT-WARNING" in proc.stdout and kinds == {"forward-output", "parameter"}
        # gradients in the reference only: left out and said so, the rest compared (not counted as unmatched)
        assert model.kinds_left_out == {"parameter-gradient": "B"} and not model.unmatched_b
        assert "parameter-gradient records: only B has them" in model.format()
    else:
        assert "GRADIENT-WARNING" not in proc.stdout and kinds == {"forward-output", "parameter",
                                                                    "parameter-gradient"}
        assert not model.unmatched_a and not model.unmatched_b
    assert model.ok, model.format()
    # Model.train over TrainOneStepCell(return_grad=True): forward outputs and gradients, in both modes
    with_grads = compare_layers(tmp_path / "model_grads", reference, kinds=("forward-output", "parameter-gradient"))
    assert len(with_grads.pairs) == 28 and with_grads.ok, with_grads.format()
    # a custom loop passing value_and_grad's gradients: everything, in both modes
    loop = compare_layers(tmp_path / "loop", reference)
    assert len(loop.pairs) == 42 and not loop.unmatched_a and not loop.unmatched_b
    assert loop.ok, loop.format()
    worst = max(pair.result.max_abs_error for pair in loop.pairs)
    assert worst < 1e-4  # the documented tolerance holds with room to spare
    bn1_gamma_grad = next(p for p in loop.pairs if p.record_a.name == "bn1.gamma" and
                          p.record_a.kind == "parameter-gradient")
    assert bn1_gamma_grad.record_b.name == "bn1.weight" and bn1_gamma_grad.matched_by == "name"


def test_migration_example_finds_the_batchnorm_momentum_and_the_fix_agrees(tmp_path):
    proc = subprocess.run([sys.executable, str(EXAMPLES / "migration" / "pytorch_port.py"), "--workdir",
                           str(tmp_path)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    out = proc.stdout
    assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{proc.stderr[-3000:]}"
    steps = out.split("\n$ msdebug ")
    weights, train_loss, eval_loss, layers, fixed_layers, fixed_train, fixed_eval = steps[1:8]
    assert "18 parameters match, 0 problems" in weights and "(exit 0)" in weights
    assert "no step beyond tolerance" in train_loss  # the mistake does not show in training losses
    assert "first step beyond tolerance: 1 " in eval_loss and "the forward pass differs" in eval_loss
    assert "first divergence: bn1 (forward-output, order 1)" in layers and "(exit 1)" in layers
    conv1_row = next(line for line in layers.splitlines() if line.split()[:3] == ["0", "forward-output", "conv1"])
    assert " pass " in conv1_row  # the layer before the mistake agrees
    assert "no layer diverges" in fixed_layers and "(exit 0)" in fixed_layers
    for report in (fixed_train, fixed_eval):
        assert "no step beyond tolerance" in report and "rtol 0.001" in report
    assert "the story held" in out


def test_compare_weights_between_a_pth_and_a_ckpt(tmp_path, capsys):
    import mindspore as ms

    from msdebug_hooks.cli import main
    from msdebug_hooks.compare.naming import convert_torch_state
    from msdebug_hooks.compare.torch import load_state_dict

    model = make_lenet_bn_torch(seed=0)
    torch.save(model.state_dict(), tmp_path / "source.pth")
    ms_names = ["conv1.weight", "conv1.bias", "bn1.gamma", "bn1.beta", "bn1.moving_mean", "bn1.moving_variance",
                "conv2.weight", "conv2.bias", "bn2.gamma", "bn2.beta", "bn2.moving_mean", "bn2.moving_variance",
                "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"]
    weights = convert_torch_state(load_state_dict(tmp_path / "source.pth"), ms_names)

    def save(name, params):
        ms.save_checkpoint([{"name": k, "data": ms.Tensor(np.ascontiguousarray(v))} for k, v in params.items()]
                           + [{"name": "moments.fc1.weight", "data": ms.Tensor(np.zeros((120, 400), np.float32))}],
                           str(tmp_path / name))

    save("good.ckpt", weights)
    assert main(["compare-weights", str(tmp_path / "source.pth"), str(tmp_path / "good.ckpt")]) == 0
    out = capsys.readouterr().out
    assert "18 parameters match, 0 problems, 3 non-weight entries skipped" in out  # optimizer state is not a weight
    broken = dict(weights)
    broken["fc2.weight"] = broken["fc2.weight"].T  # a conversion that forgot Linear's [out, in] is Dense's too
    broken["bn2.moving_var"] = broken.pop("bn2.moving_variance")
    del broken["fc3.bias"]
    save("broken.ckpt", broken)
    # either order: the .ckpt first this time
    assert main(["compare-weights", str(tmp_path / "broken.ckpt"), str(tmp_path / "source.pth")]) == 1
    out = capsys.readouterr().out
    assert "TRANSPOSED: fc2.weight: transposed: B [84, 120] is A [120, 84] transposed" in out
    assert "RENAMED: bn2.moving_var [16] is not in B under its name; B has bn2.running_var [16] instead" in out
    assert "EXTRA: fc3.bias [10] float32 is in B only (not in A)" in out
