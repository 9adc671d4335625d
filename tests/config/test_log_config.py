"""LogConfig: every rule, and the same verdicts as MindSpore 2.10 at import (run in fresh interpreters)."""
from __future__ import annotations

import os
import warnings

import pytest

from project import run_python
from msdebug_hooks.config._common import ConfigWarning
from msdebug_hooks.config.log import LOG_VARIABLES, SUBMODULES_2_10, LogConfig, parse_level, parse_submodule_text
from msdebug_hooks.errors import ConfigError, ConfigErrors

LOG_ENV_NAMES = (*LOG_VARIABLES, "GLOG_log_max", "VLOG_v", "RANK_ID", "OMPI_COMM_WORLD_RANK", "MS_NODE_ID")


@pytest.fixture
def clean_log_env(monkeypatch):
    """No logging variable set; what apply() writes is undone after the test by conftest's _isolated_environ."""
    for name in LOG_ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    yield monkeypatch


# -- levels -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    ("DEBUG", 0), ("info", 1), ("Warning", 2), ("ERROR", 3), ("critical", 4), (0, 0), (4, 4), ("3", 3), (" 1 ", 1)])
def test_level_accepts_names_any_case_and_numbers(value, expected):
    assert parse_level(value) == expected
    assert LogConfig(level=value).env()["GLOG_v"] == str(expected)


@pytest.mark.parametrize("value", ["LOUD", "WARN", 5, -1, True, "1.0", 1.0, None, ""])
def test_bad_level_names_field_value_and_allowed(value):
    with pytest.raises(ConfigError) as info:
        LogConfig(level=value)
    assert info.value.field == "level"
    assert info.value.value == value
    assert "0/DEBUG" in info.value.allowed and "4/CRITICAL" in info.value.allowed


def test_environment_levels_accept_digits_only_like_mindspore():
    assert parse_level("2", names=False) == 2
    with pytest.raises(ConfigError, match="write 1"):
        parse_level("INFO", "GLOG_v", names=False)


# -- submodules ---------------------------------------------------------------------------------------------------

def test_submodules_render_in_mindsporess_syntax():
    config = LogConfig(level="INFO", submodules={"PARSER": "WARNING", "ANALYZER": 2})
    assert config.env() == {"GLOG_v": "1", "GLOG_logtostderr": "1", "MS_SUBMODULE_LOG_v": "{PARSER:2,ANALYZER:2}"}


def test_all_39_submodules_of_2_10_are_accepted():
    assert len(SUBMODULES_2_10) == 39 == len(set(SUBMODULES_2_10))
    config = LogConfig(submodules={name: "ERROR" for name in SUBMODULES_2_10})
    assert config.env()["MS_SUBMODULE_LOG_v"].count(":3") == 39
    for name in ("HYPER_OFFLOAD", "PI", "EXTENSION", "SYMBOLIC_SHAPE"):  # new since the older 32-name table
        assert name in SUBMODULES_2_10


@pytest.mark.parametrize("name, suggestion", [("PARSR", "PARSER"), ("parser", "PARSER"), ("ANALYSER", "ANALYZER"),
                                              ("KERNAL", "KERNEL")])
def test_unknown_submodule_is_rejected_with_the_closest_name(name, suggestion):
    with pytest.raises(ConfigError) as info:
        LogConfig(submodules={name: 1})
    assert info.value.value == name
    assert info.value.field == f"submodules[{name!r}]"
    assert f"did you mean {suggestion!r}" in str(info.value)
    assert "only warns" in str(info.value)


def test_unknown_submodule_without_a_close_name_lists_the_known_ones():
    with pytest.raises(ConfigError) as info:
        LogConfig(submodules={"ZZZZ": 1})
    assert "did you mean" not in str(info.value) and "HYPER_OFFLOAD" in info.value.allowed


