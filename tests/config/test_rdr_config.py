"""RDRConfig and MemReuseConfig: every rule, the file-over-variables precedence, and what MindSpore 2.10 really does
with them."""
from __future__ import annotations

import json
import os
import stat
import warnings

import pytest

from project import run_python
from msdebug_hooks.config._common import ConfigWarning
from msdebug_hooks.config.rdr import (RDR_VARIABLES, MemReuseConfig, RDRConfig, RDRNotSupportedWarning, rdr_support,
                                      write_env_config)
from msdebug_hooks.errors import ConfigError, ConfigErrors


@pytest.fixture
def no_rdr_env(monkeypatch):
    """No MS_RDR_* set; what apply() writes is undone after the test by conftest's _isolated_environ."""
    for name in RDR_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    yield monkeypatch


def test_both_forms_of_the_seed_example():
    config = RDRConfig(enable=True, mode=1, path="/path/to/rdr/dir")
    assert config.to_dict() == {"rdr": {"enable": True, "mode": 1, "path": "/path/to/rdr/dir"}}
    assert config.env() == {"MS_RDR_ENABLE": "1", "MS_RDR_MODE": "1", "MS_RDR_PATH": "/path/to/rdr/dir"}
    assert RDRConfig(mode=2, path="/r").output_dir(rank=4) == __import__("pathlib").Path("/r/rank_4/rdr")
    assert RDRConfig(enable=False).env() == {"MS_RDR_ENABLE": "0", "MS_RDR_MODE": "1"}


@pytest.mark.parametrize("kwargs, field, value", [
    ({"mode": 3, "path": "/r"}, "mode", 3),
    ({"mode": True, "path": "/r"}, "mode", True),
    ({"mode": "2", "path": "/r"}, "mode", "2"),
    ({"enable": "yes", "path": "/r"}, "enable", "yes"),
    ({"enable": 1, "path": "/r"}, "enable", 1),
    ({"path": "relative/dir"}, "path", "relative/dir"),
    ({"path": ""}, "path", ""),
    ({"path": "/" + "a" * 5000}, "path", "/" + "a" * 5000),
    ({}, "path", None),  # enabled without a path
])
def test_bad_values_name_field_value_and_allowed(kwargs, field, value):
    with pytest.raises(ConfigError) as info:
        RDRConfig(**kwargs)
    assert (info.value.field, info.value.value) == (field, value)
    assert info.value.allowed


def test_all_problems_are_reported_at_once():
    with pytest.raises(ConfigErrors) as info:
        RDRConfig(enable="on", mode=0, path="x")
    assert [e.field for e in info.value.errors] == ["enable", "mode", "path"]


def test_file_form_round_trip_and_unknown_keys(tmp_path):
    config = RDRConfig(mode=2, path="/data/rdr")
    with pytest.warns(RDRNotSupportedWarning):
        path = config.write(tmp_path / "sub" / "mindspore_config.json")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert RDRConfig.load(path) == config
    with pytest.warns(ConfigWarning, match="unknown key rdr.mod .*did you mean 'mode'"):
        RDRConfig.from_dict({"rdr": {"enable": True, "mod": 2, "path": "/r"}})
    with pytest.raises(ConfigError) as info:
        RDRConfig.from_dict({"rdr": {"enable": True, "mode": 5, "path": "/r"}})
    assert info.value.field == "rdr.mode"
    with pytest.raises(ConfigError, match='a section {"rdr"'):
        RDRConfig.from_dict({"sys": {"mem_reuse": True}})
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match="a JSON object"):
        RDRConfig.load(tmp_path / "bad.json")


def test_a_failed_write_leaves_no_file(tmp_path):
    target = tmp_path / "is_a_dir"
    target.mkdir()
    with pytest.raises(OSError), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        RDRConfig(path="/r").write(target)
    assert os.listdir(tmp_path) == ["is_a_dir"] and os.listdir(target) == []


def test_env_form_parsing():
    assert RDRConfig.from_env({}) is None
    assert RDRConfig.from_env({"MS_RDR_ENABLE": "1", "MS_RDR_MODE": "2", "MS_RDR_PATH": "/r"}) == \
        RDRConfig(mode=2, path="/r")
    with pytest.raises(ConfigErrors) as info:
        RDRConfig.from_env({"MS_RDR_ENABLE": "yes", "MS_RDR_MODE": "3", "MS_RDR_PATH": "rel"})
    assert [e.field for e in info.value.errors] == ["MS_RDR_ENABLE", "MS_RDR_MODE", "MS_RDR_PATH"]


def test_config_file_takes_precedence_over_environment_key_by_key():
    environ = {"MS_RDR_ENABLE": "1", "MS_RDR_MODE": "2", "MS_RDR_PATH": "/from/env"}
    resolved = RDRConfig.resolve({"rdr": {"path": "/from/file"}}, environ)
    assert resolved == RDRConfig(mode=2, path="/from/file")  # path from the file, mode still from the env
    resolved = RDRConfig.resolve({"rdr": {"enable": False, "mode": 1}}, environ)
    assert (resolved.enable, resolved.mode, resolved.path) == (False, 1, "/from/env")
    assert RDRConfig.resolve(None, environ) == RDRConfig(mode=2, path="/from/env")
    assert RDRConfig.resolve({}, {}) is None


