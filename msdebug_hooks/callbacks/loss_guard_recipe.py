"""The rerun recipe ``LossGuard`` logs when it fires: which iterations to dump, how to stop right after the failing
step, where the last good parameters are.

Written as the loop that failed is run: ``Model.train`` gets ``StopAtStep`` among its callbacks; a hand-written loop
(``DebugSession``, whose callback parameters have no ``train_dataset``) gives ``StopAtStep`` to its session and breaks
when ``session.should_stop``. Without the guard's ``dump_path`` the dump config's path is shown as the person's to
choose, not as ``""``, which MindSpore refuses (unless ``MS_DIAGNOSTIC_DATA_PATH`` is set).
"""
from __future__ import annotations

import json
from typing import Any

__all__ = ["rerun_recipe"]


def rerun_recipe(guard: Any, cb_params: Any = None) -> str:
    """The recipe's lines for a fired ``guard`` (``LossGuard``); ``cb_params`` those of the failing step."""
    step = guard.failed_step
    lines = [f"LossGuard rerun recipe for step {step}: in a fresh process, dump 0-based iterations "
             f"{max(0, step - 2)}|{step - 1} (steps {max(1, step - 1)} and {step}) and stop right after step "
             f"{step}:"]
    try:
        shown = guard.dump_config().to_dict()
        if guard.dump_path is None:
            shown["common_dump_settings"]["path"] = "<an absolute directory: guard.dump_config(path)>"
        call = "guard.dump_config(path)" if guard.dump_path is None else "guard.dump_config()"
        lines.append(f"  {call}.apply()  ->  " + json.dumps(shown, sort_keys=True))
    except Exception as error:  # noqa: BLE001 - the recipe must never hide the failure it reports
        lines.append(f"  guard.dump_config(path).apply()  (dump config unavailable: {error})")
    if cb_params is not None and getattr(cb_params, "train_dataset", None) is None:
        lines.append(f"  in the same loop: DebugSession(callbacks=[..., StopAtStep({step})], ...), and break when "
                     "session.should_stop  # guard.rerun_callbacks()")
    else:
        lines.append(f"  model.train(..., callbacks=[StopAtStep({step})])  # guard.rerun_callbacks()")
    if guard.last_good_checkpoint is not None:
        lines.append(f"  last good parameters: {guard.last_good_checkpoint}")
    lines.append("  then: msdebug check-dump <dump path>")
    return "\n".join(lines)
