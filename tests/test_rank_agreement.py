"""Rank bookkeeping and the stop agreement inside one process: MindSpore's rank order, what msrun sets, dump on chosen
ranks, no collective on one rank, and a clear warning where a stop cannot be agreed. The real multi-rank behaviour
is in test_distributed.py (msrun jobs)."""
from __future__ import annotations

import os
import warnings

import pytest

from msdebug_hooks import rank
from msdebug_hooks.config.dump import DumpConfig, DumpConfigWarning
from msdebug_hooks.errors import ConfigError

RANK_ENV = ("RANK_ID", "OMPI_COMM_WORLD_RANK", "MS_NODE_ID", "RANK_SIZE", "OMPI_COMM_WORLD_SIZE", "MS_WORKER_NUM",
            "MS_ROLE", "DEVICE_ID", "MINDSPORE_DUMP_CONFIG", "MS_DIAGNOSTIC_DATA_PATH")


@pytest.fixture
def clean_env(monkeypatch):
    for name in RANK_ENV:          # setenv first: the variables apply() sets are removed again at teardown
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    return monkeypatch


def test_rank_follows_mindspores_log_directory_order(clean_env):
    assert (rank.rank_id(), rank.world_size(), rank.mindspore_log_rank()) == (0, 1, "0")
    clean_env.setenv("MS_NODE_ID", "3")
    clean_env.setenv("MS_WORKER_NUM", "4")
    assert (rank.rank_id(), rank.world_size(), rank.mindspore_log_rank()) == (3, 4, "3")
    clean_env.setenv("OMPI_COMM_WORLD_RANK", "2")
    clean_env.setenv("OMPI_COMM_WORLD_SIZE", "8")
    assert (rank.rank_id(), rank.world_size(), rank.mindspore_log_rank()) == (2, 8, "2")
    clean_env.setenv("RANK_ID", "1")
    clean_env.setenv("RANK_SIZE", "2")
    assert (rank.rank_id(), rank.world_size(), rank.mindspore_log_rank()) == (1, 2, "1")


def test_what_msrun_sets_in_a_worker_and_in_its_scheduler(clean_env):
    worker = {"RANK_ID": "1", "MS_NODE_ID": "1", "DEVICE_ID": "1", "RANK_SIZE": "2", "MS_WORKER_NUM": "2",
              "MS_ROLE": "MS_WORKER"}
    for name, value in worker.items():
        clean_env.setenv(name, value)
    assert (rank.rank_id(), rank.world_size(), rank.device_id(), rank.is_scheduler()) == (1, 2, 1, False)
    clean_env.setenv("MS_ROLE", "MS_SCHED")         # msrun's scheduler runs the script with RANK_ID=0
    clean_env.setenv("RANK_ID", "0")
    clean_env.delenv("MS_NODE_ID")
    clean_env.delenv("DEVICE_ID")
    assert rank.is_scheduler() and rank.device_id() is None


def test_dump_applies_only_on_the_chosen_ranks(clean_env, tmp_path):
    config = DumpConfig(path=str(tmp_path / "dump"), net_name="LeNet", iteration="0")
    clean_env.setenv("RANK_SIZE", "2")
    clean_env.setenv("RANK_ID", "0")
    assert config.apply(tmp_path / "cfg.json", ranks=[1]) == {}
    assert "MINDSPORE_DUMP_CONFIG" not in os.environ and not (tmp_path / "cfg.json").exists()
    clean_env.setenv("RANK_ID", "1")
    env = config.apply(tmp_path / "cfg.json", ranks=[1])
    assert os.environ["MINDSPORE_DUMP_CONFIG"] == env["MINDSPORE_DUMP_CONFIG"] == str(tmp_path / "cfg.json")
    with pytest.raises(ConfigError, match="ranks"):
        config.apply(tmp_path / "cfg.json", ranks=["1"])
    with pytest.raises(ConfigError, match="ranks"):
        config.apply(tmp_path / "cfg.json", ranks=1)


def test_dump_on_chosen_ranks_needs_the_rank_before_init(clean_env, tmp_path):
    clean_env.setenv("MS_WORKER_NUM", "16")          # several nodes without --node_rank: msrun sets no rank
    config = DumpConfig(path=str(tmp_path / "dump"), iteration="0")
    with pytest.raises(ConfigError, match="known before mindspore.communication.init"):
        config.apply(tmp_path / "cfg.json", ranks=[3])


def test_support_device_missing_this_device_warns_that_it_is_not_a_rank_list(clean_env, tmp_path):
    for name, value in {"RANK_ID": "9", "RANK_SIZE": "16", "DEVICE_ID": "1"}.items():
        clean_env.setenv(name, value)
    with pytest.warns(DumpConfigWarning, match="entry 9: these are device ids"):    # checked on construction too
        config = DumpConfig(path=str(tmp_path / "dump"), iteration="0", support_device=[9], target="Ascend")
    with pytest.warns(DumpConfigWarning, match=r"device id 1 \(DEVICE_ID; rank 9\).*not ranks.*apply\(ranks="):
        config.apply(tmp_path / "cfg.json")
    with warnings.catch_warnings(record=True) as caught:      # the default keeps every device id: no such warning
        warnings.simplefilter("always")
        DumpConfig(path=str(tmp_path / "dump"), iteration="0", target="Ascend").apply(tmp_path / "cfg2.json")
    # (an earlier in-process test may have compiled graphs: that warning is about timing, not about devices)
    assert not [w for w in caught if "device id" in str(w.message)], [str(w.message) for w in caught]


