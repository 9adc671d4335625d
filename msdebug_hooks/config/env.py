"""Every MindSpore diagnostics variable, what it means, how MindSpore 2.10 treats it, and what is wrong with a value.

``inspect_env()`` reads an environment (default ``os.environ``) and returns one ``VariableReport`` per variable that
is set; ``msdebug env`` prints them. The table (``VARIABLES``) is data: one ``EnvVariable`` per name, with the
treatment found by running MindSpore 2.10 and reading its binaries. Log and RDR values are checked by ``LogConfig``
and ``RDRConfig`` themselves, so the command and the Python API agree.
"""
from __future__ import annotations

import json
import os
import re
import warnings
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from msdebug_hooks._files import os_error_text
from msdebug_hooks.config import debugger_env
from msdebug_hooks.config._common import closest_name
from msdebug_hooks.errors import ConfigError, ConfigErrors

# how MindSpore 2.10 treats a variable
HONOURED = "read by MindSpore"
IGNORED = "ignored by MindSpore 2.10"
MSDEBUG = "read by msdebug-hooks, not MindSpore"
ASCEND_ONLY = "read only by MindSpore's Ascend plugin"
MISSING = "does not exist"
CONTEXT = "launcher context (MindSpore reads it)"

PROBLEM, NOTE = "problem", "note"


@dataclass(frozen=True)
class Finding:
    """One thing worth telling about a variable: a ``problem`` (makes ``msdebug env`` exit 1) or a ``note``."""

    severity: str
    message: str


@dataclass(frozen=True)
class EnvVariable:
    """A row of the table: the variable, its group, what it means and how MindSpore 2.10 treats it."""

    name: str
    group: str
    meaning: str
    treatment: str
    detail: str = ""


@dataclass
class VariableReport:
    name: str
    value: str
    variable: Optional[EnvVariable]
    findings: List[Finding] = field(default_factory=list)
    is_set: bool = True  # False: a problem about a variable that is missing (e.g. GLOG_log_dir when logging to files)

    @property
    def ok(self) -> bool:
        return not any(f.severity == PROBLEM for f in self.findings)


