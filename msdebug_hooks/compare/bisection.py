"""``bisect(a, b)``: from "my two runs differ" to the operator, the step and the source line, in one call.

The chain of the comparison workflow, run end to end on two unmodified MindSpore commands (two scripts, or one
script under two environments, working directories or code versions):

1. both runs train with their per-step loss recorded from outside (:mod:`~msdebug_hooks.compare.run_recording`);
2. the losses are compared per rank (:func:`~msdebug_hooks.compare.loss_diff.compare_losses`, step 1 read as the
   forward comparison it is); the first step where any rank parts is the one to look at;
3. both runs are repeated with a sync dump of that step and the one before (``DumpConfig.around_step``), stopped
   right after it (``StopAtStep``: in a multi-rank job the ranks agree and stop together); the disk guard stops a
   dump that would not fit, and the dump is read only once MindSpore has finished writing it;
4. the dumps are compared (:class:`~msdebug_hooks.compare.dumps.DumpComparer`) and the first operator that parts is
   placed in its step (:mod:`~msdebug_hooks.compare.bisect_answer`).

Every run keeps its output in a log under the work directory; runs that ended well are reused by the next call with
the same work directory (:mod:`~msdebug_hooks.compare.bisect_runs`). What this call created is removed at the end
unless ``keep``; after an error it stays, so the logs can be read and the next call resumes.
"""
from __future__ import annotations

import contextlib
import re
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterator, Optional, Union

from msdebug_hooks.compare import bisect_tolerance, run_recording
from msdebug_hooks.compare.bisect_answer import BisectResult, answer
from msdebug_hooks.compare.bisect_runs import BisectError, RunFailed, RunSpec, Stage, remove_work, run_stage
from msdebug_hooks.compare.dump_wait import GB, DiskGuard, iteration_dirs, size_text, wait_for_dump
from msdebug_hooks.compare.loss import LossFileError, read_losses
from msdebug_hooks.compare.loss_diff import compare_losses
from msdebug_hooks.errors import ConfigError
from msdebug_hooks.validation import optional_real_number, real_number

DEFAULT_WORKDIR = "msdebug-bisect"
DEFAULT_MAX_DUMP_GB = 10.0
DEFAULT_DUMP_WAIT = 60.0
NET_NAME = "Net"
_RECORD = re.compile(r"^loss_rank_(\d+)\.jsonl$")
Progress = Callable[[str], None]
_ABORTED = "stopped because the other run failed"
_BACKWARD = "Gradients/"


def _positive(name: str, value: Optional[float], *, integer: bool = False, allow_none: bool = True) -> None:
    if value is None and allow_none:
        return
    words = f"{'an int' if integer else 'a number'} > 0" + (" (or None)" if allow_none else "")
    real_number(name, value, above=0, allowed=words)
    if integer and int(value) != value:       # a whole float (5.0) is an int here
        raise ConfigError(name, value, words)


