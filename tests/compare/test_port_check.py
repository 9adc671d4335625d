"""The port check (``compare_models``, ``msdebug port-check``) and the HTML report (issue 24, items 2 and 3).

The ``mindspore`` part runs tests/scripts/port_check_run.py once (real MindSpore 2.10 CPU and real PyTorch CPU, one
process): every MindSpore-port case of the comparison corpus (``corpus.cases``: a ResNet-style CNN, a transformer
and whatever else the corpus holds) and an LSTM and a Conv1d port, each with ``compare_models``' defaults, no
mapping file and no converter. Clean ports must read clean; every planted bug must be named at the case's module.
The HTML report is opened in a real headless Chromium (skipped with the reason when it is not installed). The fast
part (no MindSpore) checks the report writer, the batch and import-path readers and the command's bad input.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from project import ROOT, fresh_env
from msdebug_hooks.compare.layer_capture import CaptureWriter
from msdebug_hooks.compare.replay import layer_candidates

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
from corpus.cases import CASES  # noqa: E402

PORT_CASES = [case.name for case in CASES if case.a.framework == "mindspore" and case.b.framework == "pytorch"]
EXTRA_CASES = ["lstm_port", "conv1d_port", "conv1d_leaky_relu_default"]
#: own error or inherited, where the case says which: the planted setting sits in the layer itself, except the
#: attention scale, which is applied in code before the softmax cell (so the softmax is handed a differing input)
REPLAY = {"cnn_batchnorm_eps": "own", "cnn_padding_stride2": "own", "transformer_layernorm_eps": "own",
          "transformer_gelu_tanh": "own", "transformer_wrong_activation": "own", "transformer_dropout_active": "own",
          "transformer_attention_scale": "inherited", "conv1d_leaky_relu_default": "own"}
HTML_CASE = "transformer_layernorm_eps"
MAGENTA = (1.0, 0.0, 200 / 255)


def _env() -> dict:
    env = fresh_env()
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(ROOT), env.get("PYTHONPATH", "")])
    env.setdefault("GLOG_v", "3")
    return env


def _msdebug(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "msdebug_hooks", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=timeout)


# --- the corpus through compare_models --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def port_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("port_check")
    proc = subprocess.run([sys.executable, str(TESTS / "scripts" / "port_check_run.py"), str(out)], env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return out, json.loads((out / "results.json").read_text())


@pytest.mark.mindspore
def test_every_port_case_of_the_corpus_ran(port_results):
    _, results = port_results
    assert set(PORT_CASES + EXTRA_CASES) <= set(results)
    assert {"cnn_port", "transformer_port", "transformer_renamed"} <= set(results)


@pytest.mark.mindspore
@pytest.mark.parametrize("name", PORT_CASES + EXTRA_CASES)
def test_port_case_is_named_at_its_module(port_results, name):
    _, results = port_results
    result = results[name]
    expect = result["expect"]
    if expect["layer"] is None:
        assert result["ok"], f"{name}: a correct port must read clean: {result['headline']} {result['settings']}"
        assert not result["settings"] and not result["updates"] and not result["unmatched"]
        assert result["marked"] is None and result["losses"][0]
        return
    assert not result["ok"], f"{name}: {result['planted']} was not found"
    assert result["marked"] in layer_candidates(expect["layer"]), (name, result["marked"], result["headline"])
    assert result["kind"] == expect["kind"], (name, result["headline"])
    frameworks = [source["framework"] for source in result["sources"]]
    assert frameworks == ["MindSpore", "PyTorch"], result["sources"]
    for source in result["sources"]:   # both lines point at the user's code and the layer's class
        assert source["call"] and ".py:" in source["call"] and source["definition"], source
    if name in REPLAY:
        assert result["replay"] == REPLAY[name], (name, result["headline"])


@pytest.mark.mindspore
def test_what_each_finding_adds(port_results):
    _, results = port_results
    assert "structure" in results["transformer_renamed"]["weights_by"]   # renamed attributes, no mapping file
    assert ["bn1", "momentum"] in results["cnn_batchnorm_momentum"]["settings"]
    assert ["layer1.1.bn2", "eps"] in results["cnn_batchnorm_eps"]["settings"]
    assert ["blocks.1.ffn.act", "approximate"] in results["transformer_gelu_tanh"]["settings"]
    assert ["act1", "negative_slope"] in results["conv1d_leaky_relu_default"]["settings"]
    assert "transposed" in results["transformer_transposed_weight"]["origin"]
    assert "blocks.0.attn.k_proj.weight" in results["transformer_swapped_qk"]["origin"]
    # a clean port's updates agree far below the gradient floor (1e-2)
    assert results["cnn_port"]["update_level"] < 1e-3 and results["transformer_port"]["update_level"] < 1e-3


# --- the HTML report in a real browser ----------------------------------------------------------------------------
def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no Chromium to open the HTML report in: apt-get install -y chromium")


def _browser(chromium: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--no-first-run", *args], capture_output=True, text=True, timeout=120)


def _magenta_pixels(png: Path) -> int:
    import matplotlib.image

    image = matplotlib.image.imread(str(png))[..., :3]
    return int(np.sum(np.all(np.abs(image - np.array(MAGENTA)) < 0.06, axis=-1)))


@pytest.mark.mindspore
def test_html_report_in_headless_chromium_shows_the_marked_layer(port_results, tmp_path):
    chromium = _chromium()
    out, _ = port_results
    page = (out / f"{HTML_CASE}.html").resolve()
    dom = _browser(chromium, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert 'data-ready="1"' in html                       # the page's script ran in the browser
    assert 'data-first-divergence="blocks.1.norm1"' in html
    assert "first divergence at blocks.1.norm1</title>" in html
    assert 'id="first-divergence"' in html and 'data-path="blocks.1.norm1"' in html
    assert "<svg" in html and "polyline" in html            # the loss curves
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")   # nothing fetched from a network
    shots = {}
    for label, name in (("bug", HTML_CASE), ("clean", "transformer_port")):
        shots[label] = tmp_path / f"{label}.png"
        shot = _browser(chromium, "--window-size=1200,1400", f"--screenshot={shots[label]}",
                        (out / f"{name}.html").resolve().as_uri())
        assert shot.returncode == 0 and shots[label].stat().st_size > 10_000, shot.stderr[-2000:]
    marked, clean = _magenta_pixels(shots["bug"]), _magenta_pixels(shots["clean"])
    assert marked > 3000 > clean, (marked, clean)   # the marked row is on screen, filled in its own colour


# --- the command ----------------------------------------------------------------------------------------------
_MODELS = """
import sys
sys.path.insert(0, {tests!r})
from corpus import transformer
from corpus.plants import PortPlants