def test_support_is_decided_by_numeric_version():
    assert rdr_support((2, 3, 1))[0] is True
    assert rdr_support((1, 10, 0))[0] is True  # "1.10" > "1.2" numerically, still documented
    assert rdr_support((2, 6, 0))[0] is None   # between the documented and the verified releases
    assert rdr_support((2, 7, 0))[0] is True    # 2.7.0 still writes RDR data (run once; mindspore_versions)
    assert rdr_support((2, 7, 1))[0] is False and rdr_support((2, 7, 2))[0] is False
    assert rdr_support((2, 10, 0))[0] is False  # a string comparison would call "2.10" older than "2.7"
    assert rdr_support((3, 0))[0] is False
    assert "ignores RDR" in rdr_support((2, 10, 0))[1]


def test_apply_sets_the_variables_and_warns_on_the_installed_2_10(no_rdr_env, tmp_path):
    from msdebug_hooks import _mindspore

    assert _mindspore.installed_version()[:2] == (2, 10)
    with pytest.warns(RDRNotSupportedWarning, match="MindSpore 2.10.0 ignores RDR"):
        env = RDRConfig(mode=2, path=str(tmp_path)).apply(file=tmp_path / "cfg.json")
    assert env == {"MS_RDR_ENABLE": "1", "MS_RDR_MODE": "2", "MS_RDR_PATH": str(tmp_path)}
    assert all(os.environ[k] == v for k, v in env.items())
    assert json.loads((tmp_path / "cfg.json").read_text())["rdr"]["mode"] == 2


@pytest.mark.mindspore
def test_mindspore_2_10_writes_no_rdr_data_which_is_why_apply_warns(tmp_path):
    """Both forms set, graph-mode training ends normally with mode 2: an RDR build would export; 2.10 writes nothing."""
    rdr_dir = tmp_path / "rdr"
    proc = run_python(f"""
        import warnings
        from msdebug_hooks import RDRConfig
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            RDRConfig(mode=2, path={str(rdr_dir)!r}).apply(file={str(tmp_path / 'cfg.json')!r})
        print("WARNED", [w.category.__name__ for w in caught])
        import mindspore
        mindspore.set_context(mode=mindspore.GRAPH_MODE, env_config_path={str(tmp_path / 'cfg.json')!r})
        from lenet import make_dataset, make_model
        model, _ = make_model()
        model.train(1, make_dataset(num_batches=2), dataset_sink_mode=False)
        print("TRAINED")
    """, env={"RANK_ID": "0", "GLOG_v": "2"})
    assert "WARNED ['RDRNotSupportedWarning']" in proc.stdout and "TRAINED" in proc.stdout
    assert "'env_config_path' parameter is deprecated" in proc.stderr
    assert not rdr_dir.exists()


def test_mem_reuse_forms_and_validation(tmp_path):
    assert MemReuseConfig(False).to_dict() == {"sys": {"mem_reuse": False}}
    assert MemReuseConfig().env() == {}
    with pytest.raises(ConfigError) as info:
        MemReuseConfig("false")
    assert (info.value.field, info.value.value) == ("mem_reuse", "false")
    with pytest.raises(ConfigError) as info:
        MemReuseConfig.from_dict({"sys": {"mem_reuse": 0}})
    assert info.value.field == "sys.mem_reuse"
    with pytest.raises(ConfigError, match='"sys"'):
        MemReuseConfig.from_dict({"rdr": {}})
    path = MemReuseConfig(False).write(tmp_path / "m.json")
    assert MemReuseConfig.from_dict(json.loads(path.read_text())) == MemReuseConfig(False)
    with pytest.warns(RDRNotSupportedWarning):
        both = write_env_config(tmp_path / "both.json", RDRConfig(path="/r"), MemReuseConfig(False))
    assert set(json.loads(both.read_text())) == {"rdr", "sys"}


@pytest.mark.mindspore
def test_mem_reuse_apply_is_read_by_mindspore_2_10(tmp_path):
    proc = run_python(f"""
        import mindspore
        from msdebug_hooks import MemReuseConfig
        path = MemReuseConfig(False).apply({str(tmp_path / 'env.json')!r})
        print("CONTEXT", mindspore.get_context("env_config_path") == str(path))
        from lenet import make_dataset, make_model
        model, _ = make_model()
        model.train(1, make_dataset(num_batches=2), dataset_sink_mode=False)
        print("TRAINED")
    """, env={"GLOG_v": "2"})
    assert "CONTEXT True" in proc.stdout and "TRAINED" in proc.stdout
    assert "'env_config_path' parameter is deprecated" in proc.stderr
