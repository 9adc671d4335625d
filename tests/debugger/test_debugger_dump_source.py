"""Acceptance of the debugger's dump source (issue 6 point 1) against a real MindInsight 2.3.1.

An unmodified GRAPH_MODE script (tests/scripts/dump_source_train.py) runs with ``ENABLE_MS_DEBUGGER=1
MS_DEBUGGER_SOURCE=dump``; the tests drive MindInsight's REST API as its browser does: a ``tensor_overflow`` watchpoint
catches the NaN born in the ``Sqrt`` kernel at the poisoned step, the hit's node shows the script line behind it (stack
list and search by code line), viewing an activation returns the dumped values, over 100 steps the scratch dump
never holds more than about two steps of data and is gone at the end, and a script that compiles a graph before
training still gets the dump (set up at start-up by the env path), with weight watchpoints working alongside.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from project import EXAMPLES
from mindinsight_ui import at_step, training_against, walk
from server_training import DUMP

pytestmark = [pytest.mark.mindspore, pytest.mark.mindinsight, pytest.mark.timeout(240)]

NAN_SCRIPT_LINE = "return ops.sqrt(x + 1.0)"
SCALE = "Default/network-WithLossCell/_backbone-SqrtLeNet/scale-SqrtScale"
LENET = "Default/network-WithLossCell/_backbone-SqrtLeNet/lenet-LeNet5"


def dump_training(server, tmp_path: Path, *args: str):
    """The dump-source script against MindInsight (env variables only, ``MS_DEBUGGER_SOURCE=dump``)."""
    return training_against(server, tmp_path, *args, script=DUMP, env={"MS_DEBUGGER_SOURCE": "dump"})


def _scope_nodes(rest, scope: str) -> dict[str, dict]:
    """The UI's expansion of a scope: leaf name -> node (with ``stack_info``)."""
    return {n["name"].rsplit("/", 1)[-1]: n for n in rest.retrieve_node(scope)["graph"]["nodes"]}


def _find(rest, leaf: str) -> str:
    """The full name of the node whose name ends in ``leaf``, found as the UI does: search, then expand scopes."""
    scopes = [n["name"] for n in walk(rest.search(leaf.split("-")[0])["nodes"]) if not n.get("nodes")]
    found = [f"{scope}/{leaf}" for scope in scopes if leaf in _scope_nodes(rest, scope)]
    assert len(found) == 1, (leaf, scopes)
    return found[0]


def _hit_nodes(rest) -> dict[str, list[dict]]:
    table: dict[str, list[dict]] = {}
    for node in rest.search_watchpoint_hits(limit=200).get("watch_point_hits", []):
        for tensor in node["tensors"]:
            table.setdefault(node["node_name"], []).extend(tensor["watch_points"])
    return table



def test_tensor_overflow_catches_the_nan_at_its_kernel_and_step_with_its_source_line(mindinsight, tmp_path):
    rest = mindinsight.rest
    keep = tmp_path / "relu_step2.npy"
    with dump_training(mindinsight, tmp_path, "--steps", "8", "--bad-step", "2", "--keep-op",
                  "Default_network-WithLossCell__backbone-SqrtLeNet_lenet-LeNet5_relu-ReLU_ReLU-op0",
                  "--keep-step", "2", "--keep-to", str(keep)) as run:
        at_step(rest, run, 0)
        scale = _scope_nodes(rest, SCALE)
        sqrt, add = scale["Sqrt-op0"]["name"], scale["Add-op0"]["name"]
        relu = _scope_nodes(rest, f"{LENET}/relu-ReLU")["ReLU-op0"]["name"]

        # the node's stack, as the UI's node detail shows it ...
        frames = [f for f in scale["Sqrt-op0"]["stack_info"] if f["file_path"].endswith("find_first_nan.py")]
        assert frames and frames[0]["code_line"] == NAN_SCRIPT_LINE, scale["Sqrt-op0"]["stack_info"]
        line_no = frames[0]["line_no"]
        assert (EXAMPLES / "find_first_nan.py").read_text().splitlines()[line_no - 1].strip() == NAN_SCRIPT_LINE
        # ... the stack list filtered by a key word, and "search by code line"
        stacks = rest._call("GET", rest._session("stacks"), query={"key_word": "ops.sqrt", "limit": 10, "offset": 0})
        listed = [item for group in stacks["stack_infos"] for item in group["items"]]
        assert [(Path(i["file_path"]).name, i["line_no"]) for i in listed] == [("find_first_nan.py", line_no)]
        found = rest._call("GET", rest._session("search"), query={
            "name": "", "graph_name": rest.graph_name, "rank_id": 0, "stack_info_key_word": "ops.sqrt"})
        assert {n["name"] for n in walk(found["nodes"]) if n["type"] != "name_scope"} == {sqrt, add}

        overflow = rest.create_watchpoint("tensor_overflow")["id"]
        rest.continue_steps(2)                                    # first view an activation at step 2
        at_step(rest, run, 2)
        assert len(run.records()) == 1      # the script's callbacks run after the debugger's pause at step 2 ends
        value = rest.viewed_value(f"{relu}:0", "[0, 0, :, :]")
        assert _hit_nodes(rest) == {}
        rest.continue_steps(-1)
        at_step(rest, run, 3)                                    # batch 2 (0-based) is training step 3
        assert [r["step"] for r in run.records()] == [1, 2]            # step 3's comes after the pause
        hits = _hit_nodes(rest)
        assert sqrt in hits and add not in hits, sorted(hits)
        entry = hits[sqrt][0]
        assert entry["id"] == overflow and entry["watch_condition"]["id"] == "tensor_overflow"
        assert entry["error_list"] == []                         # NaN is what overflow looks for, not an error
        assert np.isnan(rest.viewed_value(f"{sqrt}:0", "[0, 0, :, :]")[0, 0])   # the -4 pixel, as dumped
        rest.terminate()
        assert run.proc.wait(60) == 0
    dumped = np.load(keep)
    np.testing.assert_array_equal(value, dumped[0, 0])


