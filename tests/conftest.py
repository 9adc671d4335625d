"""What pytest needs for every test: tests/helpers/ and the examples on sys.path, the shared fixtures (MindInsight,
dumps, comparison runs), an isolated os.environ per test, caplog seeing our logger, and the fast-lane guard.

Test modules import paths and process helpers from ``project`` (tests/helpers/project.py), never from here.
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Optional

import pytest

HELPERS = Path(__file__).resolve().parent / "helpers"   # what several test folders share
sys.path.insert(0, str(HELPERS))

from project import EXAMPLES, FAST_LANE_GUARD, GUARD_ENV, run_python  # noqa: E402

sys.path.insert(0, str(EXAMPLES))


@pytest.fixture
def python_runner():
    return run_python


# A real MindInsight 2.3.1 server (own venv, free ports, always stopped): fixtures for every test module.
from mindinsight_server import mindinsight, mindinsight_server, mindinsight_venv  # noqa: E402,F401

# Real MindSpore sync dumps (LeNet; LeNet with a NaN-making layer), trained once per session.
from dump_fixtures import lenet_dump, nan_dump  # noqa: E402,F401

# Real runs and dumps for the precision-comparison tests (two LeNet runs that part; identical and shifted dumps).
from compare_fixtures import (lenet_dump_fc2_nudged, lenet_dump_rerun, lenet_dump_shifted,  # noqa: E402,F401
                              two_runs_example)


# Fixtures that train MindSpore (in a subprocess) to make their dump or run: a test using one starts MindSpore, so it
# carries the `mindspore` marker. pytest does not pass markers from fixtures to tests; this hook does, before `-m`
# selects (tryfirst), so a new test using these fixtures cannot slip into the fast lane.
TRAINING_FIXTURES = frozenset({"lenet_dump", "nan_dump", "lenet_dump_rerun", "lenet_dump_shifted",
                               "lenet_dump_fc2_nudged", "two_runs_example"})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if TRAINING_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.mindspore)


@pytest.fixture(autouse=True)
def _isolated_environ():
    """Whatever a test sets in os.environ (``DumpConfig.apply()``, ``LogConfig.apply()``, ...) ends with it, so no
    later test, nor the processes it starts, inherits a dump config or log level it did not ask for."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture
def caplog(caplog):
    """pytest's ``caplog``, also seeing the ``msdebug_hooks`` logger: the library gives that logger its own stderr
    handler and stops it propagating (so an application that configures the root logger does not print every line
    twice), hence records never reach the root handler pytest installs. The one log-capture mechanism of the tests."""
    from msdebug_hooks._log import get_logger

    package_logger = get_logger("msdebug_hooks")  # its default handler is in place before we attach ours
    package_logger.addHandler(caplog.handler)
    try:
        yield caplog
    finally:
        package_logger.removeHandler(caplog.handler)


# ---- The fast lane starts no MindSpore --------------------------------------------------------------------------
# `-m "not mindspore ..."` must be quick: a test that imports MindSpore here, or starts a process that does, without
# the marker fails that test. In-process: a finder records who imported it first; subprocesses: fast_lane_guard/'s
# sitecustomize (first on the PYTHONPATH children inherit) refuses the import and writes it to a log read after
# every test. Not seen: a child given a PYTHONPATH of its own without `guarded()`.
class _FirstMindSporeImport:
    def __init__(self) -> None:
        self.where: Optional[str] = None

    def find_spec(self, name, path=None, target=None):
        if self.where is None and (name == "mindspore" or name.startswith("mindspore.")):
            import traceback

            self.where = "".join(traceback.format_stack(limit=12)[:-1])
        return None


def _fast_lane(config) -> bool:
    return "not mindspore" in (config.getoption("markexpr", "") or "").replace("  ", " ")


def pytest_configure(config):
    if not _fast_lane(config) or "mindspore" in sys.modules:
        return
    import tempfile

    config._mindspore_import = _FirstMindSporeImport()
    sys.meta_path.insert(0, config._mindspore_import)
    fd, log = tempfile.mkstemp(prefix="msdebug-fast-lane-", suffix=".log")
    os.close(fd)
    config._mindspore_subprocess_log = Path(log)
    os.environ["MSDEBUG_TESTS_MINDSPORE_LOG"] = log
    GUARD_ENV.update(MSDEBUG_TESTS_MINDSPORE_LOG=log, PYTHONPATH=str(FAST_LANE_GUARD))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(FAST_LANE_GUARD), os.environ.get("PYTHONPATH")]))


def _fast_lane_violations(config) -> list:
    """What imported MindSpore since the last look: the test process (reported once), or processes it started."""
    found = []
    tracker = getattr(config, "_mindspore_import", None)
    if tracker is not None and tracker.where is not None and not getattr(config, "_mindspore_reported", False):
        config._mindspore_reported = True
        found.append(f"mindspore was imported in the test process:\n{tracker.where}")
    log = getattr(config, "_mindspore_subprocess_log", None)
    if log is not None:
        lines = log.read_text().splitlines() if log.exists() else []
        seen = getattr(config, "_mindspore_subprocess_seen", 0)
        config._mindspore_subprocess_seen = len(lines)
        if lines[seen:]:
            found.append("processes that imported mindspore (pid, argv):\n" + "\n".join(lines[seen:]))
    return found


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Fail a test during which MindSpore got imported (by it or by a process it started)."""
    outcome = yield
    if call.when != "teardown" or not hasattr(item.config, "_mindspore_subprocess_log"):
        return
    violations = _fast_lane_violations(item.config)
    if violations:
        report = outcome.get_result()
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} started MindSpore in the fast lane without @pytest.mark.mindspore\n"
                           + "\n".join(violations))


_WHOLE_FILE_MARK = re.compile(r"^pytestmark\s*=.*\bmark\.mindspore\b", re.MULTILINE)


def pytest_ignore_collect(collection_path, config):
    """In the fast lane a test file marked ``mindspore`` as a whole is not even imported (its top-level
    ``import mindspore`` would cost the lane seconds for tests it deselects anyway)."""
    if _fast_lane(config) and collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
        if _WHOLE_FILE_MARK.search(collection_path.read_text(encoding="utf-8")):
            return True
    return None


def pytest_collection_finish(session):
    violations = _fast_lane_violations(session.config)
    if violations:
        raise pytest.UsageError("collecting the fast lane imported mindspore (a test module imports it at the top; "
                                "mark the module with pytestmark = pytest.mark.mindspore and import it lazily, or "
                                "the fast lane pays for it anyway):\n" + "\n".join(violations))


def pytest_unconfigure(config):
    log = getattr(config, "_mindspore_subprocess_log", None)
    if log is not None:
        log.unlink(missing_ok=True)