VARIABLES: Tuple[EnvVariable, ...] = (
    # dump
    EnvVariable("MINDSPORE_DUMP_CONFIG", "dump", "path of the dump JSON (DumpConfig)", HONOURED,
                "read at the first graph compile, once per process; a bad file fails that compile"),
    EnvVariable("MS_DIAGNOSTIC_DATA_PATH", "dump", "root for dumps when the dump JSON leaves 'path' empty", HONOURED,
                "dumps go to <value>/debug_dump; ignored when the dump JSON has a path"),
    EnvVariable("MINDSPORE_DUMP_IGNORE_USELESS_OUTPUT", "dump", "skip dumping outputs nothing uses (default 1)",
                HONOURED),
    EnvVariable("MS_ACL_DUMP_CFG_PATH", "dump", "CANN ACL dump config JSON (Ascend)", ASCEND_ONLY,
                "not read by CPU/GPU builds; not in MindSpore's env docs"),
    EnvVariable("MS_DUMP_SLICE_SIZE", "dump", "slice size for large TensorDump outputs (Ascend graph mode)",
                ASCEND_ONLY),
    EnvVariable("MS_DUMP_WAIT_TIME", "dump", "wait time for TensorDump slices (Ascend graph mode)", ASCEND_ONLY),
    EnvVariable("MS_DEV_SAVE_GRAPHS", "dump", "save IR graphs during compilation (1, 2 or 3: more detail)", HONOURED),
    EnvVariable("MS_DEV_SAVE_GRAPHS_PATH", "dump", "where MS_DEV_SAVE_GRAPHS writes the IR files", HONOURED),
    # logging
    EnvVariable("GLOG_v", "log", "log level: 0 DEBUG, 1 INFO, 2 WARNING (default), 3 ERROR, 4 CRITICAL", HONOURED,
                "read at import mindspore; anything but 0-4 makes the import raise ValueError"),
    EnvVariable("GLOG_logtostderr", "log", "1 log to the screen (default), 0 log to files in GLOG_log_dir",
                HONOURED, "anything but 0/1 makes import mindspore raise"),
    EnvVariable("GLOG_log_dir", "log", "log directory; files go to <dir>/rank_<id>/logs/", HONOURED,
                "required when GLOG_logtostderr=0; unused while logging to the screen"),
    EnvVariable("GLOG_stderrthreshold", "log", "level also echoed to the screen while logging to files", HONOURED,
                "anything but 0-4 makes import mindspore raise"),
    EnvVariable("MS_SUBMODULE_LOG_v", "log", "per-submodule C++ levels, e.g. {PARSER:2,ANALYZER:2}", HONOURED,
                "bad syntax, unknown names or levels only warn and are ignored"),
    EnvVariable("GLOG_max_log_size", "log", "size in MB of one C++ log file (default 50)", HONOURED,
                "an invalid value warns and falls back to 50"),
    EnvVariable("GLOG_log_max", "log", "the C++ log file size under the name some MindSpore docs use", MISSING,
                "never read; the real variable is GLOG_max_log_size (MB)"),
    EnvVariable("GLOG_logfile_mode", "log", "permissions of the C++ log files, octal (default 0640)", HONOURED),
    EnvVariable("logger_maxBytes", "log", "size in bytes of one Python log file (default 52428800)", HONOURED,
                "used only when logging to files"),
    EnvVariable("logger_backupCount", "log", "number of rotated Python log files kept (default 30)", HONOURED,
                "used only when logging to files"),
    EnvVariable("VLOG_v", "log", "verbose log tags: N, (a,b), (,b) or (a,)", HONOURED),
    EnvVariable("MS_EXCEPTION_DISPLAY_LEVEL", "log", "how much C++ detail exceptions show (for framework developers)",
                HONOURED),
    # RDR
    EnvVariable("MS_RDR_ENABLE", "rdr", "Running Data Recorder on (1) or off (0)", IGNORED,
                "no RDR code in MindSpore 2.10; documented up to 2.3"),
    EnvVariable("MS_RDR_MODE", "rdr", "RDR export: 1 on failure, 2 on failure or normal end", IGNORED),
    EnvVariable("MS_RDR_PATH", "rdr", "RDR root directory; data in <path>/rank_<id>/rdr/", IGNORED),
    # online debugger
    EnvVariable(debugger_env.SWITCH, "debugger", "attach the online debugger (1/True) to Model.train", MSDEBUG,
                "MindSpore 2.10 has no online debugger; msdebug-hooks' .pth hook and DebuggerCallback read it"),
    EnvVariable(debugger_env.HOST, "debugger", "debugger server host (MindInsight protocol)", MSDEBUG),
    EnvVariable(debugger_env.PORT, "debugger", "debugger server port, 1-65535", MSDEBUG),
    EnvVariable(debugger_env.PARTIAL_MEM, "debugger", "old MindSpore: give back part of the memory reuse debugging "
                "turned off", MSDEBUG, "accepted and has nothing to do: msdebug-hooks' debugger reads parameters and "
                "the loss between steps and never changes MindSpore's memory settings"),
    EnvVariable(debugger_env.SOURCE, "debugger", "tensors the debugger serves: light (parameters, loss) or dump "
                "(every operator, from a per-step sync dump)", MSDEBUG),
    EnvVariable(debugger_env.DUMP_DIR, "debugger", "scratch directory of the dump source (default /dev/shm)", MSDEBUG),
    EnvVariable(debugger_env.DUMP_KERNELS, "debugger", "dump source: only these kernels (op types, names, "
                "name-regex(...)), comma-separated", MSDEBUG),
    EnvVariable(debugger_env.TLS_VARIABLES["ca"], "debugger", "PEM CA of a TLS debugger server; setting it turns TLS "
                "on", MSDEBUG),
    EnvVariable(debugger_env.TLS_VARIABLES["cert"], "debugger", "PEM client certificate for mutual TLS", MSDEBUG),
    EnvVariable(debugger_env.TLS_VARIABLES["key"], "debugger", "PEM private key of the client certificate", MSDEBUG),
    EnvVariable(debugger_env.TLS_VARIABLES["server_name"], "debugger", "host name to check the server certificate "
                "against", MSDEBUG),
    EnvVariable(debugger_env.ON_LOST, "debugger", "server lost while paused: continue (default) or stop",
                MSDEBUG),
    EnvVariable(debugger_env.WAIT, "debugger", "1: wait for the debugger server instead of training on "
                "without it (msdebug run --wait)", MSDEBUG),
    # training control
    EnvVariable("MS_ENABLE_GRACEFUL_EXIT", "train", "1 lets OnRequestExit stop training cleanly on a signal", HONOURED,
                "only the exact value 1 enables it"),
    # rank context
    EnvVariable("RANK_ID", "rank", "this process's rank; names rank_<id> log/dump/RDR directories", CONTEXT),
    EnvVariable("RANK_SIZE", "rank", "number of ranks", CONTEXT),
    EnvVariable("DEVICE_ID", "rank", "device index used by this process", CONTEXT),
    EnvVariable("MS_NODE_ID", "rank", "rank under msrun (used when RANK_ID is unset)", CONTEXT),
    EnvVariable("OMPI_COMM_WORLD_RANK", "rank", "rank under mpirun (used when RANK_ID is unset)", CONTEXT),
)

