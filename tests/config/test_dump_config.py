"""DumpConfig without MindSpore: every rule, message, warning, the file handling and the CLI."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from project import ROOT, run_python
from msdebug_hooks.cli import main as msdebug
from msdebug_hooks.config.dump import DumpConfig, DumpConfigWarning, default_config_dir
from msdebug_hooks.errors import ConfigError, ConfigErrors

COMMON, E2E = "common_dump_settings", "e2e_dump_settings"


def quiet(**fields) -> DumpConfig:
    """A DumpConfig built with its warnings recorded (returned in .warnings) instead of printed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DumpConfigWarning)
        return DumpConfig(**fields)


def base_doc(**common) -> dict:
    doc = {COMMON: {"dump_mode": 0, "path": "/tmp/dump", "net_name": "Net", "iteration": "1", "input_output": 0,
                    "kernels": [], "support_device": [0, 1, 2, 3, 4, 5, 6, 7]},
           E2E: {"enable": True, "trans_flag": True}}
    doc[COMMON].update(common)
    return doc


# ------------------------------------------------------------------------------------------------------------------
# construction
# ------------------------------------------------------------------------------------------------------------------
def test_defaults_are_a_valid_sync_dump_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = DumpConfig(path="/data/dump", net_name="LeNet", iteration="8|9")
    assert config.to_dict() == {
        COMMON: {"dump_mode": 0, "path": "/data/dump", "net_name": "LeNet", "iteration": "8|9", "input_output": 0,
                 "kernels": [], "support_device": [0, 1, 2, 3, 4, 5, 6, 7]},
        E2E: {"enable": True}}
    assert config.warnings == ()
    assert config.iteration == "8|9" and config.e2e is True


