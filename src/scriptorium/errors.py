"""Typed errors shared by every part of scriptorium, and the one registry of reason codes.

Each error carries a stable :class:`ReasonCode` (what scripts and the JSON output match on),
whether a retry can help, and a one-line message that names the offending thing. Every error
belongs to one of five families, and :data:`EXIT_CODES` is the one table from family to the
process exit code the CLI uses (the README's table is checked against it by a test).
"""

from __future__ import annotations

import enum
from typing import Any


class ReasonCode(enum.StrEnum):
    """Every reason a failure is reported with. A ``StrEnum``: it compares equal to its string
    and serialises as that string, so JSON output and string comparisons keep working."""

    ERROR = "ERROR"
    # bad input (exit 2)
    INVALID_INPUT = "INVALID_INPUT"
    APPEND_REFUSED = "APPEND_REFUSED"
    HEAD_REFUSED = "HEAD_REFUSED"
    INVALID_SOURCE_ID = "INVALID_SOURCE_ID"
    INVALID_SOURCE_RECORD = "INVALID_SOURCE_RECORD"
    SOURCE_PATH_COLLISION = "SOURCE_PATH_COLLISION"
    INVALID_TOPIC_FORMAT = "INVALID_TOPIC_FORMAT"
    WRITER_PRECONDITION_FAILED = "WRITER_PRECONDITION_FAILED"
    UNKNOWN_WRITER = "UNKNOWN_WRITER"
    EMBEDDING_UNAVAILABLE = "EMBEDDING_UNAVAILABLE"
    MCP_UNAVAILABLE = "MCP_UNAVAILABLE"
    POSTGRES_UNAVAILABLE = "POSTGRES_UNAVAILABLE"
    # not found (exit 3)
    NOT_FOUND = "NOT_FOUND"
    SESSION_NOT_FOUND = "SESSION_NOT_FOUND"
    NODE_NOT_FOUND = "NODE_NOT_FOUND"
    SOURCE_NOT_WRITTEN = "SOURCE_NOT_WRITTEN"  # a stored turn memory has not archived yet
    # corrupt file (exit 4)
    CORRUPT_FILE = "CORRUPT_FILE"
    BROKEN_CHAIN = "BROKEN_CHAIN"
    SOURCE_ARCHIVE_INVALID = "SOURCE_ARCHIVE_INVALID"
    GIT_DAMAGED = "GIT_DAMAGED"
    BRANCH_UNAVAILABLE = "BRANCH_UNAVAILABLE"
    SCHEMA_TOO_NEW = "SCHEMA_TOO_NEW"
    # busy / concurrent (exit 5)
    CONCURRENT_UPDATE = "CONCURRENT_UPDATE"
    STALE_BATCH = "STALE_BATCH"
    SEARCH_INDEX_UNAVAILABLE = "SEARCH_INDEX_UNAVAILABLE"
    DATABASE_UNREACHABLE = "DATABASE_UNREACHABLE"
    # a write that failed (exit 1)
    WRITE_FAILED = "WRITE_FAILED"
    COMMIT_REJECTED = "COMMIT_REJECTED"
    FOREIGN_CITATION_REMOVED = "FOREIGN_CITATION_REMOVED"
    READ_ONLY_PATH = "READ_ONLY_PATH"
    NOT_EVIDENCE = "NOT_EVIDENCE"
    MISSING_SOURCE = "MISSING_SOURCE"
    WRITER_NO_PROGRESS = "WRITER_NO_PROGRESS"
    WRITER_FAILURE_UNKNOWN = "WRITER_FAILURE_UNKNOWN"
    REORGANIZE_REFUSED = "REORGANIZE_REFUSED"
    MIGRATION_FAILED = "MIGRATION_FAILED"
    GIT_UNAVAILABLE = "GIT_UNAVAILABLE"
    GIT_FAILED = "GIT_FAILED"
    DISK_FULL = "DISK_FULL"  # no space (or quota) left: retryable once space is freed
    MODEL_AUTHENTICATION = "MODEL_AUTHENTICATION"
    MODEL_AUTHORIZATION = "MODEL_AUTHORIZATION"
    MODEL_TIMEOUT = "MODEL_TIMEOUT"
    MODEL_RATE_LIMIT = "MODEL_RATE_LIMIT"
    MODEL_PROVIDER_INTERNAL = "MODEL_PROVIDER_INTERNAL"
    MODEL_CONTEXT_LENGTH = "MODEL_CONTEXT_LENGTH"
    MODEL_CONTENT_POLICY = "MODEL_CONTENT_POLICY"
    MODEL_INVALID_REQUEST = "MODEL_INVALID_REQUEST"
    MODEL_TRANSPORT = "MODEL_TRANSPORT"
    MODEL_FAILURE_UNKNOWN = "MODEL_FAILURE_UNKNOWN"


