"""Loaded by every Python process the fast lane's tests start (tests/conftest.py puts this folder first on
PYTHONPATH only then): importing MindSpore is recorded in ``MSDEBUG_TESTS_MINDSPORE_LOG`` and refused, so a test
that starts MindSpore without the ``mindspore`` marker fails the lane instead of slowing it down unnoticed."""
import os
import sys

_LOG = os.environ.get("MSDEBUG_TESTS_MINDSPORE_LOG")


class _RefuseMindSpore:
    def find_spec(self, name, path=None, target=None):
        if name == "mindspore" or name.startswith("mindspore."):
            with open(_LOG, "a", encoding="utf-8") as log:
                log.write(f"{os.getpid()} {' '.join(sys.argv)[:300]}\n")
            raise ImportError("the fast lane (-m 'not mindspore ...') started a process that imports mindspore: "
                              "mark the test @pytest.mark.mindspore")
        return None


if _LOG:
    sys.meta_path.insert(0, _RefuseMindSpore())
