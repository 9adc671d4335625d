"""Layer capture attached from outside: an unmodified training script, PyTorch or MindSpore, records one step.

The port check's mode for two training scripts that cannot be built in one process: each script runs under this
launcher (``msdebug port-check --script-torch ... --script-mindspore ...`` does it for you), which attaches the
framework's layer recorder with no edit to the script, the way ``msdebug run`` attaches the debugger (the same
``autoattach`` machinery: an import hook, and a callback for every ``Model.train``)::

    MSDEBUG_LAYER_CAPTURE=cap_torch python -m msdebug_hooks.compare.script_capture train_torch.py --epochs 1

Environment (read when the launcher starts; a bad value stops it with one line and exit status 2):

* ``MSDEBUG_LAYER_CAPTURE``: the capture directory (its losses go to ``<dir>/loss``);
* ``MSDEBUG_LAYER_CAPTURE_STEP``: the step to capture (1-based, default 1);
* ``MSDEBUG_LAYER_CAPTURE_STOP``: end the script after this many steps (default: run it to its end).

What is seen:

* **PyTorch**, any loop: the first module with parameters called from outside any module is the model (a global
  forward pre-hook; a loss module has no parameters); a step is one ``optimizer.step()`` (a global optimizer hook),
  its gradients are read just before it; the loss of a step is the first one-element tensor ``backward()`` is
  called on. Inputs, parameters at the step's start and gradients are recorded (``TorchLayerRecorder``).
* **MindSpore**, ``Model.train`` / ``Model.fit``: a callback added to every training (``autoattach.register``)
  creates the ``LayerRecorder`` on the network before it is compiled, records the step's loss from the step's
  outputs and stops the training after ``MSDEBUG_LAYER_CAPTURE_STOP`` steps. Gradients come as ``LayerRecorder``
  gets them (PyNative: from the optimizer; not in GRAPH_MODE). A hand-written MindSpore loop is not seen: create a
  ``LayerRecorder`` in it (``docs/compare-pytorch.md``).
"""
from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path
from typing import Any, Optional

from msdebug_hooks.errors import ConfigError

CAPTURE, STEP, STOP = "MSDEBUG_LAYER_CAPTURE", "MSDEBUG_LAYER_CAPTURE_STEP", "MSDEBUG_LAYER_CAPTURE_STOP"


class _Settings:
    def __init__(self, environ: Any) -> None:
        directory = environ.get(CAPTURE, "").strip()
        if not directory:
            raise ConfigError(CAPTURE, None, "the directory to write the capture into")
        self.directory = Path(directory).expanduser()
        self.step = _positive(environ, STEP, 1)
        self.stop = _positive(environ, STOP, None)
        if self.stop is not None and self.stop < self.step:
            raise ConfigError(STOP, self.stop, f"a number of steps >= {STEP} ({self.step})")


def _positive(environ: Any, name: str, default: Optional[int]) -> Optional[int]:
    text = environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(name, text, "an integer >= 1")
    return value


class _StopScript(BaseException):
    """Ends the script after the last step asked for (a ``BaseException``: the script's ``except Exception`` lets it
    through)."""


