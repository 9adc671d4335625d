"""MindSpore's logging variables (``GLOG_*``, ``MS_SUBMODULE_LOG_v``, ``logger_*``), built and checked before use.

MindSpore reads them once, at ``import mindspore``. It raises there for a bad ``GLOG_v``, ``GLOG_logtostderr`` or
``GLOG_stderrthreshold``, but it only *warns* about an unknown submodule or a bad submodule level (and then ignores
it), and it silently ignores ``GLOG_log_max``, a name the older docs use that MindSpore never reads. ``LogConfig``
rejects all of those up front, naming the setting, the value and what is allowed.
"""
from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Union

from msdebug_hooks.config._common import ConfigWarning, did_you_mean, strict_int
from msdebug_hooks.mindspore_versions import installed_text as _installed_text, log_submodules
from msdebug_hooks.errors import ConfigError, ConfigErrors
from msdebug_hooks.validation import raise_all

PathLike = Union[str, "os.PathLike[str]"]
LevelLike = Union[str, int]

#: GLOG level number -> name, as MindSpore documents them (``GLOG_v=1`` is INFO).
LEVEL_NAMES = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_LEVELS_ALLOWED = "0-4 or a name: 0/DEBUG, 1/INFO, 2/WARNING, 3/ERROR, 4/CRITICAL (case-insensitive)"
_ENV_LEVELS_ALLOWED = "a single digit 0-4 (0-DEBUG, 1-INFO, 2-WARNING, 3-ERROR, 4-CRITICAL)"

#: The 39 C++ submodule names MindSpore 2.10 knows; each version's list is in ``mindspore_versions.log_submodules``.
SUBMODULES_2_10 = log_submodules((2, 10))

#: Every variable a LogConfig renders, in rendering order.
LOG_VARIABLES = ("GLOG_v", "GLOG_logtostderr", "GLOG_log_dir", "GLOG_stderrthreshold", "MS_SUBMODULE_LOG_v",
                 "GLOG_max_log_size", "logger_maxBytes", "logger_backupCount")
#: The name some MindSpore docs use; MindSpore 2.10 never reads it.
LOG_MAX_ALIAS = "GLOG_log_max"

# MindSpore 2.10's own check for a log directory it has to create (mindspore/log.py).
_LOG_DIR_CHARS = re.compile(r"^[/0-9a-zA-Z@_\-.:\\]+$")
_LOG_DIR_ALLOWED = "an absolute directory of letters, digits and / @ _ - . : \\ only"
_SUBMODULE_TEXT_ALLOWED = 'a brace-wrapped list "{NAME:level,NAME:level}" with levels 0-4, e.g. "{PARSER:2,ANALYZER:2}"'
_GLOG_SIZE_LIMIT_MB = 4096  # upstream glog treats max_log_size >= 4096 as 1 MB

# parameter name -> variable it renders (used as the error field when parsing the environment)
_PARAM_TO_ENV = {
    "level": "GLOG_v", "to_stderr": "GLOG_logtostderr", "log_dir": "GLOG_log_dir",
    "stderr_threshold": "GLOG_stderrthreshold", "submodules": "MS_SUBMODULE_LOG_v",
    "max_log_size_mb": "GLOG_max_log_size", "logger_max_bytes": "logger_maxBytes",
    "logger_backup_count": "logger_backupCount",
}


def parse_level(value: LevelLike, field: str = "level", *, names: bool = True) -> int:
    """``"INFO"``, ``"info"``, ``1`` or ``"1"`` -> 1. With ``names=False`` only what MindSpore itself accepts
    (one digit 0-4) passes: ``GLOG_v=INFO`` makes ``import mindspore`` raise."""
    if isinstance(value, bool):
        raise ConfigError(field, value, _LEVELS_ALLOWED if names else _ENV_LEVELS_ALLOWED)
    if isinstance(value, int) and 0 <= value <= 4:
        return value
    if isinstance(value, str):
        text = value.strip()
        if text in ("0", "1", "2", "3", "4"):
            return int(text)
        if names and text.upper() in LEVEL_NAMES:
            return LEVEL_NAMES.index(text.upper())
        if not names and text.upper() in LEVEL_NAMES:
            raise ConfigError(field, value, _ENV_LEVELS_ALLOWED,
                              detail=f"MindSpore raises ValueError at import; write {LEVEL_NAMES.index(text.upper())}")
    raise ConfigError(field, value, _LEVELS_ALLOWED if names else _ENV_LEVELS_ALLOWED,
                      detail="" if names else "MindSpore raises ValueError at import for this value")


