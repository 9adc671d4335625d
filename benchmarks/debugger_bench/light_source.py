"""The light source's cost per step (the debugger client with MindInsight's one ``WaitCMD`` per step, and our
server's free run), on LeNet-5 and on the 25 M-parameter transformer, against plain training and the floors measured
in the same run: one raw grpcio call at the same step end (LeNet), the memory traffic a keeping check cannot avoid
(the transformer, ``traffic``)."""
from __future__ import annotations

import os
import statistics
import time

import grpc

import perf_doc
from debugger_bench import servers, traffic
from debugger_bench.servers import WATCHPOINTS, pb

def marker_class():
    from mindspore.train import Callback

    class Marker(Callback):
        """Step begin and end times (wall)."""

        def __init__(self) -> None:
            super().__init__()
            self.begins: list[float] = []
            self.ends: list[float] = []

        def on_train_step_begin(self, run_context) -> None:
            self.begins.append(time.perf_counter())

        def on_train_step_end(self, run_context) -> None:
            self.ends.append(time.perf_counter())

    return Marker


def hook_classes(spent: list[tuple[float, float]]):
    """Callbacks that record (wall, thread CPU) seconds of their step end in ``spent``: the debugger (timed inside
    its step end, which runs before every other callback's, so marker callbacks cannot bracket it), and the floor
    it is compared with: one raw grpcio unary ``WaitCMD`` call of the same request (a ``Metadata`` of the same size)
    to the same server process over the same loopback, made at the same point of each step."""
    import logging

    from mindspore.train import Callback

    from msdebug_hooks.debugger.callback import DebuggerCallback

    logging.getLogger("msdebug_hooks").setLevel(logging.WARNING)     # no per-train connect lines

    class TimedDebugger(DebuggerCallback):
        def _step_end(self, run_context) -> None:
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                super()._step_end(run_context)
            finally:
                spent.append((time.perf_counter() - wall, time.thread_time() - cpu))

    class RawStepEnd(Callback):
        def __init__(self, port: int) -> None:
            super().__init__()
            self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
            self.call = self.channel.unary_unary("/debugger.EventListener/WaitCMD",
                                                 request_serializer=pb.Metadata.SerializeToString,
                                                 response_deserializer=None)
            self.step = 0

        def on_train_step_end(self, run_context) -> None:
            wall, cpu = time.perf_counter(), time.thread_time()
            self.step += 1
            self.call(pb.Metadata(device_name="0:0", cur_step=self.step, backend="GPU", cur_node=""))
            spent.append((time.perf_counter() - wall, time.thread_time() - cpu))

        def on_train_end(self, run_context) -> None:
            self.channel.close()

    return TimedDebugger, RawStepEnd


