"""Generate the corpus: every distinct side once, then one directory per case pointing at its two sides.

``generate(root)`` starts three processes at most: one for every PyTorch side (it writes the initial weights first),
then -- as soon as those weights exist -- one for the MindSpore PyNative sides and one for the GRAPH_MODE side, the
two MindSpore processes beside the PyTorch one. The PyNative process ends with the replays: for each case of a
PyNative port against a PyTorch side, the port's layer that compare-layers names is run on PyTorch's captured inputs
(``corpus.port_replay``; it waits for that PyTorch side). Layout::

    root/plan.json                   what each process runs
    root/initial/<arch>.pth          the initial weights every side starts from
    root/sides/<side key>/           capture/ (with inputs), loss/, initial.pth|initial.ckpt, capture.ckpt (ports),
                                     side.json
    root/cases/<case>/case.json      the case (sides, plants, expectations) and its two side directories
    root/cases/<case>/replay_a.json  port against PyTorch: the real replay of the named layer
    root/logs/<process>.log          each process's output
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterable, Mapping, Optional

from corpus.cases import BATCH, CAPTURE_STEP, CASES, LR, STEPS, Case
from corpus.port_replay import REPLAY_FILE

TESTS = Path(__file__).resolve().parent.parent
ROOT = TESTS.parent


def _plan(root: Path, cases: Iterable[Case]) -> dict:
    sides, archs = {}, set()
    for case in cases:
        for side in (case.a, case.b):
            archs.add(side.arch)
            sides.setdefault(side.key, {"key": side.key, "side": side.to_dict(),
                                        "out": str(root / "sides" / side.key)})
    replays = [{"case": case.name, "side": case.a.to_dict(), "a_out": str(root / "sides" / case.a.key),
                "b_out": str(root / "sides" / case.b.key), "out": str(root / "cases" / case.name / REPLAY_FILE)}
               for case in cases if case.replays_port]
    return {"steps": STEPS, "batch": BATCH, "lr": LR, "capture_step": CAPTURE_STEP,
            "initial": {arch: str(root / "initial" / f"{arch}.pth") for arch in sorted(archs)},
            "initial_ready": str(root / "initial" / "ready"), "pytorch_done": str(root / "logs" / "pytorch.done"),
            "sides": list(sides.values()), "replays": replays}


def _start(module: str, args: list, log: Path, env: Mapping[str, str]) -> subprocess.Popen:
    handle = open(log, "w")
    try:
        return subprocess.Popen([sys.executable, "-m", module, *args], stdout=handle, stderr=subprocess.STDOUT,
                                env=dict(env), cwd=str(log.parent.parent))  # MindSpore writes rank_0/ here
    finally:
        handle.close()


def _wait(proc: subprocess.Popen, timeout: float, log: Path) -> None:
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"{proc.args[2]} ran past {timeout:.0f} s; see {log}") from None
    if code != 0:
        raise RuntimeError(f"{proc.args[2]} exited {code}; see {log}:\n{log.read_text()[-3000:]}")


def generate(root: Path, cases: Iterable[Case] = CASES, *, env: Optional[Mapping[str, str]] = None,
             timeout: float = 900) -> dict:
    """Run every side of ``cases`` into ``root`` and write the case directories; returns
    ``{"cases": {name: case_dir}, "wall_s": ..., "cpu_s": ..., "process_cpu_s": {process: s},
    "sides": {key: side.json}}`` (the CPU times: all processes, and each; on an idle machine the wall time is about
    the largest of these, or half their sum on 2 cores when that is more)."""
    root = Path(root)
    cases = list(cases)
    for sub in ("initial", "sides", "cases", "logs"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    plan = _plan(root, cases)
    plan_file = root / "plan.json"
    plan_file.write_text(json.dumps(plan, indent=1) + "\n")
    for marker in (plan["initial_ready"], plan["pytorch_done"]):  # a root used before: wait for this run's
        Path(marker).unlink(missing_ok=True)
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), str(ROOT), env.get("PYTHONPATH", "")]))
    env.setdefault("GLOG_v", "3")
    started, cpu_before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)

    logs = {name: root / "logs" / f"{name}.log" for name in ("pytorch", "mindspore_pynative", "mindspore_graph")}
    torch_proc = _start("corpus.torch_side", [str(plan_file)], logs["pytorch"], env)
    ready = Path(plan["initial_ready"])
    while not ready.exists() and torch_proc.poll() is None:
        time.sleep(0.1)
    if not ready.exists():
        _wait(torch_proc, timeout, logs["pytorch"])
        raise RuntimeError(f"the PyTorch process wrote no initial weights; see {logs['pytorch']}")
    modes = {entry["side"]["mode"] for entry in plan["sides"] if entry["side"]["framework"] == "mindspore"}
    mindspore_procs = [(_start("corpus.mindspore_side", [str(plan_file), mode], logs[f"mindspore_{mode}"], env),
                        logs[f"mindspore_{mode}"]) for mode in sorted(modes)]
    process_cpu = {}
    for proc, log in [(torch_proc, logs["pytorch"])] + mindspore_procs:
        before = _children_cpu()
        _wait(proc, timeout - (time.perf_counter() - started), log)
        process_cpu[log.stem] = _children_cpu() - before  # a child's CPU time counts once it is reaped
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)

    sides = {}
    for entry in plan["sides"]:
        status_file = Path(entry["out"]) / "side.json"
        sides[entry["key"]] = (json.loads(status_file.read_text()) if status_file.exists()
                               else {"status": "failed", "error": "the side did not run (see logs/)"})
    case_dirs = {}
    for case in cases:
        case_dir = root / "cases" / case.name
        case_dir.mkdir(parents=True, exist_ok=True)
        record = case.to_dict()
        record.update(a_dir=str(root / "sides" / case.a.key), b_dir=str(root / "sides" / case.b.key))
        (case_dir / "case.json").write_text(json.dumps(record, indent=1) + "\n")
        case_dirs[case.name] = case_dir
    cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
    return {"cases": case_dirs, "wall_s": time.perf_counter() - started, "cpu_s": cpu, "process_cpu_s": process_cpu,
            "sides": sides}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
