"""Scratch directory and settings of the debugger's dump source, without NumPy or protobuf.

Kept apart from ``dump_source.py`` so that the env activation path (the ``.pth`` line, at interpreter start-up) can
set the dump up before anything compiles, at the cost of this small module only: with ``ENABLE_MS_DEBUGGER=1
MS_DEBUGGER_SOURCE=dump``, :func:`configure_early` creates the scratch directory and sets ``MINDSPORE_DUMP_CONFIG``
at start-up, so a script that compiles a graph before ``Model.train`` (an evaluation first, a warm-up call) still
gets the dump; the debugger callback then adopts that directory (:func:`adopt_early`).

Scratch directories are named ``msdebug_dump_<pid>_<random>``; those of processes that no longer run (killed before
cleaning up; tmpfs is RAM) are removed when the next one is created.
"""
from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from msdebug_hooks._log import get_logger
from msdebug_hooks.config import debugger_env
from msdebug_hooks.config.debugger_env import SOURCES
from msdebug_hooks.errors import ConfigError

__all__ = ["SOURCES", "ENV_SOURCE", "ENV_DUMP_DIR", "ENV_DUMP_KERNELS", "NET_NAME", "source_options_from_env",
           "scratch_base", "make_scratch", "configure_early", "adopt_early"]

_LOG = get_logger("debugger")
ENV_SOURCE, ENV_DUMP_DIR, ENV_DUMP_KERNELS = debugger_env.SOURCE, debugger_env.DUMP_DIR, debugger_env.DUMP_KERNELS
_DUMP_PATH_OK = re.compile(r"^/[A-Za-z0-9_/-]*$")   # MindSpore's rule for a dump path
NET_NAME = "Net"                               # the dump's net_name (directory level)
_PREFIX = "msdebug_dump_"   # + "<pid>_<random>": directories of dead processes are removed at the next start


def source_options_from_env(environ: Mapping[str, str], given: Mapping[str, Any]) -> dict[str, Any]:
    """``DebuggerCallback`` options from ``MS_DEBUGGER_SOURCE`` / ``MS_DEBUGGER_DUMP_DIR`` /
    ``MS_DEBUGGER_DUMP_KERNELS`` (explicit options win). A bad value raises ``ConfigError`` naming the variable."""
    options: dict[str, Any] = {}
    source = environ.get(ENV_SOURCE, "").strip().lower()
    if source and "source" not in given:
        if source not in SOURCES:
            raise ConfigError(ENV_SOURCE, environ[ENV_SOURCE], f"one of {', '.join(SOURCES)} (default light)")
        options["source"] = source
    if environ.get(ENV_DUMP_DIR) and "dump_dir" not in given:
        options["dump_dir"] = environ[ENV_DUMP_DIR]
    kernels = [k.strip() for k in environ.get(ENV_DUMP_KERNELS, "").split(",") if k.strip()]
    if kernels and "dump_kernels" not in given:
        options["dump_kernels"] = kernels
    return options


def scratch_base(preferred: Optional[str] = None) -> Path:
    """Where scratch dumps go: ``preferred``, else ``/dev/shm`` (RAM) when writable, else the temp dir. The path must
    satisfy MindSpore's dump-path rule (absolute, only ``[A-Za-z0-9_/-]``)."""
    if preferred:
        base = Path(preferred).expanduser().absolute()
        if not _DUMP_PATH_OK.match(str(base)):
            raise ConfigError("dump_dir", str(preferred), "an absolute path of letters, digits, '_', '-' and '/' only",
                              detail="MindSpore rejects any other dump path (no '.', no spaces)")
        return base
    for candidate in ("/dev/shm", tempfile.gettempdir(), "/tmp"):
        if os.path.isdir(candidate) and os.access(candidate, os.W_OK) and _DUMP_PATH_OK.match(candidate):
            return Path(candidate)
    raise ConfigError("dump_dir", None, "a writable directory whose path uses only [A-Za-z0-9_/-]",
                      detail="neither /dev/shm nor the temp dir qualifies; pass dump_dir")


