"""Helpers for the search and reorganize tests: a workspace with archived turns and topics
written through real transactions (so ids are the runtime's, as in production)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

from scriptorium.memory.search import attach
from scriptorium.memory.sources import SourceRecord
from scriptorium.memory.workspace import Workspace

# A claim: (text, [source ids], when). A paragraph: a list of claims.
Claim = tuple[str, Sequence[str], str]


def open_ws(root: Path, *, attached: bool = True) -> Workspace:
    ws = Workspace.open(root)
    if attached:
        attach(ws)
    return ws


def archive(ws: Workspace, turns: Iterable[tuple[str, str, str, str, str]],
            speaker: dict[str, tuple[str, str]] | None = None) -> list[str]:
    """Archive ``(session, node, role, text, timestamp)`` turns; returns their source ids.
    ``speaker`` maps a node id to (speaker id, display name)."""
    records = []
    for session, node, role, text, ts in turns:
        sid, display = (speaker or {}).get(node, ("", ""))
        records.append(SourceRecord("openprogram", session, node, role, text, ts,
                                    speaker_id=sid, speaker_display=display))
    with ws.lock():
        ws.sources.archive(records)
    return [r.source_id for r in records]


def render(paragraphs: Sequence[Sequence[Claim]], heading: str = "Notes",
           sections: Sequence[str] | None = None) -> str:
    """Topic text in the writer's form: local labels ``[^eN]`` and plain-handle sources."""
    lines = [f"# {heading}", ""]
    n = 0
    for i, paragraph in enumerate(paragraphs):
        if sections and sections[i]:
            lines += [f"## {sections[i]}", ""]
        body, defs = [], []
        for text, sources, when in paragraph:
            n += 1
            body.append(f"{text}[^e{n}]")
            links = ", ".join(f"[turn {k}]({sid})" for k, sid in enumerate(sources))
            defs.append(f"[^e{n}]: Time: `{when}`; Sources: {links}")
        lines += [" ".join(body), ""] + defs + [""]
    return "\n".join(lines)


def write_topic(ws: Workspace, rel: str, text: str, *, allowed: Iterable[str] = (),
                purpose: str = "write"):
    """Install ``text`` as topic ``rel`` through a transaction; returns its result."""
    with ws.begin(allowed_sources=list(allowed), purpose=purpose) as tx:
        path = tx.stage / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return tx.commit(f"test: write {rel}")


def write_paragraphs(ws: Workspace, rel: str, paragraphs: Sequence[Sequence[Claim]], *,
                     heading: str = "Notes", sections: Sequence[str] | None = None):
    allowed = {sid for p in paragraphs for _, sources, _ in p for sid in sources}
    return write_topic(ws, rel, render(paragraphs, heading, sections), allowed=allowed)


def block_ids(ws: Workspace, rel: str) -> list[str]:
    return [b.id for b in ws.read_topic(rel).blocks]


def write_offsite(ws: Workspace,
                  speaker: dict[str, tuple[str, str]] | None = None) -> Workspace:
    """Two topics: an offsite plan (two claims in one block) and production notes, citing
    five archived turns (``speaker``: as for :func:`archive`)."""
    ids = archive(ws, [
        ("offsite", "o1", "user", "The offsite is in Lisbon in May", "2026-05-02T09:00:00+00:00"),
        ("offsite", "o2", "user", "Budget is fifty thousand euros", "2026-05-03T09:00:00+00:00"),
        ("offsite", "o3", "assistant", "Flights are booked for twelve people",
         "2026-06-10T09:00:00+00:00"),
        ("deploy", "d1", "user", "Production runs PostgreSQL 16 behind pgbouncer",
         "2026-08-01T10:00:00+00:00"),
        ("deploy", "d2", "user", "Deploys happen on Tuesdays only", "2025-12-01T08:00:00+00:00"),
    ], speaker=speaker)
    write_paragraphs(ws, "topics/projects/lisbon-offsite.md", [
        [("The team offsite is in Lisbon in the first week of May.", [ids[0]], "2026-05"),
         ("The budget is fifty thousand euros for twelve people.", [ids[1]], "2026-05-03")],
        [("Flights for twelve people are booked.", [ids[2]], "2026-06-10")],
    ], heading="Lisbon offsite", sections=["Plan", "Travel"])
    write_paragraphs(ws, "topics/infrastructure/production.md", [
        [("Production runs PostgreSQL 16 behind pgbouncer on port 6432.", [ids[3]],
          "2026-08-01")],
        [("Deploys happen on Tuesdays after 14:00 UTC only.", [ids[4]], "2025-12-01")],
    ], heading="Production")
    return ws


# Concepts a "model" knows are related though they share no word.
CONCEPTS = {"car": 0, "automobile": 0, "vehicle": 0, "sedan": 0,
            "cat": 1, "kitten": 1, "feline": 1,
            "money": 2, "budget": 2, "euros": 2, "cost": 2}


class FakeEmbedder:
    """Bag of concepts: texts about the same concept point the same way (an embedding model
    for tests, offline and deterministic)."""

    name = "fake-concepts"

    def __init__(self):
        self.calls: list[list[str]] = []

    def embed(self, texts):
        self.calls.append(list(texts))
        out = []
        for text in texts:
            vec = [0.0, 0.0, 0.0, 0.01]
            for word in text.lower().replace(".", " ").split():
                if word in CONCEPTS:
                    vec[CONCEPTS[word]] += 1.0
            out.append(vec)
        return out
