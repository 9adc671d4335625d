"""Throughput of the watchpoint statistics against the memory limit, and the cost of checking a training step.

Part 1, on 1 M, 16 M and 64 M float32 elements (standard normal), GB/s and ratio to one ``np.max`` pass (one read
of the tensor: the memory-bandwidth limit for any statistic) of:
  * compiled, full set: ``compute_statistics`` with max, min, mean, sd, abs-mean, nan / +inf / -inf / zero /
    positive / negative counts on the compiled engine (numba);
  * compiled, 3 watchpoints: ``check_many`` with overflow, too large by mean |x| and all zero;
  * numpy fallback, full set and 3 watchpoints: the same on numpy's chunked pass (what runs without numba);
  * naive numpy: one numpy call per statistic of the full set.
Every variant runs once per round, rounds interleaved; the best round counts. Targets (issue 14): compiled full set
>= 0.5 and compiled 3 watchpoints >= 0.6 of ``np.max`` at 16 M and 64 M.

Part 2: ``check_tensors`` over the parameters of one real training step (values after the step, with the values
before as the previous values) against 5 watchpoints (overflow, too large by mean |x|, all zero, change below
threshold by update ratio, unchanged), for LeNet-5 (10 tensors, 61 k floats) and the 25 M-parameter transformer
(``small_transformer.py``: 214 tensors, 100 MB), compiled and numpy fallback interleaved: CPU time per step
(``time.thread_time``, robust on a shared machine) and GB/s of the bytes read (current + previous values); and for
a monitor that keeps last step's values itself: a check followed by ``np.copyto`` against ``keep_previous=True``;
and ``find_hits`` (the same check, only the reportable results built: what the online debugger calls), on both
engines and, as the debugger runs it, copying the values into second buffers in the pass (``keep_into``).

Run: ``.venv/bin/python benchmarks/stats_throughput.py [--quick] [--no-networks] [--no-doc]``; a full run rewrites
the section "Watchpoint statistics" of ``docs/performance.md`` (``--quick`` writes nothing). The machine is shared:
compare the ratios of one run, not absolute numbers across runs, and note the load (``uptime``) printed at the start.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from msdebug_hooks.conditions import (  # noqa: E402
    BASIC_STATISTICS, TensorAllZeroCondition, TensorChangeBelowThresholdCondition, TensorOverflowCondition,
    TensorTooLargeCondition, TensorUnchangedCondition, check_many, check_tensors, compute_statistics, find_hits,
    warm_up_statistics)
from msdebug_hooks.conditions._engine import forced_engine  # noqa: E402

import perf_doc  # noqa: E402

#: a common set: NaN/Inf, too large (mean |x|), all zero -> needs the abs-mean and the zero count
TYPICAL = [TensorOverflowCondition(), TensorTooLargeCondition(abs_mean_gt=1e3), TensorAllZeroCondition()]
#: the per-step weight set: the typical three and the two that compare against the previous step
WEIGHT_WATCHPOINTS = TYPICAL + [TensorChangeBelowThresholdCondition(abs_mean_update_ratio_lt=1e-4),
                                TensorUnchangedCondition(rtol=1e-5)]
TARGETS = {"compiled, full set": 0.5, "compiled, 3 watchpoints": 0.6}


def interleaved_best(variants: dict[str, Callable[[], object]], rounds: int,
                     clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """Best time of each variant over ``rounds`` rounds, each round running every variant once (after a warm-up
    call each), so that load changes on the shared machine hit every variant alike."""
    for fn in variants.values():
        fn()
    best = {name: float("inf") for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            start = clock()
            fn()
            best[name] = min(best[name], clock() - start)
    return best


def naive_full_set(x: np.ndarray) -> tuple:
    """What one would write without thinking about memory: each statistic is its own pass (or two)."""
    return (np.max(x), np.min(x), np.mean(x), np.mean(np.abs(x)), np.std(x, ddof=1),
            np.count_nonzero(np.isnan(x)), np.count_nonzero(np.isposinf(x)), np.count_nonzero(np.isneginf(x)),
            np.count_nonzero(x == 0), np.count_nonzero(x > 0), np.count_nonzero(x < 0))


def on_engine(engine: str, fn: Callable[[], object]) -> Callable[[], object]:
    def run():
        with forced_engine(engine):
            return fn()
    return run


def tensor_variants(x: np.ndarray) -> dict[str, Callable[[], object]]:
    """Part 1's variants on one tensor (the naive one up to 16 M elements)."""
    variants = {
        "np.max (1 read pass)": lambda: np.max(x),
        "compiled, full set": on_engine("compiled", lambda: compute_statistics(x, needed=BASIC_STATISTICS)),
        "compiled, 3 watchpoints": on_engine("compiled", lambda: check_many(TYPICAL, x)),
        "numpy, full set": on_engine("numpy", lambda: compute_statistics(x, needed=BASIC_STATISTICS)),
        "numpy, 3 watchpoints": on_engine("numpy", lambda: check_many(TYPICAL, x)),
    }
    if x.size <= 16 << 20:
        variants["naive numpy, full set"] = lambda: naive_full_set(x)
    return variants


