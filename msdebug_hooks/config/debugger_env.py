"""The online debugger's environment variables, named and read in one place.

``debugger/settings.py`` (``DebuggerSettings.from_env``, when training starts) and ``config/env.py`` (``msdebug env``)
both read them through this module, so a value means the same to both. Pure Python: nothing here imports the
debugger.
"""
from __future__ import annotations

from typing import Optional

from msdebug_hooks.errors import ConfigError
from msdebug_hooks.validation import whole_number

__all__ = ["SWITCH", "HOST", "PORT", "PARTIAL_MEM", "SOURCE", "DUMP_DIR", "DUMP_KERNELS", "TLS_VARIABLES", "WAIT",
           "ON_LOST", "DEFAULT_HOST", "DEFAULT_PORT", "SOURCES", "ON_LOST_POLICIES", "TRUE_VALUES", "FALSE_VALUES",
           "read_flag", "read_port"]

# MindSpore's own names (its client read them until 2.3)
SWITCH = "ENABLE_MS_DEBUGGER"            # 1 / true (any case) attaches the debugger
HOST = "MS_DEBUGGER_HOST"
PORT = "MS_DEBUGGER_PORT"
PARTIAL_MEM = "MS_DEBUGGER_PARTIAL_MEM"  # accepted; nothing to do for a Python client
# ours
SOURCE = "MS_DEBUGGER_SOURCE"            # "light" (default) or "dump"
DUMP_DIR = "MS_DEBUGGER_DUMP_DIR"        # scratch parent directory for the dump source
DUMP_KERNELS = "MS_DEBUGGER_DUMP_KERNELS"  # comma-separated kernels / op types to dump (default: all)
TLS_VARIABLES = {"ca": "MS_DEBUGGER_TLS_CA", "cert": "MS_DEBUGGER_TLS_CERT", "key": "MS_DEBUGGER_TLS_KEY",
                 "server_name": "MS_DEBUGGER_TLS_SERVER_NAME"}
WAIT = "MSDEBUG_DEBUGGER_WAIT"           # ``msdebug run --wait``: wait for the server instead of detaching
ON_LOST = "MSDEBUG_DEBUGGER_ON_LOST"     # "continue" (default) or "stop" when the server is lost

DEFAULT_HOST = "localhost"   # MindSpore's default for MS_DEBUGGER_HOST
DEFAULT_PORT = 50051         # MindSpore's and MindInsight's default debugger port
SOURCES = ("light", "dump")
ON_LOST_POLICIES = ("continue", "stop")
TRUE_VALUES, FALSE_VALUES = ("1", "true"), ("", "0", "false")


def read_flag(value: str) -> Optional[bool]:
    """``1`` / ``true`` (any case, spaces ignored): True; ``0`` / ``false`` / empty: False; anything else: None."""
    text = value.strip().lower()
    if text in TRUE_VALUES:
        return True
    return False if text in FALSE_VALUES else None


def read_port(value: object) -> Optional[int]:
    """A port 1-65535 from an int or a string of digits; None when it is not one."""
    try:
        return whole_number("port", value, minimum=1, maximum=65535, digits=True)
    except ConfigError:
        return None
