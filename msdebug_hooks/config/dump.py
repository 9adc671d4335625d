"""``DumpConfig``: MindSpore's dump JSON (``MINDSPORE_DUMP_CONFIG``) built, checked and applied from Python.

MindSpore 2.10 reads the dump config once, at the first graph compile, and reports one mistake per run, hours into a
queued job; several mistakes are silent (``"iteration": "0-"`` dumps nothing, unknown keys are ignored). ``DumpConfig``
checks everything up front: every rejection MindSpore would raise is a :class:`~msdebug_hooks.errors.ConfigError`
(all of them at once), every silent trap a :class:`DumpConfigWarning`. The rules are in ``_dump_keys.py`` (per key)
and ``_dump_rules.py`` (across keys).

Example::

    from msdebug_hooks import DumpConfig
    DumpConfig(path="/data/dump", net_name="LeNet", iteration="8|9").apply()   # before the first graph compile
    # or, for a failure seen at cur_step_num 10: DumpConfig.around_step(10, path="/data/dump").apply()
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

from msdebug_hooks import _files
from msdebug_hooks._log import get_logger
from msdebug_hooks.config import _dump_keys
from msdebug_hooks.config import _dump_rules as rules
from msdebug_hooks.config._common import ConfigWarning
from msdebug_hooks.errors import ConfigError
from msdebug_hooks.validation import raise_all, whole_number

__all__ = ["DumpConfig", "DumpConfigWarning", "default_config_dir"]

PathLike = Union[str, "os.PathLike[str]"]
ENV_CONFIG = "MINDSPORE_DUMP_CONFIG"
ENV_DIAGNOSTIC = "MS_DIAGNOSTIC_DATA_PATH"
_log = get_logger(__name__)

# constructor argument -> (section, key); the order is the order of keys in the written JSON
_COMMON_FIELDS = ("dump_mode", "path", "net_name", "iteration", "saved_data", "input_output", "kernels",
                  "support_device", "op_debug_mode", "statistic_category", "overflow_number", "initial_iteration",
                  "file_format")
_E2E_FIELDS = ("enable", "trans_flag", "save_kernel_args", "stat_calc_mode", "device_stat_precision_mode",
               "sample_mode", "sample_num")
_LIST_FIELDS = ("kernels", "support_device", "statistic_category")


class DumpConfigWarning(ConfigWarning):
    """A dump setting MindSpore accepts but that will not do what it seems to (ignored, remapped, dumps nothing)."""


def default_config_dir() -> Path:
    """Where :meth:`DumpConfig.apply` writes when no file is given: ``$XDG_CACHE_HOME/msdebug-hooks/dump-configs``
    (``~/.cache/...`` by default). Outside the dump directory on purpose: the dump path may not exist yet, may be on
    another machine's view of a shared disk, and MindSpore copies the config into ``<path>/rank_N/.dump_metadata``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "msdebug-hooks" / "dump-configs"


