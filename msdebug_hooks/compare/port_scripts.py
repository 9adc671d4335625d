"""The port check for two unmodified training scripts: each runs under the capture launcher
(:mod:`msdebug_hooks.compare.script_capture`), then their captures and losses are compared.

For a port whose two models cannot be built in one process (different environments, data pipelines, a training
framework around the model). Each script is started as ``python -m msdebug_hooks.compare.script_capture SCRIPT
ARGS`` with ``MSDEBUG_LAYER_CAPTURE`` pointing into the work directory; the scripts themselves must start from the
same weights and feed the same batch (e.g. the MindSpore script loads the PyTorch weights with
``convert_torch_state``): the parameters recorded at the start of the step show it when they do not (the finding
is then a ``parameter``: "the runs start the step from different values of ...").

Compared: the captured step layer by layer (``compare_layers``: forward outputs, gradients, parameters at the
start of the step; the suspect layer's recorded inputs say own error or inherited) and the loss series of both runs
(``compare_losses``: step 1 against the forward noise, later steps against ``rtol``).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from msdebug_hooks.compare.layers import LayerComparison, compare_layers
from msdebug_hooks.compare.script_capture import CAPTURE, STEP, STOP
from msdebug_hooks.errors import ConfigError

SIDES = (("pytorch", "--script-torch"), ("mindspore", "--script-mindspore"))


@dataclass
class ScriptsCheck:
    """Both scripts' capture and losses compared (A: the MindSpore script, B: the PyTorch one)."""

    layers: LayerComparison
    losses: Any = None            # LossComparison, or None when a script logged no loss
    series: dict = field(default_factory=dict)   # label -> LossSeries
    logs: dict = field(default_factory=dict)     # side -> log file
    notes: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.layers.ok and (self.losses is None or self.losses.first_parted is None)

    def format(self) -> str:
        lines = [f"scripts: MindSpore log {self.logs.get('mindspore')}, PyTorch log {self.logs.get('pytorch')}"]
        lines += [f"note: {note}" for note in self.notes]
        if self.losses is not None:
            forward = self.losses.forward_summary()
            lines.append(f"losses: {len(self.losses.steps)} steps compared" + (f"; {forward}" if forward else ""))
            lines.append(f"  {self.losses.reading()}")
        lines.append(self.layers.format())
        lines.append("verdict: " + ("clean" if self.ok else "the port differs from its reference"))
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"ok": self.ok, "layers": self.layers.to_dict(), "logs": self.logs, "notes": self.notes,
                "losses": None if self.losses is None else self.losses.as_dict()}

    def write_html(self, path: Any) -> Path:
        from msdebug_hooks.compare.html_report import write_html_report

        parted = self.losses.first_parted.step if self.losses is not None and self.losses.first_parted else None
        return write_html_report(path, self.layers, losses=self.series, title="port check (two scripts)",
                                 parted_step=parted,
                                 extra=([self.losses.reading()] if self.losses is not None else []) + self.notes)


def _run_script(side: str, option: str, command: Sequence[str], root: Path, step: int, stop: Optional[int],
                timeout: Optional[float]) -> Path:
    if not command:
        raise ConfigError(option, "", "a script and its arguments ('train.py --epochs 1')")
    if not Path(command[0]).is_file():
        raise ConfigError(option, " ".join(command), "a Python script file and its arguments",
                          detail=f"{command[0]} is not a file")
    out = root / side
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    log = root / f"{side}.log"
    env = dict(os.environ, **{CAPTURE: str(out), STEP: str(step)})
    if stop is not None:
        env[STOP] = str(stop)
    with open(log, "w") as handle:
        try:
            proc = subprocess.run([sys.executable, "-m", "msdebug_hooks.compare.script_capture", *command],
                                  stdout=handle, stderr=subprocess.STDOUT, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ConfigError(option, " ".join(command), f"a script that ends within {timeout:g} s",
                              detail=f"stopped; see {log}") from None
    if proc.returncode != 0:
        tail = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-1:]
        raise ConfigError(option, " ".join(command), "a training script that runs without an error",
                          detail=f"exit {proc.returncode}; see {log}" + (f": {tail[0][:200]}" if tail else ""))
    if not (out / "capture" / "manifest.json").is_file():
        raise ConfigError(option, " ".join(command), f"a script that trains at least {step} step(s) where the "
                          f"launcher sees them (PyTorch: optimizer.step(); MindSpore: Model.train)",
                          detail=f"no step was captured; see {log}")
    return out


def check_scripts(torch_command: Sequence[str], mindspore_command: Sequence[str], workdir: Any, *, step: int = 1,
                  stop: Optional[int] = None, timeout: Optional[float] = None) -> ScriptsCheck:
    """Run both scripts with the capture attached (PyTorch's first), then compare step ``step`` and the losses.
    ``stop``: end each script after that many steps. ``ConfigError`` naming the script when one fails or trains
    nothing the launcher sees."""
    from msdebug_hooks.compare.loss import LossFileError, read_losses
    from msdebug_hooks.compare.loss_diff import compare_losses

    root = Path(workdir)
    root.mkdir(parents=True, exist_ok=True)
    commands = {"pytorch": list(torch_command), "mindspore": list(mindspore_command)}
    outs = {side: _run_script(side, option, commands[side], root, step, stop, timeout) for side, option in SIDES}
    layers = compare_layers(outs["mindspore"] / "capture", outs["pytorch"] / "capture", step_a=step, replay=True)
    check = ScriptsCheck(layers, logs={side: str(root / f"{side}.log") for side, _ in SIDES})
    try:
        series = {"MindSpore": read_losses(outs["mindspore"] / "loss"),
                  "PyTorch": read_losses(outs["pytorch"] / "loss")}
    except LossFileError as exc:
        check.notes.append(f"losses not compared: {exc}")
        return check
    check.series = series
    try:
        check.losses = compare_losses(series["MindSpore"], series["PyTorch"], common_steps=True)
    except (ConfigError, LossFileError) as exc:
        check.notes.append(f"losses not compared: {exc}")
    return check