BY_NAME: Dict[str, EnvVariable] = {v.name: v for v in VARIABLES}
_FAMILY = re.compile(r"^(GLOG_|VLOG_|MS_RDR|MS_DEBUGGER|MSDEBUG_|ENABLE_MS_DEBUG|MS_SUBMODULE|MINDSPORE_DUMP|MS_DUMP|"
                     r"MS_DIAGNOSTIC|logger_)", re.IGNORECASE)
# the "does not exist" verdict is only certain for the versions it was checked on (the names searched for in the
# packages of 2.7.2, 2.8.0, 2.9.0 and 2.10.0: msdebug_hooks/mindspore_versions.py)
_VERIFIED = ((2, 7), (2, 8), (2, 9), (2, 10))


def _finding_from_error(exc: ConfigError) -> Finding:
    return Finding(PROBLEM, str(exc))


def _check_file(name: str, value: str) -> List[Finding]:
    if os.path.isdir(value):
        return [Finding(PROBLEM, f"{name}={value} is a directory, not a file; MindSpore fails when it reads it")]
    if not os.path.isfile(value):
        return [Finding(PROBLEM, f"{name}={value}: no such file; MindSpore fails when it reads it")]
    return []


def _check_dump_config(value: str) -> List[Finding]:
    findings = _check_file("MINDSPORE_DUMP_CONFIG", value)
    if findings:
        return findings
    try:
        from msdebug_hooks.config.dump import DumpConfig  # written by another module; optional here
    except ImportError:
        try:
            with open(value, encoding="utf-8") as handle:
                json.load(handle)
        except (OSError, ValueError) as exc:
            return [Finding(PROBLEM, f"MINDSPORE_DUMP_CONFIG={value}: not a readable JSON file ({exc})")]
        return [Finding(NOTE, "dump file is valid JSON (its keys were not checked: DumpConfig is not available)")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            DumpConfig.load(value)
        except (ConfigError, ValueError) as exc:
            return [Finding(PROBLEM, f"dump file {value}: {exc}")]
        except OSError as exc:
            return [Finding(PROBLEM, f"dump file {os_error_text(exc)}")]
    return [Finding(NOTE, f"dump file: {w.message}") for w in caught] or [Finding(NOTE, "dump file is valid")]


def _check_absolute_dir(name: str, value: str) -> List[Finding]:
    if not os.path.isabs(value):
        return [Finding(NOTE, f"{name}={value} is relative: it depends on each process's working directory")]
    return []


def _check_octal(value: str) -> List[Finding]:
    if not re.fullmatch(r"0?[0-7]{3}", value.strip()):
        return [Finding(PROBLEM, f"GLOG_logfile_mode={value!r} is not allowed: an octal file mode such as 0640")]
    return []


def _vlog_valid(text: str) -> bool:
    """MindSpore's Python-side reading of VLOG_v: ``N``, ``(a,b)``, ``(,b)`` or ``(a,)``."""
    if not text.startswith("(") and not text.endswith(")"):
        return re.fullmatch(r"[+-]?\d+", text) is not None
    if not (text.startswith("(") and text.endswith(")")):
        return False
    parts = [p.strip() for p in text[1:-1].split(",")]
    if len(parts) != 2 or parts == ["", ""]:
        return False
    return all(re.fullmatch(r"[+-]?\d+", p) for p in parts if p)


def _check_vlog(value: str) -> List[Finding]:
    if _vlog_valid(value.strip()):
        return []
    return [Finding(PROBLEM, f"VLOG_v={value!r} is not allowed: a number N, (a,b), (,b) or (a,); "
                             "MindSpore warns that it is invalid and ignores it")]


def _check_debugger_switch(value: str) -> List[Finding]:
    enabled = debugger_env.read_flag(value)
    if enabled is None:
        return [Finding(PROBLEM, f"{debugger_env.SWITCH}={value!r} is not allowed: 1 or true attach the debugger, "
                                 "0, false or empty do not (anything else silently does not attach it)")]
    if enabled and not _autoattach_installed():
        return [Finding(NOTE, "msdebug_hooks_autoattach.pth is not in site-packages (editable install?): the "
                              "debugger attaches only through 'msdebug run' or an explicit DebuggerCallback")]
    return []


def _autoattach_installed() -> bool:
    import site

    dirs = list(site.getsitepackages()) + [site.getusersitepackages()]
    return any(os.path.exists(os.path.join(d, "msdebug_hooks_autoattach.pth")) for d in dirs)


def _check_one_of(name: str, value: str, allowed: Tuple[str, ...], effect: str) -> List[Finding]:
    if value.strip() not in allowed:
        return [Finding(PROBLEM, f"{name}={value!r} is not allowed: one of {', '.join(allowed)} ({effect})")]
    return []


def _check_port(value: str) -> List[Finding]:
    if debugger_env.read_port(value) is None:
        return [Finding(PROBLEM, f"{debugger_env.PORT}={value!r} is not allowed: a port number 1-65535")]
    return []


_VALUE_CHECKS: Dict[str, Callable[[str], List[Finding]]] = {
    "MINDSPORE_DUMP_CONFIG": _check_dump_config,
    "MS_ACL_DUMP_CFG_PATH": lambda v: _check_file("MS_ACL_DUMP_CFG_PATH", v),
    "MS_DIAGNOSTIC_DATA_PATH": lambda v: _check_absolute_dir("MS_DIAGNOSTIC_DATA_PATH", v),
    "MS_DEV_SAVE_GRAPHS": lambda v: _check_one_of("MS_DEV_SAVE_GRAPHS", v, ("0", "1", "2", "3"),
                                                  "the IR detail level"),
    "MINDSPORE_DUMP_IGNORE_USELESS_OUTPUT": lambda v: _check_one_of(
        "MINDSPORE_DUMP_IGNORE_USELESS_OUTPUT", v, ("0", "1"), "1 skips unused outputs"),
    "GLOG_logfile_mode": _check_octal,
    "VLOG_v": _check_vlog,
    debugger_env.SWITCH: _check_debugger_switch,
    debugger_env.PORT: _check_port,
    "MS_ENABLE_GRACEFUL_EXIT": lambda v: [] if v == "1" else [Finding(
        NOTE, f"MS_ENABLE_GRACEFUL_EXIT={v!r}: only the exact value '1' enables graceful exit")],
}

_LOG_NAMES = ("GLOG_v", "GLOG_logtostderr", "GLOG_log_dir", "GLOG_stderrthreshold", "MS_SUBMODULE_LOG_v",
              "GLOG_max_log_size", "GLOG_log_max", "logger_maxBytes", "logger_backupCount")


def _error_variable(exc: ConfigError) -> str:
    """``MS_SUBMODULE_LOG_v['FOO']`` -> ``MS_SUBMODULE_LOG_v``."""
    return str(exc.field).split("[", 1)[0]


def _log_findings(environ: Mapping[str, str]) -> Dict[str, List[Finding]]:
    from msdebug_hooks.config.log import LogConfig

    found: Dict[str, List[Finding]] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            LogConfig.from_env(environ)
        except ConfigErrors as exc:
            for error in exc.errors:
                found.setdefault(_error_variable(error), []).append(_finding_from_error(error))
        except ConfigError as exc:
            found.setdefault(_error_variable(exc), []).append(_finding_from_error(exc))
    for warning in caught:
        text = str(warning.message)
        name = next((n for n in _LOG_NAMES if text.startswith(n)), None)
        if name is None:  # a note naming several variables ("... have no effect while MindSpore logs to the screen")
            name = next((n for n in _LOG_NAMES if n in text and environ.get(n)), "GLOG_logtostderr")
        found.setdefault(name, []).append(Finding(NOTE, text))
    if environ.get("GLOG_log_max"):
        found.setdefault("GLOG_log_max", []).insert(0, Finding(
            PROBLEM, "GLOG_log_max does not exist in MindSpore (some of its docs use that name); set GLOG_max_log_size "
                     "(MB) instead"))
    return found


def _rdr_findings(environ: Mapping[str, str], version: Optional[Tuple[int, ...]]) -> Dict[str, List[Finding]]:
    from msdebug_hooks.config.rdr import RDR_VARIABLES, RDRConfig, rdr_support

    set_names = [n for n in RDR_VARIABLES if environ.get(n) is not None]
    if not set_names:
        return {}
    found: Dict[str, List[Finding]] = {}
    try:
        RDRConfig.from_env(environ)
    except ConfigErrors as exc:
        for error in exc.errors:
            found.setdefault(_error_variable(error), []).append(_finding_from_error(error))
    except ConfigError as exc:
        found.setdefault(_error_variable(exc), []).append(_finding_from_error(exc))
    supported, message = rdr_support(version)
    if supported is not True:
        for name in set_names:
            found.setdefault(name, []).append(Finding(PROBLEM if supported is False else NOTE, message))
    return found


def _rank_findings(environ: Mapping[str, str]) -> Dict[str, List[Finding]]:
    rank, ompi = environ.get("RANK_ID"), environ.get("OMPI_COMM_WORLD_RANK")
    found: Dict[str, List[Finding]] = {}
    for name in ("RANK_ID", "RANK_SIZE", "DEVICE_ID", "MS_NODE_ID", "OMPI_COMM_WORLD_RANK"):
        value = environ.get(name)
        if value and not value.strip().isdigit():
            found.setdefault(name, []).append(Finding(PROBLEM, f"{name}={value!r} is not allowed: a whole number"))
    if rank and ompi and rank != ompi:
        found.setdefault("RANK_ID", []).append(Finding(
            NOTE, f"RANK_ID={rank} and OMPI_COMM_WORLD_RANK={ompi} differ; MindSpore uses RANK_ID (and warns)"))
    return found


def _unknown_lookalike(name: str) -> Optional[Finding]:
    """A variable in one of MindSpore's families that MindSpore does not know, e.g. ``GLOG_V`` or ``MS_RDR_DIR``."""
    if name in BY_NAME or not _FAMILY.match(name):
        return None
    guess = closest_name(name, BY_NAME)
    hint = f"; did you mean {guess}?" if guess else ""
    return Finding(PROBLEM, f"{name} is not a variable MindSpore 2.10 or msdebug-hooks reads{hint} "
                            "(names are case-sensitive)")


def inspect_env(environ: Optional[Mapping[str, str]] = None,
                version: Optional[Tuple[int, ...]] = None) -> List[VariableReport]:
    """One report per diagnostics variable set in ``environ`` (table order, then look-alikes), with findings.

    ``version`` is the MindSpore version to judge against (default: the installed one, read without importing).
    """
    env = dict(os.environ if environ is None else environ)
    if version is None:
        from msdebug_hooks import _mindspore

        version = _mindspore.installed_version()
    findings: Dict[str, List[Finding]] = {}
    for group in (_log_findings(env), _rdr_findings(env, version), _rank_findings(env)):
        for name, items in group.items():
            findings.setdefault(name, []).extend(items)
    reports = []
    for variable in VARIABLES:
        if variable.name not in env:
            continue
        value = env[variable.name]
        items = list(findings.get(variable.name, []))
        check = _VALUE_CHECKS.get(variable.name)
        if value.strip() == "":
            items.append(Finding(NOTE, "empty: MindSpore treats it as unset"))
        elif check is not None:
            items.extend(check(value))
        if variable.treatment == IGNORED and variable.group == "debugger":
            items.append(Finding(PROBLEM, f"{variable.name} is ignored: MindSpore 2.10 has no online debugger"))
        if variable.treatment == MISSING and version and version[:2] not in _VERIFIED and not items:
            items.append(Finding(NOTE, f"checked on MindSpore 2.7-2.10; installed is {'.'.join(map(str, version))}"))
        reports.append(VariableReport(variable.name, value, variable, items))
    reported = {r.name for r in reports}
    for name, items in findings.items():  # problems about variables that are not set at all
        if name not in reported and items:
            reports.append(VariableReport(name, "", BY_NAME.get(name), items, is_set=False))
    for name in sorted(env):
        lookalike = _unknown_lookalike(name)
        if lookalike is not None:
            reports.append(VariableReport(name, env[name], None, [lookalike]))
    return reports
