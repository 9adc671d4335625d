"""Which statistics engine runs, its warm-up, its disk cache, and the numpy fallback when numba is missing.

Each case runs in a fresh interpreter: what is imported, loaded or warned about happens once per process.
"""
from __future__ import annotations

import os
import shutil
import stat

import pytest
from project import ROOT, run_python


def test_import_stays_light_and_warm_up_loads_the_compiled_engine():
    out = run_python("""
        import sys
        import msdebug_hooks
        from msdebug_hooks import warm_up_statistics
        from msdebug_hooks.conditions import TensorOverflowCondition, check_many
        print("numba" in sys.modules, "mindspore" in sys.modules)
        print(warm_up_statistics(), "numba" in sys.modules, warm_up_statistics())
        import numpy as np
        print(check_many([TensorOverflowCondition()], np.array([1.0, np.inf], np.float32))[0].hit)
    """).stdout.split()
    assert out == ["False", "False", "numba", "True", "numba", "True"]


def test_engine_variable_chooses_numpy_without_importing_numba():
    out = run_python("""
        import sys
        import numpy as np
        from msdebug_hooks.conditions import compute_statistics, statistics_engine, warm_up_statistics
        print(warm_up_statistics(), statistics_engine())
        print(compute_statistics(np.arange(100_000, dtype=np.float32)).max, "numba" in sys.modules)
    """, env={"MSDEBUG_STATISTICS_ENGINE": "numpy"}).stdout.split()
    assert out == ["numpy", "numpy", "99999.0", "False"]


def test_without_numba_numpy_runs_and_says_so_once():
    proc = run_python("""
        import logging, sys
        sys.modules["numba"] = None            # what a missing package looks like to an import
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
        import numpy as np
        from msdebug_hooks.conditions import compute_statistics, statistics_engine, warm_up_statistics
        x = np.linspace(-1, 1, 100_001, dtype=np.float32)
        for _ in range(3):
            s = compute_statistics(x)
        print(warm_up_statistics(), s.max, s.min, s.zero_count)
    """)
    assert proc.stdout.split() == ["numpy", "1.0", "-1.0", "1"]
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and "numpy's chunked pass" in warnings[0] and "numba" in warnings[0], proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("cache_variable", ["NUMBA_CACHE_DIR", "XDG_CACHE_HOME"])
def test_compiled_kernels_come_from_the_disk_cache_of_a_read_only_install(tmp_path, cache_variable):
    """A read-only package directory (a system install): numba keeps its cache in NUMBA_CACHE_DIR, or without it
    in the user's cache directory (XDG_CACHE_HOME here), and a second process loads the kernels from there instead
    of compiling them."""
    if cache_variable == "XDG_CACHE_HOME" and os.geteuid() == 0:
        pytest.skip("running as root: a chmod-read-only directory stays writable for root, so numba caches in it")
    install = tmp_path / "site"
    shutil.copytree(ROOT / "msdebug_hooks", install / "msdebug_hooks",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for path in sorted(install.rglob("*"), reverse=True):
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    install.chmod(install.stat().st_mode & ~stat.S_IWUSR)
    cache = tmp_path / "numba-cache"
    code = """
        import msdebug_hooks, numpy as np
        assert msdebug_hooks.__file__.startswith(%r), msdebug_hooks.__file__
        from msdebug_hooks.conditions import warm_up_statistics
        print(warm_up_statistics())
        from msdebug_hooks.conditions import _kernels
        print(sum(len(d.stats.cache_hits) for d in (_kernels.accumulate, _kernels.accumulate_segments)))
    """ % str(install)
    env = {"PYTHONPATH": str(install), cache_variable: str(cache), "PYTHONDONTWRITEBYTECODE": "1"}
    if cache_variable != "NUMBA_CACHE_DIR":
        env["NUMBA_CACHE_DIR"] = ""   # unset: numba treats an empty value as not given
    try:
        compiling = run_python(code, env=env, cwd=tmp_path, timeout=600)
        loading = run_python(code, env=env, cwd=tmp_path, timeout=600)
    finally:
        for path in [install, *install.rglob("*")]:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    first, second = compiling.stdout.split(), loading.stdout.split()
    notice = "compiling the watchpoint statistics kernels for this machine"
    assert notice in compiling.stderr and notice not in loading.stderr   # a long wait is explained, a short one not
    assert first == ["numba", "0"]               # compiled, and written to the cache
    assert any(cache.rglob("*.nbi")) and not any(install.rglob("*.nbi"))
    assert second[0] == "numba" and int(second[1]) >= 3   # every signature loaded from the cache
    assert os.access(cache, os.W_OK)


def test_public_names_resolve():
    out = run_python("""
        import msdebug_hooks, msdebug_hooks.conditions as c
        print(msdebug_hooks.warm_up_statistics is c.warm_up_statistics, callable(c.compute_statistics_batch))
    """).stdout.split()
    assert out == ["True", "True"]

