"""Throughput of the watchpoint statistics against the memory limit, and the cost of checking a LeNet step.

Part 1, on 1 M, 16 M and 64 M float32 elements (standard normal), GB/s of:
  * ``np.max``: one read pass, the memory-bandwidth limit for any statistic;
  * ``np.copy``: one read and one write pass;
  * naive numpy: one call per statistic for the full set (max, min, mean, abs-mean, sd, nan / +inf / -inf / zero /
    positive / negative counts);
  * ours: ``compute_statistics`` for the same full set, one chunked pass;
  * the bare chunk loop: the same numpy calls per cached chunk with no bookkeeping (single-threaded BLAS, as
    ours), i.e. the floor for a numpy kernel of this design;
  * ours for a typical 3-watchpoint set (overflow, too large by mean |x|, all zero) through ``check_many``;
and each as a ratio to the ``np.max`` pass (target: ours >= 0.5 at 16 M and 64 M, and >= naive at 1 M).

Part 2: a real MindSpore LeNet-5 takes one training step; its parameters (with their values before the step as the
previous values) and its layer activations for a 32-image batch are checked against a 5-watchpoint set: batched
(``check_tensors``: one numpy call per statistic for all small tensors), with ``check_many`` (one statistics pass per
tensor) and condition by condition.

Run: ``.venv/bin/python benchmarks/stats_throughput.py [--quick]``. Timings are the best of several repeats; the
machine is shared, so compare the ratios of one run rather than absolute numbers across runs.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

from msdebug_hooks.conditions._blas import single_threaded_blas  # noqa: E402
from msdebug_hooks.conditions import (  # noqa: E402
    BASIC_STATISTICS, TensorAllZeroCondition, TensorChangeBelowThresholdCondition, TensorOverflowCondition,
    TensorRangeCondition, TensorTooLargeCondition, check_many, check_tensors, compute_statistics)


def best_time(fn, repeats: int) -> float:
    fn()  # warm up (page faults, buffers)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def naive_full_set(x: np.ndarray) -> tuple:
    """What one would write without thinking about memory: each statistic is its own pass (or two)."""
    return (np.max(x), np.min(x), np.mean(x), np.mean(np.abs(x)), np.std(x, ddof=1),
            np.count_nonzero(np.isnan(x)), np.count_nonzero(np.isposinf(x)), np.count_nonzero(np.isneginf(x)),
            np.count_nonzero(x == 0), np.count_nonzero(x > 0), np.count_nonzero(x < 0))


#: a common set: NaN/Inf, too large (mean |x|), all zero -> needs max/min, abs-mean and the zero count
TYPICAL = [TensorOverflowCondition(), TensorTooLargeCondition(abs_mean_gt=1e3), TensorAllZeroCondition()]


def _single(fn, x):
    with single_threaded_blas():
        return fn(x)


def chunk_floor(x: np.ndarray, chunk: int = 1 << 16) -> None:
    """The numpy calls the full set needs per cached chunk, with no bookkeeping: the floor for any numpy kernel
    of this design (max, min, sum, sum of squares, |x| and its sum, zero and positive counts)."""
    ones, buf, mask = np.ones(chunk, x.dtype), np.empty(chunk, x.dtype), np.empty(chunk, np.bool_)
    for start in range(0, x.size - chunk + 1, chunk):
        c = x[start:start + chunk]
        np.maximum.reduce(c), np.minimum.reduce(c), np.dot(c, ones), np.dot(c, c)
        np.dot(np.abs(c, out=buf), ones)
        np.count_nonzero(np.equal(c, 0, out=mask)), np.count_nonzero(np.greater(c, 0, out=mask))


def ours_full_set(x: np.ndarray):
    return compute_statistics(x, needed=BASIC_STATISTICS)


def throughput_table(sizes: list[int]) -> None:
    print("Part 1: statistics throughput, float32, standard normal")
    print(f"{'elements':>9} {'method':<24} {'ms':>9} {'GB/s':>7} {'x np.max':>9}")
    for n in sizes:
        x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
        repeats = 20 if n <= 1 << 20 else (7 if n <= 16 << 20 else 5)
        rows = [("np.max (1 read pass)", lambda: np.max(x)),
                ("np.copy", lambda: np.copy(x)),
                ("naive numpy, full set", lambda: naive_full_set(x)),
                ("bare chunk loop (floor)", lambda: _single(chunk_floor, x)),
                ("ours, full set", lambda: ours_full_set(x)),
                ("ours, 3 watchpoints", lambda: check_many(TYPICAL, x))]
        times = {name: best_time(fn, repeats) for name, fn in rows}
        base = times[rows[0][0]]
        for name, _ in rows:
            t = times[name]
            print(f"{n // (1 << 20):>8}M {name:<24} {t * 1e3:9.2f} {x.nbytes / t / 1e9:7.1f} {base / t:9.2f}")
        print(f"{'':>9} ours / naive speed-up: {times['naive numpy, full set'] / times['ours, full set']:.1f}x")
        # sanity: the same numbers (sd to float32 accumulation accuracy)
        s, ref = ours_full_set(x), naive_full_set(x)
        assert s.max == ref[0] and s.min == ref[1] and s.zero_count == ref[8] and s.positive_count == ref[9]
        assert abs(s.sd - float(np.std(x.astype(np.float64), ddof=1))) < 1e-5
        del x


def lenet_step_tensors():
    """(parameters after one real step, the same parameters before it, activations of a 32-image batch)."""
    import mindspore as ms
    from lenet import make_dataset, make_model, synthetic_batches

    model, network = make_model(0.01)
    before = {p.name: p.asnumpy().copy() for p in network.get_parameters()}
    model.train(1, make_dataset(num_batches=1), dataset_sink_mode=False)
    after = {p.name: p.asnumpy().copy() for p in network.get_parameters()}
    images, _ = next(synthetic_batches(1))
    x = ms.Tensor(images)
    acts = []
    for stage in ("conv1", "relu", "max_pool2d", "conv2", "relu", "max_pool2d", "flatten", "fc1", "relu", "fc2",
                  "relu", "fc3"):
        x = getattr(network, stage)(x)
        acts.append(x.asnumpy())
    names = [n for n in after if not n.startswith(("moments", "learning_rate", "momentum", "global_step"))]
    return [after[n] for n in names], [before[n] for n in names], acts


def lenet_check(repeats: int) -> None:
    print("\nPart 2: a 5-watchpoint set over one LeNet-5 step (real MindSpore parameters and activations)")
    params, prev, acts = lenet_step_tensors()
    weight_wps = [TensorOverflowCondition(), TensorTooLargeCondition(abs_mean_gt=1e3), TensorAllZeroCondition(),
                  TensorChangeBelowThresholdCondition(abs_mean_update_ratio_lt=1e-4),
                  TensorRangeCondition(range_start_inclusive=-1.0, range_end_inclusive=1.0, range_percentage_lt=50)]
    act_wps = weight_wps[:3] + [TensorTooLargeCondition(max_gt=1e4), weight_wps[4]]
    n_elem = sum(a.size for a in params) + sum(a.size for a in acts)
    print(f"  {len(params)} parameters + {len(acts)} activations, {n_elem} elements, "
          f"{n_elem * 4 / 1e6:.2f} MB")

    def shared():
        hits = 0
        for cur, old in zip(params, prev):
            hits += sum(r.hit for r in check_many(weight_wps, cur, old))
        for a in acts:
            hits += sum(r.hit for r in check_many(act_wps, a))
        return hits

    def one_by_one():
        hits = 0
        for cur, old in zip(params, prev):
            hits += sum(c.check(cur, old).hit for c in weight_wps)
        for a in acts:
            hits += sum(c.check(a).hit for c in act_wps)
        return hits

    def batched():
        hits = sum(r.hit for rs in check_tensors(weight_wps, params, prev) for r in rs)
        return hits + sum(r.hit for rs in check_tensors(act_wps, acts) for r in rs)

    assert shared() == one_by_one() == batched()
    t_shared, t_single = best_time(shared, repeats), best_time(one_by_one, repeats)
    t_batched = best_time(batched, repeats)
    checks = 5 * (len(params) + len(acts))
    print(f"  check_tensors (batched statistics): {t_batched * 1e3:7.2f} ms per step "
          f"({t_batched / checks * 1e6:.1f} us per tensor-watchpoint; {t_shared / t_batched:.1f}x check_many)")
    print(f"  check_many (one pass per tensor):   {t_shared * 1e3:7.2f} ms per step "
          f"({t_shared / checks * 1e6:.1f} us per tensor-watchpoint), hits: {shared()}")
    print(f"  condition by condition:             {t_single * 1e3:7.2f} ms per step "
          f"(check_many is {t_single / t_shared:.1f}x faster)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 M and 16 M only, fewer repeats")
    parser.add_argument("--no-lenet", action="store_true", help="skip part 2 (needs MindSpore)")
    args = parser.parse_args()
    throughput_table([1 << 20, 16 << 20] if args.quick else [1 << 20, 16 << 20, 64 << 20])
    if not args.no_lenet:
        lenet_check(5 if args.quick else 20)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
