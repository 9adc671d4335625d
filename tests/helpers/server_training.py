"""Start an unmodified training script in a subprocess with only the debugger variables pointing at a server.

The one helper every debugger test that trains uses, against our own server or the real MindInsight. The script is
started the way an installed package starts it: ``site.addsitedir`` on a directory holding a copy of the shipped
``msdebug_hooks_autoattach.pth`` (this tree first on ``PYTHONPATH``, so its client runs), or with ``msdebug run``.
The process is always killed on the way out.
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
from typing import Callable, Iterator, Optional

from project import EXAMPLES, ROOT, fresh_env

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

    def finish(self, timeout: float = 60) -> int:
        """Wait for the script to end; its exit code."""
        return self.proc.wait(timeout)

    def records(self) -> list[dict]:
        """The dump-source script's step lines (``step S bytes B iterations I step_bytes N``) as dicts."""
        rows = []
        for parts in (line.split() for line in self.lines()):
            if parts and parts[0] == "step":
                rows.append({"step": int(parts[1]), "bytes": int(parts[3]), "iterations": int(parts[5]),
                             "step_bytes": int(parts[7])})
        return rows


def eventually(predicate, timeout: float = 60.0, what: str = "") -> None:
    """Poll ``predicate`` until it holds; AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(0.01)


def training_env(port: int, host: str = "127.0.0.1", **extra: str) -> dict:
    env = fresh_env()
    env.update(PYTHONPATH=os.pathsep.join([str(EXAMPLES), str(ROOT)]), ENABLE_MS_DEBUGGER="1",
               MS_DEBUGGER_HOST=host, MS_DEBUGGER_PORT=str(port), **extra)
    env.pop("MINDSPORE_DUMP_CONFIG", None)
    return env


@contextlib.contextmanager
def training(tmp_path: Path, port: int, *args: str, script: Path = PLAIN, name: str = "run",
             env: Optional[dict] = None, host: str = "127.0.0.1", launcher: str = "pth", log_args: bool = True,
             failure_logs: Optional[Callable[[], str]] = None, reaped: bool = False) -> Iterator[Training]:
    """``script`` with ``args`` against the debugger server at ``host:port``, in ``tmp_path/name``.

    ``launcher`` is ``pth`` (env variables only) or ``msdebug-run``; ``log_args`` adds the test scripts' ``--log``
    (and ``--save`` for the plain script); on a failure the script's output is printed, and ``failure_logs()``
    (the server's log tail) after it. ``reaped``: started by a shell that collects its exit status at once (as a
    terminal's shell does), so that no other process can read it; the returned process is the shell's.
    """
    work = tmp_path / name
    site_dir = work / "site-packages"
    site_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "msdebug_hooks_autoattach.pth", site_dir)
    log, weights, output = work / "steps.log", work / "weights.npz", work / "output.txt"
    argv = [str(script), *args]
    if log_args:
        argv[1:1] = ["--log", str(log)] + (["--save", str(weights)] if script == PLAIN else [])
    variables = training_env(port, host, **(env or {}))
    if launcher == "pth":
        code = (f"import runpy, site, sys; site.addsitedir({str(site_dir)!r}); sys.argv = {argv!r}; "
                f"runpy.run_path({str(script)!r}, run_name='__main__')")
        command = [sys.executable, "-c", code]
    elif launcher == "msdebug-run":
        variables.pop("ENABLE_MS_DEBUGGER")
        command = [str(Path(sys.executable).parent / "msdebug"), "run", "--host", host, "--port", str(port), *argv]
    else:
        raise ValueError(f"launcher={launcher!r} is not allowed: 'pth' or 'msdebug-run'")
    if reaped:
        command = ["bash", "-c", '"$@"; exit $?', "bash", *command]     # not exec'd: bash waits for it
    with open(output, "w") as out:
        proc = subprocess.Popen(command, env=variables, stdout=out, stderr=subprocess.STDOUT, cwd=work)
    run = Training(proc, log, weights, output)
    try:
        yield run
    except BaseException:
        print(run.out()[-4000:])
        if failure_logs is not None:
            print(failure_logs()[-3000:])
        raise
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
