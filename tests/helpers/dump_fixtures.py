"""Session-wide real dumps for the dump reader / analyzer / check-dump tests: each training runs once, in a subprocess.

``lenet_dump``: the examples' LeNet trained 3 steps in graph mode with a sync dump of every tensor.
``nan_dump``: ``examples/find_first_nan.py``'s network, whose ``SqrtScale`` layer makes a NaN at step ``BAD_STEP``.
Also small synthetic dumps for layouts a CPU run cannot produce (pre-2.4 file names, async ``mapping.csv``).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from project import EXAMPLES, run_python


def source_line(path: Path, needle: str) -> int:
    """1-based number of the first line of ``path`` containing ``needle`` (files move; never hard-code lines)."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in {path}")


@pytest.fixture(scope="session")
def lenet_dump(tmp_path_factory) -> Path:
    from msdebug_hooks import DumpConfig

    base = tmp_path_factory.mktemp("lenet_dump")
    dump_dir = base / "dump"
    config = DumpConfig(path=str(dump_dir), net_name="Net", iteration="all", saved_data="tensor",
                        trans_flag=True).write(base / "dump_config.json")
    run_python("""
        import mindspore as ms
        ms.set_context(mode=ms.GRAPH_MODE)
        from lenet import make_model, make_dataset
        model, _ = make_model(0.01)
        model.train(1, make_dataset(num_batches=3), dataset_sink_mode=False)
    """, env={"MINDSPORE_DUMP_CONFIG": str(config), "GLOG_v": "3"})
    assert (dump_dir / "rank_0").is_dir(), "MindSpore wrote no dump"
    return dump_dir


@pytest.fixture(scope="session")
def nan_dump(tmp_path_factory) -> Path:
    import find_first_nan

    return find_first_nan.dump_training(tmp_path_factory.mktemp("nan_dump") / "dump")


LENET_SOURCE = EXAMPLES / "lenet.py"
NAN_SOURCE = EXAMPLES / "find_first_nan.py"


def write_npy(path: Path, array: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:       # np.save would append ".npy" to names that do not end with it
        np.lib.format.write_array(handle, array)
    return path
