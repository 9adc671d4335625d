"""A PyTorch model ported to MindSpore, one porting mistake, and the comparison workflow that finds it.

The model: LeNet-5 with BatchNorm (``lenet_bn_torch.py``, ported as ``lenet_bn_mindspore.py``). The mistake:
PyTorch's ``BatchNorm2d(momentum=0.1)`` copied as MindSpore's ``momentum=0.1``. The two mean opposite things
(PyTorch: weight of the new batch; MindSpore: weight of the old running value), so the port's running statistics
follow each batch instead of averaging. Training losses do not show it (in training BatchNorm normalizes with the
batch's own statistics); the loss of the model in eval mode does, from the first step on: the eval pass after step 1
already uses the running statistics step 1 updated.

The workflow, as MindSpore's docs describe it for a port:

1. same initial weights: convert the PyTorch weights through the naming map, check them with ``compare-weights``;
2. same data, no randomness; record both runs' per-step losses (training, and eval mode after each step);
3. ``compare-loss`` names the first step that parts (step 1 -> the forward pass);
4. rerun both, capturing every layer's output at that step (``LayerRecorder`` / ``TorchLayerRecorder``), and
   ``compare-layers`` names the first layer that diverges (``bn1``);
5. fix it (``momentum=0.9``): the losses agree within 1e-3.

Run: ``python examples/migration/pytorch_port.py [--workdir DIR] [--steps 6] [--pynative]``. Exit 0 when the story
held.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from lenet import synthetic_batches  # noqa: E402
from echo_msdebug import msdebug  # noqa: E402
from lenet_bn_mindspore import BN_MOMENTUM  # noqa: E402

MISTAKEN_MOMENTUM = 0.1  # PyTorch's value, copied without translating it
LEARNING_RATE = 0.1  # large enough that the eval loss after one step already shows the mistake
BATCH_SIZE = 32


def eval_batch():
    """A fixed batch the model is evaluated on after every step (not a training batch)."""
    return next(iter(synthetic_batches(1, BATCH_SIZE, seed=123)))


def train_torch(workdir: Path, steps: int, capture_step: int | None = None) -> Path:
    """Train the reference model; write losses to ``workdir/{train,eval}`` and, if asked, capture the eval pass
    of ``capture_step`` into ``workdir/capture``. Saves the initial weights as ``workdir/initial.pth``."""
    import torch

    from lenet_bn_torch import make_lenet_bn_torch
    from msdebug_hooks.compare.loss import LossWriter
    from msdebug_hooks.compare.torch import TorchLayerRecorder

    torch.use_deterministic_algorithms(True)
    model = make_lenet_bn_torch(seed=0)
    torch.save(model.state_dict(), workdir / "initial.pth")
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    recorder = TorchLayerRecorder(model, workdir / "capture", steps=[capture_step] if capture_step else [],
                                  record_gradients=False)  # the captured pass is the eval pass: no backward
    x_eval, y_eval = (torch.from_numpy(a) for a in eval_batch())
    with LossWriter(workdir / "train", rank=0) as train_losses, LossWriter(workdir / "eval", rank=0) as eval_losses:
        for step, (x, y) in enumerate(synthetic_batches(steps, BATCH_SIZE), start=1):
            model.train()
            optimizer.zero_grad()
            loss = loss_fn(model(torch.from_numpy(x)), torch.from_numpy(y).long())
            loss.backward()
            optimizer.step()
            train_losses.write(step, loss.item())
            model.eval()
            with torch.no_grad(), recorder.step(step):
                eval_losses.write(step, loss_fn(model(x_eval), y_eval.long()).item())
    return workdir


def train_mindspore(workdir: Path, steps: int, torch_weights: Path, *, bn_momentum: float,
                    capture_step: int | None = None) -> Path:
    """The port, trained like :func:`train_torch` from the converted PyTorch weights (saved as
    ``workdir/initial.ckpt``)."""
    import mindspore as ms
    from mindspore import nn

    from lenet_bn_mindspore import make_lenet_bn
    from msdebug_hooks.compare.loss import LossWriter
    from msdebug_hooks.compare.mindspore_layers import LayerRecorder
    from msdebug_hooks.compare.naming import convert_torch_state
    from msdebug_hooks.compare.torch import load_state_dict

    net = make_lenet_bn(bn_momentum)
    weights = convert_torch_state(load_state_dict(torch_weights), [p.name for p in net.get_parameters()])
    ms.load_param_into_net(net, {name: ms.Parameter(ms.Tensor(value), name=name) for name, value in weights.items()},
                           strict_load=True)
    ms.save_checkpoint(net, str(workdir / "initial.ckpt"))
    recorder = LayerRecorder(net, workdir / "capture", steps=[capture_step] if capture_step else [])
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    train_step = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn),
                                     nn.Momentum(net.trainable_params(), LEARNING_RATE, 0.9))
    evaluate = nn.WithLossCell(net, loss_fn)
    x_eval, y_eval = (ms.Tensor(a) for a in eval_batch())
    with LossWriter(workdir / "train", rank=0) as train_losses, LossWriter(workdir / "eval", rank=0) as eval_losses:
        for step, (x, y) in enumerate(synthetic_batches(steps, BATCH_SIZE), start=1):
            train_step.set_train(True)
            train_losses.write(step, float(train_step(ms.Tensor(x), ms.Tensor(y)).asnumpy()))
            evaluate.set_train(False)
            with recorder.step(step):
                eval_losses.write(step, float(evaluate(x_eval, y_eval).asnumpy()))
    recorder.remove()
    return workdir


def first_parted_step(run_a: Path, run_b: Path) -> int | None:
    from msdebug_hooks.compare.loss import read_losses
    from msdebug_hooks.compare.loss_diff import compare_losses

    first = compare_losses(read_losses(run_a / "loss_rank_0.jsonl"), read_losses(run_b / "loss_rank_0.jsonl")
                           ).first_parted
    return first.step if first else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None, help="where runs go (default: a temporary directory)")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--pynative", action="store_true", help="run MindSpore in PyNative mode (default GRAPH_MODE)")
    args = parser.parse_args(argv)
    import mindspore as ms

    ms.set_context(mode=ms.PYNATIVE_MODE if args.pynative else ms.GRAPH_MODE)
    root = args.workdir or Path(tempfile.mkdtemp(prefix="pytorch_port_"))
    runs = {name: root / name for name in ("torch", "port", "torch_capture", "port_capture", "port_fixed")}
    for path in runs.values():  # each run starts empty (loss records append; captures refuse to overwrite)
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)

    print("1. Same initial weights: PyTorch's, converted through the naming map")
    train_torch(runs["torch"], args.steps)
    train_mindspore(runs["port"], args.steps, runs["torch"] / "initial.pth", bn_momentum=MISTAKEN_MOMENTUM)
    weights_ok = msdebug("compare-weights", str(runs["torch"] / "initial.pth"), str(runs["port"] / "initial.ckpt"))

    print("\n2. Same data, losses of both runs: training losses, then eval-mode losses after each step")
    train_agree = msdebug("compare-loss", str(runs["port"] / "train"), str(runs["torch"] / "train"))
    msdebug("compare-loss", str(runs["port"] / "eval"), str(runs["torch"] / "eval"))
    step = first_parted_step(runs["port"] / "eval", runs["torch"] / "eval")
    if step is None:
        print("the eval losses did not part: nothing to look for")
        return 1

    print(f"\n3. Rerun both, capturing every layer's output in the eval pass of step {step}")
    train_torch(runs["torch_capture"], step, capture_step=step)
    train_mindspore(runs["port_capture"], step, runs["torch"] / "initial.pth", bn_momentum=MISTAKEN_MOMENTUM,
                    capture_step=step)
    layers_code = msdebug("compare-layers", str(runs["port_capture"] / "capture"),
                          str(runs["torch_capture"] / "capture"), "--step", str(step))
    from msdebug_hooks.compare.layers import compare_layers

    first = compare_layers(runs["port_capture"] / "capture", runs["torch_capture"] / "capture",
                           step_a=step).first_divergence
    print(f"\n=> the first diverging layer is {first.record_a.name if first else None!r}: its running statistics "
          f"differ. PyTorch's BatchNorm momentum={MISTAKEN_MOMENTUM} is MindSpore's momentum="
          f"{1 - MISTAKEN_MOMENTUM:g} (1 - momentum)")

    print(f"\n4. The fix: bn_momentum={BN_MOMENTUM}; every layer and every loss agree")
    train_mindspore(runs["port_fixed"], args.steps, runs["torch"] / "initial.pth", bn_momentum=BN_MOMENTUM,
                    capture_step=step)
    fixed_layers = msdebug("compare-layers", str(runs["port_fixed"] / "capture"),
                           str(runs["torch_capture"] / "capture"), "--step", str(step))
    fixed_train = msdebug("compare-loss", str(runs["port_fixed"] / "train"), str(runs["torch"] / "train"))
    fixed_eval = msdebug("compare-loss", str(runs["port_fixed"] / "eval"), str(runs["torch"] / "eval"))
    held = (weights_ok == 0 and train_agree == 0 and step == 1 and layers_code == 1 and first is not None
            and first.record_a.name == "bn1" and fixed_layers == 0 and fixed_train == 0 and fixed_eval == 0)
    print(f"\nruns in {root}; the story {'held' if held else 'did NOT hold'}")
    return 0 if held else 1


if __name__ == "__main__":
    os.environ.setdefault("GLOG_v", "3")
    sys.exit(main())
