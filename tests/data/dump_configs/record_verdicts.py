"""Record MindSpore's own verdict on every dump config in ``cases/`` into ``verdicts-<version>.json``.

Run once, by hand, with the interpreter of each supported MindSpore, whenever a case is added (about 3 s per case;
the missing-``e2e_dump_settings`` case costs 3 s more in MindSpore's own sleeps)::

    .venv/bin/python tests/data/dump_configs/record_verdicts.py            # every case -> verdicts-2.10.0.json
    .venv/bin/python tests/data/dump_configs/record_verdicts.py NAME ...   # only these (merged into the manifest)
    # a venv with MindSpore 2.7.2 and `pip install --no-deps .` -> verdicts-2.7.2.json:
    /tmp/ms27/bin/python tests/data/dump_configs/record_verdicts.py

Each case runs in a fresh interpreter (MindSpore parses ``MINDSPORE_DUMP_CONFIG`` once per process, at the first graph
compile): LeNet in GRAPH_MODE on the CPU, three training steps, with ``MINDSPORE_DUMP_CONFIG`` pointing at the case file
itself. The manifest records whether MindSpore accepted it, the first line of its error otherwise, the dump warnings it
logged and the iteration directories it really wrote. ``tests/test_dump_config_mindspore.py`` then checks that our
validator agrees, without running MindSpore again.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
CASES = HERE / "cases"
DUMP_ROOT = Path("/tmp/msdebug-dump-corpus")  # every case's "path" lives under here

# Extra environment for particular cases (the rest run with MS_DIAGNOSTIC_DATA_PATH unset).
CASE_ENV = {
    "path_empty_with_diag_env": {"MS_DIAGNOSTIC_DATA_PATH": str(DUMP_ROOT / "diag_env")},
}

CHILD = r"""
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
result = {"ok": True, "error": None}
try:
    import mindspore as ms
    from lenet import make_model, make_dataset
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    model, _ = make_model()
    model.train(1, make_dataset(num_batches=3, batch_size=8), dataset_sink_mode=False)
except BaseException as exc:  # MindSpore raises RuntimeError/TypeError/ValueError from the C++ parser
    first_line = (str(exc).strip().splitlines() or [""])[0]
    result = {"ok": False, "error": f"{type(exc).__name__}: {first_line}"}
print("@@RESULT@@" + json.dumps(result))
"""

WARNING_LINE = re.compile(r"^\[WARNING\] \S+ \[[^\]]*\] [^\]]*\] (?P<msg>.*)$|^\[WARNING\].*?\] [^\]]*\] (?P<msg2>.*)$")


def dump_warnings(stderr: str) -> list[str]:
    """MindSpore's WARNING lines about dump, without the pid/time/source prefix."""
    found = []
    for line in stderr.splitlines():
        if not line.startswith("[WARNING]") or "ump" not in line:
            continue
        match = WARNING_LINE.match(line)
        message = (match.group("msg") or match.group("msg2")) if match else line
        if message not in found:
            found.append(message.strip())
    return found


def dumped_iterations(root: Path) -> list[int]:
    """Iteration directories that hold at least one dumped tensor, anywhere under ``root``."""
    iterations = set()
    for npy in root.glob("**/rank_*/*/*/*/*.npy"):
        if npy.parent.name.isdigit():
            iterations.add(int(npy.parent.name))
    return sorted(iterations)


def record(case: Path) -> dict:
    name = case.stem
    extra_env = CASE_ENV.get(name, {})
    shutil.rmtree(DUMP_ROOT, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k not in ("MS_DIAGNOSTIC_DATA_PATH", "MINDSPORE_DUMP_CONFIG")}
    env.update(extra_env)
    env["MINDSPORE_DUMP_CONFIG"] = str(case)
    env.setdefault("GLOG_v", "2")  # warnings and errors
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", CHILD, str(ROOT / "examples")], env=env, capture_output=True,
                          text=True, timeout=600)
    seconds = time.monotonic() - started
    marker = [line for line in proc.stdout.splitlines() if line.startswith("@@RESULT@@")]
    if marker:
        result = json.loads(marker[-1][len("@@RESULT@@"):])
    else:  # the process died (abort, segfault) before reporting
        result = {"ok": False, "error": f"process died with exit code {proc.returncode}: {proc.stderr.strip()[-300:]}"}
    entry = {
        "verdict": "accepted" if result["ok"] else "rejected",
        "error": result["error"],
        "env": extra_env,
        "dump_warnings": dump_warnings(proc.stderr),
        "dumped_iterations": dumped_iterations(DUMP_ROOT),
        "seconds": round(seconds, 1),
    }
    shutil.rmtree(DUMP_ROOT, ignore_errors=True)
    return entry


def main(names: list[str]) -> int:
    from importlib.metadata import version

    mindspore_version = version("mindspore")
    manifest_file = HERE / f"verdicts-{mindspore_version}.json"
    manifest = json.loads(manifest_file.read_text()) if manifest_file.exists() else {"cases": {}}
    manifest.update({"mindspore_version": mindspore_version, "device_target": "CPU",
                     "python": sys.version.split()[0],
                     "how": "LeNet, GRAPH_MODE, 3 training steps, MINDSPORE_DUMP_CONFIG=<case file>; "
                            "recorded by record_verdicts.py"})
    cases = sorted(CASES.glob("*.json"))
    if names:
        cases = [c for c in cases if c.stem in names]
    for case in cases:
        entry = record(case)
        manifest["cases"][case.stem] = entry
        print(f"{case.stem:45s} {entry['verdict']:9s} {entry['seconds']:5.1f}s {entry['error'] or ''}", flush=True)
    manifest["cases"] = dict(sorted(manifest["cases"].items()))
    manifest_file.write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
