"""The project's exceptions: every one names the field, the value and what is allowed."""
from __future__ import annotations

from typing import Any, Iterable


class ConfigError(ValueError):
    """A setting MindSpore would reject (or that cannot work). Subclasses ``ValueError``.

    ``field`` is the dotted key (``common_dump_settings.iteration``), ``value`` what was given (``None``: nothing
    was) and ``allowed`` a human-readable description of what is accepted.
    """

    def __init__(self, field: str, value: Any, allowed: str, *, detail: str = "") -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        # None is how a missing value arrives; a user never typed Python's "None"
        message = f"{field} is not set: {allowed}" if value is None else f"{field}={value!r} is not allowed: {allowed}"
        if detail:
            message += f" ({detail})"
        super().__init__(message)


class ConfigErrors(ConfigError):
    """Several problems found at once: MindSpore reports one per run, we report them all."""

    def __init__(self, errors: Iterable[ConfigError]) -> None:
        self.errors = list(errors)
        first = self.errors[0]
        ValueError.__init__(self, "\n".join(str(e) for e in self.errors))
        self.field, self.value, self.allowed = first.field, first.value, first.allowed


class DumpError(ValueError):
    """A dump directory or file that cannot be read as MindSpore wrote it. Subclasses ``ValueError``.

    ``path`` is the file or directory, ``expected`` says what should have been there, ``detail`` what was found.
    """

    def __init__(self, path: Any, expected: str, *, detail: str = "") -> None:
        self.path = str(path)
        self.expected = expected
        self.detail = detail
        message = f"{self.path}: expected {expected}"
        if detail:
            message += f" ({detail})"
        super().__init__(message)


class MissingExtraError(ImportError):
    """An optional extra (``torch``, ``plot``) is not installed; the message is the ``pip install`` line that adds
    it. Subclasses ``ImportError``, so ``except ImportError`` in user code still catches it."""
