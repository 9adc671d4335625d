"""The offline check reads small tensors ahead and checks them in batches (``check_tensors``), large ones alone: its
hits must be exactly those of checking every (watchpoint, tensor) pair on its own with ``Condition.check`` over
``np.load``-ed files, whatever the dtypes, NaN/Inf, previous values, batch size or thread count."""
from __future__ import annotations

import numpy as np
import pytest

import msdebug_hooks as debugger
from dump_fixtures import write_npy
from msdebug_hooks import DumpAnalyzer, Watchpoint
from msdebug_hooks.dump import watchpoints as checker

DTYPES = {"Float32": np.float32, "Float16": np.float16, "Float64": np.float64, "Int32": np.int32, "Bool": np.bool_}
CONDITIONS = [debugger.TensorOverflowCondition(), debugger.TensorTooLargeCondition(abs_mean_gt=0.5),
              debugger.TensorUnchangedCondition(), debugger.TensorChangeAboveThresholdCondition(
                  abs_mean_update_ratio_gt=0.05),
              debugger.TensorRangeCondition(range_start_inclusive=-1, range_end_inclusive=1, range_percentage_lt=60)]


def _tensor(rng, kind: str, size: int, iteration: int, index: int) -> np.ndarray:
    if kind == "Bool":
        return rng.random(size) < 0.3 * (iteration + 1)
    if kind == "Int32":
        return rng.integers(-3, 3, size) * (iteration + 1)
    value = rng.standard_normal(size) * (0.2 + index % 4)
    if index % 5 == 0 and iteration == 1:
        value[size // 2] = np.nan
    if index % 7 == 0 and iteration == 2:
        value[-1] = -np.inf
    return value.astype(DTYPES[kind])


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    """Three iterations of 24 operators: five dtypes, sizes from 1 element to 1.2 MB (checked alone), NaN/Inf, a
    tensor that never changes, and one whose file is missing at iteration 1."""
    root = tmp_path_factory.mktemp("batch_dump")
    rng = np.random.default_rng(7)
    kinds = list(DTYPES)
    constant = np.linspace(-2, 2, 50).astype(np.float32)
    for iteration in range(3):
        for index in range(24):
            kind = kinds[index % len(kinds)]
            size = 300_000 if index == 3 else [1, 7, 64, 1000, 40_000][index % 5]
            value = constant if index == 11 else _tensor(rng, kind, size, iteration, index)
            if index == 13 and iteration == 1:
                continue
            name = f"Add.Default_Op{index:02d}-op{index}.0.0.{iteration * 100 + index + 1}.output.0.DefaultFormat." \
                   f"{'Float32' if index == 11 else kind}.npy"
            write_npy(root / "rank_0" / "Net" / "0" / str(iteration) / name, value)
    return root


def _reference(analyzer: DumpAnalyzer, watchpoints: list) -> list[tuple]:
    rows = []
    for wp_index, watchpoint in enumerate(watchpoints):
        for tensor in watchpoint.tensors:
            path = tensor.file
            if path is None:
                continue
            before = tensor.previous()
            previous = np.load(before.file) if before is not None and before.file is not None else None
            result = watchpoint.condition.check(np.load(path), previous)
            if result.reportable:
                rows.append(_row(tensor, wp_index, result.error_code, result.params))
    return sorted(rows)


def _row(tensor, wp_index: int, error_code: int, params) -> tuple:
    return (tensor.iteration, tensor.node.name, wp_index, error_code,
            tuple((p.name, bool(p.hit), None if p.actual_value is None else round(float(p.actual_value), 9))
                  for p in params))


@pytest.mark.parametrize("workers, batch_bytes", [(1, checker.BATCH_BYTES), (2, checker.BATCH_BYTES), (1, 5000),
                                                  (2, 1)])
def test_batched_hits_equal_one_check_per_tensor(dump, monkeypatch, workers, batch_bytes):
    monkeypatch.setattr(checker, "BATCH_BYTES", batch_bytes)
    analyzer = DumpAnalyzer(dump, workers=workers)
    tensors = analyzer.select_tensors("")
    assert len(tensors) == 24 * 3 and sum(t.file is None for t in tensors) == 1
    # overlapping selections: tensors see different sets of conditions
    selections = [tensors, tensors[::2], tensors, tensors[1::3], tensors[5:]]
    watchpoints = [Watchpoint(selection, condition) for selection, condition in zip(selections, CONDITIONS)]
    with np.errstate(all="ignore"):
        expected = _reference(analyzer, watchpoints)
        hits = analyzer.check_watchpoints(watchpoints)
    got = [_row(h.tensor, watchpoints.index(h.watchpoint), h.error_code, h.params) for h in hits]
    assert sorted(got) == expected
    assert [h.tensor.iteration for h in hits] == sorted(h.tensor.iteration for h in hits)
    kinds = {(row[2], row[3]) for row in expected}
    assert {(0, 0), (1, 0), (2, 0), (4, 0)} <= kinds          # overflow, too large, unchanged, range all hit
    assert any(code & 4 for _, code in kinds) and any(code & 1 for _, code in kinds)   # no previous; NaN