def test_bad_submodule_level_and_several_errors_at_once():
    with pytest.raises(ConfigErrors) as info:
        LogConfig(level="LOUD", submodules={"COMMON": 7, "PARSR": 1}, to_stderr=False)
    fields = [e.field for e in info.value.errors]
    assert fields == ["level", "submodules['COMMON']", "submodules['PARSR']", "log_dir"]
    with pytest.raises(ConfigError, match="mapping"):
        LogConfig(submodules=["PARSER"])


def test_submodule_text_parsing_follows_mindspore():
    assert parse_submodule_text("{PARSER: 2, COMMON :1}") == {"PARSER": "2", "COMMON": "1"}
    for bad in ("PARSER:2", "{}", "{PARSER}", "{PARSER:}", "{PARSER:2,}"):
        with pytest.raises(ConfigError, match="ignores the whole setting"):
            parse_submodule_text(bad)


# -- destination --------------------------------------------------------------------------------------------------

def test_file_logging_needs_an_absolute_log_dir_with_allowed_characters():
    with pytest.raises(ConfigError) as info:
        LogConfig(to_stderr=False)
    assert info.value.field == "log_dir" and "raises ValueError at import" in str(info.value)
    with pytest.raises(ConfigError, match="relative"):
        LogConfig(to_stderr=False, log_dir="logs")
    with pytest.raises(ConfigError, match="found ' '"):
        LogConfig(to_stderr=False, log_dir="/tmp/my logs")
    with pytest.raises(ConfigError, match="True .log to the screen"):
        LogConfig(to_stderr="yes")
    config = LogConfig(to_stderr=False, log_dir="/var/log/ms-run_1.2", stderr_threshold="ERROR")
    assert config.env() == {"GLOG_v": "2", "GLOG_logtostderr": "0", "GLOG_log_dir": "/var/log/ms-run_1.2",
                            "GLOG_stderrthreshold": "3"}


def test_file_only_settings_warn_when_logging_to_the_screen():
    with pytest.warns(ConfigWarning, match="log_dir, logger_max_bytes have no effect while MindSpore logs to"):
        LogConfig(log_dir="/tmp/x", logger_max_bytes=10)


def test_log_location_follows_mindsporess_rank_order(clean_log_env, tmp_path):
    assert LogConfig().log_location() is None
    config = LogConfig(to_stderr=False, log_dir=str(tmp_path))
    assert config.log_location() == tmp_path.resolve() / "rank_0" / "logs"
    assert config.log_location(rank=5) == tmp_path.resolve() / "rank_5" / "logs"
    clean_log_env.setenv("MS_NODE_ID", "3")
    assert config.log_location().parent.name == "rank_3"
    clean_log_env.setenv("OMPI_COMM_WORLD_RANK", "2")
    assert config.log_location().parent.name == "rank_2"
    clean_log_env.setenv("RANK_ID", "1")
    assert config.log_location().parent.name == "rank_1"


# -- sizes --------------------------------------------------------------------------------------------------------

def test_sizes_render_and_validate():
    config = LogConfig(to_stderr=False, log_dir="/tmp/l", max_log_size_mb=100, logger_max_bytes=0,
                       logger_backup_count=5)
    assert config.env()["GLOG_max_log_size"] == "100"
    assert config.env()["logger_maxBytes"] == "0" and config.env()["logger_backupCount"] == "5"
    for kwargs, field in (({"max_log_size_mb": 0}, "max_log_size_mb"), ({"max_log_size_mb": "abc"}, "max_log_size_mb"),
                          ({"logger_max_bytes": -1}, "logger_max_bytes"), ({"logger_backup_count": 2.5},
                                                                            "logger_backup_count"),
                          ({"logger_backup_count": True}, "logger_backup_count")):
        with pytest.raises(ConfigError) as info:
            LogConfig(to_stderr=False, log_dir="/tmp/l", **kwargs)
        assert info.value.field == field


