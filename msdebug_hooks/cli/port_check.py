"""``msdebug port-check``: a PyTorch model and its MindSpore port, checked in one command (no converter, no
mapping file, no capture glue).

The PyTorch weights (and BatchNorm statistics) are copied into the MindSpore cell through the layout table, the
settings a port must translate are compared (BatchNorm momentum, epsilons, GELU's form, dropout, ...), one
forward, backward and SGD step runs on both with the same batch, and forward outputs, gradients and the update are
compared layer by layer. It prints the layer tree with the first divergence marked, both source lines, and whether
the layer's error is its own or inherited (the layer replayed on PyTorch's inputs).

Models are import paths, ``package.module:name`` or ``path/to/file.py:name``: a class or function is called with
no arguments (a factory), anything else is used as it is. The batch is a ``.npy`` (one input) or ``.npz`` file
(inputs in order; the target named target/targets/label/labels/y), or a generator (``--batch-fn``).

Two training scripts instead (``--script-torch``, ``--script-mindspore``: a script and its arguments, in quotes):
each runs unmodified with the layer recorder attached from outside, step ``--step`` is captured, and the captures
and loss series are compared. The scripts must start from the same weights and batches.

Exit 0: the port matches its reference; 1: a divergence or a differing setting; 2: bad input (or a script that
failed).

Example::

    msdebug port-check --torch ref/model.py:build --mindspore port/model.py:build --batch batch.npz --html port.html
    msdebug port-check --script-torch "train_torch.py --epochs 1" --script-mindspore "train_ms.py" --stop 3
"""
from __future__ import annotations

import argparse
import math
import shlex

from msdebug_hooks.cli._paths import output_file
from msdebug_hooks.cli._report import print_report
from msdebug_hooks.errors import ConfigError

_LOSSES = ("auto", "cross_entropy", "mse", "mean", "sum")


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a finite number > 0")
    return value


