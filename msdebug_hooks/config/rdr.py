"""Running Data Recorder (RDR) and memory-reuse settings, and an honest answer to "does my MindSpore read them?".

MindSpore's docs describe two ways to configure RDR: a JSON file passed to ``set_context(env_config_path=...)`` holding
``{"rdr": {"enable": true, "mode": 1, "path": "/abs/dir"}}``, and the variables ``MS_RDR_ENABLE``, ``MS_RDR_MODE``,
``MS_RDR_PATH``. When both are given the file wins, key by key: MindSpore read the variables first and then let every
key present in the file override them. Data went to ``<path>/rank_<RANK_ID>/rdr/``.

MindSpore 2.10 reads neither: its binaries contain no RDR code and nothing is written (checked by running it), and
``env_config_path`` is deprecated there (it warns) with a parser that reads only ``{"sys": {"mem_reuse": bool}}``.
Nor do 2.7.1 to 2.9.0 (no ``MS_RDR_*`` name anywhere in their packages), while 2.7.0 still writes RDR data (run
once: ``mindspore_versions``). RDR is documented up to MindSpore 2.3; for 2.4 to 2.6 we have no evidence either way.
``apply()`` therefore warns, by installed version, instead of pretending the recorder is on.
"""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple, Union

from msdebug_hooks._files import atomic_write_text
from msdebug_hooks.config._common import ConfigWarning, did_you_mean
from msdebug_hooks.errors import ConfigError, ConfigErrors
from msdebug_hooks.validation import raise_all, whole_number
from msdebug_hooks.mindspore_versions import RDR_ABSENT_SINCE, RDR_VERIFIED_PRESENT

PathLike = Union[str, "os.PathLike[str]"]

RDR_VARIABLES = ("MS_RDR_ENABLE", "MS_RDR_MODE", "MS_RDR_PATH")
RDR_MODES = {1: "export only when training fails", 2: "export when training fails or ends normally"}
_MAX_PATH = 4096  # MindSpore's limit on a directory path
_RDR_KEYS = ("enable", "mode", "path")

#: Last version whose documentation describes RDR, and first version verified to ignore it.
RDR_LAST_DOCUMENTED = (2, 3)
RDR_VERIFIED_ABSENT = RDR_ABSENT_SINCE


class RDRNotSupportedWarning(ConfigWarning):
    """The installed MindSpore does not (or may not) read RDR settings: no RDR data will be written."""


class RdrSupport(NamedTuple):
    """Whether a MindSpore version reads RDR settings (None: not known) and the sentence that says so."""

    supported: Optional[bool]
    explanation: str


def rdr_support(version: Optional[Tuple[int, ...]] = None) -> RdrSupport:
    """``(supported, explanation)`` for a MindSpore version (default: the installed one, read without importing).

    ``supported`` is True up to 2.3 (documented) and for 2.7.0 (run), False from 2.7.1 on (verified), None when
    unknown.
    """
    if version is None:
        from msdebug_hooks import _mindspore  # lazily: importlib.metadata is slow to import

        version = _mindspore.installed_version()
    if not version:
        return RdrSupport(None, "MindSpore is not installed here, so whether RDR is read cannot be told.")
    text = ".".join(map(str, version))
    if version >= RDR_VERIFIED_ABSENT:
        return RdrSupport(False, f"MindSpore {text} ignores RDR: its binaries contain no RDR code and MS_RDR_* / "
                                 "the 'rdr' section of env_config_path are never read, so no RDR data will be written. "
                                 "Use a dump (DumpConfig) and the logs (LogConfig) to investigate a failure instead.")
    if version[:2] <= RDR_LAST_DOCUMENTED or tuple(version[:3]) in RDR_VERIFIED_PRESENT:
        return RdrSupport(True, f"MindSpore {text} reads RDR; data goes to <path>/rank_<RANK_ID>/rdr/.")
    return RdrSupport(None, f"MindSpore {text}: RDR is documented up to 2.3, read by 2.7.0 and absent from 2.7.1 on; "
                            "whether this version reads it was not verified. Check for <path>/rank_<RANK_ID>/rdr/ "
                            "after a run.")