def test_glog_log_max_alias_maps_to_glog_max_log_size_with_a_warning():
    with pytest.warns(ConfigWarning, match="GLOG_log_max .* not read by MindSpore.*GLOG_max_log_size"):
        config = LogConfig(to_stderr=False, log_dir="/tmp/l", log_max=20)
    assert config.env()["GLOG_max_log_size"] == "20" and "GLOG_log_max" not in config.env()
    with pytest.raises(ConfigError, match="same setting"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        LogConfig(to_stderr=False, log_dir="/tmp/l", log_max=20, max_log_size_mb=30)
    with pytest.warns(ConfigWarning, match="4096 MB or more as 1 MB"):
        LogConfig(to_stderr=False, log_dir="/tmp/l", max_log_size_mb=5000)


# -- from_env -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("config", [
    LogConfig(),
    LogConfig("DEBUG", {"PARSER": 3, "HYPER_OFFLOAD": 0}),
    LogConfig("INFO", to_stderr=False, log_dir="/tmp/logs", stderr_threshold=4, max_log_size_mb=7,
              logger_max_bytes=1000, logger_backup_count=3),
])
def test_from_env_reads_back_what_env_renders(config):
    assert LogConfig.from_env(config.env()) == config


def test_from_env_applies_mindsporess_reading():
    assert LogConfig.from_env({}) == LogConfig()  # unset: WARNING, to the screen
    assert LogConfig.from_env({"GLOG_v": " 1 ", "GLOG_log_dir": ""}).level == 1  # stripped; empty = unset
    assert LogConfig.from_env({"MS_SUBMODULE_LOG_v": "{ PARSER : 2 }"}).submodules == {"PARSER": 2}
    with pytest.raises(ConfigError) as info:
        LogConfig.from_env({"GLOG_v": "INFO"})
    assert info.value.field == "GLOG_v"
    with pytest.raises(ConfigErrors) as many:
        LogConfig.from_env({"GLOG_v": "9", "GLOG_logtostderr": "0", "MS_SUBMODULE_LOG_v": "PARSER:2",
                            "logger_backupCount": "x"})
    assert [e.field for e in many.value.errors] == ["MS_SUBMODULE_LOG_v", "GLOG_v", "logger_backupCount",
                                                      "GLOG_log_dir"]


def test_from_env_maps_glog_log_max_and_resolves_a_relative_log_dir():
    with pytest.warns(ConfigWarning, match="GLOG_log_max=64 is not read by MindSpore"):
        config = LogConfig.from_env({"GLOG_logtostderr": "0", "GLOG_log_dir": "/tmp/l", "GLOG_log_max": "64"})
    assert config.max_log_size_mb == 64
    with pytest.warns(ConfigWarning, match="relative"):
        config = LogConfig.from_env({"GLOG_logtostderr": "0", "GLOG_log_dir": "rel/logs"})
    assert config.log_dir == os.path.abspath("rel/logs")


# -- apply --------------------------------------------------------------------------------------------------------

def test_apply_sets_the_environment_and_handles_stale_variables(clean_log_env):
    clean_log_env.setenv("MS_SUBMODULE_LOG_v", "{PARSER:0}")
    clean_log_env.setenv("GLOG_log_max", "10")
    with pytest.warns(ConfigWarning, match="still set and not part of this LogConfig"):
        env = LogConfig(level="ERROR").apply()
    assert env == {"GLOG_v": "3", "GLOG_logtostderr": "1"} and os.environ["GLOG_v"] == "3"
    assert os.environ["MS_SUBMODULE_LOG_v"] == "{PARSER:0}"
    LogConfig(level="ERROR").apply(replace=True)
    assert "MS_SUBMODULE_LOG_v" not in os.environ and "GLOG_log_max" not in os.environ


@pytest.mark.mindspore
def test_apply_after_import_mindspore_warns():
    proc = run_python("""
        import warnings
        import mindspore
        from msdebug_hooks import LogConfig
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            LogConfig(level="INFO").apply(replace=True)
        print([str(w.message) for w in caught])
    """)
    assert "mindspore is already imported" in proc.stdout


# -- acceptance against real MindSpore 2.10 -----------------------------------------------------------------------

