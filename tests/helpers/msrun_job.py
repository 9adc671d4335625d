"""Run a real multi-rank MindSpore job with ``msrun`` on the CPU, bounded in time, and read what each rank did.

msrun starts its workers with ``setsid``: each worker has a process group of its own, so killing msrun's group
leaves them running. On a timeout (or any error) :func:`run_msrun` kills every descendant's process group, then
msrun's own.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from msdebug_hooks.compare.bisect_runs import stop_tree

from mindinsight_server import free_port  # msrun's scheduler binds --master_port on 127.0.0.1
from project import EXAMPLES, ROOT

VENV_BIN = Path(sys.executable).parent          # msrun and the python the workers must run
RESULT_TAG = "MSDEBUG_RESULT "


@dataclass
class MsrunJob:
    returncode: Optional[int]      # None: killed after the timeout
    output: str                    # msrun's own stdout+stderr (with --join=True it also tails the workers)
    log_dir: Path
    seconds: float

    def worker_log(self, rank: int) -> str:
        path = self.log_dir / f"worker_{rank}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def result(self, rank: int) -> dict:
        """The ``MSDEBUG_RESULT {json}`` line rank ``rank`` printed at the end."""
        for line in self.worker_log(rank).splitlines():
            if line.startswith(RESULT_TAG):
                return json.loads(line[len(RESULT_TAG):])
        raise AssertionError(f"rank {rank} printed no {RESULT_TAG.strip()} line\n{self.describe()}")

    def describe(self) -> str:
        logs = "\n".join(f"--- worker_{r}.log (tail) ---\n{self.worker_log(r)[-3000:]}" for r in range(8)
                         if (self.log_dir / f"worker_{r}.log").exists())
        return (f"msrun exit {self.returncode} after {self.seconds:.1f}s\n--- msrun (tail) ---\n"
                f"{self.output[-2000:]}\n{logs}")


def run_msrun(script: Path, args: Sequence[str], workdir: Path, *, workers: int = 2, timeout: float = 150,
              env: Optional[dict] = None) -> MsrunJob:
    """``msrun --worker_num=N --local_worker_num=N --master_port=<free> --join=True --log_dir=<workdir>/msrun_logs
    script args...``; kills the whole job if it is still running after ``timeout`` seconds."""
    log_dir = workdir / "msrun_logs"
    full_env = dict(os.environ)
    full_env["PATH"] = f"{VENV_BIN}{os.pathsep}{full_env.get('PATH', '')}"
    full_env["PYTHONPATH"] = os.pathsep.join([str(EXAMPLES), str(ROOT), full_env.get("PYTHONPATH", "")])
    full_env.update(env or {})
    command = [str(VENV_BIN / "msrun"), f"--worker_num={workers}", f"--local_worker_num={workers}",
               f"--master_port={free_port()}", "--join=True", f"--log_dir={log_dir}", "--cluster_time_out=90",
               str(script), *args]
    started = time.monotonic()
    proc = subprocess.Popen(command, cwd=workdir, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
        returncode: Optional[int] = proc.returncode
    except subprocess.TimeoutExpired:
        kill_job(proc.pid)
        output, _ = proc.communicate()
        returncode = None
    finally:
        kill_job(proc.pid)        # nothing left behind, whatever happened (also on pytest-timeout's signal)
    return MsrunJob(returncode, output or "", log_dir, time.monotonic() - started)


def kill_job(pid: int) -> None:
    """SIGKILL the process groups of ``pid``'s descendants (msrun's setsid workers), then ``pid``'s own group: the
    package's own ``stop_tree``, which ``msdebug bisect`` uses on the jobs it starts."""
    stop_tree(pid)
