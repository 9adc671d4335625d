"""No callback of ours trips MindSpore 2.10's legacy-hook check: no warning under Model.train, no error under fit.

MindSpore warns (train/eval) or raises ValueError (fit) for callbacks whose class defines ``step_end``, ``begin``...
The control run shows the check is live in this MindSpore, so the quiet run means something.
"""
from __future__ import annotations

import pytest

from project import run_python

pytestmark = pytest.mark.mindspore

WARNING_TEXT = "may not be supported in later version"

_SETUP = """
    from mindspore.train import Callback
    from lenet import make_dataset, make_model
    from msdebug_hooks import LossGuard, StopAtStep, StopAtTime
    model, _ = make_model(metrics={"loss": __import__("mindspore").nn.Loss()})
"""


def test_our_callbacks_raise_no_deprecation_warning_under_train_or_fit():
    proc = run_python(_SETUP + """
    callbacks = [StopAtTime(10), StopAtStep(3), LossGuard(threshold=1e6, spike_factor=10)]
    model.train(2, make_dataset(num_batches=2), callbacks=callbacks)
    print("TRAIN_DONE")
    model.fit(2, make_dataset(num_batches=2), make_dataset(num_batches=1), callbacks=callbacks)
    print("FIT_DONE")
    """)
    assert "TRAIN_DONE" in proc.stdout and "FIT_DONE" in proc.stdout
    assert WARNING_TEXT not in proc.stderr + proc.stdout


def test_control_a_legacy_callback_is_flagged_in_this_mindspore():
    proc = run_python(_SETUP + """
    class Legacy(Callback):
        def step_end(self, run_context):
            pass
    model.train(1, make_dataset(num_batches=2), callbacks=[Legacy()])
    try:
        model.fit(1, make_dataset(num_batches=2), make_dataset(num_batches=1), callbacks=[Legacy()])
    except ValueError as error:
        print("FIT_RAISED", "step_end" in str(error))
    """)
    assert WARNING_TEXT in proc.stderr + proc.stdout
    assert "FIT_RAISED True" in proc.stdout