# (constructor fields, dotted field in the error, the "allowed" text that must be quoted)
REJECTED = [
    ({"dump_mode": 3}, f"{COMMON}.dump_mode", "0 (every kernel)"),
    ({"dump_mode": "0"}, f"{COMMON}.dump_mode", "must be a non-negative integer, not a JSON string"),
    ({"dump_mode": True}, f"{COMMON}.dump_mode", "not a JSON boolean"),
    ({"input_output": 3}, f"{COMMON}.input_output", "2 (outputs only)"),
    ({"net_name": "Le.Net"}, f"{COMMON}.net_name", "letters, digits, '-' and '_'"),
    ({"net_name": ""}, f"{COMMON}.net_name", "non-empty"),
    ({"iteration": "1 | 3"}, f"{COMMON}.iteration", "remove the spaces: '1|3'"),
    ({"iteration": 1}, f"{COMMON}.iteration", "must be a string"),
    ({"iteration": ""}, f"{COMMON}.iteration", '"all", or 0-based iterations'),
    ({"iteration": "ALL"}, f"{COMMON}.iteration", 'write "all" in lower case'),
    ({"iteration": "1,3"}, f"{COMMON}.iteration", 'joined by "|"'),
    ({"path": "dump/here"}, f"{COMMON}.path", "is not absolute"),
    ({"path": "/data/run.1"}, f"{COMMON}.path", "contains '.'"),
    ({"path": "/data/my dump"}, f"{COMMON}.path", "contains ' '"),
    ({"path": "/data/d\u00e9p"}, f"{COMMON}.path", "contains '\u00e9'"),
    ({"saved_data": "tensors"}, f"{COMMON}.saved_data", '"tensor" (default), "statistic" or "full"'),
    ({"op_debug_mode": 5}, f"{COMMON}.op_debug_mode", "0 (normal dump), 3 (overflow dump) or 4"),
    ({"op_debug_mode": 0.0}, f"{COMMON}.op_debug_mode", "not a JSON number with a fraction"),
    ({"overflow_number": 1}, f"{COMMON}.overflow_number", "only together with op_debug_mode 3"),
    ({"overflow_number": 1, "op_debug_mode": 0}, f"{COMMON}.overflow_number", "op_debug_mode is 0"),
    ({"overflow_number": "2", "op_debug_mode": 3}, f"{COMMON}.overflow_number", "must be a non-negative integer"),
    ({"initial_iteration": -1}, f"{COMMON}.initial_iteration",
     "negative: MindSpore reads this key as an unsigned integer"),
    ({"kernels": "conv"}, f"{COMMON}.kernels", "must be a JSON array, not a JSON string"),
    ({"dump_mode": 1, "kernels": ["name-regex(Conv2D[)"]}, f"{COMMON}.kernels", "valid regular expression"),
    ({"support_device": ["0"]}, f"{COMMON}.support_device", "entry '0' is not a number"),
    ({"support_device": [None]}, f"{COMMON}.support_device", "entry None is not a number"),
    ({"enable": "true"}, f"{E2E}.enable", "must be true or false"),
    ({"trans_flag": 1}, f"{E2E}.trans_flag", "must be true or false"),
    ({"save_kernel_args": "yes"}, f"{E2E}.save_kernel_args", "must be true or false"),
    ({"stat_calc_mode": "gpu"}, f"{E2E}.stat_calc_mode", '"host" (default) or "device"'),
    ({"device_stat_precision_mode": "medium"}, f"{E2E}.device_stat_precision_mode", '"high" (default) or "low"'),
    ({"sample_mode": 2}, f"{E2E}.sample_mode", "0 (whole tensors) or 1"),
    ({"sample_mode": 1, "sample_num": 0}, f"{E2E}.sample_num", "sample_num should be greater than 0"),
    ({"sample_mode": 1, "sample_num": "10"}, f"{E2E}.sample_num", "must be a non-negative integer"),
    ({"dump_mode": 2, "target": "CPU"}, f"{COMMON}.dump_mode", "2, set_dump marks, is Ascend only"),
    ({"dump_mode": 2, "target": "GPU"}, f"{COMMON}.dump_mode", "Set dump is only supported in Ascend"),
    ({"saved_data": "statistic", "target": "CPU"}, f"{COMMON}.saved_data", "statistic dump needs GPU or Ascend"),
    ({"saved_data": "full", "target": "CPU"}, f"{COMMON}.saved_data", "statistic dump needs GPU or Ascend"),
    ({"saved_data": "statistic", "statistic_category": ["max", "bogus"], "target": "GPU"},
     f"{COMMON}.statistic_category", "nan count"),
    ({"e2e": False, "target": "Ascend"}, f"{COMMON}.op_debug_mode", "required on Ascend when e2e_dump_settings is"),
    ({"e2e": False, "op_debug_mode": 0, "file_format": "csv", "target": "Ascend"}, f"{COMMON}.file_format",
     '"bin" or "npy"'),
    ({"e2e": False, "op_debug_mode": 0, "saved_data": "statistic", "target": "Ascend"}, f"{COMMON}.saved_data",
     'set file_format to "npy"'),
    ({"e2e": False, "trans_flag": True}, f"{E2E}.trans_flag", "left out (None) when e2e=False"),
]


@pytest.mark.parametrize("fields,field,allowed", REJECTED, ids=[f"{r[1].split('.')[-1]}={r[0]}" for r in REJECTED])
def test_rejection_names_field_value_and_what_is_allowed(fields, field, allowed):
    with pytest.raises(ConfigError) as info:
        quiet(**{"path": "/tmp/dump", **fields})
    error = info.value
    assert isinstance(error, ValueError)
    assert error.field == field, str(error)
    key = field.split(".")[-1]
    given = fields.get(key, fields.get("overflow_number"))
    if key in fields:  # the value, or for a list the offending entry
        assert repr(given) in str(error) or any(repr(item) in str(error) for item in given), str(error)
    assert allowed in str(error)


def test_all_problems_are_reported_at_once():
    with pytest.raises(ConfigErrors) as info:
        quiet(path="/data/run.1", net_name="my net", iteration="0 | 5", input_output=7, sample_mode=3, target="CPU",
              saved_data="statistic")
    fields = sorted(e.field for e in info.value.errors)
    assert fields == sorted([f"{COMMON}.path", f"{COMMON}.net_name", f"{COMMON}.iteration", f"{COMMON}.input_output",
                             f"{E2E}.sample_mode", f"{COMMON}.saved_data"])
    assert str(info.value).count("\n") == 5  # one line each


