"""Reduced precision in layer captures, layer inputs in captures, and replaying one layer on captured inputs.

PyTorch-only tests run in the fast lane; those that start MindSpore (in a fresh process each) carry the mark.
"""
from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from project import run_python  # noqa: E402
from msdebug_hooks.compare.layer_capture import CaptureError, read_capture  # noqa: E402
from msdebug_hooks.compare.replay import layer_candidates, layer_inputs, replay_layer  # noqa: E402
from msdebug_hooks.compare.torch import TorchLayerRecorder  # noqa: E402
from msdebug_hooks.errors import ConfigError  # noqa: E402


def _outputs_of(model, run):
    """Every leaf module's output during ``run()``, by name, taken by our own hooks (the values to check against)."""
    seen, handles = {}, []

    def keep(name):
        def hook(_module, _inputs, output):
            seen.setdefault(name, output.detach().clone())   # returns None: the output stays the layer's own
        return hook
    for name, module in model.named_modules():
        if name and not list(module.children()):
            handles.append(module.register_forward_hook(keep(name)))
    try:
        run()
    finally:
        for handle in handles:
            handle.remove()
    return seen


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(8)
        self.conv = torch.nn.Conv2d(2, 3, 3)
        self.relu = torch.nn.ReLU()
        self.flatten = torch.nn.Flatten()
        self.fc = torch.nn.Linear(3 * 6 * 6, 5)

    def forward(self, x):
        return self.fc(self.flatten(self.relu(self.conv(self.norm(x)))))


def test_pytorch_autocast_bfloat16_is_captured_exactly_with_its_source_dtype(tmp_path):
    torch.manual_seed(0)
    model, x = ConvNet(), torch.randn(4, 2, 8, 8)
    recorder = TorchLayerRecorder(model, tmp_path / "capture", record_inputs=True, record_parameters=True)

    def step():
        with recorder.step(1), torch.autocast("cpu", dtype=torch.bfloat16):
            model(x).float().sum().backward()   # before: TypeError: Got unsupported ScalarType BFloat16
    expected = _outputs_of(model, step)
    capture = read_capture(tmp_path / "capture")
    forward = {r.name: r for r in capture.step_records(1, ["forward-output"])}
    assert {name: (r.dtype, r.source_dtype) for name, r in forward.items()} == {
        "norm": ("float32", "float32"), "conv": ("float32", "bfloat16"), "relu": ("float32", "bfloat16"),
        "flatten": ("float32", "bfloat16"), "fc": ("float32", "bfloat16")}
    for name, record in forward.items():
        assert expected[name].dtype == (torch.bfloat16 if record.source_dtype == "bfloat16" else torch.float32)
        assert np.array_equal(capture.load(record), expected[name].float().numpy()), name   # exact, every value
    records = json.loads((tmp_path / "capture" / "manifest.json").read_text())["records"]
    conv = next(r for r in records if r["name"] == "conv" and r["kind"] == "forward-output")
    assert conv["dtype"] == "float32" and conv["source_dtype"] == "bfloat16"
    kept = {(r.kind, r.source_dtype) for r in capture.records if r.kind in ("parameter", "parameter-gradient")}
    assert kept == {("parameter", "float32"), ("parameter-gradient", "float32")}
    # the fc layer replayed under the same autocast on its captured (bfloat16-valued) input: the same bits
    with torch.autocast("cpu", dtype=torch.bfloat16):
        (replayed,) = replay_layer(model, "fc", layer_inputs(capture, 1, "fc"))
    assert np.array_equal(replayed, capture.load(forward["fc"]))


def test_float16_tensors_are_written_as_float16(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(3, 2)).half()
    recorder = TorchLayerRecorder(model, tmp_path / "capture", record_gradients=False, record_parameters=True)
    with recorder.step(0):
        out = model(torch.ones(1, 3, dtype=torch.float16))
    records = read_capture(tmp_path / "capture").records
    assert {(r.dtype, r.source_dtype) for r in records} == {("float16", "float16")}
    assert np.array_equal(read_capture(tmp_path / "capture").load(records[-1]), out.detach().numpy())


