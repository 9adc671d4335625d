"""The pairing of operators one dump computes instead of another's, and bisect's same-framework tolerance rule, on
small graphs and loss series built by hand (the real two-run bisects are in test_bisect.py)."""
from __future__ import annotations

from msdebug_hooks.compare import bisect_tolerance
from msdebug_hooks.compare.dump_matching import BY_NAME, match_nodes
from msdebug_hooks.compare.dump_replacements import BY_REPLACEMENT
from msdebug_hooks.compare.loss import LossSeries
from msdebug_hooks.dump.index import OPERATOR, PARAMETER, NodeInfo

NET = "Default/network-WithLossCell/_backbone-Net/"


def _graph(*ops: tuple[str, str, list[str]]) -> list[NodeInfo]:
    """A graph input ``x`` then operators ``(scope/Type-opN, type, inputs)`` in execution order."""
    nodes = [NodeInfo("x", 0, 0, "g", PARAMETER, "", "x")]
    for index, (name, op_type, inputs) in enumerate(ops):
        nodes.append(NodeInfo(NET + name, 0, 0, "g", OPERATOR, op_type, name, inputs=[
            i if i == "x" else NET + i for i in inputs], output_slots=(0,), exec_index=index))
    return nodes


def _match(nodes_a, nodes_b):
    index_a, index_b = {i.name: i for i in nodes_a}, {i.name: i for i in nodes_b}
    return match_nodes(nodes_a, nodes_b, lambda _: ((4, 8),), lambda _: ((4, 8),), lookup_a=index_a.get,
                       lookup_b=index_b.get)


def test_operators_of_other_types_at_the_same_place_are_paired_as_replaced():
    a = _graph(("fc1/MatMul-op0", "MatMul", ["x"]), ("act/ReLU-op0", "ReLU", ["fc1/MatMul-op0"]),
               ("norm/LayerNorm-op0", "LayerNorm", ["act/ReLU-op0"]))
    b = _graph(("fc1/MatMul-op0", "MatMul", ["x"]), ("act/Div-op0", "Div", ["fc1/MatMul-op0"]),
               ("act/Erf-op0", "Erf", ["act/Div-op0"]), ("act/Mul-op0", "Mul", ["fc1/MatMul-op0", "act/Erf-op0"]),
               ("norm/LayerNorm-op0", "LayerNorm", ["act/Mul-op0"]))
    found = _match(a, b)
    assert not found.unmatched_a and not found.unmatched_b
    replaced = [p for p in found.pairs if p.how == BY_REPLACEMENT]
    assert [(p.a.op_type, p.b.op_type) for p in replaced] == [("ReLU", "Mul")]      # the exits
    assert replaced[0].replaced.describe("act") == "A computes ReLU where B computes Div, Erf, Mul (cell act)"
    assert replaced[0].replaced.inputs_a == (NET + "fc1/MatMul-op0",)
    assert [i.op_type for i in found.regrouped_b] == ["Div", "Erf"] and found.regrouped_a == []
    assert {p.a.op_type for p in found.pairs if p.how == BY_NAME} == {"", "MatMul", "LayerNorm"}


def test_an_added_layer_or_an_ambiguous_place_stays_unmatched():
    # B adds an operator between two paired ones: nothing in A sits there
    a = _graph(("fc1/MatMul-op0", "MatMul", ["x"]), ("norm/LayerNorm-op0", "LayerNorm", ["fc1/MatMul-op0"]))
    b = _graph(("fc1/MatMul-op0", "MatMul", ["x"]), ("act/ReLU-op0", "ReLU", ["fc1/MatMul-op0"]),
               ("norm/LayerNorm-op0", "LayerNorm", ["act/ReLU-op0"]))
    found = _match(a, b)
    assert [i.op_type for i in found.unmatched_b] == ["ReLU"] and not found.regrouped_b
    # two pieces of A between the same neighbours, one of B: not one to one, so nothing is paired
    a = _graph(("fc1/MatMul-op0", "MatMul", ["x"]), ("p/ReLU-op0", "ReLU", ["fc1/MatMul-op0"]),
               ("q/Tanh-op0", "Tanh", ["fc1/MatMul-op0"]), ("out/Add-op0", "Add", ["p/ReLU-op0", "q/Tanh-op0"]))
    b = _graph(("fc1/MatMul-op0", "MatMul", ["x"]), ("p/GeLU-op0", "GeLU", ["fc1/MatMul-op0"]),
               ("out/Add-op0", "Add", ["p/GeLU-op0", "fc1/MatMul-op0"]))
    found = _match(a, b)
    assert not any(p.how == BY_REPLACEMENT for p in found.pairs)
    assert sorted(i.op_type for i in found.unmatched_a) == ["ReLU", "Tanh"]


def _series(*losses: float) -> LossSeries:
    return LossSeries("run", {step: loss for step, loss in enumerate(losses, 1)})


def test_the_tolerance_follows_step_1_unless_one_is_given():
    exact = bisect_tolerance.from_step_one([(_series(2.5, 2.4), _series(2.5, 2.4000001))])
    assert (exact.rtol, exact.forward_rtol, exact.atol, exact.exact_dumps) == (0, 0, 0, True)
    noisy = bisect_tolerance.from_step_one([(_series(2.5, 2.4), _series(2.5, 2.4)),
                                            (_series(2.5000002, 2.4), _series(2.5, 2.4))])   # one rank not equal
    assert (noisy.forward_rtol, noisy.rtol, noisy.exact_dumps, noisy.kind) == (0, 1e-3, False, bisect_tolerance.NOISE)
    assert bisect_tolerance.given(None, None, None) is None
    chosen = bisect_tolerance.given(None, None, 1e-4)
    assert (chosen.rtol, chosen.forward_rtol, chosen.atol, chosen.exact_dumps) == (1e-3, 1e-6, 1e-4, False)
    later = bisect_tolerance.after_noise()
    assert later.rtol == later.forward_rtol == 1e-3 and not later.exact_dumps
