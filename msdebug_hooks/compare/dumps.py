"""Compare two MindSpore sync dumps of the same network tensor by tensor and name the first operator that parts.

Built on the dump reader (``DumpDir`` lists the files, ``GraphIndex`` ties them to the ``.ir`` nodes, their source
lines and the execution order; :mod:`msdebug_hooks.compare.dump_sides`); values are read with the header-checked
``npy.load`` and compared with :func:`msdebug_hooks.compare.metrics.compare_arrays`.

Matching, per rank and graph (:mod:`msdebug_hooks.compare.dump_matching`): by full name, else by scope, op type,
execution order and shape; what is left over is reported as unmatched. Dumps written by different MindSpore versions
(``.dump_metadata/config.json`` records it) also pair the scopes the versions built from different operators by what
leaves them, and compare a tensor dumped in another shape with the same elements element by element (the facts are
in :mod:`msdebug_hooks.mindspore_versions`); the report names both versions.

Order: within an iteration, graph inputs first, then operators in execution order, then weights (MindSpore dumps
parameters after the step). The first diverging operator is found with the noise model of
:mod:`msdebug_hooks.compare.dump_findings` (or, with ``diverge_at="error"``, is the first whose output is ``error``),
with the user's source line behind it in both dumps and whether its inputs already differed.
"""
from __future__ import annotations

import csv
import functools
import io as _io
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, NamedTuple, Optional, Union

from msdebug_hooks import mindspore_versions
from msdebug_hooks._files import atomic_write_text
from msdebug_hooks.compare.dump_findings import Divergence, TensorPair, node_divergence, user_source  # noqa: F401
from msdebug_hooks.compare.dump_matching import (BY_DECOMPOSITION, BY_NAME, BY_ORDER,  # noqa: F401
                                                BY_REPLACEMENT, NodePair, match_nodes, order_key)
from msdebug_hooks.compare.dump_sides import Side, compare_files  # noqa: F401 (compare_files: public here too)
from msdebug_hooks.compare.metrics import ERROR, NOT_COMPARABLE, PASS, WARNING, Tolerance, not_comparable
from msdebug_hooks.dump.index import PARAMETER, NodeInfo
from msdebug_hooks.dump.layout import TensorFile
from msdebug_hooks.dump.nodes import as_int_list
from msdebug_hooks.errors import ConfigError
from msdebug_hooks.validation import optional_whole_number

PathLike = Union[str, Path]
_DIVERGE_AT = {WARNING: (WARNING, ERROR), ERROR: (ERROR,)}


class PlannedGraph(NamedTuple):
    """One graph of one rank pair at one iteration, to be compared, with its operators paired."""

    iteration: int
    rank_a: int
    rank_b: int
    graph_id: int
    matches: list[NodePair]


class ComparisonPlan(NamedTuple):
    """Every graph to compare in order (iteration, rank, graph); the nodes nothing paired on each side, and those
    regrouped (inside a scope the two versions built differently), as "rank R graph G: name"."""

    graphs: list[PlannedGraph]
    unmatched_a: list[str]
    unmatched_b: list[str]
    regrouped_a: list[str]
    regrouped_b: list[str]


class TensorTask(NamedTuple):
    """One tensor pair to compare: where it sits (``position``: the node pair's index in its graph's matches), the
    two nodes, which output or input slot, and the two files (None: not dumped on that side at this iteration)."""

    iteration: int
    rank_a: int
    rank_b: int
    graph_id: int
    position: int
    node_a: NodeInfo
    node_b: NodeInfo
    how: str
    io: str
    slot: int
    file_a: Optional[TensorFile]
    file_b: Optional[TensorFile]


