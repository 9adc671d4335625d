"""``first_nan(command)``: run an unmodified training twice and name the operator that made its first NaN/Inf.

1. The check run: the training with the probe attached (``probe``: the loss each step, or the weights where no loss
   is seen), stopped at the first non-finite step N (or after ``steps``).
2. The rerun, to step N and no further: a sync dump of steps N-1 and N (``DumpConfig.around_step``: where MindSpore
   compiles the step, GRAPH_MODE or ``@jit``, it holds every operator) and, in PyNative mode, the user's lines
   followed in those steps (``line_trace``), with the batch and the weights checked at each step end. The rerun must
   reach the same first non-finite step; when it does not the data or the training are not deterministic and the
   answer says so.
3. The producer: the first operator of the dump whose inputs are finite and output is not (``dump_origin``), else the
   traced line and operator, else the batch ("the data of step N") or the gradients the backward pass made.

Runs reuse ``msdebug bisect``'s machinery (``compare.bisect_runs``: a run in its own session with its log, stopped
as a whole tree; ``compare.dump_wait``: the disk guard and the wait for a complete dump).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable, Optional, Union

from msdebug_hooks.compare import run_recording
from msdebug_hooks.compare.bisect_runs import BisectError, RunFailed, RunSpec, Stage, remove_work, run_stage
from msdebug_hooks.compare.dump_wait import GB, DiskGuard, iteration_dirs, wait_for_dump
from msdebug_hooks.errors import ConfigError, DumpError
from msdebug_hooks.nan import attach
from msdebug_hooks.nan.result import FirstNanResult, Origin
from msdebug_hooks.validation import real_number, whole_number

DEFAULT_WORKDIR = "msdebug-first-nan"
DEFAULT_MAX_DUMP_GB = 10.0
NET_NAME = "Net"
Progress = Callable[[str], None]


def _probes(directory: Path) -> dict[int, dict]:
    found = {}
    for path in sorted(directory.glob("probe_rank_*.json")):
        try:
            found[int(path.stem.rsplit("_", 1)[1])] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
    return found


def _first(probes: dict[int, dict]) -> tuple[Optional[int], Optional[int]]:
    """(step, rank) of the earliest non-finite step over the ranks."""
    hits = [(p["first_bad"], rank) for rank, p in probes.items() if p.get("first_bad")]
    return min(hits) if hits else (None, None)


def first_nan(command: Union[str, list], workdir: Union[str, Path, None] = None, *, cwd: Optional[str] = None,
              steps: Optional[int] = None, keep: bool = False, max_dump_gb: float = DEFAULT_MAX_DUMP_GB,
              timeout: Optional[float] = None, dump_wait: float = 60.0,
              progress: Optional[Progress] = None) -> FirstNanResult:
    """Find the first NaN/Inf of a training and the operator that produced it.

    Args:
        command: the training as typed (``"python train.py --lr 1"``), or an argument list; run unmodified.
        workdir: runs, logs and the dump (default ``./msdebug-first-nan``); removed afterwards unless ``keep``.
        steps: check at most this many steps (default: the script's own length).
        max_dump_gb: the most the rerun's dump may take (estimated from its first dumped step; then it is stopped).
        timeout: seconds one run may take.

    Returns a :class:`FirstNanResult`: ``exit_code`` 1 with ``origin`` when a NaN/Inf appeared, 0 when none did in
    ``steps_checked`` steps. Raises ``BisectError`` (a run crashed: its log is named) and ``ConfigError``.
    """
    if steps is not None:
        whole_number("steps", steps, minimum=1, allowed="None or an int >= 1")
    real_number("max_dump_gb", max_dump_gb, above=0, allowed="a number of GB > 0")
    if timeout is not None:
        real_number("timeout", timeout, above=0, allowed="None or seconds > 0")
    spec = RunSpec("first-nan", command, cwd, {"ENABLE_MS_DEBUGGER": None, "MS_DEBUGGER_SOURCE": None})
    spec.check()
    directory = Path(workdir if workdir is not None else DEFAULT_WORKDIR).expanduser().absolute()
    if directory.exists() and not directory.is_dir():
        raise ConfigError("workdir", str(directory), "a directory (or a path where one can be made)")
    created = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda line: None)
    result = FirstNanResult(spec.text(), workdir=str(directory))
    shim = directory / ".shim"
    run_recording.write_shim(shim, f"{attach.__name__}:install_from_env")
    check = Stage(spec, "losses", directory / "check", {"steps": steps})
    say(f"[1/2] training with a NaN/Inf check each step: {spec.text()}  (output: {check.log})")
    _run(check, shim, dict(attach.environment(check.directory / "probe", capture=None, steps=steps)), timeout,
         result.notes)
    result.seconds["check"] = round(check.seconds, 2)
    probes = _probes(check.directory / "probe")
    result.seconds["probe_in_steps"] = round(max((p.get("check_seconds", 0.0) for p in probes.values()), default=0), 4)
    if not probes:
        raise BisectError(f"the training ran ({check.log}) but no training step reached the check: neither "
                          f"Model.train nor a loop over an nn.Optimizer was seen")
    step, rank = _first(probes)
    result.steps_checked = max(p.get("steps", 0) for p in probes.values())
    if step is None:
        say(f"no NaN/Inf in {result.steps_checked} step(s)")
        _finish(result, directory, created, keep)
        return result
    result.exit_code, result.first_bad_step, result.rank = 1, step, rank
    how = probes[rank].get("how")
    say(f"step {step} has a non-finite {how} (rank {rank}); rerunning to it with steps {max(1, step - 1)}-{step} "
        f"looked at operator by operator")
    result.origin = _rerun(spec, directory, shim, step, rank, result, max_dump_gb, timeout, dump_wait, say)
    if result.origin is not None and result.origin.step < step:
        # the values went non-finite a step before the loss showed it (a forward Inf a saturating activation
        # swallowed, a gradient that broke the update): the first non-finite step is the origin's
        result.loss_step, result.first_bad_step = step, result.origin.step
    _finish(result, directory, created, keep)
    return result


def _run(stage: Stage, shim: Path, variables: dict, timeout: Optional[float], notes: list, *,
         dump_config: Optional[Path] = None, guard: Optional[DiskGuard] = None) -> None:
    stage.reset()
    spec = stage.spec
    stage.spec = RunSpec(spec.name, spec.command, spec.cwd, {**spec.env, **variables}, spec.shell)

    def monitor(finished: bool) -> Optional[str]:
        if guard is not None:
            reason = guard.check(finished)
            if reason is not None:
                return f"disk guard: {reason}"
        return None

    try:
        run_stage(stage, shim, dump_config=dump_config, timeout=timeout, monitor=monitor)
    except RunFailed as exc:
        # a script that ends itself on the NaN (MindSpore's LossMonitor raises on a NaN loss, an assert of the
        # user's) still ran the step the probe recorded: its answer stands; any other failure ends first-nan
        if " exited with status " not in str(exc) or _first(_probes(stage.directory / "probe"))[0] is None:
            raise
        status = str(exc).split(" exited with status ", 1)[1].split(" ", 1)[0]
        notes.append(f"the script ended with exit status {status} after its first non-finite step (an exception "
                     f"such as LossMonitor's 'loss is NAN or INF'; --keep keeps its log)")
    finally:
        stage.spec = spec


def _rerun(spec: RunSpec, directory: Path, shim: Path, step: int, rank: int, result: FirstNanResult,
           max_dump_gb: float, timeout: Optional[float], dump_wait: float, say: Progress) -> Optional[Origin]:
    from msdebug_hooks.config.dump import DumpConfig
    from msdebug_hooks.nan.dump_origin import find_origin
    from msdebug_hooks.nan.trace_origin import origin_from_probe

    stage = Stage(spec, "dump", directory / "rerun", {"step": step})
    config = DumpConfig.around_step(step, path=str(stage.dump), net_name=NET_NAME, saved_data="tensor",
                                    trans_flag=True)
    iterations = [int(i) for i in config.iteration.split("|")]
    guard = DiskGuard(stage.dump, iterations, runs=1, max_bytes=max_dump_gb * GB,
                      limit=f"--max-dump-gb {max_dump_gb:g}")
    started = time.monotonic()
    stage.directory.mkdir(parents=True, exist_ok=True)
    config_path = config.write(directory / "dump_config.json")
    say(f"[2/2] rerun to step {step}  (output: {stage.log})")
    _run(stage, shim, dict(attach.environment(stage.directory / "probe", capture=step, steps=None)), timeout,
         [], dump_config=config_path, guard=guard)
    result.seconds["rerun"] = round(time.monotonic() - started, 2)
    probes = _probes(stage.directory / "probe")
    again, _ = _first(probes)
    if again != step:
        result.notes.append(f"the rerun's first non-finite step is {again or 'none'}, not {step}: the training is "
                            f"not deterministic (random data order, seeds, dropout); the answer below is the rerun's")
    present = sorted({it for (r, it) in iteration_dirs(stage.dump) if r == rank and it in iterations})
    origin = None
    if present:
        try:
            wait_for_dump(stage.dump, [rank], present, timeout=dump_wait, run="rerun")
            origin = find_origin(stage.dump, present, rank=rank)
        except DumpError as exc:
            result.notes.append(f"the rerun's dump could not be read: {exc}")
    probe = probes.get(rank, {})
    traced = origin_from_probe(probe, rank)
    if origin is None or (origin.kind == "before" and traced is not None):
        origin = traced
    elif traced is not None and traced.kind == "data" and traced.step <= origin.step:
        origin = traced
    if origin is None:
        result.notes.append("no operator of the steps looked at produced the NaN/Inf: in PyNative mode only the "
                            "user's own lines are followed; train the step under @mindspore.jit or GRAPH_MODE to "
                            "see every operator in the dump")
    return origin


def _finish(result: FirstNanResult, directory: Path, created: bool, keep: bool) -> None:
    result.kept = keep
    if keep:
        return
    remove_work(directory, created, ("check", "rerun", ".shim", "dump_config.json"))
