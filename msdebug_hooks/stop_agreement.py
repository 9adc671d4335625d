"""One stop decision for every rank of a data-parallel job, at the cost of at most one tiny collective per step.

A stop decided on one rank alone is a hang: if rank 1 stops on a NaN while rank 0 goes on, rank 0 blocks forever in
the next gradient all-reduce. So in a multi-rank job our callbacks do not stop on their own: they *vote* (through
``request_stop``), and the votes of all ranks are combined at fixed points that every rank reaches in the same order.

How it works, per training run (state kept on the run's shared ``cb_params``):

* Callbacks that take stop decisions derive from :class:`AgreedStop`. Its ``on_train_step_end`` runs the callback's
  own check (``_train_step_end``) and then, unconditionally, :func:`agree`. Of all ``AgreedStop`` callbacks in the
  run's callback list, the *last* one (by position, the same on every rank) resolves: it all-reduces the number of
  votes cast on this rank since the last resolution, one float32. Callbacks run in list order, so every vote of the
  step is in by then, however many of our callbacks there are: one collective per step.
* If the sum is not zero, a second all-reduce (only then, once per run) carries each rank's votes (:class:`StopVote`
  records, serialised as JSON by :func:`encode_votes`), so every
  rank logs the same line naming who asked and why; every rank calls ``run_context.request_stop()`` and every
  ``AgreedStop`` callback hears :meth:`AgreedStop.on_agreed_stop` with the :class:`StopDecision`. All ranks stop
  after the same step.
* Votes cast after the step's resolution (by callbacks placed after the last ``AgreedStop`` one, at epoch end, or at
  ``on_train_begin``) wait for the next resolution: the stop comes one step later, but on every rank.
* Every rank must reach the same agreement points: give every rank at least one of these callbacks (the same
  ones, in practice: the same script). Which ones and in which order does not matter for the count, since each rank
  runs exactly one all-reduce per step whenever it has one; a rank without any would leave the others waiting.
* On one rank (``world_size() == 1``) there is no collective at all: a vote stops at once, as ``request_stop()``
  always did. With several ranks but MindSpore's communication not initialised, or no ``AgreedStop`` callback in the
  list, a vote stops only this rank and a warning says the job may hang.

MindSpore 2.10's CPU ``AllReduce`` supports only ``SUM`` over float16/float32, so a MAX of flags is a sum of counts,
and the votes are bytes laid out at ``rank * slot``: the sum of the buffers is their concatenation. What the
agreement costs a step (mostly waiting for the slower rank, time it would otherwise wait in the next gradient
all-reduce) is measured by ``benchmarks/distributed_overhead.py`` (docs/performance.md#agreed-stop-decisions-msrun).
``comm_func.all_reduce`` has no CPU kernel in 2.10, and a jitted cell costs more than the PyNative op.
"""
from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any, Iterable, Optional

from msdebug_hooks._log import get_logger
from msdebug_hooks.rank import communication_ready, rank_id, world_size

_LOG = get_logger("callbacks.agreement")

STATE_KEY = "_msdebug_stop_agreement"
REASON_BYTES = 1024          # per rank, in the once-per-run exchange of the votes (JSON)
HOOKS = ("step_end", "epoch_end")


def stop_line(source: str, reason: str, epoch: int, step: int) -> str:
    """The one wording of a stop request in logs and errors: ``"LossGuard: loss is nan at epoch 1, step 3"``.

    Without a ``source`` the reason is the whole text (said as the caller wrote it); ``step`` 0 (before the first
    step) adds no place.
    """
    if not source:
        return reason
    return f"{source}: {reason} at epoch {epoch}, step {step}" if step > 0 else f"{source}: {reason}"


@dataclasses.dataclass(frozen=True)
class StopVote:
    """One rank's request to stop, as data: who asked (a callback class name, "" if unnamed), why, and when."""

    rank: int
    source: str
    reason: str
    epoch: int = 0
    step: int = 0

    def describe(self) -> str:
        return stop_line(self.source, self.reason, self.epoch, self.step)


@dataclasses.dataclass(frozen=True)
class StopDecision:
    """What every rank agreed on: stop after ``step`` (``cur_step_num``) of ``epoch``, because of ``votes``."""

    step: int
    epoch: int
    world_size: int
    votes: tuple[StopVote, ...]

    def ranks(self, source: Optional[str] = None) -> list[int]:
        """The ranks that voted (for ``source`` only, if given), sorted."""
        return sorted({v.rank for v in self.votes if source is None or v.source == source})

    def by(self, source: str) -> tuple[StopVote, ...]:
        """The votes cast by callbacks of class ``source``, lowest rank first."""
        return tuple(sorted((v for v in self.votes if v.source == source), key=lambda v: v.rank))

    def describe(self) -> str:
        return "; ".join(f"rank {v.rank}: {v.describe()}" for v in sorted(self.votes, key=lambda v: v.rank))


