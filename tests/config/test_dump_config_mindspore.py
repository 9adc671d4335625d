"""DumpConfig against real MindSpore (CPU): 2.10, and each older supported release whose verdicts are recorded.

1. The corpus: every config in ``data/dump_configs/cases`` was run once through each MindSpore release by
   ``record_verdicts.py`` (``verdicts-<version>.json``); our validator (target CPU) must agree with each recorded
   verdict of each release, and where MindSpore dumped, our iteration model must predict exactly which iterations it
   wrote. A few cases are run again live through the installed MindSpore (in the compatibility lane: 2.7.2) to show
   its recorded verdicts are its own.
2. Live: LeNet trained in a fresh process with an applied DumpConfig dumps exactly the selected iterations.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from project import run_python
from msdebug_hooks.config.dump import DumpConfig, DumpConfigWarning
from msdebug_hooks.errors import ConfigError

DATA = Path(__file__).resolve().parents[1] / "data" / "dump_configs"
#: release -> its recorded manifest (verdicts-2.10.0.json, verdicts-2.7.2.json, ...)
MANIFESTS = {m["mindspore_version"]: m for m in (json.loads(f.read_text()) for f in DATA.glob("verdicts-*.json"))}
MANIFEST = MANIFESTS["2.10.0"]
CASES = MANIFEST["cases"]
RELEASE_CASES = [(release, name) for release in sorted(MANIFESTS) for name in sorted(MANIFESTS[release]["cases"])]


def our_verdict(name: str) -> tuple[str, str, DumpConfig | None]:
    """("accepted" | "rejected", message, config) as MindSpore would see the case at its first compile on CPU."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DumpConfigWarning)
        try:
            config = DumpConfig.load(DATA / "cases" / f"{name}.json", target="CPU")
            config.dump_dir(CASES[name]["env"])  # empty path: $MS_DIAGNOSTIC_DATA_PATH of that run
        except ConfigError as exc:
            return "rejected", str(exc), None
    return "accepted", "", config


@pytest.mark.parametrize("release", sorted(MANIFESTS))
def test_corpus_is_large_and_complete(release):
    files = {p.stem for p in (DATA / "cases").glob("*.json")}
    cases = MANIFESTS[release]["cases"]
    assert files == set(cases), f"every case file has a verdict of MindSpore {release} (run record_verdicts.py)"
    assert len(cases) >= 25 and MANIFESTS[release]["device_target"] == "CPU"
    verdicts = [c["verdict"] for c in cases.values()]
    assert verdicts.count("rejected") >= 10 and verdicts.count("accepted") >= 10


def test_every_supported_release_on_pypi_that_was_recorded_is_a_minor_version_of_ours():
    from msdebug_hooks import mindspore_versions

    assert {"2.10.0", "2.7.2"} <= set(MANIFESTS)
    assert set(MANIFESTS) <= {r.version for r in mindspore_versions.RELEASES}


@pytest.mark.parametrize("release, name", RELEASE_CASES)
def test_validator_agrees_with_mindspore(release, name):
    recorded = MANIFESTS[release]["cases"][name]
    verdict, message, config = our_verdict(name)
    assert verdict == recorded["verdict"], f"MindSpore: {recorded['error']}\nours: {message}"
    if verdict == "rejected":
        return
    if name.startswith("trap_") or recorded["dump_warnings"]:
        assert config.warnings, "MindSpore accepts this but it is a trap: we must warn"
    ran = range(3)  # the recorder trains 3 steps
    first = config.initial_iteration or 0
    if (config.op_debug_mode or 0) == 4:  # exception dump under e2e: MindSpore forces iteration "all"
        expected = [first + i for i in ran]
    else:
        expected = [first + i for i in ran if config.selects_iteration(first + i)]
    assert recorded["dumped_iterations"] == expected


@pytest.mark.parametrize("release", sorted(MANIFESTS))
def test_corpus_agreement_summary(capsys, release):
    cases = MANIFESTS[release]["cases"]
    agree = sum(our_verdict(name)[0] == case["verdict"] for name, case in cases.items())
    rejected = sum(case["verdict"] == "rejected" for case in cases.values())
    with capsys.disabled():
        print(f"\ndump config corpus: {len(cases)} configs, MindSpore {release} rejected {rejected}, "
              f"validator agrees on {agree}/{len(cases)}")
    assert agree == len(cases)


# a few cases of each kind, run again through the installed MindSpore (about 3 s each)
LIVE_CASES = ("bad_dump_mode_3", "bad_iteration_empty", "bad_net_name_int", "ok_minimal", "ok_iteration_ranges")


@pytest.mark.mindspore
@pytest.mark.parametrize("name", LIVE_CASES)
def test_recorded_verdicts_are_the_installed_mindspore_s_own(name):
    """The installed release's parser, run now, gives the verdict and writes the iterations its manifest records."""
    import importlib.util

    from msdebug_hooks._mindspore import installed_version_string

    release = installed_version_string()
    assert release in MANIFESTS, f"no corpus verdicts recorded for MindSpore {release}: run record_verdicts.py"
    spec = importlib.util.spec_from_file_location("record_verdicts", DATA / "record_verdicts.py")
    recorder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recorder)
    live = recorder.record(DATA / "cases" / f"{name}.json")
    recorded = MANIFESTS[release]["cases"][name]
    assert (live["verdict"], live["error"], live["dumped_iterations"]) == \
        (recorded["verdict"], recorded["error"], recorded["dumped_iterations"])