def throughput_table(sizes: list[int], quick: bool, section: perf_doc.Section) -> list[str]:
    print("Part 1: statistics throughput, float32, standard normal")
    print(f"{'elements':>9} {'variant':<26} {'ms':>9} {'GB/s':>7} {'x np.max':>9}")
    verdicts, rows = [], []
    for n in sizes:
        x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
        rounds = (12 if n <= 1 << 20 else 5) if quick else (30 if n <= 1 << 20 else 9)
        variants = tensor_variants(x)
        times = interleaved_best(variants, rounds)
        base = times["np.max (1 read pass)"]
        for name, t in times.items():
            print(f"{n // (1 << 20):>8}M {name:<26} {t * 1e3:9.2f} {x.nbytes / t / 1e9:7.1f} {base / t:9.2f}")
            rows.append((f"{n // (1 << 20)} M", name, f"{t * 1e3:.2f} ms", f"{x.nbytes / t / 1e9:.1f}",
                         f"**x{base / t:.2f}**" if name.startswith("compiled") else f"x{base / t:.2f}",
                         perf_doc.load_1m()))
        if n >= 16 << 20:
            for name, target in TARGETS.items():
                ratio = base / times[name]
                verdicts.append(f"{name} at {n >> 20}M: {ratio:.2f} x np.max, target >= {target}: "
                                f"{'met' if ratio >= target else 'MISSED'}")
        # the engines agree (sd to float32 accumulation accuracy)
        with forced_engine("compiled"):
            a = compute_statistics(x, needed=BASIC_STATISTICS)
        with forced_engine("numpy"):
            b = compute_statistics(x, needed=BASIC_STATISTICS)
        assert (a.max, a.min, a.zero_count, a.positive_count) == (b.max, b.min, b.zero_count, b.positive_count)
        assert abs(a.sd - float(np.std(x.astype(np.float64), ddof=1))) < 1e-5
        x = variants = None  # free it before the next size is allocated
    section.add("### Part 1: one large tensor", "",
                "Float32, standard normal; best of interleaved rounds; \"x np.max\" is the speed against one "
                "`np.max` pass (one read of the tensor: the memory-bandwidth limit for any statistic). Full set: "
                "max, min, mean, sd, mean |x|, NaN / +Inf / -Inf / zero / positive / negative counts; 3 "
                "watchpoints: overflow, too large by mean |x|, all zero (`check_many`); naive numpy: one numpy "
                "call per statistic.", "")
    section.table(["elements", "variant", "time", "GB/s", "x np.max", "load (1 min)"], rows)
    return verdicts


