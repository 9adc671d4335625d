"""Run zoo cases through the port check: one process per architecture (MindSpore and PyTorch memory stays bounded,
and a crash loses one architecture, not the zoo), each case built fresh from its zoos.

``python tests/zoo/runner.py OUT.jsonl CASE...`` runs the named cases in this process and appends one JSON line per
case; :func:`run` starts one such process per architecture and collects the lines. What a case reports:
``exit`` (0: the port matches, 1: a divergence or a differing setting, 2: ``ConfigError``, what ``msdebug
port-check`` would exit with), the marked layer, its kind, the replay's verdict, the layers after it that diverge
on their own (``later``), the settings found (``[layer, setting]``), the headline, the MindSpore layers of each
difference kept as published, whether the text, JSON and HTML reports agree, and the seconds the check took.
"""
from __future__ import annotations

import html
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
ROOT = TESTS.parent


def _build(case):
    """The two models of ``case``, aligned and planted as it says, and its batch."""
    from zoo.architectures import ARCHITECTURES_BY_NAME
    from zoo.differences import DIFFERENCES

    arch = ARCHITECTURES_BY_NAME[case.arch]
    differences = DIFFERENCES[case.arch]
    torch_kwargs = dict(arch.torch_kwargs)
    for difference in differences:
        if difference.key not in case.kept:
            torch_kwargs.update(difference.torch_kwargs)
    net = arch.build_mindspore()
    model = replace(arch, torch_kwargs=torch_kwargs).build_torch()
    kept_layers = {d.key: d.layers(net) for d in differences if d.key in case.kept}
    for difference in differences:
        if difference.key not in case.kept:
            difference.align(net, model)
    return arch, net, model, kept_layers


def run_case(case, work: Path) -> dict:
    """Build, plant, check; the case's report as a JSON-able dict."""
    from msdebug_hooks.compare.port_check import compare_models
    from msdebug_hooks.compare.port_weights import copy_into, pair_parameters, torch_state
    from msdebug_hooks.errors import ConfigError

    started = time.perf_counter()
    result = {"name": case.name, "arch": case.arch, "variant": case.variant, "planted": case.planted}
    arch, net, model, kept_layers = _build(case)
    result["kept_layers"] = kept_layers
    plant = case.plant_object()
    x, y = arch.batch()
    try:
        if plant is not None and plant.weights:   # the converter's mistake: the tool's own pairing, then the plant
            state = torch_state(model)
            copy_into(net, state, pair_parameters(state, net, None))
        if plant is not None:
            plant.apply(net)
        check = compare_models(model, net, x, y, copy_weights=not (plant is not None and plant.weights))
    except ConfigError as error:
        result.update(exit=2, error=str(error)[:2000], seconds=round(time.perf_counter() - started, 1))
        return result
    text = check.format()
    html_path = work / (case.name.replace("/", "__") + ".html")
    check.write_html(html_path)
    page = html_path.read_text(encoding="utf-8")
    as_json = json.loads(json.dumps(check.to_dict(), default=str))
    headline = check.headline()
    replay = check.layers.replay
    result.update(
        exit=0 if check.ok else 1, marked=check.marked, kind=check.marked_kind,
        replay=None if replay is None else replay.verdict, headline=headline,
        settings=[[f.layer, f.setting] for f in check.conventions],
        updates=[u.name for u in check.updates], later=check.later.layers,
        later_replays=[check.later.replayed, round(check.later.seconds, 1)],
        unmatched=[[r.name for r in side] for side in (check.layers.unmatched_a, check.layers.unmatched_b)],
        agree=bool(as_json["ok"] == check.ok and as_json["headline"] == headline and headline in text
                   and (headline in page or html.escape(headline) in page)),
        seconds=round(time.perf_counter() - started, 1))
    return result


def main(argv: list) -> int:
    from zoo.cases import cases_by_name

    import mindspore as ms

    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    out = Path(argv[0])
    known = cases_by_name()
    work = Path(tempfile.mkdtemp(prefix="zoo_"))
    for name in argv[1:]:
        try:
            result = run_case(known[name], work)
        except Exception as error:  # a case that cannot be built or run is reported, the others go on
            result = {"name": name, "exit": None, "error": f"{type(error).__name__}: {str(error)[:1500]}"}
        with out.open("a", encoding="utf-8") as stream:
            stream.write(json.dumps(result) + "\n")
        print(f"{name}: exit {result.get('exit')} {result.get('marked')} ({result.get('seconds')} s)", flush=True)
    return 0


def run(cases: list, out: Path, timeout: float = 1800.0, env: dict = None) -> list:
    """Run ``cases`` one process per architecture (in order); a process past ``timeout`` seconds is stopped and its
    unfinished cases are reported with ``exit: None``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("")
    env = dict(env or os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS), env.get("PYTHONPATH", "")])
    groups: dict = {}
    for case in cases:
        groups.setdefault(case.arch, []).append(case.name)
    with out.with_suffix(".log").open("w") as log:
        for names in groups.values():
            try:
                subprocess.run([sys.executable, str(Path(__file__).resolve()), str(out), *names], env=env,
                               timeout=timeout, check=False, stdout=log, stderr=subprocess.STDOUT)
            except subprocess.TimeoutExpired:
                pass
    done = {json.loads(line)["name"]: json.loads(line) for line in out.read_text().splitlines() if line.strip()}
    return [done.get(case.name, {"name": case.name, "exit": None, "error": "not run: the process timed out or died"})
            for case in cases]


if __name__ == "__main__":
    sys.path[:0] = [str(ROOT), str(TESTS)]
    sys.exit(main(sys.argv[1:]))