def parse_submodule_text(text: str, field: str = "MS_SUBMODULE_LOG_v") -> Dict[str, str]:
    """``"{PARSER:2, ANALYZER:2}"`` -> ``{"PARSER": "2", "ANALYZER": "2"}`` (syntax only; names and levels are checked
    by LogConfig). MindSpore ignores the whole variable on a syntax error, with one warning."""
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")):
        raise ConfigError(field, text, _SUBMODULE_TEXT_ALLOWED,
                          detail="MindSpore warns and ignores the whole setting")
    pairs: Dict[str, str] = {}
    for item in body[1:-1].split(","):
        name, sep, level = item.partition(":")
        name, level = name.strip(), level.strip()
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or not level:
            raise ConfigError(field, text, _SUBMODULE_TEXT_ALLOWED,
                              detail=f"cannot read {item.strip()!r}; MindSpore warns and ignores the whole setting")
        pairs[name] = level
    return pairs


def _mindspore_rank(environ: Mapping[str, str]) -> str:
    """The rank MindSpore names the log sub-directory after: RANK_ID, then OMPI_COMM_WORLD_RANK, then MS_NODE_ID."""
    from msdebug_hooks.rank import mindspore_log_rank

    return mindspore_log_rank(environ)


class LogConfig:
    """MindSpore's log settings as one validated object; ``apply()`` it before ``import mindspore``.

    Args:
        level: ``GLOG_v``, the level for everything (Python and C++): ``"DEBUG"``/``"INFO"``/``"WARNING"``/
            ``"ERROR"``/``"CRITICAL"`` (any case) or 0-4. MindSpore's default is WARNING.
        submodules: ``MS_SUBMODULE_LOG_v``, per-C++-submodule levels that override ``level`` there, e.g.
            ``{"PARSER": "WARNING", "ANALYZER": 2}``. Names are the installed MindSpore's submodules (2.10: 39).
        to_stderr: ``GLOG_logtostderr``. True (default) logs to the screen; False logs to files under ``log_dir``.
        log_dir: ``GLOG_log_dir``, absolute; required when ``to_stderr=False``. Logs land in
            ``<log_dir>/rank_<id>/logs/`` (see ``log_location()``).
        stderr_threshold: ``GLOG_stderrthreshold``, the level also echoed to the screen while logging to files.
        max_log_size_mb: ``GLOG_max_log_size``, size in MB of one C++ log file before glog starts a new one
            (MindSpore's default 50). Some MindSpore docs call it ``GLOG_log_max``; pass ``log_max=`` to use that name.
        logger_max_bytes: ``logger_maxBytes``, size in bytes of one Python log file (default 52428800).
        logger_backup_count: ``logger_backupCount``, how many rotated Python log files are kept (default 30).

    Every rejection raises ``ConfigError`` (a ``ValueError``) naming the setting, the value and what is allowed;
    settings that would have no effect (file-only settings while logging to the screen) emit a ``ConfigWarning``.

    Example::

        LogConfig(level="INFO", submodules={"PARSER": "WARNING", "ANALYZER": "WARNING"}).apply()
        import mindspore   # now logs INFO, except PARSER and ANALYZER at WARNING
    """

    def __init__(self, level: LevelLike = "WARNING", submodules: Optional[Mapping[str, LevelLike]] = None, *,
                 to_stderr: bool = True, log_dir: Optional[PathLike] = None,
                 stderr_threshold: Optional[LevelLike] = None, max_log_size_mb: Optional[int] = None,
                 logger_max_bytes: Optional[int] = None, logger_backup_count: Optional[int] = None,
                 log_max: Optional[int] = None) -> None:
        if log_max is not None:
            warnings.warn(f"{LOG_MAX_ALIAS} (log_max=) is not read by MindSpore; the C++ log size variable is "
                          f"GLOG_max_log_size (MB). Using max_log_size_mb={log_max!r}.", ConfigWarning, stacklevel=2)
            if max_log_size_mb is not None and max_log_size_mb != log_max:
                raise ConfigError("log_max", log_max, f"the same value as max_log_size_mb={max_log_size_mb!r}, "
                                  "or only one of the two (they are the same setting)")
            max_log_size_mb = log_max
        self._build(dict(level=level, submodules=submodules, to_stderr=to_stderr, log_dir=log_dir,
                         stderr_threshold=stderr_threshold, max_log_size_mb=max_log_size_mb,
                         logger_max_bytes=logger_max_bytes, logger_backup_count=logger_backup_count),
                    labels={k: k for k in _PARAM_TO_ENV}, from_env=False, stacklevel=3)

    # -- validation -----------------------------------------------------------------------------------------------

    def _build(self, values: Dict[str, Any], *, labels: Mapping[str, str], from_env: bool, stacklevel: int) -> None:
        errors: List[ConfigError] = []

        def check(fn, *args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except ConfigErrors as exc:
                errors.extend(exc.errors)
            except ConfigError as exc:
                errors.append(exc)
            return None

        self.level: int = check(parse_level, values["level"], labels["level"], names=not from_env)
        self.to_stderr: bool = check(self._check_to_stderr, values["to_stderr"], labels["to_stderr"])
        self.log_dir: Optional[str] = check(self._check_log_dir, values["log_dir"], labels["log_dir"])
        threshold = values["stderr_threshold"]
        self.stderr_threshold: Optional[int] = None if threshold is None else check(
            parse_level, threshold, labels["stderr_threshold"], names=not from_env)
        self.submodules: Dict[str, int] = check(self._check_submodules, values["submodules"],
                                                labels["submodules"], from_env) or {}
        self.max_log_size_mb: Optional[int] = check(
            self._optional_int, values["max_log_size_mb"], labels["max_log_size_mb"], 1,
            "a positive whole number of MB")
        self.logger_max_bytes: Optional[int] = check(
            self._optional_int, values["logger_max_bytes"], labels["logger_max_bytes"], 0,
            "a whole number of bytes >= 0 (0 = never rotate)")
        self.logger_backup_count: Optional[int] = check(
            self._optional_int, values["logger_backup_count"], labels["logger_backup_count"], 0, "a whole number >= 0")
        if self.to_stderr is False and values["log_dir"] is None:
            errors.append(ConfigError(labels["log_dir"], None, f"an absolute directory when {labels['to_stderr']} "
                                      "is off (logging to files)",
                                      detail="MindSpore raises ValueError at import otherwise"))
        raise_all(errors)
        self._warn_no_effect(labels, stacklevel + 1)

    @staticmethod
    def _check_to_stderr(value: Any, field: str) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip() in ("0", "1"):
            return value.strip() == "1"
        raise ConfigError(field, value, "True (log to the screen) or False (log to files); in the environment 1 or 0")

    @staticmethod
    def _check_log_dir(value: Any, field: str) -> Optional[str]:
        if value is None:
            return None
        if not isinstance(value, (str, os.PathLike)):
            raise ConfigError(field, value, _LOG_DIR_ALLOWED)
        text = os.fspath(value)
        if not os.path.isabs(text):
            raise ConfigError(field, text, _LOG_DIR_ALLOWED,
                              detail="a relative directory would depend on each process's working directory")
        if not _LOG_DIR_CHARS.match(text):
            bad = sorted({c for c in text if not _LOG_DIR_CHARS.match(c)})
            raise ConfigError(field, text, _LOG_DIR_ALLOWED, detail=f"found {''.join(bad)!r}; MindSpore raises "
                              "ValueError when it has to create such a directory")
        return text

    @staticmethod
    def _check_submodules(value: Any, field: str, from_env: bool) -> Dict[str, int]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise ConfigError(field, value, "a mapping of submodule name to level, e.g. {'PARSER': 'WARNING'}")
        errors: List[ConfigError] = []
        levels: Dict[str, int] = {}
        known = log_submodules()   # the installed MindSpore's (2.7-2.9 lack HYPER_OFFLOAD)
        for name, level in value.items():
            if not isinstance(name, str) or name not in known:
                hint = did_you_mean(str(name), known)
                errors.append(ConfigError(
                    f"{field}[{name!r}]", name,
                    f"one of MindSpore {_installed_text()}'s submodules: " + ", ".join(known),
                    detail=(hint + " " if hint else "") + "names are case-sensitive; MindSpore only warns "
                    "'Undefined module name' and ignores it"))
                continue
            try:
                levels[name] = parse_level(level, f"{field}[{name!r}]", names=not from_env)
            except ConfigError as exc:
                errors.append(ConfigError(exc.field, exc.value, exc.allowed,
                                          detail="MindSpore only warns 'Illegal log level value' and ignores it"))
        raise_all(errors)
        return levels

    @staticmethod
    def _optional_int(value: Any, field: str, minimum: int, allowed: str) -> Optional[int]:
        return None if value is None else strict_int(field, value, minimum=minimum, allowed=allowed)

    def _warn_no_effect(self, labels: Mapping[str, str], stacklevel: int) -> None:
        if self.to_stderr:
            ignored = [labels[k] for k in ("log_dir", "stderr_threshold", "max_log_size_mb", "logger_max_bytes",
                                           "logger_backup_count") if getattr(self, k) is not None]
            if ignored:
                verb = "has" if len(ignored) == 1 else "have"
                warnings.warn(f"{', '.join(ignored)} {verb} no effect while MindSpore logs to the screen "
                              f"({labels['to_stderr']} on); turn it off to write log files.",
                              ConfigWarning, stacklevel=stacklevel)
        if self.max_log_size_mb is not None and self.max_log_size_mb >= _GLOG_SIZE_LIMIT_MB:
            warnings.warn(f"{labels['max_log_size_mb']}={self.max_log_size_mb}: glog treats sizes of "
                          f"{_GLOG_SIZE_LIMIT_MB} MB or more as 1 MB; use at most {_GLOG_SIZE_LIMIT_MB - 1}.",
                          ConfigWarning, stacklevel=stacklevel)

    # -- reading what is set --------------------------------------------------------------------------------------

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> "LogConfig":
        """The configuration ``environ`` (default ``os.environ``) gives MindSpore, checked the way MindSpore checks it
        at import, plus the checks MindSpore skips (submodule names and levels, sizes). Empty variables count as
        unset, as in MindSpore. A relative ``GLOG_log_dir`` is resolved against the current directory, with a
        warning. ``GLOG_log_max`` is read as ``GLOG_max_log_size`` with a warning (MindSpore ignores it)."""
        env = os.environ if environ is None else environ
        get = lambda name: (env.get(name) or "").strip() or None  # noqa: E731  (MindSpore strips; empty = unset)
        values: Dict[str, Any] = {param: get(var) for param, var in _PARAM_TO_ENV.items()}
        values["level"] = values["level"] or "2"
        values["to_stderr"] = values["to_stderr"] or "1"
        alias = get(LOG_MAX_ALIAS)
        if alias is not None:
            if values["max_log_size_mb"] is None:
                warnings.warn(f"{LOG_MAX_ALIAS}={alias} is not read by MindSpore (it reads GLOG_max_log_size, in MB); "
                              "read here as GLOG_max_log_size.", ConfigWarning, stacklevel=2)
                values["max_log_size_mb"] = alias
            else:
                warnings.warn(f"{LOG_MAX_ALIAS}={alias} is not read by MindSpore; GLOG_max_log_size is set and used.",
                              ConfigWarning, stacklevel=2)
        if values["log_dir"] is not None and not os.path.isabs(values["log_dir"]):
            resolved = os.path.abspath(values["log_dir"])
            warnings.warn(f"GLOG_log_dir={values['log_dir']} is relative; MindSpore resolves it against the current "
                          f"directory ({resolved}), so each process may log somewhere else.",
                          ConfigWarning, stacklevel=2)
            values["log_dir"] = resolved
        labels = dict(_PARAM_TO_ENV)
        syntax_errors: List[ConfigError] = []
        if values["submodules"] is not None:
            try:
                values["submodules"] = parse_submodule_text(values["submodules"], labels["submodules"])
            except ConfigError as exc:  # report it together with anything else that is wrong
                syntax_errors.append(exc)
                values["submodules"] = None
        try:
            config = cls._from_values(values, labels)
        except ConfigErrors as exc:
            raise ConfigErrors([*syntax_errors, *exc.errors]) from None
        except ConfigError as exc:
            if syntax_errors:
                raise ConfigErrors([*syntax_errors, exc]) from None
            raise
        if syntax_errors:
            raise syntax_errors[0]
        return config

    @classmethod
    def _from_values(cls, values: Dict[str, Any], labels: Mapping[str, str]) -> "LogConfig":
        self = cls.__new__(cls)
        self._build(values, labels=labels, from_env=True, stacklevel=4)
        return self

    # -- output ---------------------------------------------------------------------------------------------------

    @property
    def level_name(self) -> str:
        return LEVEL_NAMES[self.level]

    def env(self) -> Dict[str, str]:
        """The environment variables for this configuration (``GLOG_v`` and ``GLOG_logtostderr`` always; the rest
        only when set)."""
        env = {"GLOG_v": str(self.level), "GLOG_logtostderr": "1" if self.to_stderr else "0"}
        if self.log_dir is not None:
            env["GLOG_log_dir"] = self.log_dir
        if self.stderr_threshold is not None:
            env["GLOG_stderrthreshold"] = str(self.stderr_threshold)
        if self.submodules:
            env["MS_SUBMODULE_LOG_v"] = "{" + ",".join(f"{k}:{v}" for k, v in self.submodules.items()) + "}"
        if self.max_log_size_mb is not None:
            env["GLOG_max_log_size"] = str(self.max_log_size_mb)
        if self.logger_max_bytes is not None:
            env["logger_maxBytes"] = str(self.logger_max_bytes)
        if self.logger_backup_count is not None:
            env["logger_backupCount"] = str(self.logger_backup_count)
        return env

    def stale_variables(self, environ: Optional[Mapping[str, str]] = None) -> List[str]:
        """Logging variables set in ``environ`` that this configuration does not set (they would still apply)."""
        env = os.environ if environ is None else environ
        mine = self.env()
        return [name for name in (*LOG_VARIABLES, LOG_MAX_ALIAS) if name not in mine and env.get(name)]

    def apply(self, *, replace: bool = False) -> Dict[str, str]:
        """Set the variables in ``os.environ`` and return them.

        MindSpore reads them at ``import mindspore``: applied later, this process keeps its logging (a warning says
        so) and only child processes see the change. Logging variables this configuration does not set are left
        alone (with a warning naming them) unless ``replace=True`` removes them.
        """
        env = self.env()
        stale = self.stale_variables()
        if replace:
            for name in stale:
                del os.environ[name]
        elif stale:
            warnings.warn(f"{', '.join(f'{n}={os.environ[n]}' for n in stale)} still set and not part of this "
                          "LogConfig; MindSpore will use it. Pass replace=True to remove it.",
                          ConfigWarning, stacklevel=2)
        os.environ.update(env)
        from msdebug_hooks import _mindspore  # lazily: importlib.metadata is slow to import

        if _mindspore.is_imported():
            warnings.warn("mindspore is already imported in this process and read its log settings then; these take "
                          "effect in new processes only (apply before 'import mindspore').",
                          ConfigWarning, stacklevel=2)
        return env

    def log_location(self, rank: Optional[Union[int, str]] = None) -> Optional[Path]:
        """Where MindSpore writes the log files: ``<log_dir>/rank_<id>/logs/``, or None when logging to the screen.

        ``rank`` defaults to what MindSpore uses: ``RANK_ID``, else ``OMPI_COMM_WORLD_RANK``, else ``MS_NODE_ID``,
        else 0. The Python log there is ``mindspore.log.<pid>``; C++ logs follow glog's
        ``mindspore.<host>.<user>.log.<LEVEL>.<timestamp>.<pid>``.

        Under ``msrun`` (checked with MindSpore 2.10) each worker writes to its own ``rank_<rank>/logs/``, while
        ``rank_0/logs/`` also holds the files of msrun itself and of its scheduler process (both run with
        ``RANK_ID=0``; tell them apart by pid). The workers' stdout/stderr go elsewhere: msrun's ``--log_dir``
        holds ``worker_<rank>.log`` and ``scheduler.log``.
        """
        if self.to_stderr or self.log_dir is None:
            return None
        rank_text = str(rank) if rank is not None else _mindspore_rank(os.environ)
        return Path(os.path.realpath(self.log_dir)) / f"rank_{rank_text}" / "logs"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LogConfig) and self.env() == other.env()

    def __repr__(self) -> str:
        parts = [f"level={self.level_name!r}"]
        if self.submodules:
            parts.append("submodules=" + repr({k: LEVEL_NAMES[v] for k, v in self.submodules.items()}))
        if not self.to_stderr:
            parts.append("to_stderr=False")
        for name in ("log_dir", "stderr_threshold", "max_log_size_mb", "logger_max_bytes", "logger_backup_count"):
            if getattr(self, name) is not None:
                parts.append(f"{name}={getattr(self, name)!r}")
        return f"LogConfig({', '.join(parts)})"
