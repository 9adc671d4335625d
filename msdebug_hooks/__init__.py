"""msdebug-hooks: see inside a MindSpore training job and stop it at the right moment.

Importing this package never imports MindSpore: diagnostic environment settings (dump config, GLOG, ...) must be
applied before MindSpore starts, so every public name is resolved lazily, on first use, from the submodule that
defines it. ``from msdebug_hooks import DumpConfig`` stays MindSpore-free; ``from msdebug_hooks import LossGuard``
imports MindSpore because a callback is a ``mindspore.train.Callback``.
"""
from __future__ import annotations

from msdebug_hooks._lazy import lazy_exports

__version__ = "0.1.0"

# public name -> submodule that defines it
_EXPORTS = {
    # errors
    "ConfigError": "msdebug_hooks.errors",
    "DumpError": "msdebug_hooks.errors",
    # env-config layer (pure Python)
    "DumpConfig": "msdebug_hooks.config.dump",
    "DumpConfigWarning": "msdebug_hooks.config.dump",
    "RDRConfig": "msdebug_hooks.config.rdr",
    "MemReuseConfig": "msdebug_hooks.config.rdr",
    "LogConfig": "msdebug_hooks.config.log",
    "ConfigWarning": "msdebug_hooks.config._common",
    "RDRNotSupportedWarning": "msdebug_hooks.config.rdr",
    # watchpoint engine (numpy; numba's compiled kernels loaded on first use or by warm_up_statistics)
    "TensorStatistics": "msdebug_hooks.conditions",
    "ConditionResult": "msdebug_hooks.conditions",
    "ParamResult": "msdebug_hooks.conditions",
    "Condition": "msdebug_hooks.conditions",
    "TensorTooLargeCondition": "msdebug_hooks.conditions",
    "TensorTooSmallCondition": "msdebug_hooks.conditions",
    "TensorAllZeroCondition": "msdebug_hooks.conditions",
    "TensorRangeCondition": "msdebug_hooks.conditions",
    "TensorOverflowCondition": "msdebug_hooks.conditions",
    "TensorUnchangedCondition": "msdebug_hooks.conditions",
    "TensorChangeAboveThresholdCondition": "msdebug_hooks.conditions",
    "TensorChangeBelowThresholdCondition": "msdebug_hooks.conditions",
    "TensorInitializationCondition": "msdebug_hooks.conditions",
    "OperatorOverflowCondition": "msdebug_hooks.conditions",
    "check_many": "msdebug_hooks.conditions",
    "compute_statistics": "msdebug_hooks.conditions",
    "warm_up_statistics": "msdebug_hooks.conditions",
    # offline dump analysis (numpy only)
    "DumpAnalyzer": "msdebug_hooks.dump.analyzer",
    "Watchpoint": "msdebug_hooks.dump.analyzer",
    "WatchpointHit": "msdebug_hooks.dump.analyzer",
    "DebuggerTensor": "msdebug_hooks.dump.analyzer",
    "Node": "msdebug_hooks.dump.analyzer",
    # training callbacks (import MindSpore)
    "StopAtTime": "msdebug_hooks.callbacks.stop_at_time",
    "StopAtStep": "msdebug_hooks.callbacks.stop_at_step",
    "LossGuard": "msdebug_hooks.callbacks.loss_guard",
    "LossGuardError": "msdebug_hooks.callbacks.loss_guard",
    "BestCheckpoint": "msdebug_hooks.callbacks.best_checkpoint",
    "WeightMonitor": "msdebug_hooks.callbacks.weight_monitor",
    "DebugSession": "msdebug_hooks.callbacks.custom_loop",
    # checkpoint-file checks (numpy; MindSpore imported when a file is loaded)
    "compare_checkpoints": "msdebug_hooks.ckpt",
    "scan_checkpoint": "msdebug_hooks.ckpt",
    # precision comparison (numpy only; LossRecorder imports MindSpore)
    "compare_arrays": "msdebug_hooks.compare.metrics",
    "Tolerance": "msdebug_hooks.compare.metrics",
    "TensorComparison": "msdebug_hooks.compare.metrics",
    "LossWriter": "msdebug_hooks.compare.loss",
    "read_losses": "msdebug_hooks.compare.loss",
    "compare_losses": "msdebug_hooks.compare.loss_diff",
    "LossRecorder": "msdebug_hooks.compare.loss_recorder",
    "DumpComparer": "msdebug_hooks.compare.dumps",
    # layer-by-layer comparison with a PyTorch reference (LayerRecorder imports MindSpore; TorchLayerRecorder
    # imports PyTorch when created)
    "LayerRecorder": "msdebug_hooks.compare.mindspore_layers",
    "TorchLayerRecorder": "msdebug_hooks.compare.torch",
    "compare_layers": "msdebug_hooks.compare.layers",
    "compare_weights": "msdebug_hooks.compare.weights",
    # where a NaN/Inf came from (runs the training in subprocesses; MindSpore is imported there)
    "first_nan": "msdebug_hooks.nan.runner",
    "FirstNanResult": "msdebug_hooks.nan.result",
    # online debugger client
    "DebuggerCallback": "msdebug_hooks.debugger.callback",
    "DistributedDebugger": "msdebug_hooks.debugger.distributed",
    # our own debugger server (grpc, imported on first use)
    "DebuggerServer": "msdebug_hooks.server.server",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS, globals(), extra=["__version__"])
