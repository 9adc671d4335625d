"""compare-dumps across MindSpore versions: the same training dumped by 2.7.2 and by the newer release.

``tests/scripts/version_dump_train.py`` (conv, two dense layers, MSELoss, Momentum; weights and data from numpy with
fixed seeds) gives every version the same start, so two versions' dumps may differ only by rounding and by how each
version names and builds its operators. 2.7.2's dump of one step is stored (``data/dumps/version_train_2_7_2``,
0.4 MB); the installed MindSpore dumps the same step here. The live test dumps two steps with both interpreters: the
project venv and the compatibility lane's ``.venv-ms27``.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from project import ROOT, fresh_env, run_python
from msdebug_hooks import mindspore_versions
from msdebug_hooks._mindspore import installed_version_string, parse_version
from msdebug_hooks.compare.dumps import BY_DECOMPOSITION, DumpComparer

pytestmark = pytest.mark.mindspore

STORED_2_7_2 = Path(__file__).resolve().parents[1] / "data" / "dumps" / "version_train_2_7_2"
SCRIPT = ROOT / "tests" / "scripts" / "version_dump_train.py"
GRAD_SQUARE = "Gradients/Default/network-WithLossCell/_loss_fn-MSELoss/Grad_Square/"


def dump_with(python: str, dump_dir: Path, steps: int) -> Path:
    env = fresh_env()
    env.pop("MINDSPORE_DUMP_CONFIG", None)
    env.update(GLOG_v="3", PYTHONPATH=str(ROOT))
    proc = subprocess.run([python, str(SCRIPT), str(dump_dir), "--steps", str(steps)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return dump_dir


@pytest.fixture(scope="module")
def installed_dump(tmp_path_factory) -> Path:
    return dump_with(sys.executable, tmp_path_factory.mktemp("installed") / "dump", steps=1)


def assert_every_operator_paired(result, version_a: str, version_b: str) -> None:
    """Nothing unmatched, every pair within the noise; where 2.7 meets 2.8+, exactly Square's gradient regrouped."""
    assert (result.version_a, result.version_b) == (version_a, version_b)
    assert result.unmatched_a == [] and result.unmatched_b == []
    assert result.counts()["pass"] == len(result.pairs) > 100, result.counts()
    assert result.exit_code() == 0
    across = (parse_version(version_a) >= (2, 8)) != (parse_version(version_b) >= (2, 8))
    if not across:
        assert result.regrouped_a == result.regrouped_b == [] and result.version_notes == []
        return
    assert [n.split(": ", 1)[1] for n in result.regrouped_a] == [GRAD_SQUARE + "Mul-op0"]
    assert [n.split(": ", 1)[1] for n in result.regrouped_b] == ["Expand/_PowTensorScalar/Pow-op0",
                                                                 "Expand/_Muls/Mul-op0"]
    exits = {(p.node_a, p.node_b) for p in result.pairs if p.matched_by == BY_DECOMPOSITION}
    old, new = (GRAD_SQUARE + "Mul-op1", GRAD_SQUARE + "Mul-op0")
    assert exits == {(old, new) if parse_version(version_a) < (2, 8) else (new, old)}
    reshaped = [p for p in result.pairs if "compared element by element" in p.comparison.reason]
    assert {p.op_type for p in reshaped} >= {"Flatten", "Reshape"}
    assert len(result.version_notes) == 2


def test_stored_2_7_2_dump_pairs_with_the_installed_mindspore(installed_dump):
    result = DumpComparer(STORED_2_7_2, installed_dump).compare(progress=False)
    assert_every_operator_paired(result, "2.7.2", installed_version_string())


def test_compare_dumps_names_each_side_s_version(installed_dump):
    proc = run_python(f"""
        import sys
        from msdebug_hooks.cli import main
        sys.exit(main(["compare-dumps", {str(installed_dump)!r}, {str(STORED_2_7_2)!r}, "--no-progress"]))
    """, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"MindSpore: A {installed_version_string()}, B 2.7.2" in proc.stdout
    if mindspore_versions.dump_differences(installed_version_string(), "2.7.2"):
        assert "across versions:" in proc.stdout and "regrouped: 2 operator(s) of A and 1 of B" in proc.stdout


@pytest.mark.compat
def test_live_2_7_2_and_installed_dumps_of_two_steps_pair_every_operator(tmp_path):
    from compat_venv import ensure_compat_venv

    if parse_version(installed_version_string())[:2] == (2, 7):
        pytest.skip("this interpreter is the lane's own 2.7 (the project venv runs this test against it)")
    old_python, _ = ensure_compat_venv()
    old = dump_with(str(old_python), tmp_path / "old" / "dump", steps=2)
    new = dump_with(sys.executable, tmp_path / "new" / "dump", steps=2)
    result = DumpComparer(old, new).compare(progress=False)
    assert sorted({p.iteration for p in result.pairs}) == [0, 1]
    assert_every_operator_paired(result, "2.7.2", installed_version_string())
