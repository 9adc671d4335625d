"""Stop training cleanly when a wall-clock budget is used up, before a cluster scheduler kills the job mid-write."""
from __future__ import annotations

import datetime as _dt
import re
import time
from typing import Any, Mapping, Optional, Union

from mindspore.train import Callback

from msdebug_hooks._log import get_logger
from msdebug_hooks.stop_agreement import AgreedStop, StopDecision
from msdebug_hooks.training_loop import format_loss, request_stop, step_loss
from msdebug_hooks.errors import ConfigError

_LOG = get_logger("callbacks.stop_at_time")

_UNITS = {"seconds": 1.0, "minutes": 60.0, "hours": 3600.0, "days": 86400.0}
_CLOCK = re.compile(r"^(?:(\d+):)?(\d+):(\d{1,2}):(\d{1,2}(?:\.\d+)?)$")
_ACCEPTED = ('a positive number of `unit`s (unit one of "seconds", "minutes", "hours", "days"), '
             'a "DD:HH:MM:SS" or "HH:MM:SS" string, a datetime.timedelta, '
             'or a dict of timedelta fields such as {"hours": 1, "minutes": 30}')

RunTime = Union[int, float, str, _dt.timedelta, Mapping[str, float]]


def parse_run_time(run_time: RunTime, unit: str = "minutes") -> float:
    """The budget in seconds, from any accepted form; anything else raises ``ConfigError`` listing the forms."""
    if unit not in _UNITS:
        raise ConfigError("unit", unit, 'one of "seconds", "minutes", "hours", "days"')
    if isinstance(run_time, bool):
        seconds = None
    elif isinstance(run_time, (int, float)):
        seconds = float(run_time) * _UNITS[unit]
    elif isinstance(run_time, _dt.timedelta):
        seconds = run_time.total_seconds()
    elif isinstance(run_time, str):
        match = _CLOCK.match(run_time.strip())
        if match is None:
            raise ConfigError("run_time", run_time, _ACCEPTED)
        days, hours, minutes, secs = match.groups()
        if int(minutes) >= 60 or float(secs) >= 60:
            raise ConfigError("run_time", run_time, _ACCEPTED, detail="minutes and seconds must be below 60")
        seconds = int(days or 0) * 86400 + int(hours) * 3600 + int(minutes) * 60 + float(secs)
    elif isinstance(run_time, Mapping):
        try:
            seconds = _dt.timedelta(**run_time).total_seconds()
        except TypeError as error:
            raise ConfigError("run_time", dict(run_time), _ACCEPTED, detail=str(error)) from None
    else:
        seconds = None
    if seconds is None or not seconds > 0 or seconds == float("inf"):
        raise ConfigError("run_time", run_time, _ACCEPTED, detail="the budget must be positive and finite")
    return seconds


def _hms(seconds: float) -> str:
    minutes, secs = divmod(max(0.0, seconds), 60)
    hours, minutes = divmod(int(minutes), 60)
    return f"{hours}:{minutes:02d}:{secs:04.1f}"