class AgreedStop:
    """Mixin for callbacks whose stop decisions every rank must share (put it before ``Callback`` in the bases).

    Subclasses implement ``_train_step_end`` (and ``_train_epoch_end`` with ``agreement_hooks`` including
    ``"epoch_end"``) instead of the ``on_train_*`` hooks, call ``request_stop(...)`` to vote, and act on the outcome
    in :meth:`on_agreed_stop`, which runs on every rank, whoever voted.
    """

    agreement_hooks: tuple[str, ...] = ("step_end",)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for hook in ("on_train_step_end", "on_train_epoch_end"):
            if hook in cls.__dict__:
                raise TypeError(f"{cls.__name__} defines {hook}; an AgreedStop callback implements "
                                f"_{hook[3:]} instead, so the agreement point cannot be skipped")
        unknown = set(cls.agreement_hooks) - set(HOOKS)
        if unknown:
            raise TypeError(f"{cls.__name__}.agreement_hooks has {sorted(unknown)}; allowed: {list(HOOKS)}")

    def on_train_step_end(self, run_context: Any) -> None:
        self._train_step_end(run_context)
        agree(run_context, self, "step_end")

    def on_train_epoch_end(self, run_context: Any) -> None:
        self._train_epoch_end(run_context)
        if "epoch_end" in self.agreement_hooks:
            agree(run_context, self, "epoch_end")

    def _train_step_end(self, run_context: Any) -> None:
        """The callback's own step-end work (vote with ``request_stop``)."""

    def _train_epoch_end(self, run_context: Any) -> None:
        """The callback's own epoch-end work."""

    def on_agreed_stop(self, run_context: Any, decision: StopDecision) -> None:
        """Called on every rank once a stop is decided (on one rank: right after the vote)."""


@dataclasses.dataclass
class _State:
    participants: list
    pending: list = dataclasses.field(default_factory=list)     # this rank's StopVotes not yet agreed
    decided: Optional[StopDecision] = None
    known: bool = True                                           # participants come from cb_params.list_callback
    warned: bool = False

    def resolver(self, hook: str, callback: Any) -> Any:
        if not self.known or not any(p is callback for p in self.participants):
            return callback
        last = None
        for participant in self.participants:
            if hook in participant.agreement_hooks:
                last = participant
        return last


def collective_needed() -> bool:
    """True when stop decisions must be agreed through a collective: several ranks, communication initialised."""
    return communication_ready() and world_size() > 1


def vote(run_context: Any, logger: logging.Logger, reason: str, source: Any = None) -> None:
    """Ask every rank to stop after the current step (see the module docstring for when that happens).

    ``source`` is the voting callback: its class names the vote; the epoch and step come from the run context.
    """
    cb_params = run_context.original_args()
    ballot = StopVote(rank_id(), "" if source is None else type(source).__name__, reason,
                      _int(cb_params, "cur_epoch_num"), _int(cb_params, "cur_step_num"))
    state = _state(run_context)
    has_point = bool(state.participants) or (not state.known and isinstance(source, AgreedStop))
    if not collective_needed() or not has_point:
        if world_size() > 1:
            _warn_unagreed(state, ballot.describe())
        logger.warning("stopping training: %s", ballot.describe())
        run_context.request_stop()
        decision = StopDecision(ballot.step, ballot.epoch, 1, (ballot,))
        _notify(run_context, state, decision, source)
        return
    if state.decided is not None:
        logger.info("%s (training is already stopping on every rank)", ballot.describe())
        return
    logger.info("asking every rank to stop: %s", ballot.describe())
    state.pending.append(ballot)


