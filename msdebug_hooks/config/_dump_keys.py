"""MindSpore 2.10's dump-JSON keys as data: each key's section, type, allowed values and per-key value check.

``SPECS`` is the table (one ``KeySpec`` per key of ``common_dump_settings`` and ``e2e_dump_settings``);
``VALUE_CHECKS`` holds the checks a key's value needs beyond its type (paths, iteration patterns, kernel lists, device
ids, statistics). The rules that link several keys, and the checker that runs them all, are in ``_dump_rules.py``;
both are summarised in ``docs/dump-rules.md``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from msdebug_hooks.errors import ConfigError

COMMON = "common_dump_settings"
E2E = "e2e_dump_settings"
TARGETS = ("CPU", "GPU", "Ascend")
UINT32_MAX = 2**32 - 1

HOST_STATISTICS = ("max", "min", "avg", "count", "negative zero count", "positive zero count", "nan count",
                   "negative inf count", "positive inf count", "zero count", "md5", "l2norm", "hash", "hash:sha1",
                   "hash:md5")
DEVICE_STATISTICS = ("max", "min", "avg", "l2norm")

_PATH_CHARS = re.compile(r"[A-Za-z0-9_/-]")  # C-locale isalpha/isdigit plus '-', '_', '/'
_NAME = re.compile(r"[A-Za-z0-9_-]+")
_ITERATION_CHARS = re.compile(r"[0-9|-]+")


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


MISSING: Any = _Missing()

KIND_WORDS = {"uint": "a non-negative integer", "str": "a string", "bool": "true or false (JSON booleans)",
               "array": "a JSON array"}


@dataclass
class State:
    """What MindSpore would make of the document on one target: the values after its silent remaps."""

    target: str
    common: dict
    e2e: Optional[dict]          # None: no section; {} also when the section is not an object
    e2e_present: bool
    errors: list = field(default_factory=list)
    warnings: list = field(default_factory=list)

    @property
    def e2e_enabled(self) -> bool:  # CPU and GPU turn e2e (sync) dump on even without the section
        return self.e2e_present or self.target != "Ascend"

    def raw(self, spec: "KeySpec") -> Any:
        section = self.common if spec.section == COMMON else (self.e2e or {})
        return section.get(spec.key, MISSING)

    def good(self, key: str) -> Any:
        """The value of ``key`` if present and of the right type and value set, else None."""
        spec = SPEC_BY_KEY[key]
        value = self.raw(spec)
        if value is MISSING or not has_kind(value, spec.kind):
            return None
        value = wrapped(value, spec.kind)
        return None if spec.choices and value not in spec.choices else value

    # effective values -------------------------------------------------------------------------------------------
    @property
    def op_debug_mode(self) -> int:
        mode = self.good("op_debug_mode")
        return 3 if mode in (1, 2) else (mode or 0)

    @property
    def saved_data_forced(self) -> bool:  # exception dump (op_debug_mode 4) under e2e always saves tensors
        raw = self.common.get("saved_data", "tensor")
        return self.e2e_enabled and self.op_debug_mode == 4 and raw != "tensor"

    @property
    def saved_data(self) -> Any:
        return "tensor" if self.saved_data_forced else self.common.get("saved_data", "tensor")

    @property
    def statistic_dump(self) -> bool:
        return self.saved_data in ("statistic", "full")

    @property
    def sample_mode(self) -> Optional[int]:
        return self.good("sample_mode") if self.e2e else None

    @property
    def device_statistics(self) -> bool:
        return (self.target == "Ascend" and self.saved_data == "statistic"
                and (self.e2e or {}).get("stat_calc_mode") == "device")

    def error(self, field_name: str, value: Any, allowed: str, detail: str = "") -> None:
        self.errors.append(ConfigError(field_name, value, allowed, detail=detail))

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)


@dataclass(frozen=True)
class KeySpec:
    """One key of the dump JSON: its section, JSON type, what is allowed, and when MindSpore reads it at all."""

    section: str
    key: str
    kind: str                      # "uint" | "str" | "bool" | "array"
    allowed: str                   # in words, for messages
    choices: tuple = ()            # closed value set, checked after the type
    required: bool = False
    read_when: Optional[Callable[[State], bool]] = None   # None: always read when present
    unread_note: str = ""          # why it is ignored when read_when() is False

    @property
    def field(self) -> str:
        return f"{self.section}.{self.key}"


SPECS = (
    KeySpec(COMMON, "dump_mode", "uint", "0 (every kernel), 1 (only the `kernels` list) or 2 (kernels marked with "
            "set_dump; Ascend only)", (0, 1, 2), required=True),
    KeySpec(COMMON, "path", "str", "an absolute path made of letters, digits, '-', '_' and '/' only (no '.', no "
            "spaces); empty or absent means $MS_DIAGNOSTIC_DATA_PATH/debug_dump"),
    KeySpec(COMMON, "net_name", "str", "a non-empty name made of letters, digits, '-' and '_'", required=True),
    KeySpec(COMMON, "iteration", "str", '"all", or 0-based iterations and ranges joined by "|" with no spaces, '
            'e.g. "0|5-8|100-120"', required=True),
    KeySpec(COMMON, "saved_data", "str", '"tensor" (default), "statistic" or "full" (statistic and full: GPU and '
            'Ascend only)', ("tensor", "statistic", "full"),
            read_when=lambda s: not s.saved_data_forced,
            unread_note="op_debug_mode 4 (exception dump) under e2e always saves tensors: it is forced to \"tensor\""),
    KeySpec(COMMON, "input_output", "uint", "0 (inputs and outputs), 1 (inputs only) or 2 (outputs only)", (0, 1, 2),
            required=True),
    KeySpec(COMMON, "kernels", "array", 'a list of full kernel names ("Default/Conv-op12"), kernel types ("conv", '
            'case-insensitive substring) or "name-regex(<regex>)"; [] is allowed', required=True),
    KeySpec(COMMON, "support_device", "array", "a list of device ids (DEVICE_ID, not the rank), e.g. "
            "[0, 1, 2, 3, 4, 5, 6, 7]; ignored on CPU but still required", required=True),
    KeySpec(COMMON, "op_debug_mode", "uint", "0 (normal dump), 3 (overflow dump) or 4 (exception dump); 1 and 2 are "
            "accepted and turned into 3", (0, 1, 2, 3, 4)),
    KeySpec(COMMON, "statistic_category", "array", "a list of: " + ", ".join(HOST_STATISTICS),
            read_when=lambda s: s.statistic_dump and s.target != "CPU",
            unread_note='it is read only when saved_data is "statistic" or "full"'),
    KeySpec(COMMON, "overflow_number", "uint", "how many overflows to dump (0: all), only together with "
            "op_debug_mode 3"),
    KeySpec(COMMON, "initial_iteration", "uint", "the dump iteration counter's first value: 0, 1, 2, ..."),
    KeySpec(COMMON, "file_format", "str", '"bin" or "npy"', ("bin", "npy"),
            read_when=lambda s: not s.e2e_enabled,
            unread_note="it is read only by Ascend async dump (no e2e_dump_settings); e2e dump always writes .npy"),
    KeySpec(E2E, "enable", "bool", "true (sync dump) or false (Ascend: async dump)"),
    KeySpec(E2E, "trans_flag", "bool", "true (save in NCHW, the default) or false (keep the device format)"),
    KeySpec(E2E, "save_kernel_args", "bool", "true or false"),
    KeySpec(E2E, "stat_calc_mode", "str", '"host" (default) or "device" (Ascend only)', ("host", "device")),
    KeySpec(E2E, "device_stat_precision_mode", "str", '"high" (default) or "low"', ("high", "low")),
    KeySpec(E2E, "sample_mode", "uint", "0 (whole tensors) or 1 (sliced dump)", (0, 1)),
    KeySpec(E2E, "sample_num", "uint", "an integer >= 1 (slice size; default 100)",
            read_when=lambda s: s.sample_mode == 1, unread_note="it is read only when sample_mode is 1"),
)
SPEC_BY_KEY = {spec.key: spec for spec in SPECS}
KNOWN_KEYS = {COMMON: [s.key for s in SPECS if s.section == COMMON], E2E: [s.key for s in SPECS if s.section == E2E]}


def wrapped(value: Any, kind: str) -> Any:
    """MindSpore stores unsigned values in 32 bits: 4294967296 becomes 0."""
    return value % (UINT32_MAX + 1) if kind == "uint" else value


def has_kind(value: Any, kind: str) -> bool:
    if kind == "uint":
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if kind == "str":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    return isinstance(value, list)


# ----------------------------------------------------------------------------------------------------------------
# iteration: what MindSpore's IsDumpIter matches
# ----------------------------------------------------------------------------------------------------------------
def iteration_ranges(pattern: str) -> tuple[list[tuple[int, int]], list[str]]:
    """Split an ``iteration`` value into the inclusive ranges it selects and the pieces that can match nothing.

    Mirrors MindSpore: pieces are split on '|'; a piece is a number or ``low-high``; an empty piece, an open range
    (``"0-"``), a piece with two dashes or a reversed range (``"5-3"``) silently matches nothing.
    """
    ranges, dead = [], []
    for piece in pattern.split("|"):
        low, dash, high = piece.partition("-")
        if not dash:
            low = high = piece
        if not low.isdigit() or not high.isdigit() or int(low) > int(high) or int(low) > UINT32_MAX:
            dead.append(piece)
        else:
            ranges.append((int(low), int(high)))
    return ranges, dead


def iteration_matches(pattern: str, iteration: int) -> bool:
    """True if MindSpore dumps 0-based ``iteration`` under this ``iteration`` setting."""
    if pattern == "all":
        return True
    return any(low <= iteration <= high for low, high in iteration_ranges(pattern)[0])


# ----------------------------------------------------------------------------------------------------------------
# per-key value checks (after the type check passed)
# ----------------------------------------------------------------------------------------------------------------
def path_problems(value: str) -> str:
    """Why MindSpore rejects ``value`` as a dump path ("" if it accepts it). Also applies to
    ``$MS_DIAGNOSTIC_DATA_PATH/debug_dump``."""
    bad = sorted({c for c in value if not _PATH_CHARS.fullmatch(c)})
    problems = []
    if bad:
        problems.append("contains " + ", ".join(repr(c) for c in bad))
        if "." in bad:
            problems[-1] += " (dotted directories such as ~/.cache or run.1 are rejected too)"
    if not value.startswith("/"):
        problems.append("is not absolute")
    return "; ".join(problems)


def _check_path(s: State, spec: KeySpec, value: str) -> None:
    problems = path_problems(value) if value else ""
    if problems:
        s.error(spec.field, value, spec.allowed, detail=problems)


def _check_net_name(s: State, spec: KeySpec, value: str) -> None:
    if not _NAME.fullmatch(value):
        s.error(spec.field, value, spec.allowed)


def _check_iteration(s: State, spec: KeySpec, value: str) -> None:
    if value == "all":
        return
    if not _ITERATION_CHARS.fullmatch(value):
        detail = ""
        if value.strip() and _ITERATION_CHARS.fullmatch(value.replace(" ", "")):
            detail = (f"remove the spaces: {value.replace(' ', '')!r} (the docs' prose writes spaces; "
                      f"MindSpore rejects them)")
        elif value.lower() == "all":
            detail = 'write "all" in lower case'
        s.error(spec.field, value, spec.allowed, detail)
        return
    ranges, dead = iteration_ranges(value)
    if not ranges:
        s.warn(f"{spec.field}={value!r} matches no iteration at all: MindSpore accepts it and dumps nothing. "
               f"Open ranges ('0-'), reversed ranges ('5-3') and empty pieces match nothing; "
               f"write closed ranges such as '0-100' or use 'all'.")
    elif dead:
        s.warn(f"{spec.field}={value!r}: the piece(s) {', '.join(repr(p) for p in dead)} match no iteration "
               f"(open, reversed or empty ranges are silently ignored).")


def _check_kernels(s: State, spec: KeySpec, value: list) -> None:
    if s.good("dump_mode") != 1:  # MindSpore does not look inside the list unless dump_mode is 1
        if value:
            s.warn(f"{spec.field} is ignored because dump_mode is not 1: every kernel is dumped.")
        return
    seen, used = set(), 0
    for item in value:
        if not isinstance(item, str):
            s.warn(f"{spec.field} entry {item!r} is not a string: MindSpore matches its JSON text {str(item)!r} "
                   f"as a kernel type.")
            item = str(item)
        name = item.replace(" ", "")
        if name != item:
            s.warn(f"{spec.field} entry {item!r}: MindSpore removes spaces and looks for {name!r}.")
        if not name:
            continue
        used += 1
        if name in seen:
            s.warn(f"{spec.field} lists {name!r} twice (MindSpore warns 'Duplicate dump kernel name').")
        seen.add(name)
        if name.startswith("name-regex(") and name.endswith(")"):
            try:
                re.compile(name[len("name-regex("):-1])
            except re.error as exc:
                s.error(spec.field, item, "a valid regular expression inside name-regex(...)", detail=str(exc))
    if not used:
        s.warn(f"{spec.field} is empty with dump_mode 1: MindSpore then matches every kernel (as dump_mode 0).")


def _check_support_device(s: State, spec: KeySpec, value: list) -> None:
    seen = set()
    for item in value:
        if not isinstance(item, (int, float)):  # bool is an int here, and nlohmann reads it as 0/1 too
            s.error(spec.field, value, spec.allowed,
                    detail=f"entry {item!r} is not a number (MindSpore: json type_error.302)")
            return
        device = int(item) % (UINT32_MAX + 1)
        if isinstance(item, bool):
            s.warn(f"{spec.field} entry {item!r} is read as device id {device}.")
        elif item != int(item) or item < 0:
            s.warn(f"{spec.field} entry {item!r} becomes device id {device} in MindSpore (it reads unsigned 32-bit "
                   f"integers), which no real device has." if item < 0 else
                   f"{spec.field} entry {item!r} is truncated to device id {device}.")
        elif item > 7:
            s.warn(f"{spec.field} entry {item}: these are device ids (DEVICE_ID, usually 0-7 on a server), not "
                   f"ranks; a rank number here dumps nothing on that rank.")
        if device in seen:
            s.warn(f"{spec.field} lists device {device} twice.")
        seen.add(device)
    if not value and s.target != "CPU":
        s.warn(f"{spec.field} is empty: on GPU and Ascend MindSpore then dumps on no device at all.")


def _check_statistic_category(s: State, spec: KeySpec, value: list) -> None:
    bad = [item for item in value if not isinstance(item, str) or item not in HOST_STATISTICS]
    if bad:
        s.error(spec.field, bad, spec.allowed, detail="MindSpore: 'The following statistic_category is invalid'")
        return
    if s.device_statistics:
        host_only = [item for item in value if item not in DEVICE_STATISTICS]
        if host_only:
            s.warn(f"{spec.field}: {host_only} cannot be computed on the device (stat_calc_mode \"device\" supports "
                   f"{list(DEVICE_STATISTICS)}); MindSpore drops them.")


def _check_sample_num(s: State, spec: KeySpec, value: int) -> None:
    if value < 1:
        s.error(spec.field, value, spec.allowed, detail="MindSpore: 'sample_num should be greater than 0'")


VALUE_CHECKS: dict[str, Callable[[State, KeySpec, Any], None]] = {
    "path": _check_path,
    "net_name": _check_net_name,
    "iteration": _check_iteration,
    "kernels": _check_kernels,
    "support_device": _check_support_device,
    "statistic_category": _check_statistic_category,
    "sample_num": _check_sample_num,
}
