"""Issue 5 acceptance: an unmodified training script, started with only the debugger variables, driven from the real
MindInsight 2.3.1 through the REST calls its browser UI makes.

The script (tests/scripts/plain_lenet_train.py) never mentions msdebug. It is started the way an installed package
starts it: ``site.addsitedir`` on a directory holding a copy of the shipped ``msdebug_hooks_autoattach.pth``
processes that one line exactly as ``site.py`` does for site-packages at start-up (the dev venv is an editable
install, which carries no ``.pth``). One test uses ``msdebug run`` instead. The script logs each step and, in its own
end hook, saves the weights; the tests read both. Every training process is killed in ``finally``.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

from mindinsight_ui import BACKBONE, at_step, hits_by_node, training_against, walk

pytestmark = [pytest.mark.mindspore, pytest.mark.mindinsight, pytest.mark.timeout(240)]

WEIGHTS = ["conv1.weight", "conv2.weight", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight",
           "fc3.bias"]


def _weights_listed(rest) -> list[str]:
    return sorted(n["name"] for n in walk(rest.search("", node_category="weight")["nodes"])
                  if n["type"] == "Parameter")


def _actual(entry: dict, name: str) -> float:
    (param,) = [p for p in entry["watch_condition"]["params"] if p["name"] == name]
    return param["actual_value"]



def test_env_started_script_shows_graph_steps_pauses_and_terminates_cleanly(mindinsight, tmp_path):
    rest = mindinsight.rest
    with training_against(mindinsight, tmp_path, "--batches", "3000") as run:
        meta = at_step(rest, run, 0)                                               # initial suspension
        assert (meta["backend"], meta["debugger_version"]["ms"]) == ("GPU", "2.10.0") and run.steps() == 0
        assert _weights_listed(rest) == sorted(f"{BACKBONE}/{w.split('.')[0]}-{'Conv2d' if 'conv' in w else 'Dense'}/"
                                               f"{w}" for w in WEIGHTS)

        rest.continue_steps(3)                                                 # exactly three steps
        at_step(rest, run, 3)
        time.sleep(0.5)
        assert run.steps() == 2       # the script's own step-end hooks run after the debugger's pause (it goes first)

        rest.continue_steps(-1)                                                # run until paused
        rest.wait_for(lambda r: r["metadata"]["state"] == "running" and r["metadata"]["step"] > 6, what="running")
        rest.pause()
        paused = rest.wait_for_state("waiting")["metadata"]["step"]
        time.sleep(0.5)
        assert 6 < paused < 3000 and run.steps() + 1 == paused == rest.metadata()["step"]   # stopped at a step end

        rest.terminate()
        assert run.finish() == 0
        assert run.lines()[-1] == "end" and run.steps() == paused              # end hook ran, no extra step
        assert "training finished" in run.out()
        rest.wait_for_state("pending")


def test_weight_watchpoint_hits_rechecks_and_views_a_chunked_weight(mindinsight, tmp_path):
    rest = mindinsight.rest
    fc1 = f"{BACKBONE}/fc1-Dense/fc1.weight"
    with training_against(mindinsight, tmp_path, "--width", "2700") as run:    # fc1.weight: 2700x400 f32, 4.3 MB
        at_step(rest, run, 0)
        large = rest.create_watchpoint("weight_too_large", {"max_gt": 0.0})["id"]
        rest.continue_steps(-1)                                                # until a hit
        at_step(rest, run, 1)
        assert run.steps() == 0                                   # the hit paused the first step, before StepLog
        hits = hits_by_node(rest)
        assert sorted(hits) == sorted(WEIGHTS) and all(set(h) == {large} for h in hits.values())
        entry = hits["fc1.weight"][large]
        assert entry["watch_condition"]["id"] == "weight_too_large" and entry["error_list"] == []
        top_rows = rest.viewed_value(f"{fc1}:0", "[0:2, :]")
        last_row = rest.viewed_value(f"{fc1}:0", "[2699, 380:400]")

        small = rest.create_watchpoint("weight_too_small", {"max_lt": 1e6})["id"]
        assert rest.metadata()["enable_recheck"]
        rest.recheck()                                                         # re-evaluate at the same step
        rest.wait_for(lambda r: small in hits_by_node(rest).get("fc1.weight", {}), what="recheck hits")
        rechecked = hits_by_node(rest)
        assert set(rechecked["fc1.weight"]) == {large, small} and rest.metadata()["step"] == 1
        assert run.steps() == 0

        rest.terminate()
        assert run.finish() == 0 and run.lines()[-1] == "end"
        saved = np.load(run.weights)["fc1.weight"]                             # param.asnumpy() at the end (= step 1)
    assert saved.shape == (2700, 400)
    np.testing.assert_array_equal(top_rows, saved[0:2, :])
    np.testing.assert_array_equal(last_row, saved[2699, 380:400])
    assert _actual(entry, "max_gt") == pytest.approx(float(saved.max()))
    assert _actual(rechecked["fc1.weight"][small], "max_lt") == pytest.approx(float(saved.max()))


def test_frozen_and_zero_lr_layers_hit_change_conditions_and_overflow_hits_at_its_step(mindinsight, tmp_path):
    """fc3 is frozen (requires_grad=False, not in the optimizer), fc2 is in an lr-0 group; batch 4 (step 5) holds
    a NaN/Inf input that makes conv1.weight non-finite. Started through ``msdebug run``."""
    rest = mindinsight.rest
    with training_against(mindinsight, tmp_path, "--frozen", "fc3", "--zero-lr", "fc2", "--nan-batch", "4",
                  launcher="msdebug-run") as run:
        at_step(rest, run, 0)
        listed = {name.rsplit("/", 1)[-1] for name in _weights_listed(rest)}
        assert listed == set(WEIGHTS)                                          # frozen fc3 is shown and watchable
        unchanged = rest.create_watchpoint("weight_not_changed", {"rtol": 1e-5})["id"]
        too_small = rest.create_watchpoint("weight_change_too_small", {"abs_mean_update_ratio_lt": 1e-8})["id"]
        rest.continue_steps(-1)
        at_step(rest, run, 1)
        hits = hits_by_node(rest)
        assert sorted(hits) == ["fc2.bias", "fc2.weight", "fc3.bias", "fc3.weight"], hits
        assert all(set(h) == {unchanged, too_small} for h in hits.values())
        assert _actual(hits["fc3.weight"][too_small], "abs_mean_update_ratio_lt") == 0.0
        assert _actual(hits["fc2.weight"][too_small], "abs_mean_update_ratio_lt") == 0.0

        rest.delete_watchpoint(None)
        overflow = rest.create_watchpoint("weight_overflow")["id"]
        rest.continue_steps(-1)
        at_step(rest, run, 5)                                                      # the poisoned step, not later
        assert run.steps() == 4                                                     # step 5's StepLog: after
        hits = hits_by_node(rest)
        assert list(hits) == ["conv1.weight"] and set(hits["conv1.weight"]) == {overflow}
        assert hits["conv1.weight"][overflow]["watch_condition"]["id"] == "weight_overflow"

        rest.terminate()
        assert run.finish() == 0 and run.lines()[-1] == "end" and run.steps() == 5