_IMPORT_WITH = """
    from msdebug_hooks import LogConfig
    LogConfig({args}).apply(replace=True)
    import mindspore
"""


def _import_mindspore_with(args: str) -> str:
    return run_python(_IMPORT_WITH.format(args=args)).stderr


@pytest.mark.mindspore
def test_info_level_makes_mindspore_log_info_lines_and_submodules_are_honoured():
    default = _import_mindspore_with("")
    info = _import_mindspore_with("level='INFO'")
    quiet_common = _import_mindspore_with("level='INFO', submodules={'COMMON': 'WARNING'}")
    assert "[INFO]" not in default
    # Python side (mindspore/log.py) and C++ side (glog) both log INFO while importing
    assert "[INFO] ME(" in info and "_check_version.py" in info
    assert "[INFO] COMMON(" in info
    # MS_SUBMODULE_LOG_v as we render it is read by MindSpore: COMMON is back at WARNING, the rest stays INFO
    assert "[INFO] COMMON(" not in quiet_common and "[INFO] ME(" in quiet_common
    assert "Parse submodule log configuration text error" not in quiet_common


@pytest.mark.mindspore
def test_bad_submodule_is_rejected_here_while_mindspore_only_warns():
    with pytest.raises(ConfigError, match="PARSR"):
        LogConfig(submodules={"PARSR": 1})
    with pytest.raises(ConfigError, match="Illegal log level value"):
        LogConfig.from_env({"MS_SUBMODULE_LOG_v": "{COMMON:7}"})
    proc = run_python("import mindspore; print('imported')",
                      env={"MS_SUBMODULE_LOG_v": "{PARSR:1,COMMON:7}", "GLOG_v": "2"})
    assert proc.returncode == 0 and "imported" in proc.stdout
    assert "Undefined module name PARSR, ignore it" in proc.stderr
    assert "Illegal log level value 7 for COMMON, ignore it" in proc.stderr


@pytest.mark.mindspore
@pytest.mark.parametrize("env, rejected", [
    ({"GLOG_v": "INFO"}, True),
    ({"GLOG_v": "5"}, True),
    ({"GLOG_stderrthreshold": "-1"}, True),
    ({"GLOG_logtostderr": "0"}, True),  # no GLOG_log_dir
    ({"GLOG_v": "3", "GLOG_stderrthreshold": "4"}, False),
])
def test_import_time_verdicts_agree_with_mindspore(env, rejected):
    full = {name: "" for name in LOG_VARIABLES}
    full.update(env)
    proc = run_python("import mindspore; print('imported')", env=full, check=False)
    mindspore_rejects = proc.returncode != 0
    assert mindspore_rejects == rejected, proc.stderr[-2000:]
    if rejected:
        assert "ValueError" in proc.stderr
        with pytest.raises(ConfigError):
            LogConfig.from_env(full)
    else:
        with pytest.warns(ConfigWarning, match="GLOG_stderrthreshold has no effect"):
            assert LogConfig.from_env(full).level == int(env["GLOG_v"])


@pytest.mark.mindspore
def test_file_logging_lands_where_log_location_says(tmp_path):
    proc = run_python(f"""
        import os
        from msdebug_hooks import LogConfig
        config = LogConfig(level="INFO", to_stderr=False, log_dir={str(tmp_path)!r})
        config.apply(replace=True)
        import mindspore
        from mindspore import log as logger
        logger.info("hello from the test")
        print(config.log_location(), os.getpid())
    """, env={"RANK_ID": "3"})
    location, pid = proc.stdout.split()
    assert location == str(tmp_path.resolve() / "rank_3" / "logs")
    files = os.listdir(location)
    assert f"mindspore.log.{pid}" in files  # the Python log
    assert any(name.startswith("mindspore.") and ".log.INFO." in name for name in files)  # glog's C++ log
    with open(os.path.join(location, f"mindspore.log.{pid}"), encoding="utf-8") as handle:
        assert "hello from the test" in handle.read()
    assert "[INFO]" not in proc.stderr  # to files, not the screen