def encode_votes(votes: Iterable[StopVote], limit: int = REASON_BYTES) -> bytes:
    """One rank's votes as UTF-8 JSON of at most ``limit`` bytes (the rank is where the bytes travel, not in them).

    Over the limit the longest reason is shortened (ending in "..."), and as a last resort the last votes dropped,
    so the bytes always parse.
    """
    records = [{"source": v.source, "reason": v.reason, "epoch": v.epoch, "step": v.step} for v in votes]
    while True:
        data = json.dumps(records, ensure_ascii=False).encode("utf-8")
        if len(data) <= limit or not records:
            return data
        longest = max(records, key=lambda r: len(r["reason"]))
        if len(longest["reason"]) > 8:
            longest["reason"] = longest["reason"][:len(longest["reason"]) // 2] + "..."
        else:
            records.pop()


def decode_votes(rank: int, data: bytes) -> list[StopVote]:
    """The votes :func:`encode_votes` wrote on ``rank``; bytes that do not parse become one unnamed vote saying so."""
    if not data:
        return []
    try:
        records = json.loads(data.decode("utf-8"))
        return [StopVote(rank, str(r["source"]), str(r["reason"]), int(r["epoch"]), int(r["step"]))
                for r in records]
    except (ValueError, TypeError, KeyError) as error:
        return [StopVote(rank, "", f"unreadable stop vote ({error}): {data[:80]!r}")]


def agree(run_context: Any, callback: Any, hook: str) -> None:
    """The agreement point of ``callback``'s ``hook``: resolves the votes if ``callback`` is the last participant."""
    if not collective_needed():
        return
    state = _state(run_context)
    if state.decided is not None or state.resolver(hook, callback) is not callback:
        return
    _resolve(run_context, state)


# ---- internals ------------------------------------------------------------------------------------------------
def _resolve(run_context: Any, state: _State) -> None:
    import numpy as np

    count = _allreduce_sum(np.array([float(len(state.pending))], dtype=np.float32))
    if not count[0] > 0:
        return
    world, me = world_size(), rank_id()
    local = encode_votes(state.pending)
    buffer = np.zeros(world * REASON_BYTES, dtype=np.float32)
    buffer[me * REASON_BYTES: me * REASON_BYTES + len(local)] = np.frombuffer(local, dtype=np.uint8)
    slots = _allreduce_sum(buffer).astype(np.uint8).reshape(world, REASON_BYTES)
    votes = []
    for rank in range(world):
        votes.extend(decode_votes(rank, slots[rank].tobytes().rstrip(b"\0")))
    cb_params = run_context.original_args()
    decision = StopDecision(_int(cb_params, "cur_step_num"), _int(cb_params, "cur_epoch_num"), world, tuple(votes))
    state.pending.clear()
    state.decided = decision
    _LOG.warning("stopping training on all %d ranks after epoch %d, step %d: %s", world,
                 decision.epoch, decision.step, decision.describe())
    run_context.request_stop()
    _notify(run_context, state, decision, None)


def _notify(run_context: Any, state: _State, decision: StopDecision, source: Any) -> None:
    """``on_agreed_stop`` of every participant (and of the voter), each once; the first exception is re-raised
    after all were told (``LossGuard(raise_error=True)`` raises there)."""
    targets = list(state.participants)
    if isinstance(source, AgreedStop) and not any(t is source for t in targets):
        targets.append(source)
    error: Optional[BaseException] = None
    for target in targets:
        try:
            target.on_agreed_stop(run_context, decision)
        except BaseException as exc:  # noqa: BLE001 - re-raised below, after every participant heard
            error = error or exc
    if error is not None:
        raise error


_OP: Any = None
_CALLS = 0


def collectives_called() -> int:
    """How many agreement all-reduces this process has run (for tests and benchmarks: one per step expected)."""
    return _CALLS


def _allreduce_sum(values: Any) -> Any:
    """Sum ``values`` (float32 numpy) over the world group; returns numpy."""
    global _OP, _CALLS
    _CALLS += 1
    import mindspore as ms
    from mindspore import ops
    from mindspore.communication import GlobalComm

    if _OP is None:
        _OP = ops.AllReduce(ops.ReduceOp.SUM, GlobalComm.WORLD_COMM_GROUP)
    return _OP(ms.Tensor(values)).asnumpy()


def _state(run_context: Any) -> _State:
    cb_params = run_context.original_args()
    state = _get(cb_params)
    if state is None:
        listed = _get_field(cb_params, "list_callback")
        if listed is None:
            state = _State(participants=[], known=False)
        else:
            seen: set[int] = set()
            participants = []
            for callback in _flatten(listed):
                if isinstance(callback, AgreedStop) and id(callback) not in seen:
                    seen.add(id(callback))
                    participants.append(callback)
            state = _State(participants=participants)
        _set(cb_params, state)
    return state


def _flatten(callbacks: Any) -> Iterable[Any]:
    if isinstance(callbacks, (list, tuple)):
        for callback in callbacks:
            yield from _flatten(callback)
    else:
        yield callbacks


def _get(cb_params: Any) -> Optional[_State]:
    value = cb_params.get(STATE_KEY) if isinstance(cb_params, dict) else getattr(cb_params, STATE_KEY, None)
    return value if isinstance(value, _State) else None


def _set(cb_params: Any, state: _State) -> None:
    if isinstance(cb_params, dict):
        cb_params[STATE_KEY] = state
    else:
        setattr(cb_params, STATE_KEY, state)


def _get_field(cb_params: Any, name: str) -> Any:
    return cb_params.get(name) if isinstance(cb_params, dict) else getattr(cb_params, name, None)


def _int(cb_params: Any, name: str) -> int:
    value = _get_field(cb_params, name)
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _warn_unagreed(state: _State, reason: str) -> None:
    if state.warned:
        return
    state.warned = True
    why = ("MindSpore's communication is not initialised (call mindspore.communication.init() before training)"
           if not communication_ready() else "no msdebug stop callback (StopAtTime, StopAtStep, LossGuard, ...) is "
           "in the callback list to agree the decision at a step end")
    _LOG.warning("this stop is decided on this rank alone (%d ranks, but %s); the other ranks may block "
                 "in their next collective operation: %s", world_size(), why, reason)
