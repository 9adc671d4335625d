"""Keep the best checkpoints by a monitored metric: the docs' ``SaveCallback``, without evaluating every step.

MindSpore 2.10's ``ModelCheckpoint`` saves periodically but has no ``monitor``; the docs' hand-written ``SaveCallback``
calls ``model.eval`` after *every* step through the deprecated ``step_end`` hook and keeps every improvement forever.
``BestCheckpoint`` evaluates every N epochs (default) or every N steps, treats a NaN/Inf metric as "never best",
writes each checkpoint atomically, keeps only the best ``keep`` files, and can stop training after ``patience``
evaluations without improvement.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Union

from mindspore.train import Callback

from msdebug_hooks._log import get_logger
from msdebug_hooks.stop_agreement import AgreedStop
from msdebug_hooks.training_loop import request_stop
from msdebug_hooks.ckpt import find_non_finite, save_checkpoint_atomic
from msdebug_hooks.errors import ConfigError
from msdebug_hooks.validation import optional_whole_number, real_number, whole_number
from msdebug_hooks.rank import rank_id

_LOG = get_logger("callbacks.best_checkpoint")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")

EvalFn = Callable[[Any], Union[Mapping[str, Any], float]]


@dataclass(frozen=True)
class Evaluation:
    """One evaluation: where in training it ran, the metric, and the file saved for it (None if not saved)."""

    epoch: int
    step: int
    value: float
    path: Optional[Path]


def _positive_int_or_none(field: str, value: Any) -> Optional[int]:
    return optional_whole_number(field, value, minimum=1, allowed="None or an integer >= 1")


class BestCheckpoint(AgreedStop, Callback):
    """Evaluate periodically and keep the ``keep`` best checkpoints by ``monitor``.

    ``model_or_eval_fn`` is either a ``mindspore.train.Model`` (evaluated with
    ``model.eval(eval_dataset, dataset_sink_mode=False)[monitor]``; the model needs ``metrics`` that produce
    ``monitor``) or a callable ``eval_fn(network) -> dict | float`` for anything else. Evaluation runs at the end of
    every ``every_n_epochs``-th epoch, or, when ``every_n_steps`` is given, after every ``every_n_steps``-th global
    step instead. A NaN/Inf metric is logged and never counts as best; so is a finite metric of a network whose
    parameters (or optimizer states) hold NaN/Inf: that checkpoint is not written and the previous best is kept.
    A value enters the kept set when it beats the worst kept value by more than ``min_delta``; the file is saved
    atomically to
    ``<directory>/rank_<r>/<prefix>-rank<r>-epoch<E>-step<S>-<monitor><value>.ckpt`` and the bests that fall out of
    the top ``keep`` are deleted. With ``patience``, training stops cleanly after that many evaluations in a row that
    do not improve on the best by more than ``min_delta``; in a multi-rank job that stop is a vote every rank agrees
    on (``stop_agreement.py``), so all ranks stop after the same step. Each rank evaluates and saves its own
    files under ``rank_<r>``.

    Example::

        model = Model(net, loss, opt, metrics={"accuracy": nn.Accuracy()})
        best = BestCheckpoint(model, eval_ds, monitor="accuracy", mode="max", keep=1)
        model.train(10, train_ds, callbacks=[best])
        print(best.best_score, best.best_path)
    """

    def __init__(self, model_or_eval_fn: Any, eval_dataset: Any = None, *, monitor: str = "accuracy",
                 mode: str = "max", every_n_steps: Optional[int] = None, every_n_epochs: Optional[int] = 1,
                 directory: Union[str, os.PathLike] = "./checkpoints", prefix: str = "best", keep: int = 1,
                 min_delta: float = 0.0, patience: Optional[int] = None) -> None:
        super().__init__()
        if hasattr(model_or_eval_fn, "eval") and hasattr(model_or_eval_fn, "train"):
            if eval_dataset is None:
                raise ConfigError("eval_dataset", None, "a dataset when model_or_eval_fn is a Model")
            self._model, self._eval_fn = model_or_eval_fn, None
        elif callable(model_or_eval_fn):
            self._model, self._eval_fn = None, model_or_eval_fn
        else:
            raise ConfigError("model_or_eval_fn", type(model_or_eval_fn).__name__,
                              "a mindspore.train.Model or a callable eval_fn(network) -> dict | float")
        if not isinstance(monitor, str) or not monitor:
            raise ConfigError("monitor", monitor, "a non-empty metric name")
        if mode not in ("max", "min"):
            raise ConfigError("mode", mode, "'max' or 'min'")
        self._every_n_steps = _positive_int_or_none("every_n_steps", every_n_steps)
        self._every_n_epochs = _positive_int_or_none("every_n_epochs", every_n_epochs)
        if self._every_n_steps is None and self._every_n_epochs is None:
            raise ConfigError("every_n_epochs", None, "an integer >= 1 when every_n_steps is None")
        whole_number("keep", keep, minimum=1, allowed="an integer >= 1")
        real_number("min_delta", min_delta, minimum=0, allowed="a finite number >= 0")
        self._patience = _positive_int_or_none("patience", patience)
        if not isinstance(prefix, str) or not _SAFE_NAME.match(prefix):
            raise ConfigError("prefix", prefix, "a non-empty file-name prefix of letters, digits, '_', '-', '.'")
        self.eval_dataset = eval_dataset
        self.monitor = monitor
        self.mode = mode
        self.keep = keep
        self.min_delta = float(min_delta)
        self.prefix = prefix
        self.directory = Path(directory).expanduser() / f"rank_{rank_id()}"
        self.evaluations: list[Evaluation] = []
        self._kept: list[Evaluation] = []      # best first
        self._best: Optional[float] = None
        self._stale = 0                          # evaluations in a row without improvement

    # -- queries ---------------------------------------------------------------------------------------------
    @property
    def best_score(self) -> Optional[float]:
        """The best finite metric seen so far (None before the first finite evaluation)."""
        return self._best

    @property
    def best_path(self) -> Optional[Path]:
        """The checkpoint file of the best metric (None if nothing was saved)."""
        return self._kept[0].path if self._kept else None

    @property
    def kept_paths(self) -> list[Path]:
        """The files currently kept, best first."""
        return [e.path for e in self._kept if e.path is not None]

    # -- hooks -----------------------------------------------------------------------------------------------
    agreement_hooks = ("step_end", "epoch_end")   # a patience stop at epoch end is agreed right there

    def _train_step_end(self, run_context: Any) -> None:
        if self._every_n_steps is None:
            return
        cb_params = run_context.original_args()
        if int(cb_params.cur_step_num) % self._every_n_steps == 0:
            self._evaluate_and_keep(run_context, cb_params)

    def _train_epoch_end(self, run_context: Any) -> None:
        if self._every_n_steps is not None:
            return
        cb_params = run_context.original_args()
        if int(cb_params.cur_epoch_num) % self._every_n_epochs == 0:
            self._evaluate_and_keep(run_context, cb_params)

    def on_train_end(self, run_context: Any) -> None:
        if self._kept:
            _LOG.info("best %s=%.6g in %s", self.monitor, self._best, self._kept[0].path)
        else:
            _LOG.warning("no checkpoint saved: %s",
                         "no evaluation ran" if not self.evaluations else f"no finite {self.monitor} was seen")

    # -- internals -------------------------------------------------------------------------------------------
    def _better(self, value: float, reference: Optional[float], delta: float) -> bool:
        if reference is None:
            return True
        return value > reference + delta if self.mode == "max" else value < reference - delta

    def _measure(self, cb_params: Any) -> float:
        network = _first(cb_params, "network", "train_network")
        if self._model is not None:
            train_network = _get(cb_params, "train_network")
            was_training = bool(getattr(train_network, "training", False))
            result = self._model.eval(self.eval_dataset, dataset_sink_mode=False)
            if train_network is not None and was_training:
                # a different Model over the same backbone leaves it in eval mode; the training Model only
                # re-checks its own flag, so put the cells back as they were
                train_network.set_train(True)
        else:
            result = self._eval_fn(network)
        if isinstance(result, Mapping):
            if self.monitor not in result:
                raise ConfigError("monitor", self.monitor, f"one of the evaluation results {sorted(result)}")
            result = result[self.monitor]
        try:
            return float(result.item() if hasattr(result, "item") else result)
        except (TypeError, ValueError) as exc:
            raise ConfigError("monitor", self.monitor, "a metric that evaluates to a number",
                              detail=f"got {type(result).__name__}") from exc

    def _evaluate_and_keep(self, run_context: Any, cb_params: Any) -> None:
        epoch, step = int(cb_params.cur_epoch_num), int(cb_params.cur_step_num)
        value = self._measure(cb_params)
        if not math.isfinite(value):
            self.evaluations.append(Evaluation(epoch, step, value, None))
            _LOG.warning("epoch %d step %d: %s is %s; not counted as best", epoch, step,
                         self.monitor, value)
            self._count_stale(run_context, epoch, step)
            return
        improved = self._better(value, self._best, self.min_delta)
        worst = self._kept[-1].value if len(self._kept) >= self.keep else None
        path = None
        if self._better(value, worst, self.min_delta):
            bad = self._non_finite_weights(cb_params)
            if bad:  # a finite metric does not make a network with NaN/Inf weights good
                self.evaluations.append(Evaluation(epoch, step, value, None))
                _LOG.warning("epoch %d step %d: %s=%.6g, but %d parameter(s) hold NaN/Inf (%s): not saved, not "
                             "counted as best; the best stays %s", epoch, step, self.monitor, value, len(bad),
                             ", ".join(b.name for b in bad[:3]) + (", ..." if len(bad) > 3 else ""),
                             f"{self._best:.6g} in {self.best_path}" if self._kept else "unset")
                self._count_stale(run_context, epoch, step)
                return
            path = self._save(cb_params, epoch, step, value)
            self._kept.append(Evaluation(epoch, step, value, path))
            self._kept.sort(key=lambda e: -e.value if self.mode == "max" else e.value)
            for dropped in self._kept[self.keep:]:
                if dropped.path is not None:
                    dropped.path.unlink(missing_ok=True)
            del self._kept[self.keep:]
        self.evaluations.append(Evaluation(epoch, step, value, path))
        if improved:
            self._best, self._stale = value, 0
            _LOG.info("epoch %d step %d: new best %s=%.6g saved to %s", epoch, step,
                      self.monitor, value, path)
        else:
            self._count_stale(run_context, epoch, step)

    def _count_stale(self, run_context: Any, epoch: int, step: int) -> None:
        self._stale += 1
        if self._patience is not None and self._stale >= self._patience:
            request_stop(run_context, _LOG,
                         f"{self.monitor} did not improve on {self._best} by more than "
                         f"{self.min_delta} for {self._stale} evaluations (patience={self._patience})", source=self)

    @staticmethod
    def _non_finite_weights(cb_params: Any) -> list:
        """The parameters (weights and optimizer states: what the checkpoint would hold) that are NaN/Inf."""
        network = _first(cb_params, "train_network", "network")
        return find_non_finite((p.name, _as_numpy(p)) for p in network.get_parameters())

    def _save(self, cb_params: Any, epoch: int, step: int, value: float) -> Path:
        rank = rank_id()
        metric = re.sub(r"[^A-Za-z0-9_-]", "_", self.monitor)
        target = self.directory / f"{self.prefix}-rank{rank}-epoch{epoch}-step{step}-{metric}{value:.6g}.ckpt"
        return save_checkpoint_atomic(_first(cb_params, "train_network", "network"), target)


def _as_numpy(parameter: Any) -> Any:
    try:
        return parameter.asnumpy()       # on the CPU a view of the live values: nothing is copied
    except TypeError:                    # numpy has no bfloat16
        import mindspore as ms

        return parameter.astype(ms.float32).asnumpy()


def _get(cb_params: Any, name: str) -> Any:
    """A run-context entry or None (MindSpore's params dict raises KeyError, not AttributeError, when absent)."""
    if isinstance(cb_params, Mapping):
        return cb_params.get(name)
    return getattr(cb_params, name, None)


def _first(cb_params: Any, *names: str) -> Any:
    for name in names:
        value = _get(cb_params, name)
        if value is not None:
            return value
    return None
