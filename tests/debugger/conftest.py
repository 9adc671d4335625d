"""Fixtures the debugger's tests share: a session against our in-process test server (tests/helpers/session_rig.py)."""
from session_rig import server, session, values  # noqa: F401 (pytest fixtures, offered to every test here)
