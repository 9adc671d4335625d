"""Every layer of the layout table, ported for real: PyTorch 2.13 CPU against MindSpore 2.10 CPU, in one process.

Usage: ``layer_layouts_run.py OUT_DIR``. For each layer type: random PyTorch weights are converted with
``convert_torch_state(state, net)`` and loaded with ``load_param_into_net(strict_load=True)``; one forward and one
backward run in both; outputs, parameter gradients, input gradients (and BatchNorm's running statistics after the
training pass) are compared with ``compare_arrays``; both sides capture step 1 with their layer recorders and
``compare_layers`` / ``compare_weights`` read the pair; one planted wrong conversion is saved and compare-weights'
report on it kept. Then three small models (LSTM, GRU, Conv1d stack) are ported and read through the ``msdebug``
commands, with the sequence length unlike and equal to the batch size. The findings go to ``OUT_DIR/results.json``
for tests/compare/test_layer_layouts.py to judge.
"""
from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import mindspore as ms
import numpy as np
import torch
from mindspore import nn as mnn
from torch import nn as tnn

from msdebug_hooks.cli import main as msdebug
from msdebug_hooks.compare.layers import compare_layers
from msdebug_hooks.compare.layouts import one_layout
from msdebug_hooks.compare.metrics import compare_arrays
from msdebug_hooks.compare.mindspore_layers import LayerRecorder
from msdebug_hooks.compare.naming import convert_torch_state
from msdebug_hooks.compare.torch import TorchLayerRecorder
from msdebug_hooks.compare.weights import compare_weights

OUT = Path(sys.argv[1])
ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
torch.manual_seed(0)
RNG = np.random.default_rng(0)


