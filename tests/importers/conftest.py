"""Fixtures for importer tests: the real transcripts in ``<repo root>/../shared/realdata``
(read in place, never copied), a store of either kind of home (``store``: the behaviour tests
that look at no file run on both; ``dir_store``: the directory home's files) and helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

from realdatakit import require_realdata
from scriptorium.sessions import SessionStore


@pytest.fixture(scope="session")
def realdata() -> Path:
    return require_realdata()


@pytest.fixture
def store(home_kind: str, home: Path, request):
    """An empty store of either home: ``home/sessions``, or a fresh PostgreSQL home (whose
    import ledger is in its tables; ``home`` is then unused by the import)."""
    if home_kind == "directory":
        yield SessionStore(home / "sessions", git=False)
        return
    from scriptorium.sessions.pg_store import PgSessionStore

    pg_store = PgSessionStore.open(request.getfixturevalue("pg_url"))
    yield pg_store
    pg_store.close()


@pytest.fixture
def dir_store(home: Path) -> SessionStore:
    """A directory home's store, for the tests that look at its files."""
    return SessionStore(home / "sessions", git=False)
