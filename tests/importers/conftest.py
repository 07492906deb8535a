"""Fixtures for importer tests: the real transcripts in ``<repo root>/../shared/realdata``
(read in place, never copied), a store and a hand-built Claude Code transcript writer."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scriptorium.sessions import SessionStore

REPO = Path(__file__).resolve().parents[2]


def realdata_dir() -> Path | None:
    """``$SCRIPTORIUM_SHARED/realdata`` or ``<repo root>/../shared/realdata``."""
    base = os.environ.get("SCRIPTORIUM_SHARED")
    root = Path(base) if base else REPO.parent / "shared"
    path = root / "realdata"
    return path if path.is_dir() else None


@pytest.fixture(scope="session")
def realdata() -> Path:
    path = realdata_dir()
    if path is None:
        message = (f"real transcripts not found: expected {REPO.parent / 'shared' / 'realdata'} "
                   f"(clone shared/ beside the repository or set SCRIPTORIUM_SHARED)")
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture
def store(home: Path) -> SessionStore:
    return SessionStore(home / "sessions", git=False)
