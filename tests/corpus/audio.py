"""A small audio/sequence classifier in PyTorch (the reference) and its MindSpore port, small enough for a CPU.

Log-mel-like features ``[B, 8, 16]`` (8 bands, 16 frames) go through a Conv1d front end -- ``conv1`` (kernel 5,
``padding=2``), ``bn1`` (BatchNorm1d), ``relu1``, then ``conv2`` (kernel 3, ``stride=2, padding=1``: 16 frames become
8), ``bn2``, ``relu2`` -- are transposed to ``[B, T, C]`` (in code), run through a bidirectional ``lstm``
(``batch_first=True``, hidden 12), averaged over time (in code) and classified by ``head``.
With the corpus's batch of 8 the LSTM's sequence length equals the batch size, the case in which a time-major
``[T, B, H]`` tensor has the shape of the batch-major one. Layer names (execution order):
``conv1 bn1 relu1 conv2 bn2 relu2 lstm head``; the LSTM's records are its tuple outputs ``lstm.0`` (the sequence),
``lstm.1.0`` (h_n) and ``lstm.1.1`` (c_n).

The correct port: ``Conv1d(pad_mode="pad", padding=p, has_bias=False)`` (MindSpore's default is
``pad_mode="same"``), ``BatchNorm1d(eps=1e-5, momentum=0.9)`` (MindSpore's momentum is ``1 - PyTorch's``), MindSpore's
``nn.LSTM`` with the converted weights unchanged (gates i, f, g, o in both on the CPU). Port options read (see
``plants``): ``eps``, ``activation``, ``pad_mode`` per layer, ``bn_momentum``; weight plants (``gates``, ...) act on
the converted state.
"""
from __future__ import annotations


from corpus.batches import labelled_batches, mindspore_batch, torch_batch  # noqa: F401 (the interface)
from corpus.plants import PortPlants

NAME = "audio"
BANDS, FRAMES, CHANNELS, HIDDEN, CLASSES = 8, 16, 16, 12, 6
RENAMES: tuple = ()
#: every LSTM tensor (gate blocks stacked along axis 0), what a gate-order plant reorders
LSTM_TENSORS = tuple(f"lstm.{kind}_{part}_l0{direction}" for direction in ("", "_reverse")
                     for kind, part in (("weight", "ih"), ("weight", "hh"), ("bias", "ih"), ("bias", "hh")))


def make_batches(num_steps: int, batch_size: int, seed: int = 0) -> list:
    """``[(features float32 [B, 8, 16], labels int32 [B])]``, the same on every side."""
    return labelled_batches((BANDS, FRAMES), CLASSES, num_steps, batch_size, seed)


def eval_batch(batch_size: int) -> tuple:
    return make_batches(1, batch_size, seed=1234)[0]


def build_torch(seed: int = 0):
    """The reference model, its weights drawn with ``torch.manual_seed(seed)``."""
    import torch
    from torch import nn

    class AudioNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv1d(BANDS, CHANNELS, 5, padding=2, bias=False)
            self.bn1, self.relu1 = nn.BatchNorm1d(CHANNELS), nn.ReLU()
            self.conv2 = nn.Conv1d(CHANNELS, CHANNELS, 3, stride=2, padding=1, bias=False)
            self.bn2, self.relu2 = nn.BatchNorm1d(CHANNELS), nn.ReLU()
            self.lstm = nn.LSTM(CHANNELS, HIDDEN, batch_first=True, bidirectional=True)
            self.head = nn.Linear(2 * HIDDEN, CLASSES)

        def forward(self, x):
            x = self.relu2(self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x))))))
            sequence, _ = self.lstm(x.transpose(1, 2))
            return self.head(sequence.mean(dim=1))

    torch.manual_seed(seed)
    return AudioNet()


def build_mindspore(plants: PortPlants):
    """The port, with the options of ``plants`` (defaults: the correct port)."""
    from mindspore import nn

    momentum = plants.option("bn_momentum", 0.9)

    def conv(name, cin, cout, kernel, stride, padding):
        mode = plants.layer("pad_mode", name, "pad")
        extra = {"padding": padding} if mode == "pad" else {}
        return nn.Conv1d(cin, cout, kernel, stride=stride, pad_mode=mode, has_bias=False, **extra)

    def norm(name):
        return nn.BatchNorm1d(CHANNELS, eps=plants.layer("eps", name, 1e-5), momentum=momentum)

    def act(name):
        kind = plants.layer("activation", name, "relu")
        return {"relu": nn.ReLU, "gelu": lambda: nn.GELU(approximate=False), "silu": nn.SiLU,
                "leaky_relu": lambda: nn.LeakyReLU(0.01)}[kind]()

    class AudioNet(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = conv("conv1", BANDS, CHANNELS, 5, 1, 2)
            self.bn1, self.relu1 = norm("bn1"), act("relu1")
            self.conv2 = conv("conv2", CHANNELS, CHANNELS, 3, 2, 1)
            self.bn2, self.relu2 = norm("bn2"), act("relu2")
            self.lstm = nn.LSTM(CHANNELS, HIDDEN, batch_first=True, bidirectional=True)
            self.head = nn.Dense(2 * HIDDEN, CLASSES)

        def construct(self, x):
            x = self.relu2(self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x))))))
            sequence, _ = self.lstm(x.transpose(0, 2, 1))
            return self.head(sequence.mean(axis=1))

    return AudioNet()