# --- PyTorch ----------------------------------------------------------------------------------------------------
class TorchAttacher:
    """Finds the model, counts optimizer steps, records one step and the losses, for any PyTorch loop."""

    def __init__(self, settings: _Settings) -> None:
        self.settings = settings
        self.recorder: Any = None
        self.steps_done = 0
        self.depth = 0
        self.capturing = False
        self.loss_seen = False
        self.losses: Any = None

    def install(self, torch: Any) -> None:
        from torch.nn.modules import module as module_hooks
        from torch.optim import optimizer as optimizer_hooks

        from msdebug_hooks.compare.loss import LossWriter

        self.losses = LossWriter(self.settings.directory / "loss", rank=0)
        module_hooks.register_module_forward_pre_hook(self._pre_forward)
        module_hooks.register_module_forward_hook(self._post_forward)
        optimizer_hooks.register_optimizer_step_pre_hook(self._before_update)
        optimizer_hooks.register_optimizer_step_post_hook(self._after_update)
        original = torch.Tensor.backward
        attacher = self

        def backward(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if not attacher.loss_seen and tensor.numel() == 1:
                attacher.loss_seen = True
                attacher.losses.write(attacher.steps_done + 1, float(tensor.detach().float()))
            return original(tensor, *args, **kwargs)

        torch.Tensor.backward = backward

    def _pre_forward(self, module: Any, inputs: Any) -> None:
        if self.depth == 0 and next(module.parameters(), None) is not None:
            if self.recorder is None:
                from msdebug_hooks.compare.torch import TorchLayerRecorder

                self.recorder = TorchLayerRecorder(module, self.settings.directory / "capture",
                                                   steps=[self.settings.step], record_inputs=True,
                                                   record_parameters=True)
            if module is self.recorder.module and not self.capturing and self.steps_done + 1 == self.settings.step:
                self.capturing = self.recorder.begin_step(self.settings.step)
        self.depth += 1

    def _post_forward(self, module: Any, inputs: Any, output: Any) -> None:
        self.depth = max(0, self.depth - 1)

    def _before_update(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.capturing:
            self.recorder.end_step()  # the gradients are in .grad now
            self.capturing = False

    def _after_update(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.steps_done += 1
        self.loss_seen = False
        if self.settings.stop is not None and self.steps_done >= self.settings.stop:
            self.losses.close()
            raise _StopScript()


# --- MindSpore --------------------------------------------------------------------------------------------------
def _mindspore_callback(settings: _Settings) -> Any:
    from mindspore.train import Callback

    from msdebug_hooks.compare.loss import LossWriter
    from msdebug_hooks.compare.mindspore_layers import LayerRecorder

    class LayerCaptureCallback(Callback):
        """Creates the recorder on the network at the start of training and stops after the steps asked for."""

        autoattach_role = "layer-capture"

        def __init__(self) -> None:
            super().__init__()
            self.recorder: Any = None
            self.losses = LossWriter(settings.directory / "loss", rank=0)

        def on_train_begin(self, run_context: Any) -> None:
            cb_params = run_context.original_args()
            self.recorder = LayerRecorder(cb_params.network, settings.directory / "capture", steps=[settings.step],
                                          record_inputs=True, record_parameters=True)
            self.recorder.on_train_begin(run_context)

        def on_train_step_begin(self, run_context: Any) -> None:
            self.recorder.on_train_step_begin(run_context)

        def on_train_step_end(self, run_context: Any) -> None:
            self.recorder.on_train_step_end(run_context)
            cb_params = run_context.original_args()
            outputs = cb_params.net_outputs
            loss = outputs[0] if isinstance(outputs, (tuple, list)) else outputs
            self.losses.write(cb_params.cur_step_num, float(loss.asnumpy()) if hasattr(loss, "asnumpy") else None)
            if settings.stop is not None and cb_params.cur_step_num >= settings.stop:
                run_context.request_stop()

        def on_train_end(self, run_context: Any) -> None:
            self.recorder.on_train_end(run_context)
            self.recorder.remove()
            self.losses.close()

    return LayerCaptureCallback()


def install(environ: Any = None) -> _Settings:
    """Attach the capture to whatever the script goes on to run (``ConfigError`` for a bad variable)."""
    from msdebug_hooks import autoattach

    settings = _Settings(os.environ if environ is None else environ)
    attacher = TorchAttacher(settings)
    autoattach.after_import("torch", lambda torch: attacher.install(torch))
    autoattach.register(lambda: [_mindspore_callback(settings)])
    return settings


def main(argv: Optional[list] = None) -> int:
    """``python -m msdebug_hooks.compare.script_capture SCRIPT [ARGS...]``: run SCRIPT as ``__main__`` with the
    capture attached."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print("usage: python -m msdebug_hooks.compare.script_capture SCRIPT [ARGS...] (with MSDEBUG_LAYER_CAPTURE "
              "set)", file=sys.stderr)
        return 2
    try:
        install()
    except ConfigError as exc:
        print(f"msdebug-hooks: {exc}", file=sys.stderr)
        return 2
    script = argv[0]
    sys.argv = argv
    sys.path.insert(0, str(Path(script).resolve().parent))
    try:
        runpy.run_path(script, run_name="__main__")
    except _StopScript:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
