"""``msdebug env``, ``msdebug log-env``, ``msdebug rdr-config``: the variable table's verdicts, exit codes 0/1/2, and
output a shell can eval."""
from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys

import pytest

from project import ROOT, guarded
from msdebug_hooks.config.env import BY_NAME, IGNORED, MISSING, MSDEBUG, NOTE, PROBLEM, VARIABLES, inspect_env
from msdebug_hooks.config.rdr import RDRConfig

V210 = (2, 10, 0)


def _clean_env(**extra: str) -> dict:
    """os.environ without any diagnostics variable (so the host's settings cannot change a verdict), plus extra."""
    family = re.compile(r"^(GLOG_|VLOG_|MS_|ENABLE_MS_DEBUGGER|MINDSPORE_|logger_|RANK_|DEVICE_ID|OMPI_)", re.I)
    env = {k: v for k, v in os.environ.items() if not family.match(k)}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return guarded(env)


def msdebug(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "msdebug_hooks", *args], env=_clean_env(**env),
                          capture_output=True, text=True, timeout=120)


def bash(script: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], env=_clean_env(PY=sys.executable, **env), capture_output=True,
                          text=True, timeout=120)


def _by_name(reports):
    return {r.name: r for r in reports}


# -- the table and inspect_env --------------------------------------------------------------------------------------

def test_table_has_one_entry_per_variable_with_meaning_and_treatment():
    names = [v.name for v in VARIABLES]
    assert len(names) == len(set(names))
    assert all(v.meaning and v.treatment for v in VARIABLES)
    for name in ("MINDSPORE_DUMP_CONFIG", "MS_DIAGNOSTIC_DATA_PATH", "MS_ACL_DUMP_CFG_PATH", "GLOG_v", "VLOG_v",
                 "MS_SUBMODULE_LOG_v", "logger_maxBytes", "logger_backupCount", "MS_RDR_ENABLE", "ENABLE_MS_DEBUGGER",
                 "MS_DEBUGGER_HOST", "MS_ENABLE_GRACEFUL_EXIT", "RANK_ID"):
        assert name in BY_NAME
    assert BY_NAME["GLOG_log_max"].treatment == MISSING
    assert BY_NAME["MS_RDR_MODE"].treatment == IGNORED
    assert BY_NAME["ENABLE_MS_DEBUGGER"].treatment == MSDEBUG


def test_clean_environment_has_nothing_to_report():
    assert inspect_env({"HOME": "/root", "PATH": "/bin"}, V210) == []


def test_each_rule(tmp_path):
    reports = _by_name(inspect_env({
        "GLOG_v": "INFO", "GLOG_log_max": "100", "GLOG_V": "1", "MS_RDR_ENABLE": "1", "MS_RDR_PATH": "/r",
        "ENABLE_MS_DEBUGGER": "1", "MS_DEBUGGER_PORT": "70000", "MINDSPORE_DUMP_CONFIG": str(tmp_path / "none.json"),
        "MS_SUBMODULE_LOG_v": "{PARSR:1}", "VLOG_v": "(1,", "RANK_ID": "1", "OMPI_COMM_WORLD_RANK": "2",
        "MS_ENABLE_GRACEFUL_EXIT": "true", "GLOG_logfile_mode": "0640", "MS_DEBUGGER_PARTIAL_MEM": "1",
    }, V210))

    def severities(name):
        return [f.severity for f in reports[name].findings]

    def text(name):
        return " ".join(f.message for f in reports[name].findings)

    assert PROBLEM in severities("GLOG_v") and "raises ValueError at import" in text("GLOG_v")
    assert PROBLEM in severities("GLOG_log_max") and "GLOG_max_log_size" in text("GLOG_log_max")
    assert "did you mean GLOG_v" in text("GLOG_V") and reports["GLOG_V"].variable is None
    assert PROBLEM in severities("MS_RDR_ENABLE") and "ignores RDR" in text("MS_RDR_PATH")
    assert PROBLEM not in severities("ENABLE_MS_DEBUGGER")  # ours, not MindSpore's: fine
    assert "1-65535" in text("MS_DEBUGGER_PORT")
    assert "no such file" in text("MINDSPORE_DUMP_CONFIG")
    assert "did you mean 'PARSER'" in text("MS_SUBMODULE_LOG_v")
    assert PROBLEM in severities("VLOG_v")
    assert severities("RANK_ID") == [NOTE] and "MindSpore uses RANK_ID" in text("RANK_ID")
    assert severities("MS_ENABLE_GRACEFUL_EXIT") == [NOTE]
    assert reports["GLOG_logfile_mode"].ok
    assert PROBLEM not in severities("MS_DEBUGGER_PARTIAL_MEM")  # accepted by our debugger, explained