def floats(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


class MsWrap(mnn.Cell):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def construct(self, *inputs):
        return self.layer(*inputs)


class TorchWrap(tnn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, *inputs):
        return self.layer(*inputs)


def flat(value):
    if isinstance(value, (tuple, list)):
        return [item for part in value for item in flat(part)]
    return [] if value is None else [value]


def verdict(a, b):
    a, b, _ = one_layout(np.asarray(a), np.asarray(b))
    result = compare_arrays(a, b)
    return {"verdict": result.verdict, "max_abs_error": result.max_abs_error, "reason": result.reason}


def swap(array, axis, i, j, size):
    """``array`` with blocks ``i`` and ``j`` (each ``size`` long) exchanged along ``axis``."""
    out = np.array(array, copy=True)
    index_i = [slice(None)] * out.ndim
    index_j = list(index_i)
    index_i[axis], index_j[axis] = slice(i * size, (i + 1) * size), slice(j * size, (j + 1) * size)
    out[tuple(index_i)], out[tuple(index_j)] = array[tuple(index_j)], array[tuple(index_i)]
    return out


def run_pair(name, torch_layer, ms_layer, inputs, plant=None, train=True, forward=True, workdir=None, mapping=None):
    """One ported pair: convert, load, forward and backward in both, captures, weight files, a planted mistake."""
    workdir = workdir or OUT / name
    workdir.mkdir(parents=True)
    model, net = TorchWrap(torch_layer), MsWrap(ms_layer)
    model.train(train)
    net.set_train(train)
    result = {}
    state = model.state_dict()
    converted = convert_torch_state(state, net)
    ms_to_torch = {name: _torch_name(name, converted, state) for name in converted}  # before any value moves
    not_loaded, _ = ms.load_param_into_net(net, converted, strict_load=True)
    result["not_loaded"] = not_loaded
    if state:  # activations have no weights to compare
        torch.save(state, workdir / "source.pth")
        ms.save_checkpoint(net, str(workdir / "converted.ckpt"))
        report = compare_weights(workdir / "source.pth", workdir / "converted.ckpt", mapping=mapping)
        result["weights"] = {"ok": report.ok, "problems": [f.message for f in report.problems],
                             "layout_notes": [f.message for f in report.findings if "compared as" in f.message]}
    if plant is not None:
        planted_name, broken = plant({p.name: p.asnumpy() for p in net.get_parameters()})
        ms.save_checkpoint([{"name": k, "data": ms.Tensor(np.ascontiguousarray(v))} for k, v in broken.items()],
                           str(workdir / "planted.ckpt"))
        report = compare_weights(workdir / "source.pth", workdir / "planted.ckpt", mapping=mapping)
        result["planted"] = {"name": planted_name, "problems": [(f.kind, f.name_a, f.name_b, f.message)
                                                                for f in report.problems]}
    if not forward:
        return result
    float_inputs = [x.dtype.kind == "f" for x in inputs]
    ms_recorder = LayerRecorder(net, workdir / "capture_ms", steps=[1])
    torch_recorder = TorchLayerRecorder(model, workdir / "capture_torch", steps=[1])
    t_inputs = [torch.tensor(x, requires_grad=f) for x, f in zip(inputs, float_inputs)]
    with torch_recorder.step(1):
        t_out = flat(model(*t_inputs))
        coefficients = [floats(*o.shape) for o in t_out]
        loss = sum((o * torch.tensor(c)).sum() for o, c in zip(t_out, coefficients))
        loss.backward()
    params = net.trainable_params()

    def forward_fn(*xs):
        outs = flat(net(*xs))
        total = 0
        for o, c in zip(outs, coefficients):
            total = total + (o * ms.Tensor(c)).sum()
        return total, outs

    positions = tuple(i for i, f in enumerate(float_inputs) if f) or None
    grad_fn = ms.value_and_grad(forward_fn, grad_position=positions, weights=params, has_aux=True)
    with ms_recorder.step(1):
        (_, m_out), grads = grad_fn(*[ms.Tensor(x) for x in inputs])
        input_grads, param_grads = grads if positions else ((), grads)
        ms_recorder.record_gradients(param_grads)
    input_grads = input_grads if isinstance(input_grads, tuple) else (input_grads,)
    ms_recorder.remove()
    torch_recorder.remove()
    result["outputs"] = [verdict(m.asnumpy(), t.detach().numpy()) for m, t in zip(flat(m_out), t_out)]
    result["output_count"] = [len(flat(m_out)), len(t_out)]
    torch_params = dict(model.named_parameters())
    result["param_grads"] = {p.name: verdict(g.asnumpy(), torch_params[ms_to_torch[p.name]].grad.numpy())
                             for p, g in zip(params, param_grads)}
    result["input_grads"] = [verdict(g.asnumpy(), t.grad.numpy())
                             for g, t in zip(input_grads, [t for t, f in zip(t_inputs, float_inputs) if f])]
    buffers = dict(model.named_buffers())
    result["state"] = {p.name: verdict(p.asnumpy(), buffers[ms_to_torch[p.name]].numpy())
                       for p in net.get_parameters() if not p.requires_grad and ms_to_torch[p.name] in buffers}
    layers = compare_layers(workdir / "capture_ms", workdir / "capture_torch")
    result["layers"] = _layers_summary(layers)
    return result


def _torch_name(ms_name, converted, state):
    """The PyTorch name whose value went into ``ms_name``: the one tensor of equal values (the test's random
    values are distinct; BatchNorm's fresh running mean and variance are set apart by the case)."""
    value = converted[ms_name].asnumpy()
    found = [torch_name for torch_name, tensor in state.items() if tensor.numel() == value.size
             and np.array_equal(tensor.numpy().reshape(value.shape), value)]
    return found[0] if len(found) == 1 else None


def _layers_summary(layers):
    first = layers.first_divergence
    return {"ok": layers.ok, "pairs": [(p.record_a.name, p.record_b.name, p.record_a.kind, p.matched_by,
                                        p.result.verdict, p.result.reason) for p in layers.pairs],
            "only_a": [r.name for r in layers.unmatched_a], "only_b": [r.name for r in layers.unmatched_b],
            "first": None if first is None else [first.record_a.name, first.result.verdict, first.result.reason]}


def plant_swap(name_a, name_b):
    def plant(params):
        broken = dict(params)
        broken[name_a], broken[name_b] = params[name_b], params[name_a]
        return name_a, broken
    return plant


def plant_with(name, change):
    def plant(params):
        broken = dict(params)
        broken[name] = change(params[name])
        return name, broken
    return plant


def flip_last(axes):
    return lambda w: np.ascontiguousarray(np.flip(w, axis=axes))


CASES = {}


def case(name):
    def register(function):
        CASES[name] = function
        return function
    return register


def conv_case(name, torch_cls, ms_cls, x_shape, channels, kernel, transposed=False):
    def build():
        t = torch_cls(channels[0], channels[1], kernel, padding=1, bias=True)
        m = ms_cls(channels[0], channels[1], kernel, pad_mode="pad", padding=1, has_bias=True)
        spatial = tuple(range(2, 2 + len(x_shape) - 2))
        axes = tuple(a + (1 if ms_cls in (mnn.Conv1d, mnn.Conv1dTranspose) else 0) for a in spatial)
        return run_pair(name, t, m, [floats(*x_shape)], plant_with("layer.weight", flip_last(axes)))
    CASES[name] = build


conv_case("Conv1d", tnn.Conv1d, mnn.Conv1d, (2, 3, 9), (3, 4), 3)
conv_case("Conv2d", tnn.Conv2d, mnn.Conv2d, (2, 3, 6, 7), (3, 4), 3)
conv_case("Conv3d", tnn.Conv3d, mnn.Conv3d, (2, 2, 4, 5, 5), (2, 3), 3)
conv_case("ConvTranspose1d", tnn.ConvTranspose1d, mnn.Conv1dTranspose, (2, 4, 7), (4, 3), 3)
conv_case("ConvTranspose2d", tnn.ConvTranspose2d, mnn.Conv2dTranspose, (2, 4, 5, 6), (4, 3), 3)
conv_case("ConvTranspose3d", tnn.ConvTranspose3d, mnn.Conv3dTranspose, (1, 2, 3, 4, 4), (2, 3), 3)


@case("Dense")
def _dense():
    return run_pair("Dense", tnn.Linear(6, 5), mnn.Dense(6, 5), [floats(4, 6)],
                    plant_with("layer.bias", np.zeros_like))


@case("Embedding")
def _embedding():
    ids = RNG.integers(0, 10, size=(3, 5)).astype(np.int32)
    return run_pair("Embedding", tnn.Embedding(10, 4), mnn.Embedding(10, 4), [ids],
                    plant_with("layer.embedding_table", lambda w: np.roll(w, 1, axis=0)))


for _name, _tcls, _mcls, _shape in (("BatchNorm1d", tnn.BatchNorm1d, mnn.BatchNorm1d, (6, 3, 5)),
                                    ("BatchNorm2d", tnn.BatchNorm2d, mnn.BatchNorm2d, (4, 3, 4, 4)),
                                    ("BatchNorm3d", tnn.BatchNorm3d, mnn.BatchNorm3d, (2, 3, 2, 3, 3))):
    def _bn(name=_name, tcls=_tcls, mcls=_mcls, shape=_shape):
        t = tcls(3, momentum=0.1)
        with torch.no_grad():  # statistics and affine parameters that are not the defaults
            for tensor in (t.weight, t.bias, t.running_mean):
                tensor.copy_(torch.tensor(floats(3)))
            t.running_var.copy_(torch.tensor(np.abs(floats(3)) + 0.5))
        prefix = "layer.bn2d." if name == "BatchNorm3d" else "layer."
        return run_pair(name, t, mcls(3, momentum=0.9), [floats(*shape)],
                        plant_swap(prefix + "moving_mean", prefix + "moving_variance"))
    CASES[_name] = _bn


@case("LayerNorm")
def _layernorm():
    t = tnn.LayerNorm((4, 5))
    with torch.no_grad():
        t.weight.copy_(torch.tensor(floats(4, 5)))
        t.bias.copy_(torch.tensor(floats(4, 5)))
    m = mnn.LayerNorm((4, 5), begin_norm_axis=1, begin_params_axis=1, epsilon=1e-5)  # rank 3 - 2 axes
    return run_pair("LayerNorm", t, m, [floats(3, 4, 5)], plant_swap("layer.gamma", "layer.beta"))


@case("GroupNorm")
def _groupnorm():
    t = tnn.GroupNorm(2, 4)
    with torch.no_grad():
        t.weight.copy_(torch.tensor(floats(4)))
        t.bias.copy_(torch.tensor(floats(4)))
    return run_pair("GroupNorm", t, mnn.GroupNorm(2, 4), [floats(2, 4, 3, 3)],
                    plant_with("layer.gamma", np.ones_like))


@case("InstanceNorm2d")
def _instancenorm():
    """No forward: MindSpore 2.10 has no CPU kernel for InstanceNorm. Conversion, loading and weights only, with
    PyTorch's affine parameters (the defaults without them are checked by the test of convert_torch_state)."""
    t = tnn.InstanceNorm2d(3, affine=True, track_running_stats=True)
    with torch.no_grad():
        t.weight.copy_(torch.tensor(floats(3)))
        t.bias.copy_(torch.tensor(floats(3)))
    return run_pair("InstanceNorm2d", t, mnn.InstanceNorm2d(3), [floats(2, 3, 4, 4)],
                    plant_swap("layer.gamma", "layer.beta"), forward=False)


def rnn_case(name, tcls, mcls, plant_param, plant_swap_blocks, **kwargs):
    def build():
        t = tcls(4, 5, num_layers=2, bidirectional=True, batch_first=True, **kwargs)
        m = mcls(4, 5, num_layers=2, bidirectional=True, batch_first=True, **kwargs)
        plant = plant_with(plant_param, lambda w: swap(w, 0, *plant_swap_blocks, 5)) if plant_swap_blocks \
            else plant_with(plant_param, lambda w: np.ascontiguousarray(w.T))
        return run_pair(name, t, m, [floats(3, 6, 4)], plant)
    CASES[name] = build


rnn_case("LSTM", tnn.LSTM, mnn.LSTM, "layer.weight_ih_l0", (1, 2))      # i, f, g, o stored as i, g, f, o
rnn_case("GRU", tnn.GRU, mnn.GRU, "layer.weight_hh_l1_reverse", (0, 1))  # r, z, n stored as z, r, n
rnn_case("RNN", tnn.RNN, mnn.RNN, "layer.weight_hh_l0", None, nonlinearity="relu")  # [H, H] transposed


@case("MultiheadAttention")
def _mha():
    t = tnn.MultiheadAttention(8, 2, batch_first=True)
    with torch.no_grad():
        t.in_proj_bias.copy_(torch.tensor(floats(24)))
    return run_pair("MultiheadAttention", t, mnn.MultiheadAttention(8, 2, batch_first=True),
                    [floats(2, 5, 8), floats(2, 6, 8), floats(2, 6, 8)],
                    plant_with("layer.in_proj_weight", lambda w: swap(w, 0, 0, 1, 8)))  # q and k exchanged


@case("MultiheadAttention-separate")
def _mha_separate():
    t = tnn.MultiheadAttention(8, 2, kdim=4, vdim=6, add_bias_kv=True)
    with torch.no_grad():
        t.in_proj_bias.copy_(torch.tensor(floats(24)))
    return run_pair("MultiheadAttention-separate", t, mnn.MultiheadAttention(8, 2, kdim=4, vdim=6, add_bias_kv=True),
                    [floats(5, 2, 8), floats(6, 2, 4), floats(6, 2, 6)], plant_swap("layer.bias_k", "layer.bias_v"))


@case("PReLU")
def _prelu():
    t = tnn.PReLU(3)
    with torch.no_grad():
        t.weight.copy_(torch.tensor(floats(3)))
    return run_pair("PReLU", t, mnn.PReLU(3), [floats(2, 3, 4)], plant_with("layer.w", lambda w: np.full_like(w, 0.25)))


@case("activations")
def _activations():
    pairs = [(tnn.GELU(), mnn.GELU(approximate=False)), (tnn.LeakyReLU(0.01), mnn.LeakyReLU(0.01)),
             (tnn.Hardswish(), mnn.HSwish()), (tnn.ELU(), mnn.ELU()), (tnn.SiLU(), mnn.SiLU()),
             (tnn.Mish(), mnn.Mish()), (tnn.Tanh(), mnn.Tanh()), (tnn.Softmax(dim=-1), mnn.Softmax(axis=-1))]
    return run_pair("activations", tnn.Sequential(*[t for t, _ in pairs]), mnn.SequentialCell([m for _, m in pairs]),
                    [floats(3, 7)])


class MsCustom(mnn.Cell):
    """Parameters a port names alike in both frameworks (``w``, a LayerScale ``gamma``) beside a PReLU (``w``)."""

    def __init__(self):
        super().__init__()
        self.w = ms.Parameter(ms.Tensor(floats(3)), name="w")
        self.gamma = ms.Parameter(ms.Tensor(floats(3)), name="gamma")
        self.act = mnn.PReLU(3)

    def construct(self, x):
        return self.act(x * self.w) * self.gamma


class TorchCustom(tnn.Module):
    def __init__(self):
        super().__init__()
        self.w = tnn.Parameter(torch.tensor(floats(3)))
        self.gamma = tnn.Parameter(torch.tensor(floats(3)))
        self.act = tnn.PReLU(3)

    def forward(self, x):
        return self.act(x * self.w) * self.gamma


@case("custom names")
def _custom():
    """With the mapping lines the docs prescribe for such names (compare-weights matches by the PyTorch spelling)."""
    return run_pair("custom names", TorchCustom(), MsCustom(), [floats(2, 3)], plant_swap("layer.w", "layer.gamma"),
                    mapping={"layer.w": "layer.w", "layer.gamma": "layer.gamma"})


def instance_norm_defaults():
    """PyTorch's default InstanceNorm has no parameters: MindSpore's start from the table's defaults."""
    net = MsWrap(mnn.InstanceNorm2d(3))
    converted = convert_torch_state(TorchWrap(tnn.InstanceNorm2d(3)).state_dict(), net)
    ms.load_param_into_net(net, converted, strict_load=True)
    return {p.name: p.asnumpy().tolist() for p in net.get_parameters()}


# --- whole models, through the commands --------------------------------------------------------------------------
class TorchSeq(tnn.Module):
    def __init__(self, kind):
        super().__init__()
        self.rnn = (tnn.LSTM if kind == "LSTM" else tnn.GRU)(4, 6, num_layers=2, bidirectional=True, batch_first=True)
        self.head = tnn.Linear(12, 3)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


class MsSeq(mnn.Cell):
    def __init__(self, kind):
        super().__init__()
        self.rnn = (mnn.LSTM if kind == "LSTM" else mnn.GRU)(4, 6, num_layers=2, bidirectional=True, batch_first=True)
        self.head = mnn.Dense(12, 3)

    def construct(self, x):
        return self.head(self.rnn(x)[0])


def run_model(name, model, net, x, plant=None):
    """A correct port through the commands: compare-weights on the converted file, compare-layers (defaults) on
    captures of one training step with gradients."""
    workdir = OUT / name
    workdir.mkdir(parents=True)
    model.train(True)
    net.set_train(True)
    state = model.state_dict()
    ms.load_param_into_net(net, convert_torch_state(state, net), strict_load=True)
    if plant is not None:  # a real mistake made after the correct conversion: the commands must see it
        param = dict((p.name, p) for p in net.get_parameters())[plant[0]]
        param.set_data(ms.Tensor(plant[1](param.asnumpy())))
    torch.save(state, workdir / "source.pth")
    ms.save_checkpoint(net, str(workdir / "converted.ckpt"))
    ms_recorder = LayerRecorder(net, workdir / "capture_ms", steps=[1])
    torch_recorder = TorchLayerRecorder(model, workdir / "capture_torch", steps=[1])
    coefficients = None
    with torch_recorder.step(1):
        out = model(torch.tensor(x))
        coefficients = floats(*out.shape)
        (out * torch.tensor(coefficients)).sum().backward()
    weights_of_outputs = ms.Tensor(coefficients)

    def loss_fn(xs):
        return (net(xs) * weights_of_outputs).sum()

    grad_fn = ms.value_and_grad(loss_fn, None, net.trainable_params())
    with ms_recorder.step(1):
        _, grads = grad_fn(ms.Tensor(x))
        ms_recorder.record_gradients(grads)
    commands = {}
    for command, args in (("compare-weights", [workdir / "source.pth", workdir / "converted.ckpt"]),
                          ("compare-layers", [workdir / "capture_ms", workdir / "capture_torch"])):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            code = msdebug([command] + [str(a) for a in args])
        commands[command] = {"exit": code, "output": printed.getvalue()}
    records = json.loads((workdir / "capture_ms" / "manifest.json").read_text())["records"]
    commands["ms_layers"] = sorted({r["name"] for r in records if r["kind"] == "forward-output"})
    return commands


class MsConvStack(mnn.Cell):
    def __init__(self, length):
        super().__init__()
        self.layers = mnn.SequentialCell([
            mnn.Conv1d(4, 8, 3, pad_mode="pad", padding=1, has_bias=True), mnn.BatchNorm1d(8, momentum=0.9),
            mnn.ReLU(), mnn.Conv1d(8, 8, 3, pad_mode="pad", padding=1, has_bias=True), mnn.ReLU(), mnn.Flatten(),
            mnn.Dense(8 * length, 3)])

    def construct(self, x):
        return self.layers(x)


class TorchConvStack(tnn.Module):
    def __init__(self, length):
        super().__init__()
        self.layers = tnn.Sequential(tnn.Conv1d(4, 8, 3, padding=1), tnn.BatchNorm1d(8), tnn.ReLU(),
                                     tnn.Conv1d(8, 8, 3, padding=1), tnn.ReLU(), tnn.Flatten(),
                                     tnn.Linear(8 * length, 3))

    def forward(self, x):
        return self.layers(x)


def main():
    results = {"cases": {}, "models": {}, "instance_norm_defaults": instance_norm_defaults()}
    for name, build in CASES.items():
        try:
            results["cases"][name] = build()
        except Exception as exc:  # noqa: BLE001 - reported per case, the test names it
            results["cases"][name] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
    for batch, length in ((3, 5), (4, 4)):  # the second: sequence length equal to the batch size
        for kind in ("LSTM", "GRU"):
            results["models"][f"{kind}-B{batch}-T{length}"] = run_model(
                f"{kind}-B{batch}-T{length}", TorchSeq(kind), MsSeq(kind), floats(batch, length, 4))
        results["models"][f"Conv1dStack-B{batch}-L{length}"] = run_model(
            f"Conv1dStack-B{batch}-L{length}", TorchConvStack(length), MsConvStack(length), floats(batch, 4, length))
    # the control: the same LSTM port with the input gates of layer 0 stored in Ascend's order (i, g, f, o)
    results["models"]["LSTM-planted"] = run_model("LSTM-planted", TorchSeq("LSTM"), MsSeq("LSTM"), floats(4, 4, 4),
                                                  plant=("rnn.weight_ih_l0", lambda w: swap(w, 0, 1, 2, 6)))
    ms.set_context(mode=ms.GRAPH_MODE)  # the recorder's hooks compiled into the graph: the same reading
    results["models"]["LSTM-B4-T4-graph"] = run_model("LSTM-B4-T4-graph", TorchSeq("LSTM"), MsSeq("LSTM"),
                                                      floats(4, 4, 4))
    (OUT / "results.json").write_text(json.dumps(results, indent=1, default=str))


main()
