"""LeNet training under DebuggerCallback for the fault tests that need their own process (Ctrl-C while paused).

Usage: fault_train.py PORT BATCHES [on_server_lost]. Prints ``step N loss L`` after every step and ``training
finished`` at the end, flushed, so the test can follow it.
"""
import sys

from mindspore.train import Callback

from lenet import make_dataset, make_model
from msdebug_hooks.training_loop import loss_value
from msdebug_hooks.debugger.callback import DebuggerCallback


class Print(Callback):
    def on_train_step_end(self, run_context):
        args = run_context.original_args()
        print(f"step {args.cur_step_num} loss {loss_value(args.net_outputs)!r}", flush=True)


def main():
    port, batches = int(sys.argv[1]), int(sys.argv[2])
    policy = sys.argv[3] if len(sys.argv) > 3 else "continue"
    model, _ = make_model()
    debugger = DebuggerCallback("127.0.0.1", port, rpc_timeout=2, on_server_lost=policy, progress_interval=1)
    model.train(1, make_dataset(batches), callbacks=[debugger, Print()], dataset_sink_mode=False)
    print("training finished", flush=True)


if __name__ == "__main__":
    main()