def test_scratch_dump_holds_about_one_step_over_100_steps_and_is_removed(mindinsight, tmp_path):
    rest = mindinsight.rest
    with dump_training(mindinsight, tmp_path, "--steps", "100") as run:
        at_step(rest, run, 0)
        rest.continue_steps(-1)                                   # no watchpoint: runs to the end
        assert run.proc.wait(180) == 0
        records = run.records()
        end = run.log.read_text().splitlines()[-1]
    assert [r["step"] for r in records] == list(range(1, 101))
    step_bytes = min(r["step_bytes"] for r in records)               # one step of every kernel's outputs
    assert step_bytes > 1_000_000                                     # the dump really wrote them, every step
    assert {r["iterations"] for r in records} == {1}                  # only the step that just ran is on disk
    assert max(r["bytes"] for r in records) <= 2 * step_bytes         # that step + graphs: below two steps
    root = Path(end.split(" ", 2)[2])                                 # the scratch directory, logged at train end
    assert root.name.startswith("msdebug_dump_") and not root.exists()   # removed when training ended


def test_env_activation_sets_the_dump_up_before_a_graph_compiled_ahead_of_training(mindinsight, tmp_path):
    """The script runs ``model.predict`` before ``model.train``: MindSpore reads the dump setting at that first
    compile, so only the start-up configuration of the env path (``dump_scratch.configure_early``) gets a dump."""
    rest = mindinsight.rest
    with dump_training(mindinsight, tmp_path, "--steps", "5", "--bad-step", "1", "--warmup") as run:
        at_step(rest, run, 0)
        top = {n["name"] for n in rest.retrieve_all()["graph"]["nodes"]}
        assert {"Default", "Gradients"} <= top                      # the training graph, not the predict graph
        sqrt = _find(rest, "Sqrt-op0")   # scoped as MindSpore parsed the cell first: Default/scale-SqrtScale/...
        change = rest.create_watchpoint("weight_change_too_small", {"abs_mean_update_ratio_lt": 1e9})["id"]
        rest.continue_steps(-1)
        at_step(rest, run, 1)                                      # weights (live) vs their step-0 copies
        hits = _hit_nodes(rest)
        weights = {name.rsplit("/", 1)[-1] for name in hits}
        assert {"lenet.conv1.weight", "lenet.fc3.bias"} <= weights
        assert all(n.endswith((".weight", ".bias")) for n in weights)
        assert all(e["id"] == change and e["error_list"] == [] for entries in hits.values() for e in entries)
        rest.delete_watchpoint(change)
        rest.create_watchpoint("tensor_overflow")
        rest.continue_steps(-1)
        at_step(rest, run, 2)                                      # batch 1 is training step 2
        assert sqrt in _hit_nodes(rest) and [r["step"] for r in run.records()] == [1]   # step 2's after the pause
        rest.terminate()
        assert run.proc.wait(60) == 0
        iterations = [r["iterations"] for r in run.records()]      # the predict run's files go when step 1 begins
        assert iterations == [1, 1], iterations

