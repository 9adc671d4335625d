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
Exit code: 1 if any watchpoint hit, 0 if none did, 2 on bad input (an unknown command, a bad condition, a missing
node) or when the training could not be looked at (it never connected, it was lost before it ended, a watchpoint
could not be set again on the script's next training, or the script was killed or died of a signal).
"""
from __future__ import annotations

import cmd
import inspect
import shlex
import sys
from pathlib import Path
from typing import Callable, Optional, Sequence, TextIO

import numpy as np

from msdebug_hooks._files import atomic_path
from msdebug_hooks.errors import ConfigError
from msdebug_hooks.server.errors import JobError
from msdebug_hooks.server.graph import CATEGORIES, Node
from msdebug_hooks.server.group import RankGroup
from msdebug_hooks.server.hits import Hit
from msdebug_hooks.server.job import Job, JobState
from msdebug_hooks.server.script_trainings import carry_watchpoints, next_training
from msdebug_hooks.server.server import DebuggerServer
from msdebug_hooks.server.shell_text import BadCommand, short_name, source_location, table

__all__ = ["DebuggerShell", "run_session", "EXIT_OK", "EXIT_HITS", "EXIT_BAD"]

EXIT_OK, EXIT_HITS, EXIT_BAD = 0, 1, 2
MAX_ROWS = 60
_ALIASES = frozenset({"c", "cont", "s", "n", "next", "p", "print", "q", "exit", "EOF", "search", "where", "wp"})


class DebuggerShell(cmd.Cmd):
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
        self.saw_hits = False
        self.bad_input = False
        self.done = False
        self._update_prompt()

    # -- the loop -----------------------------------------------------------------------------------------------
    def say(self, text: str = "") -> None:
        self.stdout.write(text + "\n")
        self.stdout.flush()

    def _update_prompt(self) -> None:
        job = self.job
        ranks = f" of {len(self.group.jobs)} ranks" if self.group is not None else ""
        self.prompt = "(msdebug) " if job is None else f"(msdebug job {job.id}{ranks} step {job.step} {job.state}) "

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
        self._update_prompt()
        return stop or self.done

    def emptyline(self) -> bool:
        return False

    def get_names(self) -> list[str]:
        """Commands for ``help``'s list, without the short aliases (each command's help names them)."""
        return [name for name in super().get_names() if name[3:] not in _ALIASES]

    def do_help(self, arg: str) -> None:
        """help [COMMAND]: the commands, or what one does."""
        method = getattr(self, f"do_{arg.strip()}", None) if arg.strip() else None
        if method is not None and method.__doc__:
            self.say(inspect.cleandoc(method.__doc__))
            return
        super().do_help(arg)

    def default(self, line: str) -> bool:
        if line.strip() == "EOF":
            return self.do_quit("")
        self._bad(f"unknown command {line.split()[0]!r}; type help for the list")
        return False

    def onecmd(self, line: str) -> bool:
        try:
            return super().onecmd(line)
        except (BadCommand, ConfigError, KeyError, ValueError, TypeError) as exc:
            self._bad(str(exc).strip('"'))
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

    def run_commands(self, commands: Sequence[str]) -> int:
        """Non-interactive: run ``commands``; stop at the first bad one. Returns the exit code."""
        for line in commands:
            self.say(f"{self.prompt}{line}")
            self.onecmd(line)
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
        lost = [job for job in jobs if job.state is JobState.LOST]
        self._reap()
        for job in lost:
            self.say(f"*** job {job.id} (rank {job.rank}) was lost: {job.reason}")
        if self.bad_input or not jobs or lost:
            return EXIT_BAD
        return EXIT_HITS if self.saw_hits else EXIT_OK

    def _reap(self, *, session_over: bool = True) -> None:
        """Once our script's trainings ended: its next training becomes the job, with the last one's watchpoints,
        unless the session is over or spans several ranks (then it is terminated); else wait for the script's exit
        (``script_trainings.py``)."""
        if self.process is None:
            return
        late = next_training(self.server, self.process, self.say, take=not session_over and self.group is None,
                             patience=self.timeout)
        if late is None:
            self.bad_input |= self.process.returncode < 0    # killed, or died of a signal: not a clean look
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

    def _print_hits(self, hits: Sequence[Hit]) -> None:
        if not hits:
            return
        self.saw_hits = True
        ordered = sorted(hits, key=lambda h: (h.step, h.node.is_parameter, h.node.index))
        rows = [(h.step, h.rank, short_name(h.node.name), h.slot, h.watchpoint.label, h.describe(),
                 source_location(h.node)) for h in ordered]
        self.say(f"{len(hits)} hit(s):")
        self.say(table(rows, ("step", "rank", "node", "slot", "watchpoint", "detail", "source"), numeric=(0, 1, 3)))

    def _after_run(self, hits: Sequence[Hit]) -> None:
        for job in self._jobs():
            rank = f" (rank {job.rank})" if self.group is not None else ""
            if job.alive:
                self.say(f"job {job.id}{rank} {job.state} at step {job.step}")
            else:
                self.say(f"job {job.id}{rank} {job.state}: {job.reason}")
        if not any(job.alive for job in self._jobs()) and all(job.state is not JobState.LOST
                                                               for job in self._jobs()):
            self._reap(session_over=False)
        self._print_hits(hits)

    # -- commands: where are we ---------------------------------------------------------------------------------
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

    # -- commands: the graph ------------------------------------------------------------------------------------
    def do_nodes(self, arg: str) -> None:
        """nodes [PATTERN] [CATEGORY] [stack=TEXT] [all]: list nodes. PATTERN is a glob (*, ?) or a substring;
        CATEGORY one of weight, gradient, activation, parameter, operator; stack=TEXT matches source lines
        (e.g. stack=train.py:42); 'all' lifts the 60-row limit. Also: search."""
        pattern, category, stack, show_all = "", None, "", False
        for token in shlex.split(arg):
            if token in CATEGORIES:
                category = token
            elif token.startswith("stack="):
                stack = token[len("stack="):]
            elif token == "all":
                show_all = True
            else:
                pattern = token
        nodes = self._job().nodes(pattern, category=category, stack=stack)
        shown = nodes if show_all else nodes[:MAX_ROWS]
        rows = [(n.index, n.category, n.type, n.outputs, n.name) for n in shown]
        self.say(table(rows, ("#", "category", "type", "outputs", "name"), numeric=(0, 3)))
        if len(shown) < len(nodes):
            self.say(f"... {len(nodes) - len(shown)} more (add 'all', or narrow the pattern)")
        self.say(f"{len(nodes)} node(s)")

    do_search = do_nodes

    def do_source(self, arg: str) -> None:
        """source NAME (where): the source lines behind a node (innermost first; > marks the training's own line)."""
        node = self._node(arg.strip())
        if not node.stack:
            self.say(f"{node.name}: the graph carries no source lines for it (the dump source has them)")
            return
        own = node.source_frame
        for frame in node.stack:
            self.say(f"{'>' if frame is own else ' '} {frame.file_path}:{frame.line_no}  {frame.code_line}")

    do_where = do_source

    # -- commands: watchpoints ----------------------------------------------------------------------------------
    def do_watch(self, arg: str) -> None:
        """watch CONDITION [PARAM=VALUE ...] [NODES ...]: set a watchpoint. CONDITION is a MindInsight id
        (weight_overflow, gradient_too_large, tensor_overflow, weight_not_changed, ...) or a condition name,
        optionally with :PARAM=VALUE,...; NODES are names, globs or a category (default: what the condition is
        for, e.g. every weight for weight_*; '*' for all). Example: watch gradient_too_large abs_mean_gt=1e3 *"""
        tokens = shlex.split(arg)
        if not tokens:
            raise BadCommand("watch needs a condition, e.g. watch weight_overflow")
        name, params, nodes = tokens[0], [], []
        for token in tokens[1:]:
            (params if "=" in token else nodes).append(token)
        spec = name if not params else f"{name}{',' if ':' in name else ':'}{','.join(params)}"
        selected: object = None
        if len(nodes) == 1:
            selected = nodes[0]
        elif nodes:
            job = self._job()
            chosen: dict[str, None] = {}
            for pattern in nodes:
                for node in job.nodes(pattern) if job.graph.find(pattern) is None else [job.node(pattern)]:
                    chosen.setdefault(node.name, None)
            selected = list(chosen)
        made = self._driver().watch(spec, selected)
        for watchpoint in made if isinstance(made, list) else [made]:
            self.say(f"watchpoint {watchpoint.id}: {watchpoint.label} on {len(watchpoint.nodes)} node(s)")

    def do_unwatch(self, arg: str) -> None:
        """unwatch ID|all: delete a watchpoint, or all of them."""
        target = arg.strip()
        if target not in ("all", "*") and not target.isdigit():
            raise BadCommand(f"unwatch {target!r}: give a watchpoint id or 'all'")
        ids = self._driver().unwatch(None if target in ("all", "*") else int(target))
        self.say(f"deleted watchpoint(s) {', '.join(map(str, ids)) or 'none'}")

    def do_watchpoints(self, arg: str) -> None:
        """watchpoints (wp): the current job's watchpoints."""
        rows = [(w.id, w.label, w.condition, len(w.nodes)) for w in self._job().watchpoints.values()]
        self.say(table(rows, ("id", "as given", "condition", "nodes"), numeric=(0, 3)))

    do_wp = do_watchpoints

    # -- commands: running ----------------------------------------------------------------------------------------
    def do_continue(self, arg: str) -> None:
        """continue (c, cont): run until a watchpoint hits or the script ends (its later trainings too, with the same
        watchpoints); Ctrl-C pauses it at the next step end."""
        while True:
            job = self._driver()
            try:
                hits = job.run_until_hit(timeout=self.timeout)
            except KeyboardInterrupt:
                self.say("pausing at the next step end ...")
                job.pause()
                self._after_run([])
                return
            self._after_run(hits)
            if hits or self.bad_input or self._driver() is job or not self.job.alive:
                return
            self.say(f"continuing job {self.job.id}")

    do_c = do_cont = do_continue

    def do_step(self, arg: str) -> None:
        """step [N] (s, next, n): run N steps (default 1); stops earlier on a hit; Ctrl-C pauses."""
        text = arg.strip() or "1"
        if not text.isdigit() or int(text) < 1:
            raise BadCommand(f"step {text!r}: give a number of steps >= 1")
        job = self._driver()
        try:
            hits = job.run(int(text), timeout=self.timeout)
        except KeyboardInterrupt:
            self.say("pausing at the next step end ...")
            job.pause()
            hits = []
        self._after_run(hits)

    do_s = do_next = do_n = do_step

    def do_pause(self, arg: str) -> None:
        """pause: stop a running training at its next step end."""
        step = self._driver().pause()
        self.say(f"paused at step {step}")

    def do_recheck(self, arg: str) -> None:
        """recheck: evaluate every watchpoint again on this step's values."""
        hits = self._driver().recheck()
        self.say(f"recheck at step {self._job().step}: {len(hits)} hit(s)")
        self._print_hits(hits)

    def do_hits(self, arg: str) -> None:
        """hits [all]: the hits of this suspension (all: every hit of the session)."""
        job = self._driver()
        hits = job.all_hits if arg.strip() == "all" else job.hits
        if not hits:
            self.say("no hits")
            return
        self._print_hits(hits)

    def do_terminate(self, arg: str) -> None:
        """terminate: stop the training (it ends cleanly, its end hooks run)."""
        self._driver().terminate()
        for job in self._jobs():
            self.say(f"job {job.id} {job.state}")
        self._reap()

    # -- commands: tensors ----------------------------------------------------------------------------------------
    def _tensor_args(self, arg: str, extra: int = 0) -> tuple[list[str], str, int]:
        words, step, slot = [], "current", 0
        for token in shlex.split(arg):
            if token in ("previous", "prev"):
                step = "previous"
            elif token in ("current", "cur"):
                step = "current"
            elif token.startswith("slot="):
                if not token[5:].isdigit():
                    raise BadCommand(f"{token}: slot must be an int >= 0")
                slot = int(token[5:])
            else:
                words.append(token)
        if len(words) != 1 + extra:
            raise BadCommand("give the node name" + (" and a file" if extra else ""))
        return words, step, slot

    def do_stats(self, arg: str) -> None:
        """stats NAME [previous] [slot=N]: statistics of a node's output (computed by the training)."""
        (name,), step, slot = self._tensor_args(arg)
        s = self._job().statistics(name, step, slot=slot)
        rows = [("dtype", s.dtype), ("shape", list(s.shape)), ("count", s.count), ("min", s.min), ("max", s.max),
                ("mean", s.mean), ("nan", s.nan_count), ("+inf", s.pos_inf_count), ("-inf", s.neg_inf_count),
                ("zero", s.zero_count), ("< 0", s.negative_count), ("> 0", s.positive_count)]
        self.say(f"{self._node(name).name} ({step}, step {self._job().step}):")
        self.say(table(rows, ("statistic", "value"), numeric=(1,)))

    def do_tensor(self, arg: str) -> None:
        """tensor NAME [previous] [slot=N] (p, print): a node's output values (summarised when large)."""
        (name,), step, slot = self._tensor_args(arg)
        value = self._job().tensor(name, step, slot=slot)
        finite = value[np.isfinite(value)] if np.issubdtype(value.dtype, np.floating) else value
        summary = (f"min {finite.min():.6g}  max {finite.max():.6g}  mean {finite.astype(np.float64).mean():.6g}"
                   if finite.size else "no finite values")
        self.say(f"{self._node(name).name} ({step}, step {self._job().step}): {value.dtype} {list(value.shape)}  "
                 f"{summary}")
        self.say(np.array2string(value, threshold=200, edgeitems=3, precision=6, max_line_width=110))

    do_p = do_print = do_tensor

    def do_save(self, arg: str) -> None:
        """save NAME FILE.npy [previous] [slot=N]: write a node's output to a .npy file (atomically)."""
        (name, target), step, slot = self._tensor_args(arg, extra=1)
        if not target.endswith(".npy"):
            raise BadCommand(f"save {target!r}: the file name must end in .npy")
        value = self._job().tensor(name, step, slot=slot)
        with atomic_path(target, mode=0o644) as tmp:
            with open(tmp, "wb") as out:
                np.save(out, value)
        self.say(f"saved {self._node(name).name} ({step}, step {self._job().step}) to {target}")

    # -- leaving --------------------------------------------------------------------------------------------------
    def do_quit(self, arg: str) -> bool:
        """quit (q, exit, Ctrl-D): terminate the training if it is still alive, and leave."""
        self.done = True
        return True

    do_q = do_exit = do_EOF = do_quit

    def do_log(self, arg: str) -> None:
        """log [N]: the last N lines (default 20) of the training's output."""
        if self.output_log is None or not self.output_log.exists():
            self.say("the training's output goes to the terminal")
            return
        count = int(arg) if arg.strip().isdigit() else 20
        lines = self.output_log.read_text(errors="replace").splitlines()[-count:]
        self.say("\n".join(lines))


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
    shell.say("type help for commands" + ("; run commands act on every rank, views on the current one (job N)"
                                          if shell.group is not None else ""))
    if commands is not None:
        return shell.run_commands(commands)
    shell.cmdloop_safely()
    return shell.finish()