def _check_bool(field: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise ConfigError(field, value, "true or false (a JSON/Python boolean)")


def _check_mode(field: str, value: Any) -> int:
    return whole_number(field, value, minimum=min(RDR_MODES), maximum=max(RDR_MODES),
                        allowed="1 (" + RDR_MODES[1] + ") or 2 (" + RDR_MODES[2] + ")")


def _check_path(field: str, value: Any) -> str:
    allowed = f"an absolute directory path (at most {_MAX_PATH} characters)"
    if not isinstance(value, (str, os.PathLike)):
        raise ConfigError(field, value, allowed)
    text = os.fspath(value)
    if not text or not os.path.isabs(text) or len(text) > _MAX_PATH or "\0" in text:
        raise ConfigError(field, text, allowed, detail="RDR supports absolute paths only" if text else "")
    return text


def _check_section_keys(section: Mapping[str, Any], name: str, known: Tuple[str, ...]) -> None:
    for key in section:
        if key not in known:
            hint = did_you_mean(str(key), known)
            warnings.warn(f"unknown key {name}.{key} is ignored by MindSpore" + (f"; {hint}" if hint else "")
                          + f" (known: {', '.join(known)})", ConfigWarning, stacklevel=3)


class RDRConfig:
    """Running Data Recorder settings, as the env-config file section and as environment variables.

    Args:
        enable: switch RDR on (``MS_RDR_ENABLE=1``) or off.
        mode: 1 exports the recorded data only when training fails; 2 also when it ends normally.
        path: absolute root directory; data lands in ``<path>/rank_<RANK_ID>/rdr/``. Required when enabled.

    On MindSpore 2.10 nothing reads these settings; ``apply()`` and ``write()`` warn with
    ``RDRNotSupportedWarning`` (see ``rdr_support()``).

    Example::

        RDRConfig(mode=2, path="/data/rdr").apply()            # MS_RDR_* variables
        RDRConfig(path="/data/rdr").write("mindspore_config.json")  # for set_context(env_config_path=...)
    """

    def __init__(self, enable: bool = True, mode: int = 1, path: Optional[PathLike] = None) -> None:
        self._validate(enable, mode, path, {"enable": "enable", "mode": "mode", "path": "path"})

    def _validate(self, enable: Any, mode: Any, path: Any, fields: Mapping[str, str]) -> None:
        errors: List[ConfigError] = []
        for attr, check, value in (("enable", _check_bool, enable), ("mode", _check_mode, mode)):
            try:
                setattr(self, attr, check(fields[attr], value))
            except ConfigError as exc:
                errors.append(exc)
        self.path: Optional[str] = None
        if path is not None:
            try:
                self.path = _check_path(fields["path"], path)
            except ConfigError as exc:
                errors.append(exc)
        elif enable is True:
            errors.append(ConfigError(fields["path"], None, "an absolute directory when RDR is enabled"))
        raise_all(errors)

    # -- reading ---------------------------------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RDRConfig":
        """From an env-config dict ``{"rdr": {...}}`` (other top-level sections are allowed and ignored)."""
        if not isinstance(data, Mapping) or not isinstance(data.get("rdr"), Mapping):
            raise ConfigError("rdr", data.get("rdr") if isinstance(data, Mapping) else data,
                              'a section {"rdr": {"enable": true, "mode": 1, "path": "/abs/dir"}}')
        section = data["rdr"]
        _check_section_keys(section, "rdr", _RDR_KEYS)
        self = cls.__new__(cls)
        self._validate(section.get("enable", False), section.get("mode", 1), section.get("path"),
                       {k: f"rdr.{k}" for k in _RDR_KEYS})
        return self

    @classmethod
    def load(cls, file: PathLike) -> "RDRConfig":
        """From an env-config JSON file."""
        with open(file, encoding="utf-8") as handle:
            try:
                data = json.load(handle)
            except json.JSONDecodeError as exc:
                raise ConfigError(os.fspath(file), "(file contents)", "a JSON object", detail=str(exc)) from None
        return cls.from_dict(data)

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> Optional["RDRConfig"]:
        """From ``MS_RDR_ENABLE`` / ``MS_RDR_MODE`` / ``MS_RDR_PATH`` (None when none is set)."""
        env = os.environ if environ is None else environ
        raw = {name: env.get(name) for name in RDR_VARIABLES}
        if all(v is None for v in raw.values()):
            return None
        errors: List[ConfigError] = []
        enable: Any = False
        if raw["MS_RDR_ENABLE"] is not None:
            text = raw["MS_RDR_ENABLE"].strip().lower()
            if text in ("0", "1"):
                enable = text == "1"
            else:
                errors.append(ConfigError("MS_RDR_ENABLE", raw["MS_RDR_ENABLE"], "0 or 1",
                                          detail="older MindSpore warned and treated it as 0"))
        mode: Any = 1
        if raw["MS_RDR_MODE"] is not None:
            text = raw["MS_RDR_MODE"].strip()
            mode = int(text) if text in ("1", "2") else raw["MS_RDR_MODE"]
        self = cls.__new__(cls)
        try:
            self._validate(enable, mode, raw["MS_RDR_PATH"] or None,
                           {"enable": "MS_RDR_ENABLE", "mode": "MS_RDR_MODE", "path": "MS_RDR_PATH"})
        except ConfigErrors as exc:
            errors.extend(exc.errors)
        except ConfigError as exc:
            errors.append(exc)
        raise_all(errors)
        return self

    @classmethod
    def resolve(cls, file_data: Optional[Mapping[str, Any]] = None,
                environ: Optional[Mapping[str, str]] = None) -> Optional["RDRConfig"]:
        """The settings MindSpore (where it supports RDR) ends up with: the variables, then every key present in the
        file's ``rdr`` section overriding them (MindSpore's docs: the configuration file takes precedence)."""
        env = os.environ if environ is None else environ
        merged: Dict[str, Any] = {}
        from_env = cls.from_env(env) if any(env.get(n) is not None for n in RDR_VARIABLES) else None
        if from_env is not None:
            merged = {"enable": from_env.enable, "mode": from_env.mode, "path": from_env.path}
        section = (file_data or {}).get("rdr")
        if isinstance(section, Mapping):
            merged.update({k: section[k] for k in _RDR_KEYS if k in section})
        if not merged:
            return None
        return cls.from_dict({"rdr": merged})

    # -- output ----------------------------------------------------------------------------------------------------

    def to_dict(self) -> Dict[str, Any]:
        """The env-config file form: ``{"rdr": {"enable": ..., "mode": ..., "path": ...}}``."""
        section: Dict[str, Any] = {"enable": self.enable, "mode": self.mode}
        if self.path is not None:
            section["path"] = self.path
        return {"rdr": section}

    def env(self) -> Dict[str, str]:
        """The environment form: ``MS_RDR_ENABLE``, ``MS_RDR_MODE`` and (when set) ``MS_RDR_PATH``."""
        env = {"MS_RDR_ENABLE": "1" if self.enable else "0", "MS_RDR_MODE": str(self.mode)}
        if self.path is not None:
            env["MS_RDR_PATH"] = self.path
        return env

    def output_dir(self, rank: Optional[Union[int, str]] = None) -> Optional[Path]:
        """``<path>/rank_<rank>/rdr/`` where a MindSpore that supports RDR writes (rank defaults to ``RANK_ID``)."""
        if self.path is None:
            return None
        rank_text = str(rank) if rank is not None else (os.environ.get("RANK_ID") or "0")
        return Path(self.path) / f"rank_{rank_text}" / "rdr"

    def write(self, file: PathLike) -> Path:
        """Write the env-config file (atomically, mode 0600) for ``set_context(env_config_path=...)``."""
        target = atomic_write_text(file, json.dumps(self.to_dict(), indent=4) + "\n")
        warn_if_rdr_unsupported(stacklevel=3)
        return target

    def apply(self, file: Optional[PathLike] = None) -> Dict[str, str]:
        """Set ``MS_RDR_*`` in ``os.environ`` (and write ``file`` when given); return the variables set.

        Warns with ``RDRNotSupportedWarning`` when the installed MindSpore does not read RDR (2.10) or may not.
        """
        if file is not None:
            atomic_write_text(file, json.dumps(self.to_dict(), indent=4) + "\n")
        env = self.env()
        os.environ.update(env)
        if "MS_RDR_PATH" not in env:
            os.environ.pop("MS_RDR_PATH", None)
        warn_if_rdr_unsupported(stacklevel=3)
        return env

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RDRConfig) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"RDRConfig(enable={self.enable!r}, mode={self.mode!r}, path={self.path!r})"