def test_target_is_checked_and_normalised():
    assert quiet(path="/d", target="cpu").target == "CPU"
    assert quiet(path="/d", target="ascend").target == "Ascend"
    with pytest.raises(ConfigError, match=r"target='TPU' is not allowed: one of \"CPU\", \"GPU\", \"Ascend\""):
        DumpConfig(path="/d", target="TPU")


@pytest.mark.parametrize("fields,where", [
    ({"dump_mode": 2}, "CPU/GPU"),
    ({"saved_data": "statistic"}, "CPU"),
    ({"e2e": False}, "Ascend"),
])
def test_without_target_a_device_dependent_rejection_is_a_warning_naming_the_devices(fields, where):
    with pytest.warns(DumpConfigWarning) as record:
        DumpConfig(path="/d", **fields)
    assert any(str(w.message).startswith(f"MindSpore rejects this on {where}:") for w in record)
    # the same config with a device that rejects it fails
    target = where.split("/")[0]
    with pytest.raises(ConfigError):
        quiet(path="/d", target=target, **fields)


# (fields, a substring of the warning): MindSpore accepts these, but they do not do what they look like
TRAPS = [
    ({"iteration": "0-"}, "matches no iteration at all: MindSpore accepts it and dumps nothing"),
    ({"iteration": "5-3"}, "matches no iteration at all"),
    ({"iteration": "1||"}, "the piece(s) '', '' match no iteration"),
    ({"iteration": "2|0-"}, "the piece(s) '0-' match no iteration"),
    ({"iteration": "1-2-3|4"}, "the piece(s) '1-2-3' match no iteration"),
    ({"e2e": False, "target": "CPU"}, "three times with a 1 s sleep each"),
    ({"op_debug_mode": 1}, "op_debug_mode=1 is silently turned into 3"),
    ({"op_debug_mode": 2}, "op_debug_mode=2 is silently turned into 3"),
    ({"op_debug_mode": 3, "dump_mode": 1, "kernels": ["conv"]}, "forces dump_mode to 0"),
    ({"op_debug_mode": 3, "input_output": 1}, "forces input_output to 0"),
    ({"op_debug_mode": 4, "iteration": "3", "target": "CPU"}, 'sets iteration to "all"'),
    ({"op_debug_mode": 4, "saved_data": "statistic", "target": "CPU"}, 'forced to "tensor"'),
    ({"file_format": "npy"}, "file_format='npy' is ignored: it is read only by Ascend async dump"),
    ({"stat_calc_mode": "device", "target": "GPU"}, '"device" is forced to "host": it is Ascend only'),
    ({"stat_calc_mode": "device", "target": "Ascend"}, "saved_data is 'tensor'"),
    ({"saved_data": "statistic", "stat_calc_mode": "device", "statistic_category": ["max", "md5"],
      "target": "Ascend"}, "['md5'] cannot be computed on the device"),
    ({"statistic_category": ["max"]}, "statistic_category=['max'] is ignored"),
    ({"sample_num": 10}, "sample_num=10 is ignored: it is read only when sample_mode is 1"),
    ({"support_device": [12]}, "device ids (DEVICE_ID, usually 0-7 on a server), not ranks"),
    ({"support_device": [-1]}, "becomes device id 4294967295"),
    ({"support_device": [0, 0]}, "lists device 0 twice"),
    ({"support_device": [], "target": "GPU"}, "dumps on no device at all"),
    ({"kernels": ["conv"]}, "kernels is ignored because dump_mode is not 1"),
    ({"dump_mode": 1, "kernels": []}, "MindSpore then matches every kernel"),
    ({"dump_mode": 1, "kernels": ["Conv2D", "Conv2D"]}, "lists 'Conv2D' twice"),
    ({"dump_mode": 1, "kernels": ["Con v2D"]}, "MindSpore removes spaces and looks for 'Conv2D'"),
    ({"dump_mode": 4294967296}, "wraps it to 0"),
]


@pytest.mark.parametrize("fields,text", TRAPS, ids=[str(t[0]) for t in TRAPS])
def test_silent_traps_are_accepted_with_a_warning(fields, text):
    with pytest.warns(DumpConfigWarning) as record:
        config = DumpConfig(**{"path": "/tmp/dump", **fields})
    messages = [str(w.message) for w in record]
    assert any(text in m for m in messages), messages
    assert list(config.warnings) == messages


