"""A transformer encoder classifier in PyTorch (the reference) and its MindSpore port, small enough for a CPU.

Token and position embeddings, two pre-norm blocks, a final LayerNorm, mean pooling over the tokens and a classifier
head. Attention is written from Linear/Dense projections ``q_proj k_proj v_proj o_proj`` with an ``nn.Softmax`` cell
for the attention weights and a dropout cell after it; the feed-forward part is ``ffn.fc1 ffn.act ffn.fc2`` with an
erf GELU. Dropout cells (``attn.dropout``, ``drop1``, ``drop2``) have ``p=0`` on the reference, so runs are
deterministic. Layer names per block (execution order): ``norm1 attn.q_proj attn.k_proj attn.v_proj attn.softmax
attn.dropout attn.o_proj drop1 norm2 ffn.fc1 ffn.act ffn.fc2 drop2`` under ``blocks.0``, ``blocks.1``; before them
``embed pos``, after them ``norm head``.

The correct port: ``nn.LayerNorm((d,), epsilon=1e-5)`` (MindSpore's default is 1e-7), ``nn.GELU(approximate=False)``
(MindSpore's default is the tanh approximation), scores scaled by ``1/sqrt(head_dim)``, ``nn.Dropout(p=0.0)``.
Port options read (see ``plants``): ``eps`` and ``activation`` per layer, ``attention_scale`` (``"1/d"``),
``dropout`` (p of every dropout cell), ``renamed`` (the attribute names of :data:`RENAMES`, e.g.
``layers.0.self_attn.wq`` for ``blocks.0.attn.q_proj``).
"""
from __future__ import annotations

import math

import numpy as np

from corpus.batches import mindspore_batch  # noqa: F401 (the interface)
from corpus.plants import PortPlants

NAME = "transformer"
VOCAB, SEQ, D_MODEL, HEADS, D_FF, BLOCKS, CLASSES = 50, 12, 32, 4, 64, 2, 10
#: (reference attribute, port attribute) of the ``renamed`` port: LLaMA-style names
RENAMES = (("blocks", "layers"), ("attn", "self_attn"), ("q_proj", "wq"), ("k_proj", "wk"), ("v_proj", "wv"),
           ("o_proj", "wo"))


def make_batches(num_steps: int, batch_size: int, seed: int = 0) -> list:
    """``[(tokens int32 [B, 12], labels int32 [B])]``, the same on every side."""
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, VOCAB, size=(batch_size, SEQ)).astype(np.int32),
             rng.integers(0, CLASSES, size=(batch_size,)).astype(np.int32)) for _ in range(num_steps)]


def eval_batch(batch_size: int) -> tuple:
    return make_batches(1, batch_size, seed=1234)[0]


def torch_batch(x: np.ndarray, y: np.ndarray, dtype):
    import torch
    return torch.from_numpy(x).long(), torch.from_numpy(y).long()