class DumpConfig:
    """A MindSpore 2.10 sync (e2e) or async dump config, validated on construction.

    Args mirror the JSON keys of ``common_dump_settings`` and ``e2e_dump_settings`` (``None`` leaves a key out, so
    MindSpore's default applies). ``e2e=True`` writes the ``e2e_dump_settings`` section (sync dump; without it
    MindSpore 2.10 sleeps 3 s in warnings and Ascend dumps nothing). ``target`` (``"CPU"``, ``"GPU"``, ``"Ascend"``)
    turns on the device-dependent rules; with ``None`` a setting rejected on only some devices is a warning.

    Raises:
        ConfigError: (a ``ValueError``; ``ConfigErrors`` when several) naming each key, its value and what is allowed.

    Attributes: the field values, ``target``, and ``warnings`` (the texts of the warnings issued).
    """

    def __init__(self, *, path: str = "", net_name: str = "Net", iteration: str = "all", dump_mode: int = 0,
                 input_output: int = 0, kernels: Sequence[str] = (),
                 support_device: Sequence[int] = (0, 1, 2, 3, 4, 5, 6, 7),
                 saved_data: Optional[str] = None, op_debug_mode: Optional[int] = None,
                 statistic_category: Optional[Sequence[str]] = None, overflow_number: Optional[int] = None,
                 initial_iteration: Optional[int] = None, file_format: Optional[str] = None,
                 e2e: bool = True, enable: Optional[bool] = True, trans_flag: Optional[bool] = None,
                 save_kernel_args: Optional[bool] = None, stat_calc_mode: Optional[str] = None,
                 device_stat_precision_mode: Optional[str] = None, sample_mode: Optional[int] = None,
                 sample_num: Optional[int] = None, target: Optional[str] = None) -> None:
        values = dict(locals())
        if isinstance(path, os.PathLike):
            values["path"] = os.fspath(path)
        for name in _COMMON_FIELDS + _E2E_FIELDS:
            value = values[name]
            if name in _LIST_FIELDS and isinstance(value, (list, tuple)):
                value = list(value)  # a str stays a str, so the type rule names it
            setattr(self, name, value)
        self.e2e = e2e
        self.target = _normalise_target(target)
        if not isinstance(e2e, bool):
            raise ConfigError("e2e", e2e, "True (write e2e_dump_settings: sync dump) or False (leave it out)")
        if not e2e:
            errors = [ConfigError(f"{rules.E2E}.{n}", getattr(self, n),
                                  "left out (None) when e2e=False: the section is not written")
                      for n in _E2E_FIELDS if getattr(self, n) is not None and n != "enable"]
            raise_all(errors)
        self.warnings: tuple[str, ...] = ()
        self._validate(self.to_dict(), emit=True)

    # -- construction from JSON --------------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: Mapping[str, Any], target: Optional[str] = None) -> "DumpConfig":
        """Validate an existing dump JSON document (as loaded) and return it as a ``DumpConfig``.

        Unknown keys are reported (with the closest known key) and dropped from :meth:`to_dict`.
        """
        config = cls.__new__(cls)
        config.target = _normalise_target(target)
        config.warnings = ()
        config._validate(d, emit=True)
        common = d[rules.COMMON]
        section = d.get(rules.E2E, rules.MISSING)
        e2e = section if isinstance(section, dict) else {}
        for name in _COMMON_FIELDS:
            setattr(config, name, common.get(name, "" if name == "path" else None))
        for name in _E2E_FIELDS:
            setattr(config, name, e2e.get(name))
        config.e2e = section is not rules.MISSING
        return config

    @classmethod
    def load(cls, file: PathLike, target: Optional[str] = None) -> "DumpConfig":
        """Read and validate a dump JSON file. Bad JSON raises ``ConfigError`` naming the file, line and column."""
        path = Path(file).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(str(path), f"byte {exc.start}", "a UTF-8 JSON file", detail=exc.reason) from None
        except OSError as exc:   # some errors (EIO on a device file) come without the file's name
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        duplicates: list[str] = []

        def reject_constant(name: str) -> Any:
            raise ConfigError(str(path), name, "strict JSON (NaN and Infinity are not JSON numbers)")

        try:
            doc = json.loads(text, object_pairs_hook=lambda pairs: _no_duplicates(pairs, duplicates),
                             parse_constant=reject_constant)
        except json.JSONDecodeError as exc:
            lines = text.splitlines()
            at_end = not text[exc.pos:].strip()
            line = lines[exc.lineno - 1].strip() if exc.lineno <= len(lines) else ""
            raise ConfigError(f"{path}:{exc.lineno}:{exc.colno}", "<end of file>" if at_end else line,
                              "strict JSON (double-quoted keys, no comments, no trailing commas)",
                              detail=f"{exc.msg}; the file ends before the JSON does: truncated or empty?"
                              if at_end else exc.msg) from None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DumpConfigWarning)  # issued below, together with the duplicates
            config = cls.from_dict(doc, target=target)
        config.warnings = tuple(f"key {key!r} appears twice in {path}: the last value is used" for key in duplicates
                                ) + config.warnings
        _warn_user(config.warnings)
        return config

    @classmethod
    def around_step(cls, step: int, **fields: Any) -> "DumpConfig":
        """Dump only the failing step and the one before (MindSpore's docs recommend dumping only what is needed).

        ``step`` is the 1-based ``cur_step_num`` at which the failure was seen (e.g. by ``LossGuard``); MindSpore
        numbers dump iterations from 0 (plus ``initial_iteration``), so step N selects ``"N-2|N-1"``, clamped at the
        first iteration: ``around_step(5)`` -> ``"3|4"``, ``around_step(1)`` -> ``"0"``.
        """
        whole_number("step", step, minimum=1,
                     allowed="a 1-based step number >= 1 (cb_params.cur_step_num of the failing step)")
        if "iteration" in fields:
            raise ConfigError("iteration", fields["iteration"], "not given: around_step(step) computes it")
        offset = fields.get("initial_iteration") or 0
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            offset = 0  # the constructor rejects it with the right message
        failing = step - 1 + offset
        before = max(failing - 1, offset)
        iteration = str(failing) if before == failing else f"{before}|{failing}"
        return cls(iteration=iteration, **fields)

    # -- output -------------------------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The JSON document MindSpore reads (``from_dict(c.to_dict())`` gives an equal config)."""
        common = {name: getattr(self, name) for name in _COMMON_FIELDS if getattr(self, name) is not None}
        doc: dict = {rules.COMMON: common}
        if self.e2e:
            doc[rules.E2E] = {name: getattr(self, name) for name in _E2E_FIELDS if getattr(self, name) is not None}
        return doc

    def to_json(self) -> str:
        """The JSON text written by :meth:`write`: one key per line, lists kept on one line."""
        sections = []
        for name, content in self.to_dict().items():
            lines = [f"    {json.dumps(k)}: {json.dumps(v)}" for k, v in content.items()]
            sections.append(f"  {json.dumps(name)}: {{\n" + ",\n".join(lines) + "\n  }" if lines
                            else f"  {json.dumps(name)}: {{}}")
        return "{\n" + ",\n".join(sections) + "\n}\n"

    def write(self, file: PathLike) -> Path:
        """Write the JSON atomically (temp file + rename, mode 0600, parent directories created); return its path."""
        self._validate(self.to_dict(), emit=False)  # attributes may have been changed since construction
        return _files.atomic_write_text(Path(file).expanduser().absolute(), self.to_json(), mode=0o600)

    def default_file(self) -> Path:
        """``default_config_dir()/<net_name>-<content hash>.json``: same config, same file (safe for many ranks)."""
        digest = hashlib.sha256(self.to_json().encode()).hexdigest()[:12]
        return default_config_dir() / f"{self.net_name}-{digest}.json"

    def dump_dir(self, environ: Optional[Mapping[str, str]] = None) -> str:
        """The directory MindSpore will dump into: ``path``, or ``$MS_DIAGNOSTIC_DATA_PATH/debug_dump`` when ``path``
        is empty (looked up in ``environ``, default ``os.environ``). Raises ``ConfigError`` when MindSpore would."""
        if self.path:
            return self.path
        environ = os.environ if environ is None else environ
        base = environ.get(ENV_DIAGNOSTIC, "")
        if not base:
            raise ConfigError(f"{rules.COMMON}.path", self.path,
                              f"an absolute path, or {ENV_DIAGNOSTIC} set when path is empty",
                              detail="MindSpore: 'Dump path is empty. Please set it in dump json file or environment "
                                     "variable `MS_DIAGNOSTIC_DATA_PATH`.'")
        problems = rules.path_problems(base + "/debug_dump")
        if problems:
            raise ConfigError(ENV_DIAGNOSTIC, base, "an absolute path of letters, digits, '-', '_' and '/' "
                              "(MindSpore dumps into $MS_DIAGNOSTIC_DATA_PATH/debug_dump)", detail=problems)
        return base + "/debug_dump"

    def env(self, file: PathLike, diagnostic_data_path: Optional[str] = None) -> dict[str, str]:
        """The environment MindSpore needs for this config written at ``file`` (nothing is set)."""
        env = {ENV_CONFIG: str(Path(file).expanduser().absolute())}
        if not self.path:
            source = dict(os.environ)
            if diagnostic_data_path is not None:
                source[ENV_DIAGNOSTIC] = diagnostic_data_path
            self.dump_dir(source)
            env[ENV_DIAGNOSTIC] = source[ENV_DIAGNOSTIC]
        return env

    def apply(self, file: Optional[PathLike] = None, *, diagnostic_data_path: Optional[str] = None,
              ranks: Optional[Sequence[int]] = None) -> dict[str, str]:
        """Write the config (to :meth:`default_file` unless ``file`` is given) and set ``MINDSPORE_DUMP_CONFIG`` (and
        ``MS_DIAGNOSTIC_DATA_PATH`` when ``path`` is empty) in ``os.environ``; return the variables set.

        Call it before MindSpore compiles its first graph (and before ``mindspore.communication.init()``): MindSpore
        reads the variable once, at that moment. If this process has already compiled a graph, a
        ``DumpConfigWarning`` says the setting is ignored.

        Multi-rank jobs: every rank calls ``apply()`` and MindSpore writes each rank's data to ``<path>/rank_<rank>/``.
        ``ranks=[1]`` dumps on rank 1 only: on the other ranks ``apply()`` sets nothing and returns ``{}``. Pick ranks
        this way, not with ``support_device``: that lists device ids (``DEVICE_ID``, the *local* rank on each node
        under msrun), is ignored on the CPU, and a rank number there dumps on the wrong process (or none) as soon as a
        job spans several nodes. When this process's ``DEVICE_ID`` is missing from ``support_device`` on GPU/Ascend a
        ``DumpConfigWarning`` says that it will dump nothing.
        """
        from msdebug_hooks import rank as _rank

        if ranks is not None:
            wanted = _check_ranks(ranks)
            if not _rank.is_scheduler():
                me = _rank_before_init(_rank)
                if me not in wanted:
                    _log.info("dump config not applied on rank %d (ranks=%s)", me, sorted(wanted))
                    return {}
        device = _rank.device_id()
        if (device is not None and _rank.world_size() > 1 and self.target != "CPU" and not _rank.is_scheduler()
                and isinstance(self.support_device, list) and device not in self.support_device):
            _warn_user([f"support_device {self.support_device} does not list this process's device id {device} "
                        f"(DEVICE_ID; rank {_rank.rank_id()}): on GPU and Ascend MindSpore dumps nothing here. "
                        f"support_device takes device ids, not ranks; to dump some ranks only, keep every device id "
                        f"and pass apply(ranks=[...])."])
        env = self.env(file if file is not None else self.default_file(), diagnostic_data_path)
        self.write(env[ENV_CONFIG])
        os.environ.update(env)
        compiled = compiled_graph_count()
        if compiled:
            _warn_user([f"MindSpore has already compiled {compiled} graph(s) in this process and read its dump "
                        f"setting then (once per process): {ENV_CONFIG}={env[ENV_CONFIG]} is ignored until a new "
                        f"process starts. Apply the DumpConfig before the first compile, or train in a subprocess."])
        _log.info("dump config applied: %s=%s (dumps into %s)", ENV_CONFIG, env[ENV_CONFIG], self.dump_dir(env))
        return env

    # -- queries ------------------------------------------------------------------------------------------------------
    def selects_iteration(self, iteration: int) -> bool:
        """True if MindSpore dumps 0-based dump iteration ``iteration`` under this config."""
        return rules.iteration_matches(self.iteration, iteration)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DumpConfig) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.to_dict()[rules.COMMON].items())
        return f"DumpConfig({fields}, e2e={self.e2e})"

    # -- internals ----------------------------------------------------------------------------------------------------
    def _validate(self, doc: Any, *, emit: bool) -> None:
        errors, found = rules.check(doc, self.target)
        raise_all(errors)
        if emit:
            self.warnings = tuple(found)
            _warn_user(found)