def warn_if_rdr_unsupported(stacklevel: int = 2) -> None:
    """Warn (``RDRNotSupportedWarning``) unless the installed MindSpore is known to read RDR settings."""
    supported, message = rdr_support()
    if supported is not True:
        warnings.warn(message, RDRNotSupportedWarning, stacklevel=stacklevel)


class MemReuseConfig:
    """The memory-reuse switch, ``{"sys": {"mem_reuse": bool}}``: the one thing MindSpore 2.10 still reads from the
    file given to ``set_context(env_config_path=...)`` (deprecated there: MindSpore warns when it is used).

    Memory reuse is on by default; ``MemReuseConfig(False)`` gives every tensor its own memory (more memory, but a
    tensor overwritten by another can no longer hide a bug).

    Example::

        path = MemReuseConfig(False).write("/tmp/mindspore_config.json")
        mindspore.set_context(env_config_path=str(path))
    """

    def __init__(self, mem_reuse: bool = True) -> None:
        self.mem_reuse = _check_bool("mem_reuse", mem_reuse)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "MemReuseConfig":
        section = data.get("sys") if isinstance(data, Mapping) else None
        if not isinstance(section, Mapping) or "mem_reuse" not in section:
            raise ConfigError("sys.mem_reuse", section, 'a section {"sys": {"mem_reuse": true|false}}')
        _check_section_keys(section, "sys", ("mem_reuse",))
        self = cls.__new__(cls)
        self.mem_reuse = _check_bool("sys.mem_reuse", section["mem_reuse"])
        return self

    def to_dict(self) -> Dict[str, Any]:
        return {"sys": {"mem_reuse": self.mem_reuse}}

    def env(self) -> Dict[str, str]:
        """Memory reuse has no environment form: always empty (present so every config object has ``env()``)."""
        return {}

    def write(self, file: PathLike) -> Path:
        """Write the env-config file (atomically, mode 0600)."""
        return atomic_write_text(file, json.dumps(self.to_dict(), indent=4) + "\n")

    def apply(self, file: PathLike) -> Path:
        """Write ``file`` and pass it to ``mindspore.set_context(env_config_path=...)`` (this imports MindSpore;
        MindSpore 2.10 logs that ``env_config_path`` is deprecated). Returns the file's path."""
        target = self.write(file)
        import mindspore  # only here: the caller asked for MindSpore to read the file now

        mindspore.set_context(env_config_path=str(target))
        return target

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MemReuseConfig) and self.mem_reuse == other.mem_reuse

    def __repr__(self) -> str:
        return f"MemReuseConfig(mem_reuse={self.mem_reuse!r})"


def write_env_config(file: PathLike, *configs: Union[RDRConfig, MemReuseConfig]) -> Path:
    """Write several sections (``rdr``, ``sys``) into one env-config file, atomically."""
    data: Dict[str, Any] = {}
    for config in configs:
        data.update(config.to_dict())
    target = atomic_write_text(file, json.dumps(data, indent=4) + "\n")
    if any(isinstance(c, RDRConfig) for c in configs):
        warn_if_rdr_unsupported(stacklevel=3)
    return target