def test_warning_points_at_the_callers_line():
    with pytest.warns(DumpConfigWarning) as record:
        DumpConfig(path="/d", iteration="0-")
    assert record[0].filename == __file__


def test_warnings_are_dump_config_and_config_warnings():
    from msdebug_hooks.config._common import ConfigWarning

    assert issubclass(DumpConfigWarning, ConfigWarning) and issubclass(DumpConfigWarning, UserWarning)


def test_pathlike_path_is_accepted():
    assert quiet(path=Path("/data/dump")).path == "/data/dump"


# ------------------------------------------------------------------------------------------------------------------
# from_dict / load / to_dict
# ------------------------------------------------------------------------------------------------------------------
def test_unknown_keys_warn_with_the_closest_known_key():
    doc = base_doc(iterations="2")
    doc[E2E]["trans_flags"] = False
    doc[COMMON]["sample_mode"] = 1
    doc["async_dump_settings"] = {}
    with pytest.warns(DumpConfigWarning) as record:
        config = DumpConfig.from_dict(doc)
    text = "\n".join(str(w.message) for w in record)
    assert "common_dump_settings.iterations is not a key MindSpore 2.10 reads" in text
    assert "Did you mean 'iteration'?" in text
    assert "Did you mean 'trans_flag'?" in text
    assert "'sample_mode' belongs in e2e_dump_settings" in text
    assert "2.10 has no async section" in text
    assert "iterations" not in config.to_dict()[COMMON]  # unknown keys are dropped from the output


def test_from_dict_missing_required_keys_and_sections():
    doc = base_doc()
    del doc[COMMON]["kernels"], doc[COMMON]["support_device"]
    with pytest.raises(ConfigErrors) as info:
        DumpConfig.from_dict(doc)
    assert {e.field for e in info.value.errors} == {f"{COMMON}.kernels", f"{COMMON}.support_device"}
    assert "<missing>" in str(info.value) and "kernels not found" in str(info.value)
    with pytest.raises(ConfigError, match="common_dump_settings=<missing> is not allowed"):
        DumpConfig.from_dict({E2E: {}})
    with pytest.raises(ConfigError, match="<top level>"):
        DumpConfig.from_dict([base_doc()])


def test_round_trip_constructor_dict_constructor():
    config = quiet(path="/data/dump", net_name="ResNet50", iteration="0|5-8|100-120", dump_mode=1,
                   kernels=("Default/Conv-op12", "name-regex(Default/.+)"), support_device=(0, 1), input_output=2,
                   op_debug_mode=0, initial_iteration=3, trans_flag=False, save_kernel_args=True,
                   stat_calc_mode="host", device_stat_precision_mode="low", sample_mode=1, sample_num=50)
    doc = config.to_dict()
    again = DumpConfig.from_dict(json.loads(json.dumps(doc)))
    assert again.to_dict() == doc and again == config
    assert again.kernels == ["Default/Conv-op12", "name-regex(Default/.+)"] and again.sample_num == 50


def test_from_dict_keeps_an_absent_enable_absent():
    doc = base_doc()
    del doc[E2E]["enable"]
    assert DumpConfig.from_dict(doc).to_dict() == doc


def test_from_dict_without_e2e_section_round_trips():
    doc = base_doc()
    del doc[E2E]
    with pytest.warns(DumpConfigWarning, match="e2e_dump_settings is missing"):
        config = DumpConfig.from_dict(doc, target="CPU")
    assert config.e2e is False and config.to_dict() == doc


def test_load_reports_bad_json_with_file_and_line(tmp_path):
    file = tmp_path / "dump.json"
    file.write_text('{\n  "common_dump_settings": {\n    "dump_mode": 0,\n  }\n}\n')
    with pytest.raises(ConfigError) as info:
        DumpConfig.load(file)
    assert f"{file}:4:3" in str(info.value) and "'}'" in str(info.value) and "no trailing commas" in str(info.value)


