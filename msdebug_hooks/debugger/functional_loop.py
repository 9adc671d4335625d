"""The online debugger for hand-written training loops, reached without an edit to the script.

MindSpore 2.x's tutorials train with ``grad_fn = mindspore.value_and_grad(forward_fn, None, optimizer.parameters,
has_aux=True)``, a ``train_step`` that calls ``grad_fn`` then ``optimizer(grads)`` (often under ``@mindspore.jit``),
in a loop over ``dataset.create_tuple_iterator()``; others call ``mindspore.grad``, or a ``TrainOneStepCell`` by
hand. None of them calls ``Model.train``, so no callback runs. Under env activation (``ENABLE_MS_DEBUGGER=1``, and so
``msdebug run`` / ``debug`` / ``serve``) this driver sees such a loop through what every one of them uses
(``loop_hooks`` installs the look-outs when MindSpore is imported):

* every ``nn.Optimizer`` made, and its step counter ``global_step`` (every MindSpore optimizer adds 1 per call);
* every batch drawn from a MindSpore dataset iterator (``create_tuple_iterator`` / ``create_dict_iterator`` /
  ``for batch in dataset``);
* every top-level call of a ``@jit`` function (``hook_guard``), including a PyNative optimizer's own compiled
  ``construct``.

**A step** is one call of the optimizer: step N ends when the optimizer's ``global_step`` has reached N (counted
from the value it had when the debugger attached, normally 0), which is the tutorial's ``batch`` index N-1 of the
first epoch and ``Model.train``'s ``cur_step_num`` N. The end is seen right after the call that applied it: after
the ``@jit`` step function returns (its first output, when a single number, is the loss), after the optimizer's
call in PyNative code, else at the next batch drawn (or the end of the data, or the end of the script).

**Attaching**: the first time the loop is about to call an optimizer, a ``@jit`` function or draw a batch while an
optimizer exists that no ``mindspore.train.Model`` holds and no other debugger callback is running, the network
and loss cells are found (``loop_parts``) and a ``DebugSession`` with the env's ``DebuggerCallback`` starts: the
graph is sent and the training waits at step 0, before its first update. Weights and optimizer states are read
from their parameters; the loss from the step function's output or, in PyNative mode, from a hook on the loss cell;
the batch is the one drawn for the step; gradients and cell outputs are captured in PyNative mode (``capture``).

**Terminate** ends the training the way ``request_stop`` ends ``Model.train``: the session closes at once, the
dataset the loop trained from is empty from then on (its iterator stops, as at the end of the data, and so does
every new iterator over it), so the loop ends and the script runs on to its end (evaluation, saving) and exits 0. A
loop that draws no batch from a MindSpore dataset cannot be ended from outside: the script is ended (exit 0, one
line says why) at its next optimizer or ``@jit`` call.

What cannot be known is said once, with the edit that makes it known: no network holding the optimizer's
parameters, no loss (no loss cell and no step function returning it), several optimizers, no training seen at all
(said when the script ends).
"""
from __future__ import annotations

import atexit
import functools
import weakref
from typing import Any, Callable, NoReturn, Optional, Sequence

from msdebug_hooks._log import get_logger
from msdebug_hooks.debugger import hook_guard, owner, script_exit
from msdebug_hooks.debugger.loop_parts import find_parts, model_optimizers

__all__ = ["FunctionalLoop", "EXPLICIT_ROUTE"]

_LOG = get_logger("debugger")

#: what to add when the driver cannot see something (README / docs/debugger-server.md "Hand-written loops")
EXPLICIT_ROUTE = ("with DebugSession(callbacks=[DebuggerCallback.from_env()], network=net, optimizer=optimizer, "
                  "loss_fn=loss_fn) as session: ... session.step_end(loss) after each step (from msdebug_hooks import "
                  "DebugSession, DebuggerCallback)")


def _is_users(fn: Any) -> bool:
    module = getattr(fn, "__module__", None) or ""
    return not (module == "mindspore" or module.startswith("mindspore."))


def _scalar(outputs: Any) -> bool:
    """Whether a step function's output leads with a single number (the loss, by MindSpore's convention)."""
    value = outputs
    while isinstance(value, (tuple, list)) and value:
        value = value[0]
    size = getattr(value, "size", None)
    return size == 1 and hasattr(value, "asnumpy")