class ScriptoriumError(Exception):
    """Base class: a failure we can explain in one line."""

    code: ReasonCode = ReasonCode.ERROR
    retryable: bool = False

    def __init__(self, message: str, *, code: ReasonCode | str | None = None,
                 retryable: bool | None = None, details: dict[str, Any] | None = None) -> None:
        # Keep messages on one line: they are printed as-is by the CLI.
        super().__init__(" ".join(str(message).split()))
        if code is not None:
            self.code = ReasonCode(code)  # an unregistered code is a bug: ValueError here
        if retryable is not None:
            self.retryable = retryable
        self.details = details  # what a script needs beyond the line (JSON-ready)

    @property
    def message(self) -> str:
        return str(self)

    @property
    def exit_code(self) -> int:
        return exit_code_for(self)

    def to_dict(self) -> dict[str, Any]:
        """The error as the JSON output carries it (``{"error": <this>}`` from the CLI);
        ``details`` only when the error has some."""
        out: dict[str, Any] = {"code": self.code, "message": self.message,
                               "retryable": self.retryable}
        if self.details is not None:
            out["details"] = self.details
        return out


class InvalidInput(ScriptoriumError):
    """Bad input from a user or from data: an id, a path, an argument."""

    code = ReasonCode.INVALID_INPUT


class NotFound(ScriptoriumError):
    """A session, node, topic or block that does not exist."""

    code = ReasonCode.NOT_FOUND


class CorruptFile(ScriptoriumError):
    """A file on disk that cannot be read as what it should be; the message names it."""

    code = ReasonCode.CORRUPT_FILE


class ConcurrentUpdate(ScriptoriumError):
    """Someone else holds the lock or changed the data under us; trying again may work."""

    code = ReasonCode.CONCURRENT_UPDATE
    retryable = True


class WriteFailed(ScriptoriumError):
    """A write that did not happen: the writer, the model, git or an install refused or
    failed. Nothing was marked; the reason code says whether a retry can help."""

    code = ReasonCode.WRITE_FAILED


# The one table from error family to process exit code. A class not listed takes the code
# of the first listed class in its MRO, so a subclass never needs an entry of its own.
EXIT_CODES: dict[type[ScriptoriumError], int] = {
    InvalidInput: 2,
    NotFound: 3,
    CorruptFile: 4,
    ConcurrentUpdate: 5,
    WriteFailed: 1,
    ScriptoriumError: 1,
}

# What each exit code means, in the words the README's table uses.
EXIT_MEANINGS: dict[int, str] = {
    0: "success",
    1: "a write that failed (nothing was marked), or work remains",
    2: "bad input",
    3: "not found",
    4: "corrupt file",
    5: "busy or concurrent update (retry)",
}


def from_os_error(exc: OSError) -> ScriptoriumError:
    """An operating-system error the library let through (a full disk mid-write, a file it
    may not read), as one line: DISK_FULL (retryable, exit 1) or ERROR (exit 1). Writes are
    atomic, so what failed left no partial file."""
    import errno

    where = f": {exc.filename}" if exc.filename else ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return WriteFailed(f"no space left on the device{where}; nothing was half-written: "
                           f"free some space and run the command again",
                           code=ReasonCode.DISK_FULL, retryable=True)
    return ScriptoriumError(f"{exc.strerror or exc}{where}")


def exit_code_for(exc: ScriptoriumError) -> int:
    """The exit code of ``exc``: its family's entry in :data:`EXIT_CODES`."""
    for cls in type(exc).__mro__:
        if cls in EXIT_CODES:
            return EXIT_CODES[cls]
    return 1


__all__ = [
    "ReasonCode", "ScriptoriumError", "InvalidInput", "NotFound", "CorruptFile",
    "ConcurrentUpdate", "WriteFailed", "EXIT_CODES", "EXIT_MEANINGS", "exit_code_for",
    "from_os_error",
]