def _steps(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: at least 1")
    return value


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "port-check", help="check a MindSpore port against its PyTorch model: copy the weights, run one step on both, "
                           "name the first diverging layer",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--torch", metavar="IMPORT_PATH", help="the PyTorch model (the reference)")
    parser.add_argument("--mindspore", metavar="IMPORT_PATH", help="the MindSpore cell (the port)")
    batch = parser.add_mutually_exclusive_group()
    batch.add_argument("--batch", metavar="FILE", help=".npy (one input) or .npz (inputs and a target)")
    batch.add_argument("--batch-fn", metavar="IMPORT_PATH", help="a function returning the batch")
    parser.add_argument("--loss", choices=_LOSSES, default="auto",
                        help="auto (default): cross entropy for integer labels, MSE for a float target, the mean "
                             "of the output without one")
    parser.add_argument("--loss-torch", metavar="IMPORT_PATH", help="a PyTorch loss(output, target) of your own")
    parser.add_argument("--loss-mindspore", metavar="IMPORT_PATH", help="its MindSpore twin (both or neither)")
    parser.add_argument("--lr", type=_positive, default=0.1, help="SGD learning rate of both (default 0.1)")
    parser.add_argument("--steps", type=_steps, default=3,
                        help="steps on the batch (default 3; step 1 is compared, all draw the loss curves)")
    parser.add_argument("--mapping", metavar="FILE", help="PyTorch name -> MindSpore name for weights the names and "
                                                          "the structure do not pair (pairs and 'a.* -> b.*' rules)")
    parser.add_argument("--keep-weights", action="store_true",
                        help="keep the MindSpore cell's own weights (your converter's) and check them instead of "
                             "copying PyTorch's")
    parser.add_argument("--no-replay", action="store_true", help="do not replay the diverging layer")
    parser.add_argument("--workdir", metavar="DIR", help="keep both captures here (default: a temporary directory)")
    parser.add_argument("--script-torch", metavar="'SCRIPT ARGS'", help="two-scripts mode: the PyTorch training")
    parser.add_argument("--script-mindspore", metavar="'SCRIPT ARGS'", help="two-scripts mode: the MindSpore one")
    parser.add_argument("--step", type=_steps, default=1, help="two-scripts mode: the step to capture (default 1)")
    parser.add_argument("--stop", type=_steps, default=None,
                        help="two-scripts mode: end each script after this many steps (default: run to the end)")
    parser.add_argument("--timeout", type=_positive, default=None, help="two-scripts mode: seconds per script")
    parser.add_argument("--html", metavar="FILE", type=output_file, help="also write the HTML report here")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.script_torch or args.script_mindspore:
        return _run_scripts(args)
    for option, value in (("--torch", args.torch), ("--mindspore", args.mindspore)):
        if not value:
            raise ConfigError(option, None, "an import path ('package.module:name' or 'file.py:name'), or the "
                              "two-scripts mode (--script-torch and --script-mindspore)")
    if not (args.batch or args.batch_fn):
        raise ConfigError("--batch", None, "a .npy/.npz batch file (or --batch-fn IMPORT_PATH)")
    from msdebug_hooks.compare.naming import load_name_mapping
    from msdebug_hooks.compare.port_check import compare_models
    from msdebug_hooks.compare.port_inputs import build, generate_batch, load_object, read_batch

    if bool(args.loss_torch) != bool(args.loss_mindspore):
        raise ConfigError("--loss-torch/--loss-mindspore", args.loss_torch or args.loss_mindspore,
                          "both (a loss of your own for each framework) or neither")
    batch = read_batch(args.batch) if args.batch else generate_batch(args.batch_fn)
    loss = args.loss
    if args.loss_torch:
        loss = (load_object(args.loss_torch, "--loss-torch"), load_object(args.loss_mindspore, "--loss-mindspore"))
        for option, fn in zip(("--loss-torch", "--loss-mindspore"), loss):
            if not callable(fn):
                raise ConfigError(option, type(fn).__name__, "a callable loss(output, target)")
    mapping = load_name_mapping(args.mapping) if args.mapping else None
    torch_model = build(args.torch, "--torch")
    mindspore_cell = build(args.mindspore, "--mindspore")
    _check_kind(torch_model, "--torch", "torch", "a torch.nn.Module")
    _check_kind(mindspore_cell, "--mindspore", "mindspore", "a mindspore.nn.Cell")
    check = compare_models(torch_model, mindspore_cell, batch, loss=loss, lr=args.lr, steps=args.steps,
                           mapping=mapping, copy_weights=not args.keep_weights, replay=not args.no_replay,
                           workdir=args.workdir)
    if args.html:
        written = check.write_html(args.html)
        if not args.json:
            print(f"HTML report: {written}")
    return print_report(check, args.json)


def _run_scripts(args: argparse.Namespace) -> int:
    import tempfile

    from msdebug_hooks.compare.port_scripts import check_scripts

    commands = {}
    for option, value in (("--script-torch", args.script_torch), ("--script-mindspore", args.script_mindspore)):
        if not value:
            raise ConfigError(option, None, "a training script and its arguments (both scripts are needed)")
        try:
            commands[option] = shlex.split(value)
        except ValueError as exc:
            raise ConfigError(option, value, "a script and its arguments, quoted as in a shell", detail=str(exc)) \
                from None
    if args.torch or args.mindspore or args.batch or args.batch_fn:
        raise ConfigError("--script-torch/--script-mindspore", "with --torch/--mindspore/--batch",
                          "either two models and a batch, or two scripts")
    if args.stop is not None and args.stop < args.step:
        raise ConfigError("--stop", args.stop, f"a number of steps >= --step ({args.step})")
    workdir = args.workdir or tempfile.mkdtemp(prefix="msdebug-port-scripts-")
    check = check_scripts(commands["--script-torch"], commands["--script-mindspore"], workdir, step=args.step,
                          stop=args.stop, timeout=args.timeout)
    if args.html:
        written = check.write_html(args.html)
        if not args.json:
            print(f"HTML report: {written}")
    return print_report(check, args.json)


def _check_kind(model: object, option: str, root: str, allowed: str) -> None:
    if not any(cls.__module__.partition(".")[0] == root for cls in type(model).__mro__):
        raise ConfigError(option, type(model).__name__, allowed)
