"""The debugger prompt behind ``msdebug debug`` and ``msdebug serve``: a pdb-like shell (stdlib ``cmd``) over a
``DebuggerServer`` and its jobs.

Commands: one ``do_*`` method each, its docstring being its ``help``; the table is in docs/debugger-server.md.

With several ranks (``msdebug serve --ranks N``), run commands (watch, unwatch, continue, step, pause, recheck,
terminate, hits) act on every rank, kept in lockstep (``group.py``); views and listings act on the current rank
(``job N`` switches).

The training only waits when the person asked it to (it is suspended between commands, as in pdb); a blocking
command (``continue``, ``step``) blocks the prompt, never the training, and Ctrl-C turns it into a pause.

Non-interactive use (``-c "watch weight_overflow *; continue"`` or a command file) runs the commands in order, then
terminates a training that is still alive (and any the script starts after it). A script that trains again
(several ``Model.train`` calls) is followed, its watchpoints set again on each training (``script_trainings.py``).
The exit code says whether a watchpoint hit (``shell_exit.py``).

This module is the loop: reading commands, reporting what went wrong, following the script's trainings, ending the
session. The commands, one module per concern: ``shell_jobs.py`` (status, jobs, job, wait), ``shell_run.py``
(continue, step, pause, recheck, terminate), ``shell_hits.py`` (hits, the hits table), ``shell_watch.py`` (watch,
unwatch, watchpoints), ``shell_views.py`` (nodes, source, tensor, stats, save, log), ``shell_help.py`` (help with
the aliases); around them ``shell_complete.py`` (Tab completion), ``shell_parse.py`` (reading commands) and
``shell_text.py`` (tables, names).
"""
from __future__ import annotations

import cmd
import difflib
import sys
from pathlib import Path
from typing import Callable, Optional, Sequence, TextIO

from msdebug_hooks.errors import ConfigError
from msdebug_hooks.server.errors import JobError
from msdebug_hooks.server.graph import Node
from msdebug_hooks.server.group import RankGroup
from msdebug_hooks.server.job import Job, JobState
from msdebug_hooks.server.script_trainings import carry_watchpoints, next_training
from msdebug_hooks.server.server import DebuggerServer
from msdebug_hooks.server.shell_complete import ShellCompletion
from msdebug_hooks.server.shell_exit import exit_code
from msdebug_hooks.server.shell_help import ShellHelp, command_aliases
from msdebug_hooks.server.shell_hits import HitCommands
from msdebug_hooks.server.shell_jobs import JobCommands
from msdebug_hooks.server.shell_parse import BadCommand
from msdebug_hooks.server.shell_run import RunCommands
from msdebug_hooks.server.shell_views import ViewCommands
from msdebug_hooks.server.shell_watch import WatchCommands
from msdebug_hooks.server.training_notices import TrainingNotices

__all__ = ["DebuggerShell", "run_session"]


def _message(exc: BaseException) -> str:
    """An exception's text as a person reads it (``KeyError`` quotes its message; ours are sentences)."""
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return text.strip('"')


