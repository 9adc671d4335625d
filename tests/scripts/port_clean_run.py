"""The port check on the small user-written pairs of tests/helpers/port_pairs.py, in one process.

Usage: ``port_clean_run.py OUT_DIR``. Each case runs ``compare_models`` with its defaults (one step) and writes
``OUT_DIR/<case>.txt`` (the text report), ``OUT_DIR/<case>.html`` and an entry of ``OUT_DIR/results.json``: the
JSON report (``to_dict``) and ``ok`` as the check says it, for tests/compare/test_port_clean.py to judge.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import mindspore as ms
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "helpers"))

from port_pairs import (MsDense, MsHead, MsMlp, MsNet, MsPoolHead, MsResidual, MsStem, TorchDense,  # noqa: E402
                        TorchHead, TorchMlp, TorchNet, TorchPoolHead, TorchResidual, TorchStem)

from msdebug_hooks.compare.port_check import compare_models  # noqa: E402

OUT = Path(sys.argv[1])
ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
rng = np.random.default_rng(0)
IMAGES = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
VECTORS = rng.standard_normal((2, 6)).astype(np.float32)
LABELS = np.array([1, 2])
CASES = {
    "clean": (TorchNet, lambda: MsNet(), IMAGES),
    "unpaired_gelu": (TorchNet, lambda: MsNet("gelu"), IMAGES),
    "unpaired_dropout_on": (TorchNet, lambda: MsNet("dropout"), IMAGES),
    "mlp": (TorchMlp, lambda: MsMlp(), VECTORS),
    "mlp_swap": (TorchMlp, lambda: MsMlp(swap=True), VECTORS),
    "mlp_b_extra": (lambda: TorchMlp(b_extra=True), lambda: MsMlp(), VECTORS),
    "dense": (TorchDense, lambda: MsDense(), IMAGES),
    "dense_eps": (TorchDense, lambda: MsDense(eps=1e-2), IMAGES),
    "pool": (TorchPoolHead, lambda: MsPoolHead(), IMAGES),
    "pool_wrong": (TorchPoolHead, lambda: MsPoolHead(wrong_pool=True), IMAGES),
    "drop_path": (TorchResidual, lambda: MsResidual(), VECTORS),
    "drop_path_dropout_on": (TorchResidual, lambda: MsResidual(dropout_on=True), VECTORS),
    "head_without_bias": (TorchHead, lambda: MsHead(), VECTORS),
    "stem": (TorchStem, lambda: MsStem(), IMAGES),
    "stem_pool_same": (TorchStem, lambda: MsStem(pool_same=True), IMAGES),
}

results = {}
for name, (build_torch, build_ms, inputs) in CASES.items():
    torch.manual_seed(0)
    check = compare_models(build_torch(), build_ms(), inputs, LABELS, steps=1)
    (OUT / f"{name}.txt").write_text(check.format() + "\n")
    check.write_html(OUT / f"{name}.html")
    results[name] = {"ok": check.ok, "headline": check.headline(), "report": check.to_dict()}
    print(f"{name}: ok={check.ok} {check.headline()[:160]}", flush=True)
(OUT / "results.json").write_text(json.dumps(results, indent=1, default=str))
