"""A 25 M-parameter transformer for the benchmarks, next to LeNet-5: where per-tensor and per-byte costs both show.

LeNet's 61 k weights in 10 tensors hide what a real model pays: hundreds of parameter tensors (per-call costs) and
a hundred megabytes of weights (memory passes). This pre-LayerNorm transformer encoder has both: 14 layers of
width 384 (6 heads, feed-forward 1536) over float32 token vectors, an input projection and a classification head:
25.0 M float32 parameters (100 MB) in 214 tensors. A step trains a batch of 4 sequences of 32 tokens (128 tokens),
a short sequence, so the step stays a few hundred milliseconds on a 2-core CPU.

The key projections have no bias, as in most transformer code: a bias added to every key shifts each query's
scores by one constant, which softmax ignores, so its gradient is zero and it never changes. Until session 4 the
model had them (228 tensors), and the debugger's "not changed" watchpoint reported those 14 tensors at every
step, which the benchmarks' "no watchpoint hits" premise rules out (with MindInsight the first hit pauses).
"""
from __future__ import annotations

from typing import Any

import numpy as np

WIDTH, HEADS, FFN, LAYERS = 384, 6, 1536, 14
BATCH, SEQUENCE, CLASSES = 4, 32, 10


def make_transformer() -> Any:
    """The encoder (``mindspore.nn.Cell``): ``x`` float32 [BATCH, SEQUENCE, WIDTH] -> logits [BATCH, CLASSES]."""
    from mindspore import nn, ops

    head_width = WIDTH // HEADS

    class EncoderLayer(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.attention_norm = nn.LayerNorm((WIDTH,))
            self.query = nn.Dense(WIDTH, WIDTH)
            self.key = nn.Dense(WIDTH, WIDTH, has_bias=False)   # softmax ignores a key bias: see the docstring
            self.value = nn.Dense(WIDTH, WIDTH)
            self.attention_out = nn.Dense(WIDTH, WIDTH)
            self.ffn_norm = nn.LayerNorm((WIDTH,))
            self.ffn_in = nn.Dense(WIDTH, FFN)
            self.ffn_out = nn.Dense(FFN, WIDTH)
            self.gelu = nn.GELU()
            self.softmax = nn.Softmax(-1)
            self.matmul = ops.BatchMatMul()
            self.matmul_t = ops.BatchMatMul(transpose_b=True)
            self.scale = 1.0 / head_width ** 0.5

        def split_heads(self, x):
            return ops.transpose(ops.reshape(x, (BATCH, SEQUENCE, HEADS, head_width)), (0, 2, 1, 3))

        def construct(self, x):
            y = self.attention_norm(x)
            q, k, v = self.split_heads(self.query(y)), self.split_heads(self.key(y)), self.split_heads(self.value(y))
            weights = self.softmax(self.matmul_t(q, k) * self.scale)
            attended = ops.reshape(ops.transpose(self.matmul(weights, v), (0, 2, 1, 3)), (BATCH, SEQUENCE, WIDTH))
            x = x + self.attention_out(attended)
            return x + self.ffn_out(self.gelu(self.ffn_in(self.ffn_norm(x))))

    class SmallTransformer(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Dense(WIDTH, WIDTH)
            self.layers = nn.SequentialCell([EncoderLayer() for _ in range(LAYERS)])
            self.head = nn.Dense(WIDTH, CLASSES)

        def construct(self, x):
            return self.head(self.layers(self.embed(x)).mean(1))

    return SmallTransformer()


def make_transformer_model(learning_rate: float = 0.001, *, seed: int = 1) -> tuple[Any, Any]:
    """``(model, network)``: ``Model`` over the transformer with softmax cross-entropy and Momentum."""
    import mindspore as ms
    from mindspore import nn
    from mindspore.train import Model

    ms.set_seed(seed)
    network = make_transformer()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Momentum(network.trainable_params(), learning_rate=learning_rate, momentum=0.9)
    return Model(network, loss_fn, optimizer), network


def make_transformer_dataset(num_batches: int, *, seed: int = 0) -> Any:
    """Random token vectors with labels, built up front (no data generation inside timed steps)."""
    import mindspore.dataset as ds

    rng = np.random.default_rng(seed)
    batches = [(rng.standard_normal((BATCH, SEQUENCE, WIDTH)).astype(np.float32),
                rng.integers(0, CLASSES, size=(BATCH,)).astype(np.int32)) for _ in range(num_batches)]

    class Batches:
        def __getitem__(self, index: int):
            return batches[index]

        def __len__(self) -> int:
            return len(batches)

    return ds.GeneratorDataset(Batches(), column_names=["x", "label"], shuffle=False)


def parameter_count(network: Any) -> tuple[int, int]:
    """(float parameters, parameter tensors) of a network's trainable parameters."""
    params = network.trainable_params()
    return sum(int(np.prod(p.shape)) for p in params), len(params)


if __name__ == "__main__":   # python benchmarks/small_transformer.py: its size and step time on this machine
    import time

    import mindspore as ms
    from mindspore.train import Callback

    ms.set_context(mode=ms.GRAPH_MODE)
    model, net = make_transformer_model()
    count, tensors = parameter_count(net)

    class StepTimes(Callback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self.last = None

        def on_train_step_begin(self, run_context) -> None:
            now = time.perf_counter()
            if self.last is not None:
                self.times.append(now - self.last)
            self.last = now

    timer = StepTimes()
    model.train(1, make_transformer_dataset(12), callbacks=[timer], dataset_sink_mode=False)
    times = sorted(timer.times[2:])
    print(f"small transformer: {count / 1e6:.1f} M parameters in {tensors} tensors; step median "
          f"{times[len(times) // 2] * 1e3:.0f} ms, fastest {times[0] * 1e3:.0f} ms "
          f"(batch {BATCH} x {SEQUENCE} tokens, GRAPH_MODE, CPU)")
