"""MindSpore 2.10's dump-JSON rules as data, checked all at once.

MindSpore parses ``MINDSPORE_DUMP_CONFIG`` lazily (at the first graph compile) and stops at the first bad value. This
module front-runs that parser: ``check(doc, target)`` returns *every* rejection (as :class:`ConfigError`) and every
silent trap (as warning texts) for one JSON document. The keys, types and value sets live in the ``SPECS`` table; the
few rules that link several keys are the small ``_rule_*`` functions at the end. The rules are summarised in
``docs/dump-rules.md``; they come from MindSpore 2.10's dump JSON parser and from the corpus in
``tests/data/dump_configs`` that MindSpore 2.10 itself judged.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from msdebug_hooks.config._common import closest_name
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

_KIND_WORDS = {"uint": "a non-negative integer", "str": "a string", "bool": "true or false (JSON booleans)",
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
        if value is MISSING or not _has_kind(value, spec.kind):
            return None
        value = _wrapped(value, spec.kind)
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


def _wrapped(value: Any, kind: str) -> Any:
    """MindSpore stores unsigned values in 32 bits: 4294967296 becomes 0."""
    return value % (UINT32_MAX + 1) if kind == "uint" else value


def _has_kind(value: Any, kind: str) -> bool:
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


# ----------------------------------------------------------------------------------------------------------------
# rules that link keys, and silent remaps
# ----------------------------------------------------------------------------------------------------------------
def _rule_e2e_section(s: State) -> None:
    if not s.e2e_present:
        s.warn(f"{E2E} is missing: MindSpore 2.10 then logs '[Dump Alert i/3]' three times with a 1 s sleep each "
               f"(3 s lost); CPU and GPU still dump, Ascend (ms_backend) dumps nothing. "
               f'Add "{E2E}": {{"enable": true}}.')


def _rule_async_needs_op_debug_mode(s: State) -> None:
    if not s.e2e_enabled and "op_debug_mode" not in s.common:
        s.error(f"{COMMON}.op_debug_mode", MISSING, "required on Ascend when e2e_dump_settings is absent (async dump): "
                "0, 3 or 4", detail="MindSpore: 'Check dump json failed, op_debug_mode not found'")


def _rule_dump_mode_target(s: State) -> None:
    if s.good("dump_mode") == 2 and s.target != "Ascend":
        s.error(f"{COMMON}.dump_mode", 2, "0 or 1 on CPU and GPU (2, set_dump marks, is Ascend only)",
                detail="MindSpore: 'Set dump is only supported in Ascend async dump'")


def _rule_op_debug_mode(s: State) -> None:
    mode = s.good("op_debug_mode")
    if mode is None:
        return
    field_name = f"{COMMON}.op_debug_mode"
    if mode in (1, 2):
        s.warn(f"{field_name}={mode} is silently turned into 3 (overflow dump of every overflow kind).")
    effective = s.op_debug_mode
    if effective != 0 and s.good("dump_mode") not in (0, None):
        s.warn(f"{field_name}={mode} forces dump_mode to 0: overflow and exception dump cannot select kernels.")
    if effective == 3:
        if s.good("input_output") not in (0, None):
            s.warn(f"{field_name}=3 forces input_output to 0 (inputs and outputs).")
        if s.target != "Ascend":
            s.warn(f"{field_name}=3 (overflow dump) detects overflow on Ascend only; MindSpore 2.10 on CPU "
                   f"dumps the selected iterations as with op_debug_mode 0.")
    if effective == 4:
        if s.target != "Ascend":
            s.warn(f"{field_name}=4 (exception dump) is Ascend only: MindSpore 2.10 warns that nothing would be "
                   f"saved on CPU/GPU, yet on CPU it dumps every kernel of every iteration.")
        if s.e2e_enabled and s.common.get("iteration", "all") != "all":
            s.warn(f"{field_name}=4 under e2e dump sets iteration to \"all\" (the given iteration is ignored).")
        if s.e2e_enabled and s.sample_mode == 1:
            s.warn(f"{field_name}=4 under e2e dump sets sample_mode to 0.")


def _rule_overflow_number(s: State) -> None:
    value = s.common.get("overflow_number", MISSING)
    if value is MISSING:
        return
    if s.op_debug_mode != 3:
        s.error(f"{COMMON}.overflow_number", value, "set only together with op_debug_mode 3 (or 1/2, which become 3)",
                detail=f"op_debug_mode is {s.common.get('op_debug_mode', MISSING)!r}; MindSpore: "
                       f"'overflow_number only need to be set when op_debug_mode is 3.'")
    elif not _has_kind(value, "uint"):
        spec = SPEC_BY_KEY["overflow_number"]
        s.error(spec.field, value, spec.allowed, detail=_kind_detail(value, "uint"))


def _rule_statistic_target(s: State) -> None:
    if not s.statistic_dump:
        return
    field_name = f"{COMMON}.saved_data"
    if s.target == "CPU":
        s.error(field_name, s.saved_data, '"tensor" on CPU (statistic dump needs GPU or Ascend)',
                detail="MindSpore: 'storing statistic dump is only supported on GPU and Ascend'")
    elif s.target == "Ascend" and not s.e2e_enabled and s.common.get("file_format") != "npy":
        s.error(field_name, s.saved_data, '"tensor", or set file_format to "npy" for statistics in Ascend async dump',
                detail=f"file_format is {s.common.get('file_format', MISSING)!r}")


def _rule_stat_calc_mode(s: State) -> None:
    if not s.e2e or s.e2e.get("stat_calc_mode") != "device":
        return
    reasons = []
    if s.target != "Ascend":
        reasons.append("it is Ascend only")
    if s.saved_data != "statistic":
        reasons.append(f'saved_data is {s.saved_data!r} (device statistics need "statistic")')
    if reasons:
        s.warn(f'{E2E}.stat_calc_mode="device" is forced to "host": {"; ".join(reasons)}.')


def _rule_uint32(s: State) -> None:
    for spec in SPECS:
        value = s.raw(spec)
        if spec.kind == "uint" and _has_kind(value, "uint") and value > UINT32_MAX:
            s.warn(f"{spec.field}={value} does not fit in 32 bits: MindSpore wraps it to {value % (UINT32_MAX + 1)}.")


RULES = (_rule_e2e_section, _rule_async_needs_op_debug_mode, _rule_dump_mode_target, _rule_op_debug_mode,
         _rule_overflow_number, _rule_statistic_target, _rule_stat_calc_mode, _rule_uint32)


# ----------------------------------------------------------------------------------------------------------------
# the checker
# ----------------------------------------------------------------------------------------------------------------
def _unknown_keys(s: State, doc: dict) -> None:
    for key in doc:
        if key not in (COMMON, E2E):
            s.warn(_unknown_message(key, key, [COMMON, E2E], other=None))
    for section, other in ((COMMON, E2E), (E2E, COMMON)):
        content = s.common if section == COMMON else s.e2e
        for key in content or {}:
            if key not in KNOWN_KEYS[section]:
                s.warn(_unknown_message(f"{section}.{key}", key, KNOWN_KEYS[section], other))


def _unknown_message(field_name: str, key: str, known: list, other: Optional[str]) -> str:
    message = f"{field_name} is not a key MindSpore 2.10 reads: it is silently ignored."
    if other and key in KNOWN_KEYS[other]:
        return message + f" {key!r} belongs in {other}."
    close = closest_name(key, known)
    if close:
        message += f" Did you mean {close!r}?"
    if key == "async_dump_settings":
        message += " (2.10 has no async section: Ascend async dump is common_dump_settings without e2e_dump_settings.)"
    return message


def _kind_detail(value: Any, kind: str) -> str:
    """Why the JSON type is wrong, in MindSpore's terms ("should be unsigned int type")."""
    if kind == "uint" and isinstance(value, int) and not isinstance(value, bool):
        return "negative: MindSpore reads this key as an unsigned integer"
    return f"must be {_KIND_WORDS[kind]}, not a JSON {_json_type(value)}"


