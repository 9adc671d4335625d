"""The comparison corpus (issue 22's acceptance): real architectures in PyTorch and MindSpore, noise-only pairs that
must read clean and planted port bugs that must be named at the right layer, step and parameter -- with every tool
at its default options.

The corpus runs once per module (three processes: PyTorch, MindSpore PyNative, MindSpore GRAPH_MODE; about a minute
on 2 cores); each case is one test asserting that what compare-layers, compare-loss and compare-weights answer is
what the case expects (``tests/corpus/cases.py``). ``benchmarks/comparison_corpus.py`` writes the same answers as
the confusion table in ``docs/precision-comparison.md``.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from conftest import fresh_env  # noqa: E402
from corpus.cases import CASES  # noqa: E402
from corpus.report import KEYS, report  # noqa: E402
from corpus.runner import generate  # noqa: E402

pytestmark = pytest.mark.mindspore


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    """Every case directory; a side that failed is judged by the cases that use it (their tools cannot answer)."""
    return generate(tmp_path_factory.mktemp("corpus"), CASES, env=fresh_env())


def test_every_side_writes_its_capture_losses_and_weights(corpus):
    """The corpus itself is sound: every side ran, and each case leads to two sides holding all three artefacts."""
    failed = {key: status.get("error") for key, status in corpus["sides"].items() if status.get("status") != "ok"}
    assert not failed, f"sides that did not run: {json.dumps(failed, indent=1)[:4000]}"
    for case_dir in corpus["cases"].values():
        case = json.loads((case_dir / "case.json").read_text())
        for side in ("a_dir", "b_dir"):
            side_dir = Path(case[side])
            assert (side_dir / "capture" / "manifest.json").is_file(), side_dir
            assert (side_dir / "loss" / "loss_rank_0.jsonl").is_file(), side_dir
            assert any((side_dir / name).is_file() for name in ("initial.pth", "initial.ckpt")), side_dir


@pytest.mark.parametrize("name", [case.name for case in CASES])
def test_case_is_answered_as_expected(corpus, name):
    row = report(corpus["cases"][name])
    expected = {key: row["expect"][key] for key in KEYS}
    reported = {key: row["reported"][key] for key in KEYS}
    assert reported == expected, (f"{name} ({row['planted']}):\n expected {expected}\n reported {reported}\n "
                                  f"details {row['details']}")
