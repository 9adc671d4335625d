"""The prompt's commands about the trainings (``shell.py``): status, jobs, job N (which one commands act on) and wait
(take the next training to connect)."""
from __future__ import annotations

from msdebug_hooks.server.shell_parse import BadCommand
from msdebug_hooks.server.shell_text import table

__all__ = ["JobCommands"]


class JobCommands:
    """Mixin of ``DebuggerShell``: it provides ``say``, ``server``, ``job``, ``group``, ``process``, ``timeout``,
    ``output_log``, ``_jobs`` and ``_take`` (a later training becomes the job, with the current one's watchpoints)."""

    def do_status(self, arg: str) -> None:
        """status: the current job's state, step, watchpoints and hits."""
        for job in self._jobs():
            self.say(f"job {job.id}: rank {job.rank}, {job.state} at step {job.step}, {len(job.graph or ())} nodes, "
                     f"{len(job.watchpoints)} watchpoint(s), {len(job.hits)} hit(s) here, {len(job.all_hits)} in "
                     f"all{f' ({job.reason})' if job.reason else ''}")
        if self.output_log is not None:
            self.say(f"training output: {self.output_log}")

    def do_jobs(self, arg: str) -> None:
        """jobs: every training connected to this server."""
        rows = [("*" if j is self.job else "", j.id, j.rank, j.state, j.step, j.peer, j.ms_version)
                for j in self.server.jobs]
        self.say(table(rows, ("", "job", "rank", "state", "step", "peer", "ms_version"), numeric=(1, 2, 4)))

    def do_job(self, arg: str) -> None:
        """job N: make job N the one commands act on."""
        if not arg.strip().isdigit():
            raise BadCommand(f"job {arg!r}: give a job id from the jobs list")
        job = self.server.job(int(arg))
        if self.group is not None and job not in self.group.jobs:
            self.group = None               # another training: commands act on it alone
        self.job = job
        self.say(f"job {self.job.id}: {self.job.state} at step {self.job.step}")

    def do_wait(self, arg: str) -> None:
        """wait [SECONDS]: take the next training to connect (serve), with this job's watchpoints."""
        text = arg.strip()
        if text and not text.replace(".", "", 1).isdigit():
            raise BadCommand(f"wait {text!r}: give a number of seconds, e.g. wait 600")
        late = self.server.wait_for_training(timeout=float(text or self.timeout), process=self.process)
        self._take(late, f"job {late.id} connected (rank {late.rank}), waiting at step {late.step}")