def test_load_rejects_nan_and_non_utf8(tmp_path):
    nan = tmp_path / "nan.json"
    nan.write_text(json.dumps(base_doc()).replace('"dump_mode": 0', '"dump_mode": NaN'))
    with pytest.raises(ConfigError, match="NaN"):
        DumpConfig.load(nan)
    latin = tmp_path / "latin.json"
    latin.write_bytes(json.dumps(base_doc()).replace("/tmp/dump", "/tmp/d\u00e9p").encode("latin-1"))
    with pytest.raises(ConfigError, match="UTF-8"):
        DumpConfig.load(latin)
    with pytest.raises(FileNotFoundError):
        DumpConfig.load(tmp_path / "missing.json")


def test_load_warns_about_duplicate_keys(tmp_path):
    file = tmp_path / "dup.json"
    file.write_text(json.dumps(base_doc()).replace('"iteration": "1"', '"iteration": "1", "iteration": "2"'))
    with pytest.warns(DumpConfigWarning, match="'iteration' appears twice .* the last value is used"):
        config = DumpConfig.load(file)
    assert config.iteration == "2"


# ------------------------------------------------------------------------------------------------------------------
# around_step and iteration matching
# ------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("step,iteration", [(1, "0"), (2, "0|1"), (5, "3|4"), (10, "8|9")])
def test_around_step_selects_the_failing_iteration_and_the_one_before(step, iteration):
    config = DumpConfig.around_step(step, path="/d")
    assert config.iteration == iteration
    assert [i for i in range(12) if config.selects_iteration(i)] == sorted({max(step - 2, 0), step - 1})


def test_around_step_counts_from_initial_iteration():
    assert DumpConfig.around_step(5, path="/d", initial_iteration=10).iteration == "13|14"
    assert DumpConfig.around_step(1, path="/d", initial_iteration=10).iteration == "10"


@pytest.mark.parametrize("step", [0, -3, True, 2.0, "5"])
def test_around_step_rejects_a_step_that_is_not_1_based(step):
    with pytest.raises(ConfigError, match=r"step=.* is not allowed: a 1-based step number >= 1"):
        DumpConfig.around_step(step, path="/d")


def test_around_step_refuses_an_iteration_as_well():
    with pytest.raises(ConfigError, match="iteration='1' is not allowed: not given"):
        DumpConfig.around_step(3, path="/d", iteration="1")


def test_selects_iteration_mirrors_mindspore():
    config = quiet(path="/d", iteration="0|5-8|100-120|0-|9-7")
    assert [i for i in range(130) if config.selects_iteration(i)] == [0, 5, 6, 7, 8] + list(range(100, 121))
    assert quiet(path="/d", iteration="all").selects_iteration(10**6)
    assert quiet(path="/d", iteration="01").selects_iteration(1)


# ------------------------------------------------------------------------------------------------------------------
# write / apply
# ------------------------------------------------------------------------------------------------------------------
def test_write_is_0600_creates_parents_and_holds_the_dict(tmp_path):
    config = quiet(path="/data/dump", iteration="1|3")
    target = config.write(tmp_path / "a" / "b" / "dump.json")
    assert target == tmp_path / "a" / "b" / "dump.json"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert json.loads(target.read_text()) == config.to_dict()
    assert DumpConfig.load(target) == config


def test_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    target = tmp_path / "dump.json"
    target.write_text("old contents")

    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="No space left"):
        quiet(path="/data/dump").write(target)
    assert target.read_text() == "old contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dump.json"]


def test_write_under_a_file_fails_and_writes_nothing(tmp_path):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("x")
    with pytest.raises(OSError):
        quiet(path="/data/dump").write(blocker / "dump.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not_a_dir"]


def test_write_revalidates_changed_attributes(tmp_path):
    config = quiet(path="/data/dump")
    config.iteration = "1 | 2"
    with pytest.raises(ConfigError, match="iteration"):
        config.write(tmp_path / "dump.json")
    assert not (tmp_path / "dump.json").exists()


