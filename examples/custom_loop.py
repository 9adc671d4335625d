"""DebugSession: the same callbacks in a functional training loop that never calls ``Model.train``.

The loop is MindSpore's functional style: ``ms.value_and_grad`` over a forward function, then the optimizer. The
session hands ``LossGuard``, ``StopAtStep`` and ``StopAtTime`` a real ``RunContext`` with the fields ``Model.train``
fills in; ``session.should_stop`` tells the loop when to break. Batch index 5 of the data is poisoned, so the guard
stops the loop at global step 6 and hands over the rerun recipe.

Run it::

    .venv/bin/python examples/custom_loop.py
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    import mindspore as ms
    from mindspore import Tensor, nn

    from lenet import make_lenet, synthetic_batches
    from msdebug_hooks import DebugSession, LossGuard, StopAtStep, StopAtTime

    ms.set_seed(1)
    network = make_lenet()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Momentum(network.trainable_params(), learning_rate=0.01, momentum=0.9)

    def forward(images, labels):
        return loss_fn(network(images), labels)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

    guard = LossGuard()
    callbacks = [guard, StopAtStep(20), StopAtTime(5)]
    with DebugSession(callbacks=callbacks, network=network, optimizer=optimizer, epoch_size=3) as session:
        for _epoch in range(3):
            for images, labels in synthetic_batches(8, nan_batches={5}):
                session.step_begin()                       # optional: runs on_train_step_begin
                loss, grads = grad_fn(Tensor(images), Tensor(labels))
                optimizer(grads)
                session.step_end(loss)
                print(f"epoch {session.cur_epoch_num} step {session.cur_step_num} loss {loss.item():.4f}")
                if session.should_stop:
                    break
            session.epoch_end()
            if session.should_stop:
                break
    print(f"loop left at step {session.cur_step_num}; guard.failed_step={guard.failed_step}; "
          f"rerun with {guard.stop_at_step()!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
