"""The PyTorch sides of the corpus, all in one process: ``python -m corpus.torch_side PLAN.json``.

First the initial weights of every architecture the plan names (``torch.manual_seed(0)``), written to
``plan["initial"][arch]`` (the MindSpore sides convert them), then each PyTorch side of the plan. A side writes into its
directory ``capture/`` (step 1, with each layer's inputs), ``loss/loss_rank_0.jsonl``, ``initial.pth`` (its weights at
the start, in its dtype) and ``side.json`` (status, errors, seconds). When capturing fails (e.g. a dtype the recorder
cannot write), the side is trained again without the recorder so its losses and weights still exist, and ``side.json``
keeps the capture error. When the process ends it writes ``plan["pytorch_done"]`` (the MindSpore replays wait for it).
"""
from __future__ import annotations

import contextlib
import json
import sys
import time
import traceback
from pathlib import Path

from corpus.architectures import architecture, first_line
from corpus.plants import plant_weights


def write_initial_weights(plan: dict) -> None:
    import torch

    for arch, path in plan["initial"].items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        torch.save(architecture(arch).build_torch(seed=0).state_dict(), path)
    Path(plan["initial_ready"]).write_text("ok\n")


def _train(side: dict, out: Path, initial: str, plan: dict, capture: bool) -> None:
    import torch
    import torch.nn.functional as F

    from msdebug_hooks.compare import LossWriter
    from msdebug_hooks.compare.torch import TorchLayerRecorder

    arch = architecture(side["arch"])
    dtype = torch.float64 if side["dtype"] == "float64" else torch.float32
    model = arch.build_torch(seed=0)
    state = {name: value.numpy() for name, value in torch.load(initial, weights_only=True).items()}
    model.load_state_dict({name: torch.from_numpy(value) for name, value in plant_weights(state, side["plants"])
                           .items()})
    model.to(dtype)
    torch.save(model.state_dict(), out / "initial.pth")
    optimizer = torch.optim.SGD(model.parameters(), lr=plan["lr"])
    observe_eval = side["observe"] == "eval"
    recorder = TorchLayerRecorder(model, out / "capture", steps=[plan["capture_step"]],
                                  record_gradients=not observe_eval, record_inputs=True) if capture else None

    def precision():
        if side["dtype"] == "bfloat16":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def captured(step):
        return recorder.step(step) if recorder is not None else contextlib.nullcontext()

    x_eval, y_eval = arch.torch_batch(*arch.eval_batch(plan["batch"]), dtype)
    with LossWriter(out / "loss", rank=0) as losses:
        for step, (x, y) in enumerate(arch.make_batches(plan["steps"], plan["batch"]), start=1):
            x, y = arch.torch_batch(x, y, dtype)
            model.train()
            optimizer.zero_grad()
            with captured(step) if not observe_eval else contextlib.nullcontext():
                with precision():
                    logits = model(x)
                loss = F.cross_entropy(logits.to(dtype), y)
                loss.backward()
            optimizer.step()
            if not observe_eval:
                losses.write(step, loss.item())
                continue
            model.eval()
            with torch.no_grad(), captured(step):
                with precision():
                    logits = model(x_eval)
                losses.write(step, F.cross_entropy(logits.to(dtype), y_eval).item())
    if recorder is not None:
        recorder.remove()


def run_side(entry: dict, plan: dict) -> dict:
    import shutil

    import torch

    side, out = entry["side"], Path(entry["out"])
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    threads = torch.get_num_threads()
    status: dict = {"key": entry["key"], "framework": "pytorch"}
    try:
        if side["threads"]:
            torch.set_num_threads(side["threads"])
        try:
            _train(side, out, plan["initial"][side["arch"]], plan, capture=True)
        except Exception as exc:  # noqa: BLE001 - the capture failed: keep the reason, train again without it
            status["capture_error"] = first_line(exc)
            for name in ("capture", "loss"):
                shutil.rmtree(out / name, ignore_errors=True)
            _train(side, out, plan["initial"][side["arch"]], plan, capture=False)
        status["status"] = "ok"
    except Exception as exc:  # noqa: BLE001 - recorded for the report; the other sides still run
        status.update(status="failed", error=first_line(exc), traceback=traceback.format_exc())
    finally:
        torch.set_num_threads(threads)
    status["seconds"] = round(time.perf_counter() - started, 3)
    (out / "side.json").write_text(json.dumps(status, indent=1) + "\n")
    return status


def main(argv: list) -> int:
    plan = json.loads(Path(argv[0]).read_text())
    try:
        write_initial_weights(plan)
        for entry in plan["sides"]:
            if entry["side"]["framework"] == "pytorch":
                status = run_side(entry, plan)
                print(f"{entry['key']}: {status['status']} ({status['seconds']} s)", flush=True)
    finally:  # the MindSpore replays wait for PyTorch sides until this exists
        Path(plan["pytorch_done"]).write_text("done\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
