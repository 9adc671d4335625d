"""A debugger server of our own: the server side of MindInsight 2.3.1's ``debugger.EventListener`` protocol, driven
from Python (``DebuggerServer``) or from a terminal prompt (``msdebug debug`` / ``msdebug serve``).

Any client of the protocol connects unchanged (our ``ENABLE_MS_DEBUGGER=1`` client, MindSpore's old C++ one).
Modules, one job each: ``server`` (listening ports, the jobs, the watchdog), ``servicer`` (the gRPC methods, thin),
``training_link`` (what one training's calls do to its job's state), ``job`` (the API to drive one training),
``group`` (the ranks of one job, in lockstep), ``commands`` (the ``EventReply`` commands), ``graph`` (the graph a
training sent, as nodes), ``hits`` (watchpoints and hits), ``tensors`` (protocol tensors -> numpy), ``errors``,
``shell`` (the prompt) and ``shell_text`` (its command splitting and tables).

Names resolve lazily, so ``import msdebug_hooks.server`` does not import grpc until a server is made.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DebuggerServer": "msdebug_hooks.server.server",
    "Job": "msdebug_hooks.server.job",
    "JobState": "msdebug_hooks.server.job",
    "RankGroup": "msdebug_hooks.server.group",
    "Node": "msdebug_hooks.server.graph",
    "Hit": "msdebug_hooks.server.hits",
    "ServerWatchpoint": "msdebug_hooks.server.hits",
    "TensorStats": "msdebug_hooks.server.tensors",
    "JobError": "msdebug_hooks.server.errors",
    "JobLost": "msdebug_hooks.server.errors",
    "JobStateError": "msdebug_hooks.server.errors",
    "TensorUnavailable": "msdebug_hooks.server.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'msdebug_hooks.server' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