def compiled_graph_count() -> int:
    """How many graphs MindSpore has compiled in this process, read from its compile caches without importing it.

    0 when MindSpore is not imported. The caches hold the phases of live cells and ``jit`` functions (MindSpore 2.10:
    ``mindspore.graph.api.ms_compile_cache`` / ``cells_compile_cache``; where each version keeps them is in
    ``mindspore_versions``); a cell that was garbage-collected takes its entry with it, so 0 is "no compiled graph that
    is still alive".
    """
    from msdebug_hooks.mindspore_versions import COMPILE_CACHE_MODULES, TRACE_CACHE_MODULES

    count = 0
    for name in COMPILE_CACHE_MODULES:
        api = sys.modules.get(name)
        if api is None:
            continue
        count += len(getattr(api, "ms_compile_cache", None) or ())
        cells = getattr(api, "cells_compile_cache", None) or {}
        count += sum(len(phases) for phases in list(cells.values()))
    for name in TRACE_CACHE_MODULES:
        trace = sys.modules.get(name)
        if trace is not None:
            count += len(getattr(trace, "_trace_compile_cache", None) or ())
    return count


def _check_ranks(ranks: Any) -> set[int]:
    allowed = "None (every rank) or a list of global ranks (ints >= 0), e.g. [0] or [1, 3]"
    if isinstance(ranks, (str, bytes)) or not isinstance(ranks, (list, tuple, set, frozenset, range)):
        raise ConfigError("ranks", ranks, allowed)
    for item in ranks:
        try:
            whole_number("ranks", item, minimum=0)
        except ConfigError:      # named with the whole list, the entry in the detail
            raise ConfigError("ranks", list(ranks), allowed, detail=f"entry {item!r} is not a rank") from None
    return set(ranks)


