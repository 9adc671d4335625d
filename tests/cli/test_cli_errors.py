"""Bad files and paths given to any ``msdebug`` command: one line ``msdebug <cmd>: error: ...`` (or the file's own
error lines) and exit 2, never a Python traceback; nothing is created or half-written where it should not be."""
from __future__ import annotations

import subprocess
import sys

import pytest

from project import EXAMPLES, ROOT, guarded
from msdebug_hooks.cli import main


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def no_traceback(*texts: str) -> bool:
    return not any("Traceback" in text for text in texts)


# -- check-config and env on files that are not readable JSON -------------------------------------------------------

def test_check_config_on_a_directory(tmp_path, capsys):
    code, out, err = run_cli(capsys, "check-config", tmp_path)
    assert code == 2 and out == ""
    assert err.strip() == f"msdebug check-config: error: {tmp_path}: Is a directory"


def test_check_config_on_a_missing_file(tmp_path, capsys):
    missing = tmp_path / "nope.json"
    code, _, err = run_cli(capsys, "check-config", missing)
    assert code == 2 and err.strip() == f"msdebug check-config: error: {missing}: No such file or directory"


@pytest.mark.parametrize("text, expecting", [
    ('{"common_dump_settings": {\n', "Expecting property name"),
    ("\n", "Expecting value"),
    ("", "Expecting value"),
])
def test_truncated_json_is_invalid_not_a_crash(tmp_path, capsys, text, expecting):
    config = tmp_path / "dump.json"
    config.write_text(text)
    code, out, err = run_cli(capsys, "check-config", config)
    assert code == 2 and no_traceback(out, err)
    assert "'<end of file>' is not allowed" in out and expecting in out and "truncated or empty?" in out
    assert out.splitlines()[-1] == f"{config}: invalid"


def test_env_reports_a_truncated_or_directory_dump_config(tmp_path):
    config = tmp_path / "dump.json"
    config.write_text('{"common_dump_settings": {\n')
    for value, message in ((config, "truncated or empty?"), (tmp_path, "is a directory, not a file")):
        proc = subprocess.run([sys.executable, "-m", "msdebug_hooks", "env"], capture_output=True, text=True,
                              env=guarded({"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT),
                                           "MINDSPORE_DUMP_CONFIG": str(value)}), timeout=120)
        assert proc.returncode == 1 and no_traceback(proc.stdout, proc.stderr), proc.stderr
        assert message in proc.stdout and "no such file" not in proc.stdout


# -- --output FILE ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", [["dump-config", "--path", "/tmp/d"], ["log-env"], ["rdr-config"]])
def test_output_in_a_missing_directory_is_refused_and_nothing_is_created(tmp_path, capsys, command):
    target = tmp_path / "missing" / "dir" / "x.json"
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--output", str(target)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and f"directory {target.parent} does not exist" in err
    assert not (tmp_path / "missing").exists()


