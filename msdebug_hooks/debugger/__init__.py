"""Online debugger client speaking MindInsight's ``debugger.EventListener`` gRPC protocol.

Modules, one job each: ``callback`` (``DebuggerCallback``: MindSpore's hooks -> the session), ``distributed``
(``DistributedDebugger``: the debugger in a multi-rank job), ``settings``
(``ENABLE_MS_DEBUGGER`` / ``MS_DEBUGGER_*`` and argument checks), ``session`` (what each server command means: the
state machine), ``transport`` (channel, deadlines, 3 MiB chunking, error mapping), ``graph`` (network ->
``GraphProto``), ``tensors`` (values from the live network), ``views`` (answers to tensor requests), ``heartbeat``
(liveness thread), ``progress`` (the "training paused" line), ``dtypes`` (NumPy <-> protocol types), ``validate``
(every server reply checked before it is obeyed), ``interrupt`` (Ctrl-C while paused raises KeyboardInterrupt).
The wire format is in ``protos/`` (generated code in ``msdebug_hooks._proto``). The dump tensor source (every
operator's outputs): ``dump_source`` (per-step dump -> values), ``dump_scratch`` (scratch directory, env settings,
early set-up), ``pb_graph`` (the dump's ``.pb`` graph, made ready for MindInsight).
"""
