"""The check ``first-nan`` attaches to the user's training: the first step whose loss (or weights) holds NaN/Inf,
and, in the rerun, what the operators of that step and the one before did.

One callback, run by ``Model.train`` / ``Model.fit`` (``autoattach.register``) and by hand-written loops (the
functional-loop driver of the debugger, ``debugger.functional_loop``, with this callback instead of the debugger's).
Each step end it reads the loss (``training_loop.step_loss``: the same read ``LossGuard`` makes); where no loss is
seen (a ``TrainOneStepCell`` compiled in GRAPH_MODE) it checks the weights instead. The first run stops at the first
non-finite step; the rerun (``capture_step`` N) also checks the batch and the weights of steps N-1 and N, follows the
user's lines in PyNative mode (``line_trace``) and stops after step N. What it saw goes to
``<dir>/probe_rank_<r>.json``, written atomically at every finding and at the end.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Optional

from mindspore.train import Callback

from msdebug_hooks._files import atomic_write_text
from msdebug_hooks._log import get_logger
from msdebug_hooks.nan.line_trace import LineTracer
from msdebug_hooks.nan.values import as_array, first_bad, is_finite, stats
from msdebug_hooks.rank import rank_id
from msdebug_hooks.training_loop import request_stop, step_loss

_LOG = get_logger("nan.probe")
ROLE = "msdebug.first-nan"


class FirstNanProbe(Callback):
    """See the module docstring. ``steps``: stop after this many steps (``None``: the script's own end)."""

    autoattach_role = ROLE

    def __init__(self, directory: Path, *, capture_step: Optional[int] = None, steps: Optional[int] = None) -> None:
        super().__init__()
        self.directory = Path(directory)
        self.capture_step = capture_step
        self.steps = steps
        self.record: dict[str, Any] = {"first_bad": None, "how": None, "loss": None, "steps": 0, "found": None,
                                       "mode": None, "check_seconds": 0.0}
        self.tracer: Optional[LineTracer] = None
        self.rank = 0

    # -- capture window -----------------------------------------------------------------------------------------
    def _first_captured(self) -> Optional[int]:
        return None if self.capture_step is None else max(1, self.capture_step - 1)

    def _maybe_trace(self, next_step: int) -> None:
        import mindspore

        if self.capture_step is None or self.record["found"] is not None:
            return
        first = self._first_captured()
        if first <= next_step <= self.capture_step:
            if mindspore.get_context("mode") == mindspore.PYNATIVE_MODE:
                if self.tracer is None:
                    self.tracer = LineTracer()
                self.tracer.start(next_step)

    def on_train_begin(self, run_context: Any) -> None:
        import mindspore

        self.rank = rank_id()
        self.record["mode"] = "pynative" if mindspore.get_context("mode") == mindspore.PYNATIVE_MODE else "graph"
        step = int(getattr(run_context.original_args(), "cur_step_num", 0) or 0)
        self._maybe_trace(step + 1)

    # -- each step ----------------------------------------------------------------------------------------------
    def on_train_step_end(self, run_context: Any) -> None:
        started = time.perf_counter()
        try:
            self._step_end(run_context)
        finally:
            if self.capture_step is None:       # the check run's own cost, for the benchmark
                self.record["check_seconds"] += time.perf_counter() - started

    def _step_end(self, run_context: Any) -> None:
        cb_params = run_context.original_args()
        step = int(cb_params.cur_step_num)
        self.record["steps"] = step
        loss = step_loss(cb_params)
        bad_loss = loss is not None and not is_finite(as_array(loss))
        capturing = self.capture_step is not None and self._first_captured() <= step <= self.capture_step
        if self.tracer is not None:
            self.tracer.stop()
            traced = self.tracer.found
            if traced is not None and self.record["found"] is None:
                self.record["found"] = dict(traced, kind="operator", step=step)
        if capturing and self.record["found"] is None:
            self._check_batch(cb_params, step)
        weights_bad = None
        if loss is None or (capturing and self.record["found"] is None) or (capturing and not bad_loss):
            weights_bad = self._bad_weights(cb_params)
        if capturing and weights_bad and self.record["found"] is None:
            self.record["found"] = {"kind": "gradient", "step": step, "parameters": weights_bad}
        elif capturing and weights_bad and self.record["found"].get("kind") == "operator" and \
                self.record["found"]["step"] == step:
            self.record["found"]["parameters"] = weights_bad
        if self.record["first_bad"] is None and (bad_loss or (loss is None and weights_bad)):
            self.record.update(first_bad=step, how="loss" if bad_loss else "weights",
                               loss=None if loss is None else float(loss))
            self._write()
            if self.capture_step is None:
                request_stop(run_context, _LOG, f"first-nan: step {step} has a non-finite "
                                                f"{'loss' if bad_loss else 'weight'}", source=self)
                return
        if (self.capture_step is not None and step >= self.capture_step) or \
                (self.steps is not None and step >= self.steps):
            self._write()
            request_stop(run_context, _LOG, f"first-nan: checked {step} step(s)", source=self)
            return
        self._maybe_trace(step + 1)

    def on_train_end(self, run_context: Any) -> None:
        if self.tracer is not None:
            self.tracer.stop()
        self._write()

    # -- checks -------------------------------------------------------------------------------------------------
    def _check_batch(self, cb_params: Any, step: int) -> None:
        batch = getattr(cb_params, "train_dataset_element", None)
        items = batch if isinstance(batch, (tuple, list)) else [batch]
        for column, item in enumerate(items):
            array = as_array(item)
            if array is not None and not is_finite(array):
                where, value = first_bad(array)
                self.record["found"] = {"kind": "data", "step": step, "column": column, "index": list(where),
                                        "value": value, "stats": stats(array).text()}
                return

    @staticmethod
    def _bad_weights(cb_params: Any) -> list:
        optimizer = getattr(cb_params, "optimizer", None)
        params = list(getattr(optimizer, "parameters", None) or [])
        if not params:
            network = getattr(cb_params, "train_network", None) or getattr(cb_params, "network", None)
            params = list(network.trainable_params()) if network is not None else []
        return [p.name for p in params if not is_finite(as_array(p))]

    def _write(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.directory / f"probe_rank_{self.rank}.json",
                          json.dumps(self.record, indent=1, default=str) + "\n", mode=0o644)
