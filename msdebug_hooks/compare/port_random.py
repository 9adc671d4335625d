"""Layers whose training-mode output is random (dropout of any class, stochastic depth), found by running them.

Random masks can never agree between two frameworks, so a port whose reference drops paths at random (timm's and
mindcv's ``DropPath``, torchvision's ``StochasticDepth``, a user's own dropout class) could never read clean. Which
class is random is not guessed from its name: a **probe** runs one forward pass of each model in training mode on
the check's batch (no gradients; the weights and statistics it moves are put back) and calls every parameter-free
leaf layer a second time on the very inputs it was given; a layer whose two outputs differ is random.

Random layers are then paired across the two models: in execution order when both models have as many, else call by
call when both make as many calls to random layers (mindcv's Swin block calls one ``drop_path`` twice where timm's
has ``drop_path1`` and ``drop_path2``), else only where the module map pairs the MindSpore layer with the PyTorch
one. Each paired layer runs in eval mode for the
check's step on both sides (for dropout and stochastic depth: the identity, the expectation of the random layer).
A random layer with no random partner (dropout left on where the reference has none) keeps running, so its masks
part the runs and the layer comparison names it. What the probe cannot compare: the drop *rates* of two random
layers of classes the settings check does not know (a drop-path rate of 0.2 against 0.1 reads clean; the rate of
a built-in dropout is a setting and is compared there).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

#: how often a parameter-free layer is called again on the same inputs before it reads as deterministic
PROBE_CALLS = 32


@dataclass
class RandomLayers:
    """The random layers of each side (names in execution order) and the pairs that run in eval mode."""

    mindspore: list = field(default_factory=list)
    pytorch: list = field(default_factory=list)
    paired: list = field(default_factory=list)      # (MindSpore name, PyTorch name)

    def note(self) -> str:
        left_a = [name for name in self.mindspore if name not in {a for a, _ in self.paired}]
        left_b = [name for name in self.pytorch if name not in {b for _, b in self.paired}]
        text = (f"{len(self.paired)} random layer pair(s) (their training-mode output differs from call to call: "
                f"dropout, stochastic depth) ran in eval mode on both sides for the step: random masks cannot agree")
        if left_a or left_b:
            text += (f"; random on one side only, left running: MindSpore {', '.join(left_a) or 'none'}, "
                     f"PyTorch {', '.join(left_b) or 'none'}")
        return text


def _torch_random(module: Any, inputs: tuple, calls: list) -> list:
    import torch

    from msdebug_hooks.compare.port_run import _torch_state, restore_torch
    from msdebug_hooks.compare.torch import copied_tensors

    def parameter_free_leaf(sub: Any) -> bool:
        return not any(True for _ in sub.children()) and not any(True for _ in sub.parameters()) \
            and not any(True for _ in sub.buffers())

    found: list = []
    probing = [False]

    def hook_for(name: str) -> Callable:
        def forward_hook(sub, args, output):
            if probing[0] or name in found or not isinstance(output, torch.Tensor):
                return
            probing[0] = True
            try:
                for _ in range(PROBE_CALLS):
                    again = sub(*copied_tensors(copies[name]))
                    if not torch.equal(again, output):
                        found.append(name)
                        break
            finally:
                probing[0] = False
        return forward_hook

    copies: dict = {}

    def pre_hook_for(name: str) -> Callable:
        def pre_hook(_sub, args):
            if not probing[0]:
                copies[name] = copied_tensors(args)
                calls.append(name)
        return pre_hook

    handles = []
    for name, sub in module.named_modules():
        if name and parameter_free_leaf(sub):
            handles += [sub.register_forward_pre_hook(pre_hook_for(name)), sub.register_forward_hook(hook_for(name))]
    state, training = _torch_state(module), module.training
    try:
        module.train()
        with torch.no_grad():
            module(*inputs)
    finally:
        for handle in handles:
            handle.remove()
        module.train(training)
        restore_torch(module, state)
    return found


def _mindspore_random(cell: Any, inputs: tuple, calls: list) -> list:
    import mindspore as ms

    from msdebug_hooks.compare.port_run import _mindspore_state, restore_mindspore

    found: list = []
    probing = [False]
    copies: dict = {}

    def pre_hook_for(name: str) -> Callable:
        def pre_hook(_sub, args):
            if not probing[0]:
                copies[name] = tuple(a.copy() if isinstance(a, ms.Tensor) else a for a in args)
                calls.append(name)
        return pre_hook

    def hook_for(name: str) -> Callable:
        def forward_hook(sub, args, output):
            if probing[0] or name in found or not isinstance(output, ms.Tensor):
                return
            probing[0] = True
            first = output.asnumpy()
            try:
                for _ in range(PROBE_CALLS):
                    if not np.array_equal(sub(*copies[name]).asnumpy(), first, equal_nan=True):
                        found.append(name)
                        break
            finally:
                probing[0] = False
        return forward_hook

    handles = []
    for name, sub in cell.cells_and_names():
        if name and not sub.name_cells() and not list(sub.get_parameters()):
            handles += [sub.register_forward_pre_hook(pre_hook_for(name)), sub.register_forward_hook(hook_for(name))]
    mode = ms.get_context("mode")
    state, training = _mindspore_state(cell), cell.training
    try:
        if mode != ms.PYNATIVE_MODE:
            ms.set_context(mode=ms.PYNATIVE_MODE)
        cell.set_train(True)
        cell(*inputs)
    finally:
        for handle in handles:
            handle.remove()
        cell.set_train(training)
        restore_mindspore(cell, state)
        if mode != ms.PYNATIVE_MODE:
            ms.set_context(mode=mode)
    return found


def find_random_layers(cell: Any, torch_module: Any, torch_inputs: tuple, mindspore_inputs: tuple,
                       torch_name: Callable[[str], str]) -> RandomLayers:
    """Probe both models (see the module docstring) and pair their random layers."""
    calls_a, calls_b = [], []
    found = RandomLayers(_mindspore_random(cell, mindspore_inputs, calls_a),
                         _torch_random(torch_module, torch_inputs, calls_b))
    calls_a = [name for name in calls_a if name in found.mindspore]
    calls_b = [name for name in calls_b if name in found.pytorch]
    if len(found.mindspore) == len(found.pytorch):
        found.paired = list(zip(found.mindspore, found.pytorch))
    elif calls_a and len(calls_a) == len(calls_b):   # one layer called twice against two called once (mindcv's
        found.paired = list(dict.fromkeys(zip(calls_a, calls_b)))   # Swin block's drop_path, timm's drop_path1/2)
    else:
        torch_random = set(found.pytorch)
        found.paired = [(name, torch_name(name)) for name in found.mindspore if torch_name(name) in torch_random]
    return found


def mode_setters(cell: Any, torch_module: Any, random: RandomLayers) -> tuple[Callable, Callable, Callable]:
    """``(MindSpore's, PyTorch's, restore)``: the first two put the paired random layers of their side in eval mode
    (run after the model was put in training mode), ``restore`` gives them their model's mode again."""
    cells, modules = dict(cell.cells_and_names()), dict(torch_module.named_modules())
    chosen = [(cells[a], modules[b]) for a, b in random.paired if a in cells and b in modules]

    def mindspore_eval() -> None:
        for layer, _ in chosen:
            layer.set_train(False)

    def torch_eval() -> None:
        for _, module in chosen:
            module.eval()

    def restore() -> None:
        for layer, module in chosen:
            layer.set_train(cell.training)
            module.train(torch_module.training)
    return mindspore_eval, torch_eval, restore
