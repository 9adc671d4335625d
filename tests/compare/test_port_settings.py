"""The port check's settings, compared by what each layer is (issue 31): real MindSpore 2.10 and PyTorch 2.13 layers
and small models as a user writes them, subclasses included (a user's ``torch.nn.LayerNorm`` subclass, timm's
``LayerNorm``, mindcv's ``Dropout``). Each differing setting is one finding naming both values and the argument to
pass; a correct port reads none (the corpus's correct ports, and every pair of equal settings below). The flipped,
transposed and swapped weights of ``weight_origin`` are checked on real PyTorch tensors; one port goes through
``compare_models`` with a pooling stride left at MindSpore's default and a Conv1d kernel reversed by its converter.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

ms = pytest.importorskip("mindspore")
torch = pytest.importorskip("torch")
mn, tn = ms.nn, torch.nn

from msdebug_hooks.compare.port_conventions import check_conventions, check_pair  # noqa: E402
from msdebug_hooks.compare.weight_origin import weight_origin  # noqa: E402

pytestmark = pytest.mark.mindspore


class MyLN(tn.LayerNorm):
    """A user's LayerNorm subclass, as model code writes them (an extra flag, the parent's settings)."""

    def __init__(self, dim: int, **kwargs) -> None:
        super().__init__(dim, **kwargs)
        self.tag = "mine"


class MyMaxPool(mn.MaxPool2d):
    """A MindSpore subclass of a built-in pooling cell."""


# (id, MindSpore layer, PyTorch layer, the setting that differs, text the message must hold: both values, the fix)
DIFFERING = [
    ("conv-same-stride2", lambda: mn.Conv2d(3, 4, 3, stride=2, has_bias=True),
     lambda: tn.Conv2d(3, 4, 3, stride=2, padding=1),
     "padding", ("pad_mode='same'", "padding=1", "pass pad_mode='pad', padding=1")),
    ("conv-default-vs-zero", lambda: mn.Conv2d(3, 4, 3, has_bias=True), lambda: tn.Conv2d(3, 4, 3),
     "padding", ("pad_mode='same'", "padding=0", "pass pad_mode='valid'")),
    ("conv-reflect", lambda: mn.Conv1d(3, 4, 3, pad_mode="pad", padding=1, has_bias=True),
     lambda: tn.Conv1d(3, 4, 3, padding=1, padding_mode="reflect"),
     "padding_mode", ("padding_mode='reflect'", "nn.ReflectionPad1d", "pad_mode='valid'")),
    ("conv-dilation", lambda: mn.Conv2d(3, 4, 3, pad_mode="pad", padding=2, dilation=2, has_bias=True),
     lambda: tn.Conv2d(3, 4, 3, padding=2), "dilation", ("dilation=2", "dilation=1", "pass dilation=1")),
    ("conv-groups", lambda: mn.Conv2d(4, 4, 3, pad_mode="pad", padding=1, group=2, has_bias=True),
     lambda: tn.Conv2d(4, 4, 3, padding=1, groups=4), "groups", ("group=2", "groups=4", "pass group=4")),
    ("maxpool-stride-default", lambda: mn.MaxPool2d(2), lambda: tn.MaxPool2d(2),
     "stride", ("stride=1", "stride=2", "pass stride=2", "defaults to 1")),
    ("maxpool-ceil", lambda: mn.MaxPool2d(3, 2, pad_mode="pad", padding=1, ceil_mode=True),
     lambda: tn.MaxPool2d(3, 2, 1), "ceil_mode", ("ceil_mode=True", "ceil_mode=False")),
    ("maxpool-same", lambda: mn.MaxPool2d(3, 2, pad_mode="same"), lambda: tn.MaxPool2d(3, 2, 1),
     "padding", ("pad_mode='same'", "padding=1", "pass pad_mode='pad', padding=1")),
    ("avgpool-count", lambda: mn.AvgPool2d(3, 1, pad_mode="same"), lambda: tn.AvgPool2d(3, 1, 1),
     "count_include_pad", ("count_include_pad=False", "count_include_pad=True")),
    ("adaptive-size", lambda: mn.AdaptiveAvgPool2d((2, 2)), lambda: tn.AdaptiveAvgPool2d(1),
     "output_size", ("output_size=2", "output_size=1")),
    ("bn-momentum", lambda: mn.BatchNorm2d(4, momentum=0.1), lambda: tn.BatchNorm2d(4),
     "momentum", ("momentum=0.1 (the running", "momentum=0.1 (the new", "pass momentum=0.9")),
    ("bn-eps", lambda: mn.BatchNorm2d(4, eps=1e-3), lambda: tn.BatchNorm2d(4), "eps", ("eps=0.001", "eps=1e-05")),
    ("bn-batch-stats", lambda: mn.BatchNorm1d(4, use_batch_statistics=True), lambda: tn.BatchNorm1d(4),
     "track_running_stats", ("use_batch_statistics=True", "track_running_stats=True",
                             "pass use_batch_statistics=None")),
    ("bn-affine", lambda: mn.BatchNorm2d(4, affine=False), lambda: tn.BatchNorm2d(4), "affine",
     ("affine=False", "affine=True")),
    ("ln-eps-default", lambda: mn.LayerNorm((4,)), lambda: tn.LayerNorm(4),
     "eps", ("epsilon=1e-07", "eps=1e-05", "pass epsilon=1e-05")),
    ("ln-axes", lambda: mn.LayerNorm((3, 4), epsilon=1e-5), lambda: tn.LayerNorm((3, 4)),
     "normalized_axes", ("begin_norm_axis=-1", "2 axes")),
    ("ln-affine", lambda: mn.LayerNorm((4,), epsilon=1e-5), lambda: tn.LayerNorm(4, elementwise_affine=False),
     "elementwise_affine", ("elementwise_affine=False", "requires_grad")),
    ("gn-groups", lambda: mn.GroupNorm(2, 4), lambda: tn.GroupNorm(4, 4), "num_groups",
     ("num_groups=2", "num_groups=4")),
    ("gelu-form", lambda: mn.GELU(), lambda: tn.GELU(), "approximate",
     ("'tanh'", "'none'", "pass approximate=False")),
    ("leaky-default", lambda: mn.LeakyReLU(), lambda: tn.LeakyReLU(), "negative_slope",
     ("alpha=0.2", "negative_slope=0.01", "pass alpha=0.01")),
    ("elu-alpha", lambda: mn.ELU(0.5), lambda: tn.ELU(), "alpha", ("alpha=0.5", "alpha=1")),
    ("softmax-axis", lambda: mn.Softmax(), lambda: tn.Softmax(dim=1), "dim", ("axis=-1", "dim=1", "pass axis=1")),
    ("dropout-p", lambda: mn.Dropout(p=0.5), lambda: tn.Dropout(0.1), "p", ("p=0.5", "p=0.1")),
    ("dropout2d-keep-prob", lambda: mn.Dropout2d(0.2), lambda: tn.Dropout2d(0.3), "p", ("p=0.2", "p=0.3")),
    ("upsample-corners", lambda: mn.Upsample(scale_factor=2.0, mode="bilinear"),
     lambda: tn.Upsample(scale_factor=2, mode="bilinear", align_corners=True), "align_corners",
     ("align_corners=None", "align_corners=True")),
    ("flatten-start", lambda: mn.Flatten(), lambda: tn.Flatten(0), "start_dim", ("start_dim=1", "start_dim=0")),
    ("embedding-padding", lambda: mn.Embedding(5, 3), lambda: tn.Embedding(5, 3, padding_idx=0), "padding_idx",
     ("padding_idx=None", "padding_idx=0")),
    ("subclass-ln", lambda: mn.LayerNorm((4,)), lambda: MyLN(4), "eps", ("eps=1e-05", "MyLN (a torch.nn.LayerNorm)")),
    ("subclass-ms-pool", lambda: MyMaxPool(2), lambda: tn.MaxPool2d(2), "stride",
     ("stride=1", "MyMaxPool (a mindspore.nn.MaxPool2d)")),
    ("type", lambda: mn.MaxPool2d(2, 2), lambda: tn.AvgPool2d(2), "type", ("MaxPool2d", "AvgPool2d")),
    ("conv-bias-default", lambda: mn.Conv2d(3, 4, 3, pad_mode="pad", padding=1),
     lambda: tn.Conv2d(3, 4, 3, padding=1), "bias", ("has_bias=False", "bias=True", "pass has_bias=True")),
    ("dense-bias", lambda: mn.Dense(3, 4, has_bias=False), lambda: tn.Linear(3, 4), "bias",
     ("has_bias=False", "bias=True", "pass has_bias=True")),
    ("mint-linear-bias", lambda: ms.mint.nn.Linear(3, 4, bias=False), lambda: tn.Linear(3, 4), "bias",
     ("has_bias=False", "bias=True")),
    ("lstm-batch-first", lambda: mn.LSTM(4, 6), lambda: tn.LSTM(4, 6, batch_first=True), "batch_first",
     ("batch_first=False", "batch_first=True", "pass batch_first=True")),
    ("gru-dropout", lambda: mn.GRU(4, 6, num_layers=2), lambda: tn.GRU(4, 6, num_layers=2, dropout=0.2), "dropout",
     ("dropout=0", "dropout=0.2")),
]

# the same settings on both sides, spelled each framework's way: nothing to report
EQUAL = [
    ("conv-same-stride1", lambda: mn.Conv2d(3, 4, 3, has_bias=True), lambda: tn.Conv2d(3, 4, 3, padding=1)),
    ("conv-same-even-kernel", lambda: mn.Conv2d(3, 4, 4, has_bias=True), lambda: tn.Conv2d(3, 4, 4, padding="same")),
    ("conv-1x1-stride2", lambda: mn.Conv2d(3, 4, 1, stride=2, has_bias=True), lambda: tn.Conv2d(3, 4, 1, stride=2)),
    ("conv1d-pad", lambda: mn.Conv1d(3, 4, 3, pad_mode="pad", padding=1, has_bias=True),
     lambda: tn.Conv1d(3, 4, 3, padding=1)),
    ("conv1d-reflect-own-layer", lambda: mn.Conv1d(3, 4, 3, pad_mode="valid", has_bias=True),
     lambda: tn.Conv1d(3, 4, 3, padding=1, padding_mode="reflect")),
    ("conv3d", lambda: mn.Conv3d(3, 4, 3, pad_mode="pad", padding=1, has_bias=True),
     lambda: tn.Conv3d(3, 4, 3, padding=1)),
    ("deconv", lambda: mn.Conv2dTranspose(3, 4, 4, stride=2, pad_mode="pad", padding=1, has_bias=True),
     lambda: tn.ConvTranspose2d(3, 4, 4, stride=2, padding=1)),
    ("maxpool", lambda: mn.MaxPool2d(3, 2, pad_mode="pad", padding=1), lambda: tn.MaxPool2d(3, 2, 1)),
    ("maxpool-stride-given", lambda: mn.MaxPool2d(2, 2), lambda: tn.MaxPool2d(2)),
    ("maxpool1d", lambda: mn.MaxPool1d(3, 2, pad_mode="pad", padding=1), lambda: tn.MaxPool1d(3, 2, 1)),
    ("maxpool3d", lambda: mn.MaxPool3d(3, 2, pad_mode="pad", padding=1), lambda: tn.MaxPool3d(3, 2, 1)),
    ("avgpool", lambda: mn.AvgPool2d(2, 2), lambda: tn.AvgPool2d(2)),
    ("avgpool-same-excl", lambda: mn.AvgPool2d(3, 1, pad_mode="same"),
     lambda: tn.AvgPool2d(3, 1, 1, count_include_pad=False)),
    ("avgpool3d", lambda: mn.AvgPool3d(3, 2, pad_mode="pad", padding=1), lambda: tn.AvgPool3d(3, 2, 1)),
    ("adaptive", lambda: mn.AdaptiveAvgPool2d((1, 1)), lambda: tn.AdaptiveAvgPool2d(1)),
    ("dense", lambda: mn.Dense(3, 4), lambda: tn.Linear(3, 4)),
    ("dense-no-bias", lambda: mn.Dense(3, 4, has_bias=False), lambda: tn.Linear(3, 4, bias=False)),
    ("conv-no-bias", lambda: mn.Conv2d(3, 4, 3, pad_mode="pad", padding=1),
     lambda: tn.Conv2d(3, 4, 3, padding=1, bias=False)),
    ("bn", lambda: mn.BatchNorm2d(4), lambda: tn.BatchNorm2d(4)),
    ("bn3d", lambda: mn.BatchNorm3d(4), lambda: tn.BatchNorm3d(4)),
    ("bn-no-running", lambda: mn.BatchNorm1d(4, use_batch_statistics=True),
     lambda: tn.BatchNorm1d(4, track_running_stats=False)),
    ("ln", lambda: mn.LayerNorm((4,), epsilon=1e-5), lambda: tn.LayerNorm(4)),
    ("gn", lambda: mn.GroupNorm(2, 4), lambda: tn.GroupNorm(2, 4)),
    ("gelu", lambda: mn.GELU(approximate=False), lambda: tn.GELU()),
    ("gelu-tanh", lambda: mn.GELU(), lambda: tn.GELU(approximate="tanh")),
    ("leaky", lambda: mn.LeakyReLU(0.01), lambda: tn.LeakyReLU()),
    ("softmax", lambda: mn.Softmax(), lambda: tn.Softmax(dim=-1)),
    ("dropout", lambda: mn.Dropout(p=0.1), lambda: tn.Dropout(0.1)),
    ("upsample", lambda: mn.Upsample(scale_factor=2.0, mode="bilinear", align_corners=False),
     lambda: tn.Upsample(scale_factor=2, mode="bilinear")),
    ("hardswish", lambda: mn.HSwish(), lambda: tn.Hardswish()),
    ("relu6", lambda: mn.ReLU6(), lambda: tn.ReLU6()),
    ("silu", lambda: mn.SiLU(), lambda: tn.SiLU()),
    ("subclass-ln", lambda: mn.LayerNorm((4,), epsilon=1e-5), lambda: MyLN(4)),
    ("lstm", lambda: mn.LSTM(4, 6, num_layers=2, batch_first=True, bidirectional=True),
     lambda: tn.LSTM(4, 6, num_layers=2, batch_first=True, bidirectional=True)),
]


@pytest.mark.parametrize("ms_layer, torch_layer, setting, texts", [case[1:] for case in DIFFERING],
                         ids=[case[0] for case in DIFFERING])
def test_a_differing_setting_is_one_finding_with_both_values_and_the_argument(ms_layer, torch_layer, setting, texts):
    findings = check_pair("net.layer", "net.layer", ms_layer(), torch_layer())
    assert [f.setting for f in findings] == [setting], [f.message for f in findings]
    message = findings[0].message
    assert message.startswith("net.layer: ")
    for text in texts:
        assert text in message, (text, message)


@pytest.mark.parametrize("ms_layer, torch_layer", [case[1:] for case in EQUAL], ids=[case[0] for case in EQUAL])
def test_equal_settings_read_none(ms_layer, torch_layer):
    assert check_pair("layer", "layer", ms_layer(), torch_layer()) == []


def test_mint_layers_keep_pytorch_arguments_and_are_read_as_pytorch():
    mint = ms.mint
    equal = [(mint.nn.Conv2d(3, 4, 3, padding=1), tn.Conv2d(3, 4, 3, padding=1)),
             (mint.nn.BatchNorm2d(4), tn.BatchNorm2d(4)), (mint.nn.LayerNorm(4), tn.LayerNorm(4)),
             (mint.nn.GELU(), tn.GELU()), (mint.nn.MaxPool2d(2), tn.MaxPool2d(2)),
             (mint.nn.AvgPool2d(2), tn.AvgPool2d(2)), (mint.nn.GroupNorm(2, 4), tn.GroupNorm(2, 4))]
    for cell, module in equal:
        assert check_pair("x", "x", cell, module) == [], type(cell).__name__
    differing = [(mint.nn.Conv2d(3, 4, 3), tn.Conv2d(3, 4, 3, padding=1), "padding", "pass padding=1"),
                 (mint.nn.BatchNorm2d(4, momentum=0.9), tn.BatchNorm2d(4), "momentum", "pass momentum=0.1"),
                 (mint.nn.LayerNorm(4, eps=1e-6), tn.LayerNorm(4), "eps", "pass eps=1e-05"),
                 (mint.nn.MaxPool2d(2, 1), tn.MaxPool2d(2), "stride", "pass stride=2"),
                 (mint.nn.MaxPool2d(2), tn.AvgPool2d(2), "type", "AvgPool2d")]
    for cell, module, setting, text in differing:
        found = check_pair("x", "x", cell, module)
        assert [f.setting for f in found] == [setting] and text in found[0].message, [f.message for f in found]


def test_zoo_subclasses_are_compared_as_the_layers_they_extend():
    from zoo.torch_zoos import import_torch_zoos

    timm, _ = import_torch_zoos()
    from mindcv.models.layers.compatibility import Dropout as MindcvDropout
    from timm.layers import LayerNorm as TimmLayerNorm

    norm = TimmLayerNorm(8)                                    # eps=1e-6, timm's default
    assert check_pair("norm", "norm", mn.LayerNorm((8,), epsilon=1e-6), norm) == []
    found = check_pair("norm", "norm", mn.LayerNorm((8,)), norm)
    assert [f.setting for f in found] == ["eps"] and "eps=1e-06" in found[0].message
    assert "LayerNorm (a torch.nn.LayerNorm, with its own forward)" in found[0].message
    assert check_pair("drop", "drop", MindcvDropout(p=0.3), tn.Dropout(0.3)) == []
    found = check_pair("drop", "drop", MindcvDropout(p=0.3), tn.Dropout(0.1))
    assert [f.setting for f in found] == ["p"] and "p=0.3" in found[0].message and "p=0.1" in found[0].message


def test_mindcv_resnet18_against_timm_resnet18_names_the_stem_pooling():
    """Two real zoo models: mindcv's ResNet-18 pools its stem with pad_mode='same' (on a 224 input: no row before,
    one after), timm's with padding=1 (one on each side); every other paired layer's settings agree."""
    from mindcv.models import create_model
    from zoo.torch_zoos import import_torch_zoos

    timm, _ = import_torch_zoos()
    net = create_model("resnet18", pretrained=False, num_classes=10)
    model = timm.create_model("resnet18", pretrained=False, num_classes=10)
    renamed = {"max_pool": "maxpool", "down_sample": "downsample"}   # what a mapping file would say

    def torch_name(name: str) -> str:
        return ".".join(renamed.get(part, part) for part in name.split("."))

    found = check_conventions(net, model, torch_name)
    assert [(f.layer, f.setting) for f in found] == [("max_pool", "padding")], [f.message for f in found]
    assert "pad_mode='same' in MindSpore, padding=1 in PyTorch: pass pad_mode='pad', padding=1" in found[0].message


# --- small models, as a user writes a port -----------------------------------------------------------------------
class TorchNet(tn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = tn.Conv2d(3, 8, 3, padding=1)
        self.bn = tn.BatchNorm2d(8)
        self.pool = tn.MaxPool2d(2)
        self.norm = MyLN(8)
        self.act = tn.GELU()
        self.drop = tn.Dropout(0.1)
        self.head = tn.Linear(8, 4)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn(self.conv(x)))).mean(dim=(2, 3))
        return self.head(self.drop(self.act(self.norm(x))))


class MindSporeNet(mn.Cell):
    def __init__(self, pool_stride=2, momentum=0.9, epsilon=1e-5, approximate=False) -> None:
        super().__init__()
        self.conv = mn.Conv2d(3, 8, 3, pad_mode="pad", padding=1, has_bias=True)
        self.bn = mn.BatchNorm2d(8, momentum=momentum)
        self.pool = mn.MaxPool2d(2, stride=pool_stride)
        self.norm = mn.LayerNorm((8,), epsilon=epsilon)
        self.act = mn.GELU(approximate=approximate)
        self.drop = mn.Dropout(p=0.1)
        self.head = mn.Dense(8, 4)

    def construct(self, x):
        x = self.pool(ms.ops.relu(self.bn(self.conv(x)))).mean(axis=(2, 3))
        return self.head(self.drop(self.act(self.norm(x))))


def _same_name(name: str) -> str:
    return name


def test_a_correct_port_reads_none_and_each_plant_one_setting():
    assert check_conventions(MindSporeNet(), TorchNet(), _same_name) == []
    planted = {"pool_stride": ("pool", "stride"), "momentum": ("bn", "momentum"), "epsilon": ("norm", "eps"),
               "approximate": ("act", "approximate")}
    defaults = {"pool_stride": 1, "momentum": 0.1, "epsilon": 1e-7, "approximate": True}
    for argument, expected in planted.items():
        found = check_conventions(MindSporeNet(**{argument: defaults[argument]}), TorchNet(), _same_name)
        assert [(f.layer, f.setting) for f in found] == [expected], [f.message for f in found]


def test_the_corpus_correct_ports_read_none_and_planted_settings_are_named():
    import mindspore

    from corpus.architectures import architecture
    from corpus.cases import CASES_BY_NAME
    from corpus.plants import PortPlants
    from msdebug_hooks.compare.port_weights import pair_parameters, torch_state

    mindspore.set_context(mode=mindspore.PYNATIVE_MODE, device_target="CPU")
    expected = {"cnn_port": [], "transformer_port": [], "transformer_renamed": [], "audio_port": [],
                "cnn_padding_stride2": [("layer2.0.conv1", "padding")],
                "audio_conv_stride2_same": [("conv2", "padding")],
                "transformer_wrong_activation": [("blocks.0.ffn.act", "type")]}
    for name, settings in expected.items():
        case = CASES_BY_NAME[name]
        arch = architecture(case.a.arch)
        model, net = arch.build_torch(seed=0), arch.build_mindspore(PortPlants(case.a.plant_dict))
        copy = pair_parameters(torch_state(model), net, None)
        found = check_conventions(net, model, copy.torch_name)
        assert [(f.layer, f.setting) for f in found] == settings, (name, [f.message for f in found])


# --- where a differing weight came from --------------------------------------------------------------------------
def _state(*modules) -> dict:
    return {f"m{i}.{key}": value.detach().numpy().astype(np.float64) for i, module in enumerate(modules)
            for key, value in module.state_dict().items()}


def test_weight_origin_names_a_flipped_kernel_along_any_kernel_axis():
    torch.manual_seed(0)
    state = _state(tn.Conv1d(3, 4, 5), tn.Conv2d(3, 4, (3, 5)), tn.Conv2d(4, 4, 3))
    conv1d = state["m0.weight"]
    origin = weight_origin(conv1d[..., ::-1][:, :, None, :], state, "m0.weight")  # MindSpore's [o, i, 1, k]
    assert origin is not None and "flipped along axis 2 (the kernel axis)" in origin
    conv2d = state["m1.weight"]
    assert "flipped along axis 3" in weight_origin(conv2d[..., ::-1], state, "m1.weight")
    assert "flipped along axes 2, 3" in weight_origin(conv2d[:, :, ::-1, ::-1], state, "m1.weight")
    square = state["m2.weight"]
    assert "transposed" in weight_origin(np.swapaxes(square, 0, 1), state, "m2.weight")


def test_weight_origin_keeps_transposed_and_swapped_and_traces_no_noise():
    torch.manual_seed(0)
    state = _state(tn.Linear(6, 6), tn.Linear(6, 6), tn.Conv1d(3, 4, 5))
    assert "transposed" in weight_origin(state["m0.weight"].T, state, "m0.weight")
    assert "m1.weight" in weight_origin(state["m1.weight"], state, "m0.weight")
    noisy = state["m2.weight"] * (1 + 1e-3 * np.random.default_rng(0).standard_normal(state["m2.weight"].shape))
    assert weight_origin(noisy, state, "m2.weight") is None
    assert weight_origin(np.zeros(6), state, "m0.bias") is None   # a constant proves nothing


# --- through compare_models ---------------------------------------------------------------------------------------
class TorchConv1d(tn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = tn.Conv1d(2, 4, 3, padding=1)
        self.act = tn.GELU()
        self.pool = tn.MaxPool1d(2)
        self.head = tn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.pool(self.act(self.conv(x))).flatten(1))


class MindSporeConv1d(mn.Cell):
    def __init__(self, approximate: bool = False) -> None:
        super().__init__()
        self.conv = mn.Conv1d(2, 4, 3, pad_mode="pad", padding=1, has_bias=True)
        self.act = mn.GELU(approximate=approximate)
        self.pool = mn.MaxPool1d(2, stride=2)
        self.head = mn.Dense(16, 3)

    def construct(self, x):
        return self.head(self.pool(self.act(self.conv(x))).flatten(start_dim=1))


def test_compare_models_prints_setting_lines_and_names_a_flipped_kernel():
    from msdebug_hooks.compare.port_check import compare_models

    torch.manual_seed(0)
    model = TorchConv1d()
    x = np.random.default_rng(0).standard_normal((2, 2, 8)).astype(np.float32)
    y = np.array([0, 2], dtype=np.int32)
    net = MindSporeConv1d()
    clean = compare_models(model, net, x, y, steps=1, replay=False)
    assert "settings (layout table conventions): none differ" in clean.format() and clean.ok, clean.format()

    tanh = compare_models(model, MindSporeConv1d(approximate=True), x, y, steps=1, replay=False)
    lines = [line for line in tanh.format().splitlines() if line.strip().startswith("SETTING:")]
    assert len(lines) == 1 and "act: GELU approximate" in lines[0] and "pass approximate=False" in lines[0], lines

    kernel = net.conv.weight.asnumpy()      # the clean check left PyTorch's weights in the cell
    net.conv.weight.set_data(ms.Tensor(np.ascontiguousarray(kernel[..., ::-1])))  # a converter that reversed it
    flipped = compare_models(model, net, x, y, steps=1, replay=False, copy_weights=False)
    assert flipped.marked == "conv" and "flipped along axis 2" in (flipped.origin or ""), flipped.format()
