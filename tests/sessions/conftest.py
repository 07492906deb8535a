"""Fixtures for the session-store tests: empty stores and the reference `written` state."""

from __future__ import annotations

from pathlib import Path

import pytest

import storekit
from scriptorium.sessions import SessionStore


@pytest.fixture
def store(home: Path) -> SessionStore:
    """A store without per-turn git commits (fast); git behaviour has its own tests."""
    return SessionStore.from_home(home, git=False)


@pytest.fixture
def dir_store(home: Path) -> SessionStore:
    """A directory store, for the tests that inspect or break its files (where a module's
    ``store`` runs on both homes)."""
    return SessionStore.from_home(home, git=False)


@pytest.fixture
def gstore(home: Path) -> SessionStore:
    """A store that commits a git turn per completed turn, as in production."""
    return SessionStore.from_home(home)


@pytest.fixture
def written(written_home: Path) -> SessionStore:
    """The reference system's `written` home (sessions `offsite` and `deploy`)."""
    return SessionStore.from_home(written_home)


def _chat(store: SessionStore, sid: str, *ids: str, **kw) -> list[str]:
    """Append alternating user/assistant turns with the given ids (text = "text of <id>")."""
    if not store.exists(sid):
        store.create_session(sid)
    out = []
    for i, nid in enumerate(ids):
        role = "user" if i % 2 == 0 else "assistant"
        out.append(store.append_message(sid, {"id": nid, "role": role,
                                              "content": f"text of {nid}"}, **kw))
    return out


@pytest.fixture
def chat():
    """``chat(store, sid, "u1", "a1", ...)``: alternating user/assistant turns on the head."""
    return _chat



@pytest.fixture
def damage():
    """``damage(store, sid, node_id, predecessor=...)`` or ``(…, delete=True)``: see
    storekit.damage."""
    return storekit.damage
