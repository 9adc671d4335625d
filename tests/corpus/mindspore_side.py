"""The MindSpore sides of the corpus, one process per execution mode:
``python -m corpus.mindspore_side PLAN.json pynative|graph``.

Each side builds its architecture's port with the case's plants, loads the PyTorch initial weights through
``convert_torch_state`` (after the weight plants: what a wrong converter would load; a renamed port gets the
conversion mapping its renames imply) and ``load_param_into_net``, saves them as ``initial.ckpt``, and trains with
plain SGD on the same batches as the PyTorch side:

* ``pynative``: a custom loop, ``value_and_grad`` and ``LayerRecorder.record_gradients`` (forward outputs and
  parameter gradients of step 1; an ``observe="eval"`` side captures the eval pass after step 1 instead), with each
  layer's inputs (``record_inputs=True``); the weights of the captured pass are saved as ``capture.ckpt``, and
  after its sides this process runs the plan's replays (``corpus.port_replay``);
* ``graph``: ``Model(net, loss, optimizer).train`` with ``LayerRecorder`` and ``LossRecorder`` as callbacks, as a
  user trains by default (the recorder then captures no gradients: MindSpore cannot compile a hook on the
  optimizer).
"""
from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

from corpus.architectures import architecture, first_line
from corpus.plants import PortPlants, plant_weights, reference_name
from corpus.port_replay import CAPTURE_WEIGHTS, run_replay

#: how long the replays wait, together, for the PyTorch sides they compare with
REPLAY_WAIT_S = 600


def _load_port(side: dict, initial: str, out: Path):
    import mindspore as ms

    from msdebug_hooks.compare import convert_torch_state
    from msdebug_hooks.compare.naming import MINDSPORE, canonical_name
    from msdebug_hooks.compare.torch import load_state_dict

    arch = architecture(side["arch"])
    plants = PortPlants(side["plants"])
    net = arch.build_mindspore(plants)
    plants.check_all_read()
    shapes = {param.name: tuple(param.shape) for param in net.get_parameters()}  # Conv1d: [o, i, 1, k]
    state = plant_weights(load_state_dict(initial), side["plants"])
    mapping = None
    if side["plants"].get("renamed"):  # the conversion of a renamed port: reference name -> port name
        mapping = {reference_name(canonical_name(name, MINDSPORE), arch.RENAMES): name for name in shapes}
    weights = convert_torch_state(state, shapes, mapping)
    ms.load_param_into_net(net, {name: ms.Parameter(ms.Tensor(value), name=name) for name, value in weights.items()},
                           strict_load=True)
    ms.save_checkpoint(net, str(out / "initial.ckpt"))
    return arch, net


def _train_pynative(side: dict, out: Path, plan: dict) -> None:
    import mindspore as ms
    from mindspore import nn

    from msdebug_hooks.compare import LossWriter
    from msdebug_hooks.compare.mindspore_layers import LayerRecorder

    arch, net = _load_port(side, plan["initial"][side["arch"]], out)
    recorder = LayerRecorder(net, out / "capture", steps=[plan["capture_step"]], record_inputs=True)
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.SGD(net.trainable_params(), learning_rate=plan["lr"])
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, optimizer.parameters)
    observe_eval = side["observe"] == "eval"
    x_eval, y_eval = arch.mindspore_batch(*arch.eval_batch(plan["batch"]))
    with LossWriter(out / "loss", rank=0) as losses:
        for step, (x, y) in enumerate(arch.make_batches(plan["steps"], plan["batch"]), start=1):
            net.set_train(True)
            if observe_eval:
                loss, grads = grad_fn(*arch.mindspore_batch(x, y))
                optimizer(grads)
                net.set_train(False)
                if step == plan["capture_step"]:
                    ms.save_checkpoint(net, str(out / CAPTURE_WEIGHTS))
                with recorder.step(step):
                    losses.write(step, float(loss_fn(net(x_eval), y_eval).asnumpy()))
                continue
            if step == plan["capture_step"]:
                ms.save_checkpoint(net, str(out / CAPTURE_WEIGHTS))
            with recorder.step(step):
                loss, grads = grad_fn(*arch.mindspore_batch(x, y))
                recorder.record_gradients(grads, optimizer.parameters)
            optimizer(grads)
            losses.write(step, float(loss.asnumpy()))
    recorder.remove()


def _train_graph(side: dict, out: Path, plan: dict) -> None:
    import mindspore.dataset as ds
    from mindspore import nn
    from mindspore.train import Model

    from msdebug_hooks.compare import LossRecorder
    from msdebug_hooks.compare.mindspore_layers import LayerRecorder

    if side["observe"] != "train":
        raise ValueError("graph sides observe the training pass only (Model.train)")
    arch, net = _load_port(side, plan["initial"][side["arch"]], out)
    recorder = LayerRecorder(net, out / "capture", steps=[plan["capture_step"]])
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.SGD(net.trainable_params(), learning_rate=plan["lr"])
    dataset = ds.GeneratorDataset(arch.make_batches(plan["steps"], plan["batch"]), column_names=["x", "y"],
                                  shuffle=False)
    Model(net, loss_fn, optimizer).train(1, dataset, callbacks=[recorder, LossRecorder(out / "loss", rank=0)],
                                         dataset_sink_mode=False)


def run_side(entry: dict, plan: dict, mode: str) -> dict:
    side, out = entry["side"], Path(entry["out"])
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    status: dict = {"key": entry["key"], "framework": "mindspore", "mode": mode}
    try:
        (_train_graph if mode == "graph" else _train_pynative)(side, out, plan)
        status["status"] = "ok"
    except Exception as exc:  # noqa: BLE001 - recorded for the report; the other sides still run
        status.update(status="failed", error=first_line(exc), traceback=traceback.format_exc())
    status["seconds"] = round(time.perf_counter() - started, 3)
    (out / "side.json").write_text(json.dumps(status, indent=1) + "\n")
    return status


def main(argv: list) -> int:
    import warnings

    import mindspore as ms

    plan, mode = json.loads(Path(argv[0]).read_text()), argv[1]
    ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
    ms.set_seed(0)  # the one random side (dropout left active) draws the same masks every run
    warnings.simplefilter("ignore", RuntimeWarning)  # the recorder's "no gradients under Model.train" (expected)
    for entry in plan["sides"]:
        if entry["side"]["framework"] == "mindspore" and entry["side"]["mode"] == mode:
            status = run_side(entry, plan, mode)
            print(f"{entry['key']}: {status['status']} ({status['seconds']} s)", flush=True)
    if mode == "pynative":  # the PyTorch sides run beside this process: each replay waits for its reference
        deadline = time.monotonic() + REPLAY_WAIT_S
        for entry in plan.get("replays", ()):
            result = run_replay(entry, Path(plan["pytorch_done"]), deadline)
            print(f"replay {entry['case']}: {result['status']} ({result['seconds']} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