@contextlib.contextmanager
def _locked(workdir: Path) -> Iterator[None]:
    """One bisection per work directory at a time (a second one would clear the first one's runs)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no lock
        yield
        return
    with open(workdir / ".lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise ConfigError("--workdir", str(workdir), "a work directory no other msdebug bisect is using") from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class _Bisection:
    def __init__(self, a: RunSpec, b: RunSpec, workdir: Path, *, steps: Optional[int], rtol: Optional[float],
                 forward_rtol: Optional[float], atol: Optional[float], max_dump_gb: float, timeout: Optional[float],
                 jobs: int, dump_wait: float, fresh: bool, progress: Progress) -> None:
        self.a, self.b = a, b
        self.workdir = workdir
        self.steps = steps
        self.tolerance = bisect_tolerance.given(rtol, forward_rtol, atol)   # None: chosen from step 1
        self.max_bytes = max_dump_gb * GB
        self.timeout, self.jobs, self.dump_wait, self.fresh = timeout, jobs, dump_wait, fresh
        self.say = progress
        self.shim = workdir / ".shim"
        self._abort = threading.Event()

    # ---- running ------------------------------------------------------------------------------------------------
    def _run(self, stage: Stage, number: str, *, stop_after: Optional[int] = None, dump: Optional[dict] = None,
             guard: Optional[DiskGuard] = None) -> None:
        what = "training with its loss recorded" if stage.kind == "losses" else \
            f"dump of step{'s' if len(dump['steps']) > 1 else ''} {' and '.join(map(str, dump['steps']))}"
        if not self.fresh and stage.done():
            self.say(f"{number} run {stage.spec.name}: {what}: reused from {stage.directory} "
                     f"(done before, {stage.seconds:.1f} s)")
            return
        self.say(f"{number} run {stage.spec.name}: {what}: {stage.spec.text()}  (output: {stage.log})")
        stage.reset()
        config_path = None
        if dump is not None:
            from msdebug_hooks.config.dump import DumpConfig

            config = DumpConfig.around_step(dump["step"], path=str(stage.dump), net_name=NET_NAME,
                                            saved_data="tensor", trans_flag=True)
            config_path = config.write(stage.directory / "dump_config.json")

        def monitor(finished: bool) -> Optional[str]:
            if self._abort.is_set() and not finished:
                return _ABORTED
            if guard is not None:
                reason = guard.check(finished)
                if reason is not None:
                    return f"disk guard: {reason}"
            if finished and dump is not None:
                wait_for_dump(stage.dump, self.ranks, dump["iterations"], timeout=self.dump_wait,
                              run=stage.spec.name)
            return None

        try:
            run_stage(stage, self.shim, stop_after=stop_after, dump_config=config_path, timeout=self.timeout,
                      monitor=monitor)
        except BaseException:
            self._abort.set()
            if dump is not None:   # a dump cut short is no use (the stage runs again) and may be large
                shutil.rmtree(stage.dump, ignore_errors=True)
            raise
        self.say(f"{number} run {stage.spec.name}: done in {stage.seconds:.1f} s")

    def _both(self, first: Callable[[], None], second: Callable[[], None]) -> None:
        """Run two stages one after the other, or side by side with ``jobs=2`` (the first failure is raised)."""
        self._abort.clear()
        if self.jobs < 2:
            first()
            second()
            return
        pool = ThreadPoolExecutor(max_workers=2)
        try:
            futures = [pool.submit(first), pool.submit(second)]
            failures = [error for error in (f.exception() for f in futures) if error is not None]
        except BaseException:   # Ctrl-C here: the runs' monitors stop both within a poll
            self._abort.set()
            raise
        finally:
            pool.shutdown(wait=True)
        if failures:   # the run that failed first, not the one stopped because of it
            raise next((e for e in failures if _ABORTED not in str(e)), failures[0])

    def _limit(self, rest: str = "") -> str:
        return f"--max-dump-gb {self.max_bytes / GB:g}" + (f" {rest}" if rest else "")

    # ---- the chain ----------------------------------------------------------------------------------------------
    def _stage(self, spec: RunSpec, kind: str, name: str, settings: dict) -> Stage:
        return Stage(spec, kind, self.workdir / spec.name.lower() / name, settings)

    def _ranks(self, stage: Stage) -> list[int]:
        try:
            ranks = sorted(int(m[1]) for m in (_RECORD.match(p.name) for p in stage.records.iterdir()) if m)
        except OSError:
            ranks = []
        if not ranks:
            raise RunFailed(stage.spec.name, stage.log,
                            f"run {stage.spec.name} ({stage.spec.text()}) ended well but recorded no loss: it trains "
                            f"without Model.train/Model.fit (a hand-written loop: give it a "
                            f"LossRecorder or LossWriter writing to ${run_recording.RECORD_LOSS}), or its Python "
                            f"could not import msdebug_hooks; its output: {stage.log}")
        return ranks

    def _compare_losses(self, stage_a: Stage, stage_b: Stage, result: BisectResult) -> None:
        ranks_a, ranks_b = self._ranks(stage_a), self._ranks(stage_b)
        if ranks_a != ranks_b:
            raise BisectError(f"run A recorded the losses of ranks {ranks_a}, run B of ranks {ranks_b}: the runs "
                              f"must have the same ranks (outputs: {stage_a.log}, {stage_b.log})")
        self.ranks = ranks_a
        series = {rank: (read_losses(stage_a.records, rank=rank, allow_nonfinite=True),
                         read_losses(stage_b.records, rank=rank, allow_nonfinite=True)) for rank in ranks_a}
        if self.tolerance is None:
            self.tolerance = bisect_tolerance.from_step_one(list(series.values()))
        tol = self.tolerance
        result.tolerance = tol.rule
        for rank, (series_a, series_b) in series.items():
            try:
                comparison = compare_losses(series_a, series_b, rtol=tol.rtol, atol=tol.atol,
                                            forward_rtol=tol.forward_rtol)
            except LossFileError:
                comparison = compare_losses(series_a, series_b, rtol=tol.rtol, atol=tol.atol,
                                            forward_rtol=tol.forward_rtol, common_steps=True)
                result.notes.append(f"rank {rank}: run A recorded steps {series_a.steps[0]}..{series_a.steps[-1]}, "
                                    f"run B {series_b.steps[0]}..{series_b.steps[-1]}: only the "
                                    f"{len(comparison.steps)} steps both ran are compared")
            result.losses[rank] = comparison.as_dict()
            first = comparison.first_parted
            if first is not None and (result.step is None or first.step < result.step):
                result.step, result.rank = first.step, rank
        if result.step is None and result.notes:
            result.notes.append("the runs ran a different number of steps: they differ, though not in a step both "
                                "ran")

    def _dump(self, step: int, number: tuple[str, str]) -> tuple[Stage, Stage, dict]:
        from msdebug_hooks.config.dump import DumpConfig

        iterations = [int(i) for i in DumpConfig.around_step(step).iteration.split("|")]
        dump = {"step": step, "iterations": iterations, "steps": [i + 1 for i in iterations], "net": NET_NAME}
        stages = [self._stage(spec, "dump", f"dump_step_{step}", dict(dump, stop_after=step, steps_limit=self.steps))
                  for spec in (self.a, self.b)]
        if self.jobs >= 2:
            guards = [DiskGuard(s.dump, iterations, runs=2, max_bytes=self.max_bytes, limit=self._limit())
                      for s in stages]
            self._both(lambda: self._run(stages[0], number[0], stop_after=step, dump=dump, guard=guards[0]),
                       lambda: self._run(stages[1], number[1], stop_after=step, dump=dump, guard=guards[1]))
            return stages[0], stages[1], dump
        first_done = not self.fresh and stages[0].done()
        guard_a = None if first_done else DiskGuard(stages[0].dump, iterations, runs=2, max_bytes=self.max_bytes,
                                                    limit=self._limit())
        self._run(stages[0], number[0], stop_after=step, dump=dump, guard=guard_a)
        used = _size(stages[0].dump)
        step_bytes = guard_a.step_bytes if guard_a and guard_a.step_bytes else _first_step_bytes(stages[0].dump,
                                                                                                iterations[0])
        left = self._limit(f"less run A's dump ({size_text(used)}): {size_text(self.max_bytes - used)}")
        guard_b = None
        if self.fresh or not stages[1].done():
            reason = DiskGuard(stages[1].dump, iterations, runs=1, max_bytes=self.max_bytes - used,
                               limit=left).check_known(step_bytes)
            if reason is not None:
                raise RunFailed("B", None, f"run B's dump was not started: disk guard: {reason}")
            guard_b = DiskGuard(stages[1].dump, iterations, runs=1, max_bytes=self.max_bytes - used, limit=left)
        self._run(stages[1], number[1], stop_after=step, dump=dump, guard=guard_b)
        return stages[0], stages[1], dump

    def run(self) -> BisectResult:
        result = BisectResult(self.a.text(), self.b.text(), str(self.workdir), 0)
        run_recording.write_shim(self.shim)
        settings = {"steps": self.steps}
        train_a = self._stage(self.a, "losses", "train", settings)
        train_b = self._stage(self.b, "losses", "train", settings)

        def first() -> None:
            self._run(train_a, "[1/4]", stop_after=self.steps)
            self._ranks(train_a)     # a run that recorded no loss (a hand-written loop) is refused before B runs

        self._both(first, lambda: self._run(train_b, "[2/4]", stop_after=self.steps))
        self._compare_losses(train_a, train_b, result)
        if not self._dump_and_answer(result, ("[3/4]", "[4/4]")):
            return result
        if not result.answers and self.tolerance.kind == bisect_tolerance.NOISE and result.step == 1:
            # rule 2: step 1 differs by the runs' own noise alone; judge the later steps against that
            self.say("step 1's dump shows no operator beyond float32 noise: the runs are not reproducible; "
                     "comparing the later steps' losses with rtol")
            self.tolerance = bisect_tolerance.after_noise()
            result.step = result.rank = None
            result.notes.clear()
            self._compare_losses(train_a, train_b, result)
            self._dump_and_answer(result, ("[5/6]", "[6/6]"))
        return result

    def _dump_and_answer(self, result: BisectResult, numbers: tuple[str, str]) -> bool:
        """Dump the step where the losses part and answer; False when they part nowhere (exit 0, or 1 for runs of
        another length)."""
        if result.step is None:
            result.exit_code = 1 if result.notes else 0
            self.say(f"{numbers[0]} the losses agree on every step compared: no dump needed")
            return False
        result.exit_code = 1
        self.say(f"the losses part at step {result.step} (rank {result.rank}): dumping it in both runs")
        stage_a, stage_b, dump = self._dump(result.step, numbers)
        result.dumped_steps = dump["steps"]
        result.dump_bytes = _size(stage_a.dump)
        self.say("comparing the dumps operator by operator")
        self._answer(stage_a, stage_b, dump, result)
        return True

    def _answer(self, stage_a: Stage, stage_b: Stage, dump: dict, result: BisectResult) -> None:
        from msdebug_hooks.compare.dumps import DumpComparer

        comparison = DumpComparer(stage_a.dump, stage_b.dump, iterations=dump["iterations"],
                                  exact=self.tolerance.exact_dumps).compare(progress=False)
        result.pairs_compared = comparison.compared
        if not any(p.node_a.startswith(_BACKWARD) or f"/{_BACKWARD}" in p.node_a for p in comparison.pairs):
            result.caveat = ("the dumps hold no backward pass (no operator under Gradients/): the script trains in "
                             "PyNative mode, where MindSpore 2.10 dumps only the optimizer's graph, so the forward "
                             "and backward passes were not compared; train in GRAPH_MODE "
                             "(ms.set_context(mode=ms.GRAPH_MODE)) to see the operator behind the difference")
        for rank in self.ranks:
            seen = {p.iteration for p in comparison.pairs if p.rank_a == rank and p.comparison.comparable}
            parted = {d.iteration for d in comparison.divergences if d.rank_a == rank}
            first = next((d for d in comparison.divergences if d.rank_a == rank), None)
            if first is not None:
                result.answers.append(answer(first, dump["iterations"], seen - parted, comparison.pairs))
                within = [p for p in first.outputs if p.comparison.comparable and p.error() <= p.floor()]
                if self.tolerance.exact_dumps and len(within) == len(first.outputs):
                    result.notes.append(
                        f"rank {rank}: {first.op_type} differs by {first.error:.1e} (|a-b|/|b|), within the float32 "
                        f"noise floor ({within[0].floor():.0e}): compared bit for bit because step 1 is, but if "
                        f"the runs are not reproducible past step 1 (atomics on a GPU), --rtol 1e-3 judges them "
                        f"against the noise instead")
        if not result.answers:
            unreadable = comparison.counts().get("not comparable", 0)
            result.notes.append(
                f"the dumps of step(s) {' and '.join(map(str, dump['steps']))} agree in every operator compared"
                + (f" ({unreadable} pair(s) could not be compared)" if unreadable else "")
                + ": the difference is outside the dumped graph (the data pipeline, code run in PyNative mode, "
                  "which MindSpore 2.10 does not dump, or a change after the step); the step stands")


def _size(path: Path) -> int:
    from msdebug_hooks.compare.dump_wait import _tree_size

    return _tree_size(path)


def _first_step_bytes(dump: Path, iteration: int) -> int:
    return sum(_size(d) for (_rank, it), dirs in iteration_dirs(dump).items() if it == iteration for d in dirs)


def bisect(a: Union[RunSpec, str], b: Union[RunSpec, str], workdir: Union[str, Path, None] = None, *,
           steps: Optional[int] = None, rtol: Optional[float] = None, forward_rtol: Optional[float] = None,
           atol: Optional[float] = None, max_dump_gb: float = DEFAULT_MAX_DUMP_GB, timeout: Optional[float] = None,
           jobs: int = 1, dump_wait: float = DEFAULT_DUMP_WAIT, keep: bool = False, fresh: bool = False,
           progress: Optional[Progress] = None) -> BisectResult:
    """Find where run ``a`` (under test) parts from the reference run ``b``: step, phase, cell, operator, source.

    Args:
        a, b: the two runs (:class:`RunSpec`, or a command line string).
        workdir: where runs, logs and dumps go (default ``./msdebug-bisect``); runs done there before are reused.
        steps: stop both runs after this many steps (default: let the scripts run to their end).
        rtol, forward_rtol, atol: the loss tolerances of ``compare_losses`` (step 1: ``forward_rtol``); none given
            (default): the same-framework rule of :mod:`~msdebug_hooks.compare.bisect_tolerance` (bit-equal when
            step 1 is, else step 1's dump tells a change from the runs' noise); one given: compare-loss's defaults
            for the others.
        max_dump_gb: the most the dumps of both runs may take; a dump estimated larger is stopped (exit 2).
        timeout: seconds any one run may take.
        jobs: 2 runs A and B side by side.
        dump_wait: seconds to wait for MindSpore to finish writing a dump after its run ended.
        keep: keep the work directory (runs, logs, dumps) after an answer; after an error it is always kept.
        fresh: rerun everything, reusing nothing.
        progress: called with each progress line (default: none).

    Returns a :class:`BisectResult` (``exit_code`` 0: no difference, 1: the runs part). Raises
    :class:`BisectError` (a run crashed, recorded nothing, or its dump could not be made or read) and
    :class:`ConfigError` for bad arguments; the work directory is kept then.
    """
    a = a if isinstance(a, RunSpec) else RunSpec("A", a)
    b = b if isinstance(b, RunSpec) else RunSpec("B", b)
    _positive("steps", steps, integer=True)
    _positive("max_dump_gb", max_dump_gb, allow_none=False)
    _positive("timeout", timeout)
    _positive("dump_wait", dump_wait, allow_none=False)
    if jobs not in (1, 2):
        raise ConfigError("jobs", jobs, "1 (one run at a time) or 2 (A and B side by side)")
    for name, value in (("rtol", rtol), ("forward_rtol", forward_rtol), ("atol", atol)):
        optional_real_number(name, value, minimum=0, allowed="a finite number >= 0 (or None)")
    a.check()
    b.check()
    directory = Path(workdir if workdir is not None else DEFAULT_WORKDIR).expanduser().absolute()
    if directory.exists() and not directory.is_dir():
        raise ConfigError("workdir", str(directory), "a directory (or a path where one can be made)")
    created = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda line: None)
    with _locked(directory):
        result = _Bisection(a, b, directory, steps=steps, rtol=rtol, forward_rtol=forward_rtol, atol=atol,
                            max_dump_gb=max_dump_gb, timeout=timeout, jobs=jobs, dump_wait=dump_wait, fresh=fresh,
                            progress=say).run()
    result.kept = keep
    if not keep:
        remove_work(directory, created, ("a", "b", ".shim", ".lock"))
        say(f"removed {directory if created else 'the runs and dumps in ' + str(directory)} (--keep keeps them)")
    return result
