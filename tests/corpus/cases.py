"""Every case of the corpus: the two sides, what is planted, and what each tool must answer at its defaults.

A is the run under test, B the reference (as the tools take them). What a case expects:

* ``layer``: the name (in A's words) of the first forward record compare-layers must name -- the first recorded layer
  whose own computation contains the bug -- or ``None`` for a clean comparison (``ok``: no divergence, every record
  matched);
* ``kind``: the kind of that finding, ``"layer"`` (a layer computes differently) or ``"precision"`` (the error sits at
  a reduced-precision level from the first layer on), ``None`` when clean;
* ``loss_step``: the step compare-loss must name as the first that parts (1 for every forward bug: step 1 runs the
  same weights on the same batch), ``None`` when the series agree;
* ``weights``: the reference's parameter names compare-weights must report (the initial weights of both sides),
  ``()`` when every weight matches;
* ``replay``: for a named layer, whether its difference is its ``"own"`` (the layer computes differently: its
  inputs agree) or ``"inherited"`` (its input already differed: the bug runs in code between two recorded layers),
  as ``compare_layers(A, B, replay=True)`` must say from the recorded inputs and, where A is a PyNative port and B a
  PyTorch side, as the real replay of the port's layer on PyTorch's inputs must say (``replayed`` in the case's
  JSON). It follows from where the bug is planted, like ``layer``.

Every side trains ``STEPS`` steps of plain SGD (lr ``LR``) on the architecture's deterministic batches, from the
same initial weights (PyTorch's, drawn once per architecture, converted for MindSpore through
``convert_torch_state``). ``observe="train"`` captures the training pass of step 1 (forward outputs and parameter
gradients) and writes the training losses; ``observe="eval"`` captures the eval-mode pass on a fixed batch after
step 1 (forward outputs only) and writes the eval loss after each step (how BatchNorm's running statistics show).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from corpus.audio import LSTM_TENSORS as AUDIO_LSTM_TENSORS

STEPS = 3
BATCH = 8
LR = 0.1
CAPTURE_STEP = 1


@dataclass(frozen=True)
class Side:
    """One run: which framework, architecture and settings, and what its port plants (``plants``, JSON)."""

    framework: str                 # "pytorch" | "mindspore"
    arch: str
    dtype: str = "float32"         # "float32" | "float64" | "bfloat16" (PyTorch autocast on the CPU)
    threads: Optional[int] = None  # PyTorch's intra-op threads (None: its default)
    mode: str = "pynative"         # MindSpore: "pynative" (value_and_grad loop) | "graph" (Model.train)
    observe: str = "train"         # "train" | "eval" (see the module docstring)
    plants: str = "{}"             # JSON of the port's plants (see corpus.plants)

    @property
    def plant_dict(self) -> dict:
        return json.loads(self.plants)

    @property
    def key(self) -> str:
        """A directory name, the same for equal sides (each distinct side runs once)."""
        parts = [self.framework, self.arch, self.dtype, self.mode if self.framework == "mindspore" else "",
                 f"t{self.threads}" if self.threads else "", self.observe]
        if self.plant_dict:
            import hashlib
            parts.append(hashlib.sha1(self.plants.encode()).hexdigest()[:8])
        return "-".join(part for part in parts if part)

    def to_dict(self) -> dict:
        data = dict(self.__dict__)
        data["plants"] = self.plant_dict
        return data


def torch_side(arch: str, **settings: Any) -> Side:
    return Side("pytorch", arch, **settings)


def port(arch: str, plants: Optional[Mapping[str, Any]] = None, **settings: Any) -> Side:
    return Side("mindspore", arch, plants=json.dumps(plants or {}, sort_keys=True), **settings)


@dataclass(frozen=True)
class Expect:
    layer: Optional[str] = None
    kind: Optional[str] = None
    loss_step: Optional[int] = None
    weights: tuple = ()
    replay: Optional[str] = None   # "own" | "inherited" for the named layer; None when no layer is named

    def to_dict(self) -> dict:
        return {"layer": self.layer, "kind": self.kind, "loss_step": self.loss_step,
                "weights": sorted(self.weights), "replay": self.replay}


CLEAN = Expect()


@dataclass(frozen=True)
class Case:
    name: str
    a: Side
    b: Side
    planted: str
    expect: Expect = field(default=CLEAN)

    @property
    def replays_port(self) -> bool:
        """Whether the corpus replays A's layer for real: A is a PyNative port, B a PyTorch side."""
        return self.a.framework == "mindspore" and self.a.mode == "pynative" and self.b.framework == "pytorch"

    def to_dict(self) -> dict:
        expect = self.expect.to_dict()
        expect["replayed"] = self.expect.replay if self.replays_port else None
        return {"name": self.name, "a": self.a.to_dict(), "b": self.b.to_dict(), "planted": self.planted,
                "expect": expect}


