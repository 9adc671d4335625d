"""Issue 10 point 5: the light source in MindInsight's UI: the recommended watchpoints, activations and gradients.

When a person accepts MindInsight's "check for common anomalies?", the UI posts ``set-recommended-watch-points``;
MindInsight then creates watchpoints on weights, gradients, every tensor and the ReLU activations. With the light
source in PyNative mode (MindSpore's default) all of them are evaluated: cell outputs and weight gradients are
captured by hooks while a watchpoint needs them, and operator nodes show their real dtype and shape. In GRAPH_MODE the
light source cannot capture them: each watchpoint it cannot check is said once, by id and condition.
"""
from __future__ import annotations

import re
import time

import pytest

from mindinsight_ui import BACKBONE, at_step, hits_by_node, training_against

pytestmark = [pytest.mark.mindspore, pytest.mark.mindinsight, pytest.mark.timeout(300)]

CONV1 = f"{BACKBONE}/conv1-Conv2d/Conv2d-op1"
GRAD_CONV1 = f"Gradients/{BACKBONE}/conv1-Conv2d/GradOf_conv1.weight-op19"


def _recommend(rest) -> list[dict]:
    """What the UI does when the person accepts "check for common anomalies?", then the watchpoint list it shows."""
    rest._call("POST", rest._session("set-recommended-watch-points"), {"requestBody": {"set_recommended": True}})
    return rest._call("POST", rest._session("retrieve"), {"mode": "watchpoint"})["watch_points"]


def _history(rest, node: str, *, timeout: float = 30) -> dict:
    """The node's output as the UI's tensor history shows it, once the client has answered (or None in time)."""
    deadline = time.monotonic() + timeout
    while "dtype" not in (entry := rest.tensor_history(node)["tensor_history"][0]) and time.monotonic() < deadline:
        time.sleep(0.2)
    return entry


def test_recommended_watchpoints_all_work_with_activations_and_gradients_in_pynative(mindinsight, tmp_path):
    rest = mindinsight.rest
    with training_against(mindinsight, tmp_path, "--nan-batch", "2") as run:
        at_step(rest, run, 0)
        (conv_node,) = [n for n in rest.retrieve_node(f"{BACKBONE}/conv1-Conv2d")["graph"]["nodes"]
                        if n["name"] == CONV1]
        frames = [(f["file_path"].rsplit("/", 1)[-1], f["code_line"]) for f in conv_node["stack_info"]]
        assert ("lenet.py", "def construct(self, x):") in frames, frames      # the layer's place in the script
        recommended = {wp["id"]: wp["watch_condition"]["id"] for wp in _recommend(rest)}
        assert {"gradient_vanishing", "tensor_overflow", "activation_range"} <= set(recommended.values()), recommended
        assert _history(rest, CONV1, timeout=3).get("dtype", "DT_UNDEFINED") == "DT_UNDEFINED"   # none at step 0
        rest.continue_steps(-1)
        at_step(rest, run, 3)                                    # batch 2: the Inf input, every tensor overflows
        hits = hits_by_node(rest)
        overflow = next(i for i, c in recommended.items() if c == "tensor_overflow")
        assert overflow in hits.get("Conv2d-op1", {}) and overflow in hits.get("GradOf_conv1.weight-op19", {}), \
            sorted(hits)                                          # an activation and a gradient
        conv = _history(rest, CONV1)
        assert conv["dtype"] == "DT_FLOAT32" and conv["shape"] == [32, 6, 28, 28], conv
        gradient = _history(rest, GRAD_CONV1)
        assert gradient["dtype"] == "DT_FLOAT32" and gradient["shape"] == [6, 1, 5, 5], gradient
        rest.terminate()
        assert run.finish() == 0
    output = run.out()
    assert "cannot be checked" not in output and "refused" not in output, output[-3000:]


def test_graph_mode_names_each_watchpoint_it_cannot_check_once(mindinsight, tmp_path):
    rest = mindinsight.rest
    with training_against(mindinsight, tmp_path, "--graph-mode", "--batches", "5") as run:
        at_step(rest, run, 0)
        recommended = {wp["id"]: wp["watch_condition"]["id"] for wp in _recommend(rest)}
        rest.continue_steps(2)
        at_step(rest, run, 2)
        rest.terminate()
        assert run.finish() == 0
    warned = re.findall(r"debugger: watchpoint (\d+) \((\w+)\): \d+ of \d+ watched node\(s\) cannot be checked",
                        run.out())
    ids = [int(i) for i, _ in warned]
    assert len(ids) == len(set(ids)), warned                      # once each
    by_condition = {recommended[i] for i in ids}
    assert {"gradient_vanishing", "tensor_overflow"} <= by_condition, (recommended, warned)
    assert "weight_initialization" not in by_condition            # weights are read between steps in any mode
    assert "MS_DEBUGGER_SOURCE=dump" in run.out()
