"""What the debugger tests against the real MindInsight share: a training pointed at its debugger port, and the
REST reads its browser UI makes (the node tree, waiting at a step, the hits table)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

from server_training import PLAIN, Training, training

BACKBONE = "Default/network-WithLossCell/_backbone-LeNet5"      # the plain LeNet script's scope in the UI


def training_against(server, tmp_path: Path, *args: str, script: Path = PLAIN, launcher: str = "pth",
                     env: dict | None = None):
    """``script`` attached to MindInsight's debugger port (env variables only, or ``msdebug run``); on a failure the
    script's output and MindInsight's log tail are printed."""
    return training(tmp_path, server.debugger_port, *args, script=script, host=server.host, launcher=launcher,
                    env=env, failure_logs=server.logs)


def walk(nodes: list[dict]) -> Iterator[dict]:
    """Every node of a UI node tree, depth first."""
    for node in nodes:
        yield node
        yield from walk(node.get("nodes", []))


def at_step(rest, run: Training, step: int, timeout: float = 120) -> dict:
    """Wait until the UI shows the training waiting at ``step`` (its metadata); fail at once if the script died."""
    def there(reply: dict) -> bool:
        assert run.proc.poll() is None, f"training exited ({run.proc.returncode}):\n{run.out()[-3000:]}"
        return reply["metadata"]["step"] == step and reply["metadata"]["state"] == "waiting"
    return rest.wait_for(there, timeout=timeout, what=f"waiting at step {step}")["metadata"]


def hits_by_node(rest) -> dict[str, dict[int, dict]]:
    """Leaf node name -> {watchpoint id: hit entry (watch_condition with params, error_list)}."""
    table: dict[str, dict[int, dict]] = {}
    for node in rest.search_watchpoint_hits(limit=200).get("watch_point_hits", []):   # absent while running
        for tensor in node["tensors"]:
            for entry in tensor["watch_points"]:
                table.setdefault(node["node_name"].rsplit("/", 1)[-1], {})[entry["id"]] = entry
    return table
