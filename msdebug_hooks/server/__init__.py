"""A debugger server of our own: the server side of MindInsight 2.3.1's ``debugger.EventListener`` protocol, driven
from Python (``DebuggerServer``) or from a terminal prompt (``msdebug debug`` / ``msdebug serve``).

Any client of the protocol connects unchanged (our ``ENABLE_MS_DEBUGGER=1`` client, MindSpore's old C++ one).
Modules, one job each: ``server`` (listening ports, the watchdog), ``connections`` (the job of each client
connection, the reports), ``servicer`` (the gRPC methods, thin), ``training_link`` (what one training's calls do to
its job's state), ``states`` (the states and what each means), ``liveness`` (watching a training's process), ``job``
(the API to drive one training; ``job_hints``: why a value is missing), ``ports`` (is a port free), ``group`` (the
ranks of one job, in lockstep), ``script_trainings`` (a script that trains again), ``commands`` (the ``EventReply``
commands), ``graph`` (the graph a training sent, as nodes), ``hits`` (watchpoints and hits), ``tensors`` (protocol
tensors -> numpy), ``errors``, and the prompt: ``shell`` (its loop) with one ``shell_*`` module per concern. What
travels on the wire is ``msdebug_hooks.wire``, shared with the client.

Names resolve lazily, so ``import msdebug_hooks.server`` does not import grpc until a server is made.
"""
from __future__ import annotations

from msdebug_hooks._lazy import lazy_exports

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
    "JobCrashed": "msdebug_hooks.server.errors",
    "JobStateError": "msdebug_hooks.server.errors",
    "TensorUnavailable": "msdebug_hooks.server.errors",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS, globals())
