"""The "dump" tensor source of the online debugger: every operator's outputs, from MindSpore's own per-step sync dump.

The light source (``tensors.py``) sees parameters and the loss only. This one has the debugger configure a sync dump
of every iteration into a scratch directory (``/dev/shm`` when it is a writable tmpfs, else the temp dir), so that at
each step end the outputs of every kernel of the step that just ran are on disk under the names of the dump's own
graph (``rank_<r>/graphs/ms_output_trace_code_graph_<g>.pb``), which is the graph sent to MindInsight, source lines
included. Watchpoints on any operator are then evaluated at step end with the shared engine (``check_many``), any
node's output can be viewed (value / statistics / base), and the step's files are deleted when the next step begins
(the script's own callbacks, which run after the debugger's step end, can still read them), so the scratch directory
holds about one step of data (two at most, for a moment).

How it is wired, and the constraints behind it:

* MindSpore reads ``MINDSPORE_DUMP_CONFIG`` once per process, at the first graph compile. ``Model.train`` compiles at
  its first step, after ``on_train_begin`` (checked on 2.10), so ``configure()`` runs in ``on_train_begin``; the env
  activation path sets it up at interpreter start-up instead (``dump_scratch.configure_early``), which also covers
  scripts that compile something before training. If the process compiled a graph before, MindSpore ignores the
  setting and ``prepare()`` fails with an explanation instead of debugging blind. An existing
  ``MINDSPORE_DUMP_CONFIG`` is refused (two dumps cannot share one process).
* MindInsight needs the graph at the initial suspension (step 0), but the dump writes it at compile time, so
  ``prepare()`` compiles the train network itself with zero inputs of the dataset's shapes; ``Model.train`` then
  reuses that compiled graph (same shapes and types). A dataset whose shapes change (dynamic shapes, a smaller last
  batch) makes MindSpore compile another graph, which this source does not show (its tensors are not served).
* Only GRAPH_MODE dumps the network (PyNative dumps the optimizer graph only).
* Parameters (weights, optimizer states) are read from the live network, as in the light source, so "previous
  step" copies are kept only for watched parameters; data inputs (``inputs0``...) come from the dump.

Cost, to be taken seriously (``benchmarks/debugger_overhead.py --dump-source`` measures it:
docs/performance.md#online-debugger-the-dump-source): MindSpore writes every output of every kernel of every step
to the scratch directory (a network's activations and gradients, every step), and the debugger reads what is
watched; on a large network the per-step dump is the dominating cost and tmpfs must hold a step's outputs in RAM.
``kernels`` (dump_mode 1: full names, op types such as ``"Conv2D"`` matched case-insensitively as substrings, or
``"name-regex(...)"``) limits the dump to what is watched and keeps it affordable; parameters do not need the dump.
The graph MindInsight shows is the kernel graph (Load / UpdateState / Depend nodes included; they have no values).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from msdebug_hooks._log import get_logger
from msdebug_hooks.debugger.dump_scratch import (ENV_DUMP_DIR, ENV_DUMP_KERNELS, ENV_SOURCE, NET_NAME, SOURCES,
                                                  adopt_early, make_scratch, scratch_base, source_options_from_env)
from msdebug_hooks.debugger.graph import DebugGraph
from msdebug_hooks.debugger.pb_graph import debug_graph_from_dump, find_graph, output_count, read_model_graph
from msdebug_hooks.debugger.sources import TensorSource
from msdebug_hooks.dump import npy
from msdebug_hooks.dump.layout import flatten_name, parse_tensor_file_name
from msdebug_hooks.errors import ConfigError

__all__ = ["DumpTensorSource", "scratch_base", "source_options_from_env", "SOURCES", "ENV_SOURCE", "ENV_DUMP_DIR",
           "ENV_DUMP_KERNELS"]

_LOG = get_logger("debugger")
_NET_NAME = NET_NAME


class DumpTensorSource(TensorSource):
    """Tensors of every operator of the current step, from a per-step sync dump (see the module docstring): a
    ``TensorSource`` whose every node with a value is watchable and viewable, on every output slot.

    Args:
        dump_dir: parent of the scratch directory (default: ``/dev/shm``, else the temp dir).
        kernels: dump only these kernels (full names, op types or ``name-regex(...)``; MindSpore's dump_mode 1).
    """

    def __init__(self, *, dump_dir: Optional[str] = None, kernels: Sequence[str] = ()) -> None:
        if isinstance(kernels, str) or not all(isinstance(k, str) and k for k in kernels):
            raise ConfigError("kernels", kernels, "a list of non-empty strings (kernel names, op types or "
                                                  "'name-regex(...)')")
        super().__init__()
        self.kernels = list(kernels)
        self._base = scratch_base(dump_dir)
        self.root: Optional[Path] = None
        self.graph: Optional[DebugGraph] = None
        self.graph_id = 0
        self._rank_dir: Optional[Path] = None
        self._flat: dict[str, str] = {}           # tensor key (op full name / parameter name) -> flat file name
        self._slots: dict[str, tuple[str, ...]] = {}
        self._files: dict[tuple[str, int], Path] = {}   # (flat name, output slot) -> file of the current step
        self._iteration_dir: Optional[Path] = None
        self._mapped = False
        self.steps_seen = 0

    # -- lifecycle ----------------------------------------------------------------------------------------------
    def configure(self) -> dict[str, str]:
        """Create the scratch directory and point ``MINDSPORE_DUMP_CONFIG`` at a per-step sync dump into it. Must run
        before MindSpore compiles its first graph in this process."""
        early = adopt_early(self.kernels)
        if early is not None:
            self.root = early
            return {}
        self.root = make_scratch(self._base, self.kernels)
        return {"MINDSPORE_DUMP_CONFIG": os.environ["MINDSPORE_DUMP_CONFIG"]}

    def prepare(self, network: Any, dataset: Any, parameters: Iterable[tuple[str, Any, str]] = ()) -> DebugGraph:
        """Compile ``network`` for ``dataset``'s shapes (so the dump writes its graph now, before step 1) and return
        the graph to send. ``parameters``: (name, live Parameter, role) triples for weights and states."""
        if self.root is None:
            raise RuntimeError("DumpTensorSource.configure() must run before prepare()")
        if dataset is None or not hasattr(dataset, "output_shapes"):
            raise ConfigError("run_context.original_args().train_dataset", dataset,
                              "a mindspore.dataset Dataset (Model.train passes it)",
                              detail="the dump source compiles the network for the dataset's shapes before step 0, "
                                     "so that the debugger server gets the dump's graph; use the light source "
                                     "otherwise")
        _compile(network, dataset)
        dump = self.root / "dump"
        ranks = sorted(dump.glob("rank_*")) if dump.is_dir() else []
        if not ranks:
            raise RuntimeError(
                "the debugger's dump source got no dump from MindSpore: this process compiled a graph before the "
                "debugger set MINDSPORE_DUMP_CONFIG (MindSpore reads it once, at the first compile), or training "
                "runs in PyNative mode (set_context(mode=GRAPH_MODE) is needed). Attach the debugger to the first "
                "training of the process (ENABLE_MS_DEBUGGER=1 MS_DEBUGGER_SOURCE=dump sets it up early) or use "
                "the light source")
        self._rank_dir = ranks[0]
        self.graph_id, pb_file = find_graph(self._rank_dir)
        self.graph = debug_graph_from_dump(read_model_graph(pb_file), self.graph_id, parameters)
        for node in self.graph.proto.node:
            if node.full_name and output_count(node):
                self._slots[node.full_name] = tuple(str(s) for s in range(output_count(node)))
        return self.graph

    def begin_step(self) -> None:
        """Index the files of the step that just ran (the newest iteration directory)."""
        self._files.clear()
        self._iteration_dir = None
        graph_dir = None if self._rank_dir is None else self._rank_dir / _NET_NAME / str(self.graph_id)
        if graph_dir is None or not graph_dir.is_dir():
            return
        iterations = [p for p in graph_dir.iterdir() if p.name.isdigit()]
        if not iterations:
            return
        self._iteration_dir = max(iterations, key=lambda p: int(p.name))
        for path in sorted(self._iteration_dir.iterdir()):
            item = parse_tensor_file_name(path)
            if item is not None and item.io == "output":
                old = self._files.get((item.op_name, item.slot))
                if old is None or parse_tensor_file_name(old).timestamp <= item.timestamp:
                    self._files[(item.op_name, item.slot)] = path
        if not self._mapped:
            self._map_names()
        self.steps_seen += 1

    def end_step(self) -> None:
        """Delete the step's files (every iteration directory present: the dump must not grow)."""
        self._files.clear()
        self._iteration_dir = None
        if self._rank_dir is None:
            return
        graphs = self._rank_dir / _NET_NAME
        if graphs.is_dir():
            for graph_dir in graphs.iterdir():
                for item in graph_dir.iterdir() if graph_dir.is_dir() else ():
                    if item.name.isdigit():
                        shutil.rmtree(item, ignore_errors=True)

    def close(self) -> None:
        """Remove the scratch directory and our ``MINDSPORE_DUMP_CONFIG``, so that a process this one starts later
        does not inherit a dump config whose file is gone. MindSpore keeps dumping later graph runs of this process
        (it read the config once); they land in a fresh directory of the same name, which nothing deletes."""
        self._files.clear()
        if self.root is not None:
            config = os.environ.get("MINDSPORE_DUMP_CONFIG", "")
            if config and Path(config).resolve().is_relative_to(self.root.resolve()):
                del os.environ["MINDSPORE_DUMP_CONFIG"]
            shutil.rmtree(self.root, ignore_errors=True)

    def set_outputs(self, net_outputs: Any, inputs: Any = None) -> None:
        """The loss comes from the dump like every other op output; nothing to keep."""

    # -- the TensorSource interface -----------------------------------------------------------------------------
    def tensor_name(self, node_name: str) -> Optional[str]:
        """The tensor key behind a watch-node / requested node name: an op's full name, or a parameter's bare
        name (MindInsight shows parameters scoped, e.g. under ``Parameter[N]_k/``)."""
        if node_name in self._slots:
            return node_name
        last = node_name.rsplit("/", 1)[-1]
        if self.graph is not None and last in self.graph.parameters:
            return last
        return None

    def slots(self, tensor: str) -> tuple[str, ...]:
        return self._slots.get(tensor, ("0",))

    def read(self, tensor: str, slot: str = "0") -> Optional[np.ndarray]:
        """The current value of ``tensor``'s output ``slot``, or None (not dumped, filtered out, or step 0)."""
        if self.graph is None:
            return None
        param = self.graph.parameters.get(tensor)
        if param is not None and param.source is not None:
            if slot != "0":
                return None
            try:
                return param.source.asnumpy()
            except (TypeError, RuntimeError):   # e.g. bfloat16
                return param.source.float().asnumpy()
        flat = self._flat.get(tensor, flatten_name(tensor))
        try:
            path = self._files.get((flat, int(slot)))
        except ValueError:
            return None
        if path is None:
            return None
        return npy.load(path, mmap=False)

    # -- helpers ------------------------------------------------------------------------------------------------
    def _map_names(self) -> None:
        """Tie graph full names to file names once, through the dump's ``.ir`` (``GraphIndex`` pairs the kernels
        that MindSpore numbers differently in file names than in the graph)."""
        from msdebug_hooks.dump.index import GraphIndex
        from msdebug_hooks.dump.reader import DumpDir

        self._mapped = True
        try:
            index = GraphIndex(DumpDir(self._rank_dir.parent))
        except (ValueError, OSError) as exc:
            _LOG.warning("debugger: dump source: could not index the dump (%s); matching names by flattening", exc)
            return
        rank = int(self._rank_dir.name.split("_", 1)[1])
        graph_name = index.graph_names.get((rank, self.graph_id))
        for name in list(self._slots) + list(self.graph.parameters):
            info = index.node(rank, graph_name, name) if graph_name else None
            if info is not None:   # known to the index: its file name, or "" when it was not dumped (no guessing:
                self._flat[name] = info.flat_name or ""   # a renumbered kernel's flattened name is another's file)


def _compile(network: Any, dataset: Any) -> None:
    """Compile the train network for the dataset's column shapes and types, as ``Model.train`` will call it."""
    import mindspore as ms
    from mindspore.common import dtype as mstype

    shapes, types = dataset.output_shapes(), dataset.output_types()
    inputs = []
    for shape, dtype in zip(shapes, types):
        try:
            np_type = np.dtype(dtype)
        except TypeError:
            np_type = mstype.dtype_to_nptype(dtype)
        inputs.append(ms.Tensor(np.zeros([int(s) for s in shape], dtype=np_type)))
    network.set_train(True)
    network.compile(*inputs)