def build_torch(seed: int = 0):
    """The reference model, its weights drawn with ``torch.manual_seed(seed)``."""
    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q_proj, self.k_proj = nn.Linear(D_MODEL, D_MODEL), nn.Linear(D_MODEL, D_MODEL)
            self.v_proj, self.o_proj = nn.Linear(D_MODEL, D_MODEL), nn.Linear(D_MODEL, D_MODEL)
            self.softmax, self.dropout = nn.Softmax(dim=-1), nn.Dropout(0.0)

        def forward(self, x):
            b, t, d = x.shape
            heads = [proj(x).view(b, t, HEADS, d // HEADS).transpose(1, 2)
                     for proj in (self.q_proj, self.k_proj, self.v_proj)]
            q, k, v = heads
            weights = self.dropout(self.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // HEADS)))
            return self.o_proj((weights @ v).transpose(1, 2).reshape(b, t, d))

    class FeedForward(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.act, self.fc2 = nn.Linear(D_MODEL, D_FF), nn.GELU(), nn.Linear(D_FF, D_MODEL)

        def forward(self, x):
            return self.fc2(self.act(self.fc1(x)))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.attn, self.drop1 = nn.LayerNorm(D_MODEL), Attention(), nn.Dropout(0.0)
            self.norm2, self.ffn, self.drop2 = nn.LayerNorm(D_MODEL), FeedForward(), nn.Dropout(0.0)

        def forward(self, x):
            x = x + self.drop1(self.attn(self.norm1(x)))
            return x + self.drop2(self.ffn(self.norm2(x)))

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.pos = nn.Embedding(VOCAB, D_MODEL), nn.Embedding(SEQ, D_MODEL)
            self.blocks = nn.ModuleList([Block() for _ in range(BLOCKS)])
            self.norm, self.head = nn.LayerNorm(D_MODEL), nn.Linear(D_MODEL, CLASSES)

        def forward(self, tokens):
            x = self.embed(tokens) + self.pos(torch.arange(tokens.shape[1]))
            for block in self.blocks:
                x = block(x)
            return self.head(self.norm(x).mean(dim=1))

    torch.manual_seed(seed)
    return Encoder()


def build_mindspore(plants: PortPlants):
    """The port, with the options of ``plants`` (defaults: the correct port)."""
    import mindspore as ms
    from mindspore import nn, ops

    names = dict(RENAMES) if plants.option("renamed", False) else {}
    n = lambda attribute: names.get(attribute, attribute)  # noqa: E731 - the port's name of an attribute
    p = float(plants.option("dropout", 0.0))
    head_dim = D_MODEL // HEADS
    scale = 1.0 / head_dim if plants.option("attention_scale", "1/sqrt(d)") == "1/d" else 1.0 / math.sqrt(head_dim)

    def layer_norm(name):
        return nn.LayerNorm((D_MODEL,), epsilon=plants.layer("eps", name, 1e-5))

    def act(name):
        kind = plants.layer("activation", name, "gelu")
        return {"gelu": lambda: nn.GELU(approximate=False), "gelu_tanh": lambda: nn.GELU(approximate=True),
                "relu": nn.ReLU, "silu": nn.SiLU}[kind]()

    class Attention(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.projections = tuple(n(a) for a in ("q_proj", "k_proj", "v_proj", "o_proj"))
            for attribute in self.projections:
                setattr(self, attribute, nn.Dense(D_MODEL, D_MODEL))
            self.softmax, self.dropout = nn.Softmax(axis=-1), nn.Dropout(p=p)

        def construct(self, x):
            b, t, d = x.shape
            q, k, v = [getattr(self, a)(x).reshape(b, t, HEADS, head_dim).transpose(0, 2, 1, 3)
                       for a in self.projections[:3]]
            weights = self.dropout(self.softmax(ops.matmul(q, k.transpose(0, 1, 3, 2)) * scale))
            out = ops.matmul(weights, v).transpose(0, 2, 1, 3).reshape(b, t, d)
            return getattr(self, self.projections[3])(out)

    class FeedForward(nn.Cell):
        def __init__(self, prefix: str) -> None:
            super().__init__()
            self.fc1, self.act, self.fc2 = nn.Dense(D_MODEL, D_FF), act(prefix + "act"), nn.Dense(D_FF, D_MODEL)

        def construct(self, x):
            return self.fc2(self.act(self.fc1(x)))

    class Block(nn.Cell):
        def __init__(self, prefix: str) -> None:
            super().__init__()
            self.attention = n("attn")
            self.norm1, self.drop1 = layer_norm(prefix + "norm1"), nn.Dropout(p=p)
            setattr(self, self.attention, Attention())
            self.norm2, self.drop2 = layer_norm(prefix + "norm2"), nn.Dropout(p=p)
            self.ffn = FeedForward(prefix + "ffn.")

        def construct(self, x):
            x = x + self.drop1(getattr(self, self.attention)(self.norm1(x)))
            return x + self.drop2(self.ffn(self.norm2(x)))

    class Encoder(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.pos = nn.Embedding(VOCAB, D_MODEL), nn.Embedding(SEQ, D_MODEL)
            self.stack = n("blocks")
            setattr(self, self.stack, nn.CellList([Block(f"{n('blocks')}.{i}.") for i in range(BLOCKS)]))
            self.norm, self.head = layer_norm("norm"), nn.Dense(D_MODEL, CLASSES)

        def construct(self, tokens):
            x = self.embed(tokens) + self.pos(ops.arange(tokens.shape[1]).astype(ms.int32))
            for block in getattr(self, self.stack):
                x = block(x)
            return self.head(self.norm(x).mean(axis=1))

    return Encoder()