def test_apply_writes_the_default_file_and_sets_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("MINDSPORE_DUMP_CONFIG", raising=False)
    config = quiet(path="/data/dump", net_name="LeNet", iteration="3")
    env = config.apply()
    file = Path(env["MINDSPORE_DUMP_CONFIG"])
    assert env == {"MINDSPORE_DUMP_CONFIG": str(file)} and os.environ["MINDSPORE_DUMP_CONFIG"] == str(file)
    assert file.parent == default_config_dir() == tmp_path / "cache" / "msdebug-hooks" / "dump-configs"
    assert file.name.startswith("LeNet-") and DumpConfig.load(file) == config
    assert config.apply() == env  # same config, same file


def test_apply_to_a_given_file(tmp_path, monkeypatch):
    monkeypatch.delenv("MINDSPORE_DUMP_CONFIG", raising=False)
    env = quiet(path="/data/dump").apply(tmp_path / "my.json")
    assert env == {"MINDSPORE_DUMP_CONFIG": str(tmp_path / "my.json")}


def test_apply_with_empty_path_needs_ms_diagnostic_data_path(tmp_path, monkeypatch):
    monkeypatch.delenv("MS_DIAGNOSTIC_DATA_PATH", raising=False)
    monkeypatch.delenv("MINDSPORE_DUMP_CONFIG", raising=False)
    config = quiet(iteration="1")
    with pytest.raises(ConfigError, match="MS_DIAGNOSTIC_DATA_PATH set when path is empty"):
        config.apply(tmp_path / "dump.json")
    assert not (tmp_path / "dump.json").exists() and "MINDSPORE_DUMP_CONFIG" not in os.environ
    with pytest.raises(ConfigError, match=r"MS_DIAGNOSTIC_DATA_PATH='/data/diag.1' is not allowed.*contains '\.'"):
        config.apply(tmp_path / "dump.json", diagnostic_data_path="/data/diag.1")
    env = config.apply(tmp_path / "dump.json", diagnostic_data_path="/data/diag")
    assert env == {"MINDSPORE_DUMP_CONFIG": str(tmp_path / "dump.json"), "MS_DIAGNOSTIC_DATA_PATH": "/data/diag"}
    assert os.environ["MS_DIAGNOSTIC_DATA_PATH"] == "/data/diag"
    assert config.dump_dir() == "/data/diag/debug_dump"


def test_import_does_not_import_mindspore():
    proc = run_python("""
        import sys, warnings
        from msdebug_hooks.config.dump import DumpConfig
        DumpConfig(path="/d").to_dict()
        print("mindspore" in sys.modules)
    """)
    assert proc.stdout.strip() == "False"


