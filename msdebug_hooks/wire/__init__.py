"""What travels between the debugger client (``msdebug_hooks.debugger``) and a server (ours, ``msdebug_hooks.server``,
or MindInsight's): the one package both sides import for the wire, so neither imports the other.

Generated from ``protos/`` by ``protos/generate.py`` (see protos/README.md; do not edit): ``debug_grpc_pb2`` and
``ms_graph_pb2`` (the messages, with their ``.pyi`` stubs). Written by hand, one job each: ``protocol`` (statuses, run
and view levels, our free-run words), ``dtypes`` (NumPy dtypes <-> the protocol's ``DataType`` numbers) and
``client_facts`` (what our client tells our server beyond MindInsight's protocol, written and parsed in one place).
"""
