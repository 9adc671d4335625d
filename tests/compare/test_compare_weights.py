"""``msdebug compare-weights`` names port mistakes: a transposed square weight, swapped tensors, a correct port whose
module names differ from the reference (paired by value, no mapping file), mapping-file rules (``layers.* ->
blocks.*``), and bad rules (exit 2 with the file and line). Real PyTorch state dicts; the last test converts them
into a real MindSpore port and its ``.ckpt``."""
from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from project import run_python  # noqa: E402
from msdebug_hooks.cli import main  # noqa: E402
from msdebug_hooks.compare.name_rules import NameMapping, NameRule, infer_rule, suggest_rules  # noqa: E402
from msdebug_hooks.compare.naming import load_name_mapping  # noqa: E402
from msdebug_hooks.compare.value_index import ValueIndex, fingerprint  # noqa: E402

D, VOCAB = 8, 11


class Attention(nn.Module):
    """The reference's attention: ``wq, wk, wv, wo``."""

    def __init__(self):
        super().__init__()
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(D, D) for _ in range(4))


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = Attention()
        self.norm1 = nn.LayerNorm(D)
        self.mlp = nn.Sequential(nn.Linear(D, 2 * D), nn.GELU(), nn.Linear(2 * D, D))
        self.norm2 = nn.LayerNorm(D)


class Reference(nn.Module):
    """``embed``, ``layers.N.self_attn.wq``, ..., ``norm``, ``head``: 37 tensors for two layers."""

    def __init__(self, layers=2):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.layers = nn.ModuleList(Layer() for _ in range(layers))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB)


class PortAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(D, D) for _ in range(4))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = PortAttention()
        self.ln1 = nn.LayerNorm(D)
        self.ffn = nn.Sequential(nn.Linear(D, 2 * D), nn.GELU(), nn.Linear(2 * D, D))
        self.ln2 = nn.LayerNorm(D)


class Port(nn.Module):
    """The same network under the port's names: ``tok_embed``, ``blocks.N.attn.q_proj``, ..., ``lm_head``."""

    def __init__(self, layers=2):
        super().__init__()
        self.tok_embed = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(Block() for _ in range(layers))
        self.final_norm = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, VOCAB)