def test_without_a_target_every_config_mindspore_accepts_is_accepted():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DumpConfigWarning)
        for name, case in CASES.items():
            if case["verdict"] == "accepted":
                DumpConfig.load(DATA / "cases" / f"{name}.json")  # target=None is never stricter than a device


def test_round_trip_of_every_accepted_corpus_config():
    for name in CASES:
        verdict, _, config = our_verdict(name)
        if verdict != "accepted":
            continue
        doc = json.loads((DATA / "cases" / f"{name}.json").read_text())
        out = config.to_dict()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DumpConfigWarning)
            assert DumpConfig.from_dict(out, target="CPU").to_dict() == out, name
        for section, content in out.items():  # every known key keeps its value
            source = doc.get(section) if isinstance(doc.get(section), dict) else {}
            for key, value in content.items():
                assert source.get(key, "" if key == "path" else None) == value, (name, key)


# ------------------------------------------------------------------------------------------------------------------
# live MindSpore
# ------------------------------------------------------------------------------------------------------------------
TRAIN = """
    import json, os, sys, warnings
    from pathlib import Path
    warnings.simplefilter("always")
    import mindspore as ms                      # imported first: apply() must still work before the first compile
    from lenet import make_model, make_dataset
    from msdebug_hooks.config.dump import DumpConfig, DumpConfigWarning
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    dump = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(os.environ["DUMP_DIR"])

    def train(steps=6):
        model, _ = make_model()
        model.train(1, make_dataset(num_batches=steps, batch_size=8), dataset_sink_mode=False)

    def dumped():
        return sorted({int(p.parent.name) for p in dump.glob("rank_0/Net/*/*/*.npy")})

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DumpConfigWarning)
        {setup}
    print("RESULT " + json.dumps({{"dumped": dumped(), "env": env,
                                   "warnings": [str(w.message) for w in caught if w.category is DumpConfigWarning]}}))
"""


def run_training(tmp_path: Path, setup: str) -> dict:
    dump = tmp_path / "dump"
    code = TRAIN.replace("{setup}", setup.strip().replace("\n", "\n        ")).replace("{{", "{").replace("}}", "}")
    proc = run_python(code, env={"DUMP_DIR": str(dump), "XDG_CACHE_HOME": str(tmp_path / ".cache")}, timeout=300)
    line = [text for text in proc.stdout.splitlines() if text.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


@pytest.mark.mindspore
def test_lenet_dumps_exactly_iterations_1_and_3(tmp_path):
    result = run_training(tmp_path, """
env = DumpConfig(iteration="1|3", path=str(dump), net_name="Net", target="CPU").apply()
train()
""")
    assert result["dumped"] == [1, 3]
    assert result["warnings"] == []  # mindspore imported but nothing compiled: no warning
    config_file = Path(result["env"]["MINDSPORE_DUMP_CONFIG"])
    assert config_file.parent == tmp_path / ".cache" / "msdebug-hooks" / "dump-configs"  # a dotted dir is fine here
    copy = tmp_path / "dump" / "rank_0" / ".dump_metadata" / "data_dump.json"
    assert json.loads(copy.read_text())["common_dump_settings"]["iteration"] == "1|3"  # MindSpore read our file


@pytest.mark.mindspore
def test_around_step_5_dumps_iterations_3_and_4(tmp_path):
    result = run_training(tmp_path, """
env = DumpConfig.around_step(5, path=str(dump), net_name="Net").apply()
train()
""")
    assert result["dumped"] == [3, 4]


@pytest.mark.mindspore
def test_apply_after_a_compile_warns_and_is_really_ignored(tmp_path):
    result = run_training(tmp_path, """
train(2)                                     # compiles a graph with no dump configured
env = DumpConfig(iteration="all", path=str(dump)).apply()
train(2)
""")
    assert result["dumped"] == []  # MindSpore ignored the late setting, as the warning says
    assert len(result["warnings"]) == 1 and "already compiled" in result["warnings"][0]


@pytest.mark.mindspore
def test_empty_path_dumps_under_ms_diagnostic_data_path(tmp_path):
    diag = tmp_path / "diag"
    result = run_training(tmp_path, f"""
env = DumpConfig(iteration="2").apply(diagnostic_data_path={str(diag)!r})
dump = Path(env["MS_DIAGNOSTIC_DATA_PATH"]) / "debug_dump"
train(3)
""")
    assert result["env"]["MS_DIAGNOSTIC_DATA_PATH"] == str(diag)
    assert result["dumped"] == [2]


@pytest.mark.mindspore
def test_example_runs_and_lists_the_dumped_iterations(tmp_path):
    from project import EXAMPLES

    proc = run_python(f"import runpy, sys; sys.argv = ['dump_config.py', {str(tmp_path / 'dump')!r}]; "
                      f"runpy.run_path({str(EXAMPLES / 'dump_config.py')!r}, run_name='__main__')",
                      env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert "iteration '3|4'" in proc.stdout
    listed = [line.split(":")[0] for line in proc.stdout.splitlines() if line.endswith(".npy")]
    assert listed == ["iteration 3", "iteration 4"]