@pytest.mark.mindspore
def test_agreed_callbacks_on_one_rank_stop_at_once_without_any_collective(clean_env):
    from lenet import make_dataset, make_model
    from msdebug_hooks import LossGuard, StopAtStep, StopAtTime
    from msdebug_hooks.stop_agreement import collectives_called

    model, _ = make_model()
    guard, stop = LossGuard(), StopAtStep(3)
    model.train(2, make_dataset(num_batches=4), callbacks=[StopAtTime(60), guard, stop])
    assert stop.stopped_step == 3 and guard.failed_step is None
    assert collectives_called() == 0


@pytest.mark.mindspore
def test_several_ranks_without_init_stop_alone_and_say_it_may_hang(clean_env, caplog):
    from lenet import make_dataset, make_model
    from msdebug_hooks import StopAtStep
    from msdebug_hooks.stop_agreement import collectives_called

    clean_env.setenv("RANK_SIZE", "2")                # launched as 2 ranks, but init() never ran
    model, _ = make_model()
    stop = StopAtStep(2)
    model.train(1, make_dataset(num_batches=4), callbacks=[stop])
    assert stop.stopped_step == 2 and collectives_called() == 0
    warning, = [message for message in caplog.messages if "decided on this rank alone" in message]
    assert "communication is not initialised" in warning and "StopAtStep: reached step 2" in warning


@pytest.mark.mindspore
def test_agreed_callbacks_cannot_skip_the_agreement_point():
    from mindspore.train import Callback

    from msdebug_hooks.stop_agreement import AgreedStop

    with pytest.raises(TypeError, match="_train_step_end instead"):
        class Bad(AgreedStop, Callback):  # noqa: F841 - the class statement itself must fail
            def on_train_step_end(self, run_context):
                pass


@pytest.mark.mindspore
def test_distributed_debugger_options_say_which_rank_connects_where():
    from msdebug_hooks import DistributedDebugger

    default = DistributedDebugger("127.0.0.1", 50051)
    assert default.connects(0) and not default.connects(1)
    every = DistributedDebugger("127.0.0.1", 50051, ranks="all", port_per_rank=True)
    assert every.connects(0) and every.connects(5)
    with pytest.raises(ConfigError, match="port_per_rank.*True when several ranks connect"):
        DistributedDebugger("127.0.0.1", 50051, ranks=[0, 1])
    with pytest.raises(ConfigError, match="ranks"):
        DistributedDebugger("127.0.0.1", 50051, ranks=[])
    with pytest.raises(ConfigError, match="device_id"):
        DistributedDebugger("127.0.0.1", 50051, device_id=3)
    with pytest.raises(ConfigError, match="rpc_timeout"):          # DebuggerCallback's own checks apply
        DistributedDebugger("127.0.0.1", 50051, rpc_timeout=0)


@pytest.mark.mindspore
def test_env_activation_in_a_multi_rank_job_attaches_the_distributed_debugger(clean_env):
    from msdebug_hooks import DebuggerCallback, DistributedDebugger
    from msdebug_hooks.autoattach import _debugger_from_env

    clean_env.setenv("ENABLE_MS_DEBUGGER", "1")
    clean_env.setenv("MS_DEBUGGER_PORT", "15051")
    single, = _debugger_from_env()
    assert type(single) is DebuggerCallback
    clean_env.setenv("RANK_SIZE", "2")
    multi, = _debugger_from_env()
    assert type(multi) is DistributedDebugger and multi.port == 15051 and multi.port_per_rank   # every rank: r to
    assert multi.connects(0) and multi.connects(1)                                              # 15051 + r


def test_stop_votes_travel_as_data_and_always_parse_back():
    from msdebug_hooks.stop_agreement import REASON_BYTES, StopDecision, StopVote, decode_votes, encode_votes

    votes = [StopVote(1, "LossGuard", "loss is nan: the forward pass broke", 2, 7), StopVote(1, "", "free text: x")]
    data = encode_votes(votes)
    assert decode_votes(1, data) == votes          # a colon in a reason is data, not a separator
    assert votes[0].describe() == "LossGuard: loss is nan: the forward pass broke at epoch 2, step 7"
    assert votes[1].describe() == "free text: x"   # an unnamed vote is said as written
    decision = StopDecision(7, 2, 2, tuple(votes))
    assert decision.by("LossGuard") == (votes[0],) and decision.ranks("LossGuard") == [1]
    assert decision.describe().startswith("rank 1: LossGuard: loss is nan")

    many = [StopVote(0, "StopAtTime", "é" * 2000, 1, 3)] + [StopVote(0, f"Cb{i}", "r" * 50, 1, 3) for i in range(40)]
    squeezed = encode_votes(many)
    assert len(squeezed) <= REASON_BYTES
    back = decode_votes(0, squeezed)
    assert back and back[0].source == "StopAtTime" and back[0].reason.endswith("...")
    assert decode_votes(3, b"not json")[0].reason.startswith("unreadable stop vote")
