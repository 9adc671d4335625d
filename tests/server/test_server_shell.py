"""Issue 23 item 6, the prompt at pdb's level, without MindSpore: our real server and prompt, driven against our real
client (``DebuggerSession``) training a small numpy "network" in a thread, over real gRPC. The graph is the shape our
light source sends (a layer node whose stack starts with the line defining the layer, the loss node with the line
computing it, a gradient node with its weight's definition); the MindSpore end of those lines is tested in
test_server_cli.py. Terminal behaviour (Tab, the exit code of a typed session) goes through a pseudo-terminal.
"""
from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading
from typing import Optional

import numpy as np
import pexpect
import pytest

from msdebug_hooks.wire import ms_graph_pb2 as graph_pb
from msdebug_hooks.debugger.graph import DebugGraph, GraphParameter
from msdebug_hooks.debugger.session import Decision, DebuggerSession
from msdebug_hooks.debugger.sources import ValuesByName
from msdebug_hooks.debugger.transport import Transport
from msdebug_hooks.server import DebuggerServer, JobStateError, TensorUnavailable
from msdebug_hooks.server.shell import DebuggerShell
from msdebug_hooks.server.shell_exit import EXIT_BAD, EXIT_HITS, EXIT_OK, exit_code
from msdebug_hooks.server.shell_text import short_name

from project import ROOT, fresh_env, guarded
from mindinsight_server import free_port

pytestmark = pytest.mark.timeout(120)

F32 = graph_pb.TypeProto(data_type=graph_pb.DT_TENSOR,
                         tensor_type=graph_pb.TypeProto.Tensor(elem_type=graph_pb.DT_FLOAT32))
# deep scopes, as a transformer's are: the names differ only at their ends
SCOPE = ("Default/network-WithLossCell/_backbone-TranslationModel/encoder-TransformerEncoder/layers-CellList/"
         "0-TransformerEncoderLayer/attention-MultiHeadAttention/query-Dense")