def trained_step(make_model: Callable, make_dataset: Callable) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(trainable parameters after one real training step, the same before it) as numpy arrays."""
    model, network = make_model()
    params = network.trainable_params()
    before = [p.asnumpy().copy() for p in params]
    model.train(1, make_dataset(1), dataset_sink_mode=False)
    return [p.asnumpy().copy() for p in params], before


def step_check(name: str, params: list[np.ndarray], previous: list[np.ndarray], rounds: int,
               section: perf_doc.Section) -> None:
    n_bytes = sum(a.nbytes for a in params) + sum(a.nbytes for a in previous)
    print(f"  {name}: {len(params)} tensors, {sum(a.size for a in params) / 1e6:.2f} M floats; "
          f"{n_bytes / 1e6:.1f} MB read per check (current + previous)")
    section.add(f"{name}: {len(params)} tensors, {sum(a.size for a in params) / 1e6:.2f} M floats; "
                f"{n_bytes / 1e6:.1f} MB read per check (current + previous), best of {rounds} rounds.", "")
    variants = {engine: on_engine(engine, lambda: check_tensors(WEIGHT_WATCHPOINTS, params, previous))
                for engine in ("compiled", "numpy")}
    with forced_engine("compiled"):
        hits_compiled = [[r.hit for r in rs] for rs in check_tensors(WEIGHT_WATCHPOINTS, params, previous)]
    with forced_engine("numpy"):
        hits_numpy = [[r.hit for r in rs] for rs in check_tensors(WEIGHT_WATCHPOINTS, params, previous)]
    assert hits_compiled == hits_numpy
    kept = [p.copy() for p in previous]   # a monitor's own previous-step buffers (overwritten each round)

    def check_then_copy():
        results = check_tensors(WEIGHT_WATCHPOINTS, params, kept)
        for target, value in zip(kept, params):
            np.copyto(target, value)
        return results

    variants["compiled, then np.copyto"] = on_engine("compiled", check_then_copy)
    variants["compiled, keep_previous"] = on_engine(
        "compiled", lambda: check_tensors(WEIGHT_WATCHPOINTS, params, kept, keep_previous=True))
    for engine in ("compiled", "numpy"):   # the reportable results only, judged as arrays
        with forced_engine(engine):
            reportable = [(t, c, r) for t, rs in enumerate(check_tensors(WEIGHT_WATCHPOINTS, params, previous))
                          for c, r in enumerate(rs) if r.reportable]
            assert find_hits(WEIGHT_WATCHPOINTS, params, previous) == reportable
        variants[f"find_hits, {engine}"] = on_engine(
            engine, lambda: find_hits(WEIGHT_WATCHPOINTS, params, previous))
    spare = [np.empty_like(p) for p in params]   # the debugger's second buffers: previous stays as it is
    variants["find_hits, compiled, keep_into"] = on_engine(
        "compiled", lambda: find_hits(WEIGHT_WATCHPOINTS, params, previous, keep_into=spare))
    cpu = interleaved_best(variants, rounds, time.thread_time)
    wall = interleaved_best(variants, rounds)
    rows = []
    for engine in variants:
        call = "" if engine.startswith("find_hits") else "check_tensors, "
        print(f"    {call + engine:<40}: {cpu[engine] * 1e3:8.2f} ms CPU per step "
              f"({n_bytes / cpu[engine] / 1e9:5.2f} GB/s), wall {wall[engine] * 1e3:8.2f} ms")
        rows.append((call + engine, f"{cpu[engine] * 1e3:.2f} ms", f"{n_bytes / cpu[engine] / 1e9:.2f}",
                     f"{wall[engine] * 1e3:.2f} ms", perf_doc.load_1m()))
    section.table(["call", "CPU per step", "GB/s (CPU)", "wall", "load (1 min)"], rows)
    section.say(f"    compiled / numpy: {cpu['numpy'] / cpu['compiled']:.1f}x less CPU; keeping the previous values "
                f"in the pass saves {(cpu['compiled, then np.copyto'] - cpu['compiled, keep_previous']) * 1e3:.1f} "
                f"ms against a separate copy; find_hits takes {cpu['find_hits, compiled'] / cpu['compiled']:.2f}x "
                f"check_tensors' CPU")
    section.add("")


def network_checks(quick: bool, transformer: bool, section: perf_doc.Section) -> str:
    """Part 2; returns the MindSpore version."""
    import mindspore as ms
    from lenet import make_dataset, make_model

    ms.set_context(mode=ms.GRAPH_MODE)
    print("\nPart 2: check_tensors per training step, 5 watchpoints on every trainable parameter "
          "(overflow, too large, all zero, change below threshold, unchanged)")
    section.add("### Part 2: the parameters of one training step", "",
                "`check_tensors` over the trainable parameters after one real training step (the values before it "
                "as the previous values), 5 watchpoints (overflow, too large by mean |x|, all zero, change below "
                "threshold, unchanged), compiled and numpy interleaved; CPU time (`time.thread_time`) is the "
                "figure that holds on a shared machine. \"then np.copyto\" / \"keep_previous\": a monitor "
                "keeping last step's values itself, by a separate copy or in the pass; `find_hits` builds only the "
                "reportable results (what the online debugger calls), `keep_into` copies the values into second "
                "buffers in the pass as the debugger does.", "")
    params, previous = trained_step(lambda: make_model(0.01), lambda n: make_dataset(num_batches=n))
    step_check("LeNet-5", params, previous, 20 if quick else 60, section)
    if transformer:
        from small_transformer import make_transformer_dataset, make_transformer_model
        params, previous = trained_step(make_transformer_model, make_transformer_dataset)
        step_check("25 M-parameter transformer", params, previous, 3 if quick else 7, section)
    return ms.__version__


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 M and 16 M only, fewer rounds")
    parser.add_argument("--no-networks", "--no-lenet", action="store_true", help="skip part 2 (needs MindSpore)")
    parser.add_argument("--no-transformer", action="store_true", help="part 2 with LeNet only")
    perf_doc.add_doc_argument(parser)
    args = parser.parse_args(argv)
    section = perf_doc.Section("stats-throughput", "Watchpoint statistics", argv)
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} "
          f"(1/5/15 min) on {os.cpu_count()} CPUs")
    start = time.perf_counter()
    engine = warm_up_statistics()
    warm_up = time.perf_counter() - start
    print(f"statistics engine: {engine} (warm-up {warm_up:.2f} s)")
    section.add(f"Statistics engine: {engine}; its warm-up in this run (compiling the kernels or loading them from "
                f"numba's disk cache) took {warm_up:.2f} s.", "")
    verdicts = throughput_table([1 << 20, 16 << 20] if args.quick else [1 << 20, 16 << 20, 64 << 20], args.quick,
                                section)
    print("\nTargets:")
    section.add("Targets (issue 14): compiled full set >= 0.5 and compiled 3 watchpoints >= 0.6 of `np.max` at 16 M "
                "and 64 M elements.", "")
    section.say(*("  " + line for line in verdicts))
    versions = {"numpy": np.__version__, "numba": _numba_version()}
    if not args.no_networks:
        versions["mindspore"] = network_checks(args.quick, not args.no_transformer, section)
    section.publish(args.quick or args.no_doc, versions)
    return 0


def _numba_version() -> str:
    try:
        import numba
    except ImportError:
        return "not installed"
    return numba.__version__


if __name__ == "__main__":
    raise SystemExit(main())
