"""What memory's topics cite: the bridge from a topic block back to the turns it came from.

Answered from the topic catalog (kept current by every transaction, re-reading only files
that changed). Used by the write step (a redo after a crash is recognised when every turn of the batch is
already cited), by verify (marked but uncited turns) and by search (a hit's sources).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Iterable

from .catalog import TopicCatalog

if TYPE_CHECKING:  # pragma: no cover
    from .topics import Block, TopicDoc
    from .workspace import Workspace


def block_sources(workspace: "Workspace", doc: "TopicDoc", block: "Block") -> list[str]:
    """The source ids ``block`` cites, in citation order, each once."""
    out: list[str] = []
    for fid in block.citations:
        evidence = doc.evidence.get(fid)
        if evidence is None:
            continue
        for link in evidence.sources:
            source_id = workspace.sources.resolve_target(doc.path, link.target)
            if source_id is not None and source_id not in out:
                out.append(source_id)
    return out


def citation_map(workspace: "Workspace") -> dict[str, list[tuple[str, str]]]:
    """source id -> [(topic path, block id), …] over every committed topic."""
    out: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for path, block in TopicCatalog.of(workspace).refresh().blocks():
        for source_id in block.refs:
            out[source_id].append((path, block.id))
    return dict(out)


def cited_sources(workspace: "Workspace", among: Iterable[str] | None = None) -> set[str]:
    """The source ids some committed topic block cites (only those in ``among`` when given:
    a write asks about its batch, at the cost of the batch, not of all of memory). Under
    the write lock the catalog's refresh counts for the rest of the hold: the write step's
    begin, in the same hold, does not walk topics/ again."""
    hold = getattr(workspace, "lock_hold", lambda: None)()
    return TopicCatalog.of(workspace).refresh(hold=hold).cited(among)
