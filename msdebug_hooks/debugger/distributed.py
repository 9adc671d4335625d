"""The online debugger in a multi-rank job: every rank, or one rank that the others follow; nobody hangs.

``ranks="all", port_per_rank=True`` (what env activation under msrun uses, ``from_env``): every rank connects, rank
``r`` to ``port + r``, the ports ``msdebug serve --port P --ranks N`` (or ``DebuggerServer(port=P, ports=...)`` and
``wait_for_ranks(N)``) listens on; the server holds the ranks in lockstep, so any of them can be paused, stepped and
looked at. MindInsight 2.3.1's online debugger serves one training (one device) per debugger port, so with it only
rank 0 connects (``ranks=[0]``, the constructor's default; under env activation the other ranks find nothing on
their ports, say so and follow). The ranks that do not connect need no debugger of their own to follow: while rank
0 is suspended at a step end, they wait in the step's collectives (the stop agreement's all-reduce, or the next
gradient all-reduce), and run on when rank 0 does. A *terminate* on rank 0 is a stop vote like any other
(``stop_agreement.py``), so every rank stops after the same step and every callback's end hooks run.

Caveat: a rank that waits in a collective while another is paused is subject to the collective library's timeout
(``HCCL_EXEC_TIMEOUT`` on Ascend, the NCCL watchdog on GPU, about 30 s on the CPU); a longer pause of the connected
rank ends the job. Ranks that all connect to our server have no such limit: it holds them at the same step end.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Any, Mapping, Optional, Sequence, Union

from mindspore.train import Callback

from msdebug_hooks._log import get_logger
from msdebug_hooks.debugger.callback import SOURCE_OPTIONS, DebuggerCallback
from msdebug_hooks.debugger.dump_scratch import source_options_from_env
from msdebug_hooks.debugger.reaching import rank_ports
from msdebug_hooks.debugger.session import SessionState
from msdebug_hooks.debugger.settings import DebuggerSettings
from msdebug_hooks.errors import ConfigError
from msdebug_hooks.rank import rank_id, world_size
from msdebug_hooks.stop_agreement import AgreedStop
from msdebug_hooks.validation import whole_number

__all__ = ["DistributedDebugger"]

_LOG = get_logger("debugger.distributed")


def _rank_set(ranks: Any) -> frozenset[int]:
    allowed = '"all" or a non-empty list of ranks (ints >= 0), e.g. [0]'
    if not isinstance(ranks, (list, tuple, set, frozenset, range)) or not ranks:
        raise ConfigError("ranks", ranks, allowed)
    try:
        return frozenset(whole_number("ranks", rank, minimum=0) for rank in ranks)
    except ConfigError:      # named with the whole list the user gave
        raise ConfigError("ranks", ranks, allowed) from None


class DistributedDebugger(AgreedStop, Callback):
    """``DebuggerCallback`` for every rank of a multi-rank job; put it in every rank's callback list.

    Args:
        host: MindInsight's machine.
        port: MindInsight's ``--debugger-port`` (the base port with ``port_per_rank``).
        ranks: the ranks that connect (default ``(0,)``), or ``"all"``.
        port_per_rank: rank ``r`` connects to ``port + r``; required when more than one rank connects.
        settings: a ``DebuggerSettings`` (``from_env`` passes the environment's); ``host`` / ``port`` / ``options``
            override it.
        options: passed on to ``DebuggerCallback`` (``wait_for_server``, ``connect_timeout``, ``source``, ...);
            ``device_id`` is the rank, so MindInsight names the rank.

    Example (``examples/distributed/train.py --debugger HOST:PORT``):
        >>> model.train(3, dataset, callbacks=[DistributedDebugger("127.0.0.1", 50051), LossGuard()],
        ...             dataset_sink_mode=False)
    """

    # one online debugger per training: env activation does not add another next to this one (autoattach.py)
    autoattach_role = "debugger"

    step_end_rank = 0      # its step end runs before every other callback's (``step_order.run_first``)

    def __init__(self, host: Optional[str] = None, port: Optional[int] = None, *,
                 ranks: Union[Sequence[int], str] = (0,), port_per_rank: bool = False,
                 settings: Optional[DebuggerSettings] = None, **options: Any) -> None:
        super().__init__()
        self.ranks: Optional[frozenset[int]] = None if ranks == "all" else _rank_set(ranks)
        if not isinstance(port_per_rank, bool):
            raise ConfigError("port_per_rank", port_per_rank, "True or False")
        if not port_per_rank and (self.ranks is None or len(self.ranks) > 1):
            raise ConfigError("port_per_rank", port_per_rank, "True when several ranks connect",
                              detail="MindInsight 2.3.1 serves one training per debugger port; with "
                                     "port_per_rank=True rank r connects to port + r")
        if "device_id" in options:
            raise ConfigError("device_id", options["device_id"], "left out: each rank reports its rank")
        self.port_per_rank = port_per_rank
        self.source_options = {k: v for k, v in options.items() if k in SOURCE_OPTIONS}
        # checked here, once: the settings, and the source options by the callback they are for
        self.settings = DebuggerCallback(host, port, settings=settings, **options).settings
        self.debugger: Optional[DebuggerCallback] = None

    @property
    def host(self) -> str:
        return self.settings.host

    @property
    def port(self) -> int:
        """The port rank 0 connects to (the base port with ``port_per_rank``)."""
        return self.settings.port

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None, **kwargs: Any) -> "DistributedDebugger":
        """The settings of ``MS_DEBUGGER_*``, as ``DebuggerCallback.from_env``; by default every rank connects, rank
        ``r`` to ``MS_DEBUGGER_PORT + r`` (``msdebug serve --port P --ranks N``), so ``msrun ... train.py`` with
        only ``ENABLE_MS_DEBUGGER=1`` debugs every rank. Under MindInsight (one port) the other ranks find nothing
        on theirs, say so and follow rank 0."""
        env = os.environ if environ is None else environ
        settings = DebuggerSettings.from_env(env)          # every variable checked, bad ones named
        if not settings.enabled:
            return DebuggerCallback.from_env(env)          # the inert callback (its INFO line says why)
        kwargs.setdefault("ranks", "all")
        kwargs.setdefault("port_per_rank", True)
        kwargs.update(source_options_from_env(env, kwargs))
        return cls(settings=settings, **kwargs)

    def connects(self, rank: Optional[int] = None) -> bool:
        """Whether ``rank`` (default: this process's) talks to MindInsight."""
        rank = rank_id() if rank is None else rank
        return self.ranks is None or rank in self.ranks

    # -- hooks --------------------------------------------------------------------------------------------------
    def on_train_begin(self, run_context: Any) -> None:
        rank = rank_id()
        if self.debugger is not None:
            self.debugger.on_train_end(run_context)
        self.debugger = None
        if not self.connects(rank):
            _LOG.info("follows the debugger of rank %s (it waits in the step's collectives while that "
                      "rank is paused)", ", ".join(map(str, sorted(self.ranks or ()))))
            return
        port = self.port + rank if self.port_per_rank else self.port
        self.debugger = DebuggerCallback(settings=dataclasses.replace(self.settings, port=port, device_id=rank),
                                         **self.source_options)
        world = world_size()
        if world > 1:
            _LOG.info("rank %d of %d connects to the debugger server at %s:%d", rank, world, self.host, port)
        layout = rank_ports(self.port, rank, world) if self.port_per_rank else contextlib.nullcontext()
        with layout:                    # a hint printed while connecting names the server for every rank
            self.debugger.on_train_begin(run_context, owner=self)   # its step end runs before those listed first
        session = self.debugger.session
        if world > 1 and session is not None and session.state is SessionState.DETACHED:
            _LOG.warning("rank %d runs undebugged: it follows the connected ranks' pauses in the collectives, and a "
                         "pause longer than the collective timeout (about 30 s on the CPU) fails the job", rank)

    def on_train_step_begin(self, run_context: Any) -> None:
        if self.debugger is not None:
            self.debugger.on_train_step_begin(run_context)

    def _train_step_end(self, run_context: Any) -> None:
        if self.debugger is not None:
            self.debugger.on_train_step_end(run_context)

    def on_train_end(self, run_context: Any) -> None:
        if self.debugger is not None:
            self.debugger.on_train_end(run_context)

    def __exit__(self, *exc_info: Any) -> None:
        if self.debugger is not None:
            self.debugger.__exit__(*exc_info)