def test_the_debuggers_own_variables_are_known_and_a_typo_is_not():
    environ = {name: "1" for name in ("MS_DEBUGGER_SOURCE", "MS_DEBUGGER_DUMP_DIR", "MS_DEBUGGER_DUMP_KERNELS",
                                      "MS_DEBUGGER_TLS_CA", "MS_DEBUGGER_TLS_CERT", "MS_DEBUGGER_TLS_KEY",
                                      "MS_DEBUGGER_TLS_SERVER_NAME", "MSDEBUG_DEBUGGER_ON_LOST",
                                      "MSDEBUG_DEBUGGER_WAIT")}
    environ["MS_DEBUGGER_TLS_CAA"] = "/ca.pem"
    reports = _by_name(inspect_env(environ, V210))
    assert all(reports[name].variable is not None for name in environ if name != "MS_DEBUGGER_TLS_CAA")
    assert reports["MS_DEBUGGER_TLS_CAA"].variable is None
    assert "did you mean MS_DEBUGGER_TLS_CA" in " ".join(f.message for f in reports["MS_DEBUGGER_TLS_CAA"].findings)


def test_verdicts_follow_the_version():
    environ = {"MS_RDR_ENABLE": "1", "MS_RDR_MODE": "2", "MS_RDR_PATH": "/r"}
    assert all(r.ok for r in inspect_env(environ, (2, 3, 1)))
    assert not any(r.ok for r in inspect_env(environ, V210))
    unknown = inspect_env(environ, (2, 6, 0))
    assert all(r.ok and r.findings[0].severity == NOTE for r in unknown)


def test_good_log_settings_pass_and_no_effect_settings_are_notes():
    reports = inspect_env({"GLOG_v": "1", "MS_SUBMODULE_LOG_v": "{PARSER:2,ANALYZER:2}", "GLOG_log_dir": "/tmp/l",
                           "VLOG_v": "(1,)", "GLOG_max_log_size": "20"}, V210)
    assert all(r.ok for r in reports)
    notes = _by_name(reports)["GLOG_log_dir"].findings
    assert notes and notes[0].severity == NOTE and "no effect" in notes[0].message