def _safe(method: Callable[..., Any]) -> Callable[..., Any]:
    """An event handler whose own failure switches the driver off with one warning instead of ending the training
    (``StopIteration`` ends the loop's data on purpose; ``SystemExit`` / ``KeyboardInterrupt`` pass)."""

    @functools.wraps(method)
    def handler(self: "FunctionalLoop", *args: Any) -> Any:
        try:
            return method(self, *args)
        except StopIteration:
            raise
        except Exception as exc:   # noqa: BLE001 - the debugger must never crash the training it looks at
            self._fail(exc)
            return None
    return handler


class FunctionalLoop:
    """Drives a ``DebugSession`` from what a hand-written loop does (see the module docstring).

    Args:
        make_callbacks: the env's debugger callbacks (``autoattach``'s factory; raises ``ConfigError`` on a bad
            variable).
        on_config_error: reports a ``ConfigError`` in one line and ends the script (exit 2).
    """

    def __init__(self, make_callbacks: Callable[[], Sequence[Any]],
                 on_config_error: Callable[[Exception], NoReturn]) -> None:
        self._make_callbacks = make_callbacks
        self._on_config_error = on_config_error
        self._optimizers: list = []               # weakrefs, in the order they were made
        self._model_owned: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._scanned = -1                        # len(_optimizers) at the last look for Model objects
        self.session: Any = None                  # the DebugSession while attached
        self.callbacks: list = []
        self.optimizer: Any = None
        self.step = 0                             # the optimizer's global_step at the last step end
        self.done = False                         # the session is over: never attach again
        self._stopping = False                    # terminated: the training dataset is empty from now on
        self._batch: Any = None                   # the last batch drawn, and where from
        self._source: Any = None
        self._trained_from: dict[int, Any] = {}   # id -> weakref (or object) of the datasets the loop trained from
        self._loss: Any = None                    # the last output of a loss cell (PyNative hooks)
        self._loss_hooks: list = []
        self._busy = False                        # our own code runs: its draws and calls are not the loop's
        self._said: set[str] = set()
        self._looped = False                      # a batch was drawn or a @jit function of the script ran
        self._pynative = True
        self._mid_step = False                    # attached inside a step (at its optimizer call): its loss is gone
        owner.on_claim(self._claimed)

    # -- what loop_hooks and hook_guard report ------------------------------------------------------------------
    def optimizer_made(self, optimizer: Any) -> None:
        self._optimizers.append(weakref.ref(optimizer))

    @_safe
    def before_draw(self, iterator: Any) -> None:
        if self._busy or (self.session is None and owner.holder() is not None):
            return
        self.check_step()
        if self._stopping and self._trained_from_here(iterator):
            raise StopIteration
        self._attach_if_training(mid_step=False)

    @_safe
    def after_draw(self, iterator: Any, batch: Any) -> None:
        if not self._busy:
            self._batch, self._source, self._looped = batch, _dataset_of(iterator), True

    @_safe
    def exhausted(self, iterator: Any) -> None:
        if not self._busy:
            self.check_step()

    @_safe
    def before_jit(self, executor: Any) -> None:
        if self._busy or (self.session is None and owner.holder() is not None):
            return
        optimizer = self._is_optimizer(getattr(executor, "obj", None))
        if _is_users(executor.fn) or optimizer:
            if self._stopping and not self._trained_from:
                self._end_script()
            self._looped = True
            self._attach_if_training(mid_step=optimizer)

    @_safe
    def after_jit(self, executor: Any, output: Any) -> None:
        if self.session is None or self._busy:
            return
        if _is_users(executor.fn):
            self.check_step(output)
        elif self._is_optimizer(getattr(executor, "obj", None)):
            self.check_step()

    # -- attaching ----------------------------------------------------------------------------------------------
    def _live_optimizers(self) -> list:
        alive = [ref() for ref in self._optimizers]
        return [opt for opt in alive if opt is not None]

    def _is_optimizer(self, obj: Any) -> bool:
        return obj is not None and any(obj is opt for opt in self._live_optimizers())

    def _candidates(self) -> list:
        optimizers = self._live_optimizers()
        if not optimizers:
            return []
        if len(self._optimizers) != self._scanned:      # a new optimizer: is it a Model's?
            self._scanned = len(self._optimizers)
            for optimizer in model_optimizers():
                self._model_owned.add(optimizer)
        return [opt for opt in optimizers if opt not in self._model_owned]

    def _attach_if_training(self, *, mid_step: bool) -> None:
        if self.session is not None or self.done or owner.holder() is not None:
            return
        candidates = self._candidates()
        if candidates:
            self._mid_step = mid_step
            self._attach(candidates)

    def _attach(self, candidates: list) -> None:
        import mindspore

        from msdebug_hooks.callbacks.custom_loop import DebugSession
        from msdebug_hooks.errors import ConfigError

        optimizer = candidates[-1]
        if len(candidates) > 1:
            self._say("optimizers", f"debugger: this script made {len(candidates)} optimizers; the debugger follows "
                                    f"the last one made ({type(optimizer).__name__} over "
                                    f"{len(optimizer.parameters)} parameters). To debug another, add: "
                                    f"{EXPLICIT_ROUTE}")
        self._busy = True
        try:
            parts = find_parts(optimizer)
            if parts.network is None:
                self.done = True
                self._say("network", "debugger: no cell holds the parameters of the optimizer this loop uses, so "
                                     "the debugger cannot describe the network and does not attach. To debug it, "
                                     f"add: {EXPLICIT_ROUTE}")
                return
            try:
                self.callbacks = list(self._make_callbacks())
            except ConfigError as exc:
                self._on_config_error(exc)
            self.optimizer = optimizer
            self.step = self._global_step() or 0
            session = DebugSession(self.callbacks, network=parts.network, optimizer=optimizer,
                                   loss_fn=parts.loss_fn, initial_step=self.step)
            self.session = session
            _LOG.info("debugger: a hand-written training loop (%s with %s) is debugged: a step is one call of "
                      "the optimizer (its global_step is %d now)", type(parts.network).__name__,
                      type(optimizer).__name__, self.step)
            self._pynative = mindspore.get_context("mode") == mindspore.PYNATIVE_MODE
            if self._pynative:          # GRAPH_MODE would compile a hook into the cell's graph: none there
                self._hook_losses(parts)
            try:
                session.__enter__()        # graph, connect, the wait at step 0
            except ConfigError as exc:
                self._on_config_error(exc)
        finally:
            self._busy = False
        if session.should_stop:
            self._terminated()

    def _hook_losses(self, parts: Any) -> None:
        from mindspore import nn

        inner = [cell for _, cell in parts.network.cells_and_names() if isinstance(cell, nn.LossBase)]

        def keep_loss(cell: Any, inputs: Any, output: Any) -> None:
            self._loss = output

        for cell in inner + parts.loss_cells:
            self._loss_hooks.append(hook_guard.forward_hook(cell, keep_loss, captures=False))

    # -- steps ----------------------------------------------------------------------------------------------------
    def _global_step(self) -> Optional[int]:
        try:
            return int(self.optimizer.global_step.asnumpy().reshape(-1)[0])
        except Exception:   # noqa: BLE001 - an optimizer without a readable counter: no step is seen
            return None

    def check_step(self, outputs: Any = None) -> None:
        """If the optimizer applied a step since the last look: that step's end (watchpoints, hits, commands)."""
        session = self.session
        if session is None or self.done or self._busy or owner.holder() not in (None, *self._own()):
            return
        now = self._global_step()
        if now is None or now <= self.step:
            return
        if now - self.step > 1:
            self._say("jump", f"debugger: the optimizer stepped {now - self.step} times between two looks "
                              f"(steps {self.step + 1}-{now}); the debugger counts them as one step")
        self.step = now
        if self._source is not None:
            self._trained_from.setdefault(id(self._source), _ref(self._source))
        loss = outputs if _scalar(outputs) else self._loss
        self._loss = None
        if loss is None and not self._mid_step:
            why = "no nn.LossBase cell ran in this step" if self._pynative else \
                "in GRAPH_MODE the debugger puts no hook on a loss cell"
            self._say("loss", f"debugger: the loss of this loop is not seen ({why}, and the step function returned "
                              "no single number first), so it cannot be watched; return it first from the "
                              f"@mindspore.jit step function, or add: {EXPLICIT_ROUTE}")
        self._mid_step = False
        session.cb_params.train_dataset_element = self._batch
        self._busy = True
        try:
            session.step_end(loss)
        finally:
            self._busy = False
        if session.should_stop:
            self._terminated()

    # -- ending -----------------------------------------------------------------------------------------------------
    def _terminated(self) -> None:
        """The server asked to terminate: close the session now; the training dataset is empty from now on."""
        self._stopping = True
        self._close()
        if not self._trained_from:
            self._say("no-dataset", "debugger: terminated; this loop draws no batch from a MindSpore dataset, so it "
                                    "cannot be ended from outside: the script ends (exit 0) at its next optimizer "
                                    "or @jit call")

    def _end_script(self) -> NoReturn:
        _LOG.warning("debugger: the training was terminated at step %d; ending the script (exit 0)", self.step)
        raise SystemExit(0)

    def _trained_from_here(self, iterator: Any) -> bool:
        source = _dataset_of(iterator)
        return source is not None and id(source) in self._trained_from

    def _close(self, exc_info: tuple = (None, None, None)) -> None:
        session, self.session = self.session, None
        self.done = True
        for hook in self._loss_hooks:
            hook.remove()
        self._loss_hooks.clear()
        if session is not None:
            self._busy = True
            try:
                session.__exit__(*exc_info)
            finally:
                self._busy = False

    def _own(self) -> list:
        own = []
        for callback in self.callbacks:
            own.append(callback)
            inner = getattr(callback, "debugger", None)      # DistributedDebugger's own DebuggerCallback
            if inner is not None:
                own.append(inner)
        return own

    def _claimed(self, callback: Any) -> None:
        """Another debugger callback starts a training (``Model.train``, an explicit ``DebugSession``): ours ends."""
        if self.session is not None and not any(callback is mine for mine in self._own()):
            self._close()

    def at_exit(self) -> None:
        """The script ends: the last step's end if it was not seen yet, then the session's end, with the exception
        that ended the script if one did (so the server says ``crashed``, not ``finished``); or, when it looped over
        data (or ran a @jit function of its own) but no training reached the debugger, one line saying what to add.

        The training-done said here is the process's last word, and a clean one may still be followed by a non-zero
        exit status this hook cannot see (``sys.exit(1)`` after the loop): it is marked as said at exit
        (``session_link.process_exiting``), so a server watching the process waits for its exit code."""
        if self.session is not None and not self.done:
            try:
                self.check_step()
            except (SystemExit, KeyboardInterrupt):
                pass
            from msdebug_hooks.debugger.session_link import process_exiting

            process_exiting(script_exit.noted_status())
            self._close(script_exit.unhandled_exception())
        elif not owner.ever_claimed() and not self.done and self._looped:
            _LOG.warning("debugger: ENABLE_MS_DEBUGGER is set but this script reached no training the debugger can "
                         "see (no Model.train / Model.fit, no mindspore.nn.Optimizer step); for a loop that updates "
                         f"its weights another way, add: {EXPLICIT_ROUTE}")

    def install_exit_hooks(self) -> None:
        """Close the session when the script ends; note the status the script gives ``sys.exit`` (the exit hook
        cannot read the process's exit status, which a server that did not start the process cannot see either)."""
        atexit.register(self.at_exit)
        script_exit.note_exit_status()

    def _fail(self, exc: BaseException) -> None:
        self._busy = False
        if self.done and self.session is None:
            return
        _LOG.warning("debugger: following the hand-written training loop failed (%s: %s); the debugger is off for "
                     "the rest of this script, the training goes on", type(exc).__name__, str(exc)[:300])
        try:
            self._close()
        except Exception:   # noqa: BLE001
            self.done = True

    def _say(self, key: str, message: str) -> None:
        if key not in self._said:
            self._said.add(key)
            _LOG.warning(message)


def _dataset_of(iterator: Any) -> Any:
    """The dataset an iterator draws from (MindSpore keeps it as ``Iterator.__ori_dataset``), else the iterator."""
    return getattr(iterator, "_Iterator__ori_dataset", None) or iterator


def _ref(obj: Any) -> Any:
    try:
        return weakref.ref(obj)
    except TypeError:
        return obj
