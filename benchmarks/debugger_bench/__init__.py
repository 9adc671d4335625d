"""The parts of ``benchmarks/debugger_overhead.py``, one module per measurement: the servers it trains against
(``servers``), the light source's per-step cost (``light_source``, with the memory-traffic floor in ``traffic``),
tensor views and pulls (``views``), the dump source (``dump_source``) and our server against MindInsight
(``our_server``). ``debugger_overhead.py`` puts ``benchmarks/``, ``examples/`` and the repository root on the path
before importing them; the modules that run in processes of their own are started through :func:`child_command`.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATHS = [str(ROOT / "benchmarks"), str(ROOT / "examples"), str(ROOT)]


def child_command(module: str, *args: str) -> tuple[list[str], dict]:
    """(argv, environment) that run ``debugger_bench.<module>`` in a fresh interpreter with the same paths."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [*PATHS, os.environ.get("PYTHONPATH")])))
    return [sys.executable, "-m", f"debugger_bench.{module}", *args], env
