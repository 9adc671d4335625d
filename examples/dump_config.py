"""Dump two chosen iterations of a LeNet training with a validated DumpConfig, then list what MindSpore wrote.

    python examples/dump_config.py [DUMP_DIR]

The config is applied before MindSpore compiles its first graph (it reads MINDSPORE_DUMP_CONFIG once, at that moment).
Iterations are 0-based: a failure seen at 1-based step 5 is iteration 4, and ``DumpConfig.around_step(5)`` selects
"3|4". The same config from the shell: ``eval "$(msdebug dump-config --path DIR --around-step 5 --print-env)"``.
"""
from __future__ import annotations

import sys
import tempfile
from collections import Counter
from pathlib import Path

from msdebug_hooks import DumpConfig


def main(dump_dir: str) -> None:
    config = DumpConfig.around_step(5, path=dump_dir, net_name="LeNet", target="CPU")
    env = config.apply()  # writes the JSON (0600) and sets MINDSPORE_DUMP_CONFIG in os.environ
    print(f"iteration {config.iteration!r}; {env}")

    import mindspore as ms
    from lenet import make_dataset, make_model

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    model, _ = make_model()
    model.train(1, make_dataset(num_batches=6, batch_size=16), dataset_sink_mode=False)

    files = sorted(Path(dump_dir).glob("rank_*/LeNet/*/*/*.npy"))
    per_iteration = Counter(int(f.parent.name) for f in files)
    for iteration, count in sorted(per_iteration.items()):
        example = next(f.name for f in files if f.parent.name == str(iteration))
        print(f"iteration {iteration}: {count} tensors, e.g. {example}")
    print(f"{len(files)} tensors under {dump_dir}/rank_0/LeNet/<graph>/<iteration>/")


if __name__ == "__main__":
    from msdebug_hooks.errors import ConfigError

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="msdebug_dump_"))
    except ConfigError as error:  # e.g. a relative DUMP_DIR: MindSpore needs an absolute dump path
        print(f"dump_config.py: error: {error}", file=sys.stderr)
        sys.exit(2)
