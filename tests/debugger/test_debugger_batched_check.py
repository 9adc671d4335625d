"""Issue 14: the online debugger checks the tensors that share a condition list in one batched statistics call. That
must change nothing a server sees: the hits (which, in which order, with which values and error codes) equal those
of checking each tensor on its own with ``check_many``.
"""
from __future__ import annotations

import numpy as np

from msdebug_hooks.debugger.sources import ValuesByName
from msdebug_hooks.debugger.watchpoints import WatchpointTable

from watch_table_rig import SHAPES, Cond, one_by_one_hits, random_values, table_graph, watch

def test_batched_hits_equal_one_by_one_hits_step_after_step():
    rng = np.random.default_rng(7)
    current: dict[str, np.ndarray] = {}
    source = ValuesByName(table_graph(), lambda name: current.get(name))
    table = WatchpointTable(source.graph, source, lambda key, message: None)
    everything = list(SHAPES)
    watch(table, 1, Cond.tensor_general_overflow, [], everything)
    watch(table, 2, Cond.tensor_too_large, [("abs_mean_gt", 0.5)], everything)
    watch(table, 3, Cond.tensor_change_too_large, [("abs_mean_update_ratio_gt", 0.1)], ["a.weight", "c.bias"])
    watch(table, 4, Cond.tensor_not_changed, [("rtol", 1e-5)], ["e.steps", "a.weight", "f.weight"])
    watch(table, 5, Cond.tensor_range, [("range_start_inclusive", -1.0), ("range_end_inclusive", 1.0),
                                       ("range_percentage_gt", 50.0)], ["d.weight", "b.weight"])
    compared = 0                  # b and d share a batch with c between them: the order is that of the watches
    for step in range(4):
        previous = {name: source.previous(name) for name in SHAPES if source.previous(name) is not None}
        current.update(random_values(rng, step))
        if step == 3:
            current["e.steps"] = source.previous("e.steps").copy()       # unchanged: watchpoint 4 hits on it
        source.forget_current()
        got = table.check(initial=step == 0, step_end=step > 0)
        want = one_by_one_hits(table, source, previous) if step > 0 else got
        assert [h.SerializeToString() for h in got] == [h.SerializeToString() for h in want]
        compared += len(got)
        source.keep_previous(table.watched_parameters())
    assert compared > 20          # NaN, Inf, no-previous errors and real hits were all compared