def make_scratch(base: Path, kernels: Sequence[str] = ()) -> Path:
    """Create ``<base>/msdebug_dump_<pid>_<random>`` and point ``MINDSPORE_DUMP_CONFIG`` at a sync dump of every
    iteration into it (outputs only; ``kernels`` -> dump_mode 1). Refuses an existing ``MINDSPORE_DUMP_CONFIG``."""
    from msdebug_hooks.config.dump import DumpConfig

    current = os.environ.get("MINDSPORE_DUMP_CONFIG")
    if current:
        raise ConfigError("MINDSPORE_DUMP_CONFIG", current, "unset when the debugger's dump source is used",
                          detail="the debugger configures its own per-step dump, and MindSpore takes one dump "
                                 "config per process; unset the variable or use the light source")
    base.mkdir(parents=True, exist_ok=True)
    _remove_orphans(base)
    root = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}_", dir=base))
    if not _DUMP_PATH_OK.match(str(root)):   # mkdtemp uses [a-z0-9_]; be sure anyway
        shutil.rmtree(root, ignore_errors=True)
        raise ConfigError("dump_dir", str(base), "a path of letters, digits, '_', '-' and '/' only")
    try:
        DumpConfig(path=str(root / "dump"), net_name=NET_NAME, iteration="all", dump_mode=1 if kernels else 0,
                   kernels=list(kernels), input_output=2).apply(root / "dump_config.json")
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    _LOG.info("debugger: dump source: per-step sync dump of %s into %s (deleted step by step)",
              f"kernels {list(kernels)}" if kernels else "every kernel's outputs", root)
    return root


_early: dict[int, tuple[Path, tuple[str, ...]]] = {}   # pid -> (scratch root, kernels) set up at start-up


def configure_early(environ: Optional[Mapping[str, str]] = None) -> Optional[Path]:
    """At interpreter start-up (env activation): set the dump up now when ``MS_DEBUGGER_SOURCE=dump``. Never
    raises: a bad setting is reported by the debugger callback when training starts."""
    env = os.environ if environ is None else environ
    try:
        options = source_options_from_env(env, {})
        if options.get("source") != "dump" or env.get("MINDSPORE_DUMP_CONFIG"):
            return None
        kernels = tuple(options.get("dump_kernels", ()))
        root = make_scratch(scratch_base(options.get("dump_dir")), kernels)
    except Exception:   # noqa: BLE001 - reported later, with the variable's name, by DebuggerCallback.from_env
        return None
    _early[os.getpid()] = (root, kernels)
    atexit.register(shutil.rmtree, root, True)     # also when the script ends before any training used it
    return root


def adopt_early(kernels: Sequence[str]) -> Optional[Path]:
    """The scratch directory :func:`configure_early` made in this process, if it is still the active dump config."""
    entry = _early.pop(os.getpid(), None)
    if entry is None:
        return None
    root, early_kernels = entry
    if os.environ.get("MINDSPORE_DUMP_CONFIG") != str(root / "dump_config.json") or not root.is_dir():
        return None
    if tuple(kernels) != early_kernels:
        _LOG.warning("debugger: dump source: the dump was set up at start-up with kernels %s (MindSpore reads it "
                     "once); kernels %s are ignored", list(early_kernels) or "all", list(kernels) or "all")
    return root


def _remove_orphans(base: Path) -> None:
    """Remove scratch directories of debugger processes that no longer run (killed before cleaning up: tmpfs is
    RAM, so nothing else would ever free it)."""
    for item in base.glob(f"{_PREFIX}*_*"):
        pid = item.name[len(_PREFIX):].split("_", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(item, ignore_errors=True)
            _LOG.info("debugger: removed %s, left behind by process %s", item, pid)
        except PermissionError:   # alive, someone else's
            pass


