"""The real replay of the corpus: the MindSpore port's layer that compare-layers names, run on PyTorch's captured
inputs of that layer (``compare_layers(A, B, replay_a=port)``), in the MindSpore PyNative process once the PyTorch
side it is compared with has been written.

A replay entry of the plan (``runner``: one per case whose A is a PyNative port and whose B is a PyTorch side) names
the case, both side directories and the JSON file to write. The port is built again with its plants and loaded with
the weights it held when its capture was taken (``capture.ckpt``, written by ``mindspore_side`` just before the
captured pass), in the training/eval state of that pass. The file holds the finding's layer and
``LayerComparison.replay.as_dict()`` (``None`` when compare-layers names no layer: nothing to replay).
"""
from __future__ import annotations

import json
import time
import traceback
from pathlib import Path

from corpus.architectures import architecture, first_line
from corpus.plants import PortPlants

#: the port's weights at the captured pass, in its side directory
CAPTURE_WEIGHTS = "capture.ckpt"
#: in a case directory: the replay's result
REPLAY_FILE = "replay_a.json"


def _wait_for_side(side_dir: Path, done: Path, deadline: float) -> dict:
    """The side's status once written; gives up when the PyTorch process said it is done (``done``) or at
    ``deadline`` (``time.monotonic()``) without it."""
    status_file = side_dir / "side.json"
    while not status_file.exists():
        if done.exists() and not status_file.exists():
            raise RuntimeError(f"the PyTorch process ended without writing {side_dir.name}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{side_dir.name} was not written in time")
        time.sleep(0.2)
    return json.loads(status_file.read_text())


def _port_at_capture(side: dict, side_dir: Path):
    import mindspore as ms

    net = architecture(side["arch"]).build_mindspore(PortPlants(side["plants"]))
    ms.load_param_into_net(net, ms.load_checkpoint(str(side_dir / CAPTURE_WEIGHTS)), strict_load=True)
    net.set_train(side["observe"] == "train")
    return net


def run_replay(entry: dict, done: Path, deadline: float) -> dict:
    """Replay one case's named layer of the port on the reference's inputs; write and return the result. ``done``:
    the file the PyTorch process writes when it ends; ``deadline``: ``time.monotonic()`` to wait for sides until."""
    from msdebug_hooks.compare import compare_layers

    started = time.perf_counter()
    a_dir, b_dir, out = Path(entry["a_out"]), Path(entry["b_out"]), Path(entry["out"])
    result: dict = {"case": entry["case"]}
    try:
        for side_dir in (a_dir, b_dir):
            status = _wait_for_side(side_dir, done, deadline)
            if status.get("status") != "ok":
                raise RuntimeError(f"side {side_dir.name} did not run: {status.get('error')}")
        net = _port_at_capture(entry["side"], a_dir)
        comparison = compare_layers(a_dir / "capture", b_dir / "capture", replay_a=net)
        first = comparison.first_divergence
        result.update(status="ok", layer=None if first is None else first.record_a.name,
                      replay=None if comparison.replay is None else comparison.replay.as_dict())
    except Exception as exc:  # noqa: BLE001 - the report shows it; the replay never reads as a verdict
        result.update(status="failed", error=first_line(exc), traceback=traceback.format_exc())
    result["seconds"] = round(time.perf_counter() - started, 3)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    return result
