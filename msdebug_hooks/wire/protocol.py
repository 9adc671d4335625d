"""The words of the protocol both sides speak: reply statuses, run levels, view levels, and our own additions.

MindInsight's server sends ``RunCMD.run_level`` "step", "node" or "recheck", ``ViewCMD.level`` value / statistics /
base and ``EventReply.status`` OK or FAILED (docs/debugger-protocol.md 1.4-1.7). Our client checks every reply
against these (``debugger/validate.py``) and our server builds its replies from them (``server/commands.py``).

Free runs are ours alone, in fields MindInsight neither sends nor reads (``debugger/free_run.py`` has the client's
side): a client that can do them says ``FREE_RUN_CAPABLE`` in the text of its heartbeats (``client_facts.py``);
our server then answers a wait that starts a run of several steps with ``RunCMD{run_level: FREE_RUN_LEVEL,
run_steps: N}`` (0: until a pause or a hit), and the client keeps one ``WaitCMD`` open that it does not wait for,
marked by ``Metadata.cur_node == WATCH_NODE`` (MindInsight's clients send ""), which the server answers when it
wants the training's attention.
"""
from __future__ import annotations

from msdebug_hooks.wire import debug_grpc_pb2 as pb

__all__ = ["STATUSES", "STEP_LEVEL", "NODE_LEVEL", "RECHECK_LEVEL", "FREE_RUN_LEVEL", "RUN_LEVELS", "VIEW_LEVELS",
           "PREVIOUS_STEP", "WATCH_NODE", "FREE_RUN_CAPABLE"]

STATUSES = (pb.EventReply.OK, pb.EventReply.FAILED)

STEP_LEVEL = "step"           # run one step (MindInsight counts a multi-step continue itself: one per WaitCMD)
NODE_LEVEL = "node"           # run to a node: needs kernel-level hooks
RECHECK_LEVEL = "recheck"     # evaluate the watchpoints again and stay suspended
FREE_RUN_LEVEL = "free"       # a free run: our own server only
RUN_LEVELS = (STEP_LEVEL, NODE_LEVEL, RECHECK_LEVEL, FREE_RUN_LEVEL)

VIEW_LEVELS = {"value": pb.ViewCMD.value, "statistics": pb.ViewCMD.statistics, "base": pb.ViewCMD.base}
PREVIOUS_STEP = "prev"        # TensorProto.iter of a view of the previous step's value ("": this step's)

WATCH_NODE = "msdebug-hooks:free-run-watch"   # Metadata.cur_node of a free run's watch call
FREE_RUN_CAPABLE = "free-run"                 # in a heartbeat's message: this client can do free runs