def raw_idle(port: int, calls: int = 300) -> float:
    """Median wall seconds of back-to-back raw unary calls, outside training (a quiet process)."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary("/debugger.EventListener/WaitCMD", request_serializer=pb.Metadata.SerializeToString,
                                   response_deserializer=None)
        times = []
        for step in range(calls + 10):
            start = time.perf_counter()
            call(pb.Metadata(device_name="0:0", cur_step=step, backend="GPU", cur_node=""))
            times.append(time.perf_counter() - start)
    return statistics.median(times[10:])


def interleaved_rounds(variants: dict, models: dict, datasets: dict, rounds: int, spent: list, *, start: int = 0,
                       into: tuple[dict, dict] | None = None
                       ) -> tuple[dict[str, list[float]], dict[str, list[tuple[float, float]]]]:
    """Interleaved rounds (rotating order, round ``start`` first): step times (between consecutive step begins, the
    first step of each round dropped) and hook times (the first step of each round dropped) per variant, added to
    ``into`` when given."""
    Marker = marker_class()
    step_times: dict[str, list[float]] = into[0] if into else {name: [] for name in variants}
    hook_times: dict[str, list[tuple[float, float]]] = into[1] if into else {name: [] for name in variants}
    order = list(variants)
    for index in range(start, start + rounds):
        for name in order[index % len(order):] + order[:index % len(order)]:
            outer = Marker()
            spent.clear()
            models[name].train(1, datasets[name], callbacks=[outer, *variants[name]()], dataset_sink_mode=False)
            step_times[name] += [b - a for a, b in zip(outer.begins[1:-1], outer.begins[2:])]
            hook_times[name] += spent[1:] if name != "plain" else [(0.0, 0.0)] * max(len(outer.ends) - 1, 0)
    return step_times, hook_times


def report(title: str, step_times: dict, hook_times: dict, section: perf_doc.Section
           ) -> dict[str, dict[str, float]]:
    """Print the table and add it to ``section``; returns per variant: step, end_to_end (ratio - 1), wall and cpu
    in-hook seconds, and the plain median / fastest steps."""
    plain = statistics.median(step_times["plain"])
    fast = min(step_times["plain"])          # the fastest plain step: the closest to an idle machine
    print(title)
    print(f"plain step: median {plain * 1e3:.3f} ms, fastest {fast * 1e3:.3f} ms "
          f"({len(step_times['plain'])} timed steps per variant)")
    print(f"{'variant':<44} {'median step':>12} {'end-to-end':>11} {'in-hook':>10} {'CPU':>9} {'of median':>10} "
          f"{'of fastest':>11}")
    section.add(f"{title}; plain step: median {plain * 1e3:.3f} ms, fastest {fast * 1e3:.3f} ms "
                f"({len(step_times['plain'])} timed steps per variant).", "")
    results, rows = {}, []
    for name in step_times:
        median = statistics.median(step_times[name])
        wall = statistics.median(h[0] for h in hook_times[name])
        cpu = statistics.median(h[1] for h in hook_times[name])
        results[name] = {"step": median, "end_to_end": median / plain - 1.0, "wall": wall, "cpu": cpu,
                         "plain": plain, "fastest": fast}
        print(f"{name:<44} {median * 1e3:>9.3f} ms {100 * (median / plain - 1):>+10.2f}% {wall * 1e6:>7.0f} us "
              f"{cpu * 1e6:>6.0f} us {100 * wall / plain:>9.2f}% {100 * wall / fast:>10.2f}%")
        rows.append((name, f"{median * 1e3:.3f} ms", f"{100 * (median / plain - 1):+.2f} %", f"{wall * 1e6:.0f} us",
                     f"{cpu * 1e6:.0f} us", f"{100 * wall / plain:.2f} %", f"{100 * wall / fast:.2f} %"))
    section.table(["variant", "median step", "end-to-end", "in-hook", "in-hook CPU", "of the median step",
                   "of the fastest step"], rows)
    return results


def lenet_overhead(rounds: int, steps: int, section: perf_doc.Section) -> tuple[dict[str, dict[str, float]], float]:
    """LeNet-5: plain, the raw call floor, the debugger with MindInsight's one wait per step (no watchpoint, 5 x 8
    weights), and our server's free run (no watchpoint, 5 x 8 weights). Returns the results and the idle raw
    round trip."""
    from lenet import make_dataset, make_model

    continuing = {n: servers.start_server(n) for n in (0, len(WATCHPOINTS))}
    ours = {n: servers.start_ours(n) for n in (0, len(servers.SERVER_WATCHPOINTS))}
    spent: list[tuple[float, float]] = []
    TimedDebugger, RawStepEnd = hook_classes(spent)
    five = len(WATCHPOINTS)
    variants = {
        "plain": lambda: [],
        "raw unary call at step end": lambda: [RawStepEnd(continuing[0][1])],
        "debugger, no watchpoint": lambda: [TimedDebugger("127.0.0.1", continuing[0][1])],
        f"debugger, {five} watchpoints x 8 weights": lambda: [TimedDebugger("127.0.0.1", continuing[five][1])],
        "our server free run, no watchpoint": lambda: [TimedDebugger("127.0.0.1", ours[0][1])],
        f"our server free run, {five} watchpoints": lambda: [TimedDebugger("127.0.0.1", ours[five][1])],
    }
    models = {name: make_model(0.01)[0] for name in variants}
    datasets = {name: make_dataset(steps, prebuilt=True) for name in variants}
    try:
        for name, model in models.items():      # warm up: compile and first steps, not measured
            model.train(1, datasets[name], callbacks=variants[name](), dataset_sink_mode=False)
        step_times, hook_times = interleaved_rounds(variants, models, datasets, rounds, spent)
        idle = raw_idle(continuing[0][1])
    finally:
        for proc, _port in (*continuing.values(), *ours.values()):
            servers.stop(proc)
    import mindspore

    section.add("### LeNet-5", "")
    results = report(f"MindSpore {mindspore.__version__} CPU, LeNet-5 batch 32, {rounds} interleaved rounds x "
                     f"{steps} steps per variant; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs",
                     step_times, hook_times, section)
    section.say(f"raw unary round trip, back to back outside training: median {idle * 1e6:.0f} us")
    return results, idle


def transformer_overhead(rounds: int, steps: int, section: perf_doc.Section) -> dict[str, dict[str, float]]:
    """The 25 M-parameter transformer: plain, the debugger without watchpoints and with 5 on all its parameters
    (one wait per step, as with MindInsight). One compiled model serves every variant (its compile is long)."""
    import tempfile

    from small_transformer import make_transformer_dataset, make_transformer_model, parameter_count

    model, network = make_transformer_model()
    count, tensors = parameter_count(network)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as names:
        names.write("\n".join(p.name for p in network.trainable_params()))
    continuing = {n: servers.start_server(n, names.name) for n in (0, len(WATCHPOINTS))}
    spent: list[tuple[float, float]] = []
    TimedDebugger, _ = hook_classes(spent)
    five = len(WATCHPOINTS)
    variants = {
        "plain": lambda: [],
        "debugger, no watchpoint": lambda: [TimedDebugger("127.0.0.1", continuing[0][1])],
        f"debugger, {five} watchpoints x {tensors} tensors": lambda: [TimedDebugger("127.0.0.1",
                                                                                    continuing[five][1])],
    }
    dataset = make_transformer_dataset(steps)
    floors: list[tuple[float, float]] = []
    moves: list[tuple[float, float]] = []
    try:
        model.train(1, make_transformer_dataset(2), dataset_sink_mode=False)     # compile, not measured
        weights = [p.asnumpy() for p in network.trainable_params()]
        kept = [w.copy() for w in weights]
        spares = [w.copy() for w in weights]       # keep buffers, written before they are timed (as the debugger's)
        collected = None
        kernel = traffic.kernel()
        kernel(weights[0], kept[0], kept[0])                     # compile, not measured

        def measure_floors() -> None:
            floors.extend(traffic.timed(lambda: traffic.numpy_traffic(weights, kept), repeats=3))
            moves.extend(traffic.timed(lambda: traffic.compiled_traffic(kernel, weights, kept, spares), repeats=3))

        for index in range(rounds):    # the floors between the rounds, so that they see the same load
            measure_floors()
            collected = interleaved_rounds(variants, {n: model for n in variants}, {n: dataset for n in variants}, 1,
                                           spent, start=index, into=collected)
        measure_floors()
        step_times, hook_times = collected
        weights = kept = spares = None       # free the copies before the report
    finally:
        for proc, _port in continuing.values():
            servers.stop(proc)
        os.unlink(names.name)
    section.add("### The 25 M-parameter transformer", "")
    results = report(f"small transformer: {count / 1e6:.1f} M parameters in {tensors} tensors, {rounds} interleaved "
                     f"rounds x {steps} steps per variant; load average {os.getloadavg()[0]:.1f}", step_times,
                     hook_times, section)
    (floor_wall, floor_cpu), (move_wall, move_cpu) = traffic.medians(floors), traffic.medians(moves)
    section.say(f"numpy's cost of the traffic of a check that keeps the previous values (np.max over every weight "
                f"and its previous copy, then np.copyto(previous, weight), {2 * count * 4 / 1e6:.0f} MB read, "
                f"{count * 4 / 1e6:.0f} MB written): median {floor_wall * 1e3:.1f} ms wall, {floor_cpu * 1e3:.1f} ms "
                f"CPU ({len(floors)} times, between the rounds)")
    section.say(f"the traffic alone, compiled (each weight and its previous copy read once, the weight streamed into "
                f"a third buffer as the check's keep does, no statistics): median {move_wall * 1e3:.1f} ms wall, "
                f"{move_cpu * 1e3:.1f} ms CPU = {100 * move_wall / min(step_times['plain']):.1f} % of the fastest "
                f"plain step, {100 * move_wall / statistics.median(step_times['plain']):.1f} % of the median one")
    for variant in results.values():
        variant["floor_wall"], variant["floor_cpu"] = floor_wall, floor_cpu
        variant["move_wall"], variant["move_cpu"] = move_wall, move_cpu
    return results

