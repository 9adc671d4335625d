"""Online debugger client speaking MindInsight's ``debugger.EventListener`` gRPC protocol.

Modules, one job each: ``callback`` (``DebuggerCallback``: MindSpore's hooks -> the session), ``distributed``
(``DistributedDebugger``: the debugger in a multi-rank job), ``settings`` (``DebuggerSettings``: every value the
client is given, checked once, from arguments or the variables named in ``config/debugger_env.py``), ``session``
(what each server command means: the state machine), ``session_link`` (the session's connection: handshake,
heartbeat, the reconnect policy), ``replies`` (one ``WaitCMD`` and what its answer means), ``reaching`` (first
contact and when to look for a lost server), ``watchpoints`` (the watchpoints the server set, evaluated per step),
``viewing`` (answering tensor views within a byte budget), ``views`` (the answers themselves), ``sources`` (the
``TensorSource`` interface), ``tensors`` (the light source: values from the live network), ``capture`` (cell outputs
and gradients while needed), ``transport`` (channel, deadlines, the nine calls), ``transport_errors`` (what a failed
call raises), ``chunking`` (3 MiB pieces), ``graph`` (network -> ``GraphProto``), ``heartbeat`` (liveness thread),
``free_run`` (a free run, client side), ``progress`` (the "training paused" line), ``validate`` (every server reply
checked before it is obeyed), ``interrupt`` (Ctrl-C while paused raises KeyboardInterrupt). What travels on the wire
(generated messages, protocol words, dtype maps, what our client tells our server beyond the protocol) is in
``msdebug_hooks.wire``, shared with the server; the ``.proto`` files are in ``protos/``. The dump
tensor source (every operator's outputs): ``dump_source`` (per-step dump -> values), ``dump_scratch`` (scratch
directory, env settings, early set-up), ``pb_graph`` (the dump's ``.pb`` graph, made ready for MindInsight).
Hand-written training loops (no ``Model.train``): ``functional_loop`` (the driver: when a step ends, attaching,
terminate), ``loop_hooks`` (what env activation patches into MindSpore to see such a loop), ``loop_parts`` (the
network and loss cells behind an optimizer), ``hook_guard`` (the debugger's hooks kept out of ``@jit`` graphs; a
look at every ``@jit`` call), ``owner`` (which callback drives the debugger now).
"""
