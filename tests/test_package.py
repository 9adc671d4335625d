"""The package's promises that everything else relies on."""
import re

import pytest

from project import ROOT, run_python


def test_import_does_not_import_mindspore():
    proc = run_python("""
        import sys, msdebug_hooks
        from msdebug_hooks import DumpConfig, LogConfig, RDRConfig
        print("mindspore" in sys.modules)
    """)
    assert proc.stdout.strip() == "False"


@pytest.mark.mindspore
def test_every_public_name_resolves():
    proc = run_python("""
        import msdebug_hooks
        missing = []
        for name in msdebug_hooks.__all__:
            try:
                getattr(msdebug_hooks, name)
            except Exception as exc:
                missing.append(f"{name}: {exc!r}")
        print("\\n".join(missing))
    """)
    assert proc.stdout.strip() == ""


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    commands = re.findall(r"^(python3 -m venv \.venv && .*)$", readme, flags=re.M)
    assert len(commands) == 2, commands  # exactly two set-up commands: the demo and the tests
    test_command = [c for c in commands if "pytest" in c]
    assert len(test_command) == 1 and test_command[0] in ci.splitlines()


def test_no_conftest_loads_protobuf_or_mindspore_before_the_tests_do():
    """pytest loads every conftest before any test module. One that imported protobuf first would keep MindSpore 2.7
    from switching protobuf to the parser its generated messages need (the compatibility lane fails to collect)."""
    conftests = sorted(str(path) for path in (ROOT / "tests").rglob("conftest.py"))
    assert len(conftests) >= 2, conftests
    proc = run_python(f"""
        import importlib.util, sys
        for number, path in enumerate({conftests!r}):
            spec = importlib.util.spec_from_file_location(f"conftest_{{number}}", path)
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
        print(sorted(name for name in ("google.protobuf", "grpc", "mindspore", "torch") if name in sys.modules))
    """)
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout
