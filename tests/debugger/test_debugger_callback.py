"""DebuggerCallback without MindInsight: settings from the environment, bad values, no server, sink mode, the
progress line, ``msdebug run``, and a hand-written loop (DebugSession) driven by our test server. The behaviour
against the real MindInsight 2.3.1 is in test_debugger_acceptance.py."""
from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

from msdebug_hooks.debugger.progress import ProgressLine
from msdebug_hooks.debugger.settings import DebuggerSettings, validate_address
from msdebug_hooks.errors import ConfigError, ConfigErrors

from project import EXAMPLES, ROOT, guarded
from debug_test_server import DebugTestServer
from mindinsight_server import free_port

pytestmark = pytest.mark.timeout(180)
SCRIPT = ROOT / "tests" / "scripts" / "plain_lenet_train.py"
MSDEBUG = str(__import__("pathlib").Path(sys.executable).parent / "msdebug")


def _env(**values: str) -> dict:
    return {"ENABLE_MS_DEBUGGER": "1", **values}


def test_settings_from_env_defaults_and_values():
    assert DebuggerSettings.from_env({}) == DebuggerSettings(enabled=False, host="localhost", port=50051)
    settings = DebuggerSettings.from_env(_env(ENABLE_MS_DEBUGGER="True", MS_DEBUGGER_HOST="127.0.0.1",
                                              MS_DEBUGGER_PORT="15051", MS_DEBUGGER_PARTIAL_MEM="1"))
    assert (settings.enabled, settings.address, settings.partial_memory) == (True, "127.0.0.1:15051", True)
    assert DebuggerSettings.from_env({"ENABLE_MS_DEBUGGER": "false"}).enabled is False


@pytest.mark.parametrize("variable, value, allowed", [
    ("MS_DEBUGGER_PORT", "abc", "a port number 1-65535"),
    ("MS_DEBUGGER_PORT", "70000", "a port number 1-65535"),
    ("MS_DEBUGGER_PORT", "0", "a port number 1-65535"),
    ("MS_DEBUGGER_HOST", "no-such-host.invalid", "does not resolve"),
    ("ENABLE_MS_DEBUGGER", "yes", "1 or true"),
    ("MS_DEBUGGER_PARTIAL_MEM", "maybe", "1, true, 0, false or unset"),
])
def test_each_bad_variable_is_one_error_naming_it(variable, value, allowed):
    with pytest.raises(ConfigError) as info:
        DebuggerSettings.from_env(_env(**{variable: value}))
    assert not isinstance(info.value, ConfigErrors)
    assert (info.value.field, info.value.value) == (variable, value)
    assert f"{variable}={value!r} is not allowed" in str(info.value) and allowed in str(info.value)


def test_several_bad_variables_come_in_one_exception():
    with pytest.raises(ConfigErrors) as info:
        DebuggerSettings.from_env(_env(MS_DEBUGGER_PORT="abc", MS_DEBUGGER_HOST="no-such-host.invalid"))
    assert [e.field for e in info.value.errors] == ["MS_DEBUGGER_PORT", "MS_DEBUGGER_HOST"]


def test_arguments_are_checked_like_the_variables():
    assert validate_address(" 127.0.0.1 ", "8080") == ("127.0.0.1", 8080)
    with pytest.raises(ConfigError, match="port=True is not allowed"):
        validate_address("127.0.0.1", True)
    with pytest.raises(ConfigError, match="host='' is not allowed"):
        validate_address("", 50051)


def test_settings_check_every_value_once_and_report_them_together():
    """``DebuggerSettings`` is the one place the debugger's values are checked: every instance, all problems in one
    exception, with the messages the callback's arguments always had."""
    settings = DebuggerSettings(on_server_lost=" Stop ", port="15051", reconnect_window=float("inf"))
    assert (settings.on_server_lost, settings.port, settings.reconnect_window) == ("stop", 15051, float("inf"))
    with pytest.raises(ConfigError, match=r"heartbeat_period=3 is not allowed: an int 5..3600 \(seconds"):
        DebuggerSettings(heartbeat_period=3)
    with pytest.raises(ConfigErrors) as info:
        DebuggerSettings(rpc_timeout=0, device_id=-1, reconnect_window=-1, on_server_lost="pause", host="a b")
    assert [e.field for e in info.value.errors] == ["host", "on_server_lost", "reconnect_window", "rpc_timeout",
                                                    "device_id"]
    assert "rpc_timeout=0 is not allowed: a number of seconds > 0" in str(info.value)
    assert "reconnect_window=-1 is not allowed: a number of seconds >= 0 (0: never reconnect)" in str(info.value)
    with pytest.raises(ConfigError, match="connect_timeout=True is not allowed"):
        DebuggerSettings(connect_timeout=True)


def test_settings_take_the_callbacks_keyword_arguments():
    base = DebuggerSettings.from_env(_env(MS_DEBUGGER_PORT="15051", MSDEBUG_DEBUGGER_ON_LOST="stop"))
    settings = base.with_options(rpc_timeout=3, wait_for_server=True)
    assert (settings.address, settings.on_server_lost, settings.rpc_timeout, settings.wait_for_server) == \
        ("localhost:15051", "stop", 3.0, True)
    assert base.with_options(host=" 127.0.0.1 ", port="8080").address == "127.0.0.1:8080"
    with pytest.raises(ConfigError, match="port=70000"):
        base.with_options(port=70000)
    with pytest.raises(ConfigError, match="tls_key"):               # a certificate needs its key: named as passed
        base.with_options(tls_cert=__file__)
    with pytest.raises(TypeError, match="'retries'"):
        base.with_options(retries=3)


@pytest.mark.mindspore
def test_callback_is_built_from_settings_and_reads_them_as_attributes():
    from msdebug_hooks.debugger.callback import DebuggerCallback

    settings = DebuggerSettings(host="127.0.0.1", port=15051, heartbeat_period=60)
    callback = DebuggerCallback(settings=settings, rpc_timeout=2)
    assert callback.settings == dataclasses.replace(settings, rpc_timeout=2.0)
    assert (callback.address, callback.heartbeat_period, callback.rpc_timeout) == ("127.0.0.1:15051", 60, 2.0)
    assert DebuggerCallback().address == "127.0.0.1:50051"           # the defaults the README documents
    assert not hasattr(callback, "no_such_setting")


@pytest.mark.mindspore
def test_callback_rejects_bad_options_and_sink_mode():
    from msdebug_hooks.debugger.callback import DebuggerCallback, check_sink_mode

    with pytest.raises(ConfigError, match="port=70000"):
        DebuggerCallback("127.0.0.1", 70000)
    with pytest.raises(ConfigError, match="heartbeat_period=3"):
        DebuggerCallback(heartbeat_period=3)
    assert DebuggerCallback.from_env({}).enabled is False          # unset: inert (issue 23), "yes" refused
    assert DebuggerCallback.from_env({"ENABLE_MS_DEBUGGER": "0"}).enabled is False
    with pytest.raises(ConfigError, match="ENABLE_MS_DEBUGGER='yes'"):
        DebuggerCallback.from_env({"ENABLE_MS_DEBUGGER": "yes"})
    callback = DebuggerCallback.from_env(_env(MS_DEBUGGER_PORT="15051"), wait_for_server=True)
    assert (callback.address, callback.wait_for_server) == ("localhost:15051", True)
    check_sink_mode(False, "GPU")
    with pytest.raises(ConfigError, match="dataset_sink_mode=True is not allowed: False while the online debugger"):
        check_sink_mode(True, "GPU")


def test_progress_line_waits_then_backs_off(caplog):
    """Each line reports how long its wait has lasted, which shows the schedule without timing the test: the first
    line after one interval, then gaps that double (0.2, 0.4, 0.8 s, then the 0.8 s cap); a quick wait prints nothing
    and a new wait starts over from one interval."""
    interval = 0.2
    waited: dict = {"quick": [], "long": [], "next": []}
    enough = threading.Event()

    def describe(kind: str, lines_wanted: int):
        def text(seconds: float) -> str:
            waited[kind].append(seconds)
            if len(waited[kind]) >= lines_wanted:
                enough.set()
            return f"paused {kind} {seconds:.1f}"
        return text

    line = ProgressLine(logging.getLogger("msdebug_hooks.test_progress"), interval=interval,
                        max_interval=4 * interval)
    try:
        line.begin(describe("quick", 1))
        line.end()                               # a wait shorter than the interval prints nothing
        line.begin(describe("long", 4))
        assert enough.wait(60)
        line.end()
        enough.clear()
        line.begin(describe("next", 1))
        assert enough.wait(60)
    finally:
        line.stop()
    long = waited["long"]
    gaps = [later - earlier for earlier, later in zip(long, long[1:])]
    assert waited["quick"] == [] and long[0] >= interval and waited["next"][0] >= interval
    assert [gap >= least for gap, least in zip(gaps, [2 * interval, 4 * interval, 4 * interval])] == [True] * 3
    lines = [message for message in caplog.messages if "paused" in message]
    assert len(lines) == len(long) + len(waited["next"]) and "paused quick" not in " ".join(lines)
    assert all(message.startswith("paused ") for message in lines)


def _run_script(tmp_path, env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """The plain script with the real .pth processed by site.addsitedir (an installed package's start-up)."""
    site_dir = tmp_path / "site-packages"
    site_dir.mkdir(exist_ok=True)
    shutil.copy(ROOT / "msdebug_hooks_autoattach.pth", site_dir)
    argv = [str(SCRIPT), "--log", str(tmp_path / "steps.log"), *args]
    code = (f"import runpy, site, sys; site.addsitedir({str(site_dir)!r}); sys.argv = {argv!r}; "
            f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')")
    full = guarded(dict(os.environ, PYTHONPATH=os.pathsep.join([str(EXAMPLES), str(ROOT)]), **env))
    proc = subprocess.Popen([sys.executable, "-c", code], env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


@pytest.mark.mindspore
def test_no_server_listening_trains_to_the_end_with_one_warning(tmp_path):
    port = free_port()
    proc = _run_script(tmp_path, _env(MS_DEBUGGER_HOST="127.0.0.1", MS_DEBUGGER_PORT=str(port)), "--batches", "6")
    assert proc.returncode == 0, proc.stdout
    warnings = [line for line in proc.stdout.splitlines() if line.startswith("[msdebug") and " WARNING " in line]
    assert len(warnings) == 1 and f"127.0.0.1:{port}" in warnings[0], proc.stdout
    assert "training continues without the debugger" in warnings[0]
    assert (tmp_path / "steps.log").read_text().split()[-3:] == ["step", "6", "end"]
    assert "training finished" in proc.stdout                   # no hang: _run_script's timeout bounds the run


@pytest.mark.mindspore
@pytest.mark.parametrize("env, message", [
    (_env(MS_DEBUGGER_PORT="abc"), "MS_DEBUGGER_PORT='abc' is not allowed: a port number 1-65535"),
    (_env(MS_DEBUGGER_SOURCE="full"), "MS_DEBUGGER_SOURCE='full' is not allowed: one of light, dump"),
    ({"ENABLE_MS_DEBUGGER": "yes"}, "ENABLE_MS_DEBUGGER='yes' is not allowed: 1 or true (any case) to attach the "
                                    "debugger; 0, false or unset not to"),
], ids=["port", "source", "enable-yes"])
def test_a_bad_variable_stops_the_script_with_one_clear_line_and_exit_2(tmp_path, env, message):
    """No traceback through the user's script: one line naming the variable, the value and what is allowed."""
    proc = _run_script(tmp_path, env, "--batches", "2")
    assert proc.returncode == 2 and not (tmp_path / "steps.log").exists(), proc.stdout
    assert "Traceback" not in proc.stdout, proc.stdout
    assert proc.stdout.count(message) == 1, proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "msdebug-hooks: the training did not start; fix the setting above"


@pytest.mark.mindspore
def test_a_bad_variable_is_not_swallowed_by_the_scripts_except_exception(tmp_path):
    script = tmp_path / "catches.py"
    script.write_text("from lenet import make_model, make_dataset\n"
                      "model, _ = make_model()\n"
                      "try:\n    model.train(1, make_dataset(2))\nexcept Exception as exc:\n"
                      "    print('swallowed', exc)\n"
                      "raise ValueError('the script goes on and fails on its own')\n")
    site_dir = tmp_path / "site-packages"
    site_dir.mkdir()
    shutil.copy(ROOT / "msdebug_hooks_autoattach.pth", site_dir)
    code = (f"import runpy, site; site.addsitedir({str(site_dir)!r}); "
            f"runpy.run_path({str(script)!r}, run_name='__main__')")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(EXAMPLES), str(ROOT)]), ENABLE_MS_DEBUGGER="1",
               MS_DEBUGGER_PORT="0")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "swallowed" not in proc.stdout and "Traceback" not in proc.stderr, proc.stderr
    assert "MS_DEBUGGER_PORT='0' is not allowed" in proc.stderr


