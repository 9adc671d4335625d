"""A real LeNet training under the session, driven from the real MindInsight 2.3.1 through its REST API.

The step hook below is the smallest glue between ``Model.train`` and ``DebuggerSession`` (the public
``DebuggerCallback`` builds on the same three calls). Training runs in a thread; the test plays the person in
the browser.
"""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from msdebug_hooks.debugger.graph import build_graph
from msdebug_hooks.debugger.session import Decision, DebuggerSession
from msdebug_hooks.debugger.tensors import NetworkTensors
from msdebug_hooks.debugger.transport import Transport

pytestmark = [pytest.mark.mindspore, pytest.mark.mindinsight, pytest.mark.timeout(300)]

BACKBONE = "Default/network-WithLossCell/_backbone-LeNet5"


def _step_hook(session: DebuggerSession, tensors: NetworkTensors, log: list):
    from mindspore.train import Callback

    class StepHook(Callback):
        def on_train_begin(self, run_context):
            if session.connect() and session.suspend() is Decision.EXIT:
                run_context.request_stop()

        def on_train_step_end(self, run_context):
            log.append("step")
            tensors.set_outputs(run_context.original_args().net_outputs)
            if session.step_end() is Decision.EXIT:
                run_context.request_stop()

        def on_train_end(self, run_context):
            session.finish()
            log.append("end")

    return StepHook()


def _until(ok, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, "MindInsight did not get there in time"
        time.sleep(0.1)


def test_lenet_steps_hits_views_and_terminate_through_mindinsight(mindinsight_server):
    from lenet import make_dataset, make_model

    rest = mindinsight_server.rest
    model, network = make_model(0.01)
    graph = build_graph(model.train_network)
    tensors = NetworkTensors(graph)
    session = DebuggerSession(Transport(mindinsight_server.grpc_address), graph, tensors, ms_version="2.10.0")
    log: list = []
    errors: list = []

    def train():
        try:
            model.train(1, make_dataset(num_batches=300), callbacks=[_step_hook(session, tensors, log)],
                        dataset_sink_mode=False)
        except BaseException as exc:     # surfaced by the assertions below
            errors.append(exc)

    trainer = threading.Thread(target=train, daemon=True)
    trainer.start()
    try:
        meta = rest.wait_for_state("waiting", timeout=60)["metadata"]
        assert (meta["step"], meta["backend"]) == (0, "GPU") and log == []      # initial suspension at step 0

        rest.continue_steps(2)                                                   # exactly two steps
        rest.wait_for(lambda r: r["metadata"]["step"] == 2 and r["metadata"]["state"] == "waiting", what="step 2")
        assert log == ["step", "step"]

        rest.continue_steps(-1)                                                  # run until paused
        rest.wait_for(lambda r: r["metadata"]["state"] == "running" and r["metadata"]["step"] > 4, what="running")
        rest.pause()
        paused = rest.wait_for_state("waiting")["metadata"]["step"]
        assert 4 < paused < 300 and log == ["step"] * paused                      # paused at a step end
        time.sleep(0.3)
        assert log == ["step"] * paused and rest.metadata()["step"] == paused     # and stays paused

        watchpoint = rest.create_watchpoint("weight_too_large", {"max_gt": 0.0})["id"]
        rest.continue_steps(-1)                                                  # until a hit or pause
        rest.wait_for(lambda r: r["metadata"]["step"] == paused + 1 and r["metadata"]["state"] == "waiting",
                      what="hit")
        assert log == ["step"] * (paused + 1)                                    # the hit paused the next step
        found = rest.search_watchpoint_hits()
        hit_nodes = {h["node_name"]: h for h in found["watch_point_hits"]}
        weights = dict(network.parameters_and_names())
        fc1 = hit_nodes[f"{BACKBONE}/fc1-Dense/fc1.weight"]
        ((tensor,),) = [fc1["tensors"]]
        (entry,) = tensor["watch_points"]
        assert tensor["slot"] == "0" and entry["error_list"] == []
        assert entry["id"] == watchpoint and entry["watch_condition"]["id"] == "weight_too_large"
        (param,) = [p for p in entry["watch_condition"]["params"] if p["name"] == "max_gt"]
        assert param["actual_value"] == pytest.approx(float(weights["fc1.weight"].asnumpy().max()))
        assert len(hit_nodes) == 8

        name = f"{BACKBONE}/conv2-Conv2d/conv2.weight"                        # view a weight as the UI does:
        _until(lambda: "shape" in rest.tensor_history(name)["tensor_history"][0])   # base first (ViewCMD base)
        shown = {}

        def cached() -> bool:                                                     # then the value (ViewCMD value)
            shown.update(rest.tensor_value(f"{name}:0", shape="[0, 0, :, :]")["tensor_value"])
            return shown["tensor_status"] == "cached"
        _until(cached)
        np.testing.assert_array_equal(np.asarray(shown["value"], np.float32),
                                      weights["conv2.weight"].asnumpy()[0, 0])

        rest.terminate()
        trainer.join(60)
        assert not trainer.is_alive() and not errors
        assert log == ["step"] * (paused + 1) + ["end"]                          # stopped cleanly, end hooks ran
        rest.wait_for_state("pending")
    finally:
        rest.reset()
        trainer.join(30)
        session.close()
