"""``DebuggerCallback``: MindInsight's online debugger for ``Model.train`` / ``Model.fit`` and ``DebugSession``.

A thin adapter between MindSpore's callback hooks and ``DebuggerSession`` (the protocol state machine):

* ``on_train_begin``: describe the training network as a graph, connect (bounded unless ``wait_for_server``), and
  hold training in the initial suspension at step 0 until the person continues in the UI;
* ``on_train_step_end``: one suspension point per step (watchpoints checked, hits reported, commands obeyed),
  before any other callback's step end (``step_order.py``), so a callback that ends the job on a NaN loss (MindSpore's
  ``LossMonitor``) cannot hide the step from the UI;
* ``on_train_end``: ``training_done``. On terminate the callback calls ``request_stop`` so that every other
  callback's end hooks still run and the process exits normally.

Without a server the session detaches with one warning and training runs to the end untouched.

Tensor sources: ``source="light"`` (default) reads parameters, the loss and the batch from the network, and in
PyNative mode also cell outputs and weight gradients, through hooks present only while a watchpoint or a view needs
them (``capture.py``); ``source="dump"``
(``MS_DEBUGGER_SOURCE=dump``) serves every operator's outputs from a per-step sync dump (``dump_source.py``): its
graph replaces the cell-level one, and each step's files are deleted when the next step begins.

What is reported, and why: ``ms_version`` is MindSpore's real version (MindInsight 2.3.1 compares major.minor and
accepts a newer MindSpore minor with a warning). ``backend`` is always "GPU", whatever the device: MindInsight
offers no watchpoint condition at all for any other value (e.g. "CPU"), and "Ascend" would add the Ascend-only
operator-overflow condition, which a client that sees only step ends cannot evaluate. The actual device is logged.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping, Optional, Sequence, Union

from mindspore.train import Callback

from msdebug_hooks._log import get_logger
from msdebug_hooks.training_loop import loss_value, request_stop
from msdebug_hooks.debugger import owner as debugger_owner
from msdebug_hooks.debugger.capture import CellCapture
from msdebug_hooks.debugger.graph import build_graph
from msdebug_hooks.debugger.dump_source import SOURCES, DumpTensorSource, source_options_from_env
from msdebug_hooks.debugger.session import Decision, DebuggerSession
from msdebug_hooks.step_order import OncePerStep, restore, run_first, user_callback_names
from msdebug_hooks.debugger.settings import PARTIAL_MEM_NOTE, DebuggerSettings
from msdebug_hooks.debugger.tensors import NetworkTensors
from msdebug_hooks.debugger.transport import Transport
from msdebug_hooks.errors import ConfigError

__all__ = ["DebuggerCallback", "check_sink_mode", "SOURCE_OPTIONS"]

_LOG = get_logger("debugger")
#: the callback's own arguments (the tensor source); every other keyword argument is a ``DebuggerSettings`` field
SOURCE_OPTIONS = ("source", "dump_dir", "dump_kernels")
#: what ``DebuggerCallback(host, port, ...)`` starts from: the address MindInsight's docs use
_ARGUMENT_DEFAULTS = DebuggerSettings(enabled=True, host="127.0.0.1", port=50051)
_SETTING_FIELDS = frozenset(f.name for f in dataclasses.fields(DebuggerSettings))


def check_sink_mode(dataset_sink_mode: bool, device_target: str) -> None:
    """Raise a ``ConfigError`` when training runs in dataset sink mode.

    In sink mode MindSpore runs a whole epoch (or ``sink_size`` steps) on the device per call and calls the step
    hooks once per sink, so the debugger could neither stop after a step nor count steps. On the CPU MindSpore
    always falls back to non-sink training (``cb_params.dataset_sink_mode`` is then False), so this only fires on
    GPU / Ascend.
    """
    if dataset_sink_mode:
        raise ConfigError("dataset_sink_mode", True,
                          "False while the online debugger is attached: model.train(..., dataset_sink_mode=False)",
                          detail=f"on {device_target} sink mode runs many steps per call, so the debugger could "
                                 "not suspend training after each step as MindInsight expects")


class DebuggerCallback(Callback):
    """Attach a training run to a MindInsight debugger server (``mindinsight start --enable-debugger True``).

    Args:
        host: the MindInsight machine (must resolve); default 127.0.0.1, or ``settings.host``.
        port: MindInsight's ``--debugger-port`` (1..65535); default 50051, or ``settings.port``.
        settings: a ``DebuggerSettings`` (checked when it was made); the keyword arguments below override it.
        source: where tensor values come from: ``"light"`` (parameters and the loss, read from the network) or
            ``"dump"`` (every operator's outputs from a per-step sync dump the debugger configures; GRAPH_MODE,
            first training of the process; costly, see ``dump_source.py``). Env: ``MS_DEBUGGER_SOURCE``.
        dump_dir: scratch parent directory for the dump source (default ``/dev/shm``, else the temp dir). Env:
            ``MS_DEBUGGER_DUMP_DIR``.
        dump_kernels: dump only these kernels / op types (MindSpore's ``kernels`` list, dump_mode 1); default
            all. Env: ``MS_DEBUGGER_DUMP_KERNELS`` (comma-separated).
        options: ``DebuggerSettings`` fields, checked there (``DebuggerSettings.with_options``):

            * ``wait_for_server``: if no server answers yet, wait for one (a progress line every few seconds)
              instead of training on without the debugger.
            * ``connect_timeout``: seconds the first contact may take when not waiting for the server (5).
            * ``rpc_timeout``: deadline in seconds of every call except the blocking wait for a command (10).
            * ``heartbeat_period``: seconds between heartbeats (5..3600; MindInsight resets a session after 3
              missed; 30).
            * ``progress_interval``: seconds before the first "training paused" line, and between the first two.
            * ``device_id``: reported as the device in MindInsight (``Metadata.device_name``).
            * ``partial_memory``: ``MS_DEBUGGER_PARTIAL_MEM``; accepted, and has nothing to do here
              (``settings.py``).
            * ``on_server_lost``: "continue" (default: train on, reconnect when a server is back) or "stop" (end
              training cleanly) when the server is lost; env ``MSDEBUG_DEBUGGER_ON_LOST``. See ``session.py``.
            * ``reconnect_window``: seconds after a loss during which reconnecting is attempted (0: never; 600).
            * ``tls_ca``, ``tls_cert``, ``tls_key``, ``tls_server_name``: PEM files and the name to verify for a
              TLS channel; env ``MS_DEBUGGER_TLS_CA`` / ``_CERT`` / ``_KEY`` / ``_SERVER_NAME``. ``tls_ca`` may
              also be a ready ``settings.TlsConfig``.

    The settings' fields read as the callback's attributes too (``callback.port``, ``callback.rpc_timeout``).

    Example:
        >>> model.train(3, dataset, callbacks=[DebuggerCallback("127.0.0.1", 50051)], dataset_sink_mode=False)

    Or, without changing the script: ``ENABLE_MS_DEBUGGER=1 MS_DEBUGGER_PORT=50051 python train.py``.
    """

    # one online debugger per training: env activation does not add another next to this one (autoattach.py)
    autoattach_role = "debugger"

    step_end_rank = 0      # its step end runs before every other callback's (``step_order.run_first``)

    def __init__(self, host: Optional[str] = None, port: Optional[int] = None, *,
                 settings: Optional[DebuggerSettings] = None, source: str = "light", dump_dir: Optional[str] = None,
                 dump_kernels: Sequence[str] = (), **options: Any) -> None:
        super().__init__()
        if source not in SOURCES:
            raise ConfigError("source", source, f"one of {', '.join(SOURCES)}")
        self.source = source
        self._dump: Optional[DumpTensorSource] = None
        if source == "dump":   # validated now; configured in on_train_begin, before the first compile
            self._dump = DumpTensorSource(dump_dir=dump_dir, kernels=tuple(dump_kernels))
        settings = _ARGUMENT_DEFAULTS if settings is None else settings
        address = {name: value for name, value in (("host", host), ("port", port)) if value is not None}
        self.settings: DebuggerSettings = settings.with_options(**address, **options)
        self.session: Optional[DebuggerSession] = None
        self._tensors: Union[NetworkTensors, DumpTensorSource, None] = None   # the session's TensorSource
        self._step_end_once = OncePerStep(self._step_end)
        self._wrapped: list = []             # callbacks listed before us that run our step end first
        self._loss_monitored = False         # a LossMonitor follows: say so when a step's loss is not finite
        self.enabled = True                  # False: from_env() without ENABLE_MS_DEBUGGER, every hook does nothing

    def __getattr__(self, name: str) -> Any:
        """``callback.port``, ``callback.rpc_timeout``, ...: the settings' fields, where they always were."""
        settings = self.__dict__.get("settings")
        if settings is not None and name in _SETTING_FIELDS:
            return getattr(settings, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def address(self) -> str:
        return self.settings.address

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None, **options: Any) -> "DebuggerCallback":
        """The callback ``ENABLE_MS_DEBUGGER`` / ``MS_DEBUGGER_*`` / ``MSDEBUG_DEBUGGER_*`` describe
        (``DebuggerSettings.from_env``); ``options`` override them (e.g. ``wait_for_server=True``).

        With ``ENABLE_MS_DEBUGGER`` unset, ``0`` or ``false`` the callback does nothing (one INFO line says so), so
        a script that lists ``DebuggerCallback.from_env()`` runs with and without the debugger unchanged
        (``enabled`` is then False). Raises one ``ConfigError`` naming each bad variable, its value and what is
        allowed (``ENABLE_MS_DEBUGGER=yes`` included).
        """
        env = os.environ if environ is None else environ
        settings = DebuggerSettings.from_env(env)
        if not settings.enabled:
            _LOG.info("debugger: ENABLE_MS_DEBUGGER is %s, so DebuggerCallback.from_env() attaches nothing and the "
                      "training runs without the debugger (set ENABLE_MS_DEBUGGER=1 to attach it)",
                      repr(env["ENABLE_MS_DEBUGGER"]) if "ENABLE_MS_DEBUGGER" in env else "unset")
            inert = cls(**{k: v for k, v in options.items() if k not in SOURCE_OPTIONS})
            inert.enabled = False
            return inert
        options.update(source_options_from_env(env, options))
        return cls(settings=settings, **options)

    # -- hooks --------------------------------------------------------------------------------------------------
    def on_train_begin(self, run_context, *, owner: Any = None) -> None:
        """``owner``: the callback in MindSpore's list that carries this one (``DistributedDebugger``), if any."""
        import mindspore

        if not self.enabled:
            return
        debugger_owner.claim(self)      # a hand-written loop's driver stands down while this training runs
        params = run_context.original_args()
        self._go_first(params, self if owner is None else owner)
        device = str(mindspore.get_context("device_target"))
        check_sink_mode(bool(getattr(params, "dataset_sink_mode", False)), device)
        if self.session is not None:            # the same callback in a second training call
            self.session.finish()
        network = getattr(params, "train_network", None) or getattr(params, "network", None)
        if network is None:
            raise ConfigError("run_context.original_args().train_network", None,
                              "the cell being trained (Model.train and DebugSession fill it in)")
        graph = build_graph(network, optimizer=getattr(params, "optimizer", None),
                            loss_fn=getattr(params, "loss_fn", None))
        pynative = mindspore.get_context("mode") == mindspore.PYNATIVE_MODE
        if self._tensors is not None:
            self._tensors.close()
        self._tensors = NetworkTensors(graph, CellCapture(graph, enabled=pynative))
        if self._dump is not None:   # same parameters and roles, the dump's graph and operator tensors
            graph = self._prepare_dump(network, params, graph)
            self._tensors = self._dump
        settings = self.settings
        transport = Transport(settings.address, timeout=settings.rpc_timeout, tls=settings.tls)
        self.session = DebuggerSession(transport, graph, self._tensors, ms_version=mindspore.__version__,
                                       settings=settings, device_target=device)
        if settings.partial_memory:
            _LOG.info("debugger: %s", PARTIAL_MEM_NOTE)
        if not self.session.connect(wait_for_server=settings.wait_for_server, timeout=settings.connect_timeout):
            return
        if self.session.suspend() is Decision.EXIT:
            request_stop(run_context, _LOG, "the debugger server asked to terminate the training at step 0 "
                                            "(Model.train checks for a stop after a step, so one step still runs)")

    def _go_first(self, params, owner: Any) -> None:
        from mindspore.train import LossMonitor

        callbacks = list(getattr(params, "list_callback", None) or ())
        restore(self._wrapped, self._step_end_once)
        self._step_end_once.reset()
        self._wrapped = run_first(callbacks, owner, self._step_end_once)
        before = user_callback_names(self._wrapped)
        if before:
            _LOG.info("debugger: listed after %s; it checks every step before them, so a watchpoint hit pauses "
                      "training before they can end it", ", ".join(before))
        self._loss_monitored = any(isinstance(cb, LossMonitor) for cb in callbacks)

    def on_train_step_end(self, run_context) -> None:
        self._step_end_once(run_context)

    def _step_end(self, run_context) -> None:
        session = self.session
        if session is None or not session.active:
            return
        params = run_context.original_args()
        if self._dump is not None:
            self._dump.begin_step()
        else:
            self._tensors.set_step(params)
        if self._loss_monitored:
            self._warn_if_loss_not_finite(params.net_outputs, session.step + 1)
        if session.step_end() is Decision.EXIT:
            request_stop(run_context, _LOG,
                         f"the debugger server asked to terminate the training at step {session.step}")

    def on_train_step_begin(self, run_context) -> None:
        """Delete the last step's dump files (also when detached: MindSpore keeps dumping every step). Not at the
        end of our step end: the callbacks after us may still read that step's files."""
        if self._dump is not None:
            self._dump.end_step()
        elif self._tensors is not None:
            self._tensors.new_step()

    @staticmethod
    def _warn_if_loss_not_finite(outputs, step: int) -> None:
        import math

        loss = loss_value(outputs)
        if loss is not None and not math.isfinite(loss):
            _LOG.warning("debugger: the loss of step %d is %s. Inspect this step now: when it goes on, CONTINUE or "
                         "TERMINATE alike, MindSpore's LossMonitor in this script raises ValueError ('loss is NAN or "
                         "INF') and the script ends", step, loss)

    def _prepare_dump(self, network, params, light_graph):
        """Configure the dump, compile, and return the dump's graph tied to the live parameters."""
        if self._dump.root is not None:
            raise ConfigError("source", "dump", "the dump source for the first training of a process only",
                              detail="MindSpore reads the dump config once per process; this callback already "
                                     "served a training (use a new process, or source='light')")
        if params.train_dataset is None:
            raise ConfigError("source", "dump", "'light' for a hand-written training loop",
                              detail="the dump source works with Model.train only, whose dataset gives the shapes "
                                     "it compiles the network for before the first step")
        self._dump.configure()
        return self._dump.prepare(network, params.train_dataset,
                                  [(p.name, p.source, p.role) for p in light_graph.parameters.values()])

    def on_train_end(self, run_context) -> None:
        restore(self._wrapped, self._step_end_once)
        self._wrapped = []
        if isinstance(self._tensors, NetworkTensors):
            self._tensors.close()        # no hooks left behind on the user's cells
        if self.session is not None:
            self.session.finish()
        debugger_owner.release(self)
        # the dump's scratch directory goes in __exit__: MindSpore's callback manager exits in reverse order, so
        # that runs after the end hooks of the callbacks listed after us, which may still read the last step

    def __exit__(self, *exc_info) -> None:
        """Also when training raised (or Ctrl-C while paused): tell MindInsight and stop our threads."""
        restore(self._wrapped, self._step_end_once)
        self._wrapped = []
        if self._tensors is not None:
            self._tensors.close()
        if self.session is not None:
            self.session.finish(error=exc_info[1] if len(exc_info) > 1 else None)   # raised: "crashed"
        debugger_owner.release(self)
        if self._dump is not None:
            self._dump.close()
