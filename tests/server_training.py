"""Start an unmodified training script in a subprocess with only the debugger variables pointing at our own server.

The script is started the way an installed package starts it: ``site.addsitedir`` on a directory holding a copy of
the shipped ``msdebug_hooks_autoattach.pth`` (this tree first on ``PYTHONPATH``, so its client runs). The process is
always killed on the way out.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from conftest import EXAMPLES, ROOT, fresh_env

PLAIN = ROOT / "tests" / "scripts" / "plain_lenet_train.py"
DUMP = ROOT / "tests" / "scripts" / "dump_source_train.py"


@dataclass
class Training:
    proc: subprocess.Popen
    log: Path
    weights: Path
    output: Path

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def steps(self) -> int:
        return sum(1 for line in self.lines() if line.startswith("step "))

    def logged_through(self, step: int) -> bool:
        """While the training is suspended at the end of ``step``: the script's own step-end hook has logged that
        step or, when the debugger's hook runs before it, the one before; never a later one."""
        return self.steps() in (step - 1, step)

    def out(self) -> str:
        return self.output.read_text(errors="replace") if self.output.exists() else ""


def eventually(predicate, timeout: float = 60.0, what: str = "") -> None:
    """Poll ``predicate`` until it holds; AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(0.01)


def training_env(port: int, **extra: str) -> dict:
    env = fresh_env()
    env.update(PYTHONPATH=os.pathsep.join([str(EXAMPLES), str(ROOT)]), ENABLE_MS_DEBUGGER="1",
               MS_DEBUGGER_HOST="127.0.0.1", MS_DEBUGGER_PORT=str(port), **extra)
    env.pop("MINDSPORE_DUMP_CONFIG", None)
    return env


@contextlib.contextmanager
def training(tmp_path: Path, port: int, *args: str, script: Path = PLAIN, name: str = "run",
             env: Optional[dict] = None) -> Iterator[Training]:
    work = tmp_path / name
    site_dir = work / "site-packages"
    site_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "msdebug_hooks_autoattach.pth", site_dir)
    log, weights, output = work / "steps.log", work / "weights.npz", work / "output.txt"
    argv = [str(script), "--log", str(log), *args]
    if script == PLAIN:
        argv += ["--save", str(weights)]
    code = (f"import runpy, site, sys; site.addsitedir({str(site_dir)!r}); sys.argv = {argv!r}; "
            f"runpy.run_path({str(script)!r}, run_name='__main__')")
    with open(output, "w") as out:
        proc = subprocess.Popen([sys.executable, "-c", code], env=training_env(port, **(env or {})), stdout=out,
                                stderr=subprocess.STDOUT, cwd=work)
    run = Training(proc, log, weights, output)
    try:
        yield run
    except BaseException:
        print(run.out()[-4000:])
        raise
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
