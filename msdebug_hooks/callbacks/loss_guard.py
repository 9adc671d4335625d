"""Catch a NaN/Inf (or exploding) loss at the exact step, stop cleanly, and hand over the rerun recipe.

MindSpore's ``LossMonitor`` misses NaN when the train cell returns a tuple (the loss-scale pattern) and, when it does
fire, raises so the other callbacks' ``on_train_end`` never run. ``LossGuard`` reads the loss from any output, stops
through ``request_stop()`` by default, records where it failed, can keep the last good parameters, and prints what to
rerun: a dump of just the failing iterations plus ``StopAtStep`` at the failure. Next to a ``LossMonitor`` it records
all that before the monitor can raise, and can keep it from raising (``guard_first.py``).
"""
from __future__ import annotations

import collections
import dataclasses
import math
import os
import statistics
from pathlib import Path
from typing import Any, Optional, Union

from mindspore.train import Callback

from msdebug_hooks._log import get_logger
from msdebug_hooks.stop_agreement import AgreedStop, StopDecision, stop_line
from msdebug_hooks.training_loop import format_loss, overflow_flag, request_stop, step_loss
from msdebug_hooks.callbacks.loss_guard_recipe import rerun_recipe
from msdebug_hooks.callbacks.guard_first import GUARD_RANK, go_first, monitor_line, monitor_place, undo
from msdebug_hooks.callbacks.stop_at_step import StopAtStep
from msdebug_hooks.conditions import TensorOverflowCondition
from msdebug_hooks.errors import ConfigError
from msdebug_hooks.validation import optional_real_number, optional_whole_number, whole_number
from msdebug_hooks.rank import rank_id

_LOG = get_logger("callbacks.loss_guard")

PathLike = Union[str, "os.PathLike[str]"]


class LossGuardError(RuntimeError):
    """Raised by ``LossGuard(raise_error=True)``; carries ``step`` (1-based), ``epoch``, ``reason`` and ``loss``."""

    def __init__(self, message: str, *, step: int, epoch: int, reason: str, loss: Optional[float]) -> None:
        super().__init__(message)
        self.step, self.epoch, self.reason, self.loss = step, epoch, reason, loss


@dataclasses.dataclass(frozen=True)
class LossGuardFailure:
    """What a guard caught: the 1-based ``step``, its ``epoch``, this rank's ``loss``, the ``reason`` (naming the
    failing ranks in a multi-rank job) and those ``ranks``."""

    step: int
    epoch: int
    loss: Optional[float]
    reason: str
    ranks: tuple[int, ...] = ()

    def describe(self) -> str:
        return stop_line("LossGuard", self.reason, self.epoch, self.step)