# ------------------------------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------------------------------
def test_cli_dump_config_prints_the_json(capsys):
    assert msdebug(["dump-config", "--path", "/data/dump", "--net-name", "LeNet", "--iteration", "1|3"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out) == DumpConfig(path="/data/dump", net_name="LeNet", iteration="1|3").to_dict()


def test_cli_kernels_imply_dump_mode_1_and_around_step(capsys):
    assert msdebug(["dump-config", "--path", "/d", "--kernels", "Conv2D", "name-regex(Default/fc.+)",
                    "--around-step", "5", "--target", "CPU", "--no-trans-flag"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc[COMMON]["dump_mode"] == 1 and doc[COMMON]["iteration"] == "3|4"
    assert doc[COMMON]["kernels"] == ["Conv2D", "name-regex(Default/fc.+)"] and doc[E2E]["trans_flag"] is False


def test_cli_bad_input_exits_2_naming_every_field(capsys):
    assert msdebug(["dump-config", "--path", "/data/run.1", "--iteration", "1 | 3", "--saved-data", "statistic",
                    "--target", "CPU"]) == 2
    err = capsys.readouterr().err
    for text in ("common_dump_settings.path='/data/run.1'", "common_dump_settings.iteration='1 | 3'",
                 "common_dump_settings.saved_data='statistic'"):
        assert text in err


def test_cli_warnings_go_to_stderr(capsys):
    assert msdebug(["dump-config", "--path", "/d", "--iteration", "0-"]) == 0
    captured = capsys.readouterr()
    assert "msdebug dump-config: warning: common_dump_settings.iteration='0-' matches no iteration" in captured.err
    json.loads(captured.out)


def test_cli_print_env_lines_eval_in_a_shell(tmp_path):
    output = tmp_path / "my dir" / "dump config.json"  # spaces: the export line must be quoted
    output.parent.mkdir()                                # --output never creates directories
    proc = subprocess.run(
        ["bash", "-c", 'eval "$("$0" -m msdebug_hooks dump-config --path /data/dump --around-step 5 '
                       '--print-env --output "$1")" && echo "$MINDSPORE_DUMP_CONFIG"', sys.executable, str(output)],
        capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(output)
    assert stat.S_IMODE(output.stat().st_mode) == 0o600
    assert DumpConfig.load(output).iteration == "3|4"


def test_cli_print_env_with_empty_path(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("MS_DIAGNOSTIC_DATA_PATH", raising=False)
    assert msdebug(["dump-config", "--print-env", "--output", str(tmp_path / "d.json")]) == 2
    assert "MS_DIAGNOSTIC_DATA_PATH" in capsys.readouterr().err and not (tmp_path / "d.json").exists()
    assert msdebug(["dump-config", "--print-env", "--output", str(tmp_path / "d.json"),
                    "--diagnostic-data-path", "/data/diag"]) == 0
    out = capsys.readouterr().out
    assert f"export MINDSPORE_DUMP_CONFIG={tmp_path / 'd.json'}\n" in out
    assert "export MS_DIAGNOSTIC_DATA_PATH=/data/diag\n" in out


def test_cli_resolves_a_relative_path_and_refuses_a_missing_one(tmp_path, monkeypatch, capsys):
    """Issue 32 point 4: ``--path dump`` is the ``dump`` under the current directory, said on stderr (MindSpore
    needs an absolute path); no ``--path`` and no ``MS_DIAGNOSTIC_DATA_PATH``: refused, exit 2, not ``"path": ""``."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MS_DIAGNOSTIC_DATA_PATH", raising=False)
    assert msdebug(["dump-config", "--path", "dump"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)[COMMON]["path"] == str(tmp_path / "dump")
    assert f"--path 'dump' is relative; the config names {tmp_path / 'dump'}" in captured.err
    assert msdebug(["dump-config", "--output", str(tmp_path / "d.json")]) == 2
    captured = capsys.readouterr()
    assert captured.err == ("msdebug dump-config: error: --path is not set: a dump directory, or "
                            "MS_DIAGNOSTIC_DATA_PATH (or --diagnostic-data-path) set, under which MindSpore dumps into "
                            "debug_dump\n")
    assert captured.out == "" and not (tmp_path / "d.json").exists()
    monkeypatch.setenv("MS_DIAGNOSTIC_DATA_PATH", "/data/diag")
    assert msdebug(["dump-config"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)[COMMON]["path"] == "" and "MindSpore will dump into /data/diag/debug_dump" in \
        captured.err


def test_cli_check_config_exit_codes(tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(base_doc()))
    assert msdebug(["check-config", str(good), "--target", "CPU"]) == 0
    from msdebug_hooks.mindspore_versions import installed_text

    assert f"valid for MindSpore {installed_text()} on CPU" in capsys.readouterr().out   # the installed release

    trap = tmp_path / "trap.json"
    trap.write_text(json.dumps(base_doc(iteration="0-", iterations="2")))
    assert msdebug(["check-config", str(trap)]) == 0
    out = capsys.readouterr().out
    assert "warning: common_dump_settings.iteration='0-' matches no iteration" in out
    assert "Did you mean 'iteration'?" in out and "2 warning(s)" in out
    assert msdebug(["check-config", str(trap), "--strict"]) == 1
    capsys.readouterr()

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(base_doc(saved_data="full", path="rel", dump_mode=2)))
    assert msdebug(["check-config", str(bad), "--target", "CPU"]) == 2
    out = capsys.readouterr().out
    assert "common_dump_settings.path='rel'" in out and "common_dump_settings.dump_mode=2" in out
    assert "common_dump_settings.saved_data='full'" in out and "invalid (3 errors)" in out

    assert msdebug(["check-config", str(tmp_path / "missing.json")]) == 2


@pytest.mark.parametrize("command", ["dump-config", "check-config"])
def test_cli_help(command, capsys):
    with pytest.raises(SystemExit) as info:
        msdebug([command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "usage: msdebug " + command in out and "example" in out
