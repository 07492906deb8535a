"""How a write that did not happen is reported: a reason code, whether a retry can help, and
a one-line message. Every write path (per turn, boundary, watcher, backfill) uses these, so a
caller sees one vocabulary (memory reference §3.11).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ReasonCode, ScriptoriumError


@dataclass
class Failure:
    """Why a write did not happen, and whether trying again later can help."""

    reason_code: ReasonCode
    retryable: bool
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"reason_code": self.reason_code, "retryable": self.retryable,
                "message": self.message}


def classify(exc: BaseException) -> Failure:
    """Turn any exception from a write step into a reported failure."""
    if isinstance(exc, ScriptoriumError):
        return Failure(exc.code, exc.retryable, str(exc))
    if isinstance(exc, ValueError):
        return Failure(ReasonCode.WRITER_PRECONDITION_FAILED, False, str(exc) or type(exc).__name__)
    retryable = bool(getattr(exc, "retryable", False))
    return Failure(ReasonCode.WRITER_FAILURE_UNKNOWN, retryable, f"{type(exc).__name__}: {exc}")