@dataclass
class DumpComparison:
    """Every compared pair, what could not be matched, and the first divergence per (iteration, rank)."""

    dump_a: str
    dump_b: str
    diverge_at: str
    pairs: list[TensorPair] = field(default_factory=list)
    unmatched_a: list[str] = field(default_factory=list)
    unmatched_b: list[str] = field(default_factory=list)
    divergences: list[Divergence] = field(default_factory=list)
    #: the MindSpore version each dump records (None: it does not say)
    version_a: Optional[str] = None
    version_b: Optional[str] = None
    #: operators inside a scope built differently, or replaced by others: paired by their exits, not one to one
    regrouped_a: list[str] = field(default_factory=list)
    regrouped_b: list[str] = field(default_factory=list)

    @property
    def version_notes(self) -> list[str]:
        """How the two versions' dumps are known to differ (empty for one version, or an unknown one)."""
        return mindspore_versions.dump_differences(self.version_a, self.version_b)

    @property
    def first_divergence(self) -> Optional[Divergence]:
        return self.divergences[0] if self.divergences else None

    def counts(self) -> dict[str, int]:
        out = {PASS: 0, WARNING: 0, ERROR: 0, NOT_COMPARABLE: 0}
        for pair in self.pairs:
            out[pair.comparison.verdict] += 1
        return out

    @property
    def compared(self) -> int:
        return sum(1 for p in self.pairs if p.comparison.comparable)

    def exit_code(self) -> int:
        """0: every pair compared and passed; 1: a divergence; 2: nothing compared or something could not be read."""
        if self.divergences:
            return 1
        if not self.compared or self.counts()[NOT_COMPARABLE]:
            return 2
        return 0

    def to_dict(self) -> dict[str, Any]:
        return {"dump_a": self.dump_a, "dump_b": self.dump_b, "diverge_at": self.diverge_at,
                "mindspore_a": self.version_a, "mindspore_b": self.version_b, "version_notes": self.version_notes,
                "regrouped_a": self.regrouped_a, "regrouped_b": self.regrouped_b,
                "counts": self.counts(), "pairs_compared": self.compared,
                "first_divergence": self.first_divergence.as_dict() if self.first_divergence else None,
                "divergences": [d.as_dict() for d in self.divergences],
                "unmatched_a": self.unmatched_a, "unmatched_b": self.unmatched_b,
                "pairs": [p.as_row() for p in self.pairs]}

    def write_json(self, path: PathLike) -> Path:
        return atomic_write_text(path, json.dumps(self.to_dict(), indent=1, default=str) + "\n", mode=0o644)

    def write_csv(self, path: PathLike) -> Path:
        rows = [p.as_row() for p in self.pairs]
        buffer = _io.StringIO()
        fields = list(rows[0]) if rows else list(TensorPair.__dataclass_fields__)
        writer = csv.DictWriter(buffer, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("x".join(map(str, v)) if isinstance(v, list) else v) for k, v in row.items()})
        return atomic_write_text(path, buffer.getvalue(), mode=0o644)


def _selection(value: Union[None, int, Iterable[int]], name: str) -> Optional[list[int]]:
    """None (everything both dumps hold) or a non-empty sorted list of ints >= 0."""
    items = as_int_list(value, name)
    if items is not None and not items:
        raise ConfigError(name, value, "None, an int >= 0 or a non-empty list of them")
    return None if items is None else sorted(set(items))