def reference():
    return transformer.build_torch(seed=0)

def wrong_port():
    return transformer.build_mindspore(PortPlants({{"activation": {{"blocks.0.ffn.act": "relu"}}}}))
"""


@pytest.fixture
def models_dir(tmp_path):
    (tmp_path / "models.py").write_text(_MODELS.format(tests=str(TESTS)))
    from corpus import transformer

    x, y = transformer.make_batches(1, 8)[0]
    np.savez(tmp_path / "batch.npz", tokens=x, labels=y)
    return tmp_path


@pytest.mark.mindspore
def test_command_names_the_wrong_layer(models_dir):
    # a clean port's exit 0 is the corpus's cnn_port/transformer_port above; here: exit 1, the JSON and the HTML
    wrong = _msdebug("port-check", "--torch", "models.py:reference", "--mindspore", "models.py:wrong_port",
                     "--batch", "batch.npz", "--steps", "2", "--html", "report.html", "--json", cwd=models_dir)
    assert wrong.returncode == 1, wrong.stdout[-3000:] + wrong.stderr[-3000:]
    report = json.loads(wrong.stdout)
    assert report["ok"] is False and report["marked"] == "blocks.0.ffn.act" and report["marked_kind"] == "layer"
    assert report["layers"]["replay"]["verdict"] == "own"
    assert [s["framework"] for s in report["sources"]] == ["MindSpore", "PyTorch"]
    assert len(report["losses"]["mindspore"]) == 2
    page = (models_dir / "report.html").read_text()
    assert "first divergence at blocks.0.ffn.act" in page and "Traceback" not in wrong.stderr


_TORCH_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
import torch
import torch.nn.functional as F
from corpus import transformer

model = transformer.build_torch(seed=0)
torch.save(model.state_dict(), "initial.pth")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in transformer.make_batches(3, 8):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(torch.from_numpy(x).long()), torch.from_numpy(y).long())
    loss.backward()
    optimizer.step()
"""

