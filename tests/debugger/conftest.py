"""Fixtures the debugger's tests share: a session against our in-process test server (tests/helpers/session_rig.py).

The rig is imported inside the fixtures, not here: pytest loads this file before any test module, and importing
protobuf (through the rig) before MindSpore would keep MindSpore 2.7 from loading its own generated messages in the
compatibility lane (MindSpore switches protobuf to its pure-Python parser only when it is imported first).
"""
import pytest


@pytest.fixture
def server():
    """Our in-process test server, stopped after the test."""
    from debug_test_server import DebugTestServer

    with DebugTestServer() as srv:
        yield srv


@pytest.fixture
def values():
    """The weight and the loss the session reads."""
    from session_rig import session_values

    return session_values()


@pytest.fixture
def session(server, values):
    """A session connected to ``server`` through a real transport; closed after the test."""
    from session_rig import new_session

    s = new_session(server, values)
    yield s
    s.close()
