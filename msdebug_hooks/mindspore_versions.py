"""What differs between the MindSpore releases msdebug-hooks supports (2.7.0 to 2.10.x): the one place that knows.

``msdebug check-config`` and ``DumpConfig.apply`` (``config/dump.py``), ``LogConfig``, ``RDRConfig``, ``msdebug env``
and compare-dumps (with the version ``DumpDir.mindspore_version`` reads from a dump) ask this module instead of
carrying their own version checks. Every fact below was found by running the release (the dump-config corpus, the
same training dumped by each version: ``tests/data/dump_configs/``, ``tests/scripts/version_dump_train.py``) or by
reading its installed files; the README's table says what was run on which version. Nothing here imports MindSpore:
the installed version is read from package metadata (importing MindSpore would freeze its environment settings).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

from msdebug_hooks import _mindspore
from msdebug_hooks._mindspore import Version, parse_version

#: The dependency range of pyproject.toml, as data (``tests/test_mindspore_versions.py`` checks they agree).
REQUIREMENT = ">=2.7,<2.11"
OLDEST: Version = (2, 7)
NEWEST: Version = (2, 10)


@dataclass(frozen=True)
class Release:
    """One release on PyPI: the CPython versions its wheels cover (x86_64 Linux, macOS, Windows)."""

    version: str
    python: Tuple[Tuple[int, int], Tuple[int, int]]   # (oldest, newest) CPython with a wheel

    @property
    def python_text(self) -> str:
        (a, b), (c, d) = self.python
        return f"{a}.{b}-{c}.{d}"


#: Every supported release PyPI carries (2.5 and 2.6 are only on MindSpore's own server), with its wheels' Pythons.
RELEASES: Tuple[Release, ...] = (
    Release("2.7.0", ((3, 9), (3, 11))),
    Release("2.7.1", ((3, 9), (3, 11))),
    Release("2.7.1.post1", ((3, 9), (3, 11))),
    Release("2.7.2", ((3, 9), (3, 12))),
    Release("2.8.0", ((3, 9), (3, 12))),
    Release("2.9.0", ((3, 9), (3, 12))),
    Release("2.10.0", ((3, 10), (3, 12))),
)

# ---- logging --------------------------------------------------------------------------------------------------------
#: C++ log submodules (``MS_SUBMODULE_LOG_v``), in the order of ``libmindspore_core.so``'s string table: 38 in
#: 2.7.1-2.9.0; 2.7.0 also had ``LLM_BOOST`` (after ``GRAPH_KERNEL``), 2.10 added ``HYPER_OFFLOAD``.
_SUBMODULES_2_7 = (
    "UNKNOWN", "CORE", "ANALYZER", "COMMON", "DEBUG", "OFFLINE_DEBUG", "DEVICE", "GE_ADPT", "IR", "KERNEL", "MD", "ME",
    "EXPRESS", "OPTIMIZER", "PARALLEL", "PARSER", "PIPELINE", "PRE_ACT", "PYNATIVE", "SESSION", "UTILS", "VM",
    "PROFILER", "PS", "PI", "FL", "DISTRIBUTED", "LITE", "ARMOUR", "HCCL_ADPT", "RUNTIME_FRAMEWORK", "GE", "API",
    "SYMBOLIC_SHAPE", "GRAPH_KERNEL", "TRACE", "INTERNAL_KERNEL", "EXTENSION",
)
_SUBMODULES_2_10 = _SUBMODULES_2_7 + ("HYPER_OFFLOAD",)
_SUBMODULES_2_7_0 = _SUBMODULES_2_7[:35] + ("LLM_BOOST",) + _SUBMODULES_2_7[35:]


def log_submodules(version: Optional[Version] = None) -> Tuple[str, ...]:
    """The submodule names ``version`` knows (default: the installed one; the newest when none is installed); an
    unknown name only warns in MindSpore and is ignored."""
    version = _resolve(version)
    if version[:2] >= (2, 10):
        return _SUBMODULES_2_10
    return _SUBMODULES_2_7_0 if tuple(version[:3]) == (2, 7, 0) else _SUBMODULES_2_7


# ---- dump -----------------------------------------------------------------------------------------------------------
#: From this release on, the operators MindSpore's expander makes for a composite operator or a gradient
#: (``ops.square``'s gradient: ``Pow`` and ``Muls``) are named ``Expand/_<Composite>/<Op>-opN``: the cell scope is
#: lost. 2.7 kept them under the gradient's scope (``Gradients/.../_loss_fn-MSELoss/Grad_Square/Mul-op1``) and built
#: the gradient from other operators, so the same step has a different set of operators there.
EXPAND_SCOPE = "Expand/"
EXPAND_SCOPE_SINCE: Version = (2, 8)
#: From this release on, a sync dump writes the output of a reshape-type kernel (Flatten, Reshape, and the
#: ``Grad_Flatten`` Reshape) in its *input's* shape (same elements, same memory order); 2.7 writes the output shape.
VIEW_OUTPUT_SHAPE_SINCE: Version = (2, 8)


def dump_differences(version_a: Optional[str], version_b: Optional[str]) -> list[str]:
    """The known ways two dumps written by these versions differ beyond rounding, in words (empty: none known, or a
    version is unknown). compare-dumps prints them and applies the matching rules they name."""
    if not version_a or not version_b:
        return []
    a, b = parse_version(version_a), parse_version(version_b)
    lines = []
    if (a >= EXPAND_SCOPE_SINCE) != (b >= EXPAND_SCOPE_SINCE):
        lines.append(f"operators the expander makes are named {EXPAND_SCOPE}... from 2.8 on (no cell scope) and "
                     "gradients such as Grad_Square are built from other operators than in 2.7: each such group is "
                     "paired by the operator that leaves it; the operators inside are not compared one to one")
    if (a >= VIEW_OUTPUT_SHAPE_SINCE) != (b >= VIEW_OUTPUT_SHAPE_SINCE):
        lines.append("2.8+ dump reshape-type outputs (Flatten, Reshape) in their input's shape: tensors with the "
                     "same elements in another shape are compared element by element")
    return lines


def versions_differ(version_a: Optional[str], version_b: Optional[str]) -> bool:
    """True when both versions are known and differ (release level: 2.7.2 vs 2.10.0)."""
    return bool(version_a and version_b and parse_version(version_a) != parse_version(version_b))


# ---- the Python side ------------------------------------------------------------------------------------------------
#: Where the graph compile caches live (DumpConfig.apply tells whether a graph was already compiled): 2.9 moved
#: ``api`` and ``jit_trace`` from ``mindspore.common`` to ``mindspore.graph``; 2.7 and 2.8 have them in ``common``.
COMPILE_CACHE_MODULES = ("mindspore.graph.api", "mindspore.common.api")
TRACE_CACHE_MODULES = ("mindspore.graph.jit_trace", "mindspore.common.jit_trace")
#: Releases whose dump-JSON parser judged the whole config corpus (``tests/data/dump_configs``, 96 configs) and gave
#: the same verdict, error text, dump warnings and dumped iterations as 2.10.0 on every one: one rule set serves all.
DUMP_PARSER_CHECKED = ("2.7.0", "2.7.2", "2.8.0", "2.9.0", "2.10.0")


def dump_parser_note(version_text: Optional[str] = None) -> Optional[str]:
    """None when the dump-config rules were checked against this version's parser family (2.7-2.10); else why the
    validator's verdict may not be MindSpore's."""
    status, sentence = support(version_text)
    if status != UNSUPPORTED:
        return None
    return (f"{sentence}; the dump-config rules were checked against the parsers of MindSpore "
            f"{', '.join(DUMP_PARSER_CHECKED)}")


# ---- environment ----------------------------------------------------------------------------------------------------
#: RDR: 2.7.0 still reads it (run with an ``rdr`` section and ``MS_RDR_*`` it wrote ``<path>/rank_0/rdr/*.ir``); the
#: binaries of 2.7.1, 2.7.1.post1, 2.7.2, 2.8.0, 2.9.0 and 2.10.0 hold no RDR code (no ``MS_RDR_*`` name anywhere),
#: so they ignore it. The other diagnostics variables of ``config/env.py``'s table appear in 2.7.0, 2.7.2, 2.8.0,
#: 2.9.0 and 2.10.0 alike; ``GLOG_log_max`` in none.
RDR_ABSENT_SINCE: Version = (2, 7, 1)
RDR_VERIFIED_PRESENT: Tuple[Version, ...] = ((2, 7, 0),)
#: From this release on MindSpore checks ``GLOG_max_log_size`` itself ("Invalid GLOG_max_log_size value"); earlier
#: ones pass it to glog as it is.
GLOG_SIZE_CHECKED_SINCE: Version = (2, 9)


# ---- support --------------------------------------------------------------------------------------------------------
SUPPORTED, UNSUPPORTED, UNKNOWN = "supported", "unsupported", "unknown"


def support(version_text: Optional[str] = None) -> Tuple[str, str]:
    """``(status, sentence)`` for a MindSpore version (default: the installed one): ``supported`` for 2.7-2.10,
    ``unsupported`` outside, ``unknown`` when MindSpore is not installed."""
    text = version_text if version_text is not None else _mindspore.installed_version_string()
    if not text:
        return UNKNOWN, "MindSpore is not installed in this environment"
    version = parse_version(text)
    if OLDEST <= version[:2] <= NEWEST:
        return SUPPORTED, f"MindSpore {text} is supported (msdebug-hooks supports {_range_text()})"
    side = "older" if version[:2] < OLDEST else "newer"
    return UNSUPPORTED, (f"MindSpore {text} is {side} than msdebug-hooks supports ({_range_text()}): the dump-config "
                         f"rules, dump layout and callback hooks were not checked on it")


def differences(version: Optional[Version] = None) -> list[str]:
    """What differs in ``version`` (default: the installed one) from the newest supported release, in words."""
    version = _resolve(version)
    lines = []
    if version[:2] < (2, 10):
        known = log_submodules(version)
        extra = [name for name in known if name not in _SUBMODULES_2_10]
        lines.append(f"MS_SUBMODULE_LOG_v: {len(known)} submodules (HYPER_OFFLOAD is 2.10's; here it is warned about "
                     f"and ignored{'; ' + ', '.join(extra) + ' exists only here' if extra else ''})")
    if tuple(version[:3]) in RDR_VERIFIED_PRESENT:
        lines.append("RDR (MS_RDR_* and the 'rdr' section of env_config_path) is read and writes "
                     "<path>/rank_<id>/rdr/; 2.7.1 and later ignore it")
    if version[:2] < GLOG_SIZE_CHECKED_SINCE:
        lines.append("GLOG_max_log_size is handed to glog unchecked (2.9+ warn about an invalid value and use 50 MB)")
    if version[:2] < EXPAND_SCOPE_SINCE:
        lines.append("dumps: gradient operators keep their cell scope (2.8+ name expander operators Expand/...) and "
                     "reshape-type outputs are dumped in their output shape (2.8+: the input's); compare-dumps "
                     "pairs them across versions")
    return lines


def wheel_mismatch() -> Optional[str]:
    """Why the installed MindSpore cannot load in this interpreter, when its compiled core was built for another
    platform (pip picks a ``cpXY-none-any`` wheel, an aarch64 Linux build, where no wheel matches the machine);
    None when it matches or MindSpore is not installed. Reads the file list, loads nothing."""
    import importlib.machinery
    import importlib.metadata

    try:
        files = importlib.metadata.distribution("mindspore").files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    cores = [Path(str(f)).name for f in files if re.fullmatch(r"mindspore/_c_expression[^/]*\.(so|pyd)", str(f))]
    return core_mismatch(cores, importlib.machinery.EXTENSION_SUFFIXES)


def core_mismatch(cores: list[str], suffixes: list[str]) -> Optional[str]:
    """The problem when none of MindSpore's ``_c_expression`` files can be imported under these extension suffixes
    (``_c_expression.cpython-311-aarch64-linux-gnu.so`` is not ``_c_expression`` to an x86_64 CPython 3.11)."""
    if not cores or any(core == "_c_expression" + suffix for core in cores for suffix in suffixes):
        return None
    return (f"the installed MindSpore wheel was built for another platform ({cores[0]}; this interpreter loads "
            f"_c_expression{suffixes[0]}): pip took a cpXY-none-any wheel, which is an aarch64 Linux build. Install "
            f"a release with a wheel for this platform and Python ({_range_text()})")


def installed_text() -> str:
    """The installed MindSpore's version for messages ("2.7.2"), or "2.10" when none is installed."""
    return _mindspore.installed_version_string() or ".".join(map(str, NEWEST))


def _range_text() -> str:
    return f"{'.'.join(map(str, OLDEST))} to {'.'.join(map(str, NEWEST))}.x"


def _resolve(version: Optional[Version]) -> Version:
    if version is None:
        version = _mindspore.installed_version()
    return tuple(version) if version else NEWEST + (0,)