def test_dump_file_is_checked(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    report = inspect_env({"MINDSPORE_DUMP_CONFIG": str(bad)}, V210)[0]
    assert not report.ok
    good = tmp_path / "dump.json"
    good.write_text(json.dumps({
        "common_dump_settings": {"dump_mode": 0, "path": str(tmp_path / "dump"), "net_name": "Net",
                                 "iteration": "0", "saved_data": "tensor", "input_output": 0, "kernels": [],
                                 "support_device": [0, 1, 2, 3, 4, 5, 6, 7]},
        "e2e_dump_settings": {"enable": True, "trans_flag": True}}))
    report = inspect_env({"MINDSPORE_DUMP_CONFIG": str(good)}, V210)[0]
    assert report.ok, report.findings
    try:
        import msdebug_hooks.config.dump  # noqa: F401  (written by another part of the project)
    except ImportError:
        return
    rejected = tmp_path / "rejected.json"
    data = json.loads(good.read_text())
    data["common_dump_settings"]["iteration"] = "0 | 2"  # MindSpore rejects spaces in iteration
    rejected.write_text(json.dumps(data))
    report = inspect_env({"MINDSPORE_DUMP_CONFIG": str(rejected)}, V210)[0]
    assert not report.ok and "iteration" in report.findings[0].message


# -- msdebug env ----------------------------------------------------------------------------------------------------

@pytest.mark.mindspore
def test_env_command_exit_codes_and_output(tmp_path):
    clean = msdebug("env")
    assert clean.returncode == 0, clean.stderr
    assert "no problems" in clean.stdout
    ok = msdebug("env", GLOG_v="1", MS_SUBMODULE_LOG_v="{PARSER:2}")
    assert ok.returncode == 0 and "GLOG_v=1" in ok.stdout and "log level" in ok.stdout
    bad = msdebug("env", GLOG_log_max="100", MS_RDR_ENABLE="1", MS_RDR_PATH=str(tmp_path))
    assert bad.returncode == 1
    assert "GLOG_max_log_size" in bad.stdout and "ignores RDR" in bad.stdout and "PROBLEM" in bad.stdout
    data = json.loads(msdebug("env", "--json", "--all", GLOG_v="INFO").stdout)
    assert data["problems"] == 1 and data["variables"][0]["name"] == "GLOG_v"
    assert any(v["name"] == "MS_RDR_PATH" for v in data["unset"])
    missing = msdebug("env", GLOG_logtostderr="0")  # MindSpore raises at import: GLOG_log_dir is required
    assert missing.returncode == 1 and "GLOG_log_dir (not set)" in missing.stdout
    assert msdebug("env", "--bogus").returncode == 2


@pytest.mark.parametrize("command", ["env", "log-env", "rdr-config"])
def test_help_everywhere(command):
    proc = msdebug(command, "--help")
    assert proc.returncode == 0 and "usage: msdebug " + command in proc.stdout


# -- msdebug log-env ------------------------------------------------------------------------------------------------

def test_log_env_output_is_eval_able():
    proc = bash('eval "$($PY -m msdebug_hooks log-env --level info --submodule PARSER=WARNING '
                '--submodule ANALYZER=2)"; echo "$GLOG_v|$GLOG_logtostderr|$MS_SUBMODULE_LOG_v"')
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "1|1|{PARSER:2,ANALYZER:2}"


def test_log_env_to_files_and_quoting(tmp_path):
    log_dir = tmp_path / "logs"
    out = tmp_path / "log.env"
    proc = bash(f'eval "$($PY -m msdebug_hooks log-env --level DEBUG --log-dir {log_dir} --stderr-threshold ERROR '
                f'--log-max 64 --output {out})"; echo "$GLOG_logtostderr|$GLOG_log_dir|$GLOG_max_log_size"')
    assert proc.stdout.strip() == f"0|{log_dir}|64"
    assert "GLOG_log_max" in proc.stderr and "warning" in proc.stderr  # mapped, with a warning
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    sourced = bash(f'. {out}; echo "$GLOG_v"')
    assert sourced.stdout.strip() == "0"


def test_log_env_replace_unsets_stale_variables():
    proc = bash('eval "$($PY -m msdebug_hooks log-env --replace)"; echo "[$MS_SUBMODULE_LOG_v][$GLOG_log_max]"',
                MS_SUBMODULE_LOG_v="{PARSER:0}", GLOG_log_max="3")
    assert proc.stdout.strip() == "[][]"


@pytest.mark.parametrize("args, message", [
    (["--submodule", "PARSR=1"], "did you mean 'PARSER'"),
    (["--submodule", "PARSER"], "NAME=LEVEL"),
    (["--level", "LOUD"], "level='LOUD'"),
    (["--log-dir", "relative"], "relative"),
    (["--max-log-size-mb", "abc"], "not a whole number"),
    (["--max-log-size-mb", "0"], "positive"),
])
def test_log_env_bad_input_exits_2_with_the_reason(args, message):
    proc = msdebug("log-env", *args)
    assert proc.returncode == 2
    assert message in proc.stderr and proc.stdout == ""


@pytest.mark.mindspore
def test_log_env_info_reaches_mindspore_end_to_end():
    proc = bash('eval "$($PY -m msdebug_hooks log-env --level INFO)"; $PY -c "import mindspore"')
    assert proc.returncode == 0 and "[INFO] ME(" in proc.stderr


# -- msdebug rdr-config ---------------------------------------------------------------------------------------------

def test_rdr_config_exports_file_and_warning(tmp_path):
    out = tmp_path / "cfg" / "mindspore_config.json"
    out.parent.mkdir()      # --output never creates directories
    proc = bash(f'eval "$($PY -m msdebug_hooks rdr-config --path {tmp_path}/r --mode 2 --mem-reuse off '
                f'--output {out})"; echo "$MS_RDR_ENABLE|$MS_RDR_MODE|$MS_RDR_PATH"')
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"1|2|{tmp_path}/r"
    assert "ignores RDR" in proc.stderr
    data = json.loads(out.read_text())
    assert data["sys"] == {"mem_reuse": False}
    assert RDRConfig.from_dict(data) == RDRConfig(mode=2, path=f"{tmp_path}/r")


@pytest.mark.parametrize("args, message", [
    (["--path", "/r", "--mode", "3"], "mode=3"),
    (["--mode", "2"], "path is not set: an absolute directory"),
    (["--path", "rel"], "absolute"),
    (["--path", "/r", "--mem-reuse", "off"], "--output"),
    (["--path", "/r", "--mode", "x"], "invalid int value"),
])
def test_rdr_config_bad_input_exits_2(args, message):
    proc = msdebug("rdr-config", *args)
    assert proc.returncode == 2 and message in proc.stderr and proc.stdout == ""
