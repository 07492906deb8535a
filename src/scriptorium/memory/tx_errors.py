"""Why a topic transaction's commit was refused (scriptorium.memory.transaction)."""

from __future__ import annotations

from ..errors import ConcurrentUpdate, ReasonCode, WriteFailed

__all__ = ["TransactionError", "StaleTransaction"]


class TransactionError(WriteFailed):
    """A rejected commit. ``code`` says why; only CONCURRENT_UPDATE is worth retrying, and a
    TransactionError with that code is constructed as a :class:`StaleTransaction`, which is
    also a :class:`~scriptorium.errors.ConcurrentUpdate` (exit 5, retryable)."""

    code = ReasonCode.COMMIT_REJECTED

    def __new__(cls, message: str, *, code: ReasonCode | str | None = None,
                retryable: bool | None = None) -> "TransactionError":
        if code == ReasonCode.CONCURRENT_UPDATE and not issubclass(cls, ConcurrentUpdate):
            cls = StaleTransaction
        return super().__new__(cls, message)

    def __init__(self, message: str, *, code: ReasonCode | str | None = None,
                 retryable: bool | None = None) -> None:
        code = ReasonCode(code or self.code)
        if retryable is None:
            retryable = code == ReasonCode.CONCURRENT_UPDATE
        super().__init__(message, code=code, retryable=retryable)


class StaleTransaction(ConcurrentUpdate, TransactionError):
    """The workspace changed under the transaction: retrying on a fresh stage may work."""

    code = ReasonCode.CONCURRENT_UPDATE
    retryable = True