class DumpComparer:
    """Compare two sync dumps of the same network (two code versions, devices, precisions or ranks).

    Args:
        dump_a: the run under test (the dump config's ``path``, holding ``rank_<id>/``).
        dump_b: the reference run; relative errors are taken against it.
        tolerance: the verdict thresholds (:class:`~msdebug_hooks.compare.metrics.Tolerance`).
        iterations: iterations to compare (default: every iteration both dumps hold).
        ranks: ranks of A to compare (default: every rank both dumps hold).
        rank_b: compare the selected rank of A with this rank of B (two ranks of one job: pass the same dump twice).
        inputs: compare the dumped inputs of operators too (default True; they tell whether an input already
            differed).
        diverge_at: ``"warning"`` (default: any pair that does not pass) or ``"error"``.
        exact: two runs that are bit-equal where nothing differs (``msdebug bisect``'s same-framework rule): any bit
            of difference parts, instead of the noise floors of :mod:`~msdebug_hooks.compare.attribution`.
    """

    def __init__(self, dump_a: PathLike, dump_b: PathLike, *, tolerance: Optional[Tolerance] = None,
                 iterations: Union[None, int, Iterable[int]] = None, ranks: Union[None, int, Iterable[int]] = None,
                 rank_b: Optional[int] = None, inputs: bool = True, diverge_at: str = WARNING,
                 exact: bool = False) -> None:
        if diverge_at not in _DIVERGE_AT:
            raise ConfigError("diverge_at", diverge_at, "'warning' or 'error'")
        optional_whole_number("rank_b", rank_b, minimum=0, allowed="None or an int >= 0")
        self.tolerance = tolerance
        self.iterations = _selection(iterations, "iterations")
        self.ranks = _selection(ranks, "ranks")
        if rank_b is not None and self.ranks is not None and len(self.ranks) != 1:
            raise ConfigError("ranks", ranks, "exactly one rank of A when rank_b is given")
        self.rank_b = rank_b
        self.inputs = inputs
        self.diverge_at, self.exact = diverge_at, bool(exact)
        self._a = Side(dump_a)
        self._b = Side(dump_b)
        #: the dumps come from different MindSpore versions: the cross-version rules apply
        self.across_versions = mindspore_versions.versions_differ(self._a.version, self._b.version)

    # ---- what to compare ----------------------------------------------------------------------------------------
    def _rank_pairs(self) -> list[tuple[int, int]]:
        ranks_a, ranks_b = self._a.dump.ranks(), self._b.dump.ranks()
        if self.rank_b is not None:
            if self.rank_b not in ranks_b:
                raise ConfigError("rank_b", self.rank_b, f"a rank of {self._b.dump.root}: {ranks_b}")
            chosen = self.ranks or ranks_a[:1]
            if chosen[0] not in ranks_a:
                raise ConfigError("ranks", self.ranks, f"ranks of {self._a.dump.root}: {ranks_a}")
            return [(chosen[0], self.rank_b)]
        common = sorted(set(ranks_a) & set(ranks_b))
        wanted = self.ranks if self.ranks is not None else common
        missing = [r for r in wanted if r not in common]
        if missing or not wanted:
            raise ConfigError("ranks", self.ranks, f"ranks in both dumps: {common} (A has {ranks_a}, B {ranks_b})")
        return [(r, r) for r in wanted]

    def _iterations(self, rank_a: int, rank_b: int, graph_id: int) -> list[int]:
        common = sorted(set(self._a.dump.iterations(rank_a, graph_id)) & set(self._b.dump.iterations(rank_b, graph_id)))
        return common if self.iterations is None else [i for i in common if i in self.iterations]

    def _plan(self) -> ComparisonPlan:
        """The graphs to compare, plus the unmatched names."""
        plan: list[PlannedGraph] = []
        unmatched_a: list[str] = []
        unmatched_b: list[str] = []
        regrouped_a: list[str] = []
        regrouped_b: list[str] = []
        iterations_seen: set[int] = set()
        for rank_a, rank_b in self._rank_pairs():
            graphs = sorted(set(self._a.dump.graphs(rank_a)) & set(self._b.dump.graphs(rank_b)))
            for graph_id in graphs:
                iterations = self._iterations(rank_a, rank_b, graph_id)
                if not iterations:
                    continue
                iterations_seen.update(iterations)
                sample = iterations[0]
                graph_a, graph_b = self._a.index.graph_names.get((rank_a, graph_id)), \
                    self._b.index.graph_names.get((rank_b, graph_id))
                matches, only_a, only_b, inner_a, inner_b = match_nodes(
                    self._a.nodes(rank_a, graph_id), self._b.nodes(rank_b, graph_id),
                    functools.partial(self._a.output_shapes, iteration=sample),
                    functools.partial(self._b.output_shapes, iteration=sample),
                    across_versions=self.across_versions,
                    lookup_a=functools.partial(self._a.index.node, rank_a, graph_a),
                    lookup_b=functools.partial(self._b.index.node, rank_b, graph_b))
                unmatched_a += [f"rank {rank_a} graph {graph_id}: {i.name}" for i in only_a]
                unmatched_b += [f"rank {rank_b} graph {graph_id}: {i.name}" for i in only_b]
                regrouped_a += [f"rank {rank_a} graph {graph_id}: {i.name}" for i in inner_a]
                regrouped_b += [f"rank {rank_b} graph {graph_id}: {i.name}" for i in inner_b]
                for iteration in iterations:
                    plan.append(PlannedGraph(iteration, rank_a, rank_b, graph_id, matches))
        if not iterations_seen:
            a_iters = self._a.dump.iterations()
            b_iters = self._b.dump.iterations()
            raise ConfigError("iterations", self.iterations,
                              f"iterations both dumps hold (A: {a_iters}, B: {b_iters})")
        plan.sort(key=lambda item: (item.iteration, item.rank_a, item.graph_id))
        return ComparisonPlan(plan, unmatched_a, unmatched_b, regrouped_a, regrouped_b)

    def _tasks(self, plan: list[PlannedGraph]) -> list[TensorTask]:
        tasks: list[TensorTask] = []
        ios = ("output", "input") if self.inputs else ("output",)
        for iteration, rank_a, rank_b, graph_id, matches in plan:
            for position, (ia, ib, how, _) in enumerate(matches):
                # the exit of a scope built differently, or of operators replaced: its inputs are each side's own
                for io in (ios if how not in (BY_DECOMPOSITION, BY_REPLACEMENT) else ("output",)):
                    slots_a = ia.output_slots if io == "output" else ia.input_slots
                    slots_b = ib.output_slots if io == "output" else ib.input_slots
                    for slot in sorted(set(slots_a) | set(slots_b)):
                        fa = self._a.index.tensor_file(ia, iteration, slot, io) if slot in slots_a else None
                        fb = self._b.index.tensor_file(ib, iteration, slot, io) if slot in slots_b else None
                        if fa is None and fb is None:
                            continue   # neither dumped it at this iteration
                        tasks.append(TensorTask(iteration, rank_a, rank_b, graph_id, position, ia, ib, how, io, slot,
                                                fa, fb))
        return tasks

    # ---- run ----------------------------------------------------------------------------------------------------
    def compare(self, *, progress: Optional[bool] = None) -> DumpComparison:
        """Compare every matched tensor pair. ``progress``: a tqdm bar on stderr (None: only on a terminal)."""
        from tqdm import tqdm

        plan = self._plan()
        tasks = self._tasks(plan.graphs)
        result = DumpComparison(str(self._a.dump.root), str(self._b.dump.root), self.diverge_at,
                                unmatched_a=plan.unmatched_a, unmatched_b=plan.unmatched_b, version_a=self._a.version,
                                version_b=self._b.version, regrouped_a=plan.regrouped_a, regrouped_b=plan.regrouped_b)
        bar = tqdm(tasks, desc="comparing tensors", unit="tensor", disable=None if progress is None else not progress,
                   leave=False)
        for task in bar:
            fa, fb = task.file_a, task.file_b
            if fa is None or fb is None:
                missing = "A" if fa is None else "B"
                comparison = not_comparable(f"{task.io} {task.slot} not dumped in {missing} at iteration "
                                            f"{task.iteration}")
            else:
                comparison = compare_files(fa, fb, self.tolerance, any_shape=self.across_versions)
            result.pairs.append(TensorPair(task.iteration, task.rank_a, task.rank_b, task.graph_id, task.position,
                                           task.node_a.name, task.node_b.name, task.node_a.op_type, task.io,
                                           task.slot, task.how, comparison,
                                           str(fa.path) if fa else "", str(fb.path) if fb else ""))
        result.divergences = self._divergences(result.pairs, plan.graphs)
        return result

    def _divergences(self, pairs: list[TensorPair], plan: list[PlannedGraph]) -> list[Divergence]:
        by_node: dict[tuple, list[TensorPair]] = defaultdict(list)
        for pair in pairs:
            by_node[(pair.iteration, pair.rank_a, pair.graph_id, pair.node_a)].append(pair)
        found: dict[tuple[int, int], Divergence] = {}
        for iteration, rank_a, rank_b, graph_id, matches in plan:
            if (iteration, rank_a) in found:
                continue

            def producer_outputs(name: str, where: tuple = (iteration, rank_a, graph_id)) -> list:
                return [p for p in by_node.get((*where, name), []) if p.io == "output"]

            for ia, ib, _how, replaced in matches:
                node_pairs = by_node.get((iteration, rank_a, graph_id, ia.name), [])
                divergence = node_divergence(ia, ib, node_pairs, producer_outputs, self._input_source, iteration,
                                             rank_a, rank_b, errors_only=self.diverge_at == ERROR, exact=self.exact,
                                             replaced=replaced)
                if divergence is not None:
                    found[(iteration, rank_a)] = divergence
                    break
        return [found[key] for key in sorted(found)]

    def _input_source(self, info: NodeInfo, slot: int) -> tuple[str, bool]:
        """`` (fc2.weight)`` and whether it is a weight or graph input: the node feeding input ``slot``, through a
        ``Load`` to its parameter."""
        if slot >= len(info.inputs):
            return "", False
        name = info.inputs[slot]
        producer = self._a.index.node(info.rank, info.graph_name, name)
        if producer is not None and producer.op_type == "Load" and producer.inputs:
            name = producer.inputs[0]
            producer = self._a.index.node(info.rank, info.graph_name, name)
        return f" ({name})", producer is not None and producer.node_type == PARAMETER
