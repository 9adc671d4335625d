"""Run MindSpore callbacks from a functional training loop that never calls ``Model.train``.

Loops built on ``ms.value_and_grad`` + an optimizer have no ``RunContext`` and no callback list. ``DebugSession``
builds a real ``mindspore.train.RunContext`` over the same fields ``Model.train`` fills in, and calls the
``on_train_*`` hooks in the same order, so ``StopAtTime``, ``StopAtStep``, ``LossGuard`` (and most user callbacks)
work unchanged.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Any, Iterable, Optional

from mindspore.train import Callback, RunContext
from mindspore.train.callback._callback import InternalCallbackParam

from msdebug_hooks.errors import ConfigError
from msdebug_hooks.rank import world_size
from msdebug_hooks.validation import optional_whole_number, whole_number


class DebugSession:
    """Context manager that drives callbacks from a hand-written training loop.

    ``on_train_begin`` runs at ``with``-entry. Each ``step_end(loss)`` counts one global step (1-based
    ``cur_step_num``, as in ``Model.train``), stores the loss (or any outputs, e.g. a ``(loss, overflow, scale)``
    tuple) as ``net_outputs`` and runs ``on_train_step_end``; calling ``step_begin()`` before the step is optional
    and runs ``on_train_step_begin``. An epoch opens at its first step and closes at ``epoch_end()``. When the loop
    stops (``should_stop``) it may break out without calling ``epoch_end()``: on a normal exit the session closes an
    open epoch (``on_train_epoch_end``) and then runs ``on_train_end``, like ``Model.train`` after
    ``request_stop()``.

    If the loop raises (including ``LossGuard(raise_error=True)``), the exception propagates and no end hook runs,
    exactly as with ``Model.train``: end hooks that save or clean up should not act on a run that crashed.

    Args:
        callbacks: ``mindspore.train.Callback`` instances, called in order.
        network: the network being trained (``network`` and, unless ``train_network`` is given, ``train_network``).
        optimizer: the optimizer, if callbacks need it (``cb_params.optimizer``).
        epoch_size: number of epochs the loop plans to run (``cb_params.epoch_num``), if known.
        batch_num: steps per epoch (``cb_params.batch_num``), if known.
        train_network: the cell whose parameters make up the full training state (defaults to ``network``).
        loss_fn: the loss function (``cb_params.loss_fn``), if callbacks need it.
        initial_step: steps already done by a resumed run; the first step is ``initial_step + 1``.
        initial_epoch: epochs already done by a resumed run.

    Example:
        >>> grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
        >>> with DebugSession(callbacks=[LossGuard(), StopAtStep(100)], network=net, optimizer=optimizer) as s:
        ...     for epoch in range(10):
        ...         for data, label in dataset:
        ...             loss, grads = grad_fn(data, label)
        ...             optimizer(grads)
        ...             s.step_end(loss)
        ...             if s.should_stop:
        ...                 break
        ...         s.epoch_end()
        ...         if s.should_stop:
        ...             break
    """

    def __init__(self, callbacks: Iterable[Callback] = (), network: Any = None, optimizer: Any = None,
                 epoch_size: Optional[int] = None, *, batch_num: Optional[int] = None, train_network: Any = None,
                 loss_fn: Any = None, initial_step: int = 0, initial_epoch: int = 0) -> None:
        if isinstance(callbacks, Callback):
            callbacks = [callbacks]
        self.callbacks = list(callbacks)
        for index, callback in enumerate(self.callbacks):
            if not isinstance(callback, Callback):
                raise ConfigError(f"callbacks[{index}]", callback, "a mindspore.train.Callback instance")
        for name, value in (("initial_step", initial_step), ("initial_epoch", initial_epoch)):
            whole_number(name, value, minimum=0)
        for name, value in (("epoch_size", epoch_size), ("batch_num", batch_num)):
            optional_whole_number(name, value, minimum=1, allowed="None or an int >= 1")
        params = InternalCallbackParam()
        params.mode = "train"
        params.network = network
        params.train_network = train_network if train_network is not None else network
        params.optimizer = optimizer
        params.loss_fn = loss_fn
        params.epoch_num = None if epoch_size is None else epoch_size - initial_epoch
        params.batch_num = batch_num
        params.cur_step_num = initial_step
        params.initial_step = initial_step
        params.cur_epoch_num = initial_epoch
        params.dataset_sink_mode = False
        params.net_outputs = None
        params.list_callback = self.callbacks
        params.parallel_mode = _parallel_mode()
        params.device_number = world_size()
        params.train_dataset = None
        params.train_dataset_element = None
        params.last_save_ckpt_step = None
        params.latest_ckpt_file = None
        self.cb_params = params
        self.run_context = RunContext(params)
        self._stack: Optional[contextlib.ExitStack] = None
        self._epoch_open = False
        self._step_open = False

    # state ---------------------------------------------------------------------------------------------------
    @property
    def should_stop(self) -> bool:
        """True once a callback asked training to stop: break out of the loop."""
        return self.run_context.get_stop_requested()

    @property
    def cur_step_num(self) -> int:
        return int(self.cb_params.cur_step_num)

    @property
    def cur_epoch_num(self) -> int:
        return int(self.cb_params.cur_epoch_num)

    # context manager -----------------------------------------------------------------------------------------
    def __enter__(self) -> "DebugSession":
        if self._stack is not None:
            raise RuntimeError("DebugSession is already running; a session can be entered once at a time")
        stack = contextlib.ExitStack()
        for callback in self.callbacks:      # callbacks are context managers too, as under Model.train
            stack.enter_context(callback)
        self._stack = stack
        try:
            self._call("on_train_begin")
        except BaseException:
            self._close(*sys.exc_info())
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if exc_type is None:
                if self._epoch_open:
                    self.epoch_end()
                self._call("on_train_end")
        finally:
            self._close(exc_type, exc, tb)
        return False

    def _close(self, exc_type, exc, tb) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.__exit__(exc_type, exc, tb)

    # hooks ---------------------------------------------------------------------------------------------------
    def epoch_begin(self) -> None:
        """Open the next epoch (``on_train_epoch_begin``); done automatically at an epoch's first step."""
        self._require_running("epoch_begin")
        if self._epoch_open:
            return
        self.cb_params.cur_epoch_num += 1
        self._epoch_open = True
        self._call("on_train_epoch_begin")

    def step_begin(self) -> None:
        """Optional: call before the step's computation to run ``on_train_step_begin``."""
        self._require_running("step_begin")
        if not self._epoch_open:
            self.epoch_begin()
        if self._step_open:
            return
        self.cb_params.cur_step_num += 1
        self._step_open = True
        self._call("on_train_step_begin")

    def step_end(self, loss: Any = None, *, outputs: Any = None) -> None:
        """Record the step's ``loss`` (or full ``outputs``, stored as ``net_outputs``) and run
        ``on_train_step_end``. Check :attr:`should_stop` afterwards."""
        self._require_running("step_end")
        if not self._step_open:
            if not self._epoch_open:
                self.epoch_begin()
            self.cb_params.cur_step_num += 1
        self._step_open = False
        self.cb_params.net_outputs = outputs if outputs is not None else loss
        self._call("on_train_step_end")

    def epoch_end(self) -> None:
        """Close the current epoch (``on_train_epoch_end``); a no-op when no epoch is open."""
        self._require_running("epoch_end")
        if not self._epoch_open:
            return
        self._epoch_open = False
        self._call("on_train_epoch_end")

    def _call(self, hook: str) -> None:
        for callback in self.callbacks:
            getattr(callback, hook)(self.run_context)

    def _require_running(self, what: str) -> None:
        if self._stack is None:
            raise RuntimeError(f"DebugSession.{what}() called outside the 'with DebugSession(...) as s:' block")


def _parallel_mode() -> str:
    try:
        from mindspore import context

        return str(context.get_auto_parallel_context("parallel_mode"))
    except Exception:  # pragma: no cover - depends on the MindSpore build
        return "stand_alone"