def cli(*argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture()
def reference(tmp_path):
    torch.manual_seed(0)
    state = {name: value.clone() for name, value in Reference().state_dict().items()}
    torch.save(state, tmp_path / "reference.pth")
    return tmp_path, state


def ported(state):
    """The reference's values loaded into the port (both define their layers in the same order)."""
    port = Port()
    port.load_state_dict(dict(zip(port.state_dict(), state.values())))
    return {name: value.clone() for name, value in port.state_dict().items()}


KINDS = ("VALUES", "TRANSPOSED", "SWAPPED", "SHAPE", "DTYPE", "RENAMED", "MISSING", "EXTRA")


def problem_lines(out):
    return [line for line in out.splitlines() if line.split(":")[0] in KINDS]


def findings(out_json):
    return [f for f in json.loads(out_json)["findings"] if f["kind"] != "ok"]


# --- a transposed square weight, swapped tensors (same names) ---------------------------------------------------

def test_a_square_weight_stored_transposed_is_named_transposed(reference, capsys):
    root, state = reference
    converted = dict(state, **{"layers.1.self_attn.wv.weight": state["layers.1.self_attn.wv.weight"].t().contiguous()})
    torch.save(converted, root / "converted.pth")
    code, out, _ = cli("compare-weights", root / "reference.pth", root / "converted.pth", capsys=capsys)
    assert code == 1 and "36 parameters match, 1 problems" in out, out
    assert "TRANSPOSED: layers.1.self_attn.wv.weight: transposed: B [8, 8] is A [8, 8] transposed (square" in out
    assert "VALUES" not in out
    code, out, _ = cli("compare-weights", root / "reference.pth", root / "converted.pth", "--json", capsys=capsys)
    assert [(f["kind"], f["name_a"], f["name_b"]) for f in findings(out)] == [
        ("transposed", "layers.1.self_attn.wv.weight", "layers.1.self_attn.wv.weight")]


def test_swapped_q_and_k_are_one_swapped_finding_naming_both(reference, capsys):
    root, state = reference
    converted = dict(state)
    converted["layers.0.self_attn.wq.weight"] = state["layers.0.self_attn.wk.weight"]
    converted["layers.0.self_attn.wk.weight"] = state["layers.0.self_attn.wq.weight"]
    torch.save(converted, root / "converted.pth")
    code, out, _ = cli("compare-weights", root / "reference.pth", root / "converted.pth", capsys=capsys)
    assert code == 1 and "35 parameters match, 1 problems" in out, out
    assert problem_lines(out) == ["SWAPPED: layers.0.self_attn.wq.weight and layers.0.self_attn.wk.weight are swapped: "
                        "A's layers.0.self_attn.wq.weight is B's layers.0.self_attn.wk.weight, A's "
                        "layers.0.self_attn.wk.weight is B's layers.0.self_attn.wq.weight; put each value under its "
                        "own name in the conversion"], out
    code, out, _ = cli("compare-weights", root / "reference.pth", root / "converted.pth", "--json", capsys=capsys)
    (swapped,) = findings(out)
    assert swapped["kind"] == "swapped" and swapped["moved"] == [
        ["layers.0.self_attn.wq.weight", "layers.0.self_attn.wk.weight", False],
        ["layers.0.self_attn.wk.weight", "layers.0.self_attn.wq.weight", False]]


def test_a_value_that_moved_without_a_swap_is_a_values_line_saying_where_it_went(reference, capsys):
    root, state = reference
    converted = dict(state)
    converted["layers.0.self_attn.wv.weight"] = state["layers.0.self_attn.wq.weight"]  # A's wq is B's wv ...
    converted["layers.0.self_attn.wq.weight"] = state["layers.0.self_attn.wk.weight"]  # ... but A's wv is nowhere
    torch.save(converted, root / "converted.pth")
    code, out, _ = cli("compare-weights", root / "reference.pth", root / "converted.pth", capsys=capsys)
    assert code == 1 and "35 parameters match, 2 problems" in out, out
    assert problem_lines(out) == [
        f"VALUES: layers.0.self_attn.wq.weight: values differ: max abs error {_max_error(state, converted, 'wq')}, "
        f"cosine {_cosine(state, converted, 'wq')}; A's layers.0.self_attn.wq.weight value is in B under "
        f"layers.0.self_attn.wv.weight",
        f"VALUES: layers.0.self_attn.wv.weight: values differ: max abs error {_max_error(state, converted, 'wv')}, "
        f"cosine {_cosine(state, converted, 'wv')}"], out
    # a constant (a LayerNorm's ones) found elsewhere proves nothing: no note for it
    converted = dict(state, **{"layers.0.norm1.bias": torch.ones(D)})
    torch.save(converted, root / "converted.pth")
    code, out, _ = cli("compare-weights", root / "reference.pth", root / "converted.pth", capsys=capsys)
    assert code == 1 and problem_lines(out) == ["VALUES: layers.0.norm1.bias: values differ: max abs error 1, "
                                                "cosine 0.000000"], out


def _max_error(state, converted, which):
    name = f"layers.0.self_attn.{which}.weight"
    return f"{float((state[name].double() - converted[name].double()).abs().max()):.3g}"


def _cosine(state, converted, which):
    name = f"layers.0.self_attn.{which}.weight"
    a, b = state[name].double().flatten(), converted[name].double().flatten()
    return f"{float(a @ b / (a.norm() * b.norm())):.6f}"


# --- a correct port whose module names differ ---------------------------------------------------------------------

def test_recurrent_gates_reordered_in_a_conversion_are_named_with_their_order(tmp_path, capsys):
    torch.manual_seed(3)
    lstm, gru = nn.LSTM(4, 3, batch_first=True), nn.GRU(4, 3)
    state = {f"lstm.{k}": v for k, v in lstm.state_dict().items()}
    state.update({f"gru.{k}": v for k, v in gru.state_dict().items()})
    torch.save(state, tmp_path / "a.pth")
    ifgo_to_igfo = [0, 2, 1, 3]          # Ascend's DynamicRNN order, copied into a checkpoint for CPU/GPU
    moved = {k: (torch.cat([v.chunk(4)[i] for i in ifgo_to_igfo]) if k.startswith("lstm.") else v)
             for k, v in state.items()}
    moved["gru.weight_ih_l0"] = torch.cat([state["gru.weight_ih_l0"].chunk(3)[i] for i in (1, 0, 2)])
    torch.save(moved, tmp_path / "b.pth")
    assert main(["compare-weights", str(tmp_path / "a.pth"), str(tmp_path / "b.pth")]) == 1
    out = capsys.readouterr().out
    assert out.count("gate order: B's gate blocks are A's in the order i, g, f, o") == 4, out
    assert "gru.weight_ih_l0: gate order: B's gate blocks are A's in the order z, r, n" in out
    assert "gru.weight_hh_l0" not in out and "4 problems" not in out and "5 problems" in out


def test_a_correct_port_with_other_module_names_is_clean_without_a_mapping_file(reference, capsys):
    root, state = reference
    torch.save(ported(state), root / "port.pth")
    code, out, _ = cli("compare-weights", root / "reference.pth", root / "port.pth", capsys=capsys)
    assert code == 0, out
    assert "37 parameters match, 0 problems" in out and "RENAMED" not in out and "renamed?" not in out
    assert "NOTE: 37 parameters paired by value and by the pattern of their names" in out
    assert "  layers.*.self_attn.wq.* -> blocks.*.attn.q_proj.*" in out
    assert "  layers.*.norm1.* -> blocks.*.ln1.*" in out
    code, out, _ = cli("compare-weights", root / "reference.pth", root / "port.pth", "--json", capsys=capsys)
    report = json.loads(out)
    pairs = {f["name_a"]: f["name_b"] for f in report["findings"]}
    assert pairs["layers.1.self_attn.wk.weight"] == "blocks.1.attn.k_proj.weight"
    assert pairs["layers.1.norm2.weight"] == "blocks.1.ln2.weight" and pairs["norm.bias"] == "final_norm.bias"
    # the suggested rules, as a mapping file, pair every tensor by name
    (root / "rules.txt").write_text("\n".join(report["suggested_rules"]) + "\n")
    code, out, _ = cli("compare-weights", root / "reference.pth", root / "port.pth", "--mapping", root / "rules.txt",
                       "--json", capsys=capsys)
    report = json.loads(out)
    assert code == 0 and report["notes"] == [] and {f["matched_by"] for f in report["findings"]} == {"mapping"}


def test_a_real_mistake_in_a_renamed_port_is_still_named(reference, capsys):
    root, state = reference
    port = ported(state)
    port["blocks.0.attn.o_proj.weight"] = port["blocks.0.attn.o_proj.weight"] + 0.01
    for part in ("weight", "bias"):  # layer 1's q and k projections exchanged, whole Linear modules
        port[f"blocks.1.attn.q_proj.{part}"], port[f"blocks.1.attn.k_proj.{part}"] = (
            port[f"blocks.1.attn.k_proj.{part}"], port[f"blocks.1.attn.q_proj.{part}"])
    torch.save(port, root / "port.pth")
    code, out, _ = cli("compare-weights", root / "reference.pth", root / "port.pth", capsys=capsys)
    assert code == 1 and "32 parameters match, 3 problems" in out, out
    assert "VALUES: layers.0.self_attn.wo.weight -> blocks.0.attn.o_proj.weight: values differ: max abs error 0.01" \
        in out
    assert "SWAPPED: layers.1.self_attn.wq.weight and layers.1.self_attn.wk.weight are swapped: A's " \
           "layers.1.self_attn.wq.weight is B's blocks.1.attn.k_proj.weight" in out
    assert "SWAPPED: layers.1.self_attn.wq.bias and layers.1.self_attn.wk.bias are swapped" in out
    assert "renamed?" not in out and "MISSING" not in out and "EXTRA" not in out


def test_a_swap_every_layer_repeats_shows_in_the_suggested_rules_and_is_named_with_them(tmp_path, capsys):
    torch.manual_seed(1)
    state = Reference(layers=1).state_dict()
    port = Port(layers=1)
    port.load_state_dict(dict(zip(port.state_dict(), state.values())))
    converted = dict(port.state_dict())
    for part in ("weight", "bias"):
        converted[f"blocks.0.attn.q_proj.{part}"], converted[f"blocks.0.attn.k_proj.{part}"] = (
            converted[f"blocks.0.attn.k_proj.{part}"], converted[f"blocks.0.attn.q_proj.{part}"])
    torch.save(state, tmp_path / "reference.pth")
    torch.save(converted, tmp_path / "port.pth")
    code, out, _ = cli("compare-weights", tmp_path / "reference.pth", tmp_path / "port.pth", capsys=capsys)
    # the values alone cannot tell this from a port that calls wq "k_proj"; the suggested rule says what was paired
    assert "  layers.*.self_attn.wq.* -> blocks.*.attn.k_proj.*" in out, out
    rules = tmp_path / "rules.txt"
    rules.write_text("".join(f"layers.*.self_attn.w{x}.* -> blocks.*.attn.{x}_proj.*\n" for x in "qkvo")
                     + "layers.*.norm1.* -> blocks.*.ln1.*\nlayers.*.norm2.* -> blocks.*.ln2.*\n"
                       "layers.*.mlp.* -> blocks.*.ffn.*\nembed.* -> tok_embed.*\nhead.* -> lm_head.*\n"
                       "norm.* -> final_norm.*\n")
    code, out, _ = cli("compare-weights", tmp_path / "reference.pth", tmp_path / "port.pth", "--mapping", rules,
                       capsys=capsys)
    assert code == 1 and [line.split(" are ")[0] for line in problem_lines(out)] == [
        "SWAPPED: layers.0.self_attn.wq.weight and layers.0.self_attn.wk.weight",
        "SWAPPED: layers.0.self_attn.wq.bias and layers.0.self_attn.wk.bias"], out


def test_a_prefix_rule_pairs_a_port_that_renamed_its_container(reference, capsys):
    root, state = reference
    converted = {name.replace("layers.", "blocks.", 1): value for name, value in state.items()}
    converted["blocks.1.mlp.2.bias"] = converted["blocks.1.mlp.2.bias"] * 2
    torch.save(converted, root / "converted.pth")
    rules = root / "mapping.txt"
    rules.write_text("# the port calls its layer list 'blocks'\nlayers.* -> blocks.*\n")
    code, out, _ = cli("compare-weights", root / "reference.pth", root / "converted.pth", "--mapping", rules,
                       "--json", capsys=capsys)
    report = json.loads(out)
    assert code == 1 and report["notes"] == []
    assert [(f["kind"], f["name_a"], f["name_b"], f["matched_by"]) for f in findings(out)] == [
        ("values", "layers.1.mlp.2.bias", "blocks.1.mlp.2.bias", "mapping")]
    assert sum(f["matched_by"] == "mapping" for f in report["findings"]) == 32
    as_json = root / "mapping.json"
    as_json.write_text(json.dumps({"layers.*": "blocks.*"}))
    code, out, _ = cli("compare-weights", root / "reference.pth", root / "converted.pth", "--mapping", as_json,
                       capsys=capsys)
    assert code == 1 and "36 parameters match, 1 problems" in out
    assert "VALUES: layers.1.mlp.2.bias -> blocks.1.mlp.2.bias: values differ" in out


# --- mapping files: rules, and bad lines ------------------------------------------------------------------------

def test_name_mapping_exact_pairs_win_then_the_first_rule_that_fits(tmp_path):
    text = tmp_path / "mapping.txt"
    text.write_text("layers.0.norm.weight -> special.weight   # an exact pair\n"
                    "layers.*.attn.wq.* -> blocks.*.attn.q_proj.*\n"
                    "layers.* = blocks.*\n"
                    "* model.*\n")
    mapping = load_name_mapping(text)
    assert isinstance(mapping, NameMapping) and mapping == {"layers.0.norm.weight": "special.weight"}
    assert dict(mapping) == {"layers.0.norm.weight": "special.weight"} and len(mapping) == 1
    assert [str(rule) for rule in mapping.rules] == ["layers.*.attn.wq.* -> blocks.*.attn.q_proj.*",
                                                     "layers.* -> blocks.*", "* -> model.*"]
    assert mapping.lookup("layers.0.norm.weight") == "special.weight"
    assert mapping.lookup("layers.12.attn.wq.bias") == "blocks.12.attn.q_proj.bias"
    assert mapping.lookup("layers.3.norm.weight") == "blocks.3.norm.weight"
    assert mapping.lookup("head.weight") == "model.head.weight"
    assert NameMapping().lookup("x") is None
    # several parts per '*', each as short as it can be
    assert NameRule("*.attn.*", "*.a.*").apply("enc.1.attn.x.attn.w") == "enc.1.a.x.attn.w"
    assert NameRule("a.*", "b.*").apply("a") is None and NameRule("a.*", "b.*").apply("ab.c") is None


def test_rules_suggested_from_pairs_follow_the_majority_and_the_numbers():
    assert str(infer_rule("layers.3.self_attn.wq.weight", "blocks.3.attn.q_proj.weight")) == \
        "layers.*.self_attn.wq.* -> blocks.*.attn.q_proj.*"
    assert str(infer_rule("layers.0.norm.weight", "blocks.0.norm.weight")) == "layers.* -> blocks.*"
    assert str(infer_rule("fc.weight", "model.fc.weight")) == "* -> model.*"
    assert infer_rule("a.weight", "a.weight") is None and infer_rule("a.weight", "b.bias") is None
    pairs = [(f"l.{i}.wq.weight", f"b.{i}.{'k' if i == 2 else 'q'}.weight") for i in range(4)]
    assert [str(r) for r in suggest_rules(pairs + [("l.0.n.weight", "b.0.n.weight")])] == [
        "l.*.wq.* -> b.*.q.*", "l.* -> b.*"]


@pytest.mark.parametrize("line, reason", [
    ("lay*rs.x -> blocks.*", "a '*' must stand for whole name parts"),
    ("layers.* -> blocks", "each '*' of the target takes what the same '*' of the pattern matched"),
    ("layers.*.* -> blocks.*.*", "two '*' next to each other are ambiguous"),
    ("layers..* -> blocks.*", "empty name part"),
    ("layers.* -> blocks.* extra", "one 'a_name b_name' pair a line"),
])
def test_a_bad_rule_line_is_exit_2_naming_the_file_and_line(reference, capsys, line, reason):
    root, _ = reference
    mapping = root / "mapping.txt"
    mapping.write_text(f"# rules\nembed.weight tok_embed.weight\n{line}\n")
    code, out, err = cli("compare-weights", root / "reference.pth", root / "reference.pth", "--mapping", mapping,
                         capsys=capsys)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"mapping='{mapping}:3' is not allowed" in err and reason in err and "Traceback" not in err


def test_bad_rules_in_json_and_a_repeated_pattern_name_their_line(reference, capsys):
    root, _ = reference
    mapping = root / "mapping.json"
    mapping.write_text('{\n  "embed.weight": "tok_embed.weight",\n  "layers.*": "blocks"\n}\n')
    code, _, err = cli("compare-weights", root / "reference.pth", root / "reference.pth", "--mapping", mapping,
                       capsys=capsys)
    assert code == 2 and f"mapping='{mapping}:3' is not allowed" in err and "has 1 '*'" in err, err
    mapping.write_text('{"a.*": "b.*",\n "a.*": "c.*"}')
    code, _, err = cli("compare-weights", root / "reference.pth", root / "reference.pth", "--mapping", mapping,
                       capsys=capsys)
    assert code == 2 and "each rule pattern once" in err, err
    text = root / "mapping.txt"
    text.write_text("layers.* -> blocks.*\nlayers.* -> model.*\n")
    code, _, err = cli("compare-weights", root / "reference.pth", root / "reference.pth", "--mapping", text,
                       capsys=capsys)
    assert code == 2 and f"mapping='{text}:2' is not allowed: each rule pattern once" in err, err


# --- the fingerprint never loses a match ------------------------------------------------------------------------

def test_the_fingerprint_filter_keeps_every_allclose_match_and_drops_the_rest():
    rng = np.random.default_rng(0)
    rtol, atol = 1e-3, 1e-5
    weights, probes = {}, []
    for i in range(60):
        shape = [(4, 4), (3, 5), (16,), (2, 3, 4)][i % 4]
        value = rng.standard_normal(shape).astype(np.float32) * (10.0 ** rng.integers(-3, 3))
        if i % 7 == 0:
            value.flat[i % value.size] = np.nan
        weights[f"w{i}"] = value
        edge = (atol + rtol * np.abs(value)) * rng.uniform(-0.99, 0.99, value.shape)  # inside allclose, at its edge
        probes.append((f"w{i}", (value + edge).astype(np.float64), True))
        beyond = value.copy()
        beyond.flat[0] += 3 * (atol + rtol * abs(float(np.nan_to_num(beyond.flat[0]))))
        probes.append((f"w{i}", beyond, np.isnan(value.flat[0])))
    index = ValueIndex(weights, rtol, atol)
    for name, probe, expected in probes:
        found = [n for n, transposed in index.equal(probe, fingerprint(probe)) if not transposed]
        assert (name in found) == expected, (name, found)
    square = weights["w0"]
    assert ("w0", True) in index.equal(square.T.copy(), fingerprint(square.T))


# --- a real MindSpore port -----------------------------------------------------------------------------------------

MINDSPORE_PORT = """
import sys
import mindspore as ms
import torch
from mindspore import nn

D, VOCAB = {d}, {vocab}


class PortAttention(nn.Cell):
    def __init__(self):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Dense(D, D) for _ in range(4))


class Block(nn.Cell):
    def __init__(self):
        super().__init__()
        self.attn = PortAttention()
        self.ln1 = nn.LayerNorm((D,))
        self.ffn = nn.SequentialCell([nn.Dense(D, 2 * D), nn.GELU(), nn.Dense(2 * D, D)])
        self.ln2 = nn.LayerNorm((D,))


class Port(nn.Cell):
    def __init__(self):
        super().__init__()
        self.tok_embed = nn.Embedding(VOCAB, D)
        self.blocks = nn.CellList([Block() for _ in range(2)])
        self.final_norm = nn.LayerNorm((D,))
        self.lm_head = nn.Dense(D, VOCAB)


net = Port()
state = torch.load({source!r}, weights_only=True)
for (name, param), value in zip(net.parameters_and_names(), state.values()):
    param.set_data(ms.Tensor(value.numpy()))
ms.save_checkpoint(net, {good!r})
q, k = net.blocks[1].attn.q_proj.weight, net.blocks[1].attn.k_proj.weight
q_value, k_value = q.asnumpy(), k.asnumpy()
q.set_data(ms.Tensor(k_value))
k.set_data(ms.Tensor(q_value))
ms.save_checkpoint(net, {swapped!r})
print(sorted(name for name, _ in net.parameters_and_names())[:3])
"""


@pytest.mark.mindspore
def test_a_mindspore_port_with_other_names_is_clean_and_its_swap_is_named(reference):
    root, _ = reference
    proc = run_python(MINDSPORE_PORT.format(d=D, vocab=VOCAB, source=str(root / "reference.pth"),
                                            good=str(root / "port.ckpt"), swapped=str(root / "swapped.ckpt")))
    assert "blocks.0.attn.k_proj.bias" in proc.stdout  # MindSpore's own parameter names
    check = "import sys\nfrom msdebug_hooks.cli import main\nsys.exit(main(sys.argv[1:]))"
    good = run_python(check.replace("sys.argv[1:]", repr(["compare-weights", str(root / "reference.pth"),
                                                           str(root / "port.ckpt")])), check=False)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "37 parameters match, 0 problems" in good.stdout and "  layers.*.norm1.* -> blocks.*.ln1.*" in good.stdout
    bad = run_python(check.replace("sys.argv[1:]", repr(["compare-weights", str(root / "reference.pth"),
                                                          str(root / "swapped.ckpt"), "--json"])), check=False)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    report = json.loads(bad.stdout)
    assert [(f["kind"], f["moved"]) for f in report["findings"] if f["kind"] != "ok"] == [
        ("swapped", [["layers.1.self_attn.wq.weight", "blocks.1.attn.k_proj.weight", False],
                     ["layers.1.self_attn.wk.weight", "blocks.1.attn.q_proj.weight", False]])]
    gammas = {f["name_a"]: f["name_b"] for f in report["findings"] if (f["name_b"] or "").endswith("gamma")}
    assert gammas["layers.1.norm2.weight"] == "blocks.1.ln2.gamma"
