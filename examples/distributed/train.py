"""A two-rank data-parallel LeNet-5 under ``msrun``, guarded by msdebug-hooks; every stop is agreed by all ranks.

Run it from the repository root (``msrun`` comes with MindSpore; the venv's ``bin`` must be on ``PATH`` so that msrun
starts the workers with the same python)::

    export PATH=$PWD/.venv/bin:$PATH
    msrun --worker_num=2 --local_worker_num=2 --master_port=8118 --join=True --log_dir=msrun_logs \\
        examples/distributed/train.py --nan-rank 1 --nan-step 5

msrun starts a scheduler and one worker per rank; each worker runs this script with ``RANK_ID``/``MS_NODE_ID`` set,
and writes its output to ``msrun_logs/worker_<rank>.log``. Here only rank 1's data holds a poisoned batch (step 5):
rank 1's ``LossGuard`` sees the bad loss, every rank agrees after that step, and both ranks stop cleanly after step
5 (without the agreement rank 0 would block for ever in the next gradient all-reduce). Each rank logs
``stopping training on all 2 ranks after epoch 1, step 5: rank 1: LossGuard: loss is inf ...``.

Options: ``--stop-time SECONDS`` (``StopAtTime``), ``--restored-time RANK:SECONDS`` (time a resumed rank already
spent), ``--slow-rank RANK --sleep SECONDS`` (that rank sleeps after every step), ``--stop-step N``
(``StopAtStep``), ``--dump DIR`` (a sync dump of the steps around ``--nan-step``, one ``rank_<r>/`` per rank;
read it with ``msdebug check-dump DIR --watch tensor_overflow``), ``--debugger HOST:PORT`` (MindInsight's online
debugger: rank 0 connects, rank 1 follows its pauses; terminate stops both after the same step; ``--debugger-ranks
all`` connects every rank, rank r to PORT + r, as ``msdebug serve --ranks N`` listens; so does env activation
alone: ``ENABLE_MS_DEBUGGER=1 MS_DEBUGGER_PORT=PORT msrun ...`` without ``--debugger``), ``--no-guard`` (no
``LossGuard``: the poisoned step does not end the job, so a debugger can step past it). Each rank prints one
``MSDEBUG_RESULT {json}`` line at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))      # examples/: lenet.py


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batches", type=int, default=12, help="batches per epoch on each rank")
    parser.add_argument("--nan-rank", type=int, default=None, help="the rank whose data holds a poisoned batch")
    parser.add_argument("--nan-step", type=int, default=5, help="1-based global step of the poisoned batch")
    parser.add_argument("--stop-time", type=float, default=3600.0, help="StopAtTime budget in seconds")
    parser.add_argument("--restored-time", default=None, metavar="RANK:SECONDS",
                        help="seconds of the budget that RANK already used (as restored from its checkpoint)")
    parser.add_argument("--stop-step", type=int, default=None, help="StopAtStep: stop after this global step")
    parser.add_argument("--slow-rank", type=int, default=None, help="this rank sleeps --sleep seconds per step")
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--dump", default=None, metavar="DIR", help="sync dump of the steps around --nan-step")
    parser.add_argument("--no-guard", action="store_true",
                        help="no LossGuard: a poisoned step does not stop the job (to step past it in a debugger)")
    parser.add_argument("--debugger", default=None, metavar="HOST:PORT",
                        help="MindInsight's debugger: rank 0 connects, the other ranks follow its pauses")
    parser.add_argument("--debugger-ranks", default="0", metavar="all|R,R",
                        help="ranks that connect to the debugger (all: every rank, rank r to PORT + r, e.g. "
                             "msdebug serve --port PORT --ranks N)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from msdebug_hooks import DistributedDebugger, DumpConfig, LossGuard, StopAtStep, StopAtTime
    from msdebug_hooks.stop_agreement import collectives_called
    from msdebug_hooks.rank import is_scheduler, rank_id, world_size

    if args.dump:
        # before init() and the first compile; support_device keeps every device id (it is not a rank list), and
        # MindSpore writes each rank's data to <DIR>/rank_<rank>/
        DumpConfig.around_step(args.nan_step, path=str(Path(args.dump).absolute()), net_name="LeNet").apply()

    import mindspore as ms
    from mindspore import ParallelMode
    from mindspore.communication import init
    from mindspore.train import Callback

    from lenet import make_dataset, make_model

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    init()                       # msrun's scheduler process serves the cluster here and exits
    assert not is_scheduler()
    ms.set_auto_parallel_context(parallel_mode=ParallelMode.DATA_PARALLEL, gradients_mean=True)
    rank, world = rank_id(), world_size()

    class Progress(Callback):
        """Records the steps this rank ran; the slow rank sleeps after each one."""

        def __init__(self) -> None:
            self.steps: list[int] = []

        def on_train_step_end(self, run_context) -> None:
            self.steps.append(int(run_context.original_args().cur_step_num))
            if rank == args.slow_rank and args.sleep > 0:
                time.sleep(args.sleep)

    model, _ = make_model(seed=1)                     # same initial weights on every rank
    nan = {args.nan_step - 1} if rank == args.nan_rank else None
    dataset = make_dataset(args.batches, seed=rank, nan_batches=nan)   # each rank its own data
    guard = LossGuard()
    timer = StopAtTime(args.stop_time, unit="seconds")
    if args.restored_time:
        which, _, seconds = args.restored_time.partition(":")
        if int(which) == rank:
            timer.load_state_dict({"time_elapsed": float(seconds)})
    progress = Progress()
    callbacks = [progress] + ([] if args.no_guard else [guard]) + [timer]
    callbacks += [StopAtStep(args.stop_step)] if args.stop_step else []
    if args.debugger:
        host, _, port = args.debugger.rpartition(":")
        ranks = "all" if args.debugger_ranks == "all" else [int(r) for r in args.debugger_ranks.split(",")]
        callbacks.insert(0, DistributedDebugger(host, int(port), ranks=ranks, wait_for_server=True,
                                                port_per_rank=ranks == "all" or len(ranks) > 1))
    started = time.monotonic()
    model.train(args.epochs, dataset, callbacks=callbacks, dataset_sink_mode=False)
    result = {"rank": rank, "world": world, "pid": os.getpid(), "steps": progress.steps,
              "seconds": round(time.monotonic() - started, 3),
              "guard": {"failed_step": guard.failed_step, "failed_ranks": guard.failed_ranks, "reason": guard.reason},
              "timer": {"stopped_step": timer.stopped_step},
              "agreement_collectives": collectives_called()}
    print("MSDEBUG_RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
