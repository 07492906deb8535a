"""A conversation whose branches disagree, written through the real write path (shared by
the branch-aware tests)."""

from __future__ import annotations

from pathlib import Path

from pgmemkit import Homes
from scriptorium.config import load_settings
from scriptorium.memory.writing import Memory
from scriptorium.sessions import SessionStore

SID = "falcon"


def say(mem: Memory, node_id: str, role: str, text: str, after: str | None = None) -> None:
    msg = {"id": node_id, "role": role, "content": text}
    if after:
        msg["predecessor"] = after
    mem.store.append_message(SID, msg)


def falcon(home: Path | Homes, **settings) -> Memory:
    """u1 a1 u2 a2 (budget 160) | u2 edited as u2e → a2e (budget 150) → u3 a3 (caterer Casa
    Verde), a3 retried as a3r (Tasca Azul, the head); a sub-agent spawned from a2e reports a
    hotel. Written at the session boundary before and after the retry, default settings, on
    a home directory or on either kind of home (``Homes``)."""
    if isinstance(home, Homes):
        mem = home.open(**settings)
    else:
        mem = Memory(home, settings=load_settings(home, settings),
                     store=SessionStore(home / "sessions", git=False))
    mem.store.create_session(SID, title="Falcon offsite")
    say(mem, "u1", "user", "We are planning the Falcon offsite in Porto.")
    say(mem, "a1", "assistant", "Noted: the Falcon offsite in Porto.")
    say(mem, "u2", "user", "The Falcon budget is 160 thousand euros.")
    say(mem, "a2", "assistant", "Noted: the Falcon budget is 160 thousand euros.")
    mem.store.edit(SID, "u2", "The Falcon budget is 150 thousand euros.", node_id="u2e")
    say(mem, "a2e", "assistant", "Noted: the Falcon budget is 150 thousand euros.")
    mem.store.spawn(SID, "a2e", "Find a hotel for the Falcon team.", node_id="sub")
    say(mem, "sub1", "assistant", "Hotel Douro has rooms for the Falcon team.", after="sub")
    say(mem, "u3", "user", "Which caterer should cater the Falcon dinner?")
    say(mem, "a3", "assistant", "Casa Verde should cater the Falcon dinner.")
    assert mem.write_session(SID).failure is None
    mem.store.retry(SID, "a3", "Tasca Azul should cater the Falcon dinner.", node_id="a3r")
    assert mem.write_session(SID).failure is None
    return mem
