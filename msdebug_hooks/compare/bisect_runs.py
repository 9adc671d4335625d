"""The two runs ``msdebug bisect`` compares: how each is started, watched, stopped, and reused when done before.

A run is the user's command, unmodified, started in its own session with its output in a log file, loss recording
attached from outside (:mod:`msdebug_hooks.compare.run_recording`) and, for a dump rerun, ``MINDSPORE_DUMP_CONFIG``.
Each *stage* (run A's losses, run B's losses, run A's dump of step N, ...) has its own directory; a stage that ended
well writes ``done.json`` with what defined it (the command, working directory, added variables, the stage's
settings, and a hash of every file the command names), so a second ``bisect`` in the same work directory reuses it
instead of training again, and redoes it when anything it depends on changed. A stage cut short (no ``done.json``)
is cleared and run again.

A run that exits with a non-zero status, is stopped by the disk guard or passes ``timeout`` ends the bisection with
:class:`RunFailed`, which names the run, its command and its log file. Stopping a run stops its whole process tree:
``msrun`` starts each worker in a session of its own, so the workers are found through ``/proc`` and stopped too.
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from msdebug_hooks._files import atomic_write_text
from msdebug_hooks.compare import run_recording
from msdebug_hooks.errors import ConfigError

DONE = "done.json"
LOG = "run.log"
RECORDS = "records"
POLL_SECONDS = 0.5
_TAIL_LINES = 6
_DUMP_VARIABLE = "MINDSPORE_DUMP_CONFIG"
_HASHED_BYTES = 16 * 1024 * 1024   # files the command names up to this size are hashed (scripts, configs)
_PURPOSE = {"losses": "training with its loss recorded", "dump": "rerun to dump the step where the runs part"}


class BisectError(RuntimeError):
    """The bisection cannot go on (exit status 2): the message says why and what to look at."""


class RunFailed(BisectError):
    """A run crashed, was stopped, or recorded nothing: ``run``, ``log`` and the reason are in the message."""

    def __init__(self, run: str, log: Optional[Path], message: str) -> None:
        self.run = run
        self.log = log
        super().__init__(message)


@dataclass(frozen=True)
class RunSpec:
    """One of the two runs: a command as the user types it, where and with what environment it runs.

    Args:
        name: ``"A"`` (the run under test) or ``"B"`` (the reference).
        command: an argument list, or one string split like a shell does (``shell=True``: run by ``/bin/sh -c``).
        cwd: its working directory (default: the current one).
        env: variables added to (``None``: removed from) the environment it inherits.
    """

    name: str
    command: Union[str, Sequence[str]]
    cwd: Optional[str] = None
    env: Mapping[str, Optional[str]] = field(default_factory=dict)
    shell: bool = False

    def argv(self) -> list[str]:
        if self.shell:
            return ["/bin/sh", "-c", self.command if isinstance(self.command, str) else shlex.join(self.command)]
        if isinstance(self.command, str):
            try:
                argv = shlex.split(self.command)
            except ValueError as exc:
                raise ConfigError(f"command {self.name}", self.command, f"a command line ({exc})") from None
        else:
            argv = [str(part) for part in self.command]
        if not argv:
            raise ConfigError(f"command {self.name}", self.command, "a command that starts the training, e.g. "
                                                                    "'python train.py'")
        return argv

    def text(self) -> str:
        return self.command if isinstance(self.command, str) else shlex.join(self.command)

    def directory(self) -> Path:
        return Path(self.cwd).expanduser().absolute() if self.cwd else Path.cwd()

    def check(self) -> None:
        """Refuse what cannot work, before anything runs: an empty command, a missing working directory, an
        ``msrun`` that would return before its workers end (without ``--join=True`` it does not wait for them)."""
        argv = self.argv()
        if self.cwd and not self.directory().is_dir():
            raise ConfigError(f"--cwd-{self.name.lower()}", self.cwd, "an existing directory")
        launcher = next((i for i, part in enumerate(argv) if os.path.basename(part) == "msrun"), None)
        if launcher is not None and not _joins(argv[launcher + 1:]):
            raise ConfigError(f"command {self.name}", self.text(),
                              "an msrun command with --join=True (without it msrun returns while its workers still "
                              "train, and the run would be read before it ends)")

    def fingerprint(self) -> dict[str, Any]:
        """What the run's result depends on that we can see: command, directory, variables, files it names."""
        files = {}
        for part in self.argv():
            path = (self.directory() / part) if not os.path.isabs(part) else Path(part)
            try:
                if not path.is_file():
                    continue
                stat = path.stat()
                files[part] = (hashlib.sha256(path.read_bytes()).hexdigest() if stat.st_size <= _HASHED_BYTES
                               else f"{stat.st_size} bytes, modified {stat.st_mtime_ns}")   # a data file: no read
            except OSError:
                continue
        return {"command": self.text(), "shell": self.shell, "cwd": str(self.directory()),
                "env": {k: v for k, v in sorted(self.env.items())}, "files": files}


def _joins(arguments: Sequence[str]) -> bool:
    """Whether msrun's arguments hold ``--join=True`` (or ``--join True``)."""
    for position, part in enumerate(arguments):
        if part.startswith("--join="):
            return part.split("=", 1)[1].strip() == "True"
        if part == "--join":
            return position + 1 < len(arguments) and arguments[position + 1] == "True"
    return False


