"""Issue 14: a step end's check copies the watched parameters for the next step's change conditions in the pass that
reads them (``WatchpointTable.check(keep=True)``), and ``keep_previous`` at the end of the suspension takes those
copies. Nothing a server sees may change: the previous value stays the last step's during the whole suspension (a
recheck compares with it, not with the value just copied), a watchpoint set during the suspension gets its copies
too, and the first step has no previous value.
"""
from __future__ import annotations

import numpy as np
import pytest

from msdebug_hooks.wire import debug_grpc_pb2 as pb
from msdebug_hooks.conditions import _engine
from msdebug_hooks.debugger.session import Decision
from msdebug_hooks.debugger.sources import ValuesByName
from msdebug_hooks.debugger.watchpoints import WatchpointTable

from session_rig import run_cmd, set_cmd
from watch_table_rig import SHAPES, Cond, one_by_one_hits, random_values, table_graph, watch


def _serialized(hits) -> list[bytes]:
    return [h.SerializeToString() for h in hits]


@pytest.mark.parametrize("engine", ["compiled", "numpy"])
def test_hits_with_copies_in_the_pass_equal_one_by_one_hits_with_rechecks(engine):
    rng = np.random.default_rng(11)
    current: dict[str, np.ndarray] = {}
    source = ValuesByName(table_graph(), lambda name: current.get(name))
    table = WatchpointTable(source.graph, source, lambda key, message: None)
    watch(table, 1, Cond.tensor_general_overflow, [], [name for name in SHAPES if name != "c.bias"])
    watch(table, 2, Cond.tensor_change_too_large, [("abs_mean_update_ratio_gt", 0.1)], ["a.weight", "d.weight"])
    watch(table, 3, Cond.tensor_not_changed, [("rtol", 1e-5)], ["e.steps", "d.weight", "f.weight"])
    compared = 0
    with _engine.forced_engine(engine):
        for step in range(5):
            previous = {name: source.previous(name).copy() for name in SHAPES if source.previous(name) is not None}
            current.update(random_values(rng, step))
            if step == 3:
                current["d.weight"] = source.previous("d.weight").copy()     # unchanged: watchpoint 3 hits
            source.forget_current()
            got = table.check(initial=False, step_end=True, keep=True)
            want = one_by_one_hits(table, source, previous)
            assert _serialized(got) == _serialized(want)
            for name, value in previous.items():                 # the previous values are untouched by the pass
                np.testing.assert_array_equal(source.previous(name), value)
            assert _serialized(table.check(initial=False, step_end=True)) == _serialized(want)   # recheck
            if step == 2:                                         # set during the suspension: watches c.bias
                watch(table, 4, Cond.tensor_change_too_small, [("abs_mean_update_ratio_lt", 10.0)], ["c.bias"])
                rechecked = table.check(initial=False, step_end=True)
                assert _serialized(rechecked) == _serialized(one_by_one_hits(table, source, previous))
                assert any(h.id == 4 and h.error_code == 4 for h in rechecked)   # no previous for c.bias yet
            source.keep_previous(table.watched_parameters())
            for name in table.watched_parameters():
                np.testing.assert_array_equal(source.previous(name), current[name])
                assert not np.shares_memory(source.previous(name), current[name])
            compared += len(got)
        assert any(h.id == 4 and h.error_code == 0 and h.watch_condition.params[0].hit for h in got)
    assert compared > 10


def test_a_recheck_in_the_suspension_still_compares_with_the_last_step(session, server, values):
    session.connect()
    server.command(set_cmd(3, Cond.tensor_change_too_large, [("abs_mean_update_ratio_gt", 0.5, False),
                                                              ("epsilon", 0, True)]))
    server.command(run_cmd())
    session.suspend()                                             # initial suspension: the first copy
    values["fc.weight"] = values["fc.weight"] * 3                 # ratio |1.5-0.5|/0.5 = 2 > 0.5
    server.command(pb.EventReply(run_cmd=pb.RunCMD(run_level="recheck")))
    server.command(run_cmd())
    assert session.step_end() is Decision.RUN                     # check, hits, recheck, hits again, run
    first, again = server.recorded.hit_streams
    assert [h.SerializeToString() for h in first] == [h.SerializeToString() for h in again]
    assert first[0].id == 3 and first[0].watch_condition.params[0].actual_value == pytest.approx(2.0)
    server.command(run_cmd())
    assert session.step_end() is Decision.RUN                     # unchanged since the last step: no hit
    assert len(server.recorded.hit_streams) == 2
    values["fc.weight"] = values["fc.weight"] * 0.1               # ratio |0.15-1.5|/1.5 = 0.9
    server.command(run_cmd())
    session.step_end()
    (hit,) = server.recorded.hit_streams[2]
    assert hit.watch_condition.params[0].actual_value == pytest.approx(0.9)
