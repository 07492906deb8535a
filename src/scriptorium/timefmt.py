"""Timestamps as they arrive from outside (ISO-8601 strings, epoch seconds or milliseconds),
as epoch seconds. Naive ISO times are taken as UTC."""

from __future__ import annotations

import datetime as _dt
from typing import Any


def epoch(value: Any) -> float | None:
    """``value`` as epoch seconds, or None when it is not a time. Numbers above 1e11 are
    milliseconds (1e11 seconds is the year 5138)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) / (1000.0 if value > 1e11 else 1.0)
    if isinstance(value, str) and value:
        try:
            parsed = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=_dt.timezone.utc)
        return parsed.timestamp()
    return None