def _json_type(value: Any) -> str:
    for kind, name in ((bool, "boolean"), (str, "string"), (int, "integer"), (float, "number with a fraction"),
                       (list, "array"), (dict, "object")):
        if isinstance(value, kind):
            return name
    return "null" if value is None else type(value).__name__


def check_one(doc: Any, target: str) -> State:
    """Every rejection and warning of ``doc`` on one target (``"CPU"``, ``"GPU"`` or ``"Ascend"``)."""
    if not isinstance(doc, dict):
        state = State(target, {}, None, False)
        state.error("<top level>", doc, f"a JSON object with {COMMON} (and {E2E})")
        return state
    common = doc.get(COMMON, MISSING)
    e2e_raw = doc.get(E2E, MISSING)
    e2e = None if e2e_raw is MISSING else (e2e_raw if isinstance(e2e_raw, dict) else {})
    state = State(target, common if isinstance(common, dict) else {}, e2e, e2e_raw is not MISSING)
    if common is MISSING or not isinstance(common, dict):
        state.error(COMMON, common, "a JSON object holding dump_mode, path, net_name, iteration, input_output, "
                    "kernels and support_device")
        return state
    if e2e_raw is not MISSING and not isinstance(e2e_raw, dict):
        state.warn(f"{E2E}={e2e_raw!r} is not an object: MindSpore turns e2e dump on with every default.")
    _unknown_keys(state, doc)
    for spec in SPECS:
        if spec.section == E2E and state.e2e is None:
            continue
        value = state.raw(spec)
        if value is MISSING:
            if spec.required:
                state.error(spec.field, MISSING, f"required: {spec.allowed}",
                            detail=f"MindSpore: 'Check dump json failed, {spec.key} not found'")
            continue
        if spec.key == "overflow_number":
            continue  # _rule_overflow_number: its validity depends on op_debug_mode
        if spec.read_when and not spec.read_when(state):
            if not (spec.key == "statistic_category" and state.statistic_dump):  # CPU: saved_data error says it
                state.warn(f"{spec.field}={value!r} is ignored: {spec.unread_note}.")
            continue
        if not _has_kind(value, spec.kind):
            state.error(spec.field, value, spec.allowed, detail=_kind_detail(value, spec.kind))
            continue
        if spec.choices and _wrapped(value, spec.kind) not in spec.choices:
            state.error(spec.field, value, spec.allowed)
            continue
        check = VALUE_CHECKS.get(spec.key)
        if check:
            check(state, spec, value)
    for rule in RULES:
        rule(state)
    return state


def check(doc: Any, target: Optional[str]) -> tuple[list[ConfigError], list[str]]:
    """``(errors, warnings)`` for ``doc``. With ``target=None`` a rejection on only some targets becomes a warning
    naming them, so a config is refused outright only when MindSpore would refuse it everywhere. (Messages therefore
    never name the target: the same problem must read the same on every target.)"""
    if target is not None:
        state = check_one(doc, target)
        return state.errors, state.warnings
    states = [check_one(doc, t) for t in TARGETS]
    errors, warnings = [], []
    for error in states[0].errors:
        if all(any(str(e) == str(error) for e in other.errors) for other in states[1:]):
            errors.append(error)
    for state in states:
        for error in state.errors:
            if not any(str(e) == str(error) for e in errors):
                where = [t.target for t in states if any(str(e) == str(error) for e in t.errors)]
                text = f"MindSpore rejects this on {'/'.join(where)}: {error}"
                if text not in warnings:
                    warnings.append(text)
        for warning in state.warnings:
            if warning not in warnings:
                warnings.append(warning)
    return errors, warnings