class StopAtTime(AgreedStop, Callback):
    """Stop training after ``run_time`` of wall-clock time, checked after every step.

    The clock is ``time.monotonic()`` (immune to NTP and daylight-saving jumps) and starts at ``on_train_begin``.
    The stop goes through ``run_context.request_stop()``, so it takes effect after the current step in non-sink mode
    and every callback's ``on_train_epoch_end`` / ``on_train_end`` still run (save your checkpoint there). In
    dataset-sink mode (Ascend/GPU) MindSpore honours it only at the end of a sink; budget ``sink_size`` steps of
    margin. ``state_dict()`` / ``load_state_dict()`` carry the time already spent into a resumed job, and one
    callback reused for several ``Model.train`` calls shares one budget.

    In a multi-rank job each rank reads its own clock and the first rank out of time asks all to stop: the ranks
    agree after every step (one tiny all-reduce per step for all of our callbacks together, see
    ``stop_agreement.py``), so every rank stops after the same step, even when they run at different speeds.
    ``stopped_step`` is then set on every rank.

    Args:
        run_time: the budget: a number of ``unit``s, ``"DD:HH:MM:SS"`` / ``"HH:MM:SS"``, a ``timedelta`` or a dict
            of ``timedelta`` fields.
        unit: unit of a numeric ``run_time``: ``"seconds"``, ``"minutes"`` (default, as in MindSpore's sample),
            ``"hours"`` or ``"days"``.

    Example:
        >>> model.train(100, dataset, callbacks=[StopAtTime("00:23:30:00")])   # leave 30 min of a 24 h slot
    """

    def __init__(self, run_time: RunTime, *, unit: str = "minutes") -> None:
        super().__init__()
        self.run_time: float = parse_run_time(run_time, unit)
        self._offset = 0.0          # time spent before this segment (earlier train calls or a resumed job)
        self._start: Optional[float] = None
        self.stopped_step: Optional[int] = None
        self._voted = False
        self._begin_step = 0

    # queries -------------------------------------------------------------------------------------------------
    def time_elapsed(self) -> float:
        """Seconds of budget used so far (including time restored by ``load_state_dict``)."""
        running = time.monotonic() - self._start if self._start is not None else 0.0
        return self._offset + running

    def time_remaining(self) -> float:
        """Seconds left before the callback asks training to stop (never negative)."""
        return max(0.0, self.run_time - self.time_elapsed())

    # resume --------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, float]:
        """What a checkpoint must hold so a resumed job keeps its budget (JSON-serialisable)."""
        return {"time_elapsed": self.time_elapsed(), "run_time": self.run_time}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the time already spent; the budget itself stays the one given to the constructor."""
        try:
            elapsed = float(state["time_elapsed"])
        except (KeyError, TypeError, ValueError):
            raise ConfigError("state.time_elapsed", state.get("time_elapsed") if isinstance(state, Mapping) else state,
                              "a number of seconds >= 0, as written by StopAtTime.state_dict()") from None
        if not elapsed >= 0:
            raise ConfigError("state.time_elapsed", elapsed, "a number of seconds >= 0")
        self._offset = elapsed
        if self._start is not None:
            self._start = time.monotonic()

    # hooks ---------------------------------------------------------------------------------------------------
    def on_train_begin(self, run_context: Any) -> None:
        self._start = time.monotonic()
        self._voted = False
        self.stopped_step = None
        self._begin_step = int(run_context.original_args().get("cur_step_num", 0) or 0)
        if self.time_remaining() <= 0:
            self._voted = True
            request_stop(run_context, _LOG,
                         f"the time budget of {_hms(self.run_time)} was already used up before this run "
                         f"started ({_hms(self.time_elapsed())} restored); MindSpore stops after the first step",
                         source=self)

    def _train_step_end(self, run_context: Any) -> None:
        if self._start is None or time.monotonic() - self._start + self._offset < self.run_time:
            return
        if self._voted or run_context.get_stop_requested():
            if self._voted and self.stopped_step is None and run_context.get_stop_requested():
                self.stopped_step = int(run_context.original_args().cur_step_num)   # voted at on_train_begin
            return
        cb_params = run_context.original_args()
        self._voted = True
        request_stop(run_context, _LOG,
                     f"time budget {_hms(self.run_time)} used up after {_hms(self.time_elapsed())}, "
                     f"loss {format_loss(step_loss(cb_params))}", source=self)

    def on_agreed_stop(self, run_context: Any, decision: StopDecision) -> None:
        step = int(run_context.original_args().get("cur_step_num", 0) or 0)
        if decision.by(type(self).__name__) and self.stopped_step is None and step > self._begin_step:
            self.stopped_step = step

    def on_train_end(self, run_context: Any) -> None:
        if self._start is not None:
            self._offset += time.monotonic() - self._start
            self._start = None