def _forward_bug(layer: str, weights: tuple = (), replay: str = "own") -> Expect:
    return Expect(layer=layer, kind="layer", loss_step=1, weights=weights, replay=replay)


CNN, TF, AU = "cnn", "transformer", "audio"
#: a hand-written LSTM converter that reorders PyTorch's gates i, f, g, o into Ascend's i, g, f, o on every tensor
ASCEND_GATE_ORDER = {"names": list(AUDIO_LSTM_TENSORS), "order": [0, 2, 1, 3]}

CASES = (
    # ---- noise only: must read clean ---------------------------------------------------------------------------
    Case("cnn_port", port(CNN), torch_side(CNN), "nothing: a correct MindSpore port against its PyTorch reference"),
    Case("transformer_port", port(TF), torch_side(TF), "nothing: a correct MindSpore port against its reference"),
    Case("cnn_float64", torch_side(CNN), torch_side(CNN, dtype="float64"),
         "nothing: PyTorch float32 against float64 of the same weights (float32 rounding only)"),
    Case("transformer_float64", torch_side(TF), torch_side(TF, dtype="float64"),
         "nothing: PyTorch float32 against float64 of the same weights"),
    Case("cnn_threads", torch_side(CNN, threads=1), torch_side(CNN, threads=2),
         "nothing: PyTorch with one intra-op thread against two"),
    Case("cnn_graph_mode", port(CNN, mode="graph"), port(CNN),
         "nothing: MindSpore GRAPH_MODE (Model.train: no gradients captured) against PyNative"),
    Case("transformer_renamed", port(TF, {"renamed": True}), torch_side(TF),
         "nothing: a correct port whose attribute names differ (layers.N.self_attn.wq vs blocks.N.attn.q_proj)"),
    # ---- bugs planted in the port --------------------------------------------------------------------------------
    Case("cnn_batchnorm_eps", port(CNN, {"eps": {"layer1.1.bn2": 1e-3}}), torch_side(CNN),
         "BatchNorm eps 1e-3 instead of 1e-5 in layer1.1.bn2", _forward_bug("layer1.1.bn2")),
    Case("cnn_batchnorm_momentum", port(CNN, {"bn_momentum": 0.1}, observe="eval"), torch_side(CNN, observe="eval"),
         "BatchNorm momentum copied as 0.1 (MindSpore's momentum is 1 - PyTorch's): running statistics, seen in the "
         "eval pass after step 1", _forward_bug("bn1")),
    Case("cnn_padding_same", port(CNN, {"pad_mode": {"conv1": "same"}}), torch_side(CNN),
         "stem conv left at MindSpore's default pad_mode='same' where PyTorch has padding=0 (14x14 becomes 16x16)",
         _forward_bug("conv1")),
    Case("cnn_padding_stride2", port(CNN, {"pad_mode": {"layer2.0.conv1": "same"}}), torch_side(CNN),
         "stride-2 3x3 conv ported as pad_mode='same' (pads bottom/right only) where PyTorch pads 1 on every side: "
         "same shape, shifted window", _forward_bug("layer2.0.conv1")),
    Case("cnn_bfloat16", torch_side(CNN, dtype="bfloat16"), torch_side(CNN),
         "reduced precision: PyTorch bfloat16 autocast against float32",
         Expect(layer="conv1", kind="precision", loss_step=1, replay="own")),
    Case("transformer_layernorm_eps", port(TF, {"eps": {"blocks.1.norm1": 1e-3}}), torch_side(TF),
         "LayerNorm epsilon 1e-3 instead of 1e-5 in blocks.1.norm1", _forward_bug("blocks.1.norm1")),
    Case("transformer_gelu_tanh", port(TF, {"activation": {"blocks.1.ffn.act": "gelu_tanh"}}), torch_side(TF),
         "tanh-approximated GELU (MindSpore's default) instead of erf GELU in blocks.1.ffn.act",
         # the layer errs by 2e-4 but the step-1 loss moves by 8e-7, inside float32 forward noise (up to 5e-7 on
         # correct ports): one number cannot resolve it; compare-layers must
         Expect(layer="blocks.1.ffn.act", kind="layer", loss_step=None, replay="own")),
    Case("transformer_wrong_activation", port(TF, {"activation": {"blocks.0.ffn.act": "relu"}}), torch_side(TF),
         "ReLU instead of GELU in blocks.0.ffn.act", _forward_bug("blocks.0.ffn.act")),
    Case("transformer_attention_scale", port(TF, {"attention_scale": "1/d"}), torch_side(TF),
         "attention scores scaled by 1/d instead of 1/sqrt(d), in code before the softmax cell (every block)",
         _forward_bug("blocks.0.attn.softmax", replay="inherited")),
    Case("transformer_transposed_weight", port(TF, {"transpose": ["blocks.1.attn.o_proj.weight"]}), torch_side(TF),
         "square weight blocks.1.attn.o_proj.weight loaded transposed",
         _forward_bug("blocks.1.attn.o_proj", ("blocks.1.attn.o_proj.weight",))),
    Case("transformer_swapped_qk", port(TF, {"swap": [["blocks.0.attn.q_proj.weight",
                                                       "blocks.0.attn.k_proj.weight"]]}), torch_side(TF),
         "q and k projection weights of blocks.0 exchanged",
         _forward_bug("blocks.0.attn.q_proj", ("blocks.0.attn.k_proj.weight", "blocks.0.attn.q_proj.weight"))),
    Case("transformer_dropout_active", port(TF, {"dropout": 0.1}), torch_side(TF),
         "dropout left active (p=0.1) in the port; the reference runs with p=0", _forward_bug("blocks.0.attn.dropout")),
    Case("transformer_bfloat16", torch_side(TF, dtype="bfloat16"), torch_side(TF),
         "reduced precision: PyTorch bfloat16 autocast against float32 (embeddings and LayerNorm stay float32)",
         Expect(layer="blocks.0.attn.q_proj", kind="precision", loss_step=1, replay="own")),
    # ---- the audio/sequence net: Conv1d + BatchNorm1d front end, bidirectional LSTM (T = batch size) ----------
    Case("audio_port", port(AU), torch_side(AU),
         "nothing: a correct port (Conv1d, BatchNorm1d, bidirectional LSTM with T = B) against its reference"),
    Case("audio_float64", torch_side(AU), torch_side(AU, dtype="float64"),
         "nothing: PyTorch float32 against float64 of the same weights"),
    Case("audio_lstm_gate_order", port(AU, {"gates": ASCEND_GATE_ORDER}), torch_side(AU),
         "LSTM converted by hand with the gates reordered i, f, g, o -> i, g, f, o (Ascend's kernel order) in all "
         "8 LSTM tensors", _forward_bug("lstm.0", tuple(AUDIO_LSTM_TENSORS))),
    Case("audio_conv_stride2_same", port(AU, {"pad_mode": {"conv2": "same"}}), torch_side(AU),
         "stride-2 Conv1d ported as pad_mode='same' (pads right only) where PyTorch pads 1 on both ends: same "
         "length, shifted window", _forward_bug("conv2")),
    Case("audio_batchnorm1d_momentum", port(AU, {"bn_momentum": 0.1}, observe="eval"),
         torch_side(AU, observe="eval"),
         "BatchNorm1d momentum copied as 0.1 (MindSpore's is 1 - PyTorch's), seen in the eval pass after step 1",
         _forward_bug("bn1")),
    Case("audio_wrong_activation", port(AU, {"activation": {"relu1": "leaky_relu"}}), torch_side(AU),
         "LeakyReLU(0.01) instead of ReLU after the first BatchNorm1d", _forward_bug("relu1")),
)

CASES_BY_NAME = {case.name: case for case in CASES}
