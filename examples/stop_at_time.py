"""StopAtTime: stop cleanly when a time budget is used up, and keep the budget across a resume.

A LeNet-5 job slowed to about 0.2 s per step gets a 2-second budget: it stops after the step during which the budget
ran out, wherever that falls in the epoch. The callback's ``state_dict()`` is saved to JSON as a checkpoint would
hold it; a "resumed" job loads it and only gets what is left of the budget.

Budgets can be written as ``StopAtTime(90, unit="seconds")``, ``StopAtTime(1.5)`` (minutes, as in MindSpore's own
sample), ``StopAtTime("00:23:30:00")`` (DD:HH:MM:SS) or ``StopAtTime(datetime.timedelta(hours=23, minutes=30))``.

Run it::

    .venv/bin/python examples/stop_at_time.py
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    from mindspore.train import Callback

    from lenet import make_dataset, make_model
    from msdebug_hooks import StopAtTime

    class SlowStep(Callback):
        """Stands in for a big model: every step takes at least 0.2 s."""

        def __init__(self):
            super().__init__()
            self.steps = 0

        def on_train_step_end(self, run_context):
            time.sleep(0.2)
            self.steps += 1

    budget = StopAtTime(2, unit="seconds")
    slow = SlowStep()
    model, _ = make_model()
    model.train(100, make_dataset(num_batches=4), callbacks=[slow, budget])
    print(f"first job: {slow.steps} steps in {budget.time_elapsed():.2f} s of a {budget.run_time:.0f} s budget")

    state = budget.state_dict()
    state["time_elapsed"] = 1.5          # pretend the first job had only used 1.5 s when it was checkpointed
    with tempfile.TemporaryDirectory(prefix="stop-at-time-") as tmp:   # removed again right here
        state_file = Path(tmp) / "timer.json"
        state_file.write_text(json.dumps(state))
        resumed = StopAtTime(2, unit="seconds")
        resumed.load_state_dict(json.loads(state_file.read_text()))
    print(f"resumed job starts with {resumed.time_remaining():.2f} s left")
    slow = SlowStep()
    model.train(100, make_dataset(num_batches=4), callbacks=[slow, resumed])
    print(f"resumed job: {slow.steps} steps; total time used {resumed.time_elapsed():.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