class LossGuard(AgreedStop, Callback):
    """Stop training at the first step whose loss is NaN/Inf (or above ``threshold``, or a sudden spike).

    The loss is the network output itself or, for tuple/list outputs, their first element, so the loss-scale cells'
    ``(loss, overflow, scale)`` outputs are guarded too. An overflow flag with a finite loss is *not* a failure:
    loss scaling skips that update and lowers the scale, which is its normal way of working. A non-finite loss is a
    failure even with the flag set (the forward pass itself broke); ``overflow_patience=N`` also stops after N
    overflowing steps in a row (a scale that never recovers).

    By default the guard stops gracefully through ``run_context.request_stop()``: training ends after the failing
    step and every callback's ``on_train_epoch_end`` / ``on_train_end`` still runs. ``raise_error=True`` raises
    :class:`LossGuardError` at once instead; MindSpore then skips all other end hooks (no final checkpoint, no
    cleanup), which is what you want when such a hook would overwrite a good backup with a broken one.

    On a hit the guard records one :class:`LossGuardFailure` in ``failure`` (read field by field as ``failed_step``,
    1-based ``cur_step_num``, ``failed_epoch``, ``failed_loss`` and ``reason``), logs one line saying why it
    stopped, and logs the rerun recipe: ``guard.dump_config(path)`` (a ``DumpConfig`` for the iteration before and
    the failing one) and ``guard.stop_at_step()``. Each run (``on_train_begin``) starts afresh.

    ``save_last_good=directory`` writes a checkpoint, atomically, named with the rank and the step the parameters
    belong to. Without ``keep_previous`` it holds the parameters as they are when the failure is seen, i.e. after
    the failing step's update: good when loss scaling skipped that update, but usually already corrupted otherwise,
    so the guard refuses to write parameters that hold NaN/Inf and says so. ``keep_previous=True`` keeps a host copy
    of every parameter of the train network (weights and optimizer state) after each good step, so the file holds
    the state the failing step started from; it costs one device-to-host copy of all parameters per step (it grows
    with the parameter count, and needs host memory for one more copy of the training state). The copy is taken at
    ``on_train_step_begin``; in a custom loop driven by ``DebugSession`` without ``step_begin()`` it is taken after
    each step the guard saw as good.

    The per-step check itself is one Python float test on a loss read once per step with ``.item()`` (cached on
    ``cb_params`` and shared with ``StopAtTime`` / ``StopAtStep``). In a multi-rank job each rank checks its own loss
    and the ranks agree after every step (``stop_agreement.py``: one tiny all-reduce per step for all of our
    callbacks together): a NaN seen by rank 1 alone stops every rank after that same step, and on every rank the
    guard records ``failed_step`` and ``failed_ranks`` (the ranks whose loss was bad at that step, e.g. ``[1]``),
    names them in its messages, saves its last good parameters and, with ``raise_error=True``, raises.

    Next to MindSpore's ``LossMonitor``, which raises ``ValueError`` on a NaN/Inf loss in the same step end, the
    guard checks each step before every callback listed ahead of it, so its record (step, reason, last good
    checkpoint, recipe) is complete before any of them can raise, and says in one line what ``LossMonitor`` will do;
    ``quiet_loss_monitor=True`` makes ``LossMonitor`` leave out the failing step, so training stops cleanly
    (``guard_first.py``; one rank only: several ranks keep the list order of their agreement).

    Args:
        raise_error: raise :class:`LossGuardError` instead of stopping gracefully.
        threshold: also fail when the loss is above this value.
        spike_factor: also fail when the loss exceeds ``spike_factor`` times the median (or mean) of the last
            ``spike_window`` finite losses; needs at least ``min(5, spike_window)`` of them. Meant for positive losses.
        spike_window: how many recent losses the spike reference is computed from (>= 2).
        spike_reference: ``"median"`` (robust to single outliers, default) or ``"mean"``.
        overflow_patience: stop after this many consecutive loss-scale overflow steps (None: never).
        save_last_good: directory for the last good parameters (None: do not save).
        keep_previous: keep a copy of the parameters after every good step (see above); needs ``save_last_good``.
        dump_path: ``path`` of the dump config in the printed recipe and default for :meth:`dump_config`.
        quiet_loss_monitor: every ``LossMonitor`` in the list skips the step the guard failed (no ``ValueError``).

    Example (``examples/demo.py`` runs the whole loop):
        >>> guard = LossGuard(save_last_good="ckpt", keep_previous=True)
        >>> model.train(10, dataset, callbacks=[guard])
        >>> if guard.failed_step:        # MindSpore reads the dump setting once per process: rerun in a new one
        ...     guard.dump_config("/tmp/dump").write("/tmp/dump.json")
        ...     print(guard.stop_at_step())   # the rerun: DumpConfig.load("/tmp/dump.json").apply(), then
        ...                                   # model.train(10, dataset, callbacks=[StopAtStep(N)])
    """

    step_end_rank = GUARD_RANK          # runs first, behind the debugger (``step_order.run_first``)

    def __init__(self, *, raise_error: bool = False, threshold: Optional[float] = None,
                 spike_factor: Optional[float] = None, spike_window: int = 20, spike_reference: str = "median",
                 overflow_patience: Optional[int] = None, save_last_good: Optional[PathLike] = None,
                 keep_previous: bool = False, dump_path: Optional[PathLike] = None,
                 quiet_loss_monitor: bool = False) -> None:
        super().__init__()
        _check_options(threshold, spike_factor, spike_window, spike_reference, overflow_patience,
                       save_last_good, keep_previous)
        self.raise_error = bool(raise_error)
        self.threshold = None if threshold is None else float(threshold)
        self.spike_factor = None if spike_factor is None else float(spike_factor)
        self.spike_window = spike_window
        self.spike_reference = spike_reference
        self.overflow_patience = overflow_patience
        self.save_last_good = None if save_last_good is None else Path(save_last_good).expanduser()
        self.keep_previous = bool(keep_previous)
        self.dump_path = None if dump_path is None else str(dump_path)
        self.quiet_loss_monitor = bool(quiet_loss_monitor)
        self._wrapped: list = []
        self._reset()

    def _reset(self) -> None:
        self.failure: Optional[LossGuardFailure] = None
        self.last_good_checkpoint: Optional[Path] = None
        self._local_failure: Optional[tuple[int, float, str]] = None    # (step, loss, reason) seen on this rank
        self._begun_step: Optional[int] = None
        self._history: collections.deque = collections.deque(maxlen=self.spike_window)
        self._overflow_run = 0
        self._snapshot: Optional[list] = None
        self._snapshot_step = 0
        undo(self._wrapped, self._step_end_first)     # a training that raised left its wrappers: a new list now
        self._wrapped = []
        self._monitor_place: Optional[str] = None    # "before" / "after": where a LossMonitor is listed
        self._seen_step: Optional[int] = None

    # the failure, field by field (None / [] until the guard fires) -------------------------------------------
    @property
    def failed_step(self) -> Optional[int]:
        return None if self.failure is None else self.failure.step

    @property
    def failed_epoch(self) -> Optional[int]:
        return None if self.failure is None else self.failure.epoch

    @property
    def failed_loss(self) -> Optional[float]:
        return None if self.failure is None else self.failure.loss

    @property
    def reason(self) -> Optional[str]:
        return None if self.failure is None else self.failure.reason

    @property
    def failed_ranks(self) -> list[int]:
        return [] if self.failure is None else list(self.failure.ranks)

    # rerun recipe --------------------------------------------------------------------------------------------
    def _require_failure(self, what: str) -> int:
        if self.failed_step is None:
            raise RuntimeError(f"LossGuard.{what}(): the guard has not fired (failed_step is None); "
                               "it has a failing step to rerun only after it caught a bad loss")
        return self.failed_step

    def dump_config(self, path: Optional[PathLike] = None, **fields: Any):
        """``DumpConfig.around_step(failed_step, path=path, **fields)``: a dump of the step before the failure and
        the failing step (0-based iterations ``N-2|N-1``). Apply it in a fresh process before training."""
        from msdebug_hooks.config.dump import DumpConfig

        step = self._require_failure("dump_config")
        path = self.dump_path if path is None else path
        if path is not None:
            fields["path"] = str(path)
        return DumpConfig.around_step(step, **fields)

    def stop_at_step(self) -> StopAtStep:
        """``StopAtStep(failed_step)``: the rerun stops right after the failing step."""
        return StopAtStep(self._require_failure("stop_at_step"))

    def rerun_callbacks(self) -> list:
        """The callbacks a rerun needs: ``[StopAtStep(failed_step)]``."""
        return [self.stop_at_step()]

    # hooks ---------------------------------------------------------------------------------------------------
    def on_train_begin(self, run_context: Any) -> None:
        self._reset()
        cb_params = run_context.original_args()
        callbacks = list(cb_params.get("list_callback") or ())
        self._monitor_place = monitor_place(callbacks, self)
        self._wrapped = go_first(callbacks, self, self._step_end_first, self._failed_at, self.quiet_loss_monitor)
        if self.keep_previous:
            self._take_snapshot(cb_params)

    def on_train_end(self, run_context: Any) -> None:
        undo(self._wrapped, self._step_end_first)
        self._wrapped = []

    def __exit__(self, *exc_info: Any) -> None:
        """Also when training raised (``LossMonitor``'s ``ValueError``): no wrapper is left on another callback."""
        self.on_train_end(None)

    def _step_end_first(self, run_context: Any) -> None:
        """The guard's step end, run from a callback listed before it (``guard_first.py``); once per step."""
        AgreedStop.on_train_step_end(self, run_context)

    def _failed_at(self, run_context: Any) -> bool:
        return self.failure is not None and self.failure.step == int(run_context.original_args().cur_step_num)

    def on_train_step_begin(self, run_context: Any) -> None:
        """With ``keep_previous``: copy the parameters the step starts from (those of the last step every rank
        agreed was good)."""
        if not self.keep_previous or self.failure is not None:
            return
        cb_params = run_context.original_args()
        self._begun_step = int(cb_params.get("cur_step_num", 0) or 0)
        if self._snapshot_step != self._begun_step - 1 or self._snapshot is None:
            self._take_snapshot(cb_params, step=self._begun_step - 1)

    def _train_step_end(self, run_context: Any) -> None:
        # a healthy step reads the loss scalar (once per step for every callback, ``step_loss``) and nothing else
        if self.failure is not None or self._local_failure is not None:
            return
        cb_params = run_context.original_args()
        step = int(cb_params.get("cur_step_num", 0) or 0)
        if step == self._seen_step:          # already checked: run first, from a callback listed before us
            return
        self._seen_step = step
        loss = step_loss(cb_params)
        if loss is None:
            return
        reason = self._check(loss, cb_params)
        if reason is None:
            if self.keep_previous and self._begun_step != int(cb_params.cur_step_num):   # no step_begin (custom loop)
                self._take_snapshot(cb_params)
            return
        self._local_failure = (int(cb_params.cur_step_num), loss, reason)
        request_stop(run_context, _LOG, reason, source=self)

    def on_agreed_stop(self, run_context: Any, decision: StopDecision) -> None:
        """Every rank: record the failure the ranks agreed on, save the last good parameters, log the recipe."""
        votes = decision.by(type(self).__name__)
        if not votes or self.failed_step is not None:
            return
        cb_params = run_context.original_args()
        local = self._local_failure
        if local is not None:
            loss, reason = local[1], local[2]
        else:
            loss = step_loss(cb_params)
            reason = votes[0].reason
        failed_ranks = tuple(vote.rank for vote in votes)
        if decision.world_size > 1:
            ranks = ", ".join(str(rank) for rank in failed_ranks)
            reason = f"{reason} on rank{'s' if len(votes) > 1 else ''} {ranks}"
            if local is None:
                reason += f" (this rank's loss: {format_loss(loss)})"
        self._fire(run_context, cb_params, LossGuardFailure(int(cb_params.cur_step_num), int(cb_params.cur_epoch_num),
                                                            loss, reason, failed_ranks))

    # checks --------------------------------------------------------------------------------------------------
    def _check(self, loss: float, cb_params: Any) -> Optional[str]:
        if not math.isfinite(loss):
            flag = overflow_flag(cb_params.get("net_outputs"))
            note = " (loss-scale overflow flag set: the update was skipped, but the forward pass itself broke)" \
                if flag else ""
            return f"loss is {loss}{note}"
        if self.threshold is not None and loss > self.threshold:
            return f"loss {loss:.6g} is above threshold {self.threshold:.6g}"
        if self.overflow_patience is not None:
            if overflow_flag(cb_params.get("net_outputs")):
                self._overflow_run += 1
                if self._overflow_run >= self.overflow_patience:
                    return f"loss scaling overflowed {self._overflow_run} steps in a row"
            else:
                self._overflow_run = 0
        if self.spike_factor is not None:
            if len(self._history) >= min(5, self.spike_window):
                reference = statistics.median(self._history) if self.spike_reference == "median" \
                    else statistics.fmean(self._history)
                if reference > 0 and loss > self.spike_factor * reference:
                    return (f"loss {loss:.6g} spiked above {self.spike_factor:g} x the {self.spike_reference} "
                            f"{reference:.6g} of the last {len(self._history)} steps")
            self._history.append(loss)
        return None

    # on a hit ------------------------------------------------------------------------------------------------
    def _fire(self, run_context: Any, cb_params: Any, failure: LossGuardFailure) -> None:
        self.failure = failure
        if self.save_last_good is not None:
            self._save_last_good(cb_params)
        if self.raise_error:
            _LOG.error("%s; raising LossGuardError (other callbacks' end hooks will not run)", failure.describe())
            self._log_recipe(cb_params)
            raise LossGuardError(failure.describe(), step=failure.step, epoch=failure.epoch, reason=failure.reason,
                                 loss=failure.loss)
        self._log_recipe(cb_params)
        if self._monitor_place is not None and failure.loss is not None and not math.isfinite(failure.loss):
            _LOG.warning("%s", monitor_line(failure.step, self._monitor_place, self.quiet_loss_monitor))

    def _log_recipe(self, cb_params: Any = None) -> None:
        _LOG.warning("%s", rerun_recipe(self, cb_params))

    def _take_snapshot(self, cb_params: Any, step: Optional[int] = None) -> None:
        network = _train_network(cb_params)
        if network is None:
            return
        self._snapshot = [(p.name, p.asnumpy().copy()) for p in network.get_parameters()]
        self._snapshot_step = int(cb_params.get("cur_step_num", 0) or 0) if step is None else step

    def _save_last_good(self, cb_params: Any) -> None:
        import numpy as np

        if self.keep_previous:
            named = self._snapshot
            step = self._snapshot_step
            what = f"kept after step {step}, before the failing step's update"
        else:
            network = _train_network(cb_params)
            named = None if network is None else [(p.name, p.asnumpy()) for p in network.get_parameters()]
            step = self.failed_step
            what = f"as they are after step {step}"
        if not named:
            _LOG.warning("LossGuard: no parameters to save (no network in the run context)")
            return
        overflow = TensorOverflowCondition()           # the project's one NaN/Inf check (numpy)
        with np.errstate(all="ignore"):
            bad = [name for name, value in named if overflow.check(value).hit]
        if bad:
            hint = "" if self.keep_previous else "; use keep_previous=True to keep a copy from before each step"
            _LOG.warning("LossGuard: not saving the parameters %s: %d of them hold NaN/Inf (first: %s)%s",
                         what, len(bad), bad[0], hint)
            return
        target = self.save_last_good / f"last_good_rank{rank_id()}_step{step}.ckpt"
        from mindspore import Tensor

        from msdebug_hooks.ckpt import save_checkpoint_atomic

        self.last_good_checkpoint = save_checkpoint_atomic(
            [{"name": name, "data": Tensor(value)} for name, value in named], target)
        _LOG.info("LossGuard: saved the parameters %s to %s", what, target)


def _train_network(cb_params: Any) -> Any:
    """The cell holding the whole training state (weights and optimizer state), else the bare network."""
    network = cb_params.get("train_network")
    return cb_params.get("network") if network is None else network



def _check_options(threshold, spike_factor, spike_window, spike_reference, overflow_patience, save_last_good,
                   keep_previous) -> None:
    optional_real_number("threshold", threshold, allowed="None or a finite number")
    optional_real_number("spike_factor", spike_factor, above=1, allowed="None or a finite number > 1")
    whole_number("spike_window", spike_window, minimum=2)
    if spike_reference not in ("median", "mean"):
        raise ConfigError("spike_reference", spike_reference, '"median" or "mean"')
    optional_whole_number("overflow_patience", overflow_patience, minimum=1, allowed="None or an int >= 1")
    if save_last_good is not None and not isinstance(save_last_good, (str, os.PathLike)):
        raise ConfigError("save_last_good", save_last_good, "None or a directory path")
    if keep_previous and save_last_good is None:
        raise ConfigError("keep_previous", keep_previous, "False unless save_last_good names a directory",
                          detail="the kept copy is only used to write the last good checkpoint")
