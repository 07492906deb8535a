"""Where the real transcripts are: ``$SCRIPTORIUM_SHARED/realdata`` or
``<repo root>/../shared/realdata`` (read in place, never copied into the project)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def realdata_dir() -> Path | None:
    """``$SCRIPTORIUM_SHARED/realdata`` or ``<repo root>/../shared/realdata``."""
    base = os.environ.get("SCRIPTORIUM_SHARED")
    root = Path(base) if base else REPO.parent / "shared"
    path = root / "realdata"
    return path if path.is_dir() else None


def require_realdata() -> Path:
    """The real transcripts, or a skip (a failure in CI, which must have them)."""
    path = realdata_dir()
    if path is None:
        message = (f"real transcripts not found: expected {REPO.parent / 'shared' / 'realdata'} "
                   f"(clone shared/ beside the repository or set SCRIPTORIUM_SHARED)")
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return path