def _rank_before_init(rank_module: Any) -> int:
    """This process's rank, which must be known before init() to choose whether to dump."""
    if rank_module.communication_ready() or rank_module.world_size() <= 1:
        return rank_module.rank_id()
    if not any(os.environ.get(name, "").strip().isdigit() for name in rank_module._RANK_VARS):
        raise ConfigError("ranks", "this process's rank", "known before mindspore.communication.init()",
                          detail="msrun sets RANK_ID only when it places the ranks itself (one node, or --node_rank "
                                 "given); on several nodes without --node_rank pass --node_rank, or apply on every "
                                 "rank and read only the wanted rank_<id>/ folders")
    return rank_module.rank_id()


def _normalise_target(target: Optional[str]) -> Optional[str]:
    if target is None:
        return None
    for known in rules.TARGETS:
        if isinstance(target, str) and target.lower() == known.lower():
            return known
    raise ConfigError("target", target, 'one of "CPU", "GPU", "Ascend" (MindSpore device_target) or None')


def _no_duplicates(pairs: list, duplicates: list) -> dict:
    result: dict = {}
    for key, value in pairs:
        if key in result:
            duplicates.append(key)
        result[key] = value
    return result


_OWN_FILES = {os.path.abspath(__file__), os.path.abspath(rules.__file__), os.path.abspath(_dump_keys.__file__)}


def _warn_user(messages: Sequence[str]) -> None:
    """Issue each message as a DumpConfigWarning attributed to the first caller outside this package's dump code."""
    frame, level = sys._getframe(0), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename) in _OWN_FILES:
        frame, level = frame.f_back, level + 1
    for message in messages:
        warnings.warn(message, DumpConfigWarning, stacklevel=level)
