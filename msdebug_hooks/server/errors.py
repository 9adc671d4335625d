"""Exceptions of the debugger server's API: each says which job, what state it is in, and what to do."""
from __future__ import annotations


class JobError(RuntimeError):
    """Base of the server API's errors about one training job."""


class JobLost(JobError):
    """The training disconnected, died or stopped heartbeating; ``reason`` says which, and when."""

    def __init__(self, job_label: str, reason: str) -> None:
        self.reason = reason
        super().__init__(f"{job_label} is lost: {reason}")


class JobCrashed(JobLost):
    """The training raised, or its process exited with a non-zero code; ``reason`` has its error's last line or
    the exit code, and the step. A ``JobLost``: the training is gone either way."""

    def __init__(self, job_label: str, reason: str) -> None:
        JobError.__init__(self, f"{job_label} crashed: {reason}")
        self.reason = reason


class JobStateError(JobError):
    """The call needs another state (e.g. a tensor view while the training runs)."""

    def __init__(self, job_label: str, state: str, needed: str) -> None:
        self.state = state
        super().__init__(f"{job_label} is {state}: {needed}")


class TensorUnavailable(JobError):
    """The training answered a view without a value (a node it holds no value of, or no previous-step copy)."""
