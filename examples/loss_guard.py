"""LossGuard: catch a non-finite loss at the exact step, for plain and loss-scale (tuple-output) training.

Three short runs over LeNet-5 with one poisoned batch (batch index 3, global step 4):

1. ``nn.TrainOneStepWithLossScaleCell``: the train cell returns ``(loss, overflow, scale)``. MindSpore's
   ``LossMonitor`` misses a NaN/Inf loss in such a tuple; ``LossGuard`` reads the first element and stops cleanly:
   ``on_train_end`` of the other callbacks still runs. The overflow flag alone (finite loss) is not a failure: loss
   scaling skips that update by design.
2. Plain ``Model`` training with ``save_last_good`` and ``keep_previous=True``: the failing update corrupts the
   weights, but the guard writes the parameters it kept from before that update (rank and step in the file name).
3. ``raise_error=True``: a ``LossGuardError`` at once; the other callbacks' end hooks do not run (use it when such a
   hook would overwrite a good backup with a broken state).

Run it::

    .venv/bin/python examples/loss_guard.py
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    import numpy as np
    from mindspore.train import Callback, Model

    from lenet import make_dataset, make_loss_scale_cell, make_model
    from msdebug_hooks import LossGuard, LossGuardError

    class EndHook(Callback):
        def on_train_end(self, run_context):
            print("   other callback: on_train_end ran")

    print("1. loss-scale cell, tuple outputs, graceful stop")
    cell, _ = make_loss_scale_cell()
    guard = LossGuard()
    Model(cell).train(2, make_dataset(num_batches=6, nan_batches={3}), callbacks=[guard, EndHook()])
    if guard.failed_step is None:   # the run ended first, e.g. a debugger (msdebug debug) terminated it
        print("   the guard did not fire: training ended before the poisoned step")
    else:
        print(f"   failed_step={guard.failed_step} failed_epoch={guard.failed_epoch} reason={guard.reason!r}")
        print(f"   rerun with: {guard.stop_at_step()!r} and {guard.dump_config('/tmp/dump')!r}")

    print("2. plain training, keep the last good parameters")
    directory = Path(tempfile.mkdtemp(prefix="loss-guard-"))
    model, network = make_model()
    guard = LossGuard(save_last_good=directory, keep_previous=True)
    model.train(2, make_dataset(num_batches=6, nan_batches={3}), callbacks=[guard, EndHook()])
    finite_now = bool(np.isfinite(network.conv1.weight.asnumpy()).all())
    print(f"   weights finite after the failing step: {finite_now}; saved: {guard.last_good_checkpoint}")
    print(f"   (the checkpoint stays in {directory}; delete that directory when done)")

    print("3. raise_error=True")
    model, _ = make_model()
    try:
        model.train(2, make_dataset(num_batches=6, nan_batches={3}), callbacks=[LossGuard(raise_error=True),
                                                                                 EndHook()])
    except LossGuardError as error:
        print(f"   LossGuardError: {error} (step={error.step}); no on_train_end above this line for run 3")
    return 0


if __name__ == "__main__":
    sys.exit(main())
