"""Precision comparison: where do two runs part ways?

``metrics`` (numpy only) compares two tensors. The rest of the package builds on it: loss records and their
comparison, two MindSpore dumps compared operator by operator. Names resolve lazily, so importing this package
imports neither MindSpore nor PyTorch.
"""
from __future__ import annotations

from msdebug_hooks._lazy import lazy_exports

_EXPORTS = {
    "compare_arrays": "msdebug_hooks.compare.metrics",
    "not_comparable": "msdebug_hooks.compare.metrics",
    "Tolerance": "msdebug_hooks.compare.metrics",
    "DEFAULT_TOLERANCE": "msdebug_hooks.compare.metrics",
    "TensorComparison": "msdebug_hooks.compare.metrics",
    "PASS": "msdebug_hooks.compare.metrics",
    "WARNING": "msdebug_hooks.compare.metrics",
    "ERROR": "msdebug_hooks.compare.metrics",
    "NOT_COMPARABLE": "msdebug_hooks.compare.metrics",
    "LossWriter": "msdebug_hooks.compare.loss",
    "LossSeries": "msdebug_hooks.compare.loss",
    "LossFileError": "msdebug_hooks.compare.loss",
    "read_losses": "msdebug_hooks.compare.loss",
    "compare_losses": "msdebug_hooks.compare.loss_diff",
    "LossComparison": "msdebug_hooks.compare.loss_diff",
    "plot_losses": "msdebug_hooks.compare.loss_plot",
    "DumpComparer": "msdebug_hooks.compare.dumps",
    "DumpComparison": "msdebug_hooks.compare.dumps",
    "TensorPair": "msdebug_hooks.compare.dumps",
    "Divergence": "msdebug_hooks.compare.dumps",
    # a MindSpore callback: imports MindSpore
    "LossRecorder": "msdebug_hooks.compare.loss_recorder",
}

# layer captures (MindSpore / PyTorch), layer-by-layer and weight comparison
_EXPORTS.update({
    "read_capture": "msdebug_hooks.compare.layer_capture",
    "CaptureError": "msdebug_hooks.compare.layer_capture",
    "compare_layers": "msdebug_hooks.compare.layers",
    "LayerComparison": "msdebug_hooks.compare.layers",
    "compare_weights": "msdebug_hooks.compare.weights",
    "WeightComparison": "msdebug_hooks.compare.weights",
    "load_name_mapping": "msdebug_hooks.compare.naming",
    "NameMapping": "msdebug_hooks.compare.name_rules",
    "convert_torch_state": "msdebug_hooks.compare.naming",
    # a MindSpore callback: imports MindSpore
    "LayerRecorder": "msdebug_hooks.compare.mindspore_layers",
    # imports PyTorch when created
    "TorchLayerRecorder": "msdebug_hooks.compare.torch",
})
# two runs, from "they differ" to the operator (msdebug bisect): starts the runs as subprocesses
_EXPORTS.update({
    "bisect": "msdebug_hooks.compare.bisection",
    "RunSpec": "msdebug_hooks.compare.bisect_runs",
    "BisectError": "msdebug_hooks.compare.bisect_runs",
    "RunFailed": "msdebug_hooks.compare.bisect_runs",
    "BisectResult": "msdebug_hooks.compare.bisect_answer",
})
# a PyTorch model and its MindSpore port checked in one call; the HTML report (imports the frameworks when run)
_EXPORTS.update({
    "compare_models": "msdebug_hooks.compare.port_check",
    "PortCheck": "msdebug_hooks.compare.port_check",
    "write_html_report": "msdebug_hooks.compare.html_report",
})
# after every update: __dir__ and __all__ list all of them
__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS, globals())