class DebuggerShell(ShellCompletion, ShellHelp, JobCommands, RunCommands, HitCommands, WatchCommands, ViewCommands,
                    cmd.Cmd):
    """The prompt. ``job`` is the job commands act on; ``process`` the training's process when we started it."""

    intro = ""

    def __init__(self, server: DebuggerServer, job: Optional[Job] = None, *, process=None,
                 stdout: TextIO = sys.stdout, interactive: bool = True, timeout: float = 3600.0,
                 output_log: Optional[Path] = None) -> None:
        super().__init__(stdout=stdout)
        self.server = server
        self.job = job
        self.group: Optional[RankGroup] = None     # every rank of a multi-rank job: run commands go to all
        self.process = process
        self.interactive = interactive
        self.timeout = timeout
        self.output_log = output_log
        self.notices = TrainingNotices(output_log)     # the training's warnings, shown here once
        self.saw_hits = False
        self.bad_input = False
        self.done = False
        self._update_prompt()

    # -- the loop -----------------------------------------------------------------------------------------------
    def say(self, text: str = "") -> None:
        self.stdout.write(text + "\n")
        self.stdout.flush()

    def _update_prompt(self) -> None:
        job, ranks = self.job, f" of {len(self.group.jobs)} ranks" if self.group is not None else ""
        state = (self.group or job).state if job is not None else ""      # a group: every rank's, if they differ
        self.prompt = "(msdebug) " if job is None else f"(msdebug job {job.id}{ranks} step {job.step} {state}) "

    def attach(self, target: "Job | RankGroup") -> None:
        """Act on a job, or on every rank of a group (views and listings on the current rank, ``job N``)."""
        if isinstance(target, RankGroup):
            self.group, self.job = target, target.jobs[0]
        else:
            self.group, self.job = None, target
        self._update_prompt()

    def _driver(self):
        """What run commands act on: the group of ranks, or the current job."""
        return self.group if self.group is not None else self._job()

    def _jobs(self) -> list[Job]:
        return list(self.group.jobs) if self.group is not None else [self._job()]

    def postcmd(self, stop: bool, line: str) -> bool:
        self.show_notices()
        self._update_prompt()
        return stop or self.done

    def show_notices(self) -> None:
        """The warnings the training wrote to its output log since the last look (``training_notices.py``)."""
        for notice in self.notices.new():
            self.say(f"!!! {notice}")

    def emptyline(self) -> bool:
        return False

    def default(self, line: str) -> bool:
        if line.strip() == "EOF":
            return self.do_quit("")
        word = line.split()[0]
        known = [n for names in command_aliases(type(self)).items() for n in (names[0], *names[1])]
        close = difflib.get_close_matches(word, known, n=1)
        self._bad(f"unknown command {word!r}; " + (f"did you mean {close[0]!r}? " if close else "") +
                  "(type help for the list)")
        return False

    def onecmd(self, line: str) -> bool:
        try:
            return super().onecmd(line)
        except (BadCommand, ConfigError, KeyError, ValueError, TypeError) as exc:
            self._bad(_message(exc))
        except TimeoutError as exc:
            self._bad(f"timed out: {exc}")
        except JobError as exc:
            self.say(f"*** {exc}")
            if not self.interactive:
                self.bad_input = True
        return False

    def _bad(self, message: str) -> None:
        self.say(f"*** {message}")
        self.bad_input = True

    def cmdloop_safely(self) -> None:
        """``cmdloop`` where Ctrl-C at the prompt does not end the session."""
        while not self.done:
            try:
                self.cmdloop()
                return
            except KeyboardInterrupt:
                self.say("^C (quit ends the session)")
                self.intro = None
                self._update_prompt()        # the states as they are now, not as before the command

    def run_commands(self, commands: Sequence[str]) -> int:
        """Non-interactive: run ``commands``; stop at the first bad one. Returns the exit code."""
        for line in commands:
            self.say(f"{self.prompt}{line}")
            self.onecmd(line)
            self.show_notices()
            self._update_prompt()
            if self.bad_input or self.done:
                break
        return self.finish()

    def finish(self) -> int:
        """End the session: terminate a training still alive, wait for our process; the exit code."""
        jobs = self._jobs() if self.job is not None else []
        if any(job.alive for job in jobs):
            try:
                self._driver().terminate(timeout=60)
            except (JobError, TimeoutError) as exc:
                self.say(f"*** could not terminate the training: {exc}")
        lost = [job for job in jobs if job.state in (JobState.LOST, JobState.CRASHED)]   # could not look to the end
        self._reap()
        self.show_notices()
        for job in lost:
            self.say(f"*** job {job.id} (rank {job.rank}) {job.state}: {job.reason}")
        return exit_code(self.saw_hits, self.bad_input or not jobs or bool(lost))

    def _reap(self, *, session_over: bool = True) -> None:
        """Once our script's trainings ended: its next training becomes the job, with the last one's watchpoints,
        unless the session is over or spans several ranks (then it is terminated); else wait for the script's exit
        (``script_trainings.py``)."""
        if self.process is None:
            return
        late = next_training(self.server, self.process, self.say, take=not session_over and self.group is None,
                             patience=self.timeout)
        if late is None:
            self.bad_input |= self.process.returncode != 0   # raised, killed or ended by a signal: not clean
            self.process = None
            return
        self._take(late, f"job {late.id}: the script trains again (rank {late.rank}), waiting at step {late.step}; "
                         "commands now act on it")

    def _take(self, late: Job, said: str) -> None:
        """Make ``late`` (a training connected after the current one) the job, with the current one's watchpoints."""
        previous = self.job
        self.attach(late)
        made, refused = carry_watchpoints(previous, late) if previous is not None else ([], [])
        self.say(said + "".join(f"; watchpoint {w.id}: {w.label} on {len(w.nodes)} node(s) set again" for w in made))
        for reason in refused:      # a watch that could not follow the script must not end as a clean exit
            self._bad(reason)

    # -- helpers ------------------------------------------------------------------------------------------------
    def _job(self) -> Job:
        if self.job is None:
            raise BadCommand("no training is connected yet")
        return self.job

    def _node(self, name: str) -> Node:
        return self._job().node(name)

    # -- leaving --------------------------------------------------------------------------------------------------
    def do_quit(self, arg: str) -> bool:
        """quit (q, exit, Ctrl-D): terminate the training if it is still alive, and leave."""
        self.done = True
        return True

    do_q = do_exit = do_EOF = do_quit


def run_session(server: DebuggerServer, connect: Callable[[], "Job | RankGroup"], *, commands: Optional[Sequence[str]],
                process=None, output_log: Optional[Path] = None, timeout: float = 3600.0,
                stdout: TextIO = sys.stdout) -> int:
    """Wait for the training (``connect``), then run ``commands`` or the interactive prompt; the exit code."""
    shell = DebuggerShell(server, process=process, stdout=stdout, interactive=commands is None, timeout=timeout,
                          output_log=output_log)
    try:
        shell.attach(connect())
    except KeyboardInterrupt:
        shell.say("stopped waiting for a training")
        return shell.finish()
    except (JobError, TimeoutError) as exc:
        shell.say(f"*** {exc}")
        return shell.finish()
    for job in shell._jobs():
        shell.say(f"job {job.id} connected from {job.peer} (rank {job.rank}, MindSpore {job.ms_version}): "
                  f"{len(job.graph)} nodes, waiting at step {job.step}")
    shell.show_notices()
    shell.say("type help for commands" + ("; run commands act on every rank, views on the current one (job N)"
                                          if shell.group is not None else ""))
    if commands is not None:
        return shell.run_commands(commands)
    shell.cmdloop_safely()
    return shell.finish()