WEIGHT = f"{SCOPE}/query.weight"
GRAD = f"Gradients/{SCOPE}/GradOf_query.weight-op3"
LOSS = "Default/network-WithLossCell/_loss_fn-CrossEntropyLoss/CrossEntropyLoss-op2"
DEFINITION = "# In file /home/me/model.py:31/    self.query = nn.Dense(64, 64)/"
LIBRARY = "# In file /venv/lib/python3.11/site-packages/mindspore/nn/layer/basic.py:640/    def construct(self, x):/"
COMPUTATION = "# In file /home/me/train.py:88/    loss, grads = grad_fn(data, label)/"
FOREIGN = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d|^\[(DEBUG|INFO|WARNING|ERROR)\] [A-Z_]+\(\d+", re.MULTILINE)


def _graph() -> DebugGraph:
    proto = graph_pb.GraphProto(name="kernel_graph_0", root_name="0")
    for name in ("data", "query.weight", "query.bias"):
        proto.parameters.add(name=name, type=F32)
    proto.node.add(name="1", op_type="Dense", scope=SCOPE, full_name=f"{SCOPE}/Dense-op1", output_type=F32,
                   input=[graph_pb.InputProto(name=n) for n in ("data", "query.weight", "query.bias")],
                   source_address=f"{DEFINITION}\n{LIBRARY}")
    proto.node.add(name="2", op_type="CrossEntropyLoss", scope=LOSS.rsplit("/", 1)[0], full_name=LOSS,
                   output_type=F32, input=[graph_pb.InputProto(name="1")], source_address=COMPUTATION)
    proto.node.add(name="3", op_type="GradOf_query.weight", scope=f"Gradients/{SCOPE}", full_name=GRAD,
                   output_type=F32, input=[graph_pb.InputProto(name="2")], source_address=DEFINITION)
    parameters = {name: GraphParameter(name, "weight", (4, 4) if name.endswith("weight") else (4,),
                                       np.dtype(np.float32), source="live") for name in ("query.weight", "query.bias")}
    return DebugGraph(proto, parameters, loss_node=LOSS, gradients={GRAD: "query.weight"})


class _Values(ValuesByName):
    """Parameters and the loss, plus the gradient, which this source holds as the light one holds captures."""

    def holds(self, name: str) -> bool:
        return name == GRAD


class NumpyTraining:
    """Our client in a thread: ``steps`` steps; from ``nan_step`` on the weight, its gradient and the loss are NaN."""

    def __init__(self, address: str, *, steps: int = 40, nan_step: Optional[int] = None) -> None:
        self.values = {"query.weight": np.ones((4, 4), np.float32), "query.bias": np.zeros(4, np.float32),
                       LOSS: np.float32(2.0), GRAD: np.full((4, 4), 0.1, np.float32)}
        graph = _graph()
        self.session = DebuggerSession(Transport(address, timeout=10), graph, _Values(graph, self.values.get),
                                       ms_version="2.10.0", progress_interval=60)
        self.steps, self.nan_step, self.done = steps, nan_step, 0
        self.thread = threading.Thread(target=self._train, daemon=True)

    def _train(self) -> None:
        if not self.session.connect() or self.session.suspend() is not Decision.RUN:
            return
        for step in range(1, self.steps + 1):
            for name in ("query.weight", "query.bias", GRAD):
                self.values[name] = self.values[name] + np.float32(0.01)
            if step == self.nan_step:
                for name in ("query.weight", GRAD, LOSS):
                    self.values[name] = np.full_like(self.values[name], np.nan)
            self.done = step
            if self.session.step_end() is not Decision.RUN:
                break
        self.session.finish()

    def __enter__(self) -> "NumpyTraining":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.thread.join(30)
        assert not self.thread.is_alive(), "the training thread did not end"


@pytest.fixture
def session():
    """A server, a prompt on it (non-interactive: every bad command counts), and a way to start a training."""
    out = io.StringIO()
    with DebuggerServer(port=0, log_reports=False) as server:
        shell = DebuggerShell(server, stdout=out, interactive=False, timeout=60)
        trainings = []

        def start(**kwargs) -> NumpyTraining:
            training = NumpyTraining(server.address, **kwargs).__enter__()
            trainings.append(training)
            shell.attach(server.wait_for_training(timeout=30))
            return training

        def run(*lines: str) -> str:
            mark = out.tell()
            for line in lines:
                shell.onecmd(line)
                shell.postcmd(False, line)
            return out.getvalue()[mark:]

        yield shell, start, run
        for job in server.jobs:
            if job.alive:
                job.terminate(timeout=30)
        for training in trainings:
            training.__exit__()


def test_a_hit_is_exit_1_even_after_a_typo_and_the_precedence_is_1_then_2_then_0(session):
    shell, start, run = session
    start(nan_step=3)
    said = run("watch weight_overflow", "contniue")                   # a typo on the way
    assert "*** unknown command 'contniue'; did you mean 'continue'?" in said and shell.bad_input
    assert "hit(s):" in run("continue")
    assert shell.finish() == EXIT_HITS                                  # the divergence is not hidden by the typo
    assert [exit_code(h, c) for h, c in ((True, True), (True, False), (False, True), (False, False))] == \
        [EXIT_HITS, EXIT_HITS, EXIT_BAD, EXIT_OK]


def test_a_condition_typo_gets_did_you_mean_and_unwatch_of_an_unknown_id_reads_cleanly(session):
    shell, start, run = session
    start()
    said = run("watch weight_overflw")
    assert "*** condition='weight_overflw' is not allowed: did you mean 'weight_overflow'?" in said
    assert "activation_range" not in said                               # not the list of all 23
    said = run("watch tensor_too_large abs_mean_gtt=3")
    assert "did you mean 'abs_mean_gt'?" in said
    run("watch weight_overflow")
    said = run("unwatch 7")
    assert said.startswith("*** no watchpoint 7 in job 1") and "'" not in said and '"' not in said, said


def test_the_hits_table_keeps_the_ends_of_names_and_shows_the_definition_and_computation_lines(session):
    shell, start, run = session
    start(nan_step=2)
    said = run("watch tensor_overflow *", "continue")
    rows = {line.split()[2]: line for line in said.splitlines() if "tensor_overflow" in line and
            line.split()[0].isdigit()}
    weight, grad, loss = short_name(WEIGHT), short_name(GRAD), short_name(LOSS)
    assert weight.endswith("/query-Dense/query.weight") and grad.endswith("/GradOf_query.weight-op3")
    assert weight.startswith(".../") and len(weight) <= 60 and weight in rows and grad in rows and loss in rows
    assert rows[weight].split()[:2] == ["2", "0"]
    assert rows[weight].endswith("model.py:31") and rows[grad].endswith("model.py:31")   # the layer's definition
    assert rows[loss].endswith("train.py:88")                                          # the loss's computation
    said = run("source query.weight")
    assert "those of " + f"{SCOPE}/Dense-op1" in said
    assert "> /home/me/model.py:31  self.query = nn.Dense(64, 64)" in said                # the documented marker
    assert "  /venv/lib/python3.11/site-packages/mindspore/nn/layer/basic.py:640" in said


def test_previous_value_of_a_watched_gradient_says_what_is_true(session):
    shell, start, run = session
    training = start()
    job = shell.job
    job.watch("gradient_too_large:abs_mean_gt=1e6", GRAD)
    job.watch("weight_overflow", "query.weight")
    job.run(2, timeout=30)
    assert np.allclose(job.tensor(GRAD), 0.12) and training.done == 2         # its current value is there
    with pytest.raises(TensorUnavailable) as caught:
        job.tensor(GRAD, step="previous")
    message = str(caught.value)
    assert "watch it before running" not in message
    assert "previous-step values of watched parameters only" in message and "a gradient output" in message
    assert np.allclose(job.tensor("query.weight", step="previous"), 1.01)   # a watched parameter's is kept
    assert "watched parameters only: watch it" in run("tensor query.bias previous")


def test_help_lists_every_command_with_its_aliases(session):
    shell, start, run = session
    said = run("help")
    rows = {line.split()[0]: line for line in said.splitlines() if line.strip()}
    assert re.search(r"^continue\s+c, cont\s+run until", rows["continue"])
    assert re.search(r"\bn, s, next\b", rows["step"]) and "p, print" in rows["tensor"]
    assert "q, exit, Ctrl-D" in rows["quit"] and "wp" in rows["watchpoints"] and "where" in rows["source"]
    assert "search" in rows["nodes"] and "EOF" not in said
    said = run("help c")
    assert said.startswith("continue (c, cont): run until") and "aliases: c, cont" in said
    assert "weight_overflow" in run("help watch")                          # the conditions are listed there
    assert "did you mean 'continue'?" in run("help contineu")


def test_completion_offers_conditions_their_parameters_node_names_and_categories(session):
    shell, start, run = session
    start()
    run("watch weight_overflow")

    def complete(line: str) -> list[str]:
        text = line.rsplit(" ", 1)[-1]
        return shell.completedefault(text, line, len(line) - len(text), len(line))

    assert complete("watch weight_ov") == ["weight_overflow"]
    assert complete("watch tensor_too_l") == ["tensor_too_large"]
    assert complete("watch tensor_too_large abs") == ["abs_mean_gt="]
    assert "gradient" in complete("watch tensor_overflow ") and "query.weight" in complete("watch tensor_overflow ")
    assert complete("nodes gra") == ["gradient"] and complete("search wei") == ["weight"]
    assert complete("tensor query.w") == ["query.weight"] and complete("p query.w") == ["query.weight"]
    assert complete(f"source {SCOPE}/query.") == [f"{SCOPE}/query.bias", WEIGHT]
    assert complete("stats query.weight pr") == ["previous"]
    assert complete("unwatch ") == ["1", "all"] and complete("job ") == ["1"]
    assert shell.completenames("wa") == ["wait", "watch", "watchpoints"] and "EOF" not in shell.completenames("")


def test_wait_for_training_after_close_or_before_start_says_so_plainly():
    server = DebuggerServer(port=0, log_reports=False)
    with pytest.raises(JobStateError, match=r"^the debugger server is not started: call start\(\) first"):
        server.wait_for_training(timeout=1)
    server.start()
    server.close()
    with pytest.raises(JobStateError) as caught:
        server.wait_for_training(timeout=1)
    assert str(caught.value) == ("the debugger server is closed: close() was called, so no training can connect "
                                 "to it any more (start a new DebuggerServer)")


def _serve_env() -> dict:
    env = fresh_env()
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.pop("GRPC_VERBOSITY", None)
    return guarded(env)


def test_a_typed_session_completes_with_tab_and_still_exits_1_after_a_typo():
    """``msdebug serve`` in a pseudo-terminal, a training connecting to it: Tab completes through readline, a typo
    is answered, the hit afterwards makes the exit code 1, and nothing but our own lines reaches the terminal."""
    port = free_port()
    child = pexpect.spawn(sys.executable, ["-m", "msdebug_hooks", "serve", "--port", str(port)], env=_serve_env(),
                          encoding="utf-8", timeout=60, dimensions=(50, 250))
    child.logfile_read = transcript = io.StringIO()
    try:
        child.expect("listening on")
        with NumpyTraining(f"127.0.0.1:{port}", nan_step=3):
            child.expect(r"\(msdebug job 1 step 0 waiting\) ")
            child.send("watch weight_ov\t")
            child.expect("weight_overflow")
            child.send("\r")
            child.expect(r"watchpoint 1: weight_overflow on 2 node\(s\)")
            child.expect(r"\(msdebug job 1 step 0 waiting\) ")
            child.sendline("bogus")
            child.expect(r"\*\*\* unknown command 'bogus'")
            child.sendline("continue")
            child.expect(r"1 hit\(s\):")
            child.expect(r"\(msdebug job 1 step 3 waiting\) ")
            child.send("tensor query.we\t")
            child.expect("query.weight")
            child.send(" previous\r")
            child.expect(r"query.weight \(previous, step 3\): float32 \[4, 4\]")
            child.expect(r"\(msdebug job 1 step 3 waiting\) ")
            child.sendline("quit")
            child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == EXIT_HITS
    assert "listening on" in transcript.getvalue() and not FOREIGN.search(transcript.getvalue()), \
        transcript.getvalue()


def test_serve_refuses_bad_timeouts_and_a_port_in_use_in_one_line_of_its_own():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cases = ((["serve", "--port", str(port), "-c", "status"], f"cannot listen on 127.0.0.1:{port}: the port is "
                  "in use"),
                 (["serve", "--timeout", "-5", "-c", "status"], "--timeout=-5 is not allowed: a number of seconds > 0"),
                 (["serve", "--connect-timeout", "nan", "-c", "status"], "--connect-timeout=nan is not allowed"),
                 (["debug", "--timeout", "0", "-c", "continue", __file__], "--timeout=0 is not allowed"))
        for args, message in cases:
            proc = subprocess.run([sys.executable, "-m", "msdebug_hooks", *args], env=_serve_env(),
                                  capture_output=True, text=True, timeout=60)
            assert proc.returncode == 2 and proc.stdout == "", (args, proc.stdout, proc.stderr)
            assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith(f"msdebug {args[0]}: error: ")
            assert message in proc.stderr, (args, proc.stderr)


def test_a_script_that_raises_shows_its_own_traceback_only(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import json\n\n\ndef load():\n    return json.loads('{bad')\n\n\nCONFIG = load()\n")
    proc = subprocess.run([sys.executable, "-m", "msdebug_hooks", "run", "--port", "1", str(script)],
                          env=_serve_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    trace = proc.stderr[proc.stderr.index("Traceback (most recent call last):"):]
    files = re.findall(r'^  File "([^"]+)"', trace, re.MULTILINE)
    assert files[:2] == [str(script), str(script)]                       # the script's frames come first
    assert not [f for f in files if "runpy" in f or "msdebug_hooks" in f], trace
    assert trace.rstrip().endswith("json.decoder.JSONDecodeError: Expecting property name enclosed in double quotes: "
                                   "line 1 column 2 (char 1)")
    script.write_text("x = (\n")
    proc = subprocess.run([sys.executable, "-m", "msdebug_hooks", "run", "--port", "1", str(script)],
                          env=_serve_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and f'File "{script}", line 1' in proc.stderr
