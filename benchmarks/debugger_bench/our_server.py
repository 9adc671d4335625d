"""Our own server (issue 13) against plain training and a real MindInsight 2.3.1: the same client and LeNet training
driven by the headless ``DebuggerServer`` (in a process of its own, its driver setting the watchpoints and running
"until a hit" for every training, as a script would) and by MindInsight (its REST API doing the same, as the browser
would), in interleaved rounds."""
from __future__ import annotations

import os
import statistics
import sys

import perf_doc
from debugger_bench import ROOT, servers
from debugger_bench.light_source import interleaved_rounds

MINDINSIGHT_WATCHPOINTS = [("weight_overflow", None), ("weight_too_large", {"max_gt": 1e6}),
                           ("weight_too_small", {"min_lt": -1e6}),
                           ("weight_change_too_large", {"abs_mean_update_ratio_gt": 10.0}),
                           ("weight_not_changed", {"rtol": 1e-30})]



def drive_mindinsight(rest, watchpoints: int, stop) -> None:
    """What a person in MindInsight's UI does for each new training: set the watchpoints, continue until paused."""
    while not stop.is_set():
        try:
            rest.wait_for(lambda r: r["metadata"]["state"] == "waiting" and r["metadata"]["step"] == 0,
                          timeout=1.0, interval=0.02)
        except Exception:
            continue
        for condition, params in MINDINSIGHT_WATCHPOINTS[:watchpoints]:
            rest.create_watchpoint(condition, params)
        rest.continue_steps(-1)
        try:
            rest.wait_for(lambda r: not (r["metadata"]["state"] == "waiting" and r["metadata"]["step"] == 0),
                          timeout=60, interval=0.02)
        except Exception:
            pass


def server_overhead(rounds: int, steps: int, with_mindinsight: bool, section: perf_doc.Section) -> dict[str, float]:
    """Median step time of each variant against plain training; printed, added to ``section`` and returned."""
    import contextlib
    import logging
    import threading

    from lenet import make_dataset, make_model
    from msdebug_hooks.debugger.callback import DebuggerCallback

    logging.getLogger("msdebug_hooks").setLevel(logging.WARNING)
    ours = {n: servers.start_ours(n) for n in (0, len(servers.SERVER_WATCHPOINTS))}
    variants = {"plain": lambda: []}
    for n, (_proc, port) in ours.items():
        variants[f"our server, {n} watchpoints"] = (lambda port=port: [DebuggerCallback("127.0.0.1", port)])
    stack = contextlib.ExitStack()
    stop = threading.Event()
    try:
        if with_mindinsight:
            sys.path.insert(0, str(ROOT / "tests" / "helpers"))
            from mindinsight_server import running_mindinsight

            for n in (0, len(MINDINSIGHT_WATCHPOINTS)):
                mindinsight = stack.enter_context(running_mindinsight())
                threading.Thread(target=drive_mindinsight, args=(mindinsight.rest, n, stop), daemon=True).start()
                variants[f"MindInsight 2.3.1, {n} watchpoints"] = (
                    lambda port=mindinsight.debugger_port: [DebuggerCallback("127.0.0.1", port)])
        models = {name: make_model(0.01)[0] for name in variants}
        datasets = {name: make_dataset(steps, prebuilt=True) for name in variants}
        for name, model in models.items():          # warm up
            model.train(1, datasets[name], callbacks=variants[name](), dataset_sink_mode=False)
        times, _ = interleaved_rounds(variants, models, datasets, rounds, [])
    finally:
        stop.set()
        stack.close()
        for proc, _port in ours.values():
            servers.stop(proc)
    plain = statistics.median(times["plain"])
    print(f"our server vs MindInsight: LeNet-5 batch 32, {rounds} interleaved rounds x {steps} steps per variant; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'variant':<38} {'median step':>12} {'vs plain':>9}")
    ratios, rows = {}, []
    for name in variants:
        median = statistics.median(times[name])
        ratios[name] = median / plain
        print(f"{name:<38} {median * 1e3:>9.3f} ms {median / plain:>8.3f}x")
        rows.append((name, f"{median * 1e3:.3f} ms", f"**x{median / plain:.3f}**"))
    section.add(f"LeNet-5 batch 32, {rounds} interleaved rounds x {steps} steps per variant; load (1 min) "
                f"{perf_doc.load_1m()} at the end. The watchpoints: {', '.join(servers.SERVER_WATCHPOINTS)} on all "
                "weights (none hits); each server runs the training until a hit.", "")
    section.table(["variant", "median step", "x plain"], rows)
    return ratios