_MINDSPORE_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
import mindspore as ms
import mindspore.dataset as ds
from mindspore import nn
from mindspore.train import Model
from corpus import transformer
from corpus.plants import PortPlants
from msdebug_hooks.compare import convert_torch_state
from msdebug_hooks.compare.torch import load_state_dict

ms.set_context(mode=ms.PYNATIVE_MODE)
net = transformer.build_mindspore(PortPlants({plants}))
ms.load_param_into_net(net, convert_torch_state(load_state_dict("initial.pth"), net), strict_load=True)
data = ds.GeneratorDataset(transformer.make_batches(3, 8), column_names=["x", "y"], shuffle=False)
loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
Model(net, loss, nn.SGD(net.trainable_params(), learning_rate=0.1)).train(1, data, dataset_sink_mode=False)
"""


@pytest.mark.mindspore
def test_two_unmodified_scripts(tmp_path):
    (tmp_path / "train_torch.py").write_text(_TORCH_SCRIPT.format(tests=str(TESTS)))
    (tmp_path / "train_ms.py").write_text(_MINDSPORE_SCRIPT.format(
        tests=str(TESTS), plants={"eps": {"blocks.1.norm1": 1e-3}}))
    proc = _msdebug("port-check", "--script-torch", "train_torch.py", "--script-mindspore", "train_ms.py",
                    "--stop", "2", "--workdir", "work", "--html", "scripts.html", "--json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    finding = report["layers"]["finding"]
    assert finding["kind"] == "layer" and finding["name"] == "blocks.1.norm1", finding
    assert report["layers"]["replay"]["verdict"] == "own"          # from the recorded inputs of both runs
    assert report["losses"]["forward_step"] == 1 and report["losses"]["steps_compared"] == 2
    assert "first divergence at blocks.1.norm1" in (tmp_path / "scripts.html").read_text()


@pytest.mark.mindspore
def test_a_script_that_fails_is_named_with_its_log(tmp_path):
    (tmp_path / "train_torch.py").write_text("raise RuntimeError('out of data')\n")
    (tmp_path / "train_ms.py").write_text("pass\n")
    proc = _msdebug("port-check", "--script-torch", "train_torch.py", "--script-mindspore", "train_ms.py",
                    "--workdir", "work", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert "--script-torch='train_torch.py'" in line and "pytorch.log" in line and "out of data" in line


# --- fast: no MindSpore --------------------------------------------------------------------------------------------
def _captures(tmp_path: Path, bump: float) -> tuple:
    rng = np.random.default_rng(0)
    a, b = CaptureWriter(tmp_path / "a", "mindspore"), CaptureWriter(tmp_path / "b", "pytorch")
    for order, name in enumerate(("conv1", "bn1", "layer1.0.conv1", "layer1.0.bn1", "fc")):
        value = rng.standard_normal((4, 8)).astype(np.float32)
        b.add(1, order, name, "forward-output", value)
        a.add(1, order, name, "forward-output", value * (1 + bump) if name == "layer1.0.bn1" else value)
    a.flush(), b.flush()
    return tmp_path / "a", tmp_path / "b"


def test_html_report_is_self_contained_and_pins_the_finding(tmp_path):
    from msdebug_hooks.compare.html_report import MARK_COLOUR, error_colour, write_html_report
    from msdebug_hooks.compare.layers import compare_layers

    report = compare_layers(*_captures(tmp_path, 1e-3))
    page = write_html_report(tmp_path / "r.html", report, losses={"MindSpore": [2.3, 2.1], "PyTorch": [2.3, 2.0]},
                             parted_step=2).read_text()
    assert "<title>msdebug comparison: first divergence at layer1.0.bn1</title>" in page
    assert 'id="first-divergence"' in page and 'data-path="layer1.0.bn1"' in page
    assert page.count("<polyline") == 2 and MARK_COLOUR in page
    assert "<link" not in page and "src=" not in page           # no stylesheet, script or image from elsewhere
    clean = write_html_report(tmp_path / "c.html", compare_layers(*_captures(tmp_path / "c", 0.0))).read_text()
    assert 'id="first-divergence"' not in clean and ": no divergence</title>" in clean and "<svg" not in clean
    # the scale: green below the noise, red far above it, dark red when not comparable, grey without a record
    assert error_colour(1e-9) == "hsl(120, 75%, 55%)" and error_colour(1.0) == "hsl(0, 75%, 55%)"
    assert error_colour(float("inf")) == "#7f0000" and error_colour(None) == "#d9d9d9"


def test_batch_files_and_generators(tmp_path):
    from msdebug_hooks.compare.port_inputs import generate_batch, read_batch
    from msdebug_hooks.errors import ConfigError

    np.savez(tmp_path / "b.npz", x=np.ones((2, 3), np.float32), mask=np.zeros((2, 3)), labels=np.arange(2))
    batch = read_batch(str(tmp_path / "b.npz"))
    assert [a.shape for a in batch.inputs] == [(2, 3), (2, 3)] and list(batch.target) == [0, 1]
    np.save(tmp_path / "one.npy", np.ones(4))
    assert read_batch(str(tmp_path / "one.npy")).target is None
    (tmp_path / "gen.py").write_text("import numpy as np\ndef make():\n    return np.ones((2, 2)), np.arange(2)\n"
                                     "def bad():\n    return 'tokens'\n")
    assert generate_batch(f"{tmp_path / 'gen.py'}:make").target.tolist() == [0, 1]
    for call, text in ((lambda: read_batch(str(tmp_path / "b.csv")), "a .npy (one input) or .npz"),
                       (lambda: read_batch(str(tmp_path / "missing.npz")), "no such file"),
                       (lambda: generate_batch(f"{tmp_path / 'gen.py'}:bad"), "it returned a str"),
                       (lambda: generate_batch(f"{tmp_path / 'gen.py'}:nothing"), "no 'nothing' there"),
                       (lambda: generate_batch("gen.py"), "'package.module:name'")):
        with pytest.raises(ConfigError) as caught:
            call()
        assert text in str(caught.value)


@pytest.mark.parametrize("args, text", [
    (["--torch", "nosuch_module_xyz:build", "--mindspore", "m.py:port", "--batch", "b.npz"],
     "--torch='nosuch_module_xyz:build' is not allowed: an importable module"),
    (["--torch", "m.py:ref", "--mindspore", "m.py:port", "--batch", "missing.npz"],
     "--batch='missing.npz' is not allowed"),
    (["--torch", "m.py:ref", "--mindspore", "m.py:port"], "--batch is not set"),
    (["--mindspore", "m.py:port", "--batch", "b.npz"], "--torch is not set"),
    (["--torch", "m.py:ref", "--mindspore", "m.py:port", "--batch", "b.npz", "--loss-torch", "m.py:ref"],
     "both (a loss of your own for each framework) or neither"),
    (["--script-torch", "missing.py", "--script-mindspore", "m.py"], "missing.py is not a file"),
    (["--script-torch", "m.py"], "--script-mindspore is not set"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, text):
    (tmp_path / "m.py").write_text("def ref():\n    raise RuntimeError('never built')\n")
    np.savez(tmp_path / "b.npz", x=np.ones((2, 3), np.float32))
    proc = _msdebug("port-check", *args, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and text in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_script_launcher_refuses_bad_settings(tmp_path):
    env = dict(_env(), MSDEBUG_LAYER_CAPTURE=str(tmp_path / "cap"), MSDEBUG_LAYER_CAPTURE_STEP="zero")
    (tmp_path / "s.py").write_text("print('ran')\n")
    proc = subprocess.run([sys.executable, "-m", "msdebug_hooks.compare.script_capture", str(tmp_path / "s.py")],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "MSDEBUG_LAYER_CAPTURE_STEP='zero' is not allowed" in proc.stderr
    assert "ran" not in proc.stdout


def test_import_does_not_pull_in_the_frameworks():
    code = textwrap.dedent("""
        import sys
        import msdebug_hooks.compare.port_check, msdebug_hooks.compare.html_report
        import msdebug_hooks.compare.port_scripts, msdebug_hooks.compare.script_capture, msdebug_hooks.cli.port_check
        print(sorted(m for m in ("mindspore", "torch") if m in sys.modules))
    """)
    proc = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "[]", proc.stderr
