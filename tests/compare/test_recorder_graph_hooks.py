"""A GRAPH_MODE ``LayerRecorder`` with chosen steps keeps its hooks out of the compiled graph on the steps it does
not capture (issue 34): real MindSpore 2.10 CPU, LeNet under ``Model.train``, ``steps={3, 5, 7}`` over 6 steps.

The delivery function (the one compiled hooks call back into Python) is wrapped to count its calls per recorder:
steps 1, 2, 4 and 6 make none, steps 3 and 5 one per layer call; a recorder with ``steps=None`` on a twin network
(hooks on from creation, as before) sees as many calls at every step (a compiled graph calls the hook of a shared
cell once per place at every place: more calls than records), and its step 3 holds the very records and values the
per-step recorder wrote. The train cell ends with two compiled graphs (hookless, hooked), each reused: the second
capture compiles nothing.
"""
from __future__ import annotations

import json

import pytest

from project import run_python

pytestmark = pytest.mark.mindspore

SCRIPT = """
import collections, json, sys, warnings
import numpy as np
import mindspore as ms
from mindspore import nn
from mindspore.train import Callback, Model
import msdebug_hooks.compare.mindspore_layers as ml
from msdebug_hooks.compare.layer_capture import read_capture
from lenet import make_dataset, make_lenet

ms.set_context(mode=ms.GRAPH_MODE)
CALLS = collections.Counter()
deliver = ml._deliver
def counting_deliver(recorder_id, *args):
    CALLS[recorder_id] += 1
    return deliver(recorder_id, *args)
counting_deliver.__module__ = ml.__name__   # run as Python by the compiled hooks, as the real one is
ml._deliver = counting_deliver

class CallsPerStep(Callback):
    def __init__(self, recorder):
        self.recorder, self.seen, self.per_step = recorder, 0, []
    def on_train_step_end(self, run_context):
        self.per_step.append(CALLS[self.recorder._id] - self.seen)
        self.seen = CALLS[self.recorder._id]

out = {}
for name, steps in (("per_step", {3, 5, 7}), ("every_step", None)):
    ms.set_seed(1)
    net = make_lenet()
    optimizer = nn.Momentum(net.trainable_params(), 0.01, 0.9)
    cell = nn.TrainOneStepCell(nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True,
                                                                                      reduction="mean")), optimizer)
    recorder = ml.LayerRecorder(net, sys.argv[1] + "/" + name, steps=steps)
    counter = CallsPerStep(recorder)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Model(cell).train(1, make_dataset(6, 8), callbacks=[recorder, counter], dataset_sink_mode=False)
        training_warnings = [str(w.message) for w in caught if "LayerRecorder" in str(w.message)]
        with recorder.step(7):
            pass   # captured, but the network never runs: said, not written as a clean empty step
        idle_warnings = [str(w.message) for w in caught if "LayerRecorder" in str(w.message)]
    capture = read_capture(recorder.directory)
    out[name] = {"hooks_per_step": recorder.hooks_per_step, "calls": counter.per_step, "steps": capture.steps,
                 "graphs": len(cell.compile_cache), "hooks_left": sum(len(c._forward_hook) for c in net.cells()),
                 "warnings": [training_warnings, idle_warnings[len(training_warnings):]],
                 "step3": {r.name: capture.load(r).tolist() for r in capture.step_records(3)}}
print("RESULT " + json.dumps(out))
"""


def test_graph_mode_recorder_hooks_only_the_captured_steps(tmp_path):
    proc = run_python(f"import sys; sys.argv = ['x', {str(tmp_path)!r}]\n" + SCRIPT, timeout=400)
    result = json.loads(proc.stdout.split("RESULT ", 1)[1])
    per_step, every_step = result["per_step"], result["every_step"]
    assert per_step["hooks_per_step"] and not every_step["hooks_per_step"]
    layer_calls = per_step["calls"][2]
    assert layer_calls >= 8, per_step["calls"]   # LeNet's convolutions, activations, pools, dense layers
    assert per_step["calls"] == [0, 0, layer_calls, 0, layer_calls, 0]
    assert every_step["calls"] == [layer_calls] * 6   # the counter sees hooks wherever they are compiled in
    assert per_step["steps"] == [3, 5] and every_step["steps"] == [1, 2, 3, 4, 5, 6]
    # step 3 recorded as the always-hooked recorder records it: same layers, same order, same values
    assert list(per_step["step3"]) == list(every_step["step3"]) and len(per_step["step3"]) >= 8
    assert per_step["step3"] == every_step["step3"]
    # the hookless and the hooked graph, each compiled once and reused; no hook left on the network
    assert per_step["graphs"] == 2 and every_step["graphs"] == 1
    assert per_step["hooks_left"] == 0 and every_step["hooks_left"] > 0
    # a captured step that no layer output reached is warned about (here: the network did not run in it)
    assert per_step["warnings"][0] == [] and len(per_step["warnings"][1]) == 1
    assert "step 7 is captured but no layer output reached" in per_step["warnings"][1][0]
    assert every_step["warnings"] == [[], []]   # hooks compiled in: nothing to check
