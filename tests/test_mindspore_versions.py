"""The per-version facts (msdebug_hooks/mindspore_versions.py) against pyproject.toml, the stored 2.7.2 dump and the
installed MindSpore's own files (read, never imported: this file runs in the fast lane, and in the compatibility lane
on 2.7.2)."""
from __future__ import annotations

import importlib.metadata
import mmap
import re
from pathlib import Path

import pytest

from project import ROOT
from msdebug_hooks import mindspore_versions as mv
from msdebug_hooks._mindspore import installed_version, installed_version_string

STORED_2_7_2 = Path(__file__).resolve().parent / "data" / "dumps" / "version_train_2_7_2"


def test_pyproject_allows_exactly_the_supported_releases():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pins = [d for d in project["dependencies"] if re.match(r"mindspore\b", d)]
    assert pins == [f"mindspore{mv.REQUIREMENT}"]
    oldest = min(r.python[0] for r in mv.RELEASES)
    newest = max(r.python[1] for r in mv.RELEASES)
    assert project["requires-python"] == f">={oldest[0]}.{oldest[1]},<{newest[0]}.{newest[1] + 1}"
    assert {mv.parse_version(r.version)[:2] for r in mv.RELEASES} == {(2, 7), (2, 8), (2, 9), (2, 10)}


@pytest.mark.parametrize("text, status", [("2.7.0", mv.SUPPORTED), ("2.7.1.post1", mv.SUPPORTED),
                                          ("2.10.3", mv.SUPPORTED), ("2.6.0", mv.UNSUPPORTED),
                                          ("2.11.0", mv.UNSUPPORTED), ("3.0.0rc1", mv.UNSUPPORTED)])
def test_support_by_version(text, status):
    found, sentence = mv.support(text)
    assert found == status and text in sentence
    if status == mv.UNSUPPORTED:
        assert "2.7 to 2.10.x" in sentence


def test_the_installed_mindspore_is_supported_and_loadable_here():
    assert mv.support()[0] == mv.SUPPORTED, mv.support()[1]
    assert mv.wheel_mismatch() is None


def test_a_core_built_for_another_platform_is_named():
    linux_x86 = [".cpython-311-x86_64-linux-gnu.so", ".abi3.so", ".so"]
    assert mv.core_mismatch(["_c_expression.cpython-311-x86_64-linux-gnu.so"], linux_x86) is None
    problem = mv.core_mismatch(["_c_expression.cpython-311-aarch64-linux-gnu.so"], linux_x86)
    assert "aarch64-linux-gnu.so" in problem and "cpXY-none-any" in problem
    assert mv.core_mismatch([], linux_x86) is None     # MindSpore not installed: nothing to say


def _core_library() -> Path:
    dist = importlib.metadata.distribution("mindspore")
    found = [f for f in dist.files or [] if str(f).endswith("lib/libmindspore_core.so")]
    assert found, "libmindspore_core.so is not in the installed MindSpore's file list"
    return Path(dist.locate_file(found[0]))


def test_log_submodules_are_those_of_the_installed_binary():
    """The installed libmindspore_core.so's submodule string table (it starts at UNKNOWN, CORE, ANALYZER) equals what
    the facts say for that version (2.7.0 and 2.10 each have one name the others lack)."""
    with open(_core_library(), "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        found = re.search(rb"\x00UNKNOWN\x00+CORE\x00+ANALYZER\x00", data)   # entries are padded with NULs
        assert found, "no submodule table in libmindspore_core.so"
        names = []
        for chunk in re.split(rb"\x00+", data[found.start() + 1: found.start() + 4000]):
            if not re.fullmatch(rb"[A-Z][A-Z_]*", chunk):
                break
            names.append(chunk.decode())
    assert tuple(names) == mv.log_submodules(installed_version())


def test_the_stored_2_7_2_dump_records_its_version(tmp_path):
    from msdebug_hooks.dump.reader import DumpDir

    assert DumpDir(STORED_2_7_2).mindspore_version == "2.7.2"
    iteration = tmp_path / "rank_0" / "Net" / "0" / "0"
    iteration.mkdir(parents=True)
    assert DumpDir(tmp_path).mindspore_version is None          # no .dump_metadata: unknown
    (tmp_path / "rank_0" / ".dump_metadata").mkdir()
    (tmp_path / "rank_0" / ".dump_metadata" / "config.json").write_text("{not json")
    assert DumpDir(tmp_path).mindspore_version is None


def test_dump_differences_only_between_2_7_and_later():
    assert len(mv.dump_differences("2.7.2", "2.10.0")) == 2
    assert len(mv.dump_differences("2.9.0", "2.7.0")) == 2
    assert mv.dump_differences("2.8.0", "2.10.0") == []
    assert mv.dump_differences(None, "2.10.0") == [] and not mv.versions_differ(None, "2.10.0")
    assert mv.versions_differ("2.7.2", "2.10.0") and not mv.versions_differ("2.10.0", "2.10.0")


def test_differences_name_what_an_older_release_lacks():
    assert mv.differences((2, 10, 0)) == []
    older = "\n".join(mv.differences((2, 7, 2)))
    assert "HYPER_OFFLOAD" in older and "Expand/" in older and "GLOG_max_log_size" in older
    assert "GLOG_max_log_size" not in "\n".join(mv.differences((2, 9, 0)))
    assert "RDR" in "\n".join(mv.differences((2, 7, 0))) and "RDR" not in older


def test_importing_the_facts_imports_no_mindspore():
    from project import run_python

    proc = run_python("import sys, msdebug_hooks.mindspore_versions as m; m.support(); m.differences(); "
                      "m.wheel_mismatch(); print('mindspore' in sys.modules)")
    assert proc.stdout.strip() == "False"
    assert installed_version_string()


def test_msdebug_env_says_the_installed_release_is_supported_and_what_differs():
    import json

    from project import run_python

    proc = run_python("import sys; from msdebug_hooks.cli import main; sys.exit(main(['env', '--json']))", check=False)
    data = json.loads(proc.stdout)
    assert data["mindspore"] == installed_version_string()
    assert data["mindspore_support"]["status"] == mv.SUPPORTED and data["mindspore_support"]["wheel_problem"] is None
    assert data["mindspore_support"]["differences"] == mv.differences()
    assert (installed_version()[:2] < (2, 10)) == bool(data["mindspore_support"]["differences"])
