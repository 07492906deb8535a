"""Typed errors shared by every part of scriptorium.

Each error carries a stable ``code`` (what scripts and the JSON output match on), whether a
retry can help, and a one-line message that names the offending thing. The CLI turns any
``ScriptoriumError`` into that one line on stderr and a non-zero exit.
"""

from __future__ import annotations


class ScriptoriumError(Exception):
    """Base class: a failure we can explain in one line."""

    code = "ERROR"
    retryable = False
    exit_code = 1

    def __init__(self, message: str, *, code: str | None = None, retryable: bool | None = None):
        # Keep messages on one line: they are printed as-is by the CLI.
        super().__init__(" ".join(str(message).split()))
        if code is not None:
            self.code = code
        if retryable is not None:
            self.retryable = retryable

    @property
    def message(self) -> str:
        return str(self)

    def to_dict(self) -> dict:
        return {"reason_code": self.code, "retryable": self.retryable, "message": self.message}


class InvalidInput(ScriptoriumError):
    """Bad input from a user or from data: an id, a path, an argument."""

    code = "INVALID_INPUT"
    exit_code = 2


class NotFound(ScriptoriumError):
    """A session, node, topic or block that does not exist."""

    code = "NOT_FOUND"
    exit_code = 3


class CorruptFile(ScriptoriumError):
    """A file on disk that cannot be read as what it should be; the message names it."""

    code = "CORRUPT_FILE"
    exit_code = 4


class ConcurrentUpdate(ScriptoriumError):
    """Someone else holds the lock or changed the data under us; trying again may work."""

    code = "CONCURRENT_UPDATE"
    retryable = True
    exit_code = 5
