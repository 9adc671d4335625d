"""The port check on the comparison corpus: every MindSpore-port-against-PyTorch case of ``corpus.cases``, plus an
LSTM and a Conv1d port, through ``compare_models`` with its defaults, in one process.

Usage: ``port_check_run.py OUT_DIR``. Defaults everywhere but ``steps=2`` (step 1 is compared; two steps draw a
loss curve, at less cost than the default three). Writes ``OUT_DIR/results.json`` (one entry per case: what the
case expects, what the check reported) and, per case, the text report and the HTML report, for
tests/compare/test_port_check.py to judge.

What each corpus case expects comes from ``corpus.cases`` alone, by three general rules:

* a port option planted in the model (epsilon, activation, padding, attention scale, dropout) shows in the forward
  pass: the finding is a ``layer`` at the case's layer;
* a weight plant (``transpose``, ``swap``) is a converter's mistake: the cell gets the planted conversion and is
  checked with ``copy_weights=False``; the finding is a ``parameter`` of the case's layer;
* a case observed in the eval pass (BatchNorm momentum: running statistics) shows in the step's update of the
  running statistics: an ``update`` at the case's layer.

Cases that compare two runs of one framework (float64, threads, GRAPH_MODE, bfloat16 autocast) are not ports and
are not run here.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import mindspore as ms
import numpy as np
import torch
from mindspore import nn as mnn
from torch import nn as tnn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: the corpus package

from corpus.architectures import architecture  # noqa: E402
from corpus.cases import BATCH, CASES  # noqa: E402
from corpus.plants import WEIGHT_PLANTS, PortPlants, plant_weights  # noqa: E402

from msdebug_hooks.compare import attribution, convert_torch_state  # noqa: E402
from msdebug_hooks.compare.port_check import compare_models  # noqa: E402
from msdebug_hooks.compare.port_weights import torch_state  # noqa: E402

OUT = Path(sys.argv[1])
ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")


def expected_kind(case) -> str:
    if set(case.a.plant_dict) & set(WEIGHT_PLANTS):
        return "parameter"
    return "update" if case.a.observe == "eval" else "layer"


def corpus_cases():
    for case in CASES:
        if case.a.framework != "mindspore" or case.b.framework != "pytorch":
            continue
        arch = architecture(case.a.arch)
        plants = case.a.plant_dict
        model = arch.build_torch(seed=0)
        net = arch.build_mindspore(PortPlants(plants))
        keep = bool(set(plants) & set(WEIGHT_PLANTS))
        if keep:  # the converter's mistake, loaded into the cell: the check must find it there
            ms.load_param_into_net(net, convert_torch_state(plant_weights(torch_state(model), plants), net),
                                   strict_load=True)
        x, y = arch.make_batches(1, BATCH)[0]
        expect = {"layer": case.expect.layer, "kind": expected_kind(case) if case.expect.layer else None}
        yield case.name, model, net, (x,), y, keep, expect, case.planted


# --- two more architectures: an LSTM and a Conv1d stack (layouts the corpus does not use) ------------------------
class TorchLSTM(tnn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = tnn.LSTM(4, 6, num_layers=2, bidirectional=True, batch_first=True)
        self.head = tnn.Linear(12, 3)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


class MsLSTM(mnn.Cell):
    def __init__(self):
        super().__init__()
        self.rnn = mnn.LSTM(4, 6, num_layers=2, bidirectional=True, batch_first=True)
        self.head = mnn.Dense(12, 3)

    def construct(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


class TorchConv1d(tnn.Module):
    def __init__(self, length=10):
        super().__init__()
        self.conv1, self.bn1, self.act1 = tnn.Conv1d(4, 8, 3, padding=1), tnn.BatchNorm1d(8), tnn.LeakyReLU(0.01)
        self.conv2, self.act2 = tnn.Conv1d(8, 8, 3, padding=1), tnn.ReLU()
        self.flatten, self.fc = tnn.Flatten(), tnn.Linear(8 * length, 3)

    def forward(self, x):
        return self.fc(self.flatten(self.act2(self.conv2(self.act1(self.bn1(self.conv1(x)))))))


class MsConv1d(mnn.Cell):
    def __init__(self, length=10, slope=0.01):
        super().__init__()
        self.conv1 = mnn.Conv1d(4, 8, 3, pad_mode="pad", padding=1, has_bias=True)
        self.bn1, self.act1 = mnn.BatchNorm1d(8, momentum=0.9), mnn.LeakyReLU(slope)
        self.conv2, self.act2 = mnn.Conv1d(8, 8, 3, pad_mode="pad", padding=1, has_bias=True), mnn.ReLU()
        self.flatten, self.fc = mnn.Flatten(), mnn.Dense(8 * length, 3)

    def construct(self, x):
        return self.fc(self.flatten(self.act2(self.conv2(self.act1(self.bn1(self.conv1(x)))))))


def extra_cases():
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    labels = rng.integers(0, 3, size=(4,)).astype(np.int32)
    sequence = rng.standard_normal((4, 4, 4)).astype(np.float32)   # sequence length equal to the batch size
    yield ("lstm_port", TorchLSTM(), MsLSTM(), (sequence,), labels, False, {"layer": None, "kind": None},
           "nothing: a 2-layer bidirectional LSTM, batch-first, T = B")
    signal = rng.standard_normal((4, 4, 10)).astype(np.float32)
    yield ("conv1d_port", TorchConv1d(), MsConv1d(), (signal,), labels, False, {"layer": None, "kind": None},
           "nothing: a Conv1d stack with BatchNorm1d")
    yield ("conv1d_leaky_relu_default", TorchConv1d(), MsConv1d(slope=0.2), (signal,), labels, False,
           {"layer": "act1", "kind": "layer"}, "LeakyReLU ported with MindSpore's default alpha 0.2 (PyTorch: 0.01)")


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    results = {}
    for name, model, net, inputs, target, keep, expect, planted in (*corpus_cases(), *extra_cases()):
        started = time.perf_counter()
        check = compare_models(model, net, inputs, target, copy_weights=not keep, steps=2)  # 2: a loss curve
        seconds = time.perf_counter() - started
        (OUT / f"{name}.txt").write_text(check.format() + "\n")
        check.write_html(OUT / f"{name}.html")
        replay = check.layers.replay
        results[name] = {
            "planted": planted, "expect": expect, "ok": check.ok, "marked": check.marked, "kind": check.marked_kind,
            "headline": check.headline(), "origin": check.origin,
            "replay": None if replay is None else replay.verdict,
            "settings": [[f.layer, f.setting] for f in check.conventions],
            "updates": [u.name for u in check.updates], "weights_by": sorted(set(check.copy.how.values())),
            "unmatched": [r.name for r in check.layers.unmatched_a + check.layers.unmatched_b],
            "sources": [s.as_dict() for s in check.sources], "losses": [check.losses_mindspore,
                                                                        check.losses_pytorch],
            "update_level": check.update_level, "seconds": round(seconds, 2),
            "forward_level": attribution.noise_level([p.entry() for p in check.layers.pairs], len(check.layers.pairs))}
        print(f"{name}: ok={check.ok} marked={check.marked} kind={check.marked_kind} ({seconds:.1f} s)", flush=True)
    (OUT / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
