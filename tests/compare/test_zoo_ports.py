"""The zoo in CI (issue 31): a few third-party ports (mindcv 0.3.0 against torchvision / timm, random weights) through
the port check at its default options -- the subset of ``benchmarks/zoo_ports.py`` that fits the suite's time.

* ResNet-18 aligned with torchvision's (the stem max pool padded as torchvision pads it): a noise-only pair, exit 0;
* ResNet-18 as mindcv publishes it: its one real difference (``MaxPool2d(pad_mode='same')`` against
  ``padding=1``) is the first divergence, at ``max_pool``, the layer's own error;
* a BatchNorm epsilon of 1e-3 planted in the aligned ResNet-18's ``layer1.0.bn2``: named there, own error;
* ViT-B/32 aligned with timm's (LayerNorm epsilon 1e-6 and exact GELU set on the built port): exit 0.

The cases run in one process per architecture (``zoo.runner``) once per module; each test judges one case with the
zoo's own rules (``zoo.report.judge``) and asserts what the case specifically expects.
"""
from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("mindcv")

from project import fresh_env  # noqa: E402
from zoo.cases import cases_by_name  # noqa: E402
from zoo.report import judge  # noqa: E402
from zoo.runner import run  # noqa: E402

pytestmark = pytest.mark.mindspore

SUBSET = ("resnet18/aligned", "resnet18/published", "resnet18/bn_eps", "vit_b_32_224/aligned")


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> dict:
    known = cases_by_name()
    cases = [known[name] for name in SUBSET]
    results = run(cases, tmp_path_factory.mktemp("zoo") / "zoo.jsonl", timeout=900, env=fresh_env())
    return {case.name: (case, result) for case, result in zip(cases, results)}


def _right(zoo: dict, name: str) -> dict:
    case, result = zoo[name]
    row = judge(case, result)
    assert row["right"], f"{name}: expected {row['expected']}, reported {row['reported']} ({row['why']}); {result}"
    return result


@pytest.mark.parametrize("name", ["resnet18/aligned", "vit_b_32_224/aligned"])
def test_aligned_port_reads_clean(zoo, name):
    result = _right(zoo, name)
    assert result["exit"] == 0 and result["settings"] == [] and result["marked"] is None, result


def test_published_resnet_names_its_max_pool_padding(zoo):
    result = _right(zoo, "resnet18/published")
    assert result["kept_layers"] == {"max_pool_padding": ["max_pool"]}, result
    assert (result["exit"], result["marked"], result["kind"], result["replay"]) == (1, "max_pool", "layer", "own")


def test_planted_batchnorm_eps_is_named_at_its_layer(zoo):
    result = _right(zoo, "resnet18/bn_eps")
    assert (result["marked"], result["kind"], result["replay"]) == ("layer1.0.bn2", "layer", "own"), result
    assert {layer for layer, _ in result["settings"]} <= {"layer1.0.bn2"}, result
