"""Session-wide real runs for the precision-comparison tests; each MindSpore process runs once per session.

``two_runs_example``: ``examples/migration/two_mindspore_runs.py`` run as a user runs it (four trainings: A, B, and
both again with a dump around the step where they part); its work directory holds the loss records and dumps.
``lenet_dump_rerun``: the same training as ``lenet_dump`` (1 step), in a new process: an identical run.
``lenet_dump_shifted``: the same LeNet with an extra ReLU after conv1 (ReLU is idempotent, so every value stays the
same, but the op ids of the shared ``relu`` scope move by one).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from project import EXAMPLES, fresh_env, run_python

TWO_RUNS = EXAMPLES / "migration" / "two_mindspore_runs.py"
CHANGE_AFTER = 2     # run B rescales fc2 after step 2: step 3 is the first that parts


def _dump(base: Path, body: str) -> Path:
    from msdebug_hooks import DumpConfig

    dump_dir = base / "dump"
    config = DumpConfig(path=str(dump_dir), net_name="Net", iteration="all", saved_data="tensor",
                        trans_flag=True).write(base / "dump_config.json")
    run_python(body, env={"MINDSPORE_DUMP_CONFIG": str(config), "GLOG_v": "3"})
    assert (dump_dir / "rank_0").is_dir(), "MindSpore wrote no dump"
    return dump_dir


@pytest.fixture(scope="session")
def lenet_dump_rerun(tmp_path_factory) -> Path:
    return _dump(tmp_path_factory.mktemp("lenet_rerun"), """
        import mindspore as ms
        ms.set_context(mode=ms.GRAPH_MODE)
        from lenet import make_model, make_dataset
        model, _ = make_model(0.01)
        model.train(1, make_dataset(num_batches=1), dataset_sink_mode=False)
    """)


@pytest.fixture(scope="session")
def lenet_dump_fc2_nudged(tmp_path_factory) -> Path:
    """The training of ``lenet_dump_rerun`` with fc2's weight 0.1 % larger from the start: a difference far below
    any per-element tolerance (rtol = atol = 1e-4 on values of 1e-2), far above float32 noise."""
    return _dump(tmp_path_factory.mktemp("lenet_fc2_nudged"), """
        import mindspore as ms
        ms.set_context(mode=ms.GRAPH_MODE)
        from lenet import make_model, make_dataset
        model, network = make_model(0.01)
        network.fc2.weight.set_data(ms.Tensor(network.fc2.weight.asnumpy() * 1.001))
        model.train(1, make_dataset(num_batches=1), dataset_sink_mode=False)
    """)


@pytest.fixture(scope="session")
def lenet_dump_shifted(tmp_path_factory) -> Path:
    script = Path(__file__).resolve().parents[1] / "scripts" / "shifted_lenet_train.py"
    return _dump(tmp_path_factory.mktemp("lenet_shifted"),
                 f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')")


@pytest.fixture(scope="session")
def two_runs_example(tmp_path_factory) -> tuple[Path, str]:
    workdir = tmp_path_factory.mktemp("two_runs")
    proc = subprocess.run([sys.executable, str(TWO_RUNS), "--workdir", str(workdir), "--steps", "5",
                           "--change-after", str(CHANGE_AFTER)], capture_output=True, text=True, timeout=600,
                          env=fresh_env())
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return workdir, proc.stdout