@dataclass
class Stage:
    """One stage of one run: its directory, its settings and, once done, what it left."""

    spec: RunSpec
    kind: str                       # "losses" or "dump"
    directory: Path
    settings: dict[str, Any]
    seconds: float = 0.0
    reused: bool = False

    @property
    def log(self) -> Path:
        return self.directory / LOG

    @property
    def records(self) -> Path:
        """Where the run's loss records go (``loss_rank_<r>.jsonl``)."""
        return self.directory / RECORDS

    @property
    def dump(self) -> Path:
        return self.directory / "dump"

    def key(self) -> dict[str, Any]:
        return {"run": self.spec.fingerprint(), "kind": self.kind, "settings": self.settings}

    def done(self) -> bool:
        """Whether a run with the same key already finished here (then it is reused)."""
        marker = self.directory / DONE
        try:
            saved = json.loads(marker.read_text())
        except (OSError, ValueError):
            return False
        if saved.get("key") != json.loads(json.dumps(self.key())):
            return False
        self.seconds = float(saved.get("seconds", 0.0))
        self.reused = True
        return True

    def mark_done(self) -> None:
        atomic_write_text(self.directory / DONE, json.dumps({"key": self.key(), "seconds": self.seconds}, indent=1)
                          + "\n", mode=0o644)

    def reset(self) -> None:
        """An empty directory for a fresh run (what an earlier, unfinished run left is removed)."""
        if self.directory.exists():
            shutil.rmtree(self.directory)
        self.directory.mkdir(parents=True)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux ``/proc``; elsewhere none are found and only the group is stopped)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read().decode(errors="replace")
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def stop_tree(pid: int) -> None:
    """SIGKILL the process groups of ``pid``'s descendants (msrun's workers have their own), then ``pid``'s."""
    for process in [*_descendants(pid), pid]:
        try:
            os.killpg(os.getpgid(process), signal.SIGKILL)
        except (ProcessLookupError, PermissionError, OSError):
            continue


def log_tail(log: Path, lines: int = _TAIL_LINES) -> str:
    """The last non-empty lines of a log, indented, for an error message."""
    try:
        with open(log, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 16384))
            text = handle.read().decode(errors="replace")
    except OSError:
        return ""
    kept = [line.rstrip() for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join(f"    {line[:300]}" for line in kept)


def run_stage(stage: Stage, shim_dir: Path, *, stop_after: Optional[int] = None,
              dump_config: Optional[Path] = None, timeout: Optional[float] = None,
              monitor: Optional[Callable[[bool], Optional[str]]] = None) -> None:
    """Run the stage's command in its (already reset) directory to its end, or until ``monitor(finished)`` returns
    why to stop it; then ``monitor(True)`` once more, and the stage is marked done. ``MINDSPORE_DUMP_CONFIG`` is
    ``dump_config`` or unset: a dump config left in the user's shell would make the loss runs dump every step.

    Raises :class:`RunFailed` for a non-zero exit, a timeout or a stop by ``monitor``.
    """
    spec = stage.spec
    base = dict(os.environ)
    for name, value in spec.env.items():
        if value is None:
            base.pop(name, None)
        else:
            base[name] = value
    env = run_recording.run_environment(base, shim_dir, stage.records, stop_after)
    env.pop(_DUMP_VARIABLE, None)   # a dump config of the user's shell would make every run dump everything
    if dump_config is not None:
        env[_DUMP_VARIABLE] = str(dump_config)
    started = time.monotonic()
    with open(stage.log, "wb") as log:
        log.write(f"$ {spec.text()}\n".encode())
        log.flush()
        try:
            proc = subprocess.Popen(spec.argv(), cwd=spec.directory(), env=env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            raise RunFailed(spec.name, stage.log, f"run {spec.name} ({spec.text()}) could not start: "
                                                  f"{exc.strerror or exc}") from None
        try:
            reason = _watch(proc, started, timeout, monitor)
        finally:
            if proc.poll() is None:
                stop_tree(proc.pid)
                proc.wait()
    stage.seconds = time.monotonic() - started
    where = f"{spec.name} ({spec.text()})"
    purpose = _PURPOSE[stage.kind]
    if reason is not None:
        raise RunFailed(spec.name, stage.log, f"run {where} was stopped after {stage.seconds:.1f} s ({purpose}): "
                                              f"{reason}; its output: {stage.log}")
    if proc.returncode != 0:
        status = (f"was killed by signal {-proc.returncode}" if proc.returncode < 0 else
                  f"exited with status {proc.returncode}")
        tail = log_tail(stage.log)
        raise RunFailed(spec.name, stage.log, f"run {where} {status} after {stage.seconds:.1f} s ({purpose}); its "
                                              f"output: {stage.log}" + (f", ending:\n{tail}" if tail else ""))
    if monitor is not None:
        reason = monitor(True)
        if reason is not None:
            raise RunFailed(spec.name, stage.log, f"run {where} ({purpose}): {reason}")
    stage.mark_done()


def _watch(proc: subprocess.Popen, started: float, timeout: Optional[float],
           monitor: Optional[Callable[[bool], Optional[str]]]) -> Optional[str]:
    """Wait for ``proc``; the reason it had to be stopped, or ``None`` when it ended by itself."""
    while True:
        try:
            proc.wait(timeout=POLL_SECONDS)
            return None
        except subprocess.TimeoutExpired:
            pass
        if timeout is not None and time.monotonic() - started > timeout:
            return f"still running after --timeout {timeout:g} s"
        if monitor is not None:
            reason = monitor(False)
            if reason is not None:
                return reason


def remove_work(directory: Path, created: bool, entries: Sequence[str]) -> None:
    """Remove what a command of runs made: the whole work directory if it made it, else only its own ``entries``
    (a directory the user gave may hold other things)."""
    if created:
        shutil.rmtree(directory, ignore_errors=True)
        return
    for name in entries:
        path = directory / name
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        elif path.exists():
            path.unlink()