def test_msdebug_run_rejects_bad_values_before_starting(tmp_path):
    env = dict(os.environ)
    env.pop("ENABLE_MS_DEBUGGER", None)
    proc = subprocess.run([MSDEBUG, "run", "--port", "70000", str(SCRIPT)], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 2 and "--port='70000' is not allowed" in proc.stderr     # the option the user typed
    assert "MS_DEBUGGER_PORT" not in proc.stderr
    proc = subprocess.run([MSDEBUG, "run", "--host", "no-such-host.invalid", str(SCRIPT)], capture_output=True,
                          text=True, env=env, timeout=60)
    assert proc.returncode == 2 and "--host='no-such-host.invalid' is not allowed" in proc.stderr
    proc = subprocess.run([MSDEBUG, "run"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2 and "required: script, args" not in proc.stderr
    assert "msdebug run: error: missing the training script to run" in proc.stderr, proc.stderr
    proc = subprocess.run([MSDEBUG, "run", str(tmp_path / "missing.py")], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 2 and "missing.py" in proc.stderr


def test_msdebug_run_passes_argv_and_exit_status(tmp_path):
    script = tmp_path / "echo.py"
    script.write_text("import os, sys\nprint(sys.argv[1:], os.environ['ENABLE_MS_DEBUGGER'], "
                      "os.environ['MS_DEBUGGER_PORT'], __name__)\nsys.exit(3)\n")
    proc = subprocess.run([MSDEBUG, "run", "--port", "15051", str(script), "--epochs", "2"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 3 and proc.stdout.strip() == "['--epochs', '2'] 1 15051 __main__"


@pytest.mark.mindspore
def test_debug_session_loop_under_the_debugger(tmp_path):
    """A hand-written loop (value_and_grad + optimizer) inside DebugSession: the graph includes the separate
    optimizer, steps are reported at every step end, terminate stops the loop and the end hooks run."""
    import mindspore as ms
    from mindspore import nn
    from mindspore.train import Callback

    from lenet import make_lenet, synthetic_batches
    from msdebug_hooks.callbacks.custom_loop import DebugSession
    from msdebug_hooks.debugger.callback import DebuggerCallback
    from msdebug_hooks.server import DebuggerServer

    ms.set_seed(1)
    net = make_lenet()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, optimizer.parameters)
    ended = []

    class EndHook(Callback):
        def on_train_end(self, run_context):
            ended.append(run_context.original_args().cur_step_num)

    reported, failures = [], []

    def drive(job_of) -> None:               # the user's side, on the project's own server: 3 steps, then terminate
        try:
            job = job_of(timeout=120)
            reported.append(job.step)
            for _ in range(3):
                job.run(1, timeout=120)
                reported.append(job.step)
            job.terminate(timeout=120)
            reported.append(job.state)
        except BaseException as exc:         # noqa: BLE001 - reported below
            failures.append(exc)

    with DebuggerServer() as server:
        driver = threading.Thread(target=drive, args=(server.wait_for_training,), daemon=True)
        driver.start()
        debugger = DebuggerCallback("127.0.0.1", server.port, rpc_timeout=5)
        steps = 0
        with DebugSession([debugger, EndHook()], network=net, optimizer=optimizer, loss_fn=loss_fn) as session:
            for images, labels in synthetic_batches(20):
                loss, grads = grad_fn(ms.Tensor(images), ms.Tensor(labels))
                optimizer(grads)
                session.step_end(loss)
                steps += 1
                if session.should_stop:
                    break
        driver.join(120)
        graph = debugger.session.graph
        served = server.jobs[0]
    assert not failures and not driver.is_alive()
    assert steps == 3 and ended == [3]
    assert reported[:4] == [0, 1, 2, 3] and reported[4].value == "terminated"        # a step end reported each step
    assert {"moments.fc1.weight", "learning_rate"} <= set(graph.parameters)      # the separate optimizer
    assert served.node("moments.fc1.weight").name.endswith("moments.fc1.weight")  # ... and it reached the server
    assert graph.loss_node and graph.loss_node.endswith("SoftmaxCrossEntropyWithLogits-op" +
                                                        graph.loss_node.rsplit("op", 1)[-1])
    assert debugger.session.state.value == "exited"


def test_waiting_for_a_server_that_starts_later_logs_progress_then_connects(caplog):
    """``wait_for_server``: a training started before MindInsight waits (one line every few seconds) and attaches
    once the server is up."""
    import threading

    from msdebug_hooks.debugger.graph import DebugGraph
    from msdebug_hooks.wire import ms_graph_pb2 as graph_pb
    from msdebug_hooks.debugger.session import DebuggerSession, SessionState
    from msdebug_hooks.debugger.transport import Transport

    port = free_port()
    graph = DebugGraph(graph_pb.GraphProto(name="kernel_graph_0", root_name="0"))
    session = DebuggerSession(Transport(f"127.0.0.1:{port}", timeout=5), graph, lambda name: None,
                              ms_version="2.10.0", progress_interval=0.2)
    result = []
    worker = threading.Thread(target=lambda: result.append(session.connect(wait_for_server=True)))
    try:
        with caplog.at_level(logging.INFO, logger="msdebug_hooks.debugger"):
            worker.start()
            deadline = time.monotonic() + 60
            while not any("waits at step 0 for the debugger server" in message for message in caplog.messages):
                assert time.monotonic() < deadline, "no progress line while waiting for the server"
                time.sleep(0.05)
            assert worker.is_alive() and not result                  # nothing listens yet: still waiting
            with DebugTestServer(port) as server:
                worker.join(30)
                assert result == [True] and session.state is SessionState.SUSPENDED
                assert len(server.recorded.metadata) == 1 and len(server.recorded.graph_streams) == 1
    finally:   # a failed check must not leave the waiting thread keeping pytest alive
        session.close()
        worker.join(30)
    lines = [r.getMessage() for r in caplog.records if "waits at step 0 for the debugger server" in r.getMessage()]
    assert lines and f"127.0.0.1:{port}" in lines[0]     # the back-off itself: test_progress_line_waits_then_backs_off


@pytest.mark.mindspore
def test_frozen_parameters_are_in_the_graph_as_frozen_weights():
    from mindspore import nn

    from lenet import make_lenet
    from msdebug_hooks.debugger.graph import build_graph

    net = make_lenet()
    for param in net.fc3.get_parameters():
        param.requires_grad = False
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    graph = build_graph(nn.TrainOneStepCell(nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True)),
                                            optimizer))
    roles = {name: p.role for name, p in graph.parameters.items()}
    assert roles["fc3.weight"] == roles["fc3.bias"] == "frozen" and roles["fc2.weight"] == "weight"
    assert "moments.fc3.weight" not in roles and graph.parameters["fc3.weight"].source is net.fc3.weight
    consumed = {i.name for node in graph.proto.node for i in node.input}
    assert {"fc3.weight", "fc3.bias"} <= consumed                  # fed to a node, so MindInsight keeps them


@pytest.mark.mindspore
def test_the_example_runs_under_msdebug_run_without_a_server():
    proc = subprocess.run([MSDEBUG, "run", "--host", "127.0.0.1", "--port", str(free_port()),
                           str(EXAMPLES / "online_debug.py"), "--epochs", "1", "--batches", "5"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "training finished" in proc.stdout, proc.stderr
    assert proc.stderr.count("training continues without the debugger") == 1


@pytest.mark.mindspore
def test_a_debugger_listed_last_runs_its_step_end_first_and_leaves_the_other_callbacks_as_they_were():
    from project import run_python

    proc = run_python(f"""
        from mindspore.train import Callback
        from lenet import make_model, make_dataset
        from msdebug_hooks import DebuggerCallback

        order = []
        class User(Callback):
            def on_train_step_end(self, run_context):
                order.append("user")

        class Debugger(DebuggerCallback):
            def _step_end(self, run_context):
                order.append("debugger")
                super()._step_end(run_context)

        user = User()
        model, _ = make_model()
        model.train(1, make_dataset(2), callbacks=[user, Debugger("127.0.0.1", {free_port()})],
                    dataset_sink_mode=False)      # no server: detached after one warning, still in the list
        print(order, "on_train_step_end" in vars(user))
    """)
    assert proc.stdout.strip().splitlines()[-1] == "['debugger', 'user', 'debugger', 'user'] False", proc.stdout
