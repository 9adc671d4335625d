"""The dump source's cost (issue 6): LeNet-5 batch 32 in GRAPH_MODE with ``DebuggerCallback(source="dump")``, which
has MindSpore dump every kernel's outputs each step into tmpfs and deletes them after the step. MindSpore reads the
dump config once per process and then dumps every graph run, so each variant runs in a process of its own
(``python -m debugger_bench.dump_source --child V``): plain; dump source without watchpoints; dump source with
``tensor_overflow`` on every operator, set by the server from the graph it received.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

import perf_doc
from debugger_bench import child_command, servers
from debugger_bench.light_source import marker_class


DUMP_VARIANTS = ("plain (GRAPH_MODE)", "dump source, no watchpoint", "dump source, overflow on every op")


def child(variant: int, steps: int, port: int) -> None:
    """One variant in this (fresh) process; prints the step times (s) and the largest scratch size seen."""
    import logging

    import mindspore as ms

    from lenet import make_dataset, make_model
    from msdebug_hooks.debugger.callback import DebuggerCallback

    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    logging.getLogger("msdebug_hooks").setLevel(logging.WARNING)
    Marker = marker_class()
    marker = Marker()
    callbacks = [marker]
    debugger = None
    if variant > 0:
        debugger = DebuggerCallback("127.0.0.1", port, source="dump")
        callbacks.append(debugger)
    peak = [0]

    class Disk(Marker):
        def on_train_step_end(self, run_context) -> None:
            root = debugger._dump.root if debugger is not None else None
            if root is not None:
                peak[0] = max(peak[0], sum(p.stat().st_size for p in root.rglob("*") if p.is_file()))

    model = make_model(0.01)[0]
    model.train(1, make_dataset(steps + 3, prebuilt=True), callbacks=[Disk(), *callbacks], dataset_sink_mode=False)
    times = [b - a for a, b in zip(marker.begins[2:-1], marker.begins[3:])]   # compile and first steps dropped
    session = debugger.session if debugger is not None else None
    watched = sum(len(wp.nodes) for wp in session.watchpoints.values()) if session is not None else 0
    print(json.dumps({"times": times, "peak": peak[0], "watched": watched,
                      "hits": session.hits_sent if session is not None else 0}), flush=True)


def dump_source_overhead(rounds: int, steps: int, section: perf_doc.Section) -> dict[str, float]:
    """Median step time of each dump-source variant against plain GRAPH_MODE training; printed, added to ``section``
    and returned."""
    times: dict[int, list[float]] = {v: [] for v in range(len(DUMP_VARIANTS))}
    peaks: dict[int, int] = {v: 0 for v in range(len(DUMP_VARIANTS))}
    watched: dict[int, tuple[int, int]] = {}
    order = list(range(len(DUMP_VARIANTS)))
    for index in range(rounds):
        for variant in order[index % len(order):] + order[:index % len(order)]:
            server = None
            port = 0
            if variant == 1:
                server, port = servers.start_server(0)
            elif variant == 2:
                server, port = servers.start_ops()
            command, env = child_command("dump_source", "--child", str(variant), "--steps", str(steps), "--port",
                                         str(port))
            try:
                done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
            finally:
                if server is not None:
                    servers.stop(server)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            if done.returncode != 0 or not lines:
                raise RuntimeError(f"variant {DUMP_VARIANTS[variant]!r} failed ({done.returncode}):\n"
                                   f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
            result = json.loads(lines[-1])
            times[variant] += result["times"]
            peaks[variant] = max(peaks[variant], result["peak"])
            watched[variant] = (result["watched"], result["hits"])
    plain = statistics.median(times[0])
    print(f"dump source: LeNet-5 batch 32, GRAPH_MODE, {rounds} rounds x {steps} steps per variant, one process "
          f"per variant and round; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'variant':<38} {'median step':>12} {'ratio':>7} {'peak scratch':>13} {'watched ops':>12} {'hits':>5}")
    ratios, rows = {}, []
    for variant, name in enumerate(DUMP_VARIANTS):
        median = statistics.median(times[variant])
        ratios[name] = median / plain
        print(f"{name:<38} {median * 1e3:>9.3f} ms {median / plain:>6.2f}x {peaks[variant] / 2 ** 20:>10.1f} MiB "
              f"{watched[variant][0]:>12} {watched[variant][1]:>5}")
        rows.append((name, f"{median * 1e3:.3f} ms", f"**x{median / plain:.2f}**",
                     f"{peaks[variant] / 2 ** 20:.1f} MiB", watched[variant][0], watched[variant][1]))
    section.add(f"LeNet-5 batch 32, GRAPH_MODE, {rounds} rounds x {steps} steps per variant, one process per variant "
                f"and round, rotating order; load (1 min) {perf_doc.load_1m()} at the end. \"Peak scratch\": the "
                "largest size of the step's dump seen at a step end. No target: the figure is to be known.", "")
    section.table(["variant", "median step", "x plain", "peak scratch", "watched ops", "hits"], rows)
    return ratios



def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", type=int, required=True, help="the variant (index of DUMP_VARIANTS)")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    child(args.child, args.steps, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
