"""``LossRecorder``: a MindSpore callback that writes each step's loss to the rank's JSON Lines record.

Works under ``Model.train``/``Model.fit`` and under ``DebugSession`` (which fills the same ``cb_params``). The overflow
flag and loss scale are recorded when the train cell returns ``(loss, overflow, scale)`` (loss-scale cells).
"""
from __future__ import annotations

from typing import Any, Optional

from mindspore.train import Callback

from msdebug_hooks.training_loop import overflow_flag, step_loss
from msdebug_hooks.compare.loss import LossWriter, PathLike


def _loss_scale(net_outputs: Any) -> Optional[float]:
    if not isinstance(net_outputs, (tuple, list)) or len(net_outputs) < 3:
        return None
    scale = net_outputs[2]
    if getattr(scale, "size", 1) != 1 or not hasattr(scale, "item"):
        return None
    try:
        return float(scale.item())
    except (TypeError, ValueError):
        return None


class LossRecorder(Callback):
    """Record every training step's loss (and overflow flag / loss scale when present) for ``compare-loss``.

    Args:
        directory: where ``loss_rank_<rank>.jsonl`` is appended (or a ``.jsonl`` file path).
        rank: default: this process's rank.
        fsync_every: fsync every this many steps (each step is flushed at once regardless).
    """

    def __init__(self, directory: PathLike, rank: Optional[int] = None, *, fsync_every: int = 20) -> None:
        super().__init__()
        self._writer = LossWriter(directory, rank, fsync_every=fsync_every)

    @property
    def path(self):
        return self._writer.path

    def on_train_step_end(self, run_context: Any) -> None:
        params = run_context.original_args()
        outputs = getattr(params, "net_outputs", None)
        self._writer.write(int(params.cur_step_num), step_loss(params), epoch=getattr(params, "cur_epoch_num", None),
                           overflow=overflow_flag(outputs), loss_scale=_loss_scale(outputs))

    def on_train_epoch_end(self, run_context: Any) -> None:
        self._writer.sync()

    def on_train_end(self, run_context: Any) -> None:
        self._writer.close()
