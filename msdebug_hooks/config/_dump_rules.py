"""MindSpore 2.10's dump-JSON rules as data, checked all at once.

MindSpore parses ``MINDSPORE_DUMP_CONFIG`` lazily (at the first graph compile) and stops at the first bad value. This
module front-runs that parser: ``check(doc, target)`` returns *every* rejection (as :class:`ConfigError`) and every
silent trap (as warning texts) for one JSON document. The keys, types and value sets live in the ``SPECS`` table of
``_dump_keys.py``; the few rules that link several keys are the small ``_rule_*`` functions here. The rules are
summarised in ``docs/dump-rules.md``; they come from MindSpore 2.10's dump JSON parser and from the corpus in
``tests/data/dump_configs`` that MindSpore 2.10 itself judged.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

from msdebug_hooks.config._common import closest_name
# COMMON, E2E, MISSING, TARGETS, iteration_matches and path_problems are also read by dump.py through this module
from msdebug_hooks.config._dump_keys import (COMMON, E2E, KIND_WORDS, KNOWN_KEYS, MISSING, SPEC_BY_KEY, SPECS,  # noqa
                                             TARGETS, UINT32_MAX, VALUE_CHECKS, State, has_kind, iteration_matches,
                                             path_problems, wrapped)
from msdebug_hooks.errors import ConfigError


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
    elif not has_kind(value, "uint"):
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
        if spec.kind == "uint" and has_kind(value, "uint") and value > UINT32_MAX:
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
    return f"must be {KIND_WORDS[kind]}, not a JSON {_json_type(value)}"


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
        if not has_kind(value, spec.kind):
            state.error(spec.field, value, spec.allowed, detail=_kind_detail(value, spec.kind))
            continue
        if spec.choices and wrapped(value, spec.kind) not in spec.choices:
            state.error(spec.field, value, spec.allowed)
            continue
        check = VALUE_CHECKS.get(spec.key)
        if check:
            check(state, spec, value)
    for rule in RULES:
        rule(state)
    return state


class Findings(NamedTuple):
    """What the rules found in a dump config: what MindSpore would reject, and what it would accept but not do as
    the config looks."""

    errors: list[ConfigError]
    warnings: list[str]


def check(doc: Any, target: Optional[str]) -> Findings:
    """The errors and warnings for ``doc``. With ``target=None`` a rejection on only some targets becomes a warning
    naming them, so a config is refused outright only when MindSpore would refuse it everywhere. (Messages therefore
    never name the target: the same problem must read the same on every target.)"""
    if target is not None:
        state = check_one(doc, target)
        return Findings(state.errors, state.warnings)
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
    return Findings(errors, warnings)