def test_output_under_a_file_or_onto_a_directory_is_refused(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    for target, message in ((afile / "x.json", f"{afile} is a file, not a directory"),
                            (tmp_path, f"{tmp_path} is a directory; give a file name")):
        with pytest.raises(SystemExit) as exit_info:
            main(["dump-config", "--path", "/tmp/d", "--output", str(target)])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert afile.read_text() == "keep me"


def test_unwritable_output_names_the_target_not_a_temporary_file(capsys):
    code, _, err = run_cli(capsys, "dump-config", "--path", "/tmp/d", "--output", "/proc/x.json")
    assert code == 2 and err.strip() == "msdebug dump-config: error: /proc/x.json: No such file or directory"


def test_ckpt_commands_on_directories_and_garbage(tmp_path, capsys):
    garbage = tmp_path / "bad.ckpt"
    garbage.write_bytes(b"\x00not a checkpoint")
    for argv in (["ckpt-scan", tmp_path], ["ckpt-diff", tmp_path, tmp_path], ["ckpt-scan", tmp_path / "no.ckpt"]):
        code, out, err = run_cli(capsys, *argv)
        assert code == 2 and err.startswith(f"msdebug {argv[0]}: error: ") and len(err.splitlines()) == 1, err


def test_example_dump_config_with_a_relative_dir():   # refused before MindSpore is imported
    proc = subprocess.run([sys.executable, str(EXAMPLES / "dump_config.py"), "relative/dir"], capture_output=True,
                          text=True, env=guarded({"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}), timeout=300)
    assert proc.returncode == 2 and no_traceback(proc.stderr)
    assert proc.stderr.strip().startswith(
        "dump_config.py: error: common_dump_settings.path='relative/dir' is not allowed: an absolute path")


# -- words a user should see ------------------------------------------------------------------------------------------

def _env(**extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "msdebug_hooks", "env"], capture_output=True, text=True,
                          env=guarded({"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **extra}), timeout=120)


def test_no_seed_docs_in_what_users_read(capsys):
    with pytest.raises(SystemExit):
        main(["log-env", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "seed" not in help_text
    assert "GLOG_log_max, the name some MindSpore docs use; MindSpore reads GLOG_max_log_size" in help_text
    proc = _env(GLOG_log_max="10")
    assert proc.returncode == 1 and "seed" not in proc.stdout
    assert "GLOG_log_max does not exist in MindSpore (some of its docs use that name)" in proc.stdout


def test_no_python_none_in_messages(capsys):
    code, _, err = run_cli(capsys, "rdr-config", "--mode", "2")
    assert code == 2 and "None" not in err
    assert err.strip() == "msdebug rdr-config: error: path is not set: an absolute directory when RDR is enabled"
    proc = _env(MS_RDR_ENABLE="1", MS_RDR_MODE="2")
    assert "None" not in proc.stdout and "MS_RDR_PATH is not set: an absolute directory when RDR is enabled" \
        in proc.stdout


@pytest.mark.parametrize("watch, message", [
    ("weight_change_too_large:abs_mean_update_ratio_gt=inf",
     "weight_change_too_large.abs_mean_update_ratio_gt=inf is not allowed: a finite number >= 0"),
    ("weight_change_too_large:foo=1",
     "weight_change_too_large.foo=1.0 is not allowed: a parameter of weight_change_too_large: "
     "abs_mean_update_ratio_gt, epsilon"),
    ("TensorTooLarge:abs_mean_gt=-1", "TensorTooLarge.abs_mean_gt=-1.0 is not allowed: a finite number >= 0"),
])
def test_conditions_are_named_as_typed_not_by_class(tmp_path, capsys, watch, message):
    code, _, err = run_cli(capsys, "check-dump", tmp_path, "--watch", watch)
    assert code == 2 and "Condition" not in err and err.strip() == f"msdebug check-dump: error: {message}"


def test_negative_sample_num_has_one_consistent_message(capsys):
    code, out, err = run_cli(capsys, "dump-config", "--path", "/tmp/d", "--sample-mode", "1", "--sample-num", "-5")
    assert code == 2 and out == "" and "non-negative" not in err
    assert err.strip() == ("msdebug dump-config: error: e2e_dump_settings.sample_num=-5 is not allowed: an integer "
                           ">= 1 (slice size; default 100) (negative: MindSpore reads this key as an unsigned integer)")


def test_a_malformed_npy_header_is_described_not_an_ast_object(tmp_path, capsys):
    import numpy as np

    from dump_fixtures import write_npy

    path = write_npy(tmp_path / "rank_0" / "Net" / "0" / "0" /
                     "ReLU.Default_ReLU-op0.0.0.7.output.0.DefaultFormat.Float32.npy", np.ones(3, np.float32))
    path.write_bytes(path.read_bytes().replace(b"'<f4'", b"foo_ "))
    code, out, err = run_cli(capsys, "check-dump", tmp_path, "--watch", "tensor_overflow")
    assert code == 3 and "<ast." not in out
    assert "expected a .npy file (numpy magic and header) (the header dictionary is malformed)" in out


def test_unwritable_and_unreadable_system_files(capsys):
    code, _, err = run_cli(capsys, "dump-config", "--path", "/tmp/d", "--output", "/sys/x.json")
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("msdebug dump-config: error: /sys/x.json: ")
    code, out, err = run_cli(capsys, "check-config", "/proc/self/mem")      # EIO, raised without a file name
    assert code == 2 and out == "" and err.strip() == "msdebug check-config: error: /proc/self/mem: Input/output error"


def test_every_command_help_is_plain_text(capsys):
    """Module docstrings serve as help: no reStructuredText literals or roles reach the terminal."""
    from msdebug_hooks.cli import build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    assert {"check-dump", "compare-loss", "compare-dumps", "compare-layers", "compare-weights"} <= set(commands)
    for name, command in commands.items():
        text = command.format_help()
        assert "``" not in text and ":class:" not in text, name
