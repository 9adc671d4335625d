"""The online debugger in a multi-rank job: one rank talks to MindInsight, every rank follows it, nobody hangs.

MindInsight 2.3.1's online debugger serves one training (one device) per debugger port. So by default only rank 0
connects. The other ranks need no debugger of their own to follow it: while rank 0 is suspended at a step end,
they wait in the step's collectives (the stop agreement's all-reduce, or the next gradient all-reduce), and run on
when rank 0 does. A *terminate* on rank 0 is a stop vote like any other (``stop_agreement.py``), so every rank
stops after the same step and every callback's end hooks run. ``ranks=[0, 1], port_per_rank=True`` lets several
ranks connect instead, rank ``r`` to ``port + r`` (one MindInsight per port).

Caveat: a rank that waits in a collective while another is paused is subject to the collective library's timeout
(``HCCL_EXEC_TIMEOUT`` on Ascend, the NCCL watchdog on GPU); a pause longer than that ends the job. On the CPU no
limit was seen in short pauses.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence, Union

from mindspore.train import Callback

from msdebug_hooks._log import get_logger
from msdebug_hooks.debugger.callback import DebuggerCallback
from msdebug_hooks.debugger.settings import validate_address
from msdebug_hooks.errors import ConfigError
from msdebug_hooks.rank import rank_id, world_size
from msdebug_hooks.stop_agreement import AgreedStop

__all__ = ["DistributedDebugger"]

_LOG = get_logger("debugger.distributed")


class DistributedDebugger(AgreedStop, Callback):
    """``DebuggerCallback`` for every rank of a multi-rank job; put it in every rank's callback list.

    Args:
        host: MindInsight's machine.
        port: MindInsight's ``--debugger-port`` (the base port with ``port_per_rank``).
        ranks: the ranks that connect (default ``(0,)``), or ``"all"``.
        port_per_rank: rank ``r`` connects to ``port + r``; required when more than one rank connects.
        options: passed on to ``DebuggerCallback`` (``wait_for_server``, ``connect_timeout``, ...); ``device_id``
            is the rank, so MindInsight names the rank.

    Example (``examples/distributed/train.py --debugger HOST:PORT``):
        >>> model.train(3, dataset, callbacks=[DistributedDebugger("127.0.0.1", 50051), LossGuard()],
        ...             dataset_sink_mode=False)
    """

    # one online debugger per training: env activation does not add another next to this one (autoattach.py)
    autoattach_role = "debugger"

    def __init__(self, host: str = "127.0.0.1", port: int = 50051, *, ranks: Union[Sequence[int], str] = (0,),
                 port_per_rank: bool = False, **options: Any) -> None:
        super().__init__()
        if ranks == "all":
            self.ranks: Optional[frozenset[int]] = None
        elif isinstance(ranks, (list, tuple, set, frozenset, range)) and ranks and all(
                isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in ranks):
            self.ranks = frozenset(ranks)
        else:
            raise ConfigError("ranks", ranks, '"all" or a non-empty list of ranks (ints >= 0), e.g. [0]')
        if not isinstance(port_per_rank, bool):
            raise ConfigError("port_per_rank", port_per_rank, "True or False")
        if not port_per_rank and (self.ranks is None or len(self.ranks) > 1):
            raise ConfigError("port_per_rank", port_per_rank, "True when several ranks connect",
                              detail="MindInsight 2.3.1 serves one training per debugger port; with "
                                     "port_per_rank=True rank r connects to port + r")
        if "device_id" in options:
            raise ConfigError("device_id", options["device_id"], "left out: each rank reports its rank")
        self.host, self.port = validate_address(host, port)
        self.port_per_rank = port_per_rank
        self.options = dict(options)
        DebuggerCallback(self.host, self.port, **self.options)        # the options are checked here, once
        self.debugger: Optional[DebuggerCallback] = None

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None, **kwargs: Any) -> "DistributedDebugger":
        """Host, port and memory setting from ``MS_DEBUGGER_*``, as ``DebuggerCallback.from_env``."""
        single = DebuggerCallback.from_env(environ)
        kwargs.setdefault("wait_for_server", single.wait_for_server)
        kwargs.setdefault("partial_memory", single.partial_memory)
        return cls(single.host, single.port, **kwargs)

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
        self.debugger = DebuggerCallback(self.host, port, device_id=rank, **self.options)
        if world_size() > 1:
            _LOG.info("connects to the debugger server at %s:%d", self.host, port)
        self.debugger.on_train_begin(run_context, owner=self)   # its step end runs before the callbacks listed first

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