def test_version_1_captures_still_read_and_unknown_versions_are_refused(tmp_path):
    root = tmp_path / "v1"
    (root / "step_2").mkdir(parents=True)
    np.save(root / "step_2" / "0000_fc.forward-output.npy", np.arange(6, dtype=np.float16).reshape(2, 3))
    manifest = {"format": "msdebug-layer-capture", "format_version": 1, "framework": "pytorch", "steps": [2],
                "records": [{"step": 2, "order": 0, "name": "fc", "kind": "forward-output",
                             "file": "step_2/0000_fc.forward-output.npy", "shape": [2, 3], "dtype": "float16"}]}
    (root / "manifest.json").write_text(json.dumps(manifest))
    capture = read_capture(root)
    (record,) = capture.records
    assert (record.dtype, record.source_dtype, record.kind) == ("float16", "float16", "forward-output")
    assert capture.load(record)[1, 2] == 5
    for version, field in ((3, None), (True, None), (2, 7)):
        manifest["format_version"] = version
        if field is not None:
            manifest["records"][0]["source_dtype"] = field
        (root / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(CaptureError) as caught:
            read_capture(root)
        message = str(caught.value)
        assert ("format_version 1 or 2" in message) if field is None else ("records[0].source_dtype" in message)


class Chain(torch.nn.Module):
    """fc1 -> relu -> fc2 -> relu (the same ReLU twice): a sequential net with a shared layer."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 8)
        self.relu = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.relu(self.fc2(self.relu(self.fc1(x))))


def test_pytorch_inputs_are_recorded_before_each_call_with_its_call_number(tmp_path):
    torch.manual_seed(1)
    model, x = Chain(), torch.randn(3, 6)
    recorder = TorchLayerRecorder(model, tmp_path / "capture", record_inputs=True)
    with recorder.step(1):
        model(x).sum().backward()
    capture = read_capture(tmp_path / "capture")
    forward = capture.step_records(1, ["forward-input", "forward-output"])
    assert [r.name for r in forward] == ["fc1.in0", "fc1", "relu.in0", "relu", "fc2.in0", "fc2", "relu.in0#1",
                                         "relu#1"]
    assert [r.order for r in forward] == list(range(8))  # inputs, then the call's output; gradients after
    values = [capture.load(r) for r in forward]
    assert np.array_equal(values[0], x.numpy())
    for index in range(2, 8, 2):  # input of layer k == output of layer k-1
        assert np.array_equal(values[index], values[index - 1])
    assert np.array_equal(layer_inputs(capture, 1, "relu#1")[0], values[5])   # relu#1's input is fc2's output
    assert np.array_equal(layer_inputs(tmp_path / "capture", 1, "relu")[0], values[1])
    # off by default
    plain = TorchLayerRecorder(model, tmp_path / "plain", record_gradients=False)
    with plain.step(1):
        model(x)
    assert {r.kind for r in read_capture(tmp_path / "plain").records} == {"forward-output"}
    with pytest.raises(ConfigError, match=r"layer_name='fc2' is not allowed: .*record_inputs=True"):
        layer_inputs(tmp_path / "plain", 1, "fc2")


class LinearGelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 16)
        self.act = torch.nn.GELU()
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


@pytest.fixture
def linear_gelu_capture(tmp_path):
    torch.manual_seed(2)
    model = LinearGelu()
    recorder = TorchLayerRecorder(model, tmp_path / "torch", record_inputs=True)
    with recorder.step(1):
        model(torch.randn(5, 6)).sum().backward()
    return model, read_capture(tmp_path / "torch")


def test_a_pytorch_layer_replayed_on_its_own_inputs_reproduces_its_output_exactly(linear_gelu_capture):
    model, capture = linear_gelu_capture
    outputs = {r.name: capture.load(r) for r in capture.step_records(1, ["forward-output"])}
    for name in ("fc1", "act", "fc2"):
        (replayed,) = replay_layer(model, name, layer_inputs(capture, 1, name))
        assert replayed.dtype == np.float32 and np.array_equal(replayed, outputs[name]), name
    assert model.training and all(p.grad is not None for p in model.parameters())   # state left as it was
    # the wrong layer's computation on these inputs does not reproduce fc2's output
    wrong = LinearGelu()
    (other,) = replay_layer(wrong, "fc2", layer_inputs(capture, 1, "fc2"), framework="pytorch")
    assert not np.allclose(other, outputs["fc2"], atol=1e-3)


def test_replay_errors_name_the_field_the_value_and_what_is_allowed(linear_gelu_capture, tmp_path):
    model, capture = linear_gelu_capture
    with pytest.raises(ConfigError, match=r"layer_name='fc3' is not allowed: the name of a layer of the model "
                                          r"\(e\.g\. fc1, act, fc2\)"):
        replay_layer(model, "fc3", [np.zeros((1, 16), np.float32)])
    with pytest.raises(ConfigError, match=r"framework='tensorflow' is not allowed: one of pytorch, mindspore"):
        replay_layer(model, "fc2", [], framework="tensorflow")
    with pytest.raises(ConfigError, match=r"model='dict' is not allowed: a torch.nn.Module or a mindspore"):
        replay_layer({}, "fc2", [])
    with pytest.raises(ConfigError, match=r"step=7 is not allowed: a captured step of .*\[1\]"):
        layer_inputs(capture, 7, "fc2")
    with pytest.raises(ConfigError, match=r"layer_name='fc2#1' is not allowed: a layer with recorded inputs in "
                                          r"step 1 .*\(e\.g\. act, fc1, fc2\)"):
        layer_inputs(capture, 1, "fc2#1")

    gated = torch.nn.Module()
    gated.attn = torch.nn.MultiheadAttention(4, 1, batch_first=True)
    recorder = TorchLayerRecorder(gated, tmp_path / "gated", record_inputs=True, containers=["attn"])
    with recorder.step(1):
        gated.attn(torch.ones(1, 2, 4), torch.ones(1, 2, 4), torch.ones(1, 2, 4))
    names = [r.name for r in read_capture(tmp_path / "gated").records]
    assert names[:3] == ["attn.in0", "attn.in1", "attn.in2"] and "attn.0" in names and "attn.1" in names
    # a tuple output's record name leads to its layer, and replay flattens the outputs like the recorder
    attn_inputs = layer_inputs(tmp_path / "gated", 1, "attn.0")
    replayed = replay_layer(gated, "attn.1", attn_inputs)
    saved = read_capture(tmp_path / "gated")
    assert len(replayed) == 2 and all(np.array_equal(a, saved.load(r)) for a, r in zip(
        replayed, saved.step_records(1, ["forward-output"])))


def test_layer_candidates_strip_call_tuple_and_input_suffixes():
    assert layer_candidates("relu#12") == ["relu"]
    assert layer_candidates("lstm.0#1") == ["lstm.0", "lstm"]
    assert layer_candidates("blocks.3.attn.in1#2") == ["blocks.3.attn.in1", "blocks.3.attn"]


def test_importing_the_replay_module_imports_neither_framework():
    run_python("""
        import sys
        import msdebug_hooks.compare.replay
        assert "torch" not in sys.modules and "mindspore" not in sys.modules, sorted(sys.modules)
    """)


# ---- MindSpore ------------------------------------------------------------------------------------------------

def run_script(directory, code: str) -> None:
    """Run ``code`` as a file in a fresh process (MindSpore compiles graphs from source files only)."""
    script = directory / "script.py"
    script.write_text(textwrap.dedent(code))
    run_python(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')", cwd=directory, timeout=300)


_MS_NET = """
    import numpy as np, mindspore  # no `ms` in __main__: the hooks must not need it
    from mindspore import nn, Parameter, Tensor

    class ToBF16(nn.Cell):   # MindSpore 2.10's CPU kernels take bfloat16 in Cast, Add and Mul only
        def __init__(self):
            super().__init__()
            scale = Tensor(np.full((2, 4), 2.0, np.float32)).astype(mindspore.bfloat16)
            self.scale = Parameter(scale, name="scale")

        def construct(self, x):
            return x.astype(mindspore.bfloat16) * self.scale

    class ToF32(nn.Cell):
        def construct(self, x):
            return x.astype(mindspore.float32)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Dense(6, 8)
            self.act = nn.ReLU()
            self.fc2 = nn.Dense(8, 4).to_float(mindspore.float16)
            self.half = ToBF16()
            self.back = ToF32()

        def construct(self, x):
            return self.back(self.half(self.act(self.fc2(self.act(self.fc1(x))))))
"""


@pytest.mark.mindspore
@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_mindspore_float16_and_bfloat16_with_inputs_in_both_modes(tmp_path, mode):
    run_script(tmp_path, _MS_NET + f"""
    from msdebug_hooks.compare.layer_capture import CaptureWriter
    from msdebug_hooks.compare.mindspore_layers import LayerRecorder

    mindspore.set_context(mode=mindspore.{"GRAPH_MODE" if mode == "graph" else "PYNATIVE_MODE"})
    net = Net()
    recorder = LayerRecorder(net, {str(tmp_path / "capture")!r}, record_inputs=True, record_parameters=True)
    x = Tensor(np.random.default_rng(0).standard_normal((2, 6)).astype(np.float32))

    def forward(x):
        return net(x).sum()
    grad_fn = mindspore.value_and_grad(forward, None, net.trainable_params())
    for step in (1, 2):   # float16 in a compiled graph stopped the training before ("Invalid host tensor size")
        with recorder.step(step):
            loss, grads = grad_fn(x)
            recorder.record_gradients(grads)
    # a MindSpore bfloat16 array handed to the writer directly is written as float32 too
    writer = CaptureWriter({str(tmp_path / "direct")!r}, "mindspore")
    bf16 = Tensor(np.array([1.5, 3.1], np.float32)).astype(mindspore.bfloat16)
    writer.add(0, 0, "t", "forward-output", bf16.asnumpy())
    writer.flush()
    """)
    capture = read_capture(tmp_path / "capture")
    records = capture.step_records(2)
    assert [(r.name, r.kind) for r in records if r.kind.startswith("forward")] == [
        ("fc1.in0", "forward-input"), ("fc1", "forward-output"), ("act.in0", "forward-input"),
        ("act", "forward-output"), ("fc2.in0", "forward-input"), ("fc2", "forward-output"),
        ("act.in0#1", "forward-input"), ("act#1", "forward-output"), ("half.in0", "forward-input"),
        ("half", "forward-output"), ("back.in0", "forward-input"), ("back", "forward-output")]
    by = {(r.name, r.kind): r for r in records}
    source = {name: by[(name, "forward-output")].source_dtype for name in ("fc1", "act", "fc2", "act#1", "half",
                                                                           "back")}
    assert source == {"fc1": "float32", "act": "float32", "fc2": "float16", "act#1": "float16",
                      "half": "bfloat16", "back": "float32"}
    assert by[("fc2", "forward-output")].dtype == "float16" and by[("half", "forward-output")].dtype == "float32"
    assert {by[("half.scale", kind)].source_dtype for kind in ("parameter", "parameter-gradient")} == {"bfloat16"}
    value = {key: capture.load(record) for key, record in by.items()}
    # the input of each layer is the output of the one before (fc2 is to_float(float16): in a compiled graph its
    # hook sees the input after that cast, in PyNative before it)
    chain = ["fc1", "act", "fc2", "act#1", "half", "back"]
    for before, layer in zip(chain, chain[1:]):
        inp = value[(f"{layer.split('#')[0]}.in0{'#1' if '#' in layer else ''}", "forward-input")]
        assert np.array_equal(inp, value[(before, "forward-output")].astype(inp.dtype)), layer
    # bfloat16 values exactly: half = bf16(act#1) * 2, back = half
    act1 = torch.from_numpy(value[("act#1", "forward-output")].astype(np.float32))
    assert np.array_equal(value[("half", "forward-output")], (act1.bfloat16() * 2).float().numpy())
    assert np.array_equal(value[("back", "forward-output")], value[("half", "forward-output")])
    direct = read_capture(tmp_path / "direct")
    assert (direct.records[0].dtype, direct.records[0].source_dtype) == ("float32", "bfloat16")
    assert direct.load(direct.records[0]).tolist() == [1.5, 3.09375]


@pytest.mark.mindspore
def test_mindspore_cell_replayed_on_pytorch_inputs_and_back(linear_gelu_capture, tmp_path):
    """The port's layer on the reference's captured inputs (and the reference's on the port's) agrees to float32
    noise: the layer computes the same; a difference would be inherited from its input."""
    model, torch_capture = linear_gelu_capture
    np.savez(tmp_path / "weights.npz", **{k: v.numpy() for k, v in model.state_dict().items()})
    run_script(tmp_path, f"""
        import numpy as np, mindspore  # no `ms` in __main__: the hooks must not need it
        from mindspore import nn
        from msdebug_hooks.compare.mindspore_layers import LayerRecorder
        from msdebug_hooks.compare.naming import convert_torch_state
        from msdebug_hooks.compare.replay import layer_inputs, replay_layer

        mindspore.set_context(mode=mindspore.GRAPH_MODE)

        class LinearGelu(nn.Cell):
            def __init__(self):
                super().__init__()
                self.fc1 = nn.Dense(6, 16)
                self.act = nn.GELU(approximate=False)
                self.fc2 = nn.Dense(16, 4)

            def construct(self, x):
                return self.fc2(self.act(self.fc1(x)))

        net = LinearGelu()
        weights = dict(np.load({str(tmp_path / "weights.npz")!r}))
        converted = convert_torch_state(weights, [p.name for p in net.get_parameters()])
        parameters = {{k: mindspore.Parameter(mindspore.Tensor(v), name=k) for k, v in converted.items()}}
        mindspore.load_param_into_net(net, parameters)
        recorder = LayerRecorder(net, {str(tmp_path / "ms")!r}, record_inputs=True)
        for name in ("fc1", "act", "fc2"):
            (out,) = replay_layer(net, name, layer_inputs({str(torch_capture.directory)!r}, 1, name))
            np.save({str(tmp_path)!r} + f"/replayed_{{name}}.npy", out)
        assert mindspore.get_context("mode") == mindspore.GRAPH_MODE   # switched to PyNative for the call only
        with recorder.step(1):   # the port's own run, compiled, its inputs captured
            net(mindspore.Tensor(np.random.default_rng(3).standard_normal((5, 6)).astype(np.float32)))
    """)
    torch_out = {r.name: torch_capture.load(r) for r in torch_capture.step_records(1, ["forward-output"])}
    for name in ("fc1", "act", "fc2"):
        replayed = np.load(tmp_path / f"replayed_{name}.npy")
        assert replayed.dtype == np.float32 and replayed.shape == torch_out[name].shape
        assert np.abs(replayed - torch_out[name]).max() < 1e-6, name   # measured: <= 3e-8
    ms_capture = read_capture(tmp_path / "ms")
    ms_out = {r.name: ms_capture.load(r) for r in ms_capture.step_records(1, ["forward-output"])}
    for name in ("fc1", "act", "fc2"):   # the PyTorch module on MindSpore's captured inputs
        (replayed,) = replay_layer(model, name, layer_inputs(ms_capture, 1, name))
        assert np.abs(replayed - ms_out[name]).max() < 1e-6, name   # measured: <= 1.2e-7
